"""``perfwarden run``: the autonomous optimization run, with rich progress and a resumable checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console

from perfwarden.orchestrator.exit_codes import ExitCode
from perfwarden.orchestrator.runner import RunUsageError, run_graph
from perfwarden.orchestrator.settings import RunSettings


def make_lab(settings: RunSettings):
    if settings.target == "synthetic":
        from perfwarden.orchestrator.simlab import SyntheticLab

        return SyntheticLab()
    from perfwarden.orchestrator.embedded_lab import EmbeddedLab

    return EmbeddedLab.from_settings(settings)


def run(
    target: str = typer.Option("embedded", "--target", help="embedded (real SmolLM2 on CPU) or synthetic."),
    out: Path = typer.Option(None, "--out", help="Run directory (default: runs/<UTC timestamp>)."),
    resume: Path = typer.Option(None, "--resume", help="Continue the run in this directory after a crash."),
    budget_minutes: float = typer.Option(None, "--budget-minutes", help="Wall-clock budget (default 14)."),
    llm: str = typer.Option(None, "--llm", help="Model for the LLM brains and auditor persona "
                            "(OPENAI_BASE_URL, OPENAI_API_KEY)."),
    levers: str = typer.Option(None, "--levers", help="Comma-separated knobs to search (default: all)."),
    no_kernels: bool = typer.Option(False, "--no-kernels", help="Skip profile, op bench and kernel changes."),
    reps: int = typer.Option(None, "--reps", help="Reps per leg on a first measurement (default 3)."),
    checkpointer: str = typer.Option(None, "--checkpointer", help="postgresql://… for shared deployments "
                                     "(default: SQLite inside the run directory)."),
) -> None:
    """Optimize the target; bank only what the auditor passes. Writes RUN/report.md and report.json."""
    err = Console(stderr=True, soft_wrap=True)
    if target not in ("embedded", "synthetic"):
        err.print(f"[red]error:[/red] unknown target {target!r} (embedded, synthetic)")
        raise typer.Exit(ExitCode.USAGE)
    settings_kw: dict = {"target": target}
    if budget_minutes is not None:
        settings_kw["budget_minutes"] = budget_minutes
    if levers:
        settings_kw["levers"] = [x.strip() for x in levers.split(",") if x.strip()]
    if no_kernels:
        settings_kw["kernels"] = False
    if reps is not None:
        settings_kw["reps"] = reps
    if llm:
        settings_kw["llm_model"] = llm
    settings = RunSettings(**settings_kw)
    if resume is not None:  # a resumed run keeps the settings it started with
        try:
            settings = RunSettings.model_validate_json((resume / "settings.json").read_text("utf-8"))
        except (OSError, ValueError) as exc:
            err.print(f"[red]error:[/red] {str(resume)!r} is not a perfwarden run directory: {exc}")
            raise typer.Exit(ExitCode.INVALID) from None
    run_dir = resume or out or Path("runs") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    client = None
    if llm:
        from perfwarden.agents.llm import LLMClient

        client = LLMClient(model=llm, timeout_s=settings.llm_timeout_s, max_retries=settings.llm_max_retries)
    started = time.time()

    def on_event(node: str, detail: str) -> None:
        err.print(f"[dim]{time.time() - started:6.1f}s[/dim] {node}" + (f" [cyan]{detail}[/cyan]" if detail else ""))

    try:
        lab = make_lab(settings)
        state = run_graph(Path(run_dir), settings, lab, resume=resume is not None, llm=client,
                          checkpointer_url=checkpointer, on_event=on_event)
    except RunUsageError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.INVALID) from None
    except KeyboardInterrupt:
        err.print(f"\n[yellow]interrupted[/yellow]: continue with `perfwarden run --resume {run_dir}`")
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    console = Console()
    banked = state.get("banked", [])
    console.print(f"run directory: {run_dir}")
    for b in banked:
        delta = b.get("headline_rederived_pct")
        console.print(f"[green]banked[/green] class {b['lever_class']} {b['name']}: "
                      + (f"{delta:+.2f}% output throughput" if delta is not None else "") + f" ({b['verdict']})")
    for r in state.get("rejected", []):
        console.print(f"[red]refused[/red] {r['name']}: {r['reason']} ({r['verdict']})")
    console.print(f"report: {Path(run_dir) / 'report.md'}  ({time.time() - started:.0f}s)")
