"""Re-derive one rep's metrics from its per-request arrays (never from the line's own aggregates).

Units follow sglang's bench_serving: per-request ``ttfts``/``itls``/``latencies`` are seconds; the
metrics returned here are milliseconds for latencies and per-second for throughputs. A request counts as
successful when its error string is empty, as in sglang (``completed`` counts successes only).

Per-request e2e latency is ``latencies`` when the file has it (perfwarden adds it), else
``ttft + sum(itls)`` -- sglang's own output has no per-request latency array, and the sum of gaps ends
at the last token, which is when sglang stops its clock too. TPOT per request is
``(e2e - ttft) / (output_len - 1)`` for requests with more than one output token, as in sglang.

A rep is also checked for internal consistency while it streams past, in
constant memory beyond the rep itself and with numpy over its arrays: every time finite, non-negative
and bounded by its container (a TTFT or a latency inside the rep's duration, the rep's request
timeline -- first start to last end -- inside its duration, a latency at least its TTFT plus its
inter-token gaps), the line's own counts equal to its arrays, its own aggregates within a factor of
10 of its arrays (a unit error is corrupt evidence, never a re-derived -99.9%), its requests no longer
than their ``max_tokens``, as many requests as LoadGen ``issued``, a sane rep id. A violation raises
``RepError`` (the rep is corrupt or incomplete); tolerances are the constants below.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from perfwarden.auditor.bench_records import RepGoodput, StatedRun
from perfwarden.auditor.float_columns import flat_float_array, float_array
from perfwarden.formats.jsonl import FOREIGN_STATED, NULL, BenchRunLine, ForeignBenchRunLine, LineRef
from perfwarden.formats.strict_json import StrictJsonError, loads


# Metric -> whether higher is better. The one place that says which way each metric improves.
# ``request_goodput`` depends on an SLO, so a rep has it only once the audit decided the SLO
# (``gates/goodput_slo.py``); every other metric is re-derived here from the rep alone.
METRICS: dict[str, bool] = {
    "output_throughput": True,
    "request_throughput": True,
    "total_throughput": True,
    "median_ttft_ms": False,
    "p99_ttft_ms": False,
    "median_tpot_ms": False,
    "p99_tpot_ms": False,
    "median_itl_ms": False,
    "p99_itl_ms": False,
    "median_e2e_latency_ms": False,
    "p99_e2e_latency_ms": False,
    "request_goodput": True,
}
LATENCY_METRICS = ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "median_e2e_latency_ms",
                   "p99_ttft_ms", "p99_tpot_ms")
# Aggregates a line reports that we cross-check against our re-derivation (field -> our metric).
CROSS_CHECKED = ("output_throughput", "request_throughput", "median_ttft_ms", "median_itl_ms",
                 "median_tpot_ms", "median_e2e_latency_ms", "completed", "total_output_tokens",
                 "total_input_tokens")
"""The last three are counts over successful requests (sglang's ``completed``/``total_*_tokens``); they
are re-derived into ``RepMetrics.metrics`` only so that a line's own summary can be held against its
arrays -- they are not compared between legs (``METRICS`` lists what is)."""

_REQUIRED_ARRAYS = ("output_lens", "ttfts", "errors")

MAX_SECONDS = 1e6
"""No time in a bench line (a duration, a TTFT, a gap) may exceed ~11.6 days: beyond that it is damage."""
MAX_REP_ID = 1_000_000
"""Largest rep number a harness writes; a larger one is corrupt (and never sized into anything)."""
MAX_STARTED_AT = 1e11
"""Unix time of a rep start: beyond the year 5138 is not a clock reading."""
TIMELINE_SLACK_S, TIMELINE_SLACK_REL = 0.005, 0.005
"""A request may overrun its rep's duration by max(5 ms, 0.5% of the duration): the rep clock and the
request clocks are read at slightly different instants (sglang reads the rep clock after gathering)."""
LATENCY_SLACK_S, LATENCY_SLACK_REL = 0.001, 0.005
"""A latency may fall short of TTFT + its gaps by max(1 ms, 0.5% of it): rounding of the written times."""
SCALE_FACTOR = 10.0
"""A line's own aggregate this many times off its arrays (either way) is a unit or scale error."""
RAW_FIELD_MAX_BYTES = 1 << 20
"""Largest raw-JSON field (server_info, contention, loadgen, request_params) read from a line."""
SCALE_CHECKED = ("median_ttft_ms", "median_itl_ms", "median_tpot_ms", "median_e2e_latency_ms", "output_throughput")
COUNT_FIELDS = ("completed", "total_output_tokens", "total_input_tokens")
"""Counts a line reports over its successful requests: they must equal the arrays exactly."""
WORKLOAD_FIELDS = ("backend", "dataset_name", "request_rate", "max_concurrency", "scenario")
RAW_WORKLOAD_FIELDS = ("request_params", "loadgen", "random_input_len", "random_output_len", "random_range_ratio",
                       "sharegpt_output_len", "dataset_path")
"""Fields of a bench line that define the load a rep ran; ``loadgen`` contributes only
its ``settings`` (its folder and wall time are per rep)."""


class RepError(ValueError):
    """The line cannot be re-derived, or contradicts itself: which field and why.

    ``problems`` lists every rule the rep broke, each ``(kind, message)`` with kind ``missing`` (the
    evidence lacks something, e.g. requests LoadGen issued) or ``corrupt``; all of them are reported,
    not only the first."""

    def __init__(self, kind: str, message: str, problems: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.kind = kind  # "missing" | "corrupt"
        self.problems = problems or [(kind, message)]

    @classmethod
    def of(cls, problems: list[tuple[str, str]]) -> "RepError":
        return cls(problems[0][0], "; ".join(m for _, m in problems), problems)


@dataclass
class RepMetrics:
    """Metrics of one rep, re-derived from raw per-request data."""

    leg: str
    rep: int
    ref: LineRef
    n_requests: int
    n_ok: int
    n_errors: int
    duration_s: float
    metrics: dict[str, float] = field(default_factory=dict)
    mean_output_len: float = math.nan
    output_len_quantiles: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    accept_length: float | None = None
    cache_hit_rate: float | None = None
    contention: dict[str, Any] | None = None
    started_at: float | None = None
    ended_at: float | None = None
    """Unix time the rep ended, when the line records it (reps of different legs must not overlap)."""
    loadgen_dir: str | None = None
    """The LoadGen log folder the line names (``loadgen.dir``), as written."""
    reported: dict[str, float] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    """Totals over the successful requests, in seconds (``ttft_s``, ``e2e_s``): what a server's own
    histograms of the same requests sum to (the second witness, ``gates/engine_witness.py``)."""
    error_samples: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Optional metrics that could not be derived (e.g. no ITLs because every output is one token)."""
    schema_version: int | None = None
    """Set when perfwarden's harness wrote the line (it then must carry what the harness records)."""
    issued: int | None = None
    """Requests LoadGen issued in the rep, when the line records it."""
    workload: dict[str, Any] = field(default_factory=dict)
    """The load the rep ran, flattened (``request_params.max_tokens``, ``loadgen.settings.scenario``,
    ``max_concurrency`` ...): only keys the line has; JSON null stays None."""
    prompt_digest: str | None = None
    """Digest of the rep's prompt set (its sorted prompt ids; the request count is part of it)."""
    lens_digest: str | None = None
    """Digest of the rep's sorted ``input_lens``: the prompt set where a file has no prompt ids."""
    timing_digest: str | None = None
    """Digest of the rep's per-request timings (TTFTs, latencies, gap sums, starts): two reps with the
    same one are the same measurement written twice."""
    server_info: dict[str, Any] | None = None
    """The line's own copy of server_info, flattened (None when the line has none)."""
    server_counters: tuple[dict[str, float], dict[str, float]] | None = None
    """The server's own running totals (numeric ones) just before and just after the rep."""
    usage_counted: bool = False
    """Every output length is the server's own usage count (``output_lens_source`` all ``usage``)."""
    max_latency_s: float | None = None
    """The longest request of the rep (any request, failed ones' partial latency included)."""
    first_start_s: float | None = None
    """The first request's start, seconds after the rep's clock started (when the line records starts)."""
    goodput: "RepGoodput | None" = None
    """Its goodput evidence where an SLO is in play (``bench_extras.rep_goodput``)."""
    stated: "StatedRun | None" = None
    """What a foreign line states of its run: model, tokenizer, clock (``bench_extras.stated_run``)."""
    last_end_s: float | None = None
    """The last request's end (start plus latency), seconds after the rep's clock started (when the line
    records starts and latencies): the harness writes it as the rep's duration."""
    loadgen_latency_s: tuple[float, float, float] | None = None
    """Shortest, mean and longest issue-to-completion of the rep's requests (issue delay plus latency, every
    request), when the line records both: what LoadGen measures of the same samples."""
    loadgen_wall_s: float | None = None
    """How long LoadGen's test ran, as the line records it (``loadgen.wall_s``)."""
    arrays: frozenset[str] = frozenset()
    """The optional per-request arrays the line carries (which witnesses of its requests it holds)."""
    foreign_stated: dict[str, Any] = field(default_factory=dict)
    """What a foreign line states of its run beyond the harness's schema (``jsonl.FOREIGN_STATED``: its
    model, tokenizer, load shape), only the fields it holds."""


def _as_array(values: Sequence[float], name: str, n: int) -> np.ndarray:
    if len(values) != n:
        raise RepError("corrupt", f"{name!r} has {len(values)} entries, expected {n}")
    try:
        arr = float_array(values)
    except (OverflowError, ValueError, TypeError) as exc:  # e.g. an integer beyond float range
        raise RepError("corrupt", f"{name!r} holds values that are not finite numbers ({exc})") from None
    if arr.size:
        low, high = float(arr.min()), float(arr.max())  # a NaN propagates into both (one pass each, no mask)
        if not (math.isfinite(low) and math.isfinite(high)):
            raise RepError("corrupt", f"{name!r} holds non-finite values")
        if low < 0:
            raise RepError("corrupt", f"{name!r} holds negative values")
    return arr


SELECT_SAMPLE_MIN = 1 << 16
"""Arrays at least this large get their quantiles by bracketed selection (see ``_quantiles``)."""
SELECT_SAMPLE = 1 << 14
"""At most this many strided values bracket the order statistics: a larger sample narrows the brackets
(what is selected from) more than it costs to sort (measured: 29 -> 20 ms for two quantiles of 3M gaps)."""
SELECT_SAMPLE_SHIFT = 5
"""A smaller array is bracketed by one value in 2**5: sorting the sample dominates there (two quantiles
of 100k latencies: 0.63 ms with 16k sampled values, 0.28-0.37 ms with 2-4k)."""


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's linear interpolation between two order statistics, term for term (bit-identical)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def _quantiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """``np.percentile(values, 100*q, method='linear')`` for each q, from as little work as possible.

    Small arrays: one ``np.percentile`` call (a single partition around every order statistic needed).
    Large arrays (a rep's million inter-token gaps): the order statistics are first bracketed by a
    strided sample, then only the values inside the brackets are partitioned -- one comparison pass
    (``_bracketed``) instead of a selection over everything. The counts below each bracket prove the
    bracket holds the wanted ranks; when they do not (adversarial data), the full selection runs. Exact
    either way.
    """
    n = values.size
    if n < SELECT_SAMPLE_MIN:
        return [float(x) for x in np.percentile(values, [100.0 * q for q in qs])]
    sample = np.sort(values[:: max(1, n // min(SELECT_SAMPLE, n >> SELECT_SAMPLE_SHIFT))])
    m = sample.size
    ranks, edges = [], []
    for q in qs:
        h = (n - 1) * q
        lo_rank = int(np.floor(h))
        ranks.append((h, lo_rank, min(lo_rank + 1, n - 1)))
        pos = q * (m - 1)
        margin = 8 + int(8 * np.sqrt(m * q * (1 - q)))  # 8 standard deviations of the sample's rank at q
        edges.append((sample[max(0, int(np.floor(pos)) - margin)], sample[min(m - 1, int(np.ceil(pos)) + margin)]))
    out = []
    for (h, lo_rank, hi_rank), (below, inside) in zip(ranks, _bracketed(values, edges)):
        if not (below <= lo_rank and hi_rank < below + inside.size):
            return [float(x) for x in np.percentile(values, [100.0 * q for q in qs])]
        part = np.partition(inside, sorted({lo_rank - below, hi_rank - below}))
        out.append(_lerp(float(part[lo_rank - below]), float(part[hi_rank - below]), h - lo_rank))
    return out


SELECT_BLOCK = 1 << 16
"""Values ``_bracketed`` compares per step: a block (512 KiB of float64) stays in cache through every
bracket's comparisons, count and compress, so a large array is read from memory once for all the
quantiles instead of three times for each (two quantiles of 3M gaps: ~17 -> ~10 ms)."""


def _bracketed(values: np.ndarray, edges: list[tuple[float, float]]) -> list[tuple[int, np.ndarray]]:
    """For each ``(lo, hi)``: how many values are below ``lo``, and the values in ``[lo, hi]`` (in order).

    A NaN is neither below nor inside any bracket, so the caller's count check sends an array holding
    one to numpy's own percentile, as a comparison over the whole array would."""
    below = [0] * len(edges)
    inside: list[list[np.ndarray]] = [[] for _ in edges]
    under = np.empty(min(SELECT_BLOCK, values.size), dtype=bool)
    within = np.empty_like(under)
    for start in range(0, values.size, SELECT_BLOCK):
        block = values[start:start + SELECT_BLOCK]
        low_mask, high_mask = under[:block.size], within[:block.size]
        for k, (lo, hi) in enumerate(edges):
            np.less(block, lo, out=low_mask)
            below[k] += int(np.count_nonzero(low_mask))
            np.logical_not(low_mask, out=low_mask)
            np.less_equal(block, hi, out=high_mask)
            low_mask &= high_mask
            inside[k].append(np.compress(low_mask, block))  # half the time of block[mask] on a sparse mask
    return [(count, np.concatenate(parts)) for count, parts in zip(below, inside)]


def _median_p99(values: np.ndarray) -> tuple[float, float]:
    """Median and 99th percentile with numpy's linear interpolation (``_quantiles``)."""
    med, p99 = _quantiles(values, (0.5, 0.99))
    return med, p99


def _segment_sums(gaps: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Per-request sums of the flattened gaps, ``lens`` per request (``np.add.reduceat``; a request
    without gaps sums to 0).

    Vectorized: ``math.fsum`` per request cost ~0.1 s per million gaps, a third of the decode itself.
    The sums can differ from a correctly rounded ``fsum`` in the last bit or two, far below any
    threshold the gates use. Gaps are bounded (``MAX_SECONDS``) before they are summed, so sums stay finite.
    """
    sums = np.zeros(lens.size)
    filled = lens > 0
    if not gaps.size:
        return sums
    starts = np.zeros(lens.size, dtype=np.intp)
    np.cumsum(lens[:-1], out=starts[1:])
    # Only the requests with gaps: their starts rise strictly and each segment runs to the next one's
    # start, so every index is valid without copying the gaps to append a terminator.
    with np.errstate(over="ignore"):
        sums[filled] = np.add.reduceat(gaps, starts[filled])
    return sums


def raw_json(raw: msgspec.Raw, name: str, ref: LineRef) -> Any:
    """Decode one raw-JSON field of a line behind explicit size and nesting limits (None for null)."""
    data = bytes(raw)
    if data == b"null":
        return None
    if len(data) > RAW_FIELD_MAX_BYTES:
        raise RepError("corrupt", f"line {ref.line}: {name!r} is {len(data)} bytes, more than the limit of "
                       f"{RAW_FIELD_MAX_BYTES}")
    try:
        return loads(data, what=f"{name!r}")
    except StrictJsonError as exc:
        raise RepError("corrupt", f"line {ref.line}: {exc}") from None


def flatten_json(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects become dotted keys; lists and scalars are leaf values (an empty object too)."""
    if not isinstance(obj, dict):
        return {prefix.rstrip("."): obj} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten_json(value, name + "."))
        else:
            flat[name] = value
    return flat


def raw_object(raw: msgspec.Raw, name: str, ref: LineRef) -> dict[str, Any] | None:
    """A raw-JSON field that must hold an object (or null)."""
    value = raw_json(raw, name, ref)
    if value is not None and not isinstance(value, dict):
        raise RepError("corrupt", f"line {ref.line}: {name!r} is a {type(value).__name__}, not an object")
    return value


def _workload(line: BenchRunLine, ref: LineRef) -> dict[str, Any]:
    """The rep's load descriptors, flattened; a key the line lacks is left out (not None)."""
    present = line.__struct_fields__
    out: dict[str, Any] = {}
    for name in WORKLOAD_FIELDS:
        if name in present and getattr(line, name) is not None:
            out[name] = getattr(line, name)
    for name in RAW_WORKLOAD_FIELDS:
        reader = raw_object if name in ("request_params", "loadgen") else raw_json
        value = reader(getattr(line, name), name, ref)
        if value is None:
            continue
        if name == "loadgen":
            _check_loadgen(line, value, ref)
            value = value.get("settings") if isinstance(value, dict) else None
            if value is None:
                continue
            name = "loadgen.settings"
        out.update(flatten_json(value, f"{name}.") if isinstance(value, dict) and value else {name: value})
    return out


LOADGEN_FIELDS: dict[str, type | tuple[type, ...]] = {"dir": str, "settings": dict, "wall_s": (int, float)}
"""What the harness writes in a bench line's ``loadgen`` object (``harness/loadgen_client.measure_rep``)."""


def _check_loadgen(line: BenchRunLine, value: dict[str, Any], ref: LineRef) -> None:
    """A harness line's ``loadgen`` object holds only the harness's fields, each of its type."""
    if line.schema_version is None:
        return
    for key, item in value.items():
        kind = LOADGEN_FIELDS.get(key)
        if kind is None:
            raise RepError("corrupt", f"line {ref.line}: 'loadgen' has a field its schema does not have: {key!r}")
        if isinstance(item, bool) or not isinstance(item, kind):
            raise RepError("corrupt", f"line {ref.line}: 'loadgen.{key}' is a {type(item).__name__}, the wrong type")


def loadgen_dir(raw: msgspec.Raw, ref: LineRef) -> str | None:
    value = raw_json(raw, "loadgen", ref)
    folder = value.get("dir") if isinstance(value, dict) else None
    return folder if isinstance(folder, str) else None


def _prompt_digests(line: BenchRunLine, n: int, in_lens: np.ndarray | None) -> tuple[str | None, str | None]:
    """Order-free digests of the prompt set: of the prompt ids, and of the input lengths."""
    ids = None
    if line.prompt_ids is not None:
        if len(line.prompt_ids) != n:
            raise RepError("corrupt", f"'prompt_ids' has {len(line.prompt_ids)} entries, expected {n}")
        joined = "\x00".join(sorted(map(str, line.prompt_ids)))
        ids = hashlib.sha256(joined.encode("utf-8", "surrogatepass")).hexdigest()
    lens = (hashlib.sha256(np.ascontiguousarray(sorted_lengths(in_lens)).data).hexdigest()
            if in_lens is not None else None)
    return ids, lens


COUNTING_SORT_MAX = 1 << 20
"""Largest value ``sorted_lengths`` sorts by counting (its count table stays within 8 MiB)."""


def sorted_lengths(values: np.ndarray) -> np.ndarray:
    """``np.sort(values)`` bit for bit, for the non-negative values ``_as_array`` returns.

    Token lengths are small whole numbers: counted (``bincount``) and written back in order in two
    linear passes, ~30x faster than a comparison sort of a 100k-request rep. Anything else -- a
    fraction, a negative zero, a value past ``COUNTING_SORT_MAX`` -- is sorted by numpy."""
    if values.size and float(values.max()) < COUNTING_SORT_MAX:
        whole = values.astype(np.int64)
        if np.array_equal(whole, values) and not np.signbit(values).any():
            return np.repeat(np.arange(int(whole.max()) + 1, dtype=values.dtype), np.bincount(whole))
    return np.sort(values)


def _timing_digest(*arrays: np.ndarray | None) -> str:
    # sha256 runs on the CPU's SHA extensions here (about twice blake2b's speed); the arrays are hashed
    # in place, through the buffer protocol, without a bytes copy.
    h = hashlib.sha256()
    for arr in arrays:
        h.update(b"|" if arr is None else np.ascontiguousarray(arr, dtype=float).data)
    return h.hexdigest()


def _first_over(values: np.ndarray, limit: float) -> int | None:
    """Index of the first value above ``limit`` (None when all are within)."""
    over = np.flatnonzero(values > limit)
    return int(over[0]) if over.size else None


def _check_header(line: BenchRunLine, ref: LineRef, rep: int, n: int, duration: float) -> list[tuple[str, str]]:
    """Checks on the line's scalars: rep id, start time, duration, issued count (constant memory)."""
    problems = []
    if not 0 <= rep <= MAX_REP_ID:
        problems.append(("corrupt", f"line {ref.line}: rep id {rep!r} is outside 0..{MAX_REP_ID}"))
    if line.started_at is not None and not (math.isfinite(line.started_at) and 0 <= line.started_at <= MAX_STARTED_AT):
        problems.append(("corrupt", f"line {ref.line}: started_at {line.started_at!r} is not a unix time"))
    if duration > MAX_SECONDS:
        problems.append(("corrupt", f"line {ref.line}: duration {duration!r} s is beyond {MAX_SECONDS:g} s"))
    problems += _check_version(line, ref)
    if line.issued is not None:
        if line.issued > n:
            problems.append(("missing", f"line {ref.line}: LoadGen issued {line.issued} requests but the line holds "
                             f"{n}: {line.issued - n} were removed from the evidence"))
        elif line.issued < n:
            problems.append(("corrupt", f"line {ref.line}: it holds {n} requests but LoadGen issued {line.issued}"))
    return problems


PER_REQUEST_ARRAYS = ("generated_texts", "issue_delays", "input_lens_source", "output_lens_source",
                      "finish_reasons", "cache_hits")
"""Per-request arrays beyond the ones re-derived from: one entry per request each, or the line
describes two different sets of requests."""
BENCH_V2 = 2
"""The bench line version from which ``ended_at`` and ``server_counters`` are written (and required)."""
COUNTER_SIDES = ("before", "after")


def check_array_lengths(line: BenchRunLine, ref: LineRef, n: int) -> list[tuple[str, str]]:
    """Every per-request array holds one entry per request (``errors`` sets the count)."""
    problems = []
    for name in PER_REQUEST_ARRAYS:
        values = getattr(line, name)
        if values is not None and len(values) != n:
            problems.append(("corrupt", f"line {ref.line}: {name!r} has {len(values)} entries for {n} requests"))
    return problems


def check_issue_delays(line: BenchRunLine, ref: LineRef, n: int, duration: float) -> list[tuple[str, str]]:
    """A request is sent after LoadGen issued it and inside the rep: each delay finite, >= 0, within
    the duration."""
    if line.issue_delays is None or len(line.issue_delays) != n:
        return []
    delays = _as_array(line.issue_delays, "issue_delays", n)
    i = _first_over(delays, duration + max(TIMELINE_SLACK_S, TIMELINE_SLACK_REL * duration))
    if i is None:
        return []
    return [("corrupt", f"line {ref.line}: request {i} waited {float(delays[i]):.6g} s after LoadGen issued it, "
             f"in a rep of {duration:.6g} s")]


def check_chunks(ref: LineRef, gaps: np.ndarray, ok_out: np.ndarray, ok_idx: np.ndarray) -> list[tuple[str, str]]:
    """Each gap separates two streamed chunks and each chunk carries at least one token, so a request
    has at most ``output_len - 1`` gaps (chunked streaming has fewer); ``gaps`` counts each successful
    request's gaps. Held on harness lines, whose output lengths are the server's own count."""
    over = np.flatnonzero(gaps > np.maximum(ok_out - 1, 0))
    if not over.size:
        return []
    k = int(over[0])
    return [("corrupt", f"line {ref.line}: request {int(ok_idx[k])} has {int(gaps[k])} inter-token gaps but "
             f"{int(ok_out[k])} output tokens: more chunks than tokens")]


def server_counters(line: BenchRunLine, ref: LineRef) -> tuple[dict[str, float], dict[str, float]] | None:
    """The line's ``server_counters`` (numeric totals before and after the rep), or None. A harness
    line's object holds exactly ``before`` and ``after``, each an object."""
    value = raw_object(line.server_counters, "server_counters", ref)
    if value is None:
        return None
    if set(value) != set(COUNTER_SIDES) or not all(isinstance(value[k], dict) for k in COUNTER_SIDES):
        raise RepError("corrupt", f"line {ref.line}: 'server_counters' must hold the objects 'before' and "
                       f"'after' only, not {sorted(value)!r}")
    before, after = ({k: float(v) for k, v in value[side].items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
                     for side in COUNTER_SIDES)
    return before, after


CONCURRENCY_SLACK_S = 0.001
"""A request's end and the next one's start are two clock reads around one semaphore hand-over."""


def check_concurrency(line: BenchRunLine, ref: LineRef, starts: np.ndarray | None,
                      ends: np.ndarray) -> list[tuple[str, str]]:
    """No more requests in flight at once than the line's ``max_concurrency`` (from each request's start
    and latency: a sweep over the sorted start and end times; an end within the slack of a start
    releases its slot first)."""
    limit = line.max_concurrency
    if limit is None or starts is None or limit < 1 or not starts.size:
        return []
    # The count in flight peaks right after a start: just after the k-th start (in time order) it is k
    # minus the ends at or before that instant. Timsort ("stable") sorts the nearly ordered times a rep
    # writes in a fraction of a quicksort's time.
    first = np.sort(starts, kind="stable")
    done = np.sort(starts + ends - CONCURRENCY_SLACK_S, kind="stable")
    peak = int((np.arange(1, first.size + 1) - np.searchsorted(done, first, side="right")).max())
    if peak <= limit:
        return []
    return [("corrupt", f"line {ref.line}: {peak} requests were in flight at once (starts and latencies) but the "
             f"line says max_concurrency {limit}")]


def _usage_counted(line: BenchRunLine) -> bool:
    sources = line.output_lens_source
    return sources is not None and all(s == "usage" for s in sources)


def _check_version(line: BenchRunLine, ref: LineRef) -> list[tuple[str, str]]:
    """A line of bench version 2 or later records its end stamp and the server's counters (or says
    null where the server reports none); their absence is evidence removed."""
    if line.schema_version is None or line.schema_version < BENCH_V2:
        return []
    problems = []
    if line.ended_at is None:
        problems.append(("missing", f"line {ref.line}: a version-{line.schema_version} line without 'ended_at' "
                         "(the harness stamps every rep's end): the window the overlap check needs was removed"))
    elif line.started_at is not None and line.ended_at < line.started_at:
        problems.append(("corrupt", f"line {ref.line}: it ended ({line.ended_at!r}) before it started "
                         f"({line.started_at!r})"))
    if line.server_counters is NULL:  # the default object itself: the key is absent (an explicit null is a new Raw)
        problems.append(("missing", f"line {ref.line}: a version-{line.schema_version} line without "
                         "'server_counters' (the harness writes it, null when the server reports none)"))
    return problems


def _check_timeline(ref: LineRef, duration: float, ttfts: np.ndarray, starts: np.ndarray | None,
                    ends: np.ndarray) -> list[tuple[str, str]]:
    """Every time inside its container: TTFTs and latencies inside the rep, and the rep's request
    timeline (first start to last end) inside its duration. ``ends`` are request latencies."""
    problems = []
    limit = duration + max(TIMELINE_SLACK_S, TIMELINE_SLACK_REL * duration)
    i = _first_over(ttfts, limit)
    if i is not None:
        problems.append(("corrupt", f"line {ref.line}: request {i} has a TTFT of {float(ttfts[i]):.6g} s in a rep of "
                         f"{duration:.6g} s"))
    i = _first_over(ends, limit)
    if i is not None:
        problems.append(("corrupt", f"line {ref.line}: request {i} lasts {float(ends[i]):.6g} s in a rep of "
                         f"{duration:.6g} s"))
    if starts is not None and starts.size:
        i = _first_over(starts + ends, limit)
        if i is not None:
            problems.append(("corrupt", f"line {ref.line}: request {i} starts at {float(starts[i]):.6g} s and ends "
                             f"after the rep's duration of {duration:.6g} s"))
        span = float((starts + ends).max() - starts.min())
        if span > limit:
            problems.append(("corrupt", f"line {ref.line}: its requests span {span:.6g} s (first start to last end) "
                             f"but the rep's duration is {duration:.6g} s"))
    return problems


def _check_counts(line: BenchRunLine, ref: LineRef, m: dict[str, float]) -> list[tuple[str, str]]:
    problems = []
    for name in COUNT_FIELDS:
        stated, ours = getattr(line, name, None), m.get(name)
        if stated is not None and ours is not None and stated != ours:
            problems.append(("corrupt", f"line {ref.line}: it says {name}={stated} but its arrays give {ours:g}: the "
                             "line contradicts itself (requests removed or added after it was written)"))
    return problems


def _check_scale(line: BenchRunLine, ref: LineRef, m: dict[str, float]) -> list[tuple[str, str]]:
    problems = []
    for name in SCALE_CHECKED:
        stated, ours = getattr(line, name, None), m.get(name)
        if stated is None or ours is None or not math.isfinite(stated) or stated <= 0 or ours <= 0:
            continue
        ratio = stated / ours
        if ratio >= SCALE_FACTOR or ratio <= 1.0 / SCALE_FACTOR:
            hint = (" -- per-request times in milliseconds where the format has seconds?"
                    if 300 <= ratio <= 3000 or 1 / 3000 <= ratio <= 1 / 300 else "")
            problems.append(("corrupt", f"line {ref.line}: its own {name} {stated:.6g} is {ratio:.3g}x what its "
                             f"per-request arrays give ({ours:.6g}){hint}"))
    return problems


@dataclass(frozen=True)
class Required:
    """What a rep cannot be re-derived without, present and checked: its clock and its request outcomes."""

    duration: float
    errors: list[str | None]
    output_lens: list[int]
    ttfts: list[float]


def _check_required(line: BenchRunLine, ref: LineRef) -> Required:
    """The arrays and the clock a rep cannot be re-derived without."""
    for name in _REQUIRED_ARRAYS:
        if getattr(line, name) is None:
            raise RepError("missing", f"line {ref.line} has no {name!r} array")
    errors, duration, output_lens, ttfts = line.errors, line.duration, line.output_lens, line.ttfts
    if errors is None or output_lens is None or ttfts is None:  # the arrays above: the check narrows their types
        raise RepError("missing", f"line {ref.line} has no 'errors', 'output_lens' or 'ttfts' array")
    if duration is None:
        raise RepError("missing", f"line {ref.line} has no 'duration'")
    if not math.isfinite(duration) or duration <= 0:
        raise RepError("corrupt", f"line {ref.line} has duration {duration!r}")
    return Required(duration, errors, output_lens, ttfts)


def _new_record(line: BenchRunLine, ref: LineRef, leg: str, rep: int, n: int, n_ok: int,
                duration: float) -> RepMetrics:
    contention = raw_object(line.contention, "contention", ref)
    server_info = raw_object(line.server_info, "server_info", ref)
    return RepMetrics(leg=leg, rep=rep, ref=ref, n_requests=n, n_ok=n_ok, n_errors=n - n_ok,
                      duration_s=float(duration), accept_length=line.accept_length,
                      contention=contention, started_at=line.started_at, ended_at=line.ended_at,
                      schema_version=line.schema_version, loadgen_dir=loadgen_dir(line.loadgen, ref),
                      issued=line.issued, workload=_workload(line, ref),
                      server_info=flatten_json(server_info) if server_info is not None else None,
                      server_counters=server_counters(line, ref),
                      usage_counted=_usage_counted(line),
                      arrays=frozenset(name for name in OPTIONAL_ARRAYS if getattr(line, name) is not None),
                      foreign_stated=_foreign_stated(line, ref))


OPTIONAL_ARRAYS = ("input_lens", "itls", "request_starts", "latencies", "issue_delays", "cache_hits", "generated_texts",
                   "input_lens_source", "output_lens_source", "finish_reasons", "prompt_ids")
"""Per-request arrays a line may carry beyond the ones re-derivation needs."""


def _foreign_stated(line: BenchRunLine, ref: LineRef) -> dict[str, Any]:
    if not isinstance(line, ForeignBenchRunLine):
        return {}
    values = {name: _stated_value(getattr(line, name), name, ref) for name in FOREIGN_STATED}
    return {k: v for k, v in values.items() if v is not None}


def _stated_value(value: Any, name: str, ref: LineRef) -> Any:
    """A stated field as plain data: raw JSON decoded behind its limits, a typed field (a string) as it is."""
    return raw_json(value, name, ref) if isinstance(value, msgspec.Raw) else value


def _gaps(line: BenchRunLine, ref: LineRef, ok: np.ndarray, failed: list[int], duration: float,
          problems: list[tuple[str, str]]) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """The successful requests' gap counts, their flattened gaps and per-request sums (None without
    ``itls``). Flattened in C (``float_columns``), never element by element in Python: a 100k-request
    rep holds millions of gaps. The counts are taken once (the sums and the chunk check reuse them)."""
    itl_lists = line.itls
    if itl_lists is None:
        return None, None, None
    ok_lists = _kept(itl_lists, ok, failed) if failed else itl_lists
    lens = np.fromiter(map(len, ok_lists), dtype=np.intp, count=len(ok_lists))
    gaps = flat_float_array(ok_lists, int(lens.sum()))
    if gaps.size:
        low, high = float(gaps.min()), float(gaps.max())  # a NaN propagates into both and fails both tests
        if not (low >= 0 and math.isfinite(high)):
            raise RepError("corrupt", f"line {ref.line}: 'itls' holds negative or non-finite gaps")
        if high > MAX_SECONDS:
            raise RepError("corrupt", f"line {ref.line}: an inter-token gap of {high!r} s is not a time")
    if failed:  # a failed request's partial gaps are times too: bounded like the others
        failed_max = max((max(itl_lists[i]) for i in failed if itl_lists[i]), default=0.0)
        if not math.isfinite(failed_max) or failed_max > duration:
            problems.append(("corrupt", f"line {ref.line}: a failed request's gap of {failed_max!r} s "
                             "exceeds the rep's duration"))
    return lens, gaps, _segment_sums(gaps, lens)


def _kept(items: list[Any], ok: np.ndarray, failed: list[int]) -> list[Any]:
    """The ``items`` of the successful requests (``ok``; ``failed`` lists the others, ascending). A rep's
    few failed requests cost a few slice copies; many, one ``compress`` over the mask as Python bools
    (iterating the numpy mask itself would make one numpy scalar per request)."""
    if len(failed) > len(items) // 64:
        return list(itertools.compress(items, ok.tolist()))
    kept: list[Any] = []
    start = 0
    for i in failed:
        kept += items[start:i]
        start = i + 1
    kept += items[start:]
    return kept


def _check_latencies(ref: LineRef, ok_idx: np.ndarray, ok_ttft: np.ndarray, e2e: np.ndarray | None,
                     all_latencies: np.ndarray | None, sums: np.ndarray | None) -> list[tuple[str, str]]:
    """A request ends after its first token, and no sooner than its first token plus its gaps."""
    problems = []
    if e2e is not None and np.any(e2e + 1e-9 < ok_ttft):
        problems.append(("corrupt", f"line {ref.line}: a request ends before its first token"))
    if all_latencies is not None and sums is not None and e2e is not None:
        need = ok_ttft + sums
        short = np.flatnonzero(e2e + np.maximum(LATENCY_SLACK_S, LATENCY_SLACK_REL * e2e) < need)
        if short.size:
            i = int(ok_idx[short[0]])
            problems.append(("corrupt", f"line {ref.line}: {short.size} request(s) end before their own tokens "
                             f"arrived (request {i}: latency {float(all_latencies[i]):.6g} s < TTFT + gaps "
                             f"{float(need[short[0]]):.6g} s)"))
    return problems


def rederive_rep(line: BenchRunLine, ref: LineRef, leg: str, rep_index: int) -> RepMetrics:
    """Re-derive one rep; raise ``RepError`` when a needed array is absent or the rep is inconsistent."""
    required = _check_required(line, ref)
    duration, errors = required.duration, required.errors
    n = len(errors)
    rep = line.rep if line.rep is not None else rep_index
    problems = _check_header(line, ref, rep, n, duration)
    if duration > MAX_SECONDS:  # nothing measured against this clock can mean anything
        raise RepError.of(problems)
    problems += check_array_lengths(line, ref, n)
    out_lens = _as_array(required.output_lens, "output_lens", n)
    ttfts = _as_array(required.ttfts, "ttfts", n)
    # The failed requests (a non-empty error) picked in C by truthiness, as ``not error`` would judge each:
    # a fraction of the time of one numpy bool per request through the iterator protocol.
    failed = list(itertools.compress(range(n), errors))
    ok = np.ones(n, dtype=bool)
    ok[failed] = False
    n_ok = n - len(failed)
    result = _new_record(line, ref, leg, rep, n, n_ok, duration)
    in_lens = _as_array(line.input_lens, "input_lens", n) if line.input_lens is not None else None
    result.prompt_digest, result.lens_digest = _prompt_digests(line, n, in_lens)
    result.error_samples = list(itertools.islice(filter(None, errors), 3))
    starts = _as_array(line.request_starts, "request_starts", n) if line.request_starts is not None else None
    all_latencies = _as_array(line.latencies, "latencies", n) if line.latencies is not None else None
    problems += check_issue_delays(line, ref, n, duration)
    if n_ok == 0:  # a rep whose every request failed is request errors, not corrupt evidence
        problems += _check_timeline(ref, duration, ttfts, starts,
                                    all_latencies if all_latencies is not None else np.zeros(n))
        if problems:
            raise RepError.of(problems)
        result.missing = list(METRICS)
        return result
    if line.itls is not None and len(line.itls) != n:
        raise RepError("corrupt", f"'itls' has {len(line.itls)} entries, expected {n}")
    all_ok = n_ok == n
    ok_idx = np.flatnonzero(ok)
    ok_ttft = ttfts if all_ok else ttfts[ok_idx]
    ok_out = out_lens if all_ok else out_lens[ok_idx]
    gap_counts, gaps, sums = _gaps(line, ref, ok, failed, duration, problems)
    if line.schema_version is not None and gap_counts is not None:
        problems += check_chunks(ref, gap_counts, ok_out, ok_idx)
    e2e: np.ndarray | None
    if all_latencies is not None:
        e2e = all_latencies if all_ok else all_latencies[ok_idx]
    else:
        e2e = ok_ttft + sums if sums is not None else None
    problems += _check_latencies(ref, ok_idx, ok_ttft, e2e, all_latencies, sums)
    # Container bounds: over every request (a failed one's partial latency included).
    ends = all_latencies if all_latencies is not None else np.zeros(n)
    if e2e is not None and all_latencies is None:
        ends = np.zeros(n)
        ends[ok_idx] = e2e
    problems += _check_timeline(ref, duration, ttfts, starts, ends)
    if all_latencies is not None:
        problems += check_concurrency(line, ref, starts, all_latencies)
    result.max_latency_s = float(ends.max()) if ends.size else None
    result.first_start_s = float(starts.min()) if starts is not None and starts.size else None
    _clock_witnesses(line, result, starts, all_latencies)
    _derive_metrics(line, ref, result, ok_idx, all_ok, ok_ttft, ok_out, in_lens, e2e, gaps, problems)
    result.timing_digest = _timing_digest(ttfts, e2e)
    return result


def _clock_witnesses(line: BenchRunLine, result: RepMetrics, starts: np.ndarray | None,
                     latencies: np.ndarray | None) -> None:
    """What the line states of its own clock that other records witness: its last request's end, its
    requests' issue-to-completion times, and LoadGen's wall time."""
    if starts is not None and latencies is not None and starts.size:
        result.last_end_s = float((starts + latencies).max())
    if line.issue_delays is not None and latencies is not None and len(line.issue_delays) == latencies.size > 0:
        issued = np.fromiter(line.issue_delays, dtype=float, count=latencies.size) + latencies
        result.loadgen_latency_s = (float(issued.min()), float(issued.mean()), float(issued.max()))
    value = raw_json(line.loadgen, "loadgen", result.ref)
    wall = value.get("wall_s") if isinstance(value, dict) else None
    if isinstance(wall, (int, float)) and not isinstance(wall, bool) and math.isfinite(wall):
        result.loadgen_wall_s = float(wall)


def _derive_metrics(line: BenchRunLine, ref: LineRef, result: RepMetrics, ok_idx: np.ndarray, all_ok: bool,
                    ok_ttft: np.ndarray, ok_out: np.ndarray, in_lens: np.ndarray | None, e2e: np.ndarray | None,
                    gaps: np.ndarray | None, problems: list[tuple[str, str]]) -> None:
    """The rep's metrics from its arrays, then its own counts and aggregates held against them."""
    n_ok = result.n_ok
    # A time beyond its container is already a recorded problem; it may overflow once scaled to ms,
    # which the finite check below turns into one more problem instead of a warning.
    with np.errstate(over="ignore", invalid="ignore"):
        m = result.metrics
        total_out = float(ok_out.sum())
        m["output_throughput"] = total_out / result.duration_s
        m["request_throughput"] = n_ok / result.duration_s
        m["completed"] = float(n_ok)
        m["total_output_tokens"] = total_out
        if in_lens is not None:
            total_in = float((in_lens if all_ok else in_lens[ok_idx]).sum())
            m["total_input_tokens"] = total_in
            m["total_throughput"] = (total_out + total_in) / result.duration_s
        else:
            result.missing.append("total_throughput")
        result.sums["ttft_s"] = float(ok_ttft.sum())
        if e2e is not None:
            result.sums["e2e_s"] = float(e2e.sum())
        ttft_ms = ok_ttft * 1000.0
        m["median_ttft_ms"], m["p99_ttft_ms"] = _median_p99(ttft_ms)
        _latency_metrics(result, ok_out, ttft_ms, e2e)
        if gaps is not None and gaps.size:
            med, p99 = _median_p99(gaps)  # seconds; scaled after the selection (no copy of the gaps)
            m["median_itl_ms"], m["p99_itl_ms"] = med * 1000.0, p99 * 1000.0
        else:
            result.missing += ["median_itl_ms", "p99_itl_ms"]
        result.mean_output_len = float(ok_out.mean())
        low, mid, high = _quantiles(ok_out, (0.1, 0.5, 0.9))
        result.output_len_quantiles = (low, mid, high)
        budget = result.workload.get("request_params.max_tokens")
        if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 1 and float(ok_out.max()) > budget:
            problems.append(("corrupt", f"line {ref.line}: a request returned {int(ok_out.max())} tokens, "
                             f"more than its max_tokens {budget}"))
        if line.cache_hits is not None:
            hits = _as_array(line.cache_hits, "cache_hits", result.n_requests)[ok_idx]
            in_total = float(in_lens[ok_idx].sum()) if in_lens is not None else 0.0
            result.cache_hit_rate = float(hits.sum() / in_total) if in_total > 0 else None
    bad = sorted(k for k, v in m.items() if not math.isfinite(v))
    if bad or not math.isfinite(result.mean_output_len):
        problems.append(("corrupt", f"line {ref.line}: values too large to re-derive finite "
                         f"{bad or ['output lengths']!r}"))
        raise RepError.of(problems)
    problems += _check_counts(line, ref, m) + _check_scale(line, ref, m)
    if problems:
        raise RepError.of(problems)
    for name in CROSS_CHECKED:
        value = getattr(line, name, None)
        if value is not None:
            result.reported[name] = float(value)


def _latency_metrics(result: RepMetrics, ok_out: np.ndarray, ttft_ms: np.ndarray, e2e: np.ndarray | None) -> None:
    m = result.metrics
    if e2e is None:
        result.missing += ["median_e2e_latency_ms", "p99_e2e_latency_ms", "median_tpot_ms", "p99_tpot_ms"]
        return
    e2e_ms = e2e * 1000.0
    m["median_e2e_latency_ms"], m["p99_e2e_latency_ms"] = _median_p99(e2e_ms)
    multi = ok_out > 1
    if np.any(multi):
        tpot = (e2e_ms[multi] - ttft_ms[multi]) / (ok_out[multi] - 1)
        m["median_tpot_ms"], m["p99_tpot_ms"] = _median_p99(tpot)
    else:
        result.missing += ["median_tpot_ms", "p99_tpot_ms"]
