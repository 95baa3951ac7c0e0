"""A scripted OpenAI-compatible streaming server for the load-generator tests and benchmark.

Not a model: ``POST /v1/completions`` with ``stream: true`` answers with ``n`` text chunks (``n`` =
``min(max_tokens, tokens)``), each after a fixed delay, then an optional ``usage`` chunk and
``data: [DONE]``; ``POST /v1/chat/completions`` does the same with ``delta.content`` chunks and takes
the prompt from the last message. Every request body is recorded (``server.requests``) so tests can assert the payload
the client sent, and the peak number of requests in flight is tracked (``server.max_in_flight``).

Failures are scripted by directives inside the prompt, so one rep can mix good and bad requests:

``[[status=503]]``         answer with that HTTP status and a JSON error body
``[[disconnect_after=2]]`` stream 2 chunks, then drop the connection mid-body
``[[malformed]]``          stream 1 chunk, then a ``data:`` line that is not JSON
``[[no_done]]``            stream all chunks, then end the body cleanly without ``[DONE]``
``[[error_event]]``        stream 1 chunk, then ``data: {"error": {...}}``
``[[stall=0.8]]``          wait that many seconds before the first chunk
``[[tokens=3]]``           stream 3 chunks for this request
``[[empty]]``              finish at once (``finish_reason: stop``) without any text, like an
                           instruct model that answers a raw prompt with end-of-sequence
``[[linger=2]]``           after ``[DONE]``, keep the body open that many seconds before ending it

Run in-process (``with FakeOpenAIServer(...) as srv: srv.base_url``; uvicorn in a thread on
127.0.0.1, port 0) or as a subprocess (``python tests/fake_openai_server.py --token-delay 0.001``
prints ``PORT <n>`` and serves until killed), which keeps the server's CPU out of a benchmark's
client process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

_DIRECTIVE = re.compile(r"\[\[(\w+)(?:=([\d.]+))?\]\]")


def directives(prompt: str) -> dict[str, float | None]:
    """``[[name=value]]`` / ``[[name]]`` directives of a prompt."""
    return {m.group(1): (float(m.group(2)) if m.group(2) else None) for m in _DIRECTIVE.finditer(prompt)}


def _listening_socket(host: str, port: int) -> socket.socket:
    """Bind the server socket ourselves (port 0 = any free port).

    ``proto=IPPROTO_TCP`` matters: asyncio sets TCP_NODELAY on accepted connections only when the
    socket's proto says TCP, and a bare ``socket(AF_INET, SOCK_STREAM)`` has proto 0. Without it,
    Nagle holds every small SSE chunk on a reused keep-alive connection until the client's delayed
    ACK (~40 ms on Linux), which would swamp the timings this server exists to provide.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class _Disconnect(Exception):
    """Raised inside the body iterator: uvicorn then closes the connection mid-body."""


class FakeOpenAIServer:
    """Scripted streaming server. Times in seconds."""

    def __init__(self, *, tokens: int = 8, first_token_delay_s: float = 0.0, token_delay_s: float = 0.0,
                 send_usage: bool = True, model: str = "fake-model", host: str = "127.0.0.1", port: int = 0):
        self.tokens = tokens
        self.first_token_delay_s = first_token_delay_s
        self.token_delay_s = token_delay_s
        self.send_usage = send_usage
        self.model = model
        self.host = host
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.counters = {"requests_completed": 0, "requests_failed": 0, "requests_cancelled": 0,
                         "tokens_generated": 0}
        """Running totals ``/server_info`` reports as ``internal_states[0]``, as the embedded engine does."""
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.app = Starlette(routes=[
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/v1/chat/completions", self._completions, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/server_info", self._server_info, methods=["GET"]),
        ])

    # ------------------------------------------------------------------------------- handlers

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _server_info(self, request: Request) -> Response:
        with self._lock:
            state = dict(self.counters)
        return JSONResponse({"model_path": self.model, "tokens": self.tokens,
                             "token_delay_s": self.token_delay_s, "internal_states": [state]})

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
        chat = request.url.path.endswith("/chat/completions")
        if chat:
            messages = body.get("messages") or [{}]
            prompt = str(messages[-1].get("content", ""))
        else:
            prompt = str(body.get("prompt", ""))
        d = directives(prompt)
        if "status" in d:
            return JSONResponse({"error": {"message": f"scripted status {int(d['status'])}"}},
                                status_code=int(d["status"]))
        if not body.get("stream"):
            return JSONResponse({"error": {"message": "this fake server only streams"}}, status_code=400)
        n = min(int(body.get("max_tokens") or 16), int(d.get("tokens") or self.tokens))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and self.send_usage
        if "empty" in d:
            n = 0
        return StreamingResponse(self._stream(prompt, n, d, include_usage, chat), media_type="text/event-stream")

    async def _stream(self, prompt: str, n: int, d: dict[str, float | None], include_usage: bool, chat: bool):
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            created = int(time.time())
            await asyncio.sleep(d.get("stall") or self.first_token_delay_s)
            for i in range(n):
                if i and self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                if "disconnect_after" in d and i == int(d["disconnect_after"] or 0):
                    self._count("requests_cancelled", i)
                    raise _Disconnect("scripted disconnect")
                if "malformed" in d and i == 1:
                    self._count("requests_failed", i)
                    yield b"data: {this is not json\n\n"
                    return
                if "error_event" in d and i == 1:
                    self._count("requests_failed", i)
                    yield b'data: {"error": {"message": "scripted error event", "code": 500}}\n\n'
                    return
                finish = "length" if i == n - 1 else None
                if chat:
                    choice = {"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": finish}
                else:
                    choice = {"index": 0, "text": f" t{i}", "logprobs": None, "finish_reason": finish}
                chunk = {"id": "cmpl-fake", "object": "chat.completion.chunk" if chat else "text_completion",
                         "created": created, "model": self.model, "choices": [choice]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            if n == 0:
                choice = {"index": 0, "text": "", "finish_reason": "stop"}
                yield f"data: {json.dumps({'id': 'cmpl-fake', 'choices': [choice]})}\n\n".encode()
            self._count("requests_completed", n)
            if include_usage:
                usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n,
                         "total_tokens": len(prompt.split()) + n}
                chunk = {"id": "cmpl-fake", "object": "text_completion", "created": created,
                         "model": self.model, "choices": [], "usage": usage}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            if "no_done" not in d:
                yield b"data: [DONE]\n\n"
            if d.get("linger"):
                await asyncio.sleep(d["linger"])
        finally:
            with self._lock:
                self.in_flight -= 1

    def _count(self, outcome: str, tokens: int) -> None:
        with self._lock:
            self.counters[outcome] += 1
            self.counters["tokens_generated"] += tokens

    # ------------------------------------------------------------------------------- lifecycle

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "FakeOpenAIServer":
        self._sock = _listening_socket(self.host, self.port)
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="critical", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="fake-openai-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Foreground mode for the subprocess entry point."""
        self._sock = _listening_socket(self.host, self.port)
        self.port = self._sock.getsockname()[1]
        print(f"PORT {self.port}", flush=True)
        config = uvicorn.Config(self.app, log_level="critical", access_log=False, lifespan="off")
        uvicorn.Server(config).run(sockets=[self._sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--first-token-delay", type=float, default=0.0)
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    FakeOpenAIServer(tokens=args.tokens, first_token_delay_s=args.first_token_delay,
                     token_delay_s=args.token_delay, port=args.port).serve_forever()


if __name__ == "__main__":
    sys.exit(main())
