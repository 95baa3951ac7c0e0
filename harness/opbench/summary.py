"""A human summary of an ``opbench.jsonl`` (reports and the CLI only: the auditor re-derives its own)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from perfwarden.formats.jsonl import OpBenchLine, read_jsonl


def _all_correct(values: list[bool | None]) -> bool | None:
    """``False`` if any row was wrong, ``True`` if every row was checked and right, else ``None``: a
    shape that was not checked (Triton too large for the interpreter, triton missing) is never shown
    as incorrect."""
    if any(v is False for v in values):
        return False
    if values and all(v is True for v in values):
        return True
    return None


def summarize(path: Path | str) -> dict[str, Any]:
    """Per backend and shape: median ms call by call and by graph replay, speedups over the reference
    (reference median / backend median), correctness (``None`` = not checked), largest error."""
    report = read_jsonl(Path(path), OpBenchLine)
    per: dict[str, dict[str, dict[str, Any]]] = {}
    for _, r in report.records:
        shape = "x".join(map(str, r.shape)) if isinstance(r.shape, list) else str(r.shape)
        cell = per.setdefault(r.backend, {}).setdefault(shape, {
            "times": [], "graph": [], "correct": [], "raised": None, "max_rel_err": None, "measured": True,
            "is_reference": bool(r.is_reference), "impl_sha256": r.impl_sha256, "device": r.device})
        cell["times"].extend(r.times_ms or [])
        cell["graph"].extend(r.graph_times_ms or [])
        cell["correct"].append(r.correct)
        cell["raised"] = cell["raised"] or r.raised
        cell["measured"] = cell["measured"] and r.measured
        if r.max_rel_err is not None:
            cell["max_rel_err"] = max(cell["max_rel_err"] or 0.0, r.max_rel_err)
    ref = next((b for b, shapes in per.items() if any(c["is_reference"] for c in shapes.values())), None)

    def med(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    out: dict[str, Any] = {}
    for backend, shapes in per.items():
        out[backend] = {}
        for shape, cell in shapes.items():
            ref_cell = per.get(ref, {}).get(shape) if ref else None
            mine, theirs = med(cell["times"]), med(ref_cell["times"]) if ref_cell else None
            g_mine, g_theirs = med(cell["graph"]), med(ref_cell["graph"]) if ref_cell else None
            out[backend][shape] = {
                "median_ms": mine, "speedup": (theirs / mine) if mine and theirs else None,
                "graph_median_ms": g_mine, "graph_speedup": (g_theirs / g_mine) if g_mine and g_theirs else None,
                "correct": _all_correct(cell["correct"]), "max_rel_err": cell["max_rel_err"],
                "raised": cell["raised"], "measured": cell["measured"], "impl_sha256": cell["impl_sha256"],
                "is_reference": cell["is_reference"], "device": cell["device"]}
    return out
