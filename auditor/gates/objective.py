"""The run's sealed objective against the claim: which metric a step's headline must state, and the SLO its
goodput is re-derived at. A pure gate.

A run seals what it optimizes before its first leg (``objective.json``, ``harness/objective.py``), so:

- **the SLO is the sealed one.** Goodput counts the requests that met an SLO, and the same reps give any
  goodput one likes at an SLO chosen after they were seen. A goodput headline is judged only at the SLO
  the run sealed: a claim stating another (or none) is CONDITIONS_MISREPORTED, a run that sealed none
  (no objective.json, or an objective without an SLO) leaves a goodput figure with nothing to vouch for it,
  EVIDENCE_MISSING -- both FAIL: no resubmission makes the evidence hold another SLO.
- **the headline is the objective.** A step of a run that optimizes one metric and claims a win on
  another (a throughput win in a tail-latency run) is not the win the run looks for: CONDITIONS_MISREPORTED,
  FLAG (a claim restating the objective's figure may bank).

The value is the SLO every rep's ``request_goodput`` is re-derived at (None: none is re-derived).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.harness.objective import OBJECTIVE_FILE, RunObjective
from perfwarden.harness.records import Claim, EvidenceRef, Finding
from perfwarden.harness.slo import GoodputSlo

GATE = "objective"
GOODPUT = "request_goodput"
"""The goodput metric (vLLM's name: good requests per second)."""


def _shown(slo: GoodputSlo | None) -> str:
    return slo.text() if slo is not None else "none"


def check_objective(claim: Claim, sealed: RunObjective | None) -> GateResult[GoodputSlo | None]:
    """The SLO goodput is re-derived at, and whether the claim's headline is the run's sealed objective."""
    metric, stated = claim.headline.metric, claim.headline.slo
    where = [EvidenceRef(file=OBJECTIVE_FILE)]
    findings: list[Finding] = []
    if sealed is not None and claim.scope in ("patch", "bundle") and metric != sealed.metric:
        findings.append(finding(
            "CONDITIONS_MISREPORTED", "FLAG", f"the run sealed the objective {sealed.describe()}, but the claim's "
            f"headline is {metric!r}: a step is a win on what the run optimizes", measured=metric,
            threshold=sealed.metric, evidence=where, action="flag", gate=GATE))
    slo = sealed.slo if sealed is not None else None
    if metric != GOODPUT:
        return GateResult(findings=findings, value=slo)
    if slo is None:
        why = "the run sealed no objective.json" if sealed is None else f"the run sealed {sealed.describe()}"
        findings.append(finding(
            "EVIDENCE_MISSING", "FAIL", f"a goodput headline needs the SLO it is measured at, recorded with the "
            f"evidence: {why}, so no SLO vouches for the claim's {_shown(stated)!r}", measured=_shown(stated),
            threshold="an SLO the run sealed", evidence=where if sealed is not None else [], action="eject", gate=GATE))
        return GateResult(findings=findings, value=None)
    if stated != slo:
        findings.append(finding(
            "CONDITIONS_MISREPORTED", "FAIL", f"the claim's goodput SLO {_shown(stated)!r} is not the one the run "
            f"sealed at its start, {slo.text()!r}: goodput is judged at the sealed SLO only", measured=_shown(stated),
            threshold=slo.text(), evidence=where, action="eject", gate=GATE))
    return GateResult(findings=findings, value=slo)


def check_unjudgeable_goodput(run: Path, base: LegEvidence, cand: LegEvidence) -> GateResult:
    """A goodput headline whose reps include a goodput of 0 (no request met the SLO) has no ratio to judge: a
    candidate at 0 where the baseline is not is a regression (DELTA_REGRESSION), a baseline at 0 leaves any
    gain unmeasurable (DELTA_NOT_SIGNIFICANT); both FAIL. Empty when every rep has a positive goodput."""
    zeros = {leg.name: [r for r in leg.reps if r.metrics.get(GOODPUT) == 0.0] for leg in (base, cand)}
    if not any(zeros.values()):
        return GateResult()
    if zeros[base.name]:
        rep = zeros[base.name][0]
        return GateResult(findings=[finding(
            "DELTA_NOT_SIGNIFICANT", "FAIL", f"no request of the baseline {base.name!r} met the SLO in "
            f"{len(zeros[base.name])} of {len(base.reps)} rep(s): a gain over a goodput of 0 cannot be judged as a "
            "ratio", measured={"zero_reps": len(zeros[base.name])}, threshold="goodput > 0 in every rep",
            evidence=[line_evidence(run, rep.ref)], action="eject", gate="significance")])
    rep = zeros[cand.name][0]
    base_goodput = float(np.median([r.metrics.get(GOODPUT, 0.0) for r in base.reps]))
    return GateResult(findings=[finding(
        "DELTA_REGRESSION", "FAIL", f"no request of the candidate {cand.name!r} met the SLO in "
        f"{len(zeros[cand.name])} of {len(cand.reps)} rep(s), while the baseline's median goodput is "
        f"{base_goodput:.4g}/s: the change is a regression", measured={"zero_reps": len(zeros[cand.name])},
        threshold="goodput > 0 in every rep", evidence=[line_evidence(run, rep.ref)], action="eject",
        gate="significance")])
