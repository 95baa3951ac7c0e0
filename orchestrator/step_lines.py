"""One terminal line per step of the search: a step's audits folded into the line of its last verdict.

A step (one proposal) can be audited several times: re-measured with more reps, resubmitted on the same
legs with a disclosure or a new class. A line per audit printed the same numbers twice for such a step and
read as two steps; so a patch verdict is held until its step is over (the graph moves on to the next pick,
the bundle or the report) and then printed once, with the number of audits it took. Every other verdict
(baseline, profile, harness, bundle, red team) is its own line, printed at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports this module before a run starts; the run's records load with the run
    from perfwarden.formats.verdict_summary import VerdictSummary

STEP_OVER_NODES = frozenset({"pick", "bundle", "report", "red_team"})
"""Nodes the graph enters only once the step it was on is over (banked, dropped or skipped)."""


@dataclass(frozen=True)
class StepLine:
    """What one printed line shows: the step's last verdict and how many audits the step took."""

    verdict: VerdictSummary
    what: str
    """What the verdict is about: the lever, op or scope."""
    audits: int


@dataclass
class StepLines:
    """Holds each step's latest patch verdict until the step is over."""

    held: dict[str, StepLine] = field(default_factory=dict)
    """Proposal -> its latest verdict and audit count, in the order the steps started."""

    def verdict(self, summary: VerdictSummary, what: str) -> list[StepLine]:
        """The lines to print now for this verdict: none while its step may still be audited again."""
        if summary.scope != "patch" or summary.proposal is None or summary.producer == "red_team":
            return [StepLine(summary, what, 1)]
        before = self.held.get(summary.proposal)
        self.held[summary.proposal] = StepLine(summary, what, before.audits + 1 if before else 1)
        return []

    def node(self, name: str) -> list[StepLine]:
        """The held lines to print now that the graph enters ``name`` (all of them once a step is over)."""
        if name not in STEP_OVER_NODES:
            return []
        return self.flush()

    def flush(self) -> list[StepLine]:
        """Every held line, in the order the steps started (the run ended or moved on)."""
        out, self.held = list(self.held.values()), {}
        return out
