"""What a run optimizes, fixed when it starts: the objective, the metric that measures it, and -- for
goodput -- the SLO a request must meet to count (design §2, §4 "Objectives").

``objective.json`` at the run's root holds it, written into the seal chain before the first leg, so the
auditor judges every goodput figure of the run at the SLO the run started with, never at one chosen
after the reps were seen (the same reps give any goodput one likes at an SLO picked afterwards). The
run's settings carry the same objective (``orchestrator/settings.py``); a resume that would change it
is refused. This is a format only: what counts as a good request is the auditor's arithmetic
(``auditor/rederive.py``) and, apart, the producer's own reading (``agents/own_figures.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from perfwarden.formats.records import SCHEMA_VERSION, Record
from perfwarden.formats.slo import GoodputSlo

Objective = Literal["throughput", "goodput", "ttft_p99", "tpot_p99"]
"""What the search optimizes: output tokens per second, requests per second meeting the SLO, or a tail latency."""
OBJECTIVES: tuple[Objective, ...] = ("throughput", "goodput", "ttft_p99", "tpot_p99")

OBJECTIVE_METRIC: dict[Objective, str] = {
    "throughput": "output_throughput",
    "goodput": "request_goodput",
    "ttft_p99": "p99_ttft_ms",
    "tpot_p99": "p99_tpot_ms",
}
"""The bench metric each objective is (sglang's and vLLM's names: ``request_goodput`` is vLLM's)."""

LOWER_IS_BETTER: frozenset[Objective] = frozenset({"ttft_p99", "tpot_p99"})
"""Objectives a win lowers (a latency); the others a win raises."""

OBJECTIVE_FILE = "objective.json"
"""Where a run records its objective, at its root."""


def objective_error(objective: str, slo: GoodputSlo | None) -> str | None:
    """Why an objective and an SLO do not go together (None: they do). Goodput is a count of requests
    meeting an SLO, so it needs one; any other objective would ignore an SLO, so one given is a mistake."""
    if objective == "goodput" and slo is None:
        return ("the goodput objective needs an SLO (--slo ttft_ms=...,tpot_ms=...): goodput counts the requests "
                "meeting it")
    if objective != "goodput" and slo is not None:
        return f"an SLO applies to the goodput objective only, not to {objective!r}"
    return None


class RunObjective(Record):
    """``<run>/objective.json``: what the run optimizes, sealed before its first leg."""

    schema_version: int = SCHEMA_VERSION
    """Version of this record's schema."""
    objective: Objective = "throughput"
    """What the search optimizes (``OBJECTIVE_METRIC`` names its bench metric)."""
    slo: GoodputSlo | None = None
    """The latency limits a request must meet to count towards goodput (the goodput objective only)."""

    @model_validator(mode="after")
    def _slo_fits(self) -> "RunObjective":
        problem = objective_error(self.objective, self.slo)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def metric(self) -> str:
        """The bench metric a step's headline states and the search optimizes."""
        return OBJECTIVE_METRIC[self.objective]

    @property
    def higher_is_better(self) -> bool:
        return self.objective not in LOWER_IS_BETTER

    def describe(self) -> str:
        """One line for a person: ``goodput (request_goodput) at ttft <= 500 ms, tpot <= 50 ms``."""
        text = f"{self.objective} ({self.metric}, {'higher' if self.higher_is_better else 'lower'} is better)"
        if self.slo is not None:
            limits = ", ".join(f"{name.removesuffix('_ms')} <= {value:g} ms"
                               for name, value in self.slo.limits().items())
            text += f" at {limits}"
        return text
