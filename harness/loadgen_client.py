"""MLPerf LoadGen SUT that streams completions from any OpenAI-compatible server.

LoadGen (``mlperf_loadgen``) owns the schedule: Poisson arrivals at a target QPS in the Server
scenario, one big query in Offline. For every query sample it issues, this SUT sends one streaming
``POST {base_url}/v1/completions`` (``stream: true``, ``temperature: 0``, ``max_tokens`` from the
settings), tells LoadGen when the first token arrived (``FirstTokenComplete``) and when the sample
finished (``QuerySamplesComplete`` with ``n_tokens``), and records what it measured per request
(:class:`perfwarden.harness.bench_writer.RequestRecord`). One rep = one LoadGen test run, whose
``mlperf_log_summary.txt``/``mlperf_log_detail.txt`` land in ``legs/<leg>/loadgen/rep-<k>/``.
``endpoint="chat"`` sends one user message to ``/v1/chat/completions`` instead (instruct models often
answer a raw prompt with an immediate end-of-sequence; such a stream is recorded as an ``empty
completion`` error, never as a 0 s TTFT).

Threading: LoadGen calls ``IssueQuery`` on its own thread with the GIL held, and in the Server
scenario a slow callback delays the *next* arrival. The callback therefore only hands the samples to
an asyncio loop running in a background thread (``call_soon_threadsafe``) and returns; one shared
``httpx.AsyncClient`` does the I/O there. Every issued sample is completed exactly once, whatever
happens to its request, because LoadGen waits for all of them and would otherwise hang.

LoadGen facts this module relies on (mlcommons-loadgen 6.0.x, read from loadgen.cc/logging.cc):

- ``use_token_latencies=True`` makes LoadGen compute TTFT/TPOT. In Server it *requires* a
  ``FirstTokenComplete`` before ``QuerySamplesComplete`` for each sample (else it logs
  ``error_runtime`` and reads an unset first-token slot), and it computes
  ``TPOT = (latency - ttft) / (n_tokens - 1)``; ``n_tokens < 2`` is logged as ``error_runtime`` and
  makes that sample's TPOT negative. Offline does not check the first-token slot but still reads it
  for TPOT. We always report a first token, in both scenarios (at failure time when none arrived),
  and always report the true count, so an errored or one-token request shows up as an error
  in LoadGen's own log instead of being hidden behind an invented token count.
- LoadGen's defaults are ``min_query_count=100`` and ``min_duration_ms=10000``; a short test must set
  both (Server generates queries until *both* are met). Offline issues one query of
  ``max(min_query_count, int(1.1 * min_duration_s * offline_expected_qps))`` samples, made of the
  loaded samples repeated in order.
- Performance-mode sample choice in Server is uniform *with replacement*: a prompt can repeat within
  a rep (prefix caching then gets free hits). ``sample_concatenate_permutation=True`` issues each
  loaded sample once per pass instead, but pads the query count up to a multiple of the prompt count.
- ``StartTestWithLogSettings`` silently does nothing if the log folder does not exist, and overrides
  the settings from an ``audit.config`` file in the current directory if one exists. We create the
  folder, point the audit config at a path inside the rep folder (absent unless someone puts a
  compliance config there on purpose), and check the logs exist afterwards.
"""

from __future__ import annotations

import array
import asyncio
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import msgspec

from perfwarden.formats import safe_write, seal
from perfwarden.formats.records import RunDir
from perfwarden.formats.safe_read import RECORD_BYTES, read_bytes
from perfwarden.formats.strict_json import loads
from perfwarden.harness.bench_writer import (
                                             RequestRecord,
                                             append_bench_line,
                                             build_bench_line,
                                             rep_exists,
                                             seal_torn_tail,
                                             )
from perfwarden.harness.contention import close_cpu_window, open_cpu_window, sample_contention, wait_until_idle
from perfwarden.harness.prompts import Prompt, estimate_tokens

Scenario = Literal["Server", "Offline"]
Endpoint = Literal["completions", "chat"]

LOADGEN_LOGS = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
"""LoadGen outputs a rep must have; the accuracy and (empty) trace files are kept when present."""


