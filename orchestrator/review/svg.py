"""Inline SVG plots, generated as text (no plotting library, nothing fetched by the page).

Every piece of data that reaches the markup goes through ``esc``; numbers are formatted by us. Plots
stay small whatever the run's size: a row holds at most ``MAX_DOTS`` dots, picked as evenly spaced
order statistics (min, max and median always kept), and the exact figures are printed beside the plot
from the verdict's re-derived statistics, so downsampling never changes a number the reader sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

MAX_DOTS = 200
COLORS = {"PASS": "#2e7d32", "FLAG": "#c77700", "FAIL": "#c62828", "INFO": "#8a8a8a"}
ROW_COLORS = ("#1f5fa8", "#b8461b", "#6b3fa0", "#2b8a6b", "#8a6d1f", "#555555")


def esc(value: object) -> str:
    """HTML/SVG-escape any value (quotes included, so it is safe inside attributes too)."""
    return escape(str(value), quote=True)


def fnum(value: float) -> str:
    """A coordinate with two decimals (keeps the markup small and deterministic)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def downsample(values: list[float], max_points: int = MAX_DOTS) -> list[float]:
    """At most ``max_points`` values of ``values``: evenly spaced order statistics of the sorted
    values, so the shape of the distribution (and its extremes) survives."""
    clean = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    if len(clean) <= max_points:
        return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    step = (len(clean) - 1) / (max_points - 1)
    return [clean[round(i * step)] for i in range(max_points)]


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 5 × 10^k steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    k = 0
    while first + k * step <= hi + step * 1e-9 and k < 50:
        ticks.append(round(first + k * step, 12))
        k += 1
    return ticks


def domain(values: list[float], extra: list[float]) -> tuple[float, float]:
    """[lo, hi] holding every value and marker with 6% padding; a degenerate range is widened."""
    pts = [v for v in values + extra if math.isfinite(v)]
    if not pts:
        return 0.0, 1.0
    lo, hi = min(pts), max(pts)
    if hi == lo:
        pad = abs(lo) * 0.01 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.06
    return lo - pad, hi + pad


def tick_label(value: float) -> str:
    if value == 0:
        return "0"
    mag = abs(value)
    if mag >= 1e5 or mag < 1e-3:
        return f"{value:.2e}"
    return f"{value:.4g}"


@dataclass
class Row:
    """One row of a strip plot: one leg's per-rep values."""

    label: str
    values: list[float]
    median: float | None


def clip(text: str, width_px: float, char_px: float = 6.2) -> str:
    """Shorten ``text`` to fit ``width_px`` at roughly ``char_px`` per character (SVG text does not wrap)."""
    n = max(int(width_px / char_px), 4)
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass
class Reference:
    """A fairer reference drawn across the rows: its level (a dotted line) and its noise band (hatched)."""

    level: float
    band: tuple[float, float] | None
    label: str


def _finite_reference(ref: Reference | None) -> Reference | None:
    if ref is None or not math.isfinite(ref.level):
        return None
    band = ref.band if ref.band is not None and all(math.isfinite(b) for b in ref.band) else None
    return Reference(ref.level, band, ref.label)


