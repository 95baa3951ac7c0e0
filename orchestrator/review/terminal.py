"""``perfwarden review`` in the terminal (rich), laid out to read well at 80 columns.

Every piece of run data is printed through ``Text`` objects built from ``printable()`` text, never
through rich markup: verdicts, server logs and generated text are untrusted, and a ``[/]`` in a log
line must neither break the markup parser nor style the screen, nor may an escape sequence reach the
terminal. Indented blocks use ``Padding`` so wrapped lines keep their indent.
"""

from __future__ import annotations

from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from perfwarden.auditor import banking
from perfwarden.formats.records import Finding
from perfwarden.orchestrator.render import Clipped, finding_block, fmt_value, safe_text
from perfwarden.orchestrator.review.compare import PLOT_METRICS, Comparison, Pair, metric_rows
from perfwarden.orchestrator.review.evidence import LineReader
from perfwarden.orchestrator.review.model import AUDITED_NOW, KEEP, RunReview, VerdictEntry
from perfwarden.orchestrator.review.summary import LEVER_CLASSES, SEVERITIES, banked, fmt_pct, gates_of

VERDICT_STYLE = {"PASS": "bold green", "FLAG": "bold yellow", "FAIL": "bold red"}
SEVERITY_STYLE = {"INFO": "dim", "FLAG": "yellow", "FAIL": "red"}
KEEP_LEGS = 8
"""Legs whose witnesses a verdict's block lists (a verdict cites two or three)."""
STATUS_MARK = {"verified": "sha256 ok", "changed": "CHANGED since audit", "no_hash": "no sha256 recorded",
               "missing": "not in run", "whole_file": "whole file", "outside": "outside run, not read",
               "unreadable": "unreadable"}


def t(*parts: str | tuple[str, str]) -> Text:
    """``Text.assemble`` over printable parts (a part is ``text`` or ``(text, style)``)."""
    return safe_text(*parts)


def indent(renderable: RenderableType, n: int) -> Padding:
    return Padding(renderable, (0, 0, 0, n))


def verdict_head(entry: VerdictEntry) -> Text:
    v = entry.verdict
    return t((entry.key, "bold"), "  ", (v.shown, VERDICT_STYLE.get(v.verdict, "bold")), "  ", v.action)


def headline_line(entry: VerdictEntry) -> Text | None:
    v = entry.verdict
    if v.headline_claimed is None and v.headline_rederived is None:
        return None
    return t("headline ", entry.headline_metric, ": claimed ", fmt_pct(v.headline_claimed),
             ", re-derived ", (fmt_pct(v.headline_rederived), "bold"))


def lever_line(entry: VerdictEntry) -> Text | None:
    v = entry.verdict
    if not (v.lever_declared or v.lever_detected or entry.lever_name):
        return None
    name = f"{entry.lever_name!r} " if entry.lever_name else ""
    mismatch = v.lever_declared and v.lever_detected and v.lever_declared != v.lever_detected
    return t("lever ", name, "declared ", v.lever_declared or "-", ", detected ",
             (v.lever_detected or "-", "bold yellow" if mismatch else ""))


def trail_block(entry: VerdictEntry) -> Group:
    """One verdict of the trail: head line, then claim, headline, lever and gates, indented."""
    v = entry.verdict
    lines: list[RenderableType] = [t("claim ", v.claim, "" if entry.path == AUDITED_NOW else f"  ({entry.path})")]
    if entry.claim_note:
        lines.append(t(("claim not read: ", "yellow"), entry.claim_note))
    for line in (headline_line(entry), lever_line(entry)):
        if line is not None:
            lines.append(line)
    if v.headline_note:
        lines.append(t(("why that figure: ", "dim"), v.headline_note))
    if len(v.actions) > 1:
        lines.append(t(("asks: ", "dim"), " + ".join(v.actions)))
    for w in v.witnesses[:KEEP_LEGS]:
        lines.append(t(("witnesses ", "dim"), w.leg, ": ", " · ".join(w.held())))
    gates = gates_of(entry)
    if gates:
        parts: list[str | tuple[str, str]] = ["gates: "]
        for i, (gate, severity, count) in enumerate(gates):
            parts += [" · " if i else "", gate, " ", (f"{severity}×{count}", SEVERITY_STYLE[severity])]
        lines.append(Clipped(t(*parts)))
    else:
        lines.append(t(("gates: no finding", "dim")))
    return Group(verdict_head(entry), indent(Group(*lines), 4))


