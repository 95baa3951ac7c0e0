"""Settings of an autonomous run: every loop bound and budget in one place.

settings.json is written into the run directory and read back on ``--resume``, so it is input like
any other file of a run (docs/threat-model.md, "Hostile input"): nothing in it names a program, an interpreter or
code to load. The SGLang and vLLM interpreters come from the command line or the environment of the
person running perfwarden (``--sglang-python``, ``PERFWARDEN_SGLANG_PYTHON``, ``--vllm-python``,
``PERFWARDEN_VLLM_PYTHON``), every baseline knob is
validated against the target's config model, and a knob that names code (``CODE_KNOBS``) is refused.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfwarden.formats.objective import Objective, RunObjective, objective_error
from perfwarden.formats.slo import GoodputSlo
from perfwarden.harness.target_config import CODE_KNOBS, TARGET_CONFIGS

def settings_error(exc: Any, what: str) -> str:
    """One line for a pydantic ``ValidationError`` of ``RunSettings``: ``what`` (``'x' is invalid``),
    then its first problem and where."""
    err = exc.errors()[0]
    message = str(err["msg"]).removeprefix("Value error, ")
    loc = ".".join(map(str, err["loc"]))
    return f"{what}: {message}" + (f" at {loc!r}" if loc else "")


STEP_HORIZON_REPS = 12
"""Most reps per leg a step ever measures (a crafted settings.json's 2**63 would measure without end): the horizon of the sequential rule (``agents/sequential.py``,
the auditor's ``sequential.HORIZON_REPS``), where all of its false-win rate is spent (design §4)."""
MIN_STEP_REPS = 2
"""Fewest reps per leg of a step's first look: Welch's t needs two per leg."""
MAX_RETRIES = 10
"""Upper bound of every retry count (re-measures, fixes, redos, LLM retries): each retry repeats a
measurement or a call, and the defaults are 2."""

LEGACY_INTERPRETER = "sglang_python"
"""Field of older runs' settings that named the SGLang interpreter (refused: see ``RunSettings``)."""


class RunSettings(BaseModel):
    """What ``perfwarden run`` does and how far each loop may go."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    target: Literal["embedded", "sglang", "vllm", "synthetic"] = "embedded"
    """Serving target. ``synthetic`` is the test double used by the graph's unit tests."""
    model: str | None = None
    """Weights directory the target serves (``--model``; sglang and vllm: the embedded target serves SmolLM2,
    and vllm serves the converted SmolLM2 when none is named)."""
    budget_minutes: float = Field(14.0, gt=0, le=7 * 24 * 60)
    """Wall-clock budget; when it runs out, remaining proposals are skipped and the report is written. A week at
    most: a run is minutes to hours, and the budget is what ends an unfinished run."""
    seed: int = Field(0, ge=0, lt=2**32)
    """Seed of prompt sampling and load schedules. Unsigned 32 bits, what every seeded generator accepts."""
    reps: int = Field(3, ge=MIN_STEP_REPS, le=STEP_HORIZON_REPS)
    """Reps per leg of a baseline and of a step's first look (the sequential rule's first look: at least 2,
    at most its horizon)."""
    max_reps: int = Field(STEP_HORIZON_REPS, ge=MIN_STEP_REPS, le=STEP_HORIZON_REPS)
    """Most reps per leg a step may reach when its looks leave it undecided; the run's remaining budget
    may stop it sooner (``agents/sequential.max_reps_for_budget``). At most the rule's horizon, 12."""
    rep_seconds: float = Field(4.0, gt=0, le=3600)
    """LoadGen min_duration per rep (Server scenario). An hour at most (a rep is seconds; the budget is
    minutes)."""
    scenario: Literal["server", "offline"] = "offline"
    """LoadGen scenario. Offline by default: on a 2-core CPU a fixed Server QPS either sits below
    capacity (throughput then equals the offered load for every config) or queues without bound."""
    qps: float = Field(2.0, gt=0, le=100_000)
    """Target QPS of the Server scenario. At most 100k: far above what one server answers; a higher rate only
    queues."""
    offline_samples: int = Field(8, ge=1, le=100_000)
    """Samples in one Offline rep (all issued at once). At most 100k (LoadGen issues them all at once and holds
    each in memory)."""
    max_tokens: int = Field(16, ge=1, le=131_072)
    """Output tokens per request (ignore_eos keeps lengths fixed). At most 128k, the longest context a served
    model has."""
    max_baseline_remeasures: int = Field(2, ge=0, le=MAX_RETRIES)
    """Baseline re-measures after a FLAG/FAIL baseline audit before the run gives up."""
    max_fix_attempts: int = Field(2, ge=0, le=MAX_RETRIES)
    """Times a producer may fix and resubmit one change after a FAIL."""
    max_harness_redos: int = Field(2, ge=0, le=MAX_RETRIES)
    """Times the op-benchmarker may redo a rig after a FAIL."""
    max_proposals: int = Field(12, ge=0, le=1000)
    """Upper bound on changes (search steps and kernel changes) tried in one run; the budget usually
    stops the search first. At most 1000: each costs a measured A/B, so more never fits a budget."""
    recursion_limit: int = Field(200, ge=100, le=100_000)
    """LangGraph recursion limit (every loop is bounded anyway; this is the backstop). At most 100k: the backstop
    of bounded loops, never the bound itself. At least 100: below that a settings file could stop a run in the
    middle of its own bounded loops (``true`` reads as 1: found by fuzz --rundir, input 7502)."""
    base_config: dict = Field(default_factory=dict)
    """Target knobs of the true baseline (the target's defaults when empty); each a knob of the target's
    config model with a valid value, none of ``CODE_KNOBS``."""
    levers: list[str] | None = None
    """Search exactly these knobs (``knob`` or ``knob=value``; None: the target's default search space,
    from its config model)."""
    sampler: Literal["auto", "tpe", "random", "grid", "coordinate"] = "auto"
    """How the config-tuner searches (agents/search.py): ``tpe`` an Optuna study over the space, ``random`` and
    ``grid`` the same study drawn uniformly or walking the grid (baselines), ``coordinate`` one knob at a time
    from the best; ``auto``: the study over the default space, coordinate descent over named levers."""
    study_batch: int | None = Field(None, ge=1, le=256)
    """Study trials asked at once, each an A/B against the same best (None: one per ``--cluster`` slot, one
    without a cluster). Fixing it makes the study the same whatever the cluster's size."""
    study_startup: int = Field(8, ge=1, le=1000)
    """Random trials before the TPE sampler models the surface."""
    kernels: bool = True
    """Whether the kernel path (profile, extract, op bench, integrate) runs."""
    red_team: bool = False
    """Add the red-team producer (redteam/red_team.py): its claims go through the same auditor node and
    must all be refused."""
    max_red_team_attacks: int = Field(20, ge=0, le=1000)
    """Upper bound on red-team claims in one run. At most 1000 (the catalogue holds a few dozen)."""
    objective: Objective = "throughput"
    """What the search optimizes and every step's headline states (``formats/objective.py``); fixed when
    the run starts, sealed in ``objective.json``, never changed by a resume."""
    slo: GoodputSlo | None = None
    """The goodput objective's SLO (latency limits in ms a request must meet to count); no other objective
    takes one."""
    llm_model: str | None = None
    """Model name for the LLM brains and the auditor persona (None: deterministic only)."""
    llm_timeout_s: float = Field(60.0, gt=0, le=3600)
    """Deadline of one LLM ask: connect, every read and every retry (the run's remaining budget shortens
    it; with none left there is no ask). An hour at most."""
    llm_max_retries: int = Field(2, ge=0, le=MAX_RETRIES)
    """Retries of an LLM call whose output fails validation or whose request fails, within its deadline."""
    llm_max_tokens: int | None = Field(512, ge=1, le=131_072)
    """Cap on one LLM answer's length (None: the endpoint's default). At most 128k."""

    @model_validator(mode="before")
    @classmethod
    def _no_interpreter(cls, data: Any) -> Any:
        """Older runs named the SGLang interpreter here; a resume would have run whatever it named."""
        if isinstance(data, dict) and LEGACY_INTERPRETER in data:
            raise ValueError(f"a run's settings may not name an interpreter ({LEGACY_INTERPRETER!r}); if this is "
                             f"your own run from an older perfwarden, delete that field from settings.json and "
                             "resume with --sglang-python PY (or PERFWARDEN_SGLANG_PYTHON)")
        return data

    @model_validator(mode="after")
    def _check_objective(self) -> RunSettings:
        """Goodput needs its SLO, no other objective takes one, and the SLO names only its limits (a key it
        does not know would be a limit nobody applies)."""
        problem = objective_error(self.objective, self.slo)
        if problem:
            raise ValueError(problem)
        if self.slo is not None and self.slo.model_extra:
            raise ValueError(f"the SLO names {sorted(self.slo.model_extra)!r}; its limits are ttft_ms, tpot_ms, "
                             "e2el_ms")
        if self.max_reps < self.reps:
            raise ValueError(f"max_reps {self.max_reps!r} is below the first look's {self.reps!r} reps per leg")
        return self

    def run_objective(self) -> RunObjective:
        """The objective as the run records it (``objective.json``)."""
        return RunObjective(objective=self.objective, slo=self.slo)

    @model_validator(mode="after")
    def _check_base_config(self) -> RunSettings:
        """Baseline knobs: known, valid, and none that names code to import (nothing would check it on resume)."""
        code = sorted(set(self.base_config) & CODE_KNOBS)
        if code:
            raise ValueError(f"baseline knob(s) {code!r} name code to load, and a run's settings never name code "
                             "to run; the run's kernel path proposes its own kernels (`perfwarden measure --set "
                             "op_overrides...` measures a leg with yours)")
        TARGET_CONFIGS.get(self.target, TARGET_CONFIGS["embedded"]).validate_knobs(dict(self.base_config))
        return self