def strip_plot(title: str, rows: list[Row], band: tuple[float, float] | None = None,
               center: float | None = None, width: int = 640, css_class: str = "plot", subtitle: str = "",
               reference: Reference | None = None) -> str:
    """Every rep a dot per row, each row's median a bar, and the noise band (shaded) with the
    baseline median (dashed) drawn across all rows; a fairer reference (``reference``: the level a
    handicapped baseline's configuration shows in its same-config legs) dotted, its band hatched."""
    left, right, top, row_h, bottom = 150, 16, 42, 30, 30
    # A tampered verdict may hold NaN/inf; a non-finite coordinate is an SVG error in the console.
    center = center if center is not None and math.isfinite(center) else None
    band = band if band is not None and all(math.isfinite(b) for b in band) else None
    reference = _finite_reference(reference)
    height = top + row_h * max(len(rows), 1) + bottom
    all_values = [v for r in rows for v in r.values]
    markers = [m for m in ([center] if center is not None else []) + (list(band) if band else []) if m is not None]
    if reference is not None:
        markers += [reference.level, *(reference.band or ())]
    lo, hi = domain(all_values, markers)
    span = hi - lo

    def x(v: float) -> float:
        return left + (v - lo) / span * (width - left - right)

    parts = [f'<svg class="{esc(css_class)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
             f'<text class="ptitle" x="10" y="16">{esc(clip(title, width - 20, 7.0))}</text>',
             f'<text class="psub" x="10" y="31">{esc(clip(subtitle, width - 20))}</text>']
    plot_top, plot_bottom = top, top + row_h * max(len(rows), 1)
    if band is not None:
        b0, b1 = sorted(band)
        tip = esc(f"noise band {b0:.4g} .. {b1:.4g}")
        parts.append(f'<rect class="band" x="{fnum(x(b0))}" y="{plot_top}" width="{fnum(max(x(b1) - x(b0), 1))}" '
                     f'height="{plot_bottom - plot_top}"><title>{tip}</title></rect>')
    if center is not None:
        parts.append(f'<line class="center" x1="{fnum(x(center))}" x2="{fnum(x(center))}" y1="{plot_top}" '
                     f'y2="{plot_bottom}"><title>{esc(f"baseline median {center:.6g}")}</title></line>')
    if reference is not None:
        if reference.band is not None:
            r0, r1 = sorted(reference.band)
            parts.append(f'<rect class="band-ref" x="{fnum(x(r0))}" y="{plot_top}" width="{fnum(max(x(r1) - x(r0), 1))}" '
                         f'height="{plot_bottom - plot_top}"><title>{esc(f"{reference.label}: noise band {r0:.4g} .. {r1:.4g}")}'
                         f'</title></rect>')
        rx = fnum(x(reference.level))
        parts.append(f'<line class="reference" x1="{rx}" x2="{rx}" y1="{plot_top}" y2="{plot_bottom}"><title>'
                     f'{esc(f"{reference.label}: median {reference.level:.6g}")}</title></line>')
    for t in nice_ticks(lo, hi):
        tx = fnum(x(t))
        parts.append(f'<line class="tick" x1="{tx}" x2="{tx}" y1="{plot_bottom}" y2="{plot_bottom + 4}"/>'
                     f'<text class="tlabel" x="{tx}" y="{plot_bottom + 16}" text-anchor="middle">'
                     f'{esc(tick_label(t))}</text>')
    parts.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{plot_bottom}" y2="{plot_bottom}"/>')
    for i, row in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        color = ROW_COLORS[i % len(ROW_COLORS)]
        shown = downsample(row.values)  # also drops non-finite values
        label = row.label if len(shown) == len(row.values) else f"{row.label} ({len(shown)} of {len(row.values)})"
        parts.append(f'<text class="rlabel" x="{left - 8}" y="{fnum(cy + 4)}" text-anchor="end">{esc(label)}</text>')
        for k, v in enumerate(shown):
            jitter = ((k % 5) - 2) * 2.5
            parts.append(f'<circle class="dot" cx="{fnum(x(v))}" cy="{fnum(cy + jitter)}" r="3.5" fill="{color}">'
                         f'<title>{esc(f"{row.label} rep {k}: {v:.6g}")}</title></circle>')
        if row.median is not None and math.isfinite(row.median):
            mx = fnum(x(row.median))
            parts.append(f'<line class="median" x1="{mx}" x2="{mx}" y1="{fnum(cy - 11)}" y2="{fnum(cy + 11)}" '
                         f'stroke="{color}"><title>{esc(f"{row.label} median {row.median:.6g}")}</title></line>')
    parts.append("</svg>")
    return "".join(parts)


@dataclass
class TimelineNode:
    """One verdict on the timeline, with the gates that raised findings in it."""

    anchor: str
    label: str
    verdict: str
    gates: list[tuple[str, str, int]]
    """(gate, worst severity, count)."""
    attrs: dict[str, str]
    """``data-*`` attributes the page's filters read."""


def timeline(nodes: list[TimelineNode], col: int = 132) -> str:
    """Verdicts in seq order left to right, each a linked circle in its verdict's colour, with the
    gates that raised findings stacked below it (colour = worst severity, number = findings)."""
    max_gates = max((len(n.gates) for n in nodes), default=0)
    width = max(col * len(nodes) + 20, 200)
    height = 74 + 18 * max_gates + 10
    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline of verdicts and gates">',
             f'<line class="axis" x1="10" x2="{width - 10}" y1="40" y2="40"/>']
    for i, node in enumerate(nodes):
        cx = 10 + col * i + col / 2
        attrs = "".join(f' {esc(k)}="{esc(v)}"' for k, v in node.attrs.items())
        parts.append(f'<g class="tl-node"{attrs}><a href="#{esc(node.anchor)}">'
                     f'<text class="tl-label" x="{fnum(cx)}" y="20" text-anchor="middle">{esc(node.label)}</text>'
                     f'<circle cx="{fnum(cx)}" cy="40" r="9" fill="{COLORS.get(node.verdict, "#444")}">'
                     f'<title>{esc(node.label + " " + node.verdict)}</title></circle>'
                     f'<text class="tl-verdict" x="{fnum(cx)}" y="66" text-anchor="middle">{esc(node.verdict)}</text>')
        for k, (gate, severity, count) in enumerate(node.gates):
            gy = 74 + 18 * k
            name = gate if len(gate) <= 14 else gate[:13] + "…"
            parts.append(f'<rect x="{fnum(cx - col / 2 + 6)}" y="{gy}" width="{col - 12}" height="15" rx="3" '
                         f'fill="{COLORS.get(severity, "#444")}" class="tl-gate"><title>'
                         f'{esc(f"gate {gate!r}: {count} finding(s), worst {severity}")}</title></rect>'
                         f'<text class="tl-gtext" x="{fnum(cx)}" y="{gy + 11}" text-anchor="middle">'
                         f'{esc(f"{name} ×{count}")}</text>')
        parts.append("</a></g>")
    parts.append("</svg>")
    return "".join(parts)
