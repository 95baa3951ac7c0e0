"""One bounded HTTP exchange with an LLM endpoint: a POST whose whole life -- connect, the status line and
headers, every read of the body, every retry and its back-off -- ends by one deadline, and whose body is
read streamed and cut at a byte cap.

Why not the official ``openai`` client's own timeout: it is a timeout per read (and per connect), and its
retries multiply it; an endpoint that drips one byte every few seconds never trips it, and a 512 MiB
answer is read whole before anything looks at it. Here the exchange runs as one asyncio task on a private
event loop and is cancelled at the deadline wherever it waits (a connect, a header byte, a body byte, a
back-off sleep); cancelling closes the connection. The body is read raw (no content decoding: the client
asks for ``identity``, so a compressed bomb cannot inflate past the cap) and reading stops at the cap.

Everything the endpoint sends is hostile input: a failure to talk to it is :class:`EndpointUnavailable`
with a one-line reason, never an exception of the HTTP stack escaping to the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import httpx

T = TypeVar("T")

ERROR_BYTES = 16 << 10
"""Bytes of a non-200 body read for its message (the rest is never read)."""
CLOSE_GRACE_S = 1.0
"""After the deadline, how long a cancelled exchange may take to close its connection before it is
abandoned (a TLS close that itself stalls must not hold the ask)."""
RETRIED_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
"""Statuses worth asking again (the ones the openai client retries)."""
BACKOFF_S = 0.5
MAX_BACKOFF_S = 4.0
"""Pause before retry ``n``: ``BACKOFF_S * 2**n``, at most ``MAX_BACKOFF_S``. A ``Retry-After`` is not
honoured: an endpoint asking for a day's pause gets the deadline's remainder at most, which is the same
as giving up, so the back-off stays ours."""
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError,
                                                     UnicodeError)
"""What a hostile or broken endpoint can make the HTTP stack raise: connection errors, protocol errors
(a header line over h11's limit, a bad chunk size: httpx wraps them), a malformed header value; and a
base URL httpx cannot use (an unusable endpoint like any other: the asks fail, the run goes on)."""


class EndpointUnavailable(RuntimeError):
    """No HTTP answer came back within the deadline (connection failures, timeouts, retried statuses)."""


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock after which nothing more is asked or read."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def left(self) -> float:
        return self.at - time.monotonic()


@dataclass(frozen=True)
class HttpAnswer:
    """What one exchange brought back, read no further than its cap."""

    status: int
    content_type: str
    """The ``Content-Type`` header's media type, lower case, parameters dropped ("" when absent)."""
    content_encoding: str
    """The ``Content-Encoding`` header, lower case ("identity" when absent)."""
    body: bytes
    cut: bool
    """The body ran past the cap: ``body`` holds the first ``cap`` bytes and the rest was never read."""


def media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


async def read_capped(chunks: AsyncIterator[bytes], cap: int) -> tuple[bytes, bool]:
    """The bytes of an async chunk iterator, stopping once more than ``cap`` arrived: (at most ``cap``
    bytes, whether more came)."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk[:cap + 1 - len(data)]
        if len(data) > cap:
            return bytes(data[:cap]), True
    return bytes(data), False


async def exchange(url: str, headers: dict[str, str], body: bytes, cap: int) -> HttpAnswer:
    """One POST; a 200's body read up to ``cap`` bytes, any other status's up to ``ERROR_BYTES``. No
    timeout of its own: the caller's deadline cancels it."""
    async with httpx.AsyncClient(timeout=None, follow_redirects=False) as client:
        async with client.stream("POST", url, content=body, headers=headers) as response:
            limit = cap if response.status_code == 200 else ERROR_BYTES
            raw = cast(AsyncGenerator[bytes, None], response.aiter_raw())  # httpx's is an async generator
            async with contextlib.aclosing(raw) as chunks:  # closed here, not by a GC on a closed loop
                data, cut = await read_capped(chunks, limit)
            return HttpAnswer(status=response.status_code, content_type=media_type(response.headers.get("content-type")),
                              content_encoding=(response.headers.get("content-encoding") or "identity").strip().lower(),
                              body=data, cut=cut)


def backoff(attempt: int) -> float:
    return min(BACKOFF_S * (1 << min(attempt, 16)), MAX_BACKOFF_S)


async def post_with_retries(url: str, headers: dict[str, str], body: bytes, cap: int, retries: int,
                            deadline: Deadline) -> HttpAnswer:
    """The exchange, asked again after a transport failure or a retried status while ``retries`` and the
    deadline allow. The last answer is returned whatever its status; EndpointUnavailable when no attempt
    got one."""
    failures: list[str] = []
    for attempt in range(retries + 1):
        try:
            answer = await exchange(url, headers, body, cap)
        except TRANSPORT_ERRORS as exc:
            failures.append(f"{type(exc).__name__}: {str(exc)[:160]}".rstrip(": "))
            last: HttpAnswer | None = None
        else:
            if answer.status not in RETRIED_STATUSES:
                return answer
            failures.append(f"HTTP {answer.status}")
            last = answer
        pause = backoff(attempt)
        if attempt == retries or pause >= deadline.left():
            if last is not None:
                return last
            break
        await asyncio.sleep(pause)
    raise EndpointUnavailable(f"no answer after {len(failures)} attempt(s): {'; '.join(failures)[:400]}")


async def _within(work: Awaitable[T], deadline: Deadline, what: str) -> T:
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=max(deadline.left(), 0.0))
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.wait({task}, timeout=CLOSE_GRACE_S)  # a cancelled exchange closes its connection here
    raise EndpointUnavailable(f"{what} did not finish within the ask's deadline")


def _on_private_loop(work: Callable[[], Awaitable[T]], deadline: Deadline, what: str) -> T:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_within(work(), deadline, what))
    finally:
        # No shutdown_default_executor: a name lookup still blocked in its thread must not hold the ask.
        loop.close()


def run_by_deadline(work: Callable[[], Awaitable[T]], deadline: Deadline, what: str) -> T:
    """Run the coroutine ``work()`` to its end or until ``deadline`` (then EndpointUnavailable), from
    synchronous code. A caller already inside an event loop gets a private loop on a helper thread."""
    if not math.isfinite(deadline.at):
        raise ValueError("an exchange needs a finite deadline")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _on_private_loop(work, deadline, what)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-ask") as pool:
        return pool.submit(_on_private_loop, work, deadline, what).result()


def post_json(url: str, headers: dict[str, str], body: bytes, cap: int, retries: int,
              deadline: Deadline) -> HttpAnswer:
    """POST ``body`` to ``url`` under ``deadline`` (see the module's docstring)."""
    return run_by_deadline(lambda: post_with_retries(url, headers, body, cap, retries, deadline), deadline,
                           f"POST {url!r}")
