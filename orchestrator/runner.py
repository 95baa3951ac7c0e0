"""Run or resume the graph with a SQLite checkpointer inside the run directory.

Resume always ends in a report or in a ``RunUsageError`` that says why it cannot (never a silent
no-op). A run killed at any instant is in one of these states on disk, each handled:

- no settings.json: not a run (error). ``run`` creates the directory with its settings.json in one
  rename (:func:`created_run`), so a kill never leaves a run directory without one;
- settings.json but no checkpoint file, or a checkpoint file with no checkpoint in it yet (killed
  just after ``sqlite3.connect`` created it): no node ran, so the run starts from the beginning;
- a checkpoint with work left (``next``), or a finished task whose writes were saved just before the
  crash (``tasks``): the graph continues, and every node's side effects are idempotent;
- a finished graph: its report is rewritten from the final state if the files are missing;
- a checkpoint that is neither finished nor has work left: an error naming the stage it stopped at.
"""

from __future__ import annotations

import os
import sqlite3
import typing
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import ValidationError

from perfwarden.agents.base import AttackProducer
from perfwarden.agents.brains import Brains
from perfwarden.formats import safe_write
from perfwarden.formats.objective import RunObjective
from perfwarden.formats.records import RunDir, write_json_atomic
from perfwarden.formats.safe_read import RECORD_BYTES, read_bytes
from perfwarden.formats.strict_json import StrictJsonError, loads
from perfwarden.harness import run_lock
from perfwarden.harness.labs.lab import Lab, LabError, check_leg_writes
from perfwarden.harness.llm_client import LLMClient
from perfwarden.orchestrator.checkpoint_serde import (CheckpointTypeError, StateOnlySerializer, check_names,
                                                      check_state)
from perfwarden.orchestrator.crashpoints import crash_point
from perfwarden.orchestrator.exit_codes import disk_full
from perfwarden.orchestrator.graph import build_graph, initial_state
from perfwarden.orchestrator.lab_spec import describe, run_base_config
from perfwarden.orchestrator.report import write_report
from perfwarden.orchestrator.settings import RunSettings, settings_error
from perfwarden.orchestrator.state import (RESUMABLE_STATE_VERSIONS, STATE_VERSION, RunContext, RunState, RunWatcher,
                                           SilentWatcher)

if TYPE_CHECKING:  # Ray loads only for --cluster
    from perfwarden.orchestrator.cluster import Cluster

THREAD_ID = "perfwarden-run"


class RunUsageError(ValueError):
    """The user asked for something this run directory cannot do (exit 2/3 at the CLI)."""


def checkpoint_path(run: Path) -> Path:
    return Path(run) / "checkpoints.sqlite"


def settings_path(run: Path) -> Path:
    return Path(run) / "settings.json"


RUN_FILES = ("settings.json", "run.json", "objective.json", "events.jsonl", "evidence.jsonl", "report.json",
             "report.md", "logs/lab.log")
"""Files ``run`` writes at the top of a run directory (legs, claims and verdicts are checked apart)."""
RUN_DIRS = ("claims", "verdicts", "logs", "legs", "quality", "profile", "opbench", "generated")


def check_run_writes(run: Path) -> None:
    """Before a run writes anything: no file it writes (the checkpoint database included, before SQLite
    opens it) nor any leg it may continue is a link, FIFO or folder where a file belongs (exit 3)."""
    run = Path(run)
    try:
        safe_write.preflight(run, files=[run / f for f in RUN_FILES], dirs=[run / d for d in RUN_DIRS])
        safe_write.check_sqlite(checkpoint_path(run), run)
        for folder in ("claims", "verdicts"):
            safe_write.check_files_in(run / folder, run)
        entries = sorted(os.listdir(run / "legs"))[:10_000] if os.path.isdir(run / "legs") else []
        legs = [e for e in entries if not os.path.isfile(run / "legs" / e) or os.path.islink(run / "legs" / e)]
        for leg in legs:  # a leg the run may continue: a real folder, named as a leg, holding no link
            safe_write.check_dir(run / "legs" / leg, run)
        check_leg_writes(run, legs)
    except OSError as exc:
        raise RunUsageError(f"cannot write into {str(run)!r}: {exc}") from None


