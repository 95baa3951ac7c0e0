"""Same-config legs: A/A evidence the claim did not choose (issue 17 §5).

A producer picks which legs a claim cites. Every other leg of the run that was measured with the
baseline's configuration and load is a re-measurement of the baseline, whether the claim cites it or
not, so the statistics use it too: its reps can widen the noise band (never narrow it: see
``measurement.calibrate_band``), and the claim's baseline must be representative of them
(``check_representative_baseline``): a baseline significantly slower than its same-config twins is a
handicapped baseline. Decision: the win is re-derived against the twins; FAIL (eject) when it is gone,
FLAG (downgrade_headline) when it survives at another size -- the verdict never banks a delta measured
against a handicapped baseline, and a real win is not thrown away for its producer's choice of legs.

Same config means: no non-inert difference in any copy of the conditions (``server_info.json``, the
bench lines' copies, the log, ``leg.json``) and the same load (workload descriptors and prompt set),
judged with no declared change. An uncited leg is read with a loader of its own: its faults (a torn
file, a missing ``server_info``) are not this claim's findings -- such a leg is simply not evidence.
"""

from __future__ import annotations

from pathlib import Path

from perfwarden.auditor import registry, stats
from perfwarden.auditor.model import roles
from perfwarden.auditor.evidence import LegEvidence, RunLoader, _plain_name, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates import reading
from perfwarden.auditor.gates import conditions, workload
from perfwarden.auditor.gates.measurement import calibrate_band
from perfwarden.auditor.rederive import METRICS
from perfwarden.harness.records import Claim, RunDir


def is_same_config(run: Path, claim: Claim, base: LegEvidence, leg: LegEvidence) -> bool:
    """``leg`` ran the baseline's configuration (inert keys aside) and the baseline's load."""
    if base.server_info is None or leg.server_info is None or not base.reps or not leg.reps:
        return False
    diff = conditions.diff_server_info(base.server_info, leg.server_info)
    diff.update(conditions.union_diff(run, base, leg))
    if any(not roles.is_inert(key) for key in diff):
        return False
    return workload.same_load(run, claim.model_copy(update={"lever": None}), base, leg)


def uncited_legs(run: Path, cited: set[str]) -> list[str]:
    """Leg directories of the run the claim does not cite (plain names, no links)."""
    legs_dir = Path(run) / "legs"
    if not legs_dir.is_dir() or legs_dir.is_symlink():
        return []
    return [name for name in RunDir(run).legs()
            if name not in cited and _plain_name(name) and not (legs_dir / name).is_symlink()]


def same_config_legs(run: Path, claim: Claim, base: LegEvidence, cited: set[str]) -> list[LegEvidence]:
    """Uncited legs measured with the baseline's configuration and load, each read on its own."""
    out = []
    for name in uncited_legs(run, cited):
        loader = RunLoader(run)
        leg = loader.leg(name)
        failed = leg.spec is not None and leg.spec.status == "failed"
        unread = any(f.severity == "FAIL" for f in reading.check_reading(loader.problems).findings)
        if failed or unread or not is_same_config(run, claim, base, leg):
            continue
        out.append(leg)
    return out


def _values(leg: LegEvidence, metric: str) -> list[float]:
    return [r.metrics[metric] for r in leg.reps if metric in r.metrics]


def check_representative_baseline(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence,
                                  twins: list[LegEvidence]) -> GateResult:
    """The baseline must not be significantly worse than the other same-config legs on the headline metric.

    When it is, the delta is re-derived against the other same-config legs' reps (the level the baseline's
    configuration shows when it is not handicapped): still a significant win -> FLAG, downgrade_headline
    (bank that size, not the claimed one); gone -> FAIL, eject.
    """
    metric = claim.headline.metric if claim.headline.metric in METRICS else "output_throughput"
    b, c = _values(base, metric), _values(cand, metric)
    others = [v for leg in twins for v in _values(leg, metric)]
    if not twins:
        return GateResult()
    if len(b) < 2 or len(others) < 2 or len(c) < 2:
        return GateResult(not_checked=[f"representative baseline: too few reps of {metric} to compare the baseline "
                                       "with its same-config legs"])
    higher = METRICS[metric]
    names = ", ".join(repr(leg.name) for leg in twins)
    band, _ = calibrate_band(metric, base, twins, len(b), len(others))
    handicap = stats.decide(b, others, higher, band)
    if not handicap.significant_better:
        return GateResult(findings=[finding(
            "UNREPRESENTATIVE_BASELINE", "INFO", f"baseline {base.name!r} is within the noise of its same-config "
            f"leg(s) {names} on {metric} ({handicap.improvement_pct:+.2f}% for them, band ±{band:.2f}%)",
            measured=round(handicap.improvement_pct, 4), threshold={"noise_band_pct": round(band, 4)},
            gate="representative")])
    pool_band, _ = calibrate_band(metric, twins[0], twins[1:], len(others), len(c))
    win = stats.decide(others, c, higher, pool_band)
    evidence = [line_evidence(run, base.reps[0].ref)] + [line_evidence(run, leg.reps[0].ref) for leg in twins[:3]]
    what = (f"baseline {base.name!r} is {handicap.improvement_pct:.2f}% worse on {metric} than its same-config "
            f"leg(s) {names} (band ±{band:.2f}%, p={handicap.p_value:.3g}): a handicapped baseline. Against their "
            f"{len(others)} reps the candidate is {win.improvement_pct:+.2f}% (p={win.p_value:.3g}, band "
            f"±{pool_band:.2f}%)")
    measured = {"baseline_vs_twins_pct": round(-handicap.improvement_pct, 4),
                "candidate_vs_same_config_pct": round(win.improvement_pct, 4), "claimed_pct": claim.headline.value}
    if win.significant_better:
        return GateResult(findings=[finding(
            "UNREPRESENTATIVE_BASELINE", "FLAG", what + ": the win is real, its size is the re-derived one",
            measured=measured, threshold={"noise_band_pct": round(band, 4)}, evidence=evidence,
            action="downgrade_headline", gate="representative")])
    return GateResult(findings=[finding(
        "UNREPRESENTATIVE_BASELINE", "FAIL", what + ": inside the noise, so the win is the baseline's handicap",
        measured=measured, threshold={"noise_band_pct": round(pool_band, 4), "alpha": stats.ALPHA},
        evidence=evidence, action="eject", gate="representative")])
