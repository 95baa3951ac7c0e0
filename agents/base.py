"""What producers hand to each other and to the auditor: proposals, outcomes, and the brain interface.

A producer has two interchangeable brains (design §5): a deterministic policy (the default, no API key)
and an LLM brain behind any OpenAI-compatible endpoint. Both return the same typed objects, so the
graph never knows which one answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from perfwarden.formats.records import Claim, LeverClass, Mechanism, MechanismName
from perfwarden.formats.verdict_summary import VerdictSummary

ProposalKind = Literal["config", "kernel"]
ProposalStatus = Literal["pending", "benchmarked", "measuring", "banked", "rejected", "skipped"]


class StepLook(BaseModel):
    """How the producer's sequential rule (``agents/sequential.py``) ended a step's measurement: a win, a
    clear loser or a step its noise or budget cannot decide (futile), or its most reps without a win."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["win", "futile", "no_win"]
    """What the last look decided."""
    reps: tuple[int, int]
    """Baseline and candidate reps at that look (0, 0 when no look could be made)."""
    max_reps: int
    """The most reps per leg the step could reach (the run's budget and ``max_reps``)."""
    improvement_pct: float | None = None
    """The objective's improvement at that look, percent (positive: better, whichever way the metric goes)."""
    p_value: float | None = None
    """One-sided Welch p of "the candidate is better" on log rep values."""
    level: float | None = None
    """The look's nominal level (None: no look of the schedule has these leg sizes)."""
    reason: str
    """One line: why the look stopped the step."""


