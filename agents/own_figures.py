"""A producer's own reading of its own client's numbers: the bench lines its LoadGen client wrote for
the legs it measured, read with the producer's code (never the auditor's), so that every figure a claim
states -- the headline delta, a disclosed regression -- is the producer's, and the auditor's re-derivation
is an independent check of it (REPORTED_MISMATCH when they disagree beyond tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from statistics import median

import msgspec
from pydantic import BaseModel, ConfigDict

from perfwarden.formats.jsonl import DECODE_ERRORS, BenchRunLine, decode_line
from perfwarden.formats.slo import GoodputSlo


class LegReading(BaseModel):
    """One metric of an A/B as the producer read it: each rep's aggregate, per leg, and the delta."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    baseline: list[float]
    """The baseline leg's per-rep values (the client's aggregates, in file order)."""
    candidate: list[float]
    """The candidate leg's per-rep values."""
    delta_pct: float
    """Relative change of the candidate's median over the baseline's, in percent."""


_BENCH_LINE = msgspec.json.Decoder(BenchRunLine)


def read_reps(bench: Path) -> list[BenchRunLine]:
    """The bench lines of one leg that decode (a torn tail is skipped: the auditor judges the file)."""
    out: list[BenchRunLine] = []
    if not bench.is_file():
        return out
    for line in bench.read_bytes().splitlines():
        try:
            out.append(decode_line(_BENCH_LINE, line))
        except DECODE_ERRORS:
            continue
    return out


GOODPUT = "request_goodput"
"""The goodput metric: the client writes no such aggregate, so the producer counts it from the requests."""


def rep_goodput(line: BenchRunLine, slo: GoodputSlo) -> float | None:
    """Requests per second of the rep that met every limit of ``slo`` (vLLM's ``--goodput``, DistServe's
    goodput): over the successful requests, TTFT, TPOT ((latency - TTFT) / (tokens - 1), 0 for one token)
    and end-to-end latency each at most its limit. None when the line lacks what that needs."""
    if line.duration is None or line.duration <= 0 or line.ttfts is None or line.output_lens is None \
            or line.errors is None or (line.latencies is None and line.itls is None):
        return None
    good = 0
    for i, error in enumerate(line.errors):
        if error:
            continue
        ttft, tokens = line.ttfts[i], line.output_lens[i]
        latency = line.latencies[i] if line.latencies is not None else ttft + sum(line.itls[i])  # type: ignore[index]
        tpot = (latency - ttft) / (tokens - 1) if tokens > 1 else 0.0
        if all(measured <= limit / 1000.0 for measured, limit in
               ((ttft, slo.ttft_ms), (tpot, slo.tpot_ms), (latency, slo.e2el_ms)) if limit is not None):
            good += 1
    return good / line.duration


def rep_values(reps: list[BenchRunLine], metric: str, slo: GoodputSlo | None = None) -> list[float]:
    """Each rep's finite value of ``metric`` (goodput counted at ``slo``; none without one)."""
    if metric == GOODPUT:
        values: Iterable[object] = (rep_goodput(r, slo) for r in reps) if slo is not None else ()
    else:
        values = (getattr(r, metric, None) for r in reps)
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def read_ab(run: Path, legs: list[str] | tuple[str, str], metric: str = "output_throughput",
            slo: GoodputSlo | None = None) -> LegReading | None:
    """The producer's reading of ``metric`` over its A/B legs (baseline, candidate); None without data."""
    if len(legs) != 2:
        return None
    base, cand = (rep_values(read_reps(Path(run) / "legs" / leg / "bench_runs.jsonl"), metric, slo) for leg in legs)
    if not base or not cand or median(base) <= 0:
        return None
    return LegReading(metric=metric, baseline=base, candidate=cand,
                      delta_pct=round((median(cand) / median(base) - 1.0) * 100.0, 2))


def own_regressions(run: Path, legs: list[str], metrics: list[str]) -> dict[str, float]:
    """Percent change of each latency metric's median, candidate leg vs baseline leg (one decimal)."""
    stated: dict[str, float] = {}
    for metric in metrics:
        reading = read_ab(run, legs, metric)
        if reading is not None:
            stated[metric] = round(reading.delta_pct, 1)
    return stated
