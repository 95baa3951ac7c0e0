"""Line-oriented raw files: strict, streaming readers and the line schemas.

Rules every reader here follows (design §2):
- only newline-terminated lines count as written; a torn last line is reported, never parsed;
- a line that does not decode is reported with its number, never skipped silently;
- every record carries a ``LineRef`` (file, 1-based line, byte offset, length) so a finding can cite
  the exact raw line and its sha256 later without hashing every line up front.

The schemas are msgspec Structs so that the hot path (``bench_runs.jsonl`` with per-request arrays)
decodes straight into typed columns. The schemas are strict: a field a schema does not have,
a field of the wrong type or a repeated key is a corrupt line -- except that a *foreign* bench line (no
``schema_version``: a real sglang/vLLM file audited as-is) may carry fields perfwarden does not read;
they are reported (``LineIssue`` kind ``foreign_fields``), never silently skipped. A repeated key is
corrupt in every file, whichever value a parser would keep. Absent fields decode to ``None`` and the
auditor turns that into ``EVIDENCE_MISSING`` where a gate needs the field.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Generic, Literal, TypeVar

import msgspec

from perfwarden.formats.safe_read import LINE_BYTES, RefusedInput, open_regular, size_text
from perfwarden.formats.strict_json import StrictJsonError, decode_typed, describe

T = TypeVar("T")

# The read buffer. Lines longer than a chunk are assembled from pieces, up to the line bound.
_READ_CHUNK = 1 << 20


CITE_HEAD_BYTES = 256
"""Bytes of a line's start a cited ``LineRef`` keeps (the auditor's evidence excerpt is cut from them)."""


@dataclass(frozen=True)
class LineRef:
    """Where a record came from: enough to re-read the raw bytes and hash them on demand. A line read
    with ``cite=True`` also carries its sha256 and first bytes, so a reader that judges it later (the
    auditor's gates) cites it without opening the file again."""

    path: Path
    line: int
    offset: int
    length: int
    digest: str | None = field(default=None, compare=False)
    """sha256 of the line's bytes, taken as it was read (``cite=True``)."""
    head: bytes | None = field(default=None, compare=False, repr=False)
    """The line's first ``CITE_HEAD_BYTES`` bytes, taken as it was read (``cite=True``)."""

    def raw(self) -> bytes:
        # Re-opened the safe way: the file was checked when it was read, but it may have been swapped
        # for a FIFO or a link since (a plain open() would then block or follow it).
        with open_regular(self.path) as handle:
            handle.seek(self.offset)
            return handle.read(self.length)

    def sha256(self) -> str:
        return hashlib.sha256(self.raw()).hexdigest()


@dataclass(frozen=True)
class LineIssue:
    """A line that could not be taken as written evidence."""

    kind: Literal["torn_tail", "corrupt", "missing_field", "empty_file", "unreadable", "foreign_fields"]
    """``missing_field``: the line is a JSON object but lacks a field the schema requires.
    ``foreign_fields``: a foreign line's fields perfwarden does not read (``message`` lists them): not
    checked, and not a problem of the line."""
    ref: LineRef
    message: str
    sha256: str | None = None
    """sha256 of the line when it was hashed while streaming (a line over the bound is never held)."""


@dataclass
class ReadReport(Generic[T]):
    """Everything a reader learned about one file: records in order, plus problems."""

    path: Path
    records: list[tuple[LineRef, T]] = field(default_factory=list)
    issues: list[LineIssue] = field(default_factory=list)
    sha256: str = ""


def iter_raw_lines(path: Path, issues: list[LineIssue], digest: "hashlib._Hash | None" = None,
                   root: Path | None = None, max_line: int = LINE_BYTES,
                   cite: bool = False, keep_tail: bool = False,
                   taken: "list[Callable[[], str]] | None" = None,
                   line_lengths: Mapping[int, int] | None = None) -> Iterator[tuple[LineRef, bytes]]:
    """Yield complete (newline-terminated) lines with their location; report a torn tail.

    The file is opened with :func:`perfwarden.formats.safe_read.open_regular`: it must be a regular
    file, inside ``root`` when one is given (raises ``RefusedInput``, an ``OSError``, otherwise).

    Blank lines are skipped (they carry nothing). ``digest`` is fed the whole file, so the caller
    gets the file's sha256 from the same single pass (complete once the iterator is exhausted).

    A line longer than the read chunk is collected as pieces joined once at its newline (linear in its
    size); one longer than ``max_line`` is never held: hashed while skipped, reported ``corrupt``.
    ``cite``: each ``LineRef`` carries the line's sha256 and first bytes. ``keep_tail``: a torn tail within
    the bound is reported *and* yielded, so :func:`iter_jsonl` may take back a finished foreign record.
    ``taken`` (with ``cite``): a long line's sha256 is taken on a worker thread while the consumer decodes
    the line (:func:`sha256_meanwhile`): the ref is yielded without its digest and a callable that waits
    for it is appended to ``taken`` (the consumer puts it in the ref, :func:`iter_jsonl`).
    ``line_lengths``: ``{byte offset: length}`` of the lines a verified seal lists. A line starting at one
    and running past the read chunk is read in one read of that length, not assembled from chunks (a 70 MB
    rep line copied once, not twice); the length is a read size, never trusted (:func:`_read_whole_line`).
    """
    path = Path(path)
    line_no = 0
    offset = 0  # file offset of the first byte of the line being assembled
    pieces: list[bytes] = []
    pending = 0  # bytes of the line being assembled
    oversize: "hashlib._Hash | None" = None  # set while skipping a line over the bound
    with open_regular(path, root) as handle:
        hasher = _Hasher(digest, os.fstat(handle.fileno()).st_size) if digest is not None else None
        try:
            while True:
                if line_lengths is not None and not pieces and oversize is None:
                    size = yield from _sealed_line(handle, b"", line_lengths.get(offset), max_line, path,
                                                   line_no + 1, offset, hasher, cite, taken)
                    if size is not None:
                        line_no, offset = line_no + 1, offset + size + 1
                        continue
                chunk = handle.read(_READ_CHUNK)
                if not chunk:
                    break
                if hasher is not None:
                    hasher.feed(chunk)
                find = chunk.find
                start = 0
                while True:
                    nl = find(b"\n", start)
                    if nl < 0:
                        break
                    line_no += 1
                    line_offset = offset
                    if oversize is not None or pending + nl - start > max_line:
                        oversize = oversize or _start_oversize(pieces)
                        oversize.update(chunk[start:nl])
                        length = pending + nl - start
                        issues.append(_oversize_issue(path, line_no, line_offset, length, max_line, oversize))
                        oversize, pieces, pending = None, [], 0
                        offset += length + 1
                        start = nl + 1
                        continue
                    if pieces:
                        pieces.append(chunk[start:nl])
                        line = b"".join(pieces)
                        pieces, pending = [], 0
                    else:
                        line = chunk[start:nl]
                    offset += len(line) + 1
                    start = nl + 1
                    if line.endswith(b"\r"):
                        line = line[:-1]
                    if line.strip():
                        # Hand the line over without keeping a reference in this frame: a rep's line
                        # can be tens of MB, and it must be freed as soon as the consumer decoded it.
                        slot = [(_line_ref(path, line_no, line_offset, line, cite, taken), line)]
                        del line
                        yield slot.pop()
                if start < len(chunk):
                    rest = chunk[start:] if start else chunk
                    if line_lengths is not None and not pieces and oversize is None:
                        size = yield from _sealed_line(handle, rest, line_lengths.get(offset), max_line, path,
                                                       line_no + 1, offset, hasher, cite, taken)
                        if size is not None:
                            line_no, offset = line_no + 1, offset + size + 1
                            continue
                    if oversize is None and pending + len(rest) > max_line:
                        oversize = _start_oversize(pieces)
                        pieces = []
                    if oversize is not None:
                        oversize.update(rest)
                    else:
                        pieces.append(rest)
                    pending += len(rest)
        finally:
            if hasher is not None:
                hasher.close()
    yield from _after_the_last_line(path, issues, line_no, offset, pieces, pending, oversize, max_line, keep_tail,
                                    cite)


def _after_the_last_line(path: Path, issues: list[LineIssue], line_no: int, offset: int, pieces: list[bytes],
                         pending: int, oversize: "hashlib._Hash | None", max_line: int, keep_tail: bool,
                         cite: bool) -> Iterator[tuple[LineRef, bytes]]:
    """What :func:`iter_raw_lines` reports once the file is read: a torn last line (yielded too with
    ``keep_tail`` when within the bound), or an empty file."""
    if oversize is not None:
        issue = _oversize_issue(path, line_no + 1, offset, pending, max_line, oversize)
        issues.append(LineIssue("torn_tail", issue.ref, f"last line {line_no + 1} of {path.name!r} has no newline "
                                f"and is {size_text(pending)}, over the {size_text(max_line)} bound for one line: "
                                "not evidence", issue.sha256))
        return
    if any(piece.strip() for piece in pieces):  # never joined: a torn tail can be a GiB of NUL bytes
        ref = LineRef(path, line_no + 1, offset, pending)
        issues.append(LineIssue("torn_tail", ref, f"last line {line_no + 1} of {path.name!r} has no "
                                "newline: the writer did not finish it, so it is not evidence"))
        if keep_tail:
            tail = b"".join(pieces)
            pieces.clear()  # the caller's list: the pieces are freed once joined
            tail = tail[:-1] if tail.endswith(b"\r") else tail
            # Cited like every other line: a finished foreign tail is evidence a finding may point at.
            yield _line_ref(path, line_no + 1, offset, tail, cite, None), tail
    elif line_no == 0:
        issues.append(LineIssue("empty_file", LineRef(path, 0, 0, 0), f"{path.name!r} is empty"))


def _read_whole_line(handle: BinaryIO, prefix: bytes, length: int | None,
                     max_line: int) -> tuple[list[bytes], int] | None:
    """The line of ``length`` bytes that starts with ``prefix`` (its first bytes, already read and hashed;
    the file stands just after them), read again from its start in one read, with the number of its
    bytes not hashed yet; or None, the file where it stood, when the stated length is not this line's.
    The line comes in a one-item list, so that the caller can hand it on without keeping a reference.

    The length comes from the seal chain, so it is checked against the bytes and never trusted: the
    bytes read must begin with ``prefix`` (the file did not change under the reader), hold no newline
    after it, and be followed by one. A line that ends within the next chunk gains nothing here."""
    if length is None or length - len(prefix) <= _READ_CHUNK or length > max_line:
        return None
    position = handle.tell()
    handle.seek(position - len(prefix))
    line = handle.read(length)
    after = handle.read(1)
    if (len(line) == length and after == b"\n" and line.startswith(prefix)
            and line.find(b"\n", len(prefix)) < 0):
        return [line], length + 1 - len(prefix)
    del line
    handle.seek(position)
    return None


def _sealed_line(handle: BinaryIO, prefix: bytes, length: int | None, max_line: int, path: Path, line_no: int,
                 offset: int, hasher: "_Hasher | None", cite: bool,
                 taken: "list[Callable[[], str]] | None") -> Generator[tuple[LineRef, bytes], None, int | None]:
    """The line a sealed ``length`` says starts at ``offset`` (:func:`_read_whole_line`), its new bytes
    hashed and the line yielded as :func:`iter_raw_lines` yields every line; returns its length as read,
    or None (nothing read, nothing yielded) when the length is not this line's."""
    whole = _read_whole_line(handle, prefix, length, max_line)
    if whole is None:
        return None
    holder, fresh = whole
    del whole
    line = holder.pop()  # this frame then holds the only reference, and gives it away
    size = len(line)
    if hasher is not None:
        hasher.feed_line(memoryview(line)[len(line) + 1 - fresh:])
        hasher.feed(b"\n")
    if line.endswith(b"\r"):
        line = line[:-1]
    if line.strip():
        slot = [(_line_ref(path, line_no, offset, line, cite, taken), line)]
        del line
        yield slot.pop()
    return size


def _line_ref(path: Path, line_no: int, offset: int, line: bytes, cite: bool,
              taken: "list[Callable[[], str]] | None") -> LineRef:
    """A line's location; with ``cite`` its sha256 (taken beside the decode for a long line when the
    consumer collects ``taken``) and first bytes."""
    if not cite:
        return LineRef(path, line_no, offset, len(line))
    if taken is not None and len(line) >= LINE_HASH_THREAD_BYTES:
        taken.append(sha256_meanwhile(line))
        return LineRef(path, line_no, offset, len(line), None, line[:CITE_HEAD_BYTES])
    return LineRef(path, line_no, offset, len(line), hashlib.sha256(line).hexdigest(), line[:CITE_HEAD_BYTES])


def _start_oversize(pieces: list[bytes]) -> "hashlib._Hash":
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    return digest


def _oversize_issue(path: Path, line_no: int, offset: int, length: int, max_line: int,
                    digest: "hashlib._Hash") -> LineIssue:
    return LineIssue("corrupt", LineRef(path, line_no, offset, length),
                     f"line {line_no} of {path.name!r} is {size_text(length)}, over the {size_text(max_line)} "
                     "bound for one line: not read", digest.hexdigest())


class _Hasher:
    """Feeds ``digest`` the file's chunks in order, on a worker thread for large files.

    ``hashlib`` releases the GIL while it hashes a buffer, so a worker hashes chunk k while the main
    thread splits and decodes (the sha256 of a 700 MB bench file is ~0.4 s of a ~6 s audit). The
    worker hashes exactly the bytes that were parsed (the same chunk objects, in order), so the
    digest still certifies what was read. The queue is bounded: a lagging worker blocks the reader
    instead of holding the file in memory. Small files are hashed inline.
    """

    THREAD_MIN_BYTES = 16 << 20
    QUEUE_CHUNKS = 32

    def __init__(self, digest: "hashlib._Hash", size: int):
        self._digest = digest
        self._queue: queue.Queue[bytes | memoryview | None] | None = None
        self._thread: threading.Thread | None = None
        if size >= self.THREAD_MIN_BYTES:
            chunks: queue.Queue[bytes | memoryview | None] = queue.Queue(maxsize=self.QUEUE_CHUNKS)
            self._queue = chunks
            self._thread = threading.Thread(target=self._run, args=(chunks,), name="perfwarden-sha256", daemon=True)
            self._thread.start()

    def _run(self, chunks: "queue.Queue[bytes | memoryview | None]") -> None:
        update, get, done = self._digest.update, chunks.get, chunks.task_done
        while (chunk := get()) is not None:
            update(chunk)
            del chunk
            done()

    def feed(self, chunk: bytes | memoryview) -> None:
        if self._queue is None:
            self._digest.update(chunk)
        else:
            self._queue.put(chunk)

    def feed_line(self, line: memoryview) -> None:
        """Feed a whole long line as one item, once everything fed before is hashed: the worker then
        holds at most the previous line while the reader decodes this one, instead of the reader
        waiting on a queue of its pieces."""
        if self._queue is None:
            self._digest.update(line)
        else:
            self._queue.join()
            self._queue.put(line)

    def close(self) -> None:
        """Wait until every fed chunk is hashed (the digest is complete after this)."""
        if self._thread is not None and self._queue is not None:  # __init__ sets both or neither
            self._queue.put(None)
            self._thread.join()
            self._thread = None


LINE_HASH_THREAD_BYTES = 4 << 20
"""Cited lines at least this long are hashed by :func:`sha256_meanwhile` (shorter ones inline: starting
a thread would cost more than it saves)."""


def sha256_meanwhile(line: bytes) -> Callable[[], str]:
    """Start hashing ``line`` on a thread of its own; the returned callable waits for the hex digest.

    Why: a cited bench line's own sha256 (~0.4 s per 700 MB) would otherwise run on the decoding thread
    after or before a decode that holds the GIL for its whole length, so no worker could overlap it.
    ``hashlib`` hashes a long buffer with the GIL released; this returns only once the thread has begun
    (``started``), so the hash runs while the caller decodes the very same bytes object."""
    future: Future[str] = Future()
    started = threading.Event()

    def run() -> None:
        started.set()
        try:
            future.set_result(hashlib.sha256(line).hexdigest())
        except BaseException as exc:  # never leave the reader waiting on a digest
            future.set_exception(exc)

    threading.Thread(target=run, name="perfwarden-line-sha256", daemon=True).start()
    started.wait()
    return future.result


# What decoding one hostile line can raise: msgspec's own errors, a strict-JSON rule broken
# (``formats/strict_json.py``), and what msgspec lets escape on hostile bytes (invalid UTF-8 inside a
# string, nesting deeper than its recursion limit). Each means the line is corrupt; none may escape a reader.
DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, StrictJsonError, UnicodeDecodeError, RecursionError)


