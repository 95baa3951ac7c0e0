"""A hostile OpenAI-compatible chat endpoint on 127.0.0.1: every way an endpoint can break an LLM client.

Not a model. ``POST /v1/chat/completions`` is answered by the server's *mode*; each mode is a family of
*variants*, and successive requests get successive variants (cycling), so one run meets every variant
of its mode. A test that wants one variant names it (``HostileOpenAI("drip", variant="header_drip")``).

    garbage_types       a chat completion whose fields have the wrong types (content a number, a list,
                        null; choices missing, empty or a string; the body an array ...)
    numeric_overflow    ``usage`` of 1e400, an integer of 5,000 digits, a negative count; answers whose
                        numbers overflow (1e400, 10**300)
    deep_nesting        a body or an answer nested 50,000 deep (fenced in prose, too)
    drip                the status line and headers, or the body, one byte every ``drip_s`` seconds
    huge_body           ``huge_bytes`` (512 MiB by default) of body with a Content-Length, chunked, as an
                        error body, or as one header line: written chunk by chunk, never held
    http_500            500s, a 503 and a 429 that ask for a day's wait (``Retry-After``)
    connection_reset    a TCP reset before the answer or mid-body, a clean close with no answer
    never_finishing     no answer at all, or headers and half a body, then silence until the client leaves
    invalid_utf8        raw bytes that are not UTF-8, a lone surrogate escape, an escape that is no escape
    wrong_content_type  a valid chat completion sent as text/html, as an event stream, with no type at all

Every request's JSON payload is recorded (``server.requests``; tests assert what the client sent), with
its path and ``Authorization`` header. Memory stays flat whatever the mode: a huge body is written in
1 MiB pieces as the client reads it, and a client that leaves ends the writing.

In-process: ``with HostileOpenAI("drip", drip_s=0.5) as srv: srv.base_url`` (an asyncio loop in a daemon
thread). As a subprocess: ``python tests/hostile_openai.py --mode huge_body`` prints ``PORT <n>`` and
serves until killed (``benchmarks/fuzz.py --llm-stub`` runs it so).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

MiB = 1 << 20
REQUEST_BYTES = 16 * MiB
"""Largest request body the stub reads (a client's ask is a few KiB)."""

Writer = asyncio.StreamWriter


@dataclass
class Request:
    """One request as the stub read it."""

    path: str
    authorization: str | None
    payload: Any
    """The JSON body, parsed (None when it was not JSON)."""


@dataclass
class Stub:
    """What a variant may use: the server's settings and the client's connection."""

    reader: asyncio.StreamReader
    writer: Writer
    drip_s: float
    huge_bytes: int


Variant = Callable[[Stub], Awaitable[None]]


def completion(content: Any = "{}", **envelope: Any) -> dict[str, Any]:
    """A chat completion whose answer is ``content``; ``envelope`` replaces top-level fields."""
    body: dict[str, Any] = {"id": "chatcmpl-hostile", "object": "chat.completion", "model": "hostile",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                         "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}
    return body | envelope


def encoded(body: Any) -> bytes:
    return json.dumps(body).encode()


def head(status: int = 200, content_type: str | None = "application/json", length: int | None = None,
         extra: tuple[str, ...] = ()) -> bytes:
    """A status line and headers (``length`` None: chunked)."""
    lines = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}", "Connection: close"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode("latin-1")


async def send(stub: Stub, data: bytes) -> None:
    stub.writer.write(data)
    await stub.writer.drain()


async def answer(stub: Stub, body: bytes, status: int = 200, content_type: str | None = "application/json",
                 extra: tuple[str, ...] = ()) -> None:
    await send(stub, head(status, content_type, len(body), extra) + body)


def answering(body: bytes, status: int = 200, content_type: str | None = "application/json",
              extra: tuple[str, ...] = ()) -> Variant:
    async def variant(stub: Stub) -> None:
        await answer(stub, body, status, content_type, extra)
    return variant


async def until_the_client_leaves(stub: Stub) -> None:
    """Hold the connection, saying nothing, until the client closes it."""
    while await stub.reader.read(4096):
        pass


def reset(stub: Stub) -> None:
    """End the connection with a TCP reset (SO_LINGER 0), not a clean close."""
    sock = stub.writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stub.writer.transport.abort()


# ------------------------------------------------------------------------------------- the variants

DEEP = 50_000
HUGE_INT = "1" * 5000
OVERFLOWING = '{"findings": %s, "proposals": %s, "delta_pct": %s, "action": %s, "code": %s, "tool": %s}'
"""An answer whose every field any of perfwarden's answer schemas reads is the given number."""


def _text(body: str) -> Variant:
    return answering(body.encode())


async def _drip(stub: Stub, data: bytes) -> None:
    for i in range(len(data)):
        await send(stub, data[i:i + 1])
        await asyncio.sleep(stub.drip_s)


async def _header_drip(stub: Stub) -> None:
    body = encoded(completion())
    await _drip(stub, head(length=len(body)) + body)


async def _body_drip(stub: Stub) -> None:
    body = encoded(completion())
    await send(stub, head(length=len(body)))
    await _drip(stub, body)


def _huge_pieces(total: int) -> tuple[bytes, bytes, bytes, int]:
    """A chat completion of ``total`` bytes as (prefix, a 1 MiB piece of its content, suffix, pieces)."""
    prefix = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "'
    suffix = b'"}, "finish_reason": "stop"}]}'
    pieces = max((total - len(prefix) - len(suffix)) // MiB, 1)
    return prefix, b"a" * MiB, suffix, pieces


async def _huge(stub: Stub, status: int = 200, chunked: bool = False) -> None:
    prefix, piece, suffix, pieces = _huge_pieces(stub.huge_bytes)
    length = len(prefix) + pieces * len(piece) + len(suffix)
    await send(stub, head(status, length=None if chunked else length))
    frame = (lambda data: b"%x\r\n%s\r\n" % (len(data), data)) if chunked else (lambda data: data)
    await send(stub, frame(prefix))
    for _ in range(pieces):
        await send(stub, frame(piece))
    await send(stub, frame(suffix) + (b"0\r\n\r\n" if chunked else b""))


async def _huge_header(stub: Stub) -> None:
    await send(stub, b"HTTP/1.1 200 OK\r\nX-Padding: ")
    for _ in range(max(stub.huge_bytes // MiB, 1)):
        await send(stub, b"a" * MiB)
    await send(stub, b"\r\nContent-Length: 2\r\n\r\n{}")


async def _reset_before(stub: Stub) -> None:
    reset(stub)


async def _reset_mid_body(stub: Stub) -> None:
    body = encoded(completion())
    await send(stub, head(length=len(body)) + body[:len(body) // 2])
    await asyncio.sleep(0.05)
    reset(stub)


async def _close_silently(stub: Stub) -> None:
    stub.writer.close()


async def _silent(stub: Stub) -> None:
    await until_the_client_leaves(stub)


async def _half_then_silent(stub: Stub) -> None:
    body = encoded(completion())
    await send(stub, head(length=len(body)) + body[:len(body) // 2])
    await until_the_client_leaves(stub)


async def _event_stream(stub: Stub) -> None:
    chunk = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "{}"}}]}
    await answer(stub, b"data: " + encoded(chunk) + b"\n\ndata: [DONE]\n\n", content_type="text/event-stream")


VARIANTS: dict[str, dict[str, Variant]] = {
    "garbage_types": {
        "content_number": answering(encoded(completion(42))),
        "content_list": answering(encoded(completion([{"type": "text", "text": "{}"}]))),
        "content_null": answering(encoded(completion(None))),
        "content_object": answering(encoded(completion({"findings": []}))),
        "choices_missing": answering(encoded({"id": "x", "object": "chat.completion"})),
        "choices_empty": answering(encoded(completion(choices=[]))),
        "choices_string": answering(encoded(completion(choices="{}"))),
        "message_number": answering(encoded(completion(choices=[{"index": 0, "message": 7}]))),
        "body_array": answering(b"[1, 2, 3]"),
        "body_string": answering(b'"{}"'),
        "finish_reason_object": answering(encoded(completion(choices=[
            {"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": {"a": 1}}]))),
        "refusal_number": answering(encoded(completion(choices=[
            {"index": 0, "message": {"role": "assistant", "content": "{}", "refusal": 5}, "finish_reason": "stop"}]))),
        "usage_string": answering(encoded(completion(usage="lots"))),
    },
    "numeric_overflow": {
        "usage_inf": _text('{"choices": [{"message": {"content": "{}"}, "finish_reason": "stop"}], '
                           '"usage": {"prompt_tokens": 1e400, "completion_tokens": 1e400}}'),
        "usage_huge_int": _text('{"choices": [{"message": {"content": "{}"}, "finish_reason": "stop"}], '
                                '"usage": {"prompt_tokens": %s, "completion_tokens": 1}}' % HUGE_INT),
        "usage_big_int": _text('{"choices": [{"message": {"content": "{}"}, "finish_reason": "stop"}], '
                               '"usage": {"prompt_tokens": %s, "completion_tokens": 1}}' % ("9" * 300)),
        "usage_negative": answering(encoded(completion(usage={"prompt_tokens": -5, "completion_tokens": -1}))),
        "answer_inf": answering(encoded(completion(OVERFLOWING % (("1e400",) * 6)))),
        "answer_huge_int": answering(encoded(completion(OVERFLOWING % ((HUGE_INT,) * 6)))),
        "answer_big_line": answering(encoded(completion(json.dumps({"findings": [
            {"code": "NOISY_BASELINE", "severity": "FLAG", "message": "m",
             "evidence": [{"file": "legs/a/server.log", "line": 10 ** 300}]}], "notes": ""})))),
    },
    "deep_nesting": {
        "body_deep": answering(b"[" * DEEP + b"]" * DEEP),
        "choices_deep": answering(b'{"choices": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
        "answer_deep": answering(encoded(completion('{"findings": ' + "[" * DEEP + "]" * DEEP + "}"))),
        "answer_deep_fenced": answering(encoded(completion(
            "Here it is:\n```json\n" + '{"a": ' * DEEP + "1" + "}" * DEEP + "\n```"))),
        "answer_deep_prose": answering(encoded(completion("Sure! " + "{" * DEEP))),
    },
    "drip": {
        "header_drip": _header_drip,
        "body_drip": _body_drip,
    },
    "huge_body": {
        "huge_length": _huge,
        "huge_chunked": lambda stub: _huge(stub, chunked=True),
        "huge_error": lambda stub: _huge(stub, status=500),
        "huge_header": _huge_header,
    },
    "http_500": {
        "status_500": answering(b'{"error": {"message": "internal error"}}', status=500),
        "status_503_retry_after_a_day": answering(b'{"error": {"message": "overloaded"}}', status=503,
                                                   extra=("Retry-After: 86400",)),
        "status_429_retry_after_a_day": answering(b'{"error": {"message": "slow down"}}', status=429,
                                                   extra=("Retry-After: 86400",)),
    },
    "connection_reset": {
        "reset_before_answer": _reset_before,
        "reset_mid_body": _reset_mid_body,
        "close_without_answer": _close_silently,
    },
    "never_finishing": {
        "no_answer": _silent,
        "half_body_then_silence": _half_then_silent,
    },
    "invalid_utf8": {
        "raw_bytes": answering(b'{"choices": [{"message": {"content": "{\\"notes\\": \\"\xff\xfe\xc0\\"}"}, '
                               b'"finish_reason": "stop"}]}'),
        "lone_surrogate": answering(b'{"choices": [{"message": {"content": "{\\"notes\\": \\"\\\\ud800\\", '
                                    b'\\"reason\\": \\"\\\\udfff\\"}"}, "finish_reason": "stop"}]}'),
        "lone_surrogate_envelope": answering(b'{"choices": [{"message": {"content": "\\ud800{}"}, '
                                             b'"finish_reason": "stop"}]}'),
        "bad_escape": answering(b'{"choices": [{"message": {"content": "\\x41{}"}, "finish_reason": "stop"}]}'),
    },
    "wrong_content_type": {
        "text_html": answering(encoded(completion()), content_type="text/html"),
        "event_stream": _event_stream,
        "no_content_type": answering(encoded(completion()), content_type=None),
    },
}
MODES = tuple(VARIANTS)


def variant_ids() -> list[tuple[str, str]]:
    """Every (mode, variant), for parametrized tests."""
    return [(mode, name) for mode, variants in VARIANTS.items() for name in variants]


@dataclass
class HostileOpenAI:
    """The hostile endpoint: one mode (its variants in turn) or one variant of it."""

    mode: str
    variant: str | None = None
    drip_s: float = 5.0
    huge_bytes: int = 512 * MiB
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[Request] = field(default_factory=list)
    served: list[str] = field(default_factory=list)
    """The variant each request got, in order."""

    def __post_init__(self) -> None:
        if self.mode not in VARIANTS:
            raise ValueError(f"unknown mode {self.mode!r}; modes: {', '.join(MODES)}")
        names = [self.variant] if self.variant is not None else list(VARIANTS[self.mode])
        unknown = [n for n in names if n not in VARIANTS[self.mode]]
        if unknown:
            raise ValueError(f"mode {self.mode!r} has no variant {unknown[0]!r}")
        self._cycle = itertools.cycle(names)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def _read_request(self, reader: asyncio.StreamReader) -> Request | None:
        try:
            header = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return None
        lines = header.decode("latin-1").split("\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        length = int(fields.get("content-length", "0"))
        if not 0 <= length <= REQUEST_BYTES:
            return None
        raw = await reader.readexactly(length)
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = None
        parts = lines[0].split(" ")
        return Request(path=parts[1] if len(parts) > 1 else "", authorization=fields.get("authorization"),
                       payload=payload)

    async def _handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        try:
            request = await self._read_request(reader)
            if request is None:
                return
            with self._lock:
                name = next(self._cycle)
                self.requests.append(request)
                self.served.append(name)
            await VARIANTS[self.mode][name](Stub(reader, writer, self.drip_s, self.huge_bytes))
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass  # the client left: that is the client's right
        except asyncio.CancelledError:
            pass  # the stub stops: asyncio's stream callback would log a cancelled handler as an error
        finally:
            writer.close()

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=64 << 10)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        async with self._server:
            await self._server.serve_forever()

    def _cancel_everything(self) -> None:
        """In the loop's thread: stop serving and end every connection still held."""
        for task in asyncio.all_tasks():
            task.cancel()

    def start(self) -> "HostileOpenAI":
        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self._serve())
            except asyncio.CancelledError:
                pass
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=run, name="hostile-openai", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hostile OpenAI stub did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel_everything)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> "HostileOpenAI":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Foreground mode for the subprocess entry point: prints ``PORT <n>`` once listening."""
        async def main() -> None:
            server = asyncio.create_task(self._serve())
            while not self._ready.is_set():
                await asyncio.sleep(0.01)
            print(f"PORT {self.port}", flush=True)
            await server

        asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--variant", default=None)
    parser.add_argument("--drip-s", type=float, default=5.0)
    parser.add_argument("--huge-bytes", type=int, default=512 * MiB)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    HostileOpenAI(args.mode, args.variant, drip_s=args.drip_s, huge_bytes=args.huge_bytes,
                  port=args.port).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
