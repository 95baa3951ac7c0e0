"""What producers hand to each other and to the auditor: proposals, outcomes, and the brain interface.

A producer has two interchangeable brains (design §5): a deterministic policy (the default, no API key)
and an LLM brain behind any OpenAI-compatible endpoint. Both return the same typed objects, so the
graph never knows which one answered.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ProposalKind = Literal["config", "kernel"]
ProposalStatus = Literal["pending", "benchmarked", "measuring", "banked", "rejected", "skipped"]


class Proposal(BaseModel):
    """One change a producer wants to try."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    id: str
    """Stable id, unique in the run (used in leg names)."""
    kind: ProposalKind
    """``config`` (a knob change) or ``kernel`` (an op override)."""
    producer: str
    """Producer that proposed it."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Knobs to set on top of the baseline config."""
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
    mechanism: str = "baseline"
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


class FixDecision(BaseModel):
    """A producer's answer to a FAIL/FLAG verdict."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["resubmit", "remeasure", "run_quality_eval", "reclassify", "disclose", "drop"]
    """What to do next."""
    reason: str
    """One line, for the report."""
    believed_class: Literal["A", "B"] | None = None
    """New lever class when reclassifying."""
    headline_kind: Literal["e2e", "kernel", "isolated"] | None = None
    """New headline kind when reclassifying."""