def _issue_kind(exc: BaseException, line: bytes) -> Literal["corrupt", "missing_field"]:
    """``missing_field`` only for a well-formed JSON line that lacks a required field (msgspec checks
    the fields of the first value before it notices trailing garbage such as ``{}{}``)."""
    if isinstance(exc, msgspec.ValidationError) and str(exc).startswith("Object missing required field"):
        try:
            msgspec.json.decode(line)
        except DECODE_ERRORS:
            return "corrupt"
        return "missing_field"
    return "corrupt"


def decode_line(decoder: "msgspec.json.Decoder[T]", line: bytes, check_keys: bool = True,
                depth: bool = False) -> T:
    """Decode one JSONL line under the strict rules (:func:`perfwarden.formats.strict_json.decode_typed`).
    ``check_keys`` off only for a line whose bytes a verified seal proves the harness's own writer
    produced (it cannot write a repeated key)."""
    return decode_typed(decoder, line, check_keys=check_keys, depth=depth)


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])


def read_jsonl(path: Path, schema: type[T], root: Path | None = None, max_line: int = LINE_BYTES,
               cite: bool = False) -> ReadReport[T]:
    """Decode every complete line of ``path`` into ``schema``; collect problems instead of raising
    (a file refused by ``safe_read`` -- outside ``root``, not regular -- is an ``unreadable`` issue)."""
    report: ReadReport[T] = ReadReport(Path(path))
    digest = hashlib.sha256()
    try:
        for ref, record in iter_jsonl(path, schema, report.issues, digest, root, max_line, depth_first=True,
                                      cite=cite):
            report.records.append((ref, record))
    except RefusedInput as exc:
        report.issues.append(LineIssue("unreadable", LineRef(Path(path), 0, 0, 0), str(exc)))
    except OSError as exc:
        report.issues.append(LineIssue("unreadable", LineRef(Path(path), 0, 0, 0),
                                       f"cannot read {str(path)!r}: {exc}"))
    report.sha256 = digest.hexdigest()
    return report


