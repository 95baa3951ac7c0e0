"""The embedded server's HTTP layer: OpenAI-compatible routes over a loaded ``EmbeddedServer``.

A module of its own because it imports torch (through the engine) and starlette, which the launcher
(``embedded_server.main``) loads only after the knobs validated and the port is bound. Each request is
parsed and validated (a 400 with the OpenAI error shape for anything it cannot honour, ``response_format``
included), submitted to the engine, and answered either as server-sent events or as one JSON body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from perfwarden.harness.embedded_engine import DoneEvent, Engine, Event, GenRequest, TokenEvent
from perfwarden.harness.embedded_requests import (IncrementalDetokenizer, RequestError, chat_prompt_ids,
                                                  completion_prompt_ids, error_body, parse_common, sse)
from perfwarden.harness.model import MODEL_NAME, ModelInfo
from perfwarden.harness.structured_output import GrammarTokenizer, SchemaError, grammar_for
from perfwarden.harness.target_config import EmbeddedConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from perfwarden.harness.model import CausalLM

log = logging.getLogger("perfwarden.embedded")


class LoadedServer(Protocol):
    """What the routes read of the server they serve: ``embedded_server.EmbeddedServer`` once loaded (the
    server builds this app, so this module names what it needs instead of importing the server)."""

    @property
    def cfg(self) -> EmbeddedConfig: ...
    @property
    def engine(self) -> Engine: ...
    @property
    def info(self) -> ModelInfo: ...
    @property
    def model(self) -> CausalLM: ...
    @property
    def tokenizer(self) -> PreTrainedTokenizerBase: ...
    @property
    def overrides(self) -> list[Any]: ...
    def override_calls(self) -> dict[str, int]: ...
    def server_info(self) -> dict[str, Any]: ...


@dataclass
class Call:
    """One generation request in flight: everything its answer needs."""

    server: LoadedServer
    chat: bool
    prompt_len: int
    stream: bool
    include_usage: bool
    req: GenRequest
    events: asyncio.Queue[Event]
    arrival: float
    created: int = field(default_factory=lambda: int(time.time()))
    first_token_at: float | None = None

    @property
    def rid(self) -> str:
        return self.req.rid

    @property
    def object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def saw_tokens(self) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()

    def chunk(self, text: str, token_ids: list[int], finish: str | None,
              usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """One streamed chunk (chat deltas or completion text)."""
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "token_ids": token_ids}
        if self.chat:
            choice["delta"] = {"content": text} if text or finish is None else {}
        else:
            choice["text"] = text
            choice["logprobs"] = None
        payload: dict[str, Any] = {"id": self.rid, "object": self.object + (".chunk" if self.chat else ""),
                                   "created": self.created, "model": MODEL_NAME, "choices": [choice]}
        if usage is not None:
            payload["usage"] = usage
        return payload

    def finished(self, event: Event) -> None:
        """The one log line per request the auditor and the report read."""
        now = time.monotonic()
        ttft = (self.first_token_at - self.arrival) * 1000 if self.first_token_at else None
        usage = getattr(event, "usage", {}) or {}
        extra = f" ops={self.server.override_calls()!r}" if self.server.overrides else ""
        log.info("request done rid=%s endpoint=%s stream=%s finish=%s prompt_tokens=%d completion_tokens=%s "
                 "ttft_ms=%s e2e_ms=%.1f%s", self.rid, "chat" if self.chat else "completions", self.stream,
                 getattr(event, "finish_reason", "error"), self.prompt_len, usage.get("completion_tokens"),
                 f"{ttft:.1f}" if ttft is not None else None, (now - self.arrival) * 1000, extra)


def bad_request(message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, param=param), status_code=400)


async def read_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, or ``RequestError``."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError("request body is not JSON") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    return body


async def make_request(server: LoadedServer, grammars: GrammarTokenizer, body: dict[str, Any], chat: bool,
                       emit: Callable[[Event], None], arrival: float) -> tuple[GenRequest, bool, bool]:
    """The engine request a body asks for, and its stream flags; ``RequestError`` when it cannot be served."""
    vocab_size = grammars.vocab_size
    ids = chat_prompt_ids(body, server.tokenizer) if chat else completion_prompt_ids(body, server.tokenizer, vocab_size)
    params, stream, include_usage = parse_common(body, server.cfg, len(ids))
    constraint = None
    try:
        grammar = grammar_for(body.get("response_format"))
        if grammar is not None:  # compiling the matcher (and the first time the tokenizer) leaves the loop free
            constraint = await asyncio.to_thread(grammars.constraint, grammar)
            params = replace(params, grammar_digest=grammar.digest)
    except SchemaError as exc:
        raise RequestError(str(exc), "response_format") from None
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    req = GenRequest(rid=rid, prompt_ids=ids, params=params, emit=emit, arrival=arrival, constraint=constraint)
    return req, stream, include_usage


async def generate(server: LoadedServer, grammars: GrammarTokenizer, request: Request, chat: bool) -> Response:
    """Validate, submit, and answer one completion or chat request."""
    arrival = time.monotonic()
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()

    def emit(event: Event) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, event)
        except RuntimeError:  # event loop gone (shutdown)
            pass

    try:
        body = await read_body(request)
        req, stream, include_usage = await make_request(server, grammars, body, chat, emit, arrival)
    except RequestError as exc:
        return bad_request(str(exc), exc.param)
    try:
        server.engine.submit(req)
    except RuntimeError as exc:
        return JSONResponse(error_body(str(exc), "server_error", code=503), status_code=503)
    call = Call(server=server, chat=chat, prompt_len=len(req.prompt_ids), stream=stream, include_usage=include_usage,
                req=req, events=events, arrival=arrival)
    if stream:
        return StreamingResponse(stream_events(call), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Request-Id": call.rid})
    return await collected(call)


async def stream_events(call: Call) -> AsyncIterator[str]:
    """The server-sent events of one request; a client that leaves cancels it."""
    detok = IncrementalDetokenizer(call.server.tokenizer)
    done = False
    try:
        if call.chat:
            first = call.chunk("", [], None)
            first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            yield sse(first)
        while True:
            event = await call.events.get()
            if isinstance(event, TokenEvent):
                call.saw_tokens()
                yield sse(call.chunk(detok.add(event.token_ids), event.token_ids, None))
                continue
            done = True
            if isinstance(event, DoneEvent):
                yield sse(call.chunk(detok.flush(), [], event.finish_reason, event.usage))
                if call.include_usage:
                    yield sse({"id": call.rid, "object": call.object + (".chunk" if call.chat else ""),
                               "created": call.created, "model": MODEL_NAME, "choices": [], "usage": event.usage})
            else:
                yield sse(error_body(event.message, event.kind, code=500))
            yield sse("[DONE]")
            call.finished(event)
            return
    finally:
        if not done:
            call.req.cancelled = True


async def collected(call: Call) -> JSONResponse:
    """One JSON body once the request is done."""
    token_ids: list[int] = []
    try:
        while True:
            event = await call.events.get()
            if isinstance(event, TokenEvent):
                call.saw_tokens()
                token_ids.extend(event.token_ids)
            elif isinstance(event, DoneEvent):
                break
            else:
                call.finished(event)
                return JSONResponse(error_body(event.message, event.kind, code=500), status_code=500)
    except asyncio.CancelledError:
        call.req.cancelled = True
        raise
    call.finished(event)
    text = call.server.tokenizer.decode(token_ids, skip_special_tokens=True)
    choice: dict[str, Any] = {"index": 0, "finish_reason": event.finish_reason, "token_ids": token_ids}
    if call.chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
        choice["logprobs"] = None
    return JSONResponse({"id": call.rid, "object": call.object, "created": call.created, "model": MODEL_NAME,
                         "choices": [choice], "usage": event.usage})


def build_app(server: LoadedServer) -> Starlette:
    """The starlette application over a loaded server (``embedded_server.EmbeddedServer``)."""
    cfg = server.cfg
    grammars = GrammarTokenizer(server.tokenizer, int(server.model.config.vocab_size))

    async def health(request: Request) -> Response:
        if server.engine.alive:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "scheduler not running"}, status_code=503)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "perfwarden",
            "root": server.info.model_dir, "max_model_len": cfg.max_seq_len,
        }]})

    async def server_info(request: Request) -> Response:
        return JSONResponse(server.server_info())

    async def completions(request: Request) -> Response:
        return await generate(server, grammars, request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await generate(server, grammars, request, chat=True)

    return Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/server_info", server_info, methods=["GET"]),
        Route("/get_server_info", server_info, methods=["GET"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ])
