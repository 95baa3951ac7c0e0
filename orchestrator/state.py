"""The run's typed state (LangGraph channels) and the services nodes receive through the runtime context.

State is what the checkpoint holds: typed records (``Proposal``, ``VerdictSummary`` with its acceptance
decision, ``BankedChange``)
with reducers, so a node returns only what it changed -- new verdicts, banked changes and notes are
appended, a proposal is replaced by id. Services (the lab, the settings, the brains, the LLM client, the
clock, what the terminal shows) are not state: they come through ``Runtime[RunContext]`` and are rebuilt
on resume.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Literal, Protocol

from typing_extensions import TypedDict  # pydantic validates a revived state (checkpoint_serde): it needs this one on 3.11

from perfwarden.agents.base import AttackProducer, BankedChange, FixAction, Proposal, Rejection
from perfwarden.agents.brains import Brains
from perfwarden.formats.records import Claim
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.harness.labs.lab import Lab, LegPlan
from perfwarden.harness.llm_client import LLMClient
from perfwarden.orchestrator.settings import RunSettings

if TYPE_CHECKING:  # Ray and Optuna load only when a run uses them: a cluster, a study sampler
    import optuna

    from perfwarden.orchestrator.cluster import Cluster

STATE_VERSION = 3
"""Version of the checkpointed state. 1: plain dicts; 2: typed records; 3: each verdict summary carries the
acceptance decision made when it was audited (``VerdictSummary.acceptance``)."""
RESUMABLE_STATE_VERSIONS = (2, 3)
"""The versions a resume continues (runner.py refuses any other with a clear message). A version-2 state's
summaries have no recorded decision: ``auditor/acceptance.recorded`` gives the rule's, from the trail."""


FixStep = Literal[FixAction, "done"]
"""What the fix node decided for the current proposal: a producer's ``FixAction``, or ``done`` (banked,
dropped or refused: pick the next change). Typed, so a checkpoint holding anything else is refused on resume
(checkpoint_serde.check_state) instead of being routed by a default."""


def upsert_by_id(left: list[Proposal], right: list[Proposal]) -> list[Proposal]:
    """Proposals reducer: a returned proposal replaces the one with its id, a new one is appended."""
    merged = {p.id: p for p in left}
    for p in right:
        merged[p.id] = p
    return list(merged.values())


def add_counts(left: dict[str, int], right: dict[str, int]) -> dict[str, int]:
    """Counters reducer."""
    out = dict(left)
    for key, n in right.items():
        out[key] = out.get(key, 0) + n
    return out


class RunState(TypedDict, total=False):
    state_version: int
    """``STATE_VERSION`` of the code that started the run."""
    run_dir: str
    """The run directory where the run was recorded (for humans: a copied run has another). Nodes write
    into ``RunContext.run_dir``, the folder given on the command line, never into this (graph.py ``step``)."""
    started_at: float
    """Clock time the run started (the budget counts from it, across resumes)."""
    seq: int
    """Last claim sequence number used."""
    stage: str
    """Where the run is, for humans."""
    baseline_attempts: int
    """Baseline measurements so far."""
    aa_legs: list[str]
    """The baseline leg and its A/A twin (they calibrate every comparison's noise band)."""
    hot_ops: list[tuple[str, float]]
    """The profile's op ranking (op, share of time)."""
    served_shapes: dict[str, list[list[int]]]
    """Op -> the shapes the server ran it at (from the profile)."""
    kernels_proposed: bool
    """Whether the kernel-extractor has proposed its changes (after the config search converged)."""
    proposals: Annotated[list[Proposal], upsert_by_id]
    """Every change tried, in order: the search path."""
    current: str | None
    """Proposal being worked on."""
    pending_claim: str | None
    """Claim file waiting for the auditor node."""
    last_verdict: VerdictSummary | None
    """The auditor's latest answer."""
    verdicts: Annotated[list[VerdictSummary], operator.add]
    """Every verdict, in sequence order."""
    banked: Annotated[list[BankedChange], operator.add]
    """Accepted steps, in order: applied together they are the best configuration."""
    rejected: Annotated[list[Rejection], operator.add]
    """Changes given up on."""
    notes: Annotated[list[str], operator.add]
    """Things the report should say (lab failures, budget stops, LLM fallbacks)."""
    llm_fallbacks: Annotated[dict[str, int], add_counts]
    """Producer -> times its LLM brain's answer was unusable and the deterministic policy answered."""
    fix_action: FixStep | None
    """The producer's answer to the last patch verdict (``route_fix`` routes on it)."""
    bundle_done: bool
    """The bundle legs were measured (or failed)."""
    red_team_done: bool
    """The red-team producer has no more attacks."""
    durations: list[float]
    """Seconds each finished proposal took (the budget stop uses their median)."""
    baseline_s: float
    """Seconds the baseline measurement took (the cost of a change until one has finished)."""
    picked_at: float
    """Clock time the current proposal was picked."""


class RunWatcher(Protocol):
    """What a person watching the run is shown (the terminal; nothing in tests)."""

    def node(self, name: str, detail: str, remaining_s: float) -> None:
        """A node starts; ``remaining_s`` is the run's budget left (``RunContext.remaining_s``), the only
        figure a watcher shows as budget."""

    def measuring(self, legs: list[LegPlan], reps: int) -> None: ...

    def rep(self, leg: str, rep: int, status: str) -> None: ...

    def verdict(self, summary: VerdictSummary, claim: Claim, remaining_s: float) -> None: ...


class SilentWatcher:
    def node(self, name: str, detail: str, remaining_s: float) -> None:
        pass

    def measuring(self, legs: list[LegPlan], reps: int) -> None:
        pass

    def rep(self, leg: str, rep: int, status: str) -> None:
        pass

    def verdict(self, summary: VerdictSummary, claim: Claim, remaining_s: float) -> None:
        pass


@dataclass
class RunContext:
    """Services every node receives through ``Runtime[RunContext]`` (never checkpointed)."""

    lab: Lab
    settings: RunSettings
    llm: LLMClient | None = None
    brains: Brains = field(default_factory=Brains)
    clock: Callable[[], float] = time.time
    watcher: RunWatcher = field(default_factory=SilentWatcher)
    """What the person watching the run is shown."""
    attacker: AttackProducer | None = None
    """The red-team producer (``--red-team``), if any."""
    run_dir: Path | None = None
    """The run directory from the command line (``run_graph`` sets it): every node reads and writes there,
    whatever folder a revived checkpoint names (None only in unit tests that build a context by hand)."""
    cluster: Cluster | None = None
    """The Ray cluster A/B steps fan out to (orchestrator/cluster.py ``Cluster``; None: this process)."""
    study: optuna.Study | None = None
    """The run's Optuna study, opened on first use (orchestrator/study.py)."""
    capture_logs: bool = True
    """Send in-process lab output (torch profiler, weight loading) to RUN/logs/ instead of the terminal."""

    def remaining_s(self, state: RunState) -> float:
        return self.settings.budget_minutes * 60.0 - (self.clock() - state["started_at"])
