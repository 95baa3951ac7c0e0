"""``perfwarden audit-mlperf``: re-derive an MLPerf LoadGen compliance verdict (TEST01/04/05).

Usage::

    perfwarden audit-mlperf --reference RUN_DIR --compliance RUN_DIR [--test TEST04] [--json]

Each RUN_DIR holds ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt`` (or is a submission
directory with them under ``performance/run_1/``). The test type is detected from the compliance
run's audit settings (see :func:`perfwarden.auditor.mlperf.detect_test`); ``--test``
overrides it, and a compliance run whose settings do not match the declared test is a FAIL.

Exit codes (the CLI contract in ``cli/main.py``): 0 PASS, 10 FLAG, 20 FAIL, 3 unreadable or
invalid input (verdict ``error``; with ``--json`` an object with ``"verdict": "error"`` and a
``message``), 2 usage error (e.g. an unknown ``--test``).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from perfwarden.auditor import mlperf
from perfwarden.formats.records import MlperfCompliance, Verdict
from perfwarden.orchestrator.exit_codes import EXIT_BY_VERDICT, ExitCode
from perfwarden.orchestrator.render import finding_block, print_error, print_notes, safe_text

_STYLE = {"PASS": "bold green", "FLAG": "bold yellow", "FAIL": "bold red", "error": "bold red",
          "INFO": "dim", }


def _short(path: str, parts: int = 2) -> str:
    p = Path(path).parts
    return str(Path(*p[-parts:])) if len(p) > parts else path


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"


def render(verdict: Verdict, console: Console) -> None:
    """Human-readable report: verdict line, scores, findings, what was not checked. Everything read
    from the logs (scenario names, messages, file names) is shown through ``safe_text``."""
    result = verdict.mlperf or MlperfCompliance()
    head: list[str | tuple[str, str]] = [("perfwarden audit-mlperf: ", ""), (verdict.shown, _STYLE.get(verdict.verdict, "bold"))]
    if result.test or result.scenario:
        src = f", test from {result.test_source}" if result.test_source else ""
        head.append(f"  {result.test or 'test unknown'} {result.scenario or ''}{src}")
    console.print(safe_text(*head))
    if result.message and not any(f.severity != "INFO" for f in verdict.findings):
        console.print(safe_text((result.message, "dim")))
    if result.reference_score is not None:
        scores = Table(title="Scores (re-derived from the detail logs)", show_lines=False)
        for col in ("run", "scenario", "detail", "summary", "unit"):
            # scenario and unit are read from the logs: one line each, however long a forged one is
            scores.add_column(col, no_wrap=True, overflow="ellipsis", max_width=24)
        scores.add_row("reference", safe_text(result.scenario or "-"), _fmt(result.reference_score),
                       _fmt(result.summary_scores.get("reference")), safe_text(result.score_unit or ""))
        scores.add_row("compliance", safe_text(result.compliance_scenario or "-"), _fmt(result.compliance_score),
                       _fmt(result.summary_scores.get("compliance")), safe_text(result.score_unit or ""))
        console.print(scores)
        if result.ratio is not None:
            console.print(safe_text(f"ratio compliance/reference = {result.ratio:.4f}; threshold "
                                    f"{result.threshold:g}; rule: {result.rule or ''}"))
    if verdict.findings:
        console.print(Text("Findings", style="bold"))
    for f in sorted(verdict.findings, key=lambda f: {"FAIL": 0, "FLAG": 1, "INFO": 2}[f.severity]):
        evidence = [safe_text(f"{_short(e.file)}:{e.line}" if e.line else _short(e.file)) for e in f.evidence]
        console.print(Padding(finding_block(f, evidence), (0, 0, 0, 2), expand=False))
    print_notes(console, "not checked", verdict.not_checked, "yellow")


def audit_mlperf(
    reference: Path = typer.Option(..., "--reference", "-r",
                                   help="Reference run directory (mlperf_log_summary.txt + "
                                        "mlperf_log_detail.txt)."),
    compliance: Path = typer.Option(..., "--compliance", "-c",
                                    help="Compliance run directory (TEST01/TEST04/TEST05 "
                                         "performance run)."),
    test: str | None = typer.Option(None, "--test", "-t",
                                    help="TEST01, TEST04 or TEST05; default: detected from the "
                                         "compliance run's audit settings."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Re-derive an MLPerf LoadGen compliance verdict (TEST01/TEST04/TEST05) from the raw logs."""
    try:
        declared = mlperf.normalize_test(test)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--test'") from exc
    try:
        verdict = mlperf.audit(reference, compliance, declared)
    except mlperf.UnreadableLogs as unreadable:
        _unreadable(unreadable, json_out)
    except Exception as exc:  # the auditor's own failure: report it, marked degraded, never a PASS
        if os.environ.get("PERFWARDEN_DEBUG"):
            traceback.print_exc()
        payload = {"verdict": "error", "message": f"internal error in the MLPerf auditor: {exc!r}",
                   "degraded": True, "internal_error": True, "test": declared,
                   "auditor_version": mlperf.AUDITOR_VERSION}
        if json_out:
            typer.echo(json.dumps(payload, sort_keys=True))
        else:
            print_error(Console(stderr=True, highlight=False), payload["message"])
        raise typer.Exit(ExitCode.INVALID) from None
    if json_out:
        typer.echo(json.dumps(mlperf.report_json(verdict), ensure_ascii=True))  # ASCII: no raw controls
    else:
        render(verdict, Console(file=sys.stdout, highlight=False))
    raise typer.Exit(EXIT_BY_VERDICT[verdict.verdict])


def _unreadable(error: mlperf.UnreadableLogs, json_out: bool) -> NoReturn:
    """Logs that are not LoadGen output: bad input, exit 3 (``"verdict": "error"`` with ``--json``)."""
    if json_out:
        typer.echo(json.dumps(mlperf.error_json(error), ensure_ascii=True))
    else:
        err = Console(stderr=True, highlight=False)
        print_error(err, "unreadable or malformed LoadGen logs")
        for f in error.findings:
            loc = ""
            if f.evidence:
                e = f.evidence[0]
                loc = f" ({e.file}{':' + str(e.line) if e.line else ''})"
            err.print(safe_text(f"  {f.code}: {f.message}{loc}"))
    raise typer.Exit(EXIT_BY_VERDICT["error"])
