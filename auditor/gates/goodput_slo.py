"""Which SLO goodput is re-derived at, and whether the evidence says it is the right one. A pure gate.

Goodput counts the requests that met a latency SLO, so the same reps give any goodput one likes at an SLO
chosen after the fact. The SLO must therefore be the one the evidence was recorded under, held equal
across every rep of the compared legs:

- **Sealed**: perfwarden's own run seals its objective before its first leg (``objective.json``); its
  goodput is judged at that SLO and no other, whatever the claim says: a claim stating another SLO, or a
  goodput headline stating none, is CONDITIONS_MISREPORTED; a line recording or reporting a goodput at
  another SLO is EVIDENCE_CORRUPT; a goodput headline of a run whose sealed objective sets no SLO is
  EVIDENCE_MISSING (all FAIL). The sealed file is evidence like a leg's: the integrity gate holds it to
  the seal chain.
- **Recorded**: a line records its SLO (a foreign line's ``goodput`` field: ``vllm bench serve
  --metadata goodput=ttft:X,tpot:Y``, since vLLM writes ``request_goodput`` but not the SLO it used).
  Every rep must record the same one (a difference, or a rep recording none beside one that does, is
  CONDITIONS_DIFFER, FAIL: the legs were benchmarked under two objectives), and a line's own
  ``request_goodput`` must be that SLO's exactly (else EVIDENCE_CORRUPT, FAIL: the recorded SLO is not
  the one the benchmark measured at). A claim stating another SLO is CONDITIONS_MISREPORTED (FAIL).
- **Witnessed**: no line records an SLO but the claim states one: it stands only where every line's own
  ``request_goodput`` is reproduced at it (else CONDITIONS_MISREPORTED, FAIL). Lines that report no
  goodput witness nothing: a goodput headline at an SLO nothing recorded is EVIDENCE_MISSING (FAIL).
- Some reps reporting ``request_goodput`` and others not is CONDITIONS_DIFFER (FAIL): two benchmark
  configurations. A goodput headline without an SLO at all is EVIDENCE_MISSING (FAIL).

The value is the ``GoodputBasis`` the verdict reports (None: goodput is not re-derived, and where the
lines report one the verdict says why it was not checked).
"""

from __future__ import annotations

from pathlib import Path

from perfwarden.auditor import goodput
from perfwarden.auditor.bench_records import RepGoodput
from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.rederive import RepMetrics
from perfwarden.formats.objective import OBJECTIVE_FILE, RunObjective
from perfwarden.formats.records import Claim, EvidenceRef, Finding
from perfwarden.formats.slo import GoodputBasis, GoodputSlo

GATE = "goodput_slo"
METRIC = "request_goodput"
"""The goodput metric's name (vLLM's field: good requests per second)."""

Rep = tuple[LegEvidence, RepMetrics]


def _shown(slo: GoodputSlo | None) -> str:
    return slo.text() if slo is not None else "none"


def check_goodput_slo(run: Path, claim: Claim, legs: list[LegEvidence],
                      sealed: RunObjective | None = None) -> GateResult[GoodputBasis | None]:
    """Decide the SLO the legs' goodput is re-derived at (module docstring); ``sealed``: the objective the run
    sealed at its start (``objective.json``), whose SLO the loader counted good requests at."""
    reps: list[Rep] = [(leg, rep) for leg in legs for rep in leg.reps]
    evidence = [(leg, rep, rep.goodput) for leg, rep in reps if rep.goodput is not None]
    claimed = claim.headline.slo
    headline = claim.headline.metric == METRIC
    if not evidence and claimed is None:
        return _no_slo(headline, "no bench line records a goodput SLO and the claim states none", note=False)
    differ = _differing(run, reps)
    if differ:
        return GateResult(findings=differ)
    underivable = [(leg, rep) for leg, rep, g in evidence if not g.derivable]
    if underivable:
        leg, rep = underivable[0]
        return _missing(run, rep, headline, f"leg {leg.name!r} rep {rep.rep} has no per-request 'latencies', so its "
                        "goodput cannot be re-derived")
    recorded = evidence[0][2].recorded if evidence else None
    if sealed is not None:
        return _judge_sealed(run, claimed, sealed, recorded, evidence, headline)
    if recorded is not None:
        return _judge_recorded(run, claimed, recorded, evidence)
    if claimed is None:
        return _no_slo(headline, "the bench lines report request_goodput but record no SLO and the claim states "
                       "none: the goodput they report cannot be re-derived")
    return _judge_claimed(run, claimed, evidence, headline, len(reps))


