"""``perfwarden backtest [DIR ...] [--json]``: score the auditor on fixtures with frozen answer keys."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from perfwarden.orchestrator.paths import default_fixture_roots, shared_corpus
from perfwarden.proof.backtest import LABELS, Report, run_backtest


def backtest(
    dirs: list[Path] = typer.Argument(None, help="Fixture directories (default: the shipped proof/fixtures)."),
    json_out: bool = typer.Option(False, "--json", help="Print the full report as JSON."),
    mlperf: bool = typer.Option(True, "--mlperf/--no-mlperf", help="Include the shared MLPerf corpus when present."),
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
        raise typer.Exit(3)
    if json_out:
        sys.stdout.write(json.dumps(report.to_json(), indent=2, default=str) + "\n")
    else:
        print_report(report, Console())
    raise typer.Exit(0 if report.agreement == 1.0 else 1)


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
