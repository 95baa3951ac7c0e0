"""``perfwarden backtest --html``: each fixture's expected vs actual verdict, with drill-down.

The page reuses the review's verdict view (findings, quoted evidence re-read from the fixture's run,
rep plots, conditions) for every case whose verdict object the backtest kept, so a disagreement can be
traced from the confusion matrix to the exact raw line that decided it.
"""

from __future__ import annotations

from pathlib import Path

from perfwarden.formats.records import Verdict
from perfwarden.orchestrator.review.evidence import LineReader
from perfwarden.orchestrator.review.model import RunReview, VerdictEntry, read_claim
from perfwarden.orchestrator.review.report_html import (badge, data_attrs, filter_bar, page, table, td, verdict_body)
from perfwarden.orchestrator.review.svg import esc
from perfwarden.verify.backtest import LABELS, CaseResult, Report

BACKTEST_PATH = "(backtest: audited blind, not saved)"


def case_entry(res: CaseResult, run: Path | None) -> VerdictEntry | None:
    """The case's kept verdict as a review entry (with its claim when the fixture run has it)."""
    if not isinstance(res.verdict_record, Verdict):
        return None
    claim, note = read_claim(run, res.verdict_record.claim) if run is not None else (None, "fixture run not found")
    return VerdictEntry(res.verdict_record, BACKTEST_PATH, claim, note)


def fixture_reviews(report: Report, fixture_runs: dict[str, Path]) -> dict[str, RunReview]:
    """One review per fixture (its cases' verdicts), so bundle decompositions find their patches."""
    out: dict[str, RunReview] = {}
    for res in report.results:
        run = fixture_runs.get(res.fixture)
        entry = case_entry(res, run)
        if entry is None:
            continue
        # Without its run, evidence quotes fall back to the recorded excerpts (the root does not exist).
        root = run if run is not None else Path(f"<no run directory for fixture {res.fixture!r}>")
        review = out.setdefault(res.fixture, RunReview(root=root, entries=[], label=res.fixture))
        review.entries.append(entry)
    return out


def case_codes(res: CaseResult) -> str:
    return " ".join(sorted(set(res.codes) | set(res.must_include)))


def summary_html(report: Report) -> str:
    conf = report.confusion()
    actual = list(LABELS) + sorted({a for row in conf.values() for a in row} - set(LABELS))
    matrix = table(["expected \\ actual", *actual], [[td(exp), *[td(row.get(a, 0), True) for a in actual]]
                                                     for exp, row in conf.items()])
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    codes = table(["code", "tp", "fn", "fp", "precision", "recall"],
                  [[td(code), td(s["tp"], True), td(s["fn"], True), td(s["fp"], True), td(fmt(s["precision"]), True),
                    td(fmt(s["recall"]), True)] for code, s in report.per_code().items()])
    n_ok = sum(r.agrees for r in report.results)
    return (f'<section class="block"><h2>agreement {n_ok}/{len(report.results)} = {report.agreement:.1%} · action '
            f'agreement {report.action_agreement():.1%}</h2><div class="grid"><div><h3>confusion (rows expected, '
            f'columns actual)</h3>{matrix}</div><div><h3>per finding code</h3>{codes}</div></div></section>')


def _attrs(res: CaseResult, fi: str) -> str:
    return data_attrs(fi=fi, agrees="yes" if res.agrees else "no", verdict=res.verdict,
                      expected=res.expected_verdict or "-", codes=case_codes(res), kind=res.kind)


def cases_table(report: Report) -> str:
    rows = []
    for i, res in enumerate(report.results):
        ok = '<span class="up">yes</span>' if res.agrees else '<span class="down">no</span>'
        rows.append(f"<tr{_attrs(res, 'row')}><td><a href=\"#case{i}\">{esc(res.fixture)}</a></td>{td(res.claim)}"
                    f"<td>{badge(res.expected_verdict or '-')}</td><td>{badge(res.verdict)}</td>"
                    f"{td(' | '.join(res.expected_actions) or '-')}{td(res.action)}<td>{ok}</td>"
                    f"{td('; '.join(res.problems), cls='problem' if res.problems else '')}</tr>")
    heads = "".join(f"<th>{h}</th>" for h in ("fixture", "claim", "expected", "actual", "expected action",
                                               "action", "agrees", "problems"))
    return (f'<section class="block"><h2>fixtures</h2><div class="scroll"><table><thead><tr>{heads}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></section>')