def _no_slo(headline: bool, why: str, note: bool = True) -> GateResult[GoodputBasis | None]:
    """A goodput headline without its SLO is refused; otherwise goodput is left out (``note``: and the
    verdict says why, where the lines report a goodput that is then not re-derived)."""
    if headline:
        return GateResult(findings=[finding("EVIDENCE_MISSING", "FAIL", f"a goodput headline needs the SLO it is "
                                            f"measured at: {why}", threshold="an SLO the evidence records",
                                            action="eject", gate=GATE)])
    return GateResult(not_checked=[f"goodput: {why}"] if note else [])


def _missing(run: Path, rep: RepMetrics, headline: bool, why: str) -> GateResult[GoodputBasis | None]:
    if not headline:
        return GateResult(not_checked=[f"goodput: {why}"])
    return GateResult(findings=[finding("EVIDENCE_MISSING", "FAIL", why, evidence=[line_evidence(run, rep.ref)],
                                        action="eject", gate=GATE)])


def _recorded_shown(g: RepGoodput | None) -> str:
    return _shown(g.recorded) if g is not None else "none"


def _reports(g: RepGoodput | None) -> str:
    return "yes" if g is not None and g.reported is not None else "no"


def _differing(run: Path, reps: list[Rep]) -> list[Finding]:
    """The reps disagree on the SLO they record, or on whether their benchmark computed goodput."""
    out = []
    for what, value in (("record the goodput SLO", _recorded_shown), ("report request_goodput", _reports)):
        seen: dict[str, Rep] = {}
        for leg, rep in reps:
            seen.setdefault(value(rep.goodput), (leg, rep))
        if len(seen) > 1:
            (va, (la, ra)), (vb, (lb, rb)) = list(seen.items())[:2]
            out.append(finding("CONDITIONS_DIFFER", "FAIL", f"the reps do not all {what} alike: {la.name!r} rep "
                               f"{ra.rep} says {va!r}, {lb.name!r} rep {rb.rep} says {vb!r}: the legs were "
                               "benchmarked under different goodput objectives", measured=sorted(seen),
                               threshold="one goodput SLO for every rep", evidence=[line_evidence(run, ra.ref),
                                                                                   line_evidence(run, rb.ref)],
                               action="eject", gate=GATE))
    return out


def _judge_recorded(run: Path, claimed: GoodputSlo | None, recorded: GoodputSlo,
                    evidence: list[tuple[LegEvidence, RepMetrics, RepGoodput]]) -> GateResult[GoodputBasis | None]:
    found = _not_reproduced(run, recorded, evidence, "EVIDENCE_CORRUPT", "records goodput SLO")
    if claimed is not None and claimed != recorded:
        leg, rep, _ = evidence[0]
        found.append(finding("CONDITIONS_MISREPORTED", "FAIL", f"the claim's goodput SLO {claimed.text()!r} differs "
                             f"from the one the bench lines record, {recorded.text()!r}", measured=claimed.text(),
                             threshold=recorded.text(), evidence=[line_evidence(run, rep.ref)], action="eject",
                             gate=GATE))
    if found:
        return GateResult(findings=found)
    return GateResult(value=GoodputBasis(slo=recorded, source="recorded"))


