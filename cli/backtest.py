"""``perfwarden backtest [DIR ...] [--json]``: score the auditor on fixtures with frozen answer keys."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from perfwarden.cli.audit import use_quality_registry
from perfwarden.cli.review import write_text_atomic
from perfwarden.orchestrator.exit_codes import ExitCode
from perfwarden.orchestrator.paths import default_fixture_roots, shared_corpus
from perfwarden.orchestrator.render import Clipped, hanging, print_error, safe_text

if TYPE_CHECKING:
    from perfwarden.verify.backtest import CaseResult, Report

MLPERF_CORPORA = ("mlperf", "mlperf-more")
"""Shared MLPerf compliance corpora folded into the backtest (beside the shipped fixtures)."""
SHIPPED_MLPERF = Path(__file__).resolve().parents[1] / "proof" / "mlperf_fixtures"
"""The project's own MLPerf attack fixtures and near misses (``proof/build_mlperf_cases.py``)."""


def backtest(
    dirs: list[Path] = typer.Argument(None, help="Fixture directories (default: the shipped proof/fixtures)."),
    json_out: bool = typer.Option(False, "--json", help="Print the full report as JSON."),
    mlperf: bool = typer.Option(True, "--mlperf/--no-mlperf", help="Include the shared MLPerf corpora (mlperf, "
                                "mlperf-more) when present; each case is audited with and without --test."),
    quality_registry: Path | None = typer.Option(None, "--quality-registry", help="A JSON file of extra registered "
                                                 "quality evals (see perfwarden audit --help)."),
    html: Path | None = typer.Option(None, "--html", help="Also write a self-contained HTML report: each fixture's "
                                     "expected vs actual verdict with drill-down to findings and evidence."),
    cluster: str | None = typer.Option(None, "--cluster", help="Ray address (`local` starts Ray here): audit the "
                                       "fixtures on its nodes, one task each (the same report)."),
) -> None:
    """Run the auditor blind over every fixture, then score it against the answer keys.
    Exit 0 when every fixture agrees, 1 otherwise, 3 when a claim or an answer key is unreadable."""
    from perfwarden.verify.backtest import run_backtest  # the auditor's imports are heavy: only when used

    use_quality_registry(quality_registry, Console(stderr=True, soft_wrap=True, highlight=False))
    roots = list(dirs) if dirs else default_fixture_roots()
    extra: list[Callable[[], list[CaseResult]]] = []
    for corpus in [*(shared_corpus() / name for name in MLPERF_CORPORA), SHIPPED_MLPERF] if mlperf else ():
        if (corpus / "manifest.json").is_file():
            # lazy: scipy: the auditor, only for this command
            from perfwarden.verify.mlperf_cases import mlperf_results

            extra.append(functools.partial(mlperf_results, corpus))
    fan_out = None
    if cluster is not None:
        fan_out = _cluster_map(cluster, quality_registry, err_console=Console(stderr=True, soft_wrap=True,
                                                                              highlight=False))
    report = run_backtest(roots, extra, fan_out)
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    if not report.results:
        print_error(err, f"no fixtures (answer_key.json) under {[str(r) for r in roots]!r}")
        raise typer.Exit(ExitCode.INVALID)
    if json_out:
        sys.stdout.write(json.dumps(report.to_json(), indent=2, default=str) + "\n")
    else:
        print_report(report, Console(highlight=False))
    if html is not None:
        write_html(report, roots, html)
    for problem in report.input_errors:
        print_error(err, problem)
    if report.input_errors:
        raise typer.Exit(ExitCode.INVALID)
    raise typer.Exit(ExitCode.OK if report.agreement == 1.0 else ExitCode.NOT_OK)