_UNKNOWN_FIELD = "Object contains unknown field"


def _finished_foreign_tail(line: bytes, decoder: Any, foreign: Any, check_keys: bool) -> Any:
    """A foreign bench file's last record written without a final newline, or None. ``vllm bench serve
    --save-result`` ends its file with ``json.dump`` and nothing after it, so its last (or only) result
    is a whole JSON object that no newline ends; a line perfwarden's harness wrote (``schema_version``)
    is always ended, so an unterminated one stays a torn tail, and so does anything that does not decode
    whole."""
    try:
        try:
            record = decode_line(decoder, line, check_keys, depth=True)
        except msgspec.ValidationError as exc:
            if not str(exc).startswith(_UNKNOWN_FIELD):
                return None
            record = decode_line(foreign, line, check_keys, depth=True)
    except DECODE_ERRORS:
        return None
    return record if getattr(record, "schema_version", None) is None else None


def iter_jsonl(path: Path, schema: type[T], issues: list[LineIssue], digest: "hashlib._Hash | None" = None,
               root: Path | None = None, max_line: int = LINE_BYTES, check_keys: bool = True,
               depth_first: bool = False, cite: bool = False,
               line_lengths: Mapping[int, int] | None = None) -> Iterator[tuple[LineRef, T]]:
    """Streaming variant of :func:`read_jsonl` for files too large to hold (bench runs).

    Strict (module docstring): an unknown field is a ``corrupt`` issue, except in a foreign bench line
    (``foreign_fields`` issue, the record still yielded). ``check_keys=False`` only for a file whose
    lines a verified seal proves the harness wrote (see :func:`decode_line`). ``depth_first``: measure
    the nesting before decoding (small records; the bench schema bounds its own nesting).
    ``line_lengths``: a verified seal's line lengths by offset, a read-size hint (:func:`iter_raw_lines`)."""
    decoder = msgspec.json.Decoder(schema)
    foreign: msgspec.json.Decoder[Any] | None = (msgspec.json.Decoder(FOREIGN_SCHEMAS[schema])
                                                 if schema in FOREIGN_SCHEMAS else None)
    taken: list[Callable[[], str]] = []  # a long line's sha256, taken on the hashing worker meanwhile
    for ref, line in iter_raw_lines(path, issues, digest, root, max_line, cite,
                                    keep_tail=foreign is not None, taken=taken, line_lengths=line_lengths):
        if issues and issues[-1].kind == "torn_tail" and issues[-1].ref.line == ref.line:
            record = _finished_foreign_tail(line, decoder, foreign, check_keys)
            if record is None:
                continue  # torn, or the harness's own line (its writer always ends a line): stays torn
            extra = sorted(set(_TOP.decode(line)) - set(getattr(schema, "__struct_fields__", ())))
            issues.pop()
            if extra:
                issues.append(LineIssue("foreign_fields", ref, ", ".join(extra)))
            yield ref, record
            continue
        try:
            try:
                record = decode_line(decoder, line, check_keys, depth_first)
            except msgspec.ValidationError as exc:
                if foreign is None or not str(exc).startswith(_UNKNOWN_FIELD):
                    raise
                record = decode_line(foreign, line, check_keys, depth_first)
                if getattr(record, "schema_version", None) is not None:
                    raise  # the harness wrote it: its schema is the whole line
                ref = _with_digest(ref, taken)
                extra = sorted(set(_TOP.decode(line)) - set(getattr(schema, "__struct_fields__", ())))
                if extra:
                    issues.append(LineIssue("foreign_fields", ref, ", ".join(extra)))
        except DECODE_ERRORS as exc:
            issues.append(LineIssue(_issue_kind(exc, line), _with_digest(ref, taken), f"line {ref.line} of "
                                    f"{Path(path).name!r} does not decode as {schema.__name__}: {describe(exc)}"))
            continue
        finally:
            del line  # the raw bytes are not needed once decoded (memory stays one line)
        yield _with_digest(ref, taken), record
        record = None  # the consumer decides how long the decoded record lives