def _judge_sealed(run: Path, claimed: GoodputSlo | None, sealed: RunObjective, recorded: GoodputSlo | None,
                  evidence: list[tuple[LegEvidence, RepMetrics, RepGoodput]],
                  headline: bool) -> GateResult[GoodputBasis | None]:
    """The run sealed its objective before its first leg: goodput is judged at that SLO and no other. Lines
    that record or report a goodput must be at it (EVIDENCE_CORRUPT otherwise); a claim stating another SLO,
    or a goodput headline stating none, is CONDITIONS_MISREPORTED; a goodput headline of a run whose sealed
    objective has no SLO has none to be judged at (EVIDENCE_MISSING). All FAIL."""
    slo = sealed.slo
    where = [EvidenceRef(file=OBJECTIVE_FILE)]
    if slo is None:
        return _no_slo(headline, f"the run sealed the objective {sealed.describe()}, which sets no SLO", note=False)
    found = _not_reproduced(run, slo, evidence, "EVIDENCE_CORRUPT", "belongs to a run sealed at goodput SLO")
    if recorded is not None and recorded != slo:
        found.append(finding("EVIDENCE_CORRUPT", "FAIL", f"the bench lines record the goodput SLO {recorded.text()!r} "
                             f"but the run sealed {slo.text()!r} at its start", measured=recorded.text(),
                             threshold=slo.text(), evidence=where, action="eject", gate=GATE))
    if claimed != slo and (claimed is not None or headline):
        found.append(finding("CONDITIONS_MISREPORTED", "FAIL", f"the claim's goodput SLO {_shown(claimed)!r} is not "
                             f"the one the run sealed at its start, {slo.text()!r}: goodput is judged at the sealed "
                             "SLO only", measured=_shown(claimed), threshold=slo.text(), evidence=where,
                             action="eject", gate=GATE))
    if found:
        return GateResult(findings=found)
    return GateResult(value=GoodputBasis(slo=slo, source="sealed"))


def _judge_claimed(run: Path, claimed: GoodputSlo, evidence: list[tuple[LegEvidence, RepMetrics, RepGoodput]],
                   headline: bool, n_reps: int) -> GateResult[GoodputBasis | None]:
    found = _not_reproduced(run, claimed, evidence, "CONDITIONS_MISREPORTED", "is claimed at goodput SLO")
    if found:
        return GateResult(findings=found)
    witnessed = len(evidence) == n_reps and all(g.reported is not None for _, _, g in evidence)
    if witnessed:
        return GateResult(value=GoodputBasis(slo=claimed, source="claim_witnessed"))
    if headline:
        return _no_slo(True, f"the claim states {claimed.text()!r} but no bench line records an SLO or reports "
                       "a request_goodput that would witness it")
    return GateResult(value=GoodputBasis(slo=claimed, source="claim"))


def _not_reproduced(run: Path, slo: GoodputSlo, evidence: list[tuple[LegEvidence, RepMetrics, RepGoodput]],
                    code: str, said: str) -> list[Finding]:
    """Reps whose own ``request_goodput`` is not ``slo``'s good count over their duration."""
    bad = [(leg, rep, g) for leg, rep, g in evidence
           if g.reported is not None and not goodput.reproduces(g.reported, g.good[slo], rep.duration_s)]
    if not bad:
        return []
    leg, rep, g = bad[0]
    rederived = goodput.goodput(g.good[slo], rep.duration_s)
    return [finding(code, "FAIL", f"{len(bad)} rep(s) are not at {slo.text()!r}: {leg.name!r} rep {rep.rep} {said} "
                    f"{slo.text()!r} but reports request_goodput {g.reported:.6g}, while {g.good[slo]} of its requests "
                    f"meet that SLO ({rederived:.6g}/s)", measured=g.reported, threshold=round(rederived, 9),
                    evidence=[line_evidence(run, rep.ref)], action="eject", gate=GATE)]