def _cluster_map(address: str, registry: Path | None, err_console: Console):
    """Map fixtures over the Ray cluster at ``address``; each task loads the quality registry first (it is
    process state). A cluster that cannot be joined is exit 3."""
    from perfwarden.orchestrator import ray_env

    ray_env.prepare(address)  # before Ray is imported: it reads its environment then
    from perfwarden.orchestrator import cluster

    def fan_out(fn, fixtures):
        try:
            return cluster.fan_out(functools.partial(_score_on_node, fn, registry), fixtures, address)
        except cluster.ClusterError as exc:
            print_error(err_console, exc)
            raise typer.Exit(ExitCode.INVALID) from None
    return fan_out


def _score_on_node(fn, registry: Path | None, fixture: Path):
    from perfwarden.cli.audit import use_quality_registry

    if registry is not None:
        use_quality_registry(registry, Console(stderr=True, soft_wrap=True, highlight=False))
    return fn(fixture)


def write_html(report: Report, roots: list[Path], path: Path) -> None:
    """Write the backtest's HTML view (exit 3 when the file cannot be written)."""
    # lazy: scipy: the auditor, only for --html
    from perfwarden.verify.backtest import find_fixtures  # lazy: scipy: the auditor, only for --html
    from perfwarden.verify.backtest_html import render_backtest_html

    runs = {fixture.name: fixture / "run" for fixture in find_fixtures(roots)}
    page = render_backtest_html(report, runs)
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    try:
        write_text_atomic(path, page)
    except OSError as exc:
        print_error(err, f"cannot write the HTML report {str(path)!r}: {exc}")
        raise typer.Exit(ExitCode.INVALID) from None
    err.print(safe_text(f"wrote {str(path)!r} ({len(page.encode('utf-8')) / 1024:.0f} KiB)"))


def result_block(result: CaseResult) -> Table:
    """One audited claim, readable at 80 columns: whether it agrees, then beside it the fixture and claim
    (untrusted names, at most two lines), expected against actual, and each disagreement as a paragraph."""
    mark = Text("yes", style="green") if result.agrees else Text("no", style="red")
    names = Clipped(safe_text((result.fixture, "bold"), "  ", result.claim), max_lines=2)
    outcome = safe_text(("expected ", "dim"), result.expected_verdict or "-", ("  actual ", "dim"), result.verdict,
                        ("  action ", "dim"), result.action)
    problems = [hanging("- ", safe_text(problem), indent=0) for problem in result.problems]
    block = Table.grid(padding=(0, 2))
    block.add_column(no_wrap=True, width=3)
    block.add_column(ratio=1)
    block.add_row(mark, Group(names, Clipped(outcome), *problems))
    return block


def print_report(report: Report, console: Console) -> None:
    from perfwarden.verify.backtest import LABELS  # lazy: scipy: the auditor, only for this command

    n_ok = sum(r.agrees for r in report.results)
    console.print(Text(f"fixtures: {len(report.results)}, {n_ok} agree with their answer key", style="bold"))
    for r in report.results:
        console.print(Padding(result_block(r), (0, 0, 0, 2), expand=False))
    conf = report.confusion()
    matrix = Table(title="confusion (rows expected, columns actual)", pad_edge=False)
    matrix.add_column("")
    actual_labels = list(LABELS) + sorted({a for row in conf.values() for a in row} - set(LABELS))
    for label in actual_labels:
        matrix.add_column(safe_text(label))
    for exp, row in conf.items():
        matrix.add_row(safe_text(exp), *[str(row.get(a, 0)) for a in actual_labels])
    console.print(matrix)
    codes = Table(title="per finding code", pad_edge=False)
    for col in ("code", "tp", "fn", "fp", "precision", "recall"):
        codes.add_column(col)
    for code, s in report.per_code().items():
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        codes.add_row(safe_text(code), str(s["tp"]), str(s["fn"]), str(s["fp"]), fmt(s["precision"]), fmt(s["recall"]))
    console.print(codes)
    console.print(f"agreement {n_ok}/{len(report.results)} = {report.agreement:.1%}; action agreement "
                  f"{report.action_agreement():.1%}")
