"""The auditor's public view of one verdict, as the run carries it: what routing, producers, the report and
the checkpoint read, and the acceptance decision recorded with it.

A format shared across the judge/producer line, so it lives with the other formats: the producers
(``agents/``) and the auditor are independent layers (neither imports the other, pyproject.toml
``[tool.importlinter]``), and both read this. The auditor decides what a verdict accepts
(``auditor/acceptance.py``); this module only holds the record of that decision.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfwarden.formats.records import (Action, Claim, LeverClass, Scope, Seal, Severity, Verdict, VerdictLabel,
                                        shown_verdict)
from perfwarden.formats.verdict_parts import LegWitnesses

AcceptingBasis = Literal["pass", "performance_only", "noise_only", "downgraded", "flag_only"]
"""Why a verdict was accepted: ``pass``; a baseline FLAGged only for codes that leave speed measurable
(``performance_only``) or only for its noise with no re-measure left (``noise_only``); a patch or bundle FLAG
whose every ask is a downgraded headline (``downgraded``); a harness FLAG whose every ask is ``flag``,
left to the end-to-end A/B to settle (``flag_only``)."""
RefusingBasis = Literal["refused", "remeasure", "unsealed", "unknown_code", "unknown_scope", "inconsistent"]
"""Why a verdict was not accepted: its findings refuse it (``refused``); a baseline to be measured again
(``remeasure``); unsealed evidence where the scope banks (``unsealed``); a finding code outside the catalog
(``unknown_code``); a scope with no acceptance rule (``unknown_scope``); a label kinder than its own
findings (``inconsistent``)."""
AcceptanceBasis = Literal[AcceptingBasis, RefusingBasis]
ACCEPTING: frozenset[str] = frozenset(get_args(AcceptingBasis))
"""The bases that accept."""


class Acceptance(BaseModel):
    """Whether a verdict was accepted, and why: the acceptance module's decision, recorded once in the run
    state with the verdict's summary and written in report.json, so that nothing downstream re-derives it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    accepted: bool
    """The verdict is accepted: the search builds on it (baseline, profile, harness) or it banks (patch),
    or the bundle's net change stands."""
    basis: AcceptanceBasis
    """Which rule decided (``AcceptingBasis`` when accepted, ``RefusingBasis`` when not)."""
    reason: str
    """One line for humans (never parsed: decisions read ``accepted`` and ``basis``)."""

    @model_validator(mode="after")
    def _basis_matches(self) -> Acceptance:
        """A record that says accepted on a refusing basis (or the reverse) is no decision the rule made."""
        if self.accepted != (self.basis in ACCEPTING):
            raise ValueError(f"accepted={self.accepted} does not go with the basis {self.basis!r}")
        return self


class FindingSummary(BaseModel):
    """One finding as the graph and the producers see it (the verdict file holds the full record)."""

    model_config = ConfigDict(extra="forbid")

    code: str
    """Stable finding code."""
    severity: Severity
    """INFO, FLAG or FAIL."""
    message: str
    """One line for humans (never parsed: decisions read ``code`` and ``measured``)."""
    measured: Any = None
    """The re-derived value."""
    action: Action | None = None
    """What this finding asks for (None: its severity's default)."""
    gate: str = ""
    """The gate that raised it (one code can come from gates that judge different things)."""


class VerdictSummary(BaseModel):
    """What the graph carries of one verdict: routing and producers read these typed fields."""

    model_config = ConfigDict(extra="forbid")

    seq: int
    """Sequence number of the claim answered."""
    scope: Scope
    """Scope audited."""
    verdict: VerdictLabel
    """PASS, FLAG or FAIL."""
    action: Action
    """What should happen to the claim: the most decisive of ``actions``."""
    actions: list[Action] = Field(default_factory=list)
    """``Verdict.actions``: every action the deciding findings ask for; banking asks all of them (a summary
    without them, from an older checkpoint, banks nothing but a PASS)."""
    path: str
    """The verdict file, relative to the run directory."""
    claim: str
    """The claim file, relative to the run directory."""
    lever: str | None = None
    """The claim's lever name (a proposal id, ``bundle``), if any."""
    proposal: str | None = None
    """Proposal the claim was made for (harness and patch scopes)."""
    producer: str = ""
    """Producer that submitted the claim."""
    findings: list[FindingSummary] = Field(default_factory=list)
    """Every finding, INFO included."""
    headline_metric: str | None = None
    """Metric of the headline."""
    headline_claimed: float | None = None
    """Headline delta the claim stated (the producer's own figure; None: it stated none)."""
    headline_rederived: float | None = None
    """Headline delta re-derived from raw (percent; a speedup factor for harness claims): the figure banked
    and shown, the less favourable one where a fairer reference was re-derived too."""
    headline_note: str | None = None
    """``Verdict.headline_note``: why the headline is not the delta against the claim's own baseline."""
    witnesses: list[LegWitnesses] = Field(default_factory=list)
    """``Verdict.witnesses``: per leg, the second witnesses its reps were held against."""
    lever_detected: LeverClass | None = None
    """Lever class the auditor detected."""
    degraded: bool = False
    """The auditor could not run a part."""
    seal: Seal = "unsealed"
    """``Verdict.seal``: unsealed evidence is never banked and is shown as ``PASS (unsealed)``."""
    acceptance: Acceptance | None = None
    """The acceptance module's decision on this verdict, recorded when the auditor node answered it. None
    only in a run state of version 2 or a report of version 4 or older, which recorded no decision
    (``auditor/acceptance.recorded`` decides those from the trail)."""

    @classmethod
    def of(cls, verdict: Verdict, claim: Claim, path: str, proposal: str | None) -> VerdictSummary:
        if verdict.scope == "mlperf":
            raise ValueError("an MLPerf compliance verdict answers no claim of a run")
        return cls(seq=verdict.claim_seq, scope=verdict.scope, verdict=verdict.verdict, action=verdict.action,
                   actions=list(verdict.actions), path=path, claim=verdict.claim,
                   lever=claim.lever.name if claim.lever else None, proposal=proposal, producer=claim.producer,
                   findings=[FindingSummary(code=f.code, severity=f.severity, message=f.message, measured=f.measured,
                                            action=f.action, gate=f.gate) for f in verdict.findings],
                   headline_metric=claim.headline.metric, headline_claimed=claimed_headline(claim),
                   headline_rederived=verdict.headline_rederived, headline_note=verdict.headline_note,
                   witnesses=list(verdict.witnesses),
                   lever_detected=verdict.lever_detected, degraded=verdict.degraded, seal=verdict.seal)

    @property
    def shown(self) -> str:
        """The verdict as every surface shows it (``PASS (unsealed)``)."""
        return shown_verdict(self.verdict, self.seal)

    def codes(self) -> set[str]:
        """Codes of the findings that count (FLAG and FAIL)."""
        return {f.code for f in self.findings if f.severity != "INFO"}


def claimed_headline(claim: Claim) -> float | None:
    """The claim's figure in the unit the auditor re-derives: a harness claim's speedup factor, else the
    headline delta in percent."""
    if claim.scope == "harness" and claim.isolated_speedup is not None:
        return claim.isolated_speedup.value
    return claim.headline.value
