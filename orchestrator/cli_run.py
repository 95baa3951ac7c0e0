"""``perfwarden run``: the autonomous optimization run, with rich progress and a resumable checkpoint."""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

import typer
from rich.console import Console

from perfwarden.orchestrator.render import print_error, safe_text
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
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    if target not in ("embedded", "synthetic"):
        print_error(err, f"unknown target {target!r} (embedded, synthetic)")
        raise typer.Exit(2)
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
    from perfwarden.orchestrator.runner import RunUsageError, read_settings, run_graph  # heavy: only when used

    if resume is not None:  # a resumed run keeps the settings it started with
        try:
            settings = read_settings(resume)
        except RunUsageError as exc:
            print_error(err, exc)
            raise typer.Exit(3) from None
    run_dir = resume or out or Path("runs") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    client = None
    if llm:
        from perfwarden.agents.llm import LLMClient

        client = LLMClient(model=llm, timeout_s=settings.llm_timeout_s, max_retries=settings.llm_max_retries)
    started = time.time()

    def on_event(node: str, detail: str) -> None:
        err.print(safe_text((f"{time.time() - started:6.1f}s", "dim"), f" {node}", (f" {detail}" if detail else "", "cyan")))

    try:
        lab = make_lab(settings)
        state = run_graph(Path(run_dir), settings, lab, resume=resume is not None, llm=client,
                          checkpointer_url=checkpointer, on_event=on_event)
    except RunUsageError as exc:
        print_error(err, exc)
        raise typer.Exit(3) from None
    except KeyboardInterrupt:
        err.print(safe_text("\n", ("interrupted", "yellow"), f": continue with `perfwarden run --resume {run_dir}`"))
        raise typer.Exit(130) from None
    except Exception as exc:  # a lab or internal failure: say what and how to continue, never a traceback
        if os.environ.get("PERFWARDEN_DEBUG"):
            traceback.print_exc()
        print_error(err, f"the run stopped on {type(exc).__name__}: {exc}; its checkpoint is kept: continue with "
                         f"`perfwarden run --resume {run_dir}` (PERFWARDEN_DEBUG=1 shows the traceback)")
        raise typer.Exit(1) from None
    console = Console(highlight=False)
    banked = state.get("banked", [])
    console.print(safe_text(f"run directory: {run_dir}"))
    for b in banked:
        delta = b.get("headline_rederived_pct")
        console.print(safe_text(("banked", "green"), f" class {b['lever_class']} {b['name']}: "
                                + (f"{delta:+.2f}% output throughput" if delta is not None else "")
                                + f" ({b['verdict']})"))
    for r in state.get("rejected", []):
        console.print(safe_text(("refused", "red"), f" {r['name']}: {r['reason']} ({r['verdict']})"))
    console.print(safe_text(f"report: {Path(run_dir) / 'report.md'}  ({time.time() - started:.0f}s)"))
