"""The ops of a profile ranked by their share of profiled time, fragments merged: the producer's reading
of its own profile (the graph's profile step routes the hottest overridable op). The auditor ranks the
same rows with its own arithmetic (``auditor/gates/profile.py``); both name ops by
``formats/op_names.py``.
"""

from __future__ import annotations

from collections import defaultdict

from perfwarden.formats.jsonl import LineRef, ProfileLine
from perfwarden.formats.op_names import canonical_op


def merged_op_times(rows: list[tuple[LineRef, ProfileLine]]) -> dict[str, float]:
    """Merge fragmented kernels (one op under many kernel names) before ranking."""
    merged: dict[str, float] = defaultdict(float)
    for _, row in rows:
        merged[canonical_op(row)] += row.self_time_us
    return dict(merged)


def rank_ops(rows: list[tuple[LineRef, ProfileLine]]) -> list[tuple[str, float]]:
    """(op, share of total self time), hottest first (fragments merged)."""
    merged = merged_op_times(rows)
    total = sum(merged.values())
    if total <= 0:
        return []
    return sorted(((op, t / total) for op, t in merged.items()), key=lambda kv: (-kv[1], kv[0]))
