"""Pair two runs (or two verdicts) and say what changed between them, claim by claim.

Verdicts are paired by ``<seq>-<scope>`` (the name their files share), then leftover ones by scope in
order, so two runs of the same plan line up claim for claim and two single verdict files always pair.
Numbers compared are the auditor's re-derived ones (rep medians per role), never a producer's.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfwarden.orchestrator.review.model import RunReview, VerdictEntry

PLOT_METRICS: dict[str, str] = {
    "output_throughput": "output throughput (tok/s)",
    "median_ttft_ms": "TTFT, median of requests (ms)",
    "median_tpot_ms": "TPOT, median of requests (ms)",
}
"""Metrics drawn per leg and compared between runs: throughput, TTFT, TPOT (rep-level values)."""


@dataclass
class Pair:
    """A verdict of run A and its counterpart in run B (either may be missing)."""

    a: VerdictEntry | None
    b: VerdictEntry | None

    @property
    def key(self) -> str:
        return (self.a or self.b).key  # type: ignore[union-attr]

    def codes(self) -> tuple[list[str], list[str], list[str]]:
        """(only in A, only in B, in both) finding codes that decide (INFO excluded)."""
        ca = {f.code for f in self.a.verdict.findings if f.severity != "INFO"} if self.a else set()
        cb = {f.code for f in self.b.verdict.findings if f.severity != "INFO"} if self.b else set()
        return sorted(ca - cb), sorted(cb - ca), sorted(ca & cb)


def pair_entries(a: list[VerdictEntry], b: list[VerdictEntry]) -> list[Pair]:
    """Pair by key first, then remaining verdicts of the same scope in seq order, then leftovers."""
    pairs: list[Pair] = []
    rest_b = list(b)
    unpaired_a: list[VerdictEntry] = []
    for ea in a:
        match = next((eb for eb in rest_b if eb.key == ea.key), None)
        if match is None:
            unpaired_a.append(ea)
            continue
        rest_b.remove(match)
        pairs.append(Pair(ea, match))
    for ea in unpaired_a:
        match = next((eb for eb in rest_b if eb.verdict.scope == ea.verdict.scope), None)
        if match is not None:
            rest_b.remove(match)
        pairs.append(Pair(ea, match))
    pairs.extend(Pair(None, eb) for eb in rest_b)
    return pairs


def role_median(entry: VerdictEntry | None, role: str, metric: str) -> float | None:
    """Re-derived rep median of ``metric`` for the leg playing ``role`` in this verdict."""
    if entry is None:
        return None
    leg = entry.role_legs().get(role)
    stats = entry.verdict.legs.get(leg, {}).get(metric) if leg else None
    return stats.median if stats is not None else None


def change_pct(a: float | None, b: float | None) -> float | None:
    """B relative to A in percent (None when either is missing or A is zero)."""
    if a is None or b is None or a == 0:
        return None
    return (b / a - 1.0) * 100.0


@dataclass
class MetricRow:
    """One metric of one role, A vs B."""

    role: str
    metric: str
    a: float | None
    b: float | None

    @property
    def change(self) -> float | None:
        return change_pct(self.a, self.b)


def metric_rows(pair: Pair) -> list[MetricRow]:
    """Baseline and candidate medians of the plotted metrics, A vs B (rows where both are absent
    are dropped)."""
    rows = []
    for role in ("baseline", "candidate"):
        for metric in PLOT_METRICS:
            row = MetricRow(role, metric, role_median(pair.a, role, metric), role_median(pair.b, role, metric))
            if row.a is not None or row.b is not None:
                rows.append(row)
    return rows


@dataclass
class Comparison:
    """Two reviews side by side."""

    a: RunReview
    b: RunReview
    pairs: list[Pair]


def compare(a: RunReview, b: RunReview) -> Comparison:
    return Comparison(a, b, pair_entries(a.entries, b.entries))