def case_card(i: int, res: CaseResult, reviews: dict[str, RunReview], readers: dict[str, LineReader]) -> str:
    """Expected vs actual, the answer key's required/forbidden codes against what was raised, then
    the verdict's full view (findings with evidence) when the backtest kept it."""
    raised = set(res.codes)
    key_rows = [[td(c), td("required"), td("raised" if c in raised else "NOT raised",
                                           cls="" if c in raised else "problem")] for c in res.must_include]
    key_rows += [[td(c), td("forbidden"), td("RAISED" if c in raised else "not raised",
                                            cls="problem" if c in raised else "")] for c in res.must_exclude]
    parts = [table(["", ""], [[td("expected"), f"<td>{badge(res.expected_verdict or '-')} "
                                                f"{esc(' | '.join(res.expected_actions) or '-')}</td>"],
                              [td("actual"), f"<td>{badge(res.verdict)} {esc(res.action)}</td>"],
                              [td("codes raised"), td(", ".join(res.codes) or "-")]])]
    if key_rows:
        parts.append("<h3>answer key codes</h3>" + table(["code", "key says", "auditor"], key_rows))
    if res.problems:
        parts.append("<h3>disagreements</h3><ul>" + "".join(f'<li class="problem">{esc(p)}</li>'
                                                            for p in res.problems) + "</ul>")
    review = reviews.get(res.fixture)
    entry = None if review is None else next((e for e in review.entries if e.verdict is res.verdict_record), None)
    if review is not None and entry is not None:
        reader = readers.setdefault(res.fixture, LineReader(review.root))
        parts.append(f"<h3>verdict</h3>{verdict_body(entry, review, reader)}")
    else:
        parts.append('<p class="kv">No verdict object was kept for this case (an unreadable claim, or a case '
                     'from another auditor such as the MLPerf corpus).</p>')
    summary = (f"{badge(res.verdict)} <b>{esc(res.fixture)}</b> · {esc(res.claim)} · expected "
               f"{badge(res.expected_verdict or '-')} · " + ('<span class="up">agrees</span>' if res.agrees
                                                             else '<span class="down">disagrees</span>'))
    is_open = "" if res.agrees else " open"
    return (f'<details class="block card" id="case{i}"{_attrs(res, "card")}{is_open}><summary>{summary}</summary>'
            f'{"".join(parts)}</details>')


def render_backtest_html(report: Report, fixture_runs: dict[str, Path]) -> str:
    """The whole backtest page; ``fixture_runs`` maps a fixture name to its ``run`` directory."""
    reviews = fixture_reviews(report, fixture_runs)
    readers: dict[str, LineReader] = {}
    verdicts = list(LABELS) + sorted({r.verdict for r in report.results} - set(LABELS))
    codes = sorted({c for r in report.results for c in case_codes(r).split()})
    expected = sorted({r.expected_verdict or "-" for r in report.results})
    kinds = sorted({r.kind for r in report.results})
    filters = filter_bar([("agrees", "agrees", ["yes", "no"]), ("verdict", "actual", verdicts)],
                         [("expected", "expected", expected), ("codes", "finding code", codes),
                          ("kind", "kind", kinds)])
    title = "perfwarden backtest"
    head = (f'<header class="top"><h1>{esc(title)}</h1><div class="sub">{len(report.results)} case(s), audited '
            f'blind and scored against frozen answer keys</div></header>')
    cards = "".join(case_card(i, r, reviews, readers) for i, r in enumerate(report.results))
    return page(title, head + filters + "<main>" + summary_html(report) + cases_table(report)
                + f'<div class="cards">{cards}</div></main>')
