"""What accepts a verdict, for every scope: the one rule the graph routes by, the report records and the
review checks (design §3, "Acceptance").

The graph's auditor node asks ``decide`` once per verdict and records the answer (an ``Acceptance``) with
the verdict's summary in the run state; routing, the report and the review read that record. Per scope:

- **baseline**: a PASS; a FLAG raised only for codes that leave speed measurable (``PERFORMANCE_ONLY_CODES``:
  random weights make correctness unverifiable, not the timing); anything else is measured again while the
  graph says a re-measure fits, and after the last one a FLAG raised only for the machine's noise
  (``NOISE_ONLY_CODES``) is accepted: every step is then judged on its own interleaved legs, whose noise
  band these same-configuration legs can only widen;
- **profile**: a PASS (only a passing profile routes ops to the kernel path);
- **harness**: a PASS, or a FLAG whose every ask is ``flag``: a note the end-to-end A/B settles, where the
  op's change is judged on what the server serves;
- **patch**: the banking rule (``auditor/banking.py``): a PASS or a FLAG whose every ask downgrades the
  headline, on sealed evidence;
- **bundle**: the same rule: the net change stands as claimed or downgraded, on sealed evidence.

It fails closed: a scope with no rule here, a finding code outside the catalog (``auditor/codes.py``) and
a label kinder than the verdict's own findings accept nothing, whatever else the verdict says.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from perfwarden.auditor import banking, codes
from perfwarden.auditor.findings import ACTION_PRECEDENCE, Asking, deciding_actions, unsealed_refusal, verdict_label
from perfwarden.formats.records import Action, Seal, VerdictLabel
from perfwarden.formats.verdict_summary import Acceptance, AcceptingBasis, RefusingBasis, VerdictSummary

PERFORMANCE_ONLY_CODES = frozenset({"CORRECTNESS_UNVERIFIABLE"})
"""A baseline FLAGged only for these is sound for measuring (random weights: correctness cannot be judged,
speed can). The search goes on; its patch verdicts carry the same FLAG, so nothing is banked as correct."""
NOISE_ONLY_CODES = frozenset({"NOISY_BASELINE"})
"""A baseline FLAGged only for these with no re-measure left (the bound or the budget spent) shows the machine's
noise, not bad evidence."""
FINAL_REFUSALS: frozenset[RefusingBasis] = frozenset({"unsealed", "unknown_code", "unknown_scope", "inconsistent"})
"""Refusals that no resubmission or re-measure answers: they are about the run's seal or the verdict record
itself, not about what the findings ask of the claim."""
_LABEL_RANK = {"PASS": 0, "FLAG": 1, "FAIL": 2}


class Coded(Asking, Protocol):
    """What the rule reads of a finding (a ``Finding`` of a verdict file, or a ``FindingSummary``)."""

    @property
    def code(self) -> str: ...


class Judged(Protocol):
    """What the rule reads of a verdict: a ``Verdict`` from a file, or a ``VerdictSummary`` from the run."""

    @property
    def scope(self) -> str: ...

    @property
    def verdict(self) -> VerdictLabel: ...

    @property
    def seal(self) -> Seal: ...

    @property
    def actions(self) -> Sequence[Action]: ...

    @property
    def findings(self) -> Sequence[Coded]: ...


def _accept(basis: AcceptingBasis, reason: str) -> Acceptance:
    return Acceptance(accepted=True, basis=basis, reason=reason)


def _refuse(basis: RefusingBasis, reason: str) -> Acceptance:
    return Acceptance(accepted=False, basis=basis, reason=reason)


def raised(v: Judged) -> set[str]:
    """The codes of the findings that count (FLAG and FAIL)."""
    return {f.code for f in v.findings if f.severity != "INFO"}


def asked(v: Judged) -> list[Action]:
    """Every action the verdict's deciding findings ask for, most decisive first: its ``actions`` together
    with what its findings state, so an ask dropped from ``actions`` (an older record, an edited one) still
    counts (``banking.verdict_actions`` for a verdict file)."""
    said = set(v.actions) | set(deciding_actions(list(v.findings), v.verdict))
    return [a for a in ACTION_PRECEDENCE if a in said]


def _codes_text(found: set[str]) -> str:
    return ", ".join(sorted(found)) or "no finding"


def _baseline(v: Judged, remeasure_left: bool) -> Acceptance:
    found = raised(v)
    if v.verdict == "PASS":
        return _accept("pass", "PASS: the search builds on this baseline")
    if v.verdict == "FLAG" and found and found <= PERFORMANCE_ONLY_CODES:
        return _accept("performance_only", f"FLAG only for {_codes_text(found)}: speed is measured, correctness "
                                           "cannot be judged; the search goes on and banks nothing as correct")
    if remeasure_left:
        return _refuse("remeasure", f"{v.verdict} ({_codes_text(found)}): measured again while a re-measure fits")
    if v.verdict == "FLAG" and found and found <= NOISE_ONLY_CODES:
        return _accept("noise_only", f"FLAG only for {_codes_text(found)} with no re-measure left: the machine's "
                                     "noise; each step is judged on its own interleaved legs")
    return _refuse("refused", f"{v.verdict} ({_codes_text(found)}) with no re-measure left: nothing is compared "
                              "against this baseline")


def _profile(v: Judged, remeasure_left: bool) -> Acceptance:
    if v.verdict == "PASS":
        return _accept("pass", "PASS: its hot ops go to the kernel path")
    return _refuse("refused", f"{v.verdict} ({_codes_text(raised(v))}): no op is routed from this profile")


def _harness(v: Judged, remeasure_left: bool) -> Acceptance:
    if v.verdict == "PASS":
        return _accept("pass", "PASS: the candidate goes to the end-to-end A/B")
    wanted = asked(v)
    if v.verdict == "FLAG" and wanted and all(a == "flag" for a in wanted):
        return _accept("flag_only", f"FLAG ({_codes_text(raised(v))}) asking only to flag: the end-to-end A/B "
                                    "settles it")
    return _refuse("refused", f"{v.verdict} ({_codes_text(raised(v))}) asks {', '.join(wanted) or 'nothing'}: "
                              "the candidate is dropped")


def _banking(v: Judged, remeasure_left: bool) -> Acceptance:
    unsealed = unsealed_refusal(v.verdict, v.seal)
    if unsealed is not None:
        return _refuse("unsealed", unsealed)
    wanted = asked(v)
    kept = banking.kept_as(v.verdict, wanted)
    if kept == "as_claimed":
        return _accept("pass", "PASS on sealed evidence: banked with its re-derived headline")
    if kept == "downgraded":
        return _accept("downgraded", "FLAG asking only a downgraded headline: banked under the detected class "
                                     "and the re-derived headline")
    return _refuse("refused", f"{v.verdict} ({_codes_text(raised(v))}) asks {', '.join(wanted) or 'nothing'}: "
                              f"not banked ({banking.rule_text()})")


RULES: dict[str, Callable[[Judged, bool], Acceptance]] = {
    "baseline": _baseline, "profile": _profile, "harness": _harness, "patch": _banking, "bundle": _banking,
}
"""Scope -> its rule; a scope not here accepts nothing."""


def decide(v: Judged, *, remeasure_left: bool) -> Acceptance:
    """The decision on one verdict. ``remeasure_left``: the graph would measure the baseline again (a
    re-measure is allowed and fits in the budget); read for the baseline scope only."""
    rule = RULES.get(v.scope)
    if rule is None:
        return _refuse("unknown_scope", f"scope {str(v.scope)[:40]!r} has no acceptance rule")
    unknown = sorted({str(f.code)[:80] for f in v.findings if not codes.known(f.code)})
    if unknown:
        return _refuse("unknown_code", f"finding code(s) outside the catalog: {', '.join(unknown[:12])}")
    worst = verdict_label(list(v.findings))
    if v.verdict not in _LABEL_RANK or _LABEL_RANK[worst] > _LABEL_RANK[v.verdict]:
        return _refuse("inconsistent", f"the label {str(v.verdict)[:20]!r} is kinder than its findings ({worst})")
    return rule(v, remeasure_left)


def recorded(v: VerdictSummary, *, measured_again: bool = False) -> Acceptance:
    """``v``'s recorded decision. A summary recorded without one (run state version 2, report version 4 or
    older) gets the rule's decision, where ``measured_again`` says what the trail shows: a later baseline was
    measured, so this one was to be re-measured (the only route on that left a baseline behind)."""
    if v.acceptance is not None:
        return v.acceptance
    return decide(v, remeasure_left=measured_again)


def recorded_trail(trail: Sequence[VerdictSummary]) -> list[VerdictSummary]:
    """Every summary of a run's trail, in order, each with its decision (``recorded``)."""
    out: list[VerdictSummary] = []
    later_baseline = False
    for v in reversed(trail):
        if v.acceptance is None:
            v = v.model_copy(update={"acceptance": recorded(v, measured_again=later_baseline)})
        later_baseline = later_baseline or v.scope == "baseline"
        out.append(v)
    return out[::-1]


def kinder_than_rule(v: Judged, decision: Acceptance) -> str | None:
    """Why a recorded decision accepts a verdict the rule refuses even in its kindest context (no re-measure
    left), else None: a report or checkpoint that says so records no decision this rule made."""
    if not decision.accepted:
        return None
    own = decide(v, remeasure_left=False)
    if own.accepted:
        return None
    return f"recorded as accepted ({decision.basis}), but the rule refuses it: {own.reason}"