def _with_digest(ref: LineRef, taken: list[Callable[[], str]]) -> LineRef:
    """``ref`` with the sha256 the hashing worker took of its line (waits for it), if one is pending."""
    if not taken:
        return ref
    return replace(ref, digest=taken.pop()())


# ------------------------------------------------------------------------------------ line schemas

OptFloat = float | None
NULL = msgspec.Raw(b"null")
"""Default of raw-JSON fields: absent reads as JSON null."""
Millis = Annotated[float, msgspec.Meta(ge=0, le=1e9)]
"""A duration in ms: never negative, never beyond ~11 days (a value outside is a corrupt record)."""
Micros = Annotated[float, msgspec.Meta(ge=0, le=1e15)]


class BenchRunLine(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One line of ``bench_runs.jsonl``: one timed repetition.

    Line-compatible with ``sglang.bench_serving --output-file … --output-details``. Units follow
    sglang: aggregates in **milliseconds**, per-request ``ttfts``/``itls``/``latencies`` in
    **seconds**, throughputs per second of ``duration``. perfwarden adds ``leg``, ``rep``,
    ``request_starts``, ``latencies``, ``contention`` and ``schema_version``.
    """

    schema_version: int | None = None
    leg: str | None = None
    rep: int | None = None
    backend: str | None = None
    dataset_name: str | None = None
    request_rate: float | str | None = None
    max_concurrency: int | None = None
    server_info: msgspec.Raw = NULL
    """Raw JSON (an object or null): decoded by the reader behind an explicit nesting limit."""
    duration: OptFloat = None
    completed: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    request_throughput: OptFloat = None
    output_throughput: OptFloat = None
    total_throughput: OptFloat = None
    mean_ttft_ms: OptFloat = None
    median_ttft_ms: OptFloat = None
    p99_ttft_ms: OptFloat = None
    mean_tpot_ms: OptFloat = None
    median_tpot_ms: OptFloat = None
    p99_tpot_ms: OptFloat = None
    mean_itl_ms: OptFloat = None
    median_itl_ms: OptFloat = None
    p99_itl_ms: OptFloat = None
    mean_e2e_latency_ms: OptFloat = None
    median_e2e_latency_ms: OptFloat = None
    p99_e2e_latency_ms: OptFloat = None
    accept_length: OptFloat = None
    input_lens: list[int] | None = None
    output_lens: list[int] | None = None
    ttfts: list[float] | None = None
    itls: list[list[float]] | None = None
    errors: list[str | None] | None = None
    # perfwarden additions
    request_starts: list[float] | None = None
    """Per-request start, seconds since the rep started."""
    latencies: list[float] | None = None
    """Per-request end-to-end latency, seconds."""
    cache_hits: list[int] | None = None
    """Per-request prefix-cache hit tokens, when the server reports them."""
    contention: msgspec.Raw = NULL
    """Load average and other busy processes sampled at rep start (and end); raw JSON, like
    ``server_info``."""
    server_counters: msgspec.Raw = NULL
    """The server's own running totals just before and just after the rep (``{"before": {…}, "after":
    {…}}``, raw JSON): a second witness of the requests and tokens the line states."""
    started_at: OptFloat = None
    """Unix time the rep started (orders interleaved reps)."""
    ended_at: OptFloat = None
    """Unix time the rep ended (with ``started_at``: reps of different legs must not overlap)."""
    generated_texts: list[str | None] | None = None
    input_throughput: OptFloat = None
    issue_delays: list[float] | None = None
    """Per-request seconds between LoadGen issuing the query and the request being sent."""
    input_lens_source: list[str] | None = None
    output_lens_source: list[str] | None = None
    finish_reasons: list[str | None] | None = None
    # Workload descriptors. perfwarden's LoadGen client writes the first five; the
    # rest are sglang bench_serving's own. Nested ones stay raw JSON (decoded behind a depth limit).
    issued: int | None = None
    """Samples LoadGen issued in this rep: one per-request entry each."""
    scenario: str | None = None
    """LoadGen scenario (``Server``/``Offline``)."""
    prompt_ids: list[str | int] | None = None
    """Per-request prompt id, in issue order."""
    request_params: msgspec.Raw = NULL
    """The request body every request carried, prompt left out (output budget, sampling)."""
    loadgen: msgspec.Raw = NULL
    """LoadGen settings and log folder of the rep."""
    random_input_len: msgspec.Raw = NULL
    random_output_len: msgspec.Raw = NULL
    random_range_ratio: msgspec.Raw = NULL
    sharegpt_output_len: msgspec.Raw = NULL
    dataset_path: msgspec.Raw = NULL



class OutputLine(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One line of ``outputs.jsonl``: the greedy output for one fixed prompt (parity dump)."""

    prompt_id: str | int
    text: str
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    seed: int | None = None
    prompt: str | None = None
    error: str | None = None
    """Why the request failed (the parity dump keeps a failed prompt's line, text empty)."""