def _write_settings(folder: Path, settings: RunSettings) -> None:
    crash_point("before_settings")
    write_json_atomic(settings_path(folder), settings, folder)


def _enter_lock(stack: ExitStack, run: Path, **kw: Any) -> run_lock.RunLock:
    """``run_lock.hold(run, **kw)`` entered on ``stack``; a run directory it cannot lock is a usage error
    (``RunBusy``, and a link or FIFO at the lock file, stay what they are: the CLI names them)."""
    try:
        return stack.enter_context(run_lock.hold(run, **kw))
    except run_lock.NotARunDirectory as exc:
        raise RunUsageError(str(exc)) from None
    except OSError as exc:
        if isinstance(exc, safe_write.RefusedWrite) or disk_full(exc) is not None:
            raise  # a full disk is named as one by the command (exit NO_SPACE), not as a usage error
        raise RunUsageError(f"cannot take the writer lock of {str(run)!r}: {exc}") from None


@contextmanager
def created_run(run: Path, settings: RunSettings) -> Iterator[run_lock.RunLock]:
    """Make ``run`` with its settings.json and hold its writer lock for the block. A new folder is built
    beside its final place, locked, with its settings, and renamed in (``run_lock.hold``): a kill at any
    instant leaves no run directory (start again) or one that resumes -- never a folder without settings
    that ``--resume`` must refuse as not a run -- and no writer ever finds it unlocked. A folder that
    already exists (the user's ``--out``) is locked, then gets its settings.json written atomically in
    place, unless it already holds a run."""
    with ExitStack() as stack:
        lock = _enter_lock(stack, run, create=True, populate=lambda folder: _write_settings(folder, settings))
        if not lock.created:
            if checkpoint_path(run).is_file():
                raise RunUsageError(f"{str(run)!r} already holds a run; use --resume or another directory")
            _write_settings(run, settings)
        yield lock


@contextmanager
def resumed_run(run: Path) -> Iterator[run_lock.RunLock]:
    """Hold an existing run's writer lock for the block."""
    with ExitStack() as stack:
        yield _enter_lock(stack, run)


def create_run(run: Path, settings: RunSettings) -> None:
    """:func:`created_run`, the lock released at once."""
    with created_run(run, settings):
        pass


def read_settings(run: Path) -> RunSettings:
    """The settings a run started with (a resumed run keeps them); RunUsageError when unreadable."""
    try:
        data = loads(read_bytes(settings_path(run), run, limit=RECORD_BYTES, what="settings"),
                     what=repr(str(settings_path(run))))
    except OSError as exc:
        raise RunUsageError(f"{str(run)!r} is not a perfwarden run directory: {exc}{_empty_hint(run)}") from None
    except StrictJsonError as exc:
        raise RunUsageError(f"{exc}: the settings are not read") from None
    try:
        return RunSettings.model_validate(data)
    except ValidationError as exc:
        raise RunUsageError(settings_error(exc, f"{str(settings_path(run))!r} is invalid")) from None


def check_sealed_objective(run: Path, settings: RunSettings) -> None:
    """A resumed run optimizes the objective it sealed at its start (``objective.json``): settings.json naming
    another (edited since) would judge the rest of the run against something else. No objective.json yet:
    the run stopped before its setup sealed one, which the resumed setup does."""
    path = RunDir(run).objective
    if not path.is_file():
        return
    try:
        sealed = RunObjective.model_validate_json(read_bytes(path, run, limit=RECORD_BYTES, what="objective"))
    except OSError as exc:
        raise RunUsageError(f"{str(path)!r} cannot be read: {exc}") from None
    except ValidationError as exc:
        raise RunUsageError(settings_error(exc, f"{str(path)!r} is invalid")) from None
    if sealed.objective != settings.objective or sealed.slo != settings.slo:
        raise RunUsageError(f"the run sealed the objective {sealed.describe()} at its start, but its settings.json "
                            f"now says {settings.run_objective().describe()}: a run keeps its objective")


def _empty_hint(run: Path) -> str:
    try:
        with os.scandir(run) as entries:
            empty = next(entries, None) is None
    except OSError:
        empty = False
    return " (the folder is empty: no run started in it; start one with `perfwarden run --out`)" if empty else ""


