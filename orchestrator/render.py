"""Terminal rendering of verdicts (rich), shared by ``audit``, ``run`` and ``review``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfwarden.harness.records import Verdict

VERDICT_STYLE = {"PASS": "bold green", "FLAG": "bold yellow", "FAIL": "bold red"}
SEVERITY_STYLE = {"INFO": "dim", "FLAG": "yellow", "FAIL": "red"}


def short(value: Any, width: int = 28) -> str:
    if value is None:
        return "-"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def findings_table(verdict: Verdict) -> Table:
    table = Table(show_lines=False, expand=False, title=None, pad_edge=False)
    table.add_column("sev", no_wrap=True)
    table.add_column("code", no_wrap=True)
    table.add_column("measured / threshold", overflow="fold")
    table.add_column("evidence", overflow="fold")
    table.add_column("message", overflow="fold", ratio=1)
    for f in verdict.findings:
        ev = ", ".join(f"{e.file}:{e.line}" if e.line else e.file for e in f.evidence[:2]) or "-"
        table.add_row(Text(f.severity, style=SEVERITY_STYLE[f.severity]), Text(f.code),
                      Text(f"{short(f.measured)} / {short(f.threshold)}"), Text(ev), Text(f.message))
    return table


def print_verdict(verdict: Verdict, console: Console | None = None) -> None:
    console = console or Console()
    head = Text.assemble((verdict.verdict, VERDICT_STYLE[verdict.verdict]), f"  action={verdict.action}",
                         f"  scope={verdict.scope}  claim={verdict.claim}")
    console.print(head)
    if verdict.headline_rederived is not None or verdict.headline_claimed is not None:
        console.print(Text(f"headline: claimed {short(verdict.headline_claimed)}  re-derived "
                           f"{short(verdict.headline_rederived)}"))
    if verdict.lever_declared or verdict.lever_detected:
        console.print(Text(f"lever: declared {verdict.lever_declared or '-'}  detected {verdict.lever_detected or '-'}"))
    if verdict.findings:
        console.print(findings_table(verdict))
    for item in verdict.not_checked:
        console.print(Text(f"not checked: {item}", style="dim"))
    if verdict.degraded:
        console.print(Text(f"degraded: {'; '.join(verdict.degraded_reasons)}", style="yellow"))