class OpBenchLine(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One line of ``opbench.jsonl``: one (backend, shape, trial) of an op benchmark."""

    op: str
    backend: str
    shape: list[int]
    """The shape timed, as the harness writes it (``list(shape)``): a string is not a shape."""
    trial: int = 0
    dtype: str | None = None
    times_ms: list[Millis] | None = None
    """Per-iteration times of the timed iterations (warm-up already discarded)."""
    warmup_discarded: int | None = None
    fresh_inputs: bool | None = None
    """Whether every timed iteration got fresh inputs (defeats cache-warm timing)."""
    correct: bool | None = None
    max_abs_err: OptFloat = None
    max_rel_err: OptFloat = None
    atol: OptFloat = None
    rtol: OptFloat = None
    dispatch: str | None = None
    """Dispatch path timed: ``eager``, ``graph_replay``, ``compiled``."""
    seed: int | None = None
    raised: str | None = None
    is_reference: bool | None = None
    """True for the reference implementation the speedup is computed against."""
    impl_sha256: str | None = None
    """Digest of the implementation's source, to detect a backend compared against itself."""
    measured: bool = True
    """False when timing was not possible here (e.g. Triton on CPU); then ``times_ms`` is null."""
    device: str | None = None
    """Device the backend ran on (``cpu``, ``cuda``); absent in rigs older than the GPU path (CPU)."""
    timing_method: str | None = None
    """How intervals were measured: ``host_clock`` (CPU) or ``cuda_events``."""
    graph_times_ms: list[Millis] | None = None
    """Per-call times from CUDA-graph replays over distinct input sets (the kernel itself, what a
    CUDA-graph server pays); one figure per replay, warm-up replays discarded. ``times_ms`` is always
    call by call (what an eager server pays, launch overhead included). Null on CPU."""
    graph_raised: str | None = None
    """Why no graph figure was taken on a device that has graphs (e.g. the op could not be captured)."""
    l2_flushed: bool | None = None
    """Whether the device cache was flushed before every timed call (GPU)."""
    refused: str | None = None
    """Why the op bench itself refused this backend (clock, secret inputs, nonce, timed outputs, inputs
    modified, unpredictable shapes, roofline, the reference reached); such a row is also ``correct: false``."""


class ProfileLine(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One line of ``profile.jsonl``: time aggregated for one op/kernel name (and shapes)."""

    name: str
    """Kernel or op name as the profiler reported it."""
    self_time_us: Micros
    """Self time, microseconds (device time on GPU, CPU time on CPU)."""
    count: int | None = None
    op: str | None = None
    """Logical op this kernel belongs to, if the profiler/harness mapped it."""
    shapes: list[list[int]] | None = None
    """The input shapes the op was served at, one integer list each (``harness/profiling.py``)."""
    device: str | None = None
    total_time_us: OptFloat = None
    """Total wall time of the profiled window, microseconds (same on every line)."""

SealKind = Literal["open", "line", "file", "cut", "gone"]


class SealEntry(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One line of ``evidence.jsonl``: the run's manifest and seal chain (``perfwarden.formats.seal``).

    Every entry says what the harness wrote and is chained to the one before it:
    ``mac = HMAC-SHA256(key, prev ‖ body)`` where ``body`` is the entry's canonical JSON without its
    ``mac`` field (the line's bytes up to ``,"mac":"``, closed with ``}``). Kinds:

    - ``open``: the first entry; names the chain (``seal_id``), the run and the key (``key_id``).
    - ``line``: one JSONL line appended to ``file`` (1-based ``line``, byte ``offset``, ``length``
      without the newline, ``sha256`` of those bytes), with the file's ``size`` and whole-file
      ``file_sha256`` once the line is written. Bench lines also carry ``leg``, ``rep`` and whether
      the line held a ``contention`` sample.
    - ``file``: a whole file as written (``sha256``, ``size``); a later entry for the same file
      supersedes it (``leg.json`` rewritten when a leg fails: ``status``).
    - ``cut``: the harness itself cut ``dropped_bytes`` unsealed bytes (``dropped_sha256``) off the
      end of ``file`` at ``offset`` (a line written but never sealed before a crash), kept beside it.
    - ``gone``: the harness itself removed ``file`` (a re-run rep's stale LoadGen logs).
    """

    v: int
    seq: int
    kind: SealKind
    prev: str
    mac: str = ""
    file: str | None = None
    line: int | None = None
    offset: int | None = None
    length: int | None = None
    sha256: str | None = None
    size: int | None = None
    file_sha256: str | None = None
    leg: str | None = None
    rep: int | None = None
    contention: bool | None = None
    status: str | None = None
    seal_id: str | None = None
    run_id: str | None = None
    key_id: str | None = None
    created_at: str | None = None
    dropped_bytes: int | None = None
    dropped_sha256: str | None = None


SEAL_ENTRY = msgspec.json.Decoder(SealEntry)
SEAL_HEAD_BYTES = 1 << 16
"""Most bytes of the chain's first line read to find its seal id (an ``open`` entry is ~300 bytes)."""


def chain_seal_id(path: Path) -> str | None:
    """The seal id the chain's first entry names (to look its key up), or None: the one reader of it,
    for the harness continuing a chain and the auditor finding the key that verifies it."""
    try:
        with open_regular(path, what="seal chain") as handle:  # a FIFO here is refused, never waited on
            first = handle.readline(SEAL_HEAD_BYTES)
        entry = decode_line(SEAL_ENTRY, first.rstrip(b"\n"))
    except (OSError, *DECODE_ERRORS):
        return None
    return entry.seal_id if entry.kind == "open" else None


class ForeignBenchRunLine(BenchRunLine, forbid_unknown_fields=False):
    """A bench line from a foreign writer (no ``schema_version``): sglang/vLLM add fields perfwarden does
    not read, which are listed, not refused, besides the few below: what says which run it was (the auditor
    holds them across the legs) and what ``vllm bench serve --save-result --save-detailed`` states of its
    clock and goodput. Never decoded directly: see :func:`iter_jsonl`."""

    model_id: msgspec.Raw = NULL
    tokenizer_id: msgspec.Raw = NULL
    """The model and tokenizer ``vllm bench serve`` names."""
    burstiness: msgspec.Raw = NULL
    num_prompts: msgspec.Raw = NULL
    endpoint_type: msgspec.Raw = NULL
    max_concurrent_requests: msgspec.Raw = NULL
    tag: msgspec.Raw = NULL
    label: msgspec.Raw = NULL
    """How a foreign benchmark shaped its load and labelled the run."""
    start_times: list[float] | None = None
    """Per-request start, on the benchmark process's ``time.perf_counter()`` clock (Linux: seconds since boot)."""
    date: str | None = None
    """Local wall time the benchmark wrote its result, ``%Y%m%d-%H%M%S``."""
    request_goodput: OptFloat = None
    """Good requests per second at the benchmark's ``--goodput`` SLO (null without ``--goodput``)."""
    goodput: str | None = None
    """The SLO itself, where ``--metadata goodput=ttft:500,tpot:100`` recorded it (vLLM writes no SLO field)."""


FOREIGN_STATED = ("model_id", "tokenizer_id", "burstiness", "num_prompts", "endpoint_type", "max_concurrent_requests",
                  "tag", "label", "goodput")
"""The fields of a foreign bench line that say which run it was (identities and conditions, held across the
legs); the rest ``ForeignBenchRunLine`` adds are measurements (its clock, its goodput)."""


FOREIGN_SCHEMAS: dict[type, type[msgspec.Struct]] = {BenchRunLine: ForeignBenchRunLine}
"""The schemas a foreign writer may extend (only the bench line: every other record is perfwarden's)."""