def ensure_report(run: Path, state: RunState, context: RunContext) -> RunState:
    """A finished run has its report: rewrite it from the final state when the files are missing
    (deleted, or lost with the directory copied without them); an unfinished one is an error."""
    if state.get("stage") != "done":
        raise RunUsageError(f"the run in {str(run)!r} stopped at stage {state.get('stage')!r} with no step left to "
                            "run and no report; it cannot be resumed (start a new run)")
    if not (Path(run) / "report.json").is_file() or not (Path(run) / "report.md").is_file():
        write_report(Path(run), state, run_base_config(context.lab, context.settings),
                     objective=context.settings.run_objective())
    return state


def _graph(run: Path, checkpointer_url: str | None):
    if checkpointer_url and checkpointer_url.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver  # optional dependency
        except ImportError as exc:
            raise RunUsageError("a Postgres checkpointer needs `pip install langgraph-checkpoint-postgres`") from exc
        cm = PostgresSaver.from_conn_string(checkpointer_url)
        saver = cm.__enter__()
        saver.serde = StateOnlySerializer()
        saver.setup()
        return build_graph().compile(checkpointer=saver), cm
    run_lock.require(run, "the checkpoint")  # only the run's one writer opens it (design §2)
    conn = sqlite3.connect(checkpoint_path(run), check_same_thread=False)
    return build_graph().compile(checkpointer=SqliteSaver(conn, serde=StateOnlySerializer())), conn


def _connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (imported here: Ray loads only for ``--cluster``, and reads its
    environment, prepared for this address, when it does)."""
    from perfwarden.orchestrator import ray_env

    ray_env.prepare(address)
    from perfwarden.orchestrator import cluster

    try:
        cluster.connect(address)
    except cluster.ClusterError as exc:
        raise RunUsageError(str(exc)) from None


def _describable(lab: Lab) -> None:
    """A lab the nodes can rebuild from its description (orchestrator/lab_spec.py), else a usage error."""
    try:
        describe(lab)
    except LabError as exc:
        raise RunUsageError(f"--cluster: {exc}") from None


def _view(run: Path, settings: RunSettings, lab: Lab, watcher: RunWatcher) -> Cluster:
    """The run's view of the joined cluster: its slots, the head's evidence sink, the lab's description the
    nodes build their labs from, and the terminal the nodes' rep events go to."""
    from perfwarden.orchestrator import cluster

    try:
        return cluster.Cluster(run, lab, cluster.resource_for(settings.target), on_rep=watcher.rep)
    except cluster.ClusterError as exc:
        raise RunUsageError(str(exc)) from None


