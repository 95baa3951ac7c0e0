"""``perfwarden backtest [DIR ...] [--json]``: score the auditor on fixtures with frozen answer keys."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from perfwarden.orchestrator.exit_codes import ExitCode
from perfwarden.orchestrator.paths import default_fixture_roots, shared_corpus
from perfwarden.proof.backtest import LABELS, Report, run_backtest


def backtest(
    dirs: list[Path] = typer.Argument(None, help="Fixture directories (default: the shipped proof/fixtures)."),
    json_out: bool = typer.Option(False, "--json", help="Print the full report as JSON."),
    mlperf: bool = typer.Option(True, "--mlperf/--no-mlperf", help="Include the shared MLPerf corpus when present."),
    html: Path | None = typer.Option(None, "--html", help="Also write a self-contained HTML report: each fixture's "
                                     "expected vs actual verdict with drill-down to findings and evidence."),
) -> None:
    """Run the auditor blind over every fixture, then score it against the answer keys.
    Exit 0 when every fixture agrees, 1 otherwise."""
    roots = list(dirs) if dirs else default_fixture_roots()
    extra = []
    corpus = shared_corpus() / "mlperf" if mlperf else None
    if corpus is not None and (corpus / "manifest.json").is_file():
        from perfwarden.proof.mlperf_cases import mlperf_results

        extra.append(lambda: mlperf_results(corpus))
    report = run_backtest(roots, extra)
    if not report.results:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] no fixtures (answer_key.json) under {[str(r) for r in roots]!r}")
        raise typer.Exit(ExitCode.INVALID)
    if json_out:
        sys.stdout.write(json.dumps(report.to_json(), indent=2, default=str) + "\n")
    else:
        print_report(report, Console())
    if html is not None:
        write_html(report, roots, html)
    raise typer.Exit(ExitCode.OK if report.agreement == 1.0 else ExitCode.NOT_OK)


def write_html(report: Report, roots: list[Path], path: Path) -> None:
    """Write the backtest's HTML view (exit 3 when the file cannot be written)."""
    from rich.text import Text

    from perfwarden.orchestrator.cli_review import write_text_atomic
    from perfwarden.orchestrator.review.backtest_html import render_backtest_html
    from perfwarden.proof.backtest import find_fixtures

    runs = {fixture.name: fixture / "run" for fixture in find_fixtures(roots)}
    page = render_backtest_html(report, runs)
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    try:
        write_text_atomic(path, page)
    except OSError as exc:
        err.print(Text.assemble(("error: ", "red"), f"cannot write the HTML report {str(path)!r}: {exc}"))
        raise typer.Exit(ExitCode.INVALID) from None
    err.print(f"wrote {str(path)!r} ({len(page.encode('utf-8')) / 1024:.0f} KiB)", markup=False)


def print_report(report: Report, console: Console) -> None:
    table = Table(title="fixtures", pad_edge=False)
    for col in ("fixture", "claim", "expected", "actual", "action", "ok"):
        table.add_column(col, overflow="fold")
    for r in report.results:
        table.add_row(r.fixture, r.claim, r.expected_verdict or "-", r.verdict, r.action,
                      "[green]yes[/green]" if r.agrees else f"[red]no[/red] {'; '.join(r.problems)}")
    console.print(table)
    conf = report.confusion()
    matrix = Table(title="confusion (rows expected, columns actual)", pad_edge=False)
    matrix.add_column("")
    actual_labels = list(LABELS) + sorted({a for row in conf.values() for a in row} - set(LABELS))
    for label in actual_labels:
        matrix.add_column(label)
    for exp, row in conf.items():
        matrix.add_row(exp, *[str(row.get(a, 0)) for a in actual_labels])
    console.print(matrix)
    codes = Table(title="per finding code", pad_edge=False)
    for col in ("code", "tp", "fn", "fp", "precision", "recall"):
        codes.add_column(col)
    for code, s in report.per_code().items():
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        codes.add_row(code, str(s["tp"]), str(s["fn"]), str(s["fp"]), fmt(s["precision"]), fmt(s["recall"]))
    console.print(codes)
    n_ok = sum(r.agrees for r in report.results)
    console.print(f"agreement {n_ok}/{len(report.results)} = {report.agreement:.1%}; action agreement "
                  f"{report.action_agreement():.1%}")