def header(review: RunReview) -> Group:
    m = review.manifest
    title = t(("Review of run ", "bold"), (repr(review.run_id), "bold"),
              *(() if m is None else (f"  model {m.model!r}, target {m.target!r}",)))
    counts = review.summary.counts
    summary = ", ".join(f"{counts[k]} {k}" for k in ("PASS", "FLAG", "FAIL") if counts[k]) or "none"
    source = "claims audited now" if review.audited_now else "verdicts/*.json"
    lines: list[RenderableType] = [title, t(str(review.root)),
                                   t(f"{review.summary.total} verdict(s) from {source}: {summary}")]
    if review.objective is not None:
        lines.append(t(f"objective: {review.objective.describe()} (sealed at the run's start)"))
    if review.audited_now:
        lines.append(t(("The run has no saved verdict: its claims were audited now and nothing was "
                        "written. Keep them with `perfwarden audit RUN --claim CLAIM --save`.", "yellow")))
    if review.events:
        failed = sum(1 for ev in review.events if ev.get("error"))
        lines.append(t(f"{len(review.events)} orchestrator step(s) in events.jsonl",
                       (f", {failed} with an error" if failed else "", "red")))
    lines += [t(("note: ", "yellow"), note) for note in review.notes]
    return Group(*lines)


def gates_section(review: RunReview) -> RenderableType:
    rows = review.summary.gate_rows()
    if not rows:
        return t(("No gate raised a finding.", "dim"))
    table = Table(pad_edge=False, box=None, show_edge=False)
    # a gate name comes from a verdict file: one line however long a forged one is
    table.add_column("gate", no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("scope", no_wrap=True, overflow="ellipsis", max_width=12)
    for sev in SEVERITIES:
        table.add_column(sev, justify="right", style=SEVERITY_STYLE[sev])
    for gate, scope, counts in rows:
        table.add_row(t(gate), t(scope), *[str(counts[s]) if counts[s] else "·" for s in SEVERITIES])
    return table


def banked_section(review: RunReview) -> Group:
    b = banked(review)
    rule = banking.rule_text()
    lines: list[RenderableType] = [t(("source: ", "dim"), b.source if b.source != "verdicts" else f"verdicts ({rule})")]
    for cls, items in b.by_class().items():
        lines.append(t((LEVER_CLASSES.get(cls, str(cls)) + ":", "bold"), "" if items else " none"))
        for item in items[:KEEP]:
            style = "red" if item.problem else ""
            lines.append(indent(t((item.label, style), "  ", item.headline,
                                  (f"  ({item.standing})" if item.standing else "", "yellow")), 2))
        if len(items) > KEEP:
            lines.append(indent(t((f"… and {len(items) - KEEP:,} more", "dim")), 2))
    if review.report_final is not None:
        net = ", ".join(f"{k.knob} {k.baseline!r} -> {k.final!r}" for k in review.report_final)
        lines.append(t(("final configuration (what differs from the true baseline): ", "bold"), net or "the baseline"))
    for problem in b.problems:
        lines.append(t(("! report banks ", "bold red"), problem))
    for entry in b.unreported[:KEEP]:
        lines.append(t(("bankable but not in report.json: ", "yellow"), entry.key))
    if len(b.unreported) > KEEP:
        lines.append(t((f"… and {len(b.unreported) - KEEP:,} more bankable verdicts not in report.json", "yellow")))
    return Group(*lines)


def quoted_evidence(finding: Finding, reader: LineReader) -> list[Text]:
    """Each evidence reference as ``file:line`` and whether the line still hashes as the auditor read it."""
    lines = []
    for ref in finding.evidence:
        quote = reader.quote(ref)
        lines.append(t(quote.location, (f"  ({STATUS_MARK[quote.status]})", "red" if quote.status == "changed" else "dim")))
    return lines


def details_section(review: RunReview, reader: LineReader) -> Group:
    flagged = [e for e in review.entries if e.verdict.verdict != "PASS"]
    if not flagged:
        return Group(t(("No FLAG or FAIL.", "green")))
    parts: list[RenderableType] = []
    for entry in flagged:
        v = entry.verdict
        parts.append(t((entry.key, "bold"), "  ", (v.shown, VERDICT_STYLE[v.verdict]), "  ", v.action,
                       "  ", v.claim, ("  run's decision: ", "dim"), review.decided(entry)))
        inner: list[RenderableType] = [finding_block(f, quoted_evidence(f, reader)) for f in v.findings]
        inner += [t(("not checked: ", "dim"), item) for item in v.not_checked]
        if v.degraded:
            inner.append(t(("degraded: ", "yellow"), "; ".join(v.degraded_reasons)))
        parts.append(indent(Group(*inner), 2))
        parts.append(Text(""))
    return Group(*parts)


def print_review(review: RunReview, console: Console) -> None:
    """The whole terminal review: header, trail, gates by scope, banked, FLAG/FAIL details."""
    reader = LineReader(review.root)
    console.print(header(review))
    console.print(Rule("verdict trail (seq order)"))
    for entry in review.entries:
        console.print(trail_block(entry))
    if review.omitted:
        console.print(t((f"… {review.omitted:,} less severe verdict(s) left out of the detail (counted above and "
                         "below)", "yellow")))
    console.print(Rule("findings by gate and scope"))
    console.print(gates_section(review))
    console.print(Rule("banked results by lever class"))
    console.print(banked_section(review))
    console.print(Rule("FLAG and FAIL, with findings"))
    console.print(details_section(review, reader))


# --------------------------------------------------------------------------------------- compare


def pair_block(pair: Pair) -> Group:
    a, b = pair.a, pair.b

    def side(e: VerdictEntry | None) -> tuple[str, str]:
        return (f"{e.verdict.shown} {e.verdict.action}", VERDICT_STYLE.get(e.verdict.verdict, "")) if e else (
            "absent", "dim")

    lines: list[RenderableType] = []
    ha = a.verdict.headline_rederived if a else None
    hb = b.verdict.headline_rederived if b else None
    if ha is not None or hb is not None:
        lines.append(t("headline re-derived: A ", fmt_pct(ha), " → B ", fmt_pct(hb)))
    rows = metric_rows(pair)
    if rows:
        table = Table(pad_edge=False, box=None, show_edge=False)
        columns: list[tuple[str, JustifyMethod]] = [("role", "left"), ("metric", "left"), ("A", "right"), ("B", "right"),
                                                    ("B vs A", "right")]
        for col, just in columns:
            table.add_column(col, justify=just, overflow="fold")
        for row in rows:
            table.add_row(row.role, PLOT_METRICS[row.metric].split(",")[0].split(" (")[0],
                          fmt_value(row.a, 12), fmt_value(row.b, 12), fmt_pct(row.change))
        lines.append(table)
    only_a, only_b, both = pair.codes()
    for label, codes in (("only in A", only_a), ("only in B", only_b), ("in both", both)):
        if codes:
            lines.append(t((f"{label}: ", "dim"), ", ".join(codes)))
    return Group(t((pair.key, "bold"), "  A ", side(a), "  →  B ", side(b)), indent(Group(*lines), 4))


def print_comparison(comp: Comparison, console: Console) -> None:
    console.print(t(("Comparison", "bold"), "  A ", repr(comp.a.run_id), "  vs  B ", repr(comp.b.run_id)))
    console.print(t("A: ", comp.a.label))
    console.print(t("B: ", comp.b.label))
    for review, name in ((comp.a, "A"), (comp.b, "B")):
        if review.audited_now:
            console.print(t((f"{name} has no saved verdict: its claims were audited now (not saved).", "yellow")))
        for note in review.notes:
            console.print(t((f"{name} note: ", "yellow"), note))
    console.print(Rule("paired verdicts"))
    for pair in comp.pairs:
        console.print(pair_block(pair))
