"""``perfwarden review --format md|json|csv``: the review as data for other tools.

- ``json``: the verdicts as written (every field), plus the banked list and, when comparing, the pairs.
- ``md``: the trail, banked results and findings as GitHub-flavoured markdown tables.
- ``csv``: one row per finding (a verdict without findings still gets one row), or one row per
  compared metric with ``--compare``.

Exported text is untrusted run data. In markdown, table cells escape ``|`` and markup characters and
newlines, and HTML is entity-escaped (markdown renderers pass raw HTML through). In CSV, a text cell
starting with ``= + - @`` that is not a number is prefixed with ``'`` so a spreadsheet shows it
instead of evaluating it as a formula.
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
from collections.abc import Iterator, Sequence
from enum import Enum
from typing import Any

from perfwarden.orchestrator.render import fmt_value, md_cell, printable
from perfwarden.orchestrator.review.compare import Comparison, metric_rows
from perfwarden.orchestrator.review.model import RunReview, VerdictEntry, is_banked
from perfwarden.orchestrator.review.summary import LEVER_CLASSES, banked, fmt_pct


class ExportFormat(str, Enum):
    """The formats a review exports to (an Enum so that ``--format`` is validated by typer: a bad value is
    a usage error, exit 2)."""

    md = "md"
    json = "json"
    csv = "csv"


FORMATS = tuple(f.value for f in ExportFormat)


# -------------------------------------------------------------------------------------------- json


def entry_json(entry: VerdictEntry) -> dict[str, Any]:
    return {"key": entry.key, "path": entry.path, "banked": is_banked(entry), "lever_class": entry.lever_class,
            "lever_name": entry.lever_name, "claim_note": entry.claim_note, "shown": entry.verdict.shown,
            "verdict": entry.verdict.model_dump(mode="json")}


def review_json(review: RunReview, verdicts: bool = True) -> dict[str, Any]:
    """The review as one JSON object; ``verdicts=False`` leaves the (last) ``verdicts`` list empty for
    :func:`review_json_pieces` to stream."""
    b = banked(review)
    return {
        "run": review.run_id, "root": str(review.root), "audited_now": review.audited_now, "notes": review.notes,
        "banked": {"source": b.source,
                   "items": [{"label": i.label, "lever_class": i.lever_class, "verdict_key": i.entry.key if i.entry
                              else None, "headline": i.headline, "problem": i.problem} for i in b.items],
                   "bankable_not_in_report": [e.key for e in b.unreported]},
        "verdicts": [entry_json(e) for e in review.all_entries()] if verdicts else [],
    }


def review_json_pieces(review: RunReview) -> Iterator[str]:
    """``json.dumps(review_json(review), indent=2)`` written one verdict at a time."""
    head = json.dumps(review_json(review, verdicts=False), indent=2, default=str)
    tail = '\n  "verdicts": []\n}'
    assert head.endswith(tail)
    yield head[: -len(tail)] + '\n  "verdicts": ['
    sep = "\n"
    for e in review.all_entries():
        yield sep + textwrap.indent(json.dumps(entry_json(e), indent=2, default=str), "    ")
        sep = ",\n"
    yield ("\n  ]\n}" if sep != "\n" else "]\n}") + "\n"


def compare_json(comp: Comparison) -> dict[str, Any]:
    pairs = []
    for p in comp.pairs:
        only_a, only_b, both = p.codes()
        pairs.append({"key": p.key, "a": p.a.key if p.a else None, "b": p.b.key if p.b else None,
                      "verdict": [p.a.verdict.shown if p.a else None, p.b.verdict.shown if p.b else None],
                      "action": [p.a.verdict.action if p.a else None, p.b.verdict.action if p.b else None],
                      "headline_rederived": [p.a.verdict.headline_rederived if p.a else None,
                                             p.b.verdict.headline_rederived if p.b else None],
                      "metrics": [{"role": r.role, "metric": r.metric, "a": r.a, "b": r.b, "change_pct": r.change}
                                  for r in metric_rows(p)],
                      "codes_only_in_a": only_a, "codes_only_in_b": only_b, "codes_in_both": both})
    return {"a": review_json(comp.a), "b": review_json(comp.b), "pairs": pairs}


# ---------------------------------------------------------------------------------------------- md


def md_table(headers: list[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += [md_table_row(row) for row in rows]
    return "\n".join(out)


def md_table_row(row: Sequence[object]) -> str:
    return "| " + " | ".join(md_cell(c) for c in row) + " |"


def review_md_pieces(review: RunReview) -> Iterator[str]:
    """The markdown review, one verdict's rows at a time (every verdict of the trail)."""
    lines = [f"# perfwarden review: {md_cell(review.run_id)}", ""]
    if review.audited_now:
        lines += ["> The run has no saved verdict: its claims were audited now (not saved).", ""]
    lines += [f"> note: {md_cell(n)}" for n in review.notes]
    lines += ["## Verdict trail", "", md_table(
        ["claim", "scope", "verdict", "action", "metric", "claimed", "re-derived", "lever decl.", "lever det."], [])]
    yield "\n".join(lines) + "\n"
    for e in review.all_entries():
        yield md_table_row([e.key, e.verdict.scope, e.verdict.shown, e.verdict.action, e.headline_metric,
                            fmt_pct(e.verdict.headline_claimed), fmt_pct(e.verdict.headline_rederived),
                            e.verdict.lever_declared or "-", e.verdict.lever_detected or "-"]) + "\n"
    lines = [""]
    b = banked(review)
    lines += ["## Banked results by lever class", "", f"source: {md_cell(b.source)}", ""]
    for cls, items in b.by_class().items():
        lines.append(f"- **{LEVER_CLASSES[cls]}**: " + (", ".join(
            f"{md_cell(i.label)} ({md_cell(i.headline)})" + (f" **problem: {md_cell(i.problem)}**" if i.problem else "")
            for i in items) or "none"))
    lines += ["", "## Findings", ""]
    yield "\n".join(lines) + "\n"
    any_rows = False
    for e in review.all_entries():
        for f in e.verdict.findings:
            if not any_rows:
                yield md_table(["claim", "verdict", "severity", "code", "gate", "measured", "threshold", "evidence",
                                "message"], []) + "\n"
                any_rows = True
            yield md_table_row([e.key, e.verdict.shown, f.severity, f.code, f.gate or "-", fmt_value(f.measured, 60),
                                fmt_value(f.threshold, 60), evidence_text(f), f.message]) + "\n"
    if not any_rows:
        yield "No finding.\n"


