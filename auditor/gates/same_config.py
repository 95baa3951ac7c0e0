"""Same-config legs: A/A evidence the claim did not choose.

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

from dataclasses import dataclass
from pathlib import Path

from perfwarden.auditor import registry, stats
from perfwarden.auditor.evidence import LegEvidence, RunLoader, _plain_name, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates import reading
from perfwarden.auditor.gates import conditions, workload
from perfwarden.auditor.gates.measurement import calibrate_band
from perfwarden.auditor.model import roles
from perfwarden.auditor.rederive import METRICS
from perfwarden.formats.records import Claim, Comparison, RunDir
from perfwarden.formats.verdict_parts import HeadlineReference


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


def conditions_differ(run: Path, base: LegEvidence, name: str) -> bool:
    """The uncited leg ``name`` ran other conditions than the baseline (a non-inert key of its
    ``server_info.json`` differs), so ``is_same_config`` would refuse it after reading its every rep: its reps
    are not read. The file is read by a loader of its own, as ``RunLoader.leg`` reads it; one that cannot be
    read decides nothing here (the leg's full read then does, as before)."""
    if base.server_info is None:
        return True  # no leg is the same config as a baseline without conditions
    info, _ = RunLoader(run).json_object(RunDir(run).server_info(name), False, f"server_info of {name!r}")
    if info is None:
        return False
    return any(not roles.is_inert(key) for key in conditions.diff_server_info(base.server_info, info))


def same_config_legs(run: Path, claim: Claim, base: LegEvidence, cited: set[str]) -> list[LegEvidence]:
    """Uncited legs measured with the baseline's configuration and load, each read on its own (a leg whose
    conditions already differ is not read further)."""
    out = []
    for name in uncited_legs(run, cited):
        if conditions_differ(run, base, name):
            continue
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


@dataclass(frozen=True)
class FairerReference:
    """The same-config legs a handicapped baseline was held against, and the headline re-derived against
    them: the fairer reference the verdict banks when it is the less favourable one."""

    legs: tuple[str, ...]
    pool: LegEvidence
    """Every rep of those legs as one leg (the level the baseline's configuration shows unhandicapped)."""
    metric: str
    higher_is_better: bool
    delta_pct: float
    improvement_pct: float
    p_value: float | None
    noise_band_pct: float
    handicap_pct: float
    """How much worse the claim's baseline is than these legs on the metric (percent, positive)."""


def pooled(legs: list[LegEvidence]) -> LegEvidence:
    """The legs' reps as one leg, for comparisons against the same-config level (read only by statistics)."""
    return LegEvidence(name=" + ".join(leg.name for leg in legs), reps=[r for leg in legs for r in leg.reps])


def check_representative_baseline(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence,
                                  twins: list[LegEvidence]) -> GateResult[FairerReference]:
    """The baseline must not be significantly worse than the other same-config legs on the headline metric.

    When it is, the delta is re-derived against the other same-config legs' reps (the level the baseline's
    configuration shows when it is not handicapped): still a significant win -> FLAG, downgrade_headline
    (bank that size, not the claimed one); gone -> FAIL, eject. Either way the gate's value is that fairer
    reference, which the verdict banks and shows where it is the less favourable figure.
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
            "UNREPRESENTATIVE_BASELINE", "INFO", f"baseline {base.name!r} is not significantly worse than its "
            f"same-config leg(s) {names} on {metric}: they are {handicap.described()}",
            measured=round(handicap.improvement_pct, 4), threshold={"noise_band_pct": round(band, 4)},
            gate="representative")])
    pool_band, _ = calibrate_band(metric, twins[0], twins[1:], len(others), len(c))
    win = stats.decide(others, c, higher, pool_band)
    fairer = FairerReference(tuple(leg.name for leg in twins), pooled(twins), metric, higher, win.delta_pct,
                             win.improvement_pct, win.p_value, pool_band, handicap.improvement_pct)
    evidence = [line_evidence(run, base.reps[0].ref)] + [line_evidence(run, leg.reps[0].ref) for leg in twins[:3]]
    what = (f"baseline {base.name!r} is {handicap.improvement_pct:.2f}% worse on {metric} than its same-config "
            f"leg(s) {names} (band ±{band:.2f}%, p={handicap.p_value:.3g}): a handicapped baseline, or the machine "
            "slower while this step ran than while they did (both legs of a step share the machine's speed; legs "
            f"of other steps may not). Against their "
            f"{len(others)} reps the candidate is {win.described()}")
    measured = {"baseline_vs_twins_pct": round(-handicap.improvement_pct, 4),
                "candidate_vs_same_config_pct": round(win.improvement_pct, 4), "claimed_pct": claim.headline.value}
    if win.significant_better:
        return GateResult(findings=[finding(
            "UNREPRESENTATIVE_BASELINE", "FLAG", what + ": the win is real, and the figure banked is that one, "
            f"{win.delta_pct:+.2f}%", measured=measured, threshold={"noise_band_pct": round(band, 4)},
            evidence=evidence, action="downgrade_headline", gate="representative")], value=fairer)
    return GateResult(findings=[finding(
        "UNREPRESENTATIVE_BASELINE", "FAIL", what + ": no real win against them, so the claimed one is not banked",
        measured=measured, threshold={"noise_band_pct": round(pool_band, 4), "alpha": stats.ALPHA},
        evidence=evidence, action="eject", gate="representative")], value=fairer)


def conservative_headline(base: str, direct: Comparison | None,
                          fairer: FairerReference | None) -> tuple[float | None, list[HeadlineReference], str | None]:
    """The headline a verdict banks and shows: the delta against the claim's own baseline, or, where the
    baseline was handicapped and the delta was re-derived against its same-config legs too, the less
    favourable of the two. Returns (that delta, both references, why it is not the direct one)."""
    if direct is None or fairer is None or fairer.metric != direct.metric:
        return (direct.delta_pct if direct else None), [], None
    direct_improvement = stats.improvement_pct(direct.delta_pct, direct.higher_is_better)
    fairer_wins = fairer.improvement_pct < direct_improvement
    refs = [HeadlineReference(reference="claim_baseline", legs=[base], delta_pct=direct.delta_pct,
                              p_value=direct.p_value, noise_band_pct=direct.noise_band_pct, banked=not fairer_wins),
            HeadlineReference(reference="same_config_legs", legs=list(fairer.legs), delta_pct=fairer.delta_pct,
                              p_value=fairer.p_value, noise_band_pct=fairer.noise_band_pct,
                              values=_values(fairer.pool, fairer.metric), banked=fairer_wins)]
    if not fairer_wins:
        return direct.delta_pct, refs, None
    note = (f"{direct.metric} {fairer.delta_pct:+.2f}% against the same-config leg(s) "
            f"{', '.join(repr(n) for n in fairer.legs)}, not {direct.delta_pct:+.2f}% against baseline {base!r}: "
            f"that baseline is {fairer.handicap_pct:.2f}% worse than they are (UNREPRESENTATIVE_BASELINE), and the "
            "figure banked is the less favourable of the two")
    return fairer.delta_pct, refs, note
