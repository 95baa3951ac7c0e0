"""Run or resume the graph with a SQLite checkpointer inside the run directory."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any, Callable

from langgraph.checkpoint.sqlite import SqliteSaver

from perfwarden.agents.llm import LLMClient
from perfwarden.harness.records import write_json_atomic
from perfwarden.orchestrator.graph import Services, build_graph
from perfwarden.orchestrator.lab import Lab
from perfwarden.orchestrator.settings import RunSettings

THREAD_ID = "perfwarden-run"


class RunUsageError(ValueError):
    """The user asked for something this run directory cannot do (exit 2/3 at the CLI)."""


def checkpoint_path(run: Path) -> Path:
    return Path(run) / "checkpoints.sqlite"


def _graph(run: Path, services: Services, checkpointer_url: str | None):
    if checkpointer_url and checkpointer_url.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver  # optional dependency
        except ImportError as exc:
            raise RunUsageError("a Postgres checkpointer needs `pip install langgraph-checkpoint-postgres`") from exc
        cm = PostgresSaver.from_conn_string(checkpointer_url)
        saver = cm.__enter__()
        saver.setup()
        return build_graph(services).compile(checkpointer=saver), cm
    conn = sqlite3.connect(checkpoint_path(run), check_same_thread=False)
    return build_graph(services).compile(checkpointer=SqliteSaver(conn)), conn


def run_graph(run: Path, settings: RunSettings, lab: Lab, *, resume: bool = False, llm: LLMClient | None = None,
              checkpointer_url: str | None = None, on_event: Callable[[str, str], None] | None = None,
              clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """Start a run (or resume one) and return its final state."""
    run = Path(run)
    if resume:
        if not checkpoint_path(run).is_file() and not checkpointer_url:
            raise RunUsageError(f"{str(run)!r} has no checkpoint to resume")
        settings = RunSettings.model_validate_json((run / "settings.json").read_text("utf-8"))
    else:
        if checkpoint_path(run).is_file():
            raise RunUsageError(f"{str(run)!r} already holds a run; use --resume or another directory")
        run.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run / "settings.json", settings)
    services = Services(lab=lab, settings=settings, llm=llm, clock=clock,
                        on_event=on_event or (lambda node, detail: None))
    graph, handle = _graph(run, services, checkpointer_url)
    config = {"configurable": {"thread_id": THREAD_ID}, "recursion_limit": settings.recursion_limit}
    try:
        if resume:
            snapshot = graph.get_state(config)
            # A task that finished just before the crash has its writes saved but no checkpoint after
            # it yet: ``next`` is then empty while ``tasks`` is not, and invoking applies those writes.
            if not snapshot.next and not snapshot.tasks:
                return dict(snapshot.values)
            return graph.invoke(None, config)
        initial = {"run_dir": str(run), "settings": settings.model_dump(), "started_at": clock(), "seq": 0,
                   "verdicts": [], "banked": [], "rejected": [], "proposals": [], "notes": [], "current": None,
                   "pending_claim": None, "bundle_done": False}
        return graph.invoke(initial, config)
    finally:
        if hasattr(handle, "close"):
            handle.close()
        elif hasattr(handle, "__exit__"):
            handle.__exit__(None, None, None)