class Proposal(BaseModel):
    """One change a producer wants to try."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    id: str
    """Stable id, unique in the run (used in leg names and as the claim's lever name)."""
    kind: ProposalKind
    """``config`` (a knob change) or ``kernel`` (an op override)."""
    producer: str
    """Producer that proposed it."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Knobs to set on top of ``against``."""
    against: dict[str, Any] = Field(default_factory=dict)
    """The best banked configuration when the step was proposed (knob changes over the true baseline,
    ``op_overrides`` included): the A/B's baseline leg runs it, the candidate runs it plus this change."""
    lossless: bool = True
    """The producer's belief from the target's config model: False plans a quality eval before claiming."""
    op: str | None = None
    """Kernel proposals: the op overridden."""
    candidates: list[str] = Field(default_factory=list)
    """Kernel proposals: implementation specs (``path.py:function``) still in the running."""
    chosen: str | None = None
    """Kernel proposals: the implementation the harness audit accepted."""
    believed_class: Literal["A", "B"] = "A"
    """Lever class the producer believes (the auditor judges it independently)."""
    headline_kind: Literal["e2e", "kernel", "isolated"] = "e2e"
    """How the producer presents its headline."""
    mechanism: MechanismName = "baseline"
    """ISB1 mechanism the producer declares."""
    mechanism_variant: str | None = None
    """Mechanism variant."""
    support: Literal["supported", "experimental", "unsupported"] = "supported"
    """Support status the producer claims."""
    draft_model_id: str | None = None
    """Speculative decoding: the draft model or method."""
    acceptance_rate: float | None = None
    """Speculative decoding: acceptance the producer measured (mean accept length per step)."""
    quality_eval_id: str | None = None
    """Quality eval the producer cites (filled by a fix after QUALITY_EVAL_MISSING)."""
    isolated_speedup: float | None = None
    """Kernel proposals: the op-bench speedup the harness audit re-derived."""
    disclosed_regressions: dict[str, float] = Field(default_factory=dict)
    """Latency metrics the producer states got worse (percent), from its own reading of the legs."""
    stated_pct: float | None = None
    """The headline delta (percent) the last patch claim stated, from the producer's own reading of its
    legs (``agents/own_figures.py``) or, with an LLM brain, the figure the model stated from it."""
    stated_by: Literal["code", "llm"] | None = None
    """Who stated ``stated_pct``: the producer's code or its LLM brain."""
    figure_by: Literal["brain", "code"] = "brain"
    """Who states the next claim's figure: the brain (the LLM when there is one), or the producer's code
    (after the auditor found the brain's figure misreported)."""
    reps: int = 3
    """Reps per leg for the next measurement."""
    attempts: int = 0
    """Patch audits so far."""
    legs: list[str] | None = None
    """Baseline and candidate legs of the current comparison (None: the next measurement starts fresh
    legs; kept: a re-measure extends the same legs with more reps, A B A B)."""
    harness_attempts: int = 0
    """Harness audits so far."""
    status: ProposalStatus = "pending"
    """Where the proposal stands."""
    history: list[str] = Field(default_factory=list)
    """What happened, one line per step (for the report)."""
    rationale: str = ""
    """Why the producer proposed it."""
    trial: int | None = None
    """The Optuna study's trial number this step measures (agents/search.py; None: not from the study)."""
    look: StepLook | None = None
    """How the sequential rule ended the current legs' measurement (None: not measured yet, or fresh legs)."""

    def kernel_op(self) -> str:
        """The op a kernel change overrides (the kernel-extractor names one on every kernel proposal)."""
        if self.op is None:
            raise ValueError(f"{self.id}: a kernel change names no op")
        return self.op

    def ab_legs(self) -> list[str]:
        """The current comparison's legs (baseline, candidate): the integrator names them before it measures."""
        if self.legs is None:
            raise ValueError(f"{self.id}: the step has no measured legs yet")
        return self.legs


FixAction = Literal["resubmit", "remeasure", "run_quality_eval", "reclassify", "disclose", "drop"]
"""A producer's answer to a FAIL/FLAG patch verdict (the graph routes on it: orchestrator/graph.py ``route_fix``)."""


class FixDecision(BaseModel):
    """A producer's answer to a FAIL/FLAG verdict."""

    model_config = ConfigDict(extra="forbid")

    action: FixAction
    """What to do next."""
    reason: str = Field(json_schema_extra={"maxLength": 120})
    """One line, for the report (the bound is the schema's: structured output stops a model there)."""
    believed_class: Literal["A", "B"] | None = None
    """New lever class when reclassifying."""
    headline_kind: Literal["e2e", "kernel", "isolated"] | None = None
    """New headline kind when reclassifying."""


class BankedChange(BaseModel):
    """A change whose patch claim the auditor passed: one accepted step of the search."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The claim's lever name (the proposal id)."""
    kind: ProposalKind
    """``config`` or ``kernel``."""
    lever_class: LeverClass
    """Class the auditor detected (or the producer's belief when the auditor saw none)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Config proposals: the knob change."""
    against: dict[str, Any] = Field(default_factory=dict)
    """The configuration it was measured against (knob changes over the true baseline)."""
    op: str | None = None
    """Kernel proposals: the op overridden."""
    impl: str | None = None
    """Kernel proposals: the implementation installed."""
    verdict: str
    """The passing verdict file."""
    claim: str
    """The claim file it answered."""
    headline_rederived_pct: float | None = None
    """Output-throughput delta the auditor re-derived against ``against`` (percent)."""
    quality_eval_id: str | None = None
    """Quality eval completed for it (lossy changes)."""
    mechanism: Mechanism = Field(default_factory=Mechanism)
    """Mechanism the claim declared."""
    disclosed_regressions: dict[str, float] = Field(default_factory=dict)
    """Latency trade-offs the claim disclosed (percent)."""
    superseded_by: str | None = None
    """Set in the run's report: the later banked step that overwrote every knob this one set, so nothing of
    it is in the final configuration (``agents/integrator.superseded_by``); None while it survives."""

    def overlay(self) -> dict[str, Any]:
        """This change as knob changes (a kernel is an ``op_overrides`` entry)."""
        if self.kind == "kernel":
            return {"op_overrides": {self.op: self.impl}}
        return dict(self.config)


class Rejection(BaseModel):
    """A change the run gave up on, and why."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Proposal id."""
    verdict: str | None = None
    """The last verdict file, when an audit decided it."""
    reason: str
    """One line: the codes or the failure that ended it."""


def apply_overlay(config: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``overlay`` applied; ``op_overrides`` merge op by op instead of replacing."""
    out = dict(config)
    for key, value in overlay.items():
        if key == "op_overrides":
            out[key] = {**(out.get(key) or {}), **value}
        else:
            out[key] = value
    return out


class AttackProducer(Protocol):
    """The seam for ``perfwarden run --red-team``: a producer whose only goal is a banked fake win. Its
    claims go through the same auditor node (the graph's ``red_team`` node, after the bundle audit);
    every one must be refused, and the report lists them. ``redteam/red_team.py`` provides it as
    ``make_producer(settings: RunSettings) -> AttackProducer`` (cli/run.py loads it)."""

    name: str

    def next_attack(self, run: Path, banked: list[BankedChange], verdicts: list[VerdictSummary]) -> Claim | None:
        """Write whatever evidence the attack needs inside ``run`` and return its claim (None: done)."""