@dataclass(frozen=True)
class LoadSettings:
    """How one rep loads the server. Every loop is bounded: by count, by duration, by timeout."""

    scenario: Scenario = "Server"
    """``Server``: Poisson arrivals at ``target_qps``. ``Offline``: everything in one query."""
    target_qps: float = 2.0
    """Server: arrival rate. Offline: LoadGen's ``offline_expected_qps`` (it sizes the query)."""
    min_duration_s: float = 10.0
    """LoadGen ``min_duration_ms``: Server keeps generating arrivals until this much schedule."""
    min_query_count: int = 1
    """LoadGen ``min_query_count`` (its default is 100, far too many for a short rep)."""
    max_query_count: int = 10_000
    """Upper bound on samples per rep (Server: LoadGen ``max_query_count``; Offline: checked)."""
    max_duration_s: float = 600.0
    """LoadGen stops issuing after this; requests not yet sent by then fail as ``not sent``."""
    max_tokens: int = 64
    """``max_tokens`` of every request."""
    endpoint: Endpoint = "completions"
    """``completions``: ``POST /v1/completions`` with ``prompt`` (the default, as sglang's
    bench_serving). ``chat``: ``POST /v1/chat/completions`` with one user message, for instruct
    models that answer a raw prompt with an immediate end-of-sequence."""
    request_timeout_s: float = 120.0
    """Hard limit on one request, from send to end of stream (also the read timeout)."""
    connect_timeout_s: float = 10.0
    """Connect timeout of one request."""
    max_concurrency: int | None = None
    """At most this many requests in flight (a semaphore, as sglang's ``--max-concurrency``)."""
    model: str | None = None
    """``model`` field of the request; omitted when None (single-model servers ignore it)."""
    include_usage: bool = True
    """Ask for a final ``usage`` chunk (``stream_options.include_usage``)."""
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    """Extra request fields (e.g. ``{"ignore_eos": True}``); may not override the fixed ones."""
    api_key: str | None = None
    """Bearer token, if the server wants one."""
    client_warmup: bool = True
    """Before LoadGen starts, ``GET /v1/models`` once (result ignored). httpx imports its anyio
    socket machinery lazily on the first request, which adds ~20 ms to the first TTFT of every rep
    run in a fresh process; the warm-up pays that outside the measurement and leaves a keep-alive
    connection open. It never generates, so it cannot warm the server's caches."""
    seed: int = 0
    """LoadGen's qsl/sample-index/schedule RNG seed: same seed, same arrivals and prompts."""
    sample_concatenate_permutation: bool = False
    """Issue each prompt once per pass instead of uniform-with-replacement (see module docstring)."""
    ttft_latency_s: float | None = None
    """LoadGen ``ttft_latency`` constraint (for its VALID/INVALID verdict only)."""
    tpot_latency_s: float | None = None
    """LoadGen ``tpot_latency`` constraint (for its VALID/INVALID verdict only)."""

    def __post_init__(self) -> None:
        if self.scenario not in ("Server", "Offline"):
            raise ValueError(f"scenario={self.scenario!r} must be 'Server' or 'Offline'")
        for name in ("target_qps", "min_duration_s", "max_duration_s", "request_timeout_s",
                     "connect_timeout_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name}={value!r} must be > 0")
        if self.max_duration_s < self.min_duration_s:
            raise ValueError(f"max_duration_s={self.max_duration_s!r} < min_duration_s={self.min_duration_s!r}")
        if not 1 <= self.min_query_count <= self.max_query_count:
            raise ValueError(f"need 1 <= min_query_count={self.min_query_count!r} <= "
                             f"max_query_count={self.max_query_count!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens!r} must be >= 1")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency={self.max_concurrency!r} must be >= 1 or None")
        if self.endpoint not in ("completions", "chat"):
            raise ValueError(f"endpoint={self.endpoint!r} must be 'completions' or 'chat'")
        fixed = set(self.extra_body) & {"prompt", "messages", "stream", "max_tokens", "temperature", "model"}
        if fixed:
            raise ValueError(f"extra_body may not override {sorted(fixed)!r}")
        if self.scenario == "Offline" and offline_sample_count(self) > self.max_query_count:
            raise ValueError(f"Offline would issue {offline_sample_count(self)} samples, more than "
                             f"max_query_count={self.max_query_count!r}")

    def summary(self) -> dict[str, Any]:
        """The settings as a JSON-able dict (recorded in the bench line; no api_key)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "api_key"}
        out["extra_body"] = dict(self.extra_body)
        return out


def request_params(settings: LoadSettings) -> dict[str, Any]:
    """What every request of a rep carries besides its prompt: output budget, sampling parameters and
    streaming options (the request body of :func:`request_payload` without ``prompt``/``messages``).
    Recorded per rep, so two legs can be shown to have asked for the same thing."""
    return {k: v for k, v in request_payload("", settings).items() if k not in ("prompt", "messages")}


def offline_sample_count(settings: LoadSettings) -> int:
    """How many samples LoadGen puts in its single Offline query (TestSettingsInternal: kSlack 1.1)."""
    return max(settings.min_query_count, int(1.1 * settings.min_duration_s * settings.target_qps))


def request_payload(prompt: str, settings: LoadSettings) -> dict[str, Any]:
    """The JSON body of one streaming completion request."""
    payload: dict[str, Any] = {}
    if settings.model is not None:
        payload["model"] = settings.model
    if settings.endpoint == "chat":
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    payload.update({"max_tokens": settings.max_tokens, "temperature": 0, "stream": True})
    if settings.include_usage:
        payload["stream_options"] = {"include_usage": True}
    payload.update(settings.extra_body)
    return payload


def completions_url(base_url: str, endpoint: Endpoint = "completions") -> str:
    """``{base_url}/v1/completions`` (or ``/v1/chat/completions``), accepting a base URL with or
    without the ``/v1`` suffix."""
    return f"{_v1_root(base_url)}/{'chat/completions' if endpoint == 'chat' else 'completions'}"


def models_url(base_url: str) -> str:
    """``{base_url}/v1/models`` (the client warm-up target)."""
    return f"{_v1_root(base_url)}/models"


def _v1_root(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


# ------------------------------------------------------------------------------------------ SSE


class SSEDecoder:
    """Incremental Server-Sent-Events decoder over text lines: returns each event's ``data``.

    Follows the SSE rules that matter for OpenAI-compatible streams: ``data:`` lines of one event are
    joined with newlines and dispatched at the blank line; comment lines (``:``) and the ``event``,
    ``id`` and ``retry`` fields are ignored. Any other non-blank line is counted as unexpected (a
    non-SSE body, e.g. a JSON error sent with status 200) so the caller can name it in its error.
    """

    def __init__(self) -> None:
        self._data: list[str] = []
        self.unexpected: list[str] = []

    def feed(self, line: str) -> str | None:
        """Feed one line (without its newline); returns an event's data when one completes."""
        if not line:
            return self.flush()
        if line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
            return None
        if line.startswith(":") or line.startswith(("event:", "id:", "retry:")):
            return None
        self.unexpected.append(line)
        return None

    def flush(self) -> str | None:
        """Dispatch a pending event (a stream that ends without the final blank line)."""
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data = []
        return data