def compare_md(comp: Comparison) -> str:
    lines = [f"# perfwarden review: {md_cell(comp.a.run_id)} (A) vs {md_cell(comp.b.run_id)} (B)", ""]
    rows = []
    for p in comp.pairs:
        only_a, only_b, _ = p.codes()
        rows.append([p.key, p.a.verdict.shown if p.a else "absent", p.b.verdict.shown if p.b else "absent",
                     fmt_pct(p.a.verdict.headline_rederived if p.a else None),
                     fmt_pct(p.b.verdict.headline_rederived if p.b else None),
                     ", ".join(only_a) or "-", ", ".join(only_b) or "-"])
    lines += [md_table(["claim", "A", "B", "A headline", "B headline", "codes only in A", "codes only in B"], rows),
              "", "## Metrics (re-derived rep medians)", ""]
    mrows = [[p.key, r.role, r.metric, fmt_value(r.a, 14), fmt_value(r.b, 14), fmt_pct(r.change)]
             for p in comp.pairs for r in metric_rows(p)]
    lines.append(md_table(["claim", "role", "metric", "A", "B", "B vs A"], mrows) if mrows else "No metric.")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- csv


def evidence_text(finding) -> str:
    return "; ".join(f"{e.file}:{e.line}" if e.line else e.file for e in finding.evidence)


def csv_safe(value: object) -> object:
    """Neutralize spreadsheet formulas in text cells (numbers are left as they are), and show control
    characters as escapes (an ESC sequence in a cell must not reach the terminal that prints the CSV)."""
    if not isinstance(value, str) or not value:
        return value
    if value[0] not in "=+-@\t\r":
        return printable(value)
    try:
        float(value)
        return value
    except ValueError:
        return "'" + printable(value)


def _csv(headers: list[str] | None, rows: Sequence[Sequence[object]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if headers is not None:
        writer.writerow(headers)
    writer.writerows([[csv_safe(c) for c in row] for row in rows])
    return buf.getvalue()


def review_csv_pieces(review: RunReview) -> Iterator[str]:
    """One row per finding of every verdict of the trail, one verdict at a time."""
    headers = ["claim", "scope", "verdict", "action", "banked", "headline_claimed", "headline_rederived",
               "severity", "code", "gate", "measured", "threshold", "evidence", "message"]
    yield _csv(headers, [])
    for e in review.all_entries():
        v = e.verdict
        head = [e.key, v.scope, v.shown, v.action, is_banked(e), v.headline_claimed, v.headline_rederived]
        rows = [head + ["", "", "", "", "", "", ""]] if not v.findings else []
        rows += [head + [f.severity, f.code, f.gate, _json(f.measured), _json(f.threshold), evidence_text(f),
                         f.message] for f in v.findings]
        yield _csv(None, rows)


def compare_csv(comp: Comparison) -> str:
    rows = [[p.key, p.a.verdict.shown if p.a else "", p.b.verdict.shown if p.b else "", r.role, r.metric,
             r.a, r.b, r.change] for p in comp.pairs for r in metric_rows(p)]
    return _csv(["claim", "verdict_a", "verdict_b", "role", "metric", "a", "b", "change_pct"], rows)


def _json(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def export(review: RunReview, fmt: str, comp: Comparison | None = None) -> str:
    """The review (or the comparison) in ``fmt``."""
    return "".join(export_pieces(review, fmt, comp))


def export_pieces(review: RunReview, fmt: str, comp: Comparison | None = None) -> Iterator[str]:
    """``export`` in pieces, one verdict at a time for a review (memory flat in the number of verdicts)."""
    if fmt == "json":
        if comp:
            return iter([json.dumps(compare_json(comp), indent=2, default=str) + "\n"])
        return review_json_pieces(review)
    if fmt == "md":
        return iter([compare_md(comp)]) if comp else review_md_pieces(review)
    if fmt == "csv":
        return iter([compare_csv(comp)]) if comp else review_csv_pieces(review)
    raise ValueError(f"unknown format {fmt!r}: use one of {FORMATS!r}")
