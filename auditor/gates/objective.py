"""The run's sealed objective against the claim's headline, and a goodput headline no ratio can judge.
A pure gate.

A run seals what it optimizes before its first leg (``objective.json``, ``formats/objective.py``). A step of
a run that optimizes one metric and claims a win on another (a throughput win in a tail-latency run) is not
the win the run looks for: CONDITIONS_MISREPORTED, FLAG (a claim restating the objective's figure may bank).
The SLO a goodput figure is judged at is ``goodput_slo``'s decision, the sealed one first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.formats.objective import OBJECTIVE_FILE, RunObjective
from perfwarden.formats.records import Claim, EvidenceRef

GATE = "objective"
GOODPUT = "request_goodput"
"""The goodput metric (vLLM's name: good requests per second)."""


def check_headline_objective(claim: Claim, sealed: RunObjective | None) -> GateResult[None]:
    """A patch or bundle claim of a run that sealed its objective headlines that objective's metric."""
    metric = claim.headline.metric
    if sealed is None or claim.scope not in ("patch", "bundle") or metric == sealed.metric:
        return GateResult()
    return GateResult(findings=[finding(
        "CONDITIONS_MISREPORTED", "FLAG", f"the run sealed the objective {sealed.describe()}, but the claim's "
        f"headline is {metric!r}: a step is a win on what the run optimizes", measured=metric,
        threshold=sealed.metric, evidence=[EvidenceRef(file=OBJECTIVE_FILE)], action="flag", gate=GATE)])


def check_unjudgeable_goodput(run: Path, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
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