def raw_state_values(graph: Any, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The checkpoint's stored state channels and each pending write, as partial states, exactly as stored:
    what a resumed graph applies, checked before ``get_state`` runs the reducers over the pending writes
    (``benchmarks/fuzz.py --rundir``: ``notes=None`` or ``notes=<int>`` with a pending note ended in the
    reducer's TypeError, exit 1)."""
    saved = graph.checkpointer.get_tuple(config)
    if saved is None:
        return []
    fields = set(typing.get_type_hints(RunState))
    stored = {k: v for k, v in saved.checkpoint.get("channel_values", {}).items() if k in fields}
    writes = [{channel: value} for _task, channel, value in saved.pending_writes or () if channel in fields]
    return [stored, *writes]


def merged_values(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The stored channels with the pending writes applied in order: one view to read the version from (a
    run killed while its input was written holds ``run_dir`` and ``state_version`` as separate pending
    writes, and ``run_dir`` alone read as a version-1 checkpoint: a resume refused at random, 1 in ~50)."""
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part)
    return out


def check_state_version(run: Path, values: dict[str, Any]) -> None:
    """A checkpoint written by another state schema cannot be resumed: say so, and what still works."""
    if "run_dir" not in values:  # checkpointed before the input was applied (only reducer defaults): no state yet
        return
    version = values.get("state_version", 1)
    if version not in RESUMABLE_STATE_VERSIONS:
        raise RunUsageError(
            f"{str(run)!r} was checkpointed with run-state version {version!r}; this perfwarden resumes versions "
            f"{', '.join(map(str, RESUMABLE_STATE_VERSIONS))} only (version 2 made the run state typed; this one "
            f"writes version {STATE_VERSION}). Its raw evidence, claims and verdicts are "
            f"intact: `perfwarden review {run}` shows them and `perfwarden audit` re-audits any claim. "
            "Start a new run to optimize again.")


def run_graph(run: Path, settings: RunSettings, lab: Lab, *, resume: bool = False, llm: LLMClient | None = None,
              checkpointer_url: str | None = None, watcher: RunWatcher | None = None,
              clock: Callable[[], float] = time.time,
              brains: Brains | None = None, attacker: AttackProducer | None = None,
              capture_logs: bool = True, cluster: str | None = None) -> RunState:
    """Start a run (or resume one) and return its final state, holding the run's writer lock throughout
    (``run_lock.RunBusy`` when another process holds it). ``cluster``: a Ray address (``local`` starts
    one here) whose nodes measure the A/B steps (orchestrator/cluster.py); None: this process."""
    run = Path(run)
    check_run_writes(run)
    if cluster is not None:  # before anything is written: an unreachable cluster leaves no run behind
        _connect(cluster)
        _describable(lab)
    if resume:
        if not run.is_dir():
            raise RunUsageError(f"{str(run)!r} is not a directory: nothing to resume")
        settings = read_settings(run)  # a run killed before its settings were written is not a run
        check_sealed_objective(run, settings)
    with resumed_run(run) if resume else created_run(run, settings):
        if not resume:
            crash_point("settings_written")
        return _run_held(run, settings, lab, resume=resume, llm=llm, checkpointer_url=checkpointer_url,
                         watcher=watcher, clock=clock, brains=brains, attacker=attacker, capture_logs=capture_logs,
                         cluster=cluster)


def _run_held(run: Path, settings: RunSettings, lab: Lab, *, resume: bool, llm: LLMClient | None,
              checkpointer_url: str | None, watcher: RunWatcher | None, clock: Callable[[], float], brains: Brains | None,
              attacker: AttackProducer | None, capture_logs: bool, cluster: str | None) -> RunState:
    """The run, its writer lock held (``run_graph``)."""
    context = RunContext(lab=lab, settings=settings, llm=llm, brains=brains or Brains(llm=llm), clock=clock,
                         watcher=watcher or SilentWatcher(), attacker=attacker, run_dir=run,
                         capture_logs=capture_logs)
    if cluster is not None:
        context.cluster = _view(run, settings, lab, context.watcher)
    graph, handle = _graph(run, checkpointer_url)
    crash_point("checkpointer_opened")
    config = {"configurable": {"thread_id": THREAD_ID}, "recursion_limit": settings.recursion_limit}
    try:
        if resume:
            # The stored state is checked before ``get_state``, which already applies pending writes through
            # the reducers (``notes=None`` plus a pending note raised a TypeError there: exit 1).
            stored = raw_state_values(graph, config)
            check_state_version(run, merged_values(stored))
            for values in stored:
                check_state(values, clock())
            snapshot = graph.get_state(config)
            if snapshot.created_at is None:
                # Killed before the first checkpoint was written (the file may exist, empty): no node
                # ran, so starting from the beginning gives the uninterrupted run's result.
                return ensure_report(run, graph.invoke(initial_state(run, clock()), config, context=context), context)
            check_state_version(run, dict(snapshot.values))
            for values in [dict(snapshot.values), *(t.result for t in snapshot.tasks if isinstance(t.result, dict))]:
                check_state(values, clock())  # types, counters, and no place outside the run
                check_names(run, values, lab)  # the state and the writes a resumed graph would apply
            # A task that finished just before the crash has its writes saved but no checkpoint after
            # it yet: ``next`` is then empty while ``tasks`` is not, and invoking applies those writes.
            if not snapshot.next and not snapshot.tasks:  # a finished run: its report names where it is now
                return ensure_report(run, {**snapshot.values, "run_dir": str(run)}, context)
            return ensure_report(run, graph.invoke(None, config, context=context), context)
        return ensure_report(run, graph.invoke(initial_state(run, clock()), config, context=context), context)
    except CheckpointTypeError as exc:
        raise RunUsageError(f"{str(run)!r} cannot be resumed: {exc}") from None
    finally:
        if context.cluster is not None:
            context.cluster.close()
        if hasattr(handle, "close"):
            handle.close()
        elif hasattr(handle, "__exit__"):
            handle.__exit__(None, None, None)
