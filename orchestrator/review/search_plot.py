"""The search study's history as a small self-contained SVG (report.md and the HTML review).

Rows come from ``report.json``'s ``search_history`` (written by orchestrator/report.py from the run's
state, agents/search.py ``history``) and are read as hostile input: only numbers and booleans are
drawn, anything else in a row drops the row, and at most ``MAX_ROWS`` rows are drawn.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from perfwarden.formats.safe_read import VERDICT_BYTES, read_bytes
from perfwarden.formats.strict_json import StrictJsonError, loads

MAX_ROWS = 1000


def _num(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def clean_rows(raw: Any) -> list[tuple[float | None, bool, float]]:
    """(value, feasible, best) per trial; rows of another shape are dropped."""
    rows = []
    for row in raw[:MAX_ROWS] if isinstance(raw, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("feasible"), bool):
            continue
        best = _num(row.get("best"))
        value = _num(row.get("value"))
        if best is None or (row.get("value") is not None and value is None):
            continue
        rows.append((value, row["feasible"], best))
    return rows


def read_rows(root: Path) -> list[tuple[float | None, bool, float]]:
    """The history rows of ``root/report.json`` (empty when it has none or cannot be read)."""
    path = Path(root) / "report.json"
    try:
        obj = loads(read_bytes(path, root, limit=VERDICT_BYTES, what="report.json"), what="report.json")
    except (OSError, StrictJsonError):
        return []
    if not isinstance(obj, dict):
        return []
    return clean_rows(obj.get("search_history"))


def history_svg(rows: list[tuple[float | None, bool, float]], width: int = 480, height: int = 200) -> str:
    """Each trial's throughput as a factor of the true baseline (filled dot: banked; hollow: refused or
    superseded; a red x: no audited number) and the best banked factor as a line. Numbers only."""
    if not rows:
        return ""
    values = [v for v, _, _ in rows if v is not None] + [b for _, _, b in rows] + [1.0]
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    pad_l, pad_r, pad_t, pad_b = 44, 10, 18, 28
    n = max(len(rows), 2)

    def x(i: int) -> float:
        return pad_l + (width - pad_l - pad_r) * i / (n - 1)

    def y(v: float) -> float:
        return pad_t + (height - pad_t - pad_b) * (1.0 - (v - lo) / (hi - lo))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="search history">',
             f'<text x="{pad_l}" y="12" font-size="11" font-family="sans-serif">output throughput vs the true '
             f'baseline (x), per trial; line: best banked</text>',
             f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" stroke="#888"/>',
             f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="#888"/>']
    for v in (lo, (lo + hi) / 2, hi):
        parts.append(f'<text x="{pad_l - 4}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end" '
                     f'font-family="sans-serif">{v:.2f}</text>')
    parts.append(f'<text x="{width - pad_r}" y="{height - 8}" font-size="10" text-anchor="end" '
                 f'font-family="sans-serif">{len(rows)} trials</text>')
    line = " ".join(f"{x(i):.1f},{y(b):.1f}" for i, (_, _, b) in enumerate(rows))
    parts.append(f'<polyline points="{line}" fill="none" stroke="#1a7f37" stroke-width="2"/>')
    for i, (value, feasible, _) in enumerate(rows):
        if value is None:
            parts.append(f'<text x="{x(i):.1f}" y="{height - pad_b - 3}" font-size="10" text-anchor="middle" '
                         f'fill="#b00">x</text>')
            continue
        fill = "#1a7f37" if feasible else "none"
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(value):.1f}" r="3.5" fill="{fill}" stroke="#1a7f37"/>')
    parts.append("</svg>")
    return "".join(parts)


def history_html(root: Path) -> str:
    """The HTML review's section (empty for a run without a search history)."""
    svg = history_svg(read_rows(root))
    return f'<section class="block"><h2>search history</h2>{svg}</section>' if svg else ""
