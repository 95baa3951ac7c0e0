"""Run or resume the graph with a SQLite checkpointer inside the run directory."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any, Callable

from langgraph.checkpoint.sqlite import SqliteSaver

from perfwarden.agents.base import AttackProducer
from perfwarden.agents.brains import Brains
from perfwarden.agents.llm import LLMClient
from perfwarden.harness.records import write_json_atomic
from perfwarden.orchestrator.graph import build_graph, initial_state
from perfwarden.orchestrator.lab import Lab
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.state import STATE_VERSION, RunContext, RunState, SilentWatcher

THREAD_ID = "perfwarden-run"


class RunUsageError(ValueError):
    """The user asked for something this run directory cannot do (exit 2/3 at the CLI)."""


def checkpoint_path(run: Path) -> Path:
    return Path(run) / "checkpoints.sqlite"


def _graph(run: Path, checkpointer_url: str | None):
    if checkpointer_url and checkpointer_url.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver  # optional dependency
        except ImportError as exc:
            raise RunUsageError("a Postgres checkpointer needs `pip install langgraph-checkpoint-postgres`") from exc
        cm = PostgresSaver.from_conn_string(checkpointer_url)
        saver = cm.__enter__()
        saver.setup()
        return build_graph().compile(checkpointer=saver), cm
    conn = sqlite3.connect(checkpoint_path(run), check_same_thread=False)
    return build_graph().compile(checkpointer=SqliteSaver(conn)), conn


def check_state_version(run: Path, values: dict[str, Any]) -> None:
    """A checkpoint written by another state schema cannot be resumed: say so, and what still works."""
    version = values.get("state_version", 1)
    if version != STATE_VERSION:
        raise RunUsageError(
            f"{str(run)!r} was checkpointed with run-state version {version!r}; this perfwarden resumes version "
            f"{STATE_VERSION} only (version 2 made the run state typed). Its raw evidence, claims and verdicts are "
            f"intact: `perfwarden review {run}` shows them and `perfwarden audit` re-audits any claim. "
            "Start a new run to optimize again.")


def run_graph(run: Path, settings: RunSettings, lab: Lab, *, resume: bool = False, llm: LLMClient | None = None,
              checkpointer_url: str | None = None, watcher: Any = None, clock: Callable[[], float] = time.time,
              brains: Brains | None = None, attacker: AttackProducer | None = None,
              capture_logs: bool = True) -> RunState:
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
    context = RunContext(lab=lab, settings=settings, llm=llm, brains=brains or Brains(llm=llm), clock=clock,
                         watcher=watcher or SilentWatcher(), attacker=attacker, capture_logs=capture_logs)
    graph, handle = _graph(run, checkpointer_url)
    config = {"configurable": {"thread_id": THREAD_ID}, "recursion_limit": settings.recursion_limit}
    try:
        if resume:
            snapshot = graph.get_state(config)
            check_state_version(run, dict(snapshot.values))
            # A task that finished just before the crash has its writes saved but no checkpoint after
            # it yet: ``next`` is then empty while ``tasks`` is not, and invoking applies those writes.
            if not snapshot.next and not snapshot.tasks:
                return snapshot.values
            return graph.invoke(None, config, context=context)
        return graph.invoke(initial_state(run, clock()), config, context=context)
    finally:
        if hasattr(handle, "close"):
            handle.close()
        elif hasattr(handle, "__exit__"):
            handle.__exit__(None, None, None)
