"""Settings of an autonomous run: every loop bound and budget in one place."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RunSettings(BaseModel):
    """What ``perfwarden run`` does and how far each loop may go."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    target: Literal["embedded", "sglang", "synthetic"] = "embedded"
    """Serving target. ``synthetic`` is the test double used by the graph's unit tests."""
    model: str | None = None
    """Weights directory the target serves (``--model``; sglang only: the embedded target serves SmolLM2)."""
    sglang_python: str | None = None
    """Interpreter of the SGLang environment (``--sglang-python`` or ``PERFWARDEN_SGLANG_PYTHON``, resolved
    when the run started; a resumed run checks it again)."""
    budget_minutes: float = 14.0
    """Wall-clock budget; when it runs out, remaining proposals are skipped and the report is written."""
    seed: int = 0
    """Seed of prompt sampling and load schedules."""
    reps: int = 3
    """Reps per leg on the first measurement of a comparison."""
    max_reps: int = 7
    """Reps per leg after re-measuring (the auditor's power target assumes <= 7)."""
    rep_seconds: float = 4.0
    """LoadGen min_duration per rep (Server scenario)."""
    scenario: Literal["server", "offline"] = "offline"
    """LoadGen scenario. Offline by default: on a 2-core CPU a fixed Server QPS either sits below
    capacity (throughput then equals the offered load for every config) or queues without bound."""
    qps: float = 2.0
    """Target QPS of the Server scenario."""
    offline_samples: int = 8
    """Samples in one Offline rep (all issued at once)."""
    max_tokens: int = 16
    """Output tokens per request (ignore_eos keeps lengths fixed)."""
    max_baseline_remeasures: int = 2
    """Baseline re-measures after a FLAG/FAIL baseline audit before the run gives up."""
    max_fix_attempts: int = 2
    """Times a producer may fix and resubmit one change after a FAIL."""
    max_harness_redos: int = 2
    """Times the op-benchmarker may redo a rig after a FAIL."""
    max_proposals: int = 12
    """Upper bound on changes (search steps and kernel changes) tried in one run; the budget usually
    stops the search first."""
    recursion_limit: int = 200
    """LangGraph recursion limit (every loop is bounded anyway; this is the backstop)."""
    base_config: dict = Field(default_factory=dict)
    """Target knobs of the true baseline (the target's defaults when empty)."""
    levers: list[str] | None = None
    """Search exactly these knobs (``knob`` or ``knob=value``; None: the target's default search space,
    from its config model)."""
    kernels: bool = True
    """Whether the kernel path (profile, extract, op bench, integrate) runs."""
    red_team: bool = False
    """Add the red-team producer (agents/red_team.py): its claims go through the same auditor node and
    must all be refused."""
    max_red_team_attacks: int = 20
    """Upper bound on red-team claims in one run."""
    llm_model: str | None = None
    """Model name for the LLM brains and the auditor persona (None: deterministic only)."""
    llm_timeout_s: float = 60.0
    """Timeout of one LLM call."""
    llm_max_retries: int = 2
    """Retries of an LLM call whose output fails validation or whose request fails."""
    llm_max_tokens: int | None = 512
    """Cap on one LLM answer's length (None: the endpoint's default)."""