@dataclass
class StreamResult:
    """What one streaming request produced; absolute ``time.perf_counter()`` times."""

    t_send: float
    t_first: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    """Arrival time of every chunk that carried text (the first one included)."""
    t_end: float | None = None
    text: str = ""
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: str = ""


_decode_json = msgspec.json.Decoder().decode


def _chunk_text(choice: Mapping[str, Any]) -> str:
    """Text of one streamed choice: ``text`` (completions) or ``delta.content`` (chat)."""
    text = choice.get("text")
    if text is None:
        delta = choice.get("delta")
        if isinstance(delta, Mapping):
            text = delta.get("content")
    return text if isinstance(text, str) else ""


def apply_event(result: StreamResult, data: str, t_arrival: float) -> bool:
    """Fold one SSE event into ``result``; True when the stream is finished (``[DONE]`` or error).

    Malformed data is an error, never skipped: a chunk we cannot read may have been a token.
    """
    if data.strip() == "[DONE]":
        result.t_end = t_arrival
        return True
    try:
        obj = _decode_json(data)
    except msgspec.DecodeError as exc:
        result.error = f"malformed SSE data (not JSON): {data[:200]!r} ({exc})"
        return True
    if not isinstance(obj, dict):
        result.error = f"malformed SSE data (not an object): {data[:200]!r}"
        return True
    if obj.get("error") is not None:
        result.error = f"server error event: {json.dumps(obj['error'])[:500]}"
        return True
    usage = obj.get("usage")
    if isinstance(usage, dict):
        result.usage = usage
    choices = obj.get("choices")
    if choices is not None and not isinstance(choices, list):
        result.error = f"malformed SSE data (choices is not a list): {data[:200]!r}"
        return True
    if choices:
        choice = choices[0]
        if not isinstance(choice, dict):
            result.error = f"malformed SSE data (choice is not an object): {data[:200]!r}"
            return True
        text = _chunk_text(choice)
        if text:
            if result.t_first is None:
                result.t_first = t_arrival
            result.chunk_times.append(t_arrival)
            result.text += text
        if choice.get("finish_reason") is not None:
            result.finish_reason = str(choice["finish_reason"])
    return False


