"""Which logical op a profile row measures, and the ops ranked by their share of profiled time.

The profile's own reading of its rows (``harness/jsonl.py`` ``ProfileLine``), kept beside the record
format so that the producer that routes the hot op (the graph's profile step) and the auditor that
re-derives the routed op's rank (``auditor/gates/profile.py``) read one definition, and neither imports
the other (a producer that picked the hot op with the auditor's own function would hand the auditor
its own answer to check).
"""

from __future__ import annotations

import re
from collections import defaultdict

from perfwarden.harness.jsonl import LineRef, ProfileLine

_FRAGMENT_SUFFIX = re.compile(r"(_\d+|<.*>|\(.*\)|_kernel|_fwd|_impl|::\w+)$")


def canonical_op(row: ProfileLine) -> str:
    """Logical op of a profile row: its ``op`` field, else its kernel name without fragment suffixes
    (``rmsnorm_kernel_0``, ``rmsnorm_kernel<float>`` and ``rmsnorm`` are one op)."""
    if row.op:
        return row.op.strip().lower()
    name = row.name.strip().lower()
    while True:
        stripped = _FRAGMENT_SUFFIX.sub("", name)
        if stripped == name or not stripped:
            return name
        name = stripped


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
