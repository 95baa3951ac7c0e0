"""Re-derive one rep's metrics from its per-request arrays (never from the line's own aggregates).

Units follow sglang's bench_serving: per-request ``ttfts``/``itls``/``latencies`` are seconds; the
metrics returned here are milliseconds for latencies and per-second for throughputs. A request counts as
successful when its error string is empty, as in sglang (``completed`` counts successes only).

Per-request e2e latency is ``latencies`` when the file has it (perfwarden adds it), else
``ttft + sum(itls)`` -- sglang's own output has no per-request latency array, and the sum of gaps ends
at the last token, which is when sglang stops its clock too. TPOT per request is
``(e2e - ttft) / (output_len - 1)`` for requests with more than one output token, as in sglang.
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass, field

import numpy as np

from perfwarden.harness.jsonl import BenchRunLine, LineRef

# Metric -> whether higher is better. The one place that says which way each metric improves.
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


class RepError(ValueError):
    """The line cannot be re-derived: message says which field and why (a corrupt or missing case)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "missing" | "corrupt"


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
    contention: dict | None = None
    started_at: float | None = None
    reported: dict[str, float] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Optional metrics that could not be derived (e.g. no ITLs because every output is one token)."""


def _as_array(values, name: str, n: int) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (OverflowError, ValueError, TypeError) as exc:  # e.g. an integer beyond float range
        raise RepError("corrupt", f"{name!r} holds values that are not finite numbers ({exc})") from None
    if arr.shape != (n,):
        raise RepError("corrupt", f"{name!r} has {arr.size} entries, expected {n}")
    if not np.all(np.isfinite(arr)):
        raise RepError("corrupt", f"{name!r} holds non-finite values")
    if np.any(arr < 0):
        raise RepError("corrupt", f"{name!r} holds negative values")
    return arr


def _median_p99(values: np.ndarray) -> tuple[float, float]:
    """``np.median`` and ``np.percentile(.., 99)`` of ``values`` from one sort.

    Both run on the sorted copy, so they pick exactly the elements (and interpolate exactly as) they
    would on the unsorted array; one SIMD sort is cheaper than the two selections they would do.
    """
    ordered = np.sort(values)
    return float(np.median(ordered)), float(np.percentile(ordered, 99))


_MAX_SECONDS = float(np.finfo(float).max) / 1000.0


def _segment_sums(gaps: np.ndarray, lists: list[list[float]]) -> np.ndarray:
    """Per-request sums of the flattened gaps (``np.add.reduceat``; a request without gaps sums to 0).

    Vectorized: ``math.fsum`` per request cost ~0.1 s per million gaps, a third of the decode itself.
    The sums can differ from a correctly rounded ``fsum`` in the last bit or two, far below any
    threshold the gates use. An overflowing sum becomes inf, which ``_check_finite`` rejects.
    """
    lens = np.fromiter(map(len, lists), dtype=np.intp, count=len(lists))
    if lens.size == 0:
        return np.zeros(0)
    starts = np.zeros(lens.size, dtype=np.intp)
    np.cumsum(lens[:-1], out=starts[1:])
    # A trailing 0.0 makes every start a valid index (trailing empty lists) and adds nothing exactly.
    with np.errstate(over="ignore"):
        sums = np.add.reduceat(np.append(gaps, 0.0), starts)
    sums[lens == 0] = 0.0  # reduceat returns the element at an empty segment's start, not 0
    return sums


def _check_finite(ref: LineRef, *arrays: np.ndarray | None) -> None:
    """Seconds must stay finite in milliseconds: a value near the float maximum is damage, and would
    otherwise turn into inf (or NaN) inside a percentile without failing anything."""
    for arr in arrays:
        if arr is not None and arr.size and not float(arr.max()) <= _MAX_SECONDS:
            raise RepError("corrupt", f"line {ref.line}: a per-request time is too large to be a time "
                           f"({float(arr.max())!r} s)")


def rederive_rep(line: BenchRunLine, ref: LineRef, leg: str, rep_index: int) -> RepMetrics:
    """Re-derive one rep; raise ``RepError`` when a needed array is absent or inconsistent."""
    for name in _REQUIRED_ARRAYS:
        if getattr(line, name) is None:
            raise RepError("missing", f"line {ref.line} has no {name!r} array")
    if line.duration is None:
        raise RepError("missing", f"line {ref.line} has no 'duration'")
    if not math.isfinite(line.duration) or line.duration <= 0:
        raise RepError("corrupt", f"line {ref.line} has duration {line.duration!r}")
    n = len(line.errors)
    out_lens = _as_array(line.output_lens, "output_lens", n)
    ttfts = _as_array(line.ttfts, "ttfts", n)
    ok = np.fromiter(map(operator.not_, line.errors), dtype=bool, count=n)
    n_ok = int(ok.sum())
    rep = line.rep if line.rep is not None else rep_index
    result = RepMetrics(leg=leg, rep=rep, ref=ref, n_requests=n, n_ok=n_ok, n_errors=n - n_ok,
                        duration_s=float(line.duration), accept_length=line.accept_length,
                        contention=line.contention, started_at=line.started_at)
    result.error_samples = [e for e in line.errors if e][:3]
    if n_ok == 0:  # a rep whose every request failed is request errors, not corrupt evidence
        result.missing = list(METRICS)
        return result
    if line.request_starts is not None:
        _as_array(line.request_starts, "request_starts", n)

    itl_lists = line.itls
    if itl_lists is not None and len(itl_lists) != n:
        raise RepError("corrupt", f"'itls' has {len(itl_lists)} entries, expected {n}")
    all_ok = n_ok == n
    ok_idx = np.flatnonzero(ok)
    ok_ttft = ttfts if all_ok else ttfts[ok_idx]
    ok_out = out_lens if all_ok else out_lens[ok_idx]
    # The successful requests' gap lists, flattened in C (chain + fromiter), never element by element
    # in Python: a 100k-request rep holds millions of gaps.
    ok_lists = gaps = None
    if itl_lists is not None:
        ok_lists = itl_lists if all_ok else list(itertools.compress(itl_lists, ok))
        gaps = np.fromiter(itertools.chain.from_iterable(ok_lists), dtype=float,
                           count=sum(map(len, ok_lists)))
        if not np.all(np.isfinite(gaps)) or np.any(gaps < 0):
            raise RepError("corrupt", f"line {ref.line}: 'itls' holds negative or non-finite gaps")
    if line.latencies is not None:
        e2e = _as_array(line.latencies, "latencies", n)
        if not all_ok:
            e2e = e2e[ok_idx]
    elif ok_lists is not None:
        e2e = ok_ttft + _segment_sums(gaps, ok_lists)
    else:
        e2e = None
    if e2e is not None and np.any(e2e + 1e-9 < ok_ttft):
        raise RepError("corrupt", f"line {ref.line}: a request ends before its first token")

    m = result.metrics
    _check_finite(ref, ok_ttft, e2e, gaps)
    total_out = float(ok_out.sum())
    m["output_throughput"] = total_out / line.duration
    m["request_throughput"] = n_ok / line.duration
    m["completed"] = float(n_ok)
    m["total_output_tokens"] = total_out
    if line.input_lens is not None:
        in_lens = _as_array(line.input_lens, "input_lens", n)
        total_in = float((in_lens if all_ok else in_lens[ok_idx]).sum())
        m["total_input_tokens"] = total_in
        m["total_throughput"] = (total_out + total_in) / line.duration
    else:
        result.missing.append("total_throughput")
    ttft_ms = ok_ttft * 1000.0
    m["median_ttft_ms"], m["p99_ttft_ms"] = _median_p99(ttft_ms)
    if e2e is not None:
        e2e_ms = e2e * 1000.0
        m["median_e2e_latency_ms"], m["p99_e2e_latency_ms"] = _median_p99(e2e_ms)
        multi = ok_out > 1
        if np.any(multi):
            tpot = (e2e_ms[multi] - ttft_ms[multi]) / (ok_out[multi] - 1)
            m["median_tpot_ms"], m["p99_tpot_ms"] = _median_p99(tpot)
        else:
            result.missing += ["median_tpot_ms", "p99_tpot_ms"]
    else:
        result.missing += ["median_e2e_latency_ms", "p99_e2e_latency_ms", "median_tpot_ms", "p99_tpot_ms"]
    if gaps is not None:
        if gaps.size:
            m["median_itl_ms"], m["p99_itl_ms"] = _median_p99(gaps * 1000.0)
        else:
            result.missing += ["median_itl_ms", "p99_itl_ms"]
    else:
        result.missing += ["median_itl_ms", "p99_itl_ms"]

    result.mean_output_len = float(ok_out.mean())
    result.output_len_quantiles = tuple(float(q) for q in np.percentile(ok_out, [10, 50, 90]))
    if line.cache_hits is not None:
        hits = _as_array(line.cache_hits, "cache_hits", n)[ok_idx]
        in_total = float(np.asarray(line.input_lens, dtype=float)[ok_idx].sum()) if line.input_lens else 0.0
        result.cache_hit_rate = float(hits.sum() / in_total) if in_total > 0 else None
    bad = sorted(k for k, v in m.items() if not math.isfinite(v))
    if bad or not math.isfinite(result.mean_output_len):
        raise RepError("corrupt", f"line {ref.line}: values too large to re-derive finite {bad or ['output lengths']!r}")
    for name in CROSS_CHECKED:
        value = getattr(line, name, None)
        if value is not None:
            result.reported[name] = float(value)
    return result