def classify_exception(exc: BaseException, timeout_s: float) -> str:
    """One-line error for a failed request, prefixed by who/what failed."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return f"timeout: no complete response within {timeout_s}s"
    if isinstance(exc, httpx.TimeoutException):
        return f"timeout: {type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"disconnect: {type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.TransportError):
        return f"network: {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


_JSON_HEADERS = {"content-type": "application/json"}


def auth_headers(settings: LoadSettings) -> dict[str, str]:
    """The bearer token a server asks for, on every request the harness sends it (none without a key)."""
    return {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}


class _CallbackFailed(Exception):
    """``on_first_token`` raised: that is our bug, not a failed request, so it must propagate."""


def encode_payload(payload: Mapping[str, Any]) -> bytes:
    """Request body bytes, encoded once per prompt before the rep instead of once per request."""
    return json.dumps(payload, separators=(",", ":")).encode("utf-8")


async def stream_completion(client: httpx.AsyncClient, url: str, body: bytes, timeout_s: float,
                            on_first_token: Callable[[], None] | None = None) -> StreamResult:
    """Send one streaming completion (``body``: JSON bytes, see :func:`encode_payload`) and time it.

    Never raises for a server-side failure: HTTP errors, timeouts, disconnects, ``error`` events,
    malformed SSE, a stream that ends without ``[DONE]`` and a complete stream without any text
    (``empty completion``: no first token exists, and a 0 s TTFT would be a silent zero) all come
    back as ``result.error``. A failure *after* ``[DONE]`` (while draining the body for connection
    reuse) does not undo a complete response. ``on_first_token`` runs synchronously right after the first text chunk is
    timed (the SUT reports it to LoadGen there).
    """
    result = StreamResult(t_send=time.perf_counter())
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, content=body, headers=_JSON_HEADERS) as response:
                if response.status_code != 200:
                    body = (await response.aread())[:500]
                    result.error = f"HTTP {response.status_code} from {url!r}: {body!r}"
                    return result
                sse = SSEDecoder()
                finished = False
                async for line in response.aiter_lines():
                    t_arrival = time.perf_counter()
                    if finished:
                        continue  # drain after [DONE] so the connection can be reused
                    data = sse.feed(line)
                    if data is None:
                        continue
                    first_before = result.t_first
                    finished = apply_event(result, data, t_arrival)
                    if first_before is None and result.t_first is not None and on_first_token:
                        try:
                            on_first_token()
                        except Exception as exc:
                            raise _CallbackFailed(repr(exc)) from exc
                    if result.error:
                        return result
                if not finished:
                    data = sse.flush()
                    if data is not None:
                        finished = apply_event(result, data, time.perf_counter())
                        if result.error:
                            return result
                if not finished:
                    detail = f"; non-SSE lines: {sse.unexpected[:2]!r}" if sse.unexpected else ""
                    ctype = response.headers.get("content-type", "")
                    result.error = (f"incomplete stream: ended without [DONE] after "
                                    f"{len(result.chunk_times)} text chunks (content-type {ctype!r}{detail})")
    except _CallbackFailed as exc:
        raise (exc.__cause__ or exc) from None  # the callback's own error, raised `from` it
    except Exception as exc:  # noqa: BLE001 - every failure of the request is recorded, not raised
        if result.t_end is None or result.error:
            result.error = result.error or classify_exception(exc, timeout_s)
    if not result.error and result.t_first is None:
        usage = (result.usage or {}).get("completion_tokens")
        result.error = (f"empty completion: the stream finished (finish_reason {result.finish_reason!r}, "
                        f"usage completion_tokens {usage!r}) without any text, so there is no first "
                        "token to time")
    return result


def to_record(result: StreamResult, *, index: int, sample_index: int, prompt: Prompt, t0: float,
              t_issued: float) -> RequestRecord:
    """Convert absolute stream times into a rep-relative :class:`RequestRecord`."""
    chunks = result.chunk_times
    end = result.t_end if result.t_end is not None else time.perf_counter()
    usage = result.usage or {}
    completion_tokens = usage.get("completion_tokens")
    prompt_tokens = usage.get("prompt_tokens")
    # ``type(x) is int``: a bool is not a count
    reported_out = completion_tokens if type(completion_tokens) is int and not result.error else None
    reported_in = prompt_tokens if type(prompt_tokens) is int else None
    return RequestRecord(
        index=index,
        sample_index=sample_index,
        prompt_id=prompt.id,
        issued_s=t_issued - t0,
        start_s=result.t_send - t0,
        ttft_s=None if result.t_first is None else result.t_first - result.t_send,
        itls_s=[b - a for a, b in zip(chunks, chunks[1:])],
        latency_s=end - result.t_send,
        output_tokens=reported_out if reported_out is not None else len(chunks),
        output_tokens_source="usage" if reported_out is not None else "stream_chunks",
        stream_chunks=len(chunks),
        input_tokens=reported_in if reported_in is not None else estimate_tokens(prompt.text),
        input_tokens_source="usage" if reported_in is not None else "estimate",
        text=result.text,
        finish_reason=result.finish_reason,
        error=result.error,
    )


# ------------------------------------------------------------------------------------------ SUT


class ClientBug(RuntimeError):
    """Our own code failed while handling a sample (not the server's fault): the rep is discarded."""


@dataclass
class RepResult:
    """One LoadGen test run: the per-request records and where its logs are."""

    records: list[RequestRecord]
    started_at: float
    """Unix time of rep start (just before LoadGen started)."""
    duration_s: float
    """Rep start to the end of the last request (sglang's benchmark duration)."""
    settings: LoadSettings
    loadgen_dir: Path
    wall_s: float
    """Wall time of the whole LoadGen test, setup and teardown included."""
    issued: int = 0
    """Samples LoadGen issued in this rep (every one of them has a record; recorded in the bench line
    as ``issued`` so a reader can tell a complete rep from one whose requests were removed)."""


class _LoopThread:
    """An asyncio loop in a daemon thread, with one ``httpx.AsyncClient`` living on it."""

    def __init__(self, settings: LoadSettings, warmup_url: str | None = None):
        self.warmup_url = warmup_url
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="perfwarden-sut-loop",
                                       daemon=True)
        self.settings = settings
        self.client: httpx.AsyncClient | None = None

    @property
    def open_client(self) -> httpx.AsyncClient:
        """The client, once ``__enter__`` opened it (requests are sent only inside the ``with``)."""
        if self.client is None:
            raise RuntimeError("the SUT's HTTP client is used before the loop thread opened it")
        return self.client

    def __enter__(self) -> "_LoopThread":
        self.thread.start()
        self.call(self._open())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self._close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            if not self.thread.is_alive():
                self.loop.close()

    def call(self, coro: Any, timeout: float | None = 60) -> Any:
        """Run ``coro`` on the loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _open(self) -> None:
        s = self.settings
        limit = s.max_concurrency
        headers = auth_headers(s) or None
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=s.connect_timeout_s, read=s.request_timeout_s,
                                  write=s.request_timeout_s, pool=None),
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
            headers=headers, trust_env=False)
        if self.warmup_url and s.client_warmup:
            try:
                await self.client.get(self.warmup_url, timeout=min(5.0, s.request_timeout_s))
            except httpx.HTTPError:
                pass  # the warm-up only loads client code; the rep itself reports server trouble

    async def _close(self) -> None:
        if self.client is not None:
            await self.client.aclose()


class OpenAIStreamingSUT:
    """The LoadGen SUT. Build it, then call :meth:`run`; one instance runs one rep."""

    def __init__(self, base_url: str, prompts: Sequence[Prompt], settings: LoadSettings):
        if not prompts:
            raise ValueError("a rep needs at least one prompt")
        self.url = completions_url(base_url, settings.endpoint)
        self.warmup_url = models_url(base_url)
        self.prompts = list(prompts)
        self.bodies = [encode_payload(request_payload(p.text, settings)) for p in self.prompts]
        self.settings = settings
        self.records: list[RequestRecord] = []
        self.bugs: list[BaseException] = []
        self._lock = threading.Lock()
        self._issued = 0
        self._t0 = 0.0
        self._deadline = 0.0
        self._lg: Any = None
        self._io: _LoopThread | None = None
        self._sem: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- LoadGen callbacks (LoadGen threads, GIL held: keep them short) --------------------------

    def _issue_query(self, samples: list[Any]) -> None:
        t_issued = time.perf_counter()
        batch = [(s.id, s.index) for s in samples]
        self._running().loop.call_soon_threadsafe(self._spawn, batch, t_issued)

    def _running(self) -> _LoopThread:
        """The loop thread of the rep in progress (LoadGen calls back only inside ``run``)."""
        if self._io is None:
            raise RuntimeError("a LoadGen callback came outside run()")
        return self._io

    def _flush_queries(self) -> None:
        """Nothing is buffered on our side: every sample is sent as soon as it is issued."""

    # -- on the loop ---------------------------------------------------------------------------

    def _spawn(self, batch: list[tuple[int, int]], t_issued: float) -> None:
        for qid, index in batch:
            order = self._issued
            self._issued += 1
            task = asyncio.get_running_loop().create_task(self._one(qid, index, order, t_issued))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(self, qid: int, index: int, order: int, t_issued: float) -> None:
        """Measure one sample and complete it with LoadGen exactly once, whatever happens."""
        lg = self._lg
        first_reported = False

        def report_first() -> None:
            nonlocal first_reported
            first_reported = True
            lg.FirstTokenComplete([lg.QuerySampleResponse(qid, 0, 0)])

        try:
            record = await self._measure(index, order, t_issued, report_first)
        except BaseException as exc:  # our bug or a cancellation: LoadGen must still hear back
            self.bugs.append(exc)
            record = RequestRecord(index=order, sample_index=index, prompt_id=f"sample-{index}",
                                   issued_s=t_issued - self._t0, start_s=t_issued - self._t0,
                                   latency_s=0.0, error=f"client bug: {type(exc).__name__}: {exc}")
            if not isinstance(exc, Exception):
                self._complete(qid, record, first_reported)
                raise
        self._complete(qid, record, first_reported)

    async def _measure(self, index: int, order: int, t_issued: float,
                       report_first: Callable[[], None]) -> RequestRecord:
        """Wait for a concurrency slot, send the request (unless the rep deadline passed), time it."""
        if self._sem is not None:
            await self._sem.acquire()
        try:
            if time.perf_counter() > self._deadline:
                now = time.perf_counter()
                result = StreamResult(t_send=now, t_end=now, error=(
                    f"not sent: rep deadline of {self.settings.max_duration_s}s passed while it waited"))
            else:
                result = await stream_completion(self._running().open_client, self.url, self.bodies[index],
                                                 self.settings.request_timeout_s, report_first)
        finally:
            if self._sem is not None:
                self._sem.release()
        return to_record(result, index=order, sample_index=index, prompt=self.prompts[index],
                         t0=self._t0, t_issued=t_issued)

    def _complete(self, qid: int, record: RequestRecord, first_reported: bool) -> None:
        """Store the record and tell LoadGen the sample is done (first token first, as it requires).

        ``n_tokens`` is the true count (streamed chunks for a failed request): below 2 LoadGen logs
        an ``error_runtime``, which is the honest outcome for a request that produced nothing.
        The response data is the generated text, so LoadGen's accuracy log (when an audit config
        samples it) holds real outputs.
        """
        lg = self._lg
        with self._lock:
            self.records.append(record)
        if not first_reported:
            lg.FirstTokenComplete([lg.QuerySampleResponse(qid, 0, 0)])
        data = array.array("B", record.text.encode("utf-8"))
        address, length = data.buffer_info()
        n_tokens = record.output_tokens if record.ok else record.stream_chunks
        lg.QuerySamplesComplete([lg.QuerySampleResponse(qid, address, length, n_tokens)])

    # -- driver --------------------------------------------------------------------------------

    def run(self, out_dir: Path) -> RepResult:
        """Run one LoadGen test and return its records. Blocks until every sample completed."""
        import mlperf_loadgen as lg

        self._lg = lg
        out_dir = Path(out_dir)
        safe_write.make_dirs(out_dir, seal.root_of(out_dir))
        for name in (*LOADGEN_LOGS, "mlperf_log_accuracy.json", "mlperf_log_trace.json"):
            seal.unlink(out_dir / name)  # a re-run rep never mixes with stale logs (recorded when sealed)
        test_settings = loadgen_test_settings(self.settings)
        log_settings = lg.LogSettings()
        log_settings.log_output.outdir = str(out_dir)
        log_settings.log_output.prefix = "mlperf_log_"
        log_settings.log_output.suffix = ""
        log_settings.log_output.prefix_with_datetime = False
        log_settings.log_output.copy_detail_to_stdout = False
        log_settings.log_output.copy_summary_to_stdout = False
        log_settings.enable_trace = False

        with _LoopThread(self.settings, self.warmup_url) as io:
            self._io = io
            if self.settings.max_concurrency is not None:
                self._sem = io.call(_make_semaphore(self.settings.max_concurrency))
            sut = lg.ConstructSUT(self._issue_query, self._flush_queries)
            qsl = lg.ConstructQSL(len(self.prompts), len(self.prompts), _noop_samples, _noop_samples)
            try:
                started_at = time.time()
                self._t0 = time.perf_counter()
                self._deadline = self._t0 + self.settings.max_duration_s
                lg.StartTestWithLogSettings(sut, qsl, test_settings, log_settings,
                                            str(out_dir / "audit.config"))
                wall = time.perf_counter() - self._t0
            finally:
                lg.DestroyQSL(qsl)
                lg.DestroySUT(sut)
        missing = [n for n in LOADGEN_LOGS if not (out_dir / n).is_file()]
        if missing:
            raise ClientBug(f"LoadGen wrote no {missing!r} in {str(out_dir)!r}")
        if self.bugs:
            raise ClientBug(f"{len(self.bugs)} samples hit a client bug; first: {self.bugs[0]!r}") \
                from self.bugs[0]
        if len(self.records) != self._issued or not self.records:
            raise ClientBug(f"LoadGen issued {self._issued} samples but {len(self.records)} completed")
        records = sorted(self.records, key=lambda r: r.index)
        duration = max(r.start_s + (r.latency_s or 0.0) for r in records)
        return RepResult(records=records, started_at=started_at, duration_s=duration,
                         settings=self.settings, loadgen_dir=out_dir, wall_s=wall, issued=self._issued)


async def _make_semaphore(n: int) -> asyncio.Semaphore:
    """Create the semaphore on the loop that will use it."""
    return asyncio.Semaphore(n)


def _noop_samples(indices: list[int]) -> None:
    """QSL load/unload: prompts are already in memory."""


def loadgen_test_settings(settings: LoadSettings) -> Any:
    """Translate :class:`LoadSettings` into ``mlperf_loadgen.TestSettings`` (PerformanceOnly)."""
    import mlperf_loadgen as lg

    ts = lg.TestSettings()
    ts.mode = lg.TestMode.PerformanceOnly
    ts.scenario = lg.TestScenario.Server if settings.scenario == "Server" else lg.TestScenario.Offline
    if settings.scenario == "Server":
        ts.server_target_qps = float(settings.target_qps)
        ts.max_query_count = int(settings.max_query_count)
    else:
        ts.offline_expected_qps = float(settings.target_qps)
    ts.min_duration_ms = int(round(settings.min_duration_s * 1000))
    ts.max_duration_ms = int(round(settings.max_duration_s * 1000))
    ts.min_query_count = int(settings.min_query_count)
    ts.use_token_latencies = True
    ts.qsl_rng_seed = ts.sample_index_rng_seed = ts.schedule_rng_seed = int(settings.seed)
    ts.sample_concatenate_permutation = bool(settings.sample_concatenate_permutation)
    if settings.ttft_latency_s is not None:
        ts.ttft_latency = int(settings.ttft_latency_s * 1e9)
    if settings.tpot_latency_s is not None:
        ts.tpot_latency = int(settings.tpot_latency_s * 1e9)
    return ts


def run_rep(base_url: str, prompts: Sequence[Prompt], settings: LoadSettings, out_dir: Path) -> RepResult:
    """Run one rep (one LoadGen test) against ``base_url`` with LoadGen logs in ``out_dir``."""
    return OpenAIStreamingSUT(base_url, prompts, settings).run(out_dir)


# ------------------------------------------------------------------------------ rep -> raw files


def fetch_server_info(base_url: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """GET ``/server_info`` (or sglang's older ``/get_server_info``); None when neither answers."""
    root = base_url.rstrip("/").removesuffix("/v1")
    with httpx.Client(timeout=timeout_s) as client:
        for path in ("/server_info", "/get_server_info"):
            try:
                resp = client.get(root + path)
                if resp.status_code == 200:
                    info = resp.json()
                    if isinstance(info, dict):
                        return info
            except (httpx.HTTPError, ValueError):
                continue
    return None


def server_counters(info: dict[str, Any] | None) -> dict[str, Any] | None:
    """The server's own running totals (``internal_states[0]`` of ``/server_info``: the embedded
    target's engine counters, sglang's scheduler state), or None when it reports none. Read before
    and after a rep, they are the server's witness of the requests and tokens the rep's line states."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    first = states[0] if isinstance(states, list) and states else None
    return dict(first) if isinstance(first, dict) else None


def measure_rep(run_dir: Path | RunDir, leg: str, rep: int, base_url: str, prompts: Sequence[Prompt],
                settings: LoadSettings, *, dataset_name: str, backend: str = "openai",
                server_info: dict[str, Any] | None = None, exclude_pids: Sequence[int] = (),
                contention_interval_s: float = 0.25) -> dict[str, Any] | None:
    """Measure rep ``rep`` of ``leg`` and append its line to ``legs/<leg>/bench_runs.jsonl``.

    Idempotent: when the file already holds (leg, rep), nothing is measured and None is returned, so
    ``run --resume`` never duplicates a rep. ``server_info`` defaults to the leg's
    ``server_info.json`` (what the server reported about itself) when that file exists. Contention is
    sampled just before and just after the LoadGen test. Returns the line written.
    """
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    path = run.bench_runs(leg)
    seal_torn_tail(path)
    if rep_exists(path, leg, rep):
        return None
    if server_info is None and run.server_info(leg).is_file():
        server_info = loads(read_bytes(run.server_info(leg), run.root, limit=RECORD_BYTES, what="server_info"),
                            what="server_info")
    wait_until_idle(exclude_pids)  # the server's own tail of the last rep is not the machine's contention
    before = sample_contention(contention_interval_s, exclude_pids=exclude_pids)
    counters_before = server_counters(fetch_server_info(base_url))
    window = open_cpu_window(exclude_pids)
    result = run_rep(base_url, prompts, settings, run.loadgen_rep(leg, rep))
    window_figures = close_cpu_window(window)
    # As sglang's bench_serving: read server_info *after* the rep, when its runtime counters (e.g. the
    # speculative accept length) reflect the load; fall back to the copy taken at start-up.
    wait_until_idle(exclude_pids)
    after = sample_contention(contention_interval_s, exclude_pids=exclude_pids)
    after_info = fetch_server_info(base_url)
    seal.seal_file(*sorted(p for p in result.loadgen_dir.iterdir() if p.is_file()))  # LoadGen's own logs
    counters_after = server_counters(after_info)
    server_info = after_info or server_info
    line = build_bench_line(
        result.records, leg=leg, rep=rep, started_at=result.started_at, duration_s=result.duration_s,
        ended_at=result.started_at + result.wall_s,
        request_rate=settings.target_qps if settings.scenario == "Server" else "inf",
        max_concurrency=settings.max_concurrency, backend=backend, dataset_name=dataset_name,
        server_info=server_info, contention={"start": before, "end": after,
                                             **({"window": window_figures} if window_figures else {})},
        server_counters={"before": counters_before, "after": counters_after}
        if counters_before is not None and counters_after is not None else None,
        extra={"scenario": settings.scenario, "issued": result.issued, "request_params": request_params(settings),
               "loadgen": {"dir": str(result.loadgen_dir.relative_to(run.root))
                           if result.loadgen_dir.is_relative_to(run.root) else str(result.loadgen_dir),
                           "settings": settings.summary(), "wall_s": result.wall_s}})
    append_bench_line(path, line)
    return line
