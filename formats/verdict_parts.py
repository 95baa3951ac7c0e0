"""Parts of a verdict (``formats.records.Verdict``) that say what was checked and against what: the second
witnesses each leg's reps were held against, and the references the headline was re-derived against.
Formats only, like every record of the harness: the auditor computes them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LegWitnesses(BaseModel):
    """Which second witnesses a verdict held one leg's reps against (counts of reps; ``None``: that
    witness does not apply to the leg's server)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    leg: str
    """The leg."""
    reps: int
    """Reps of the leg the audit read."""
    loadgen_logs: int = 0
    """Reps held against LoadGen's own detail and summary logs of them."""
    server_counters: int = 0
    """Reps held against the server's own counters sampled before and after them (the embedded engine's
    ``server_counters`` on the bench line)."""
    engine_counters: int | None = None
    """Reps held against the engine's own ``/metrics`` counters (vLLM); None: the server is not vLLM."""
    cpu_window: int = 0
    """Reps whose CPU window (every process's CPU time over the rep) was read for contention."""
    sealed: bool = False
    """The leg's files were read from a seal chain that verified with the run's key."""

    def held(self) -> list[str]:
        """The witnesses held, each as ``name n/reps`` (the seal last), for every surface that shows them."""
        out = [f"LoadGen logs {self.loadgen_logs}/{self.reps}"]
        if self.engine_counters is not None:
            out.append(f"engine /metrics {self.engine_counters}/{self.reps}")
        if self.server_counters or self.engine_counters is None:
            out.append(f"server counters {self.server_counters}/{self.reps}")
        out.append(f"CPU window {self.cpu_window}/{self.reps}")
        out.append("sealed" if self.sealed else "not sealed")
        return out


class HeadlineReference(BaseModel):
    """One reference a verdict's headline was re-derived against."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    reference: Literal["claim_baseline", "same_config_legs"]
    """``claim_baseline``: the baseline leg the claim cites; ``same_config_legs``: every other leg of the run
    measured with the baseline's configuration and load, pooled rep by rep."""
    legs: list[str]
    """The legs whose reps make the reference."""
    delta_pct: float
    """The candidate's headline delta against this reference (percent)."""
    p_value: float | None = None
    """One-sided Welch p-value of the candidate being better, at the rep level."""
    noise_band_pct: float | None = None
    """The noise band the delta was judged against (percent)."""
    values: list[float] = Field(default_factory=list)
    """The reference's reps on the headline metric (the same-config legs pooled), for the review's plot."""
    banked: bool = False
    """Whether this is the figure ``headline_rederived`` states (the least favourable)."""
