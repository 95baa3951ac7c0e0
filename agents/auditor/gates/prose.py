"""Claims in prose: every number in a producer's report must trace to a re-derived value.

A number traces when some re-derived value, printed at the report's precision, gives it (percent and
ratio forms of the same delta count, as do server_info values and counts). Numbers in a sentence that
calls them expected/projected/illustrative are not measurements: presenting them in a results report
is a FAIL whether or not they trace.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from pathlib import Path

from perfwarden.agents.auditor.evidence import TextFile
from perfwarden.agents.auditor.findings import Findings, GateResult
from perfwarden.harness.records import EvidenceRef

NUMBER = re.compile(
    r"(?<![\w.\-/])([-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-+]?\d+(?:\.\d+)?)"
    r"(\s?(?:%|×|x\b|ms\b|s\b|tok/s|tokens/s|req/s|µs|us\b))?(?![\w.]*\d)(?![A-Za-z])")
SPECULATIVE = re.compile(r"\b(expected|expect|projected|estimated?|illustrative|hypothetical|would|could reach|"
                         r"anticipated|should (reach|give|yield)|target(ed)?|for example|e\.g\.)\b", re.IGNORECASE)
DATE_OR_VERSION = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d+\.\d+\.\d+[\w.]*\b|\bv\d+(\.\d+)*\b")
SMALL_COUNT = 16
"""Bare integers up to this (list numbers, rep counts) are not claims unless they carry a unit."""


def traceable_values(values: Iterable[float]) -> list[float]:
    """Each value plus the forms a report may print it in (percent of a fraction, ratio of a delta),
    sorted, so that ``traces`` finds candidates by bisection (a report with 100,000 numbers against
    thousands of values stays a fraction of a second)."""
    out: list[float] = []
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            continue
        out += [float(v), abs(float(v)), float(v) * 100.0, abs(float(v)) * 100.0, 1.0 + float(v) / 100.0]
    return sorted(x for x in out if math.isfinite(x))


def _decimals(token: str) -> int:
    return len(token.split(".", 1)[1]) if "." in token else 0


REL_TOLERANCE = 0.005
"""Integers print rounded: a large integer also traces within this relative tolerance (1,677 vs 1677.476)."""


def traces(token: str, value: float, pool: list[float]) -> bool:
    """Whether ``value`` (printed as ``token``) is some pool value at the printed precision. ``pool`` is
    sorted (``traceable_values``): only the pool values within the widest tolerance are compared."""
    d = _decimals(token)
    tol = 0.5 * 10 ** (-d) + 1e-9
    rel = REL_TOLERANCE if d == 0 and abs(value) >= 100 else 0.0
    # |p - v| <= rel*|p| implies |p - v| <= rel*|v| / (1 - rel): a window that holds every candidate.
    window = max(tol, rel * abs(value) / (1 - rel) + 1e-9)
    lo, hi = bisect_left(pool, value - window), bisect_right(pool, value + window)
    return any(abs(p - value) <= max(tol, rel * abs(p)) for p in pool[lo:hi])


def _prose_lines(tf: TextFile):
    in_fence = False
    for i, line in enumerate(tf.lines, 1):
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        text = re.sub(r"`[^`]*`", " ", line)
        text = DATE_OR_VERSION.sub(" ", text)
        text = re.sub(r"^\s*(#+|\d+\.|[-*])\s", " ", text)
        yield i, line, text


def check_report(run: Path, report: TextFile, values: Iterable[float]) -> GateResult[int]:
    """Every number of the report traces to a re-derived value; ``value``: how many were checked.

    Pure: the findings are collected in a local, bounded ``Findings`` (at most ``MAX_LISTED`` listed,
    the rest counted in one summary) and each line's evidence is hashed once, however many numbers it
    holds."""
    pool = traceable_values(values)
    out = Findings()
    evidence: dict[int, list[EvidenceRef]] = {}

    omitted_cited = False

    def cite(line_no: int) -> list[EvidenceRef]:
        nonlocal omitted_cited
        if out.full("prose", "UNTRACED_CLAIM"):
            if omitted_cited:
                return []  # only counted: the summary cites the first omitted finding's line
            omitted_cited = True
        if line_no not in evidence:
            evidence[line_no] = [report.evidence(run, line_no)]
        return evidence[line_no]

    checked = 0
    for line_no, raw, text in _prose_lines(report):
        speculative = SPECULATIVE.search(text)
        for m in NUMBER.finditer(text):
            token, unit = m.group(1), (m.group(2) or "").strip()
            value = float(token.replace(",", ""))
            finite = math.isfinite(value)  # a 400-digit number is a claim no measurement gives
            if finite and not unit and value.is_integer() and abs(value) <= SMALL_COUNT:
                continue
            checked += 1
            traced = finite and traces(token.replace(",", ""), value, pool)
            if speculative:
                out.add("UNTRACED_CLAIM", "FAIL", f"line {line_no}: {token[:40]}{unit} is presented in a results "
                        f"report but called {speculative.group(0)!r}: not a measurement",
                        measured=f"{token[:40]}{unit}", threshold="measured values only",
                        evidence=cite(line_no), action="eject", gate="prose")
                break
            if not traced:
                out.add("UNTRACED_CLAIM", "FAIL", f"line {line_no}: {token[:40]}{unit} traces to no re-derived value",
                        measured=f"{token[:40]}{unit}", threshold="a re-derived value at the printed precision",
                        evidence=cite(line_no), action="eject", gate="prose")
    return GateResult(findings=out.items, value=checked)
