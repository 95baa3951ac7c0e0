"""Profile scope: the op routed for optimization must really be hot once fragments are merged."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from perfwarden.auditor.evidence import line_evidence
from perfwarden.auditor.findings import Findings, GateResult
from perfwarden.formats.jsonl import LineRef, ProfileLine
from perfwarden.formats.op_names import canonical_op

HOT_SHARE = 0.05
"""An op worth optimizing takes at least this share of profiled time..."""
HOT_RANK = 5
"""...and ranks among this many hottest ops after merging fragments."""


def rank_ops(rows: list[tuple[LineRef, ProfileLine]]) -> list[tuple[str, float]]:
    """(op, share of total self time), hottest first, each op's kernel fragments merged: the auditor's own
    ranking of the profile's rows, never the producer's (which routed the op this gate checks)."""
    merged: dict[str, float] = defaultdict(float)
    for _, row in rows:
        merged[canonical_op(row)] += row.self_time_us
    total = sum(merged.values())
    if total <= 0:
        return []
    return sorted(((op, t / total) for op, t in merged.items()), key=lambda kv: (-kv[1], kv[0]))


def check_routed_op(run: Path, rows: list[tuple[LineRef, ProfileLine]], op: str | None,
                    reported_share: object) -> GateResult[list[tuple[str, float]]]:
    findings = Findings()
    ranking = rank_ops(rows)
    if not ranking:
        findings.add("EVIDENCE_MISSING", "FAIL", "the profile has no positive self time", gate="profile")
        return GateResult(findings.items, [], ranking)
    if op is None:
        findings.add("EVIDENCE_MISSING", "FAIL", "the profile claim names no routed op", gate="profile")
        return GateResult(findings.items, [], ranking)
    shares = dict(ranking)
    rank = next((i for i, (name, _) in enumerate(ranking, 1) if name == op.lower()), None)
    share = shares.get(op.lower(), 0.0)
    op_rows = [ref for ref, row in rows if canonical_op(row) == op.lower()]
    evidence = [line_evidence(run, ref) for ref in op_rows[:3]] or [line_evidence(run, rows[0][0])]
    if rank is None or share < HOT_SHARE or rank > HOT_RANK:
        findings.add("PROFILE_MISATTRIBUTION", "FAIL", f"routed op {op!r} takes {share:.1%} of profiled time "
                     f"(rank {rank or 'absent'}); the hottest is {ranking[0][0]!r} at {ranking[0][1]:.1%}",
                     measured={"share": round(share, 4), "rank": rank},
                     threshold={"min_share": HOT_SHARE, "max_rank": HOT_RANK}, evidence=evidence,
                     action="eject", gate="profile")
    if isinstance(reported_share, (int, float)) and not isinstance(reported_share, bool):
        if abs(reported_share - share) > max(0.02, 0.1 * share):
            findings.add("REPORTED_MISMATCH", "FLAG", f"reported share of {op!r} {reported_share:.3f} vs re-derived "
                         f"{share:.3f} (fragments merged)", measured=round(share, 4), threshold=reported_share,
                         evidence=evidence, action="flag", gate="profile")
    return GateResult(findings.items, [], ranking)
