"""Rep-level statistics, significance, noise, drift, contention, errors and crashes.

Every number here is re-derived from the per-request arrays in ``bench_runs.jsonl`` (see
``rederive.py``); numbers a producer reported are only cross-checked.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, TypeGuard

import numpy as np

from perfwarden.auditor import stats
from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import Findings, GateResult, finding
from perfwarden.auditor.rederive import LATENCY_METRICS, METRICS, RepMetrics
from perfwarden.auditor.sequential import HORIZON_REPS
from perfwarden.auditor.serverlog import ERROR_PATTERNS, FATAL_PATTERNS  # noqa: F401 - re-exported (moved)
from perfwarden.formats.records import (Action, Claim, Comparison, EvidenceRef, Finding, MetricStats, Severity,
                                        shadows)

# Tolerance for a line's own aggregates vs our re-derivation. Wider for e2e/TPOT when the file has no
# per-request latency array (we then rebuild e2e as ttft + sum(itls), ~1% off sglang's own clock).
AGGREGATE_TOLERANCE_PCT = {"default": 2.0, "median_e2e_latency_ms": 5.0, "median_tpot_ms": 5.0}
REPORTED_TOLERANCE_PCT = 1.0
"""A producer's reported median may differ from ours by rounding only."""
HEADLINE_TOLERANCE_PTS = 1.0
"""Claimed headline delta vs re-derived, in percentage points, before it is a mismatch."""
BUSY_PROCESS_CPU_PCT = 50.0
"""Another process using this much CPU during a rep contends with the measurement."""
MAX_REPS = HORIZON_REPS
"""Most reps per leg a comparison may use: the sequential rule's horizon (design §4), past which no alpha is
left; an undecided delta that could clear the band by then asks for a re-measure, else it is ejected."""
DRIFT_FLOOR_PCT = 2.0
"""Smallest drift reported, even when the band is narrower."""


def leg_metric_stats(reps: list[RepMetrics]) -> dict[str, MetricStats]:
    """Per metric: median/min/max/spread/CI over reps (a metric absent from any rep is left out)."""
    out: dict[str, MetricStats] = {}
    for metric in METRICS:
        values = [r.metrics[metric] for r in reps if metric in r.metrics]
        if not values or len(values) != len(reps):
            continue
        arr = np.asarray(values)
        med = float(np.median(arr))
        ci = stats.median_ci(values)
        out[metric] = MetricStats(n=len(values), values=values, median=med, min=float(arr.min()),
                                  max=float(arr.max()),
                                  spread_pct=float((arr.max() - arr.min()) / med * 100.0) if med else None,
                                  ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None)
    return out


def _pooled_band(metric: str, legs: list[LegEvidence], n_base: int, n_cand: int) -> tuple[float, str | None]:
    """Band from the pooled CV of these legs' reps; (default, None) below 3 reps or on bad values."""
    groups = [[r.metrics[metric] for r in leg.reps if metric in r.metrics] for leg in legs]
    groups = [g for g in groups if len(g) >= 2]
    n_same = sum(len(g) for g in groups)
    if n_same < 3:
        return stats.DEFAULT_NOISE_BAND_PCT, None
    try:
        cv = stats.pooled_cv_pct(groups)
    except stats.StatsError:
        return stats.DEFAULT_NOISE_BAND_PCT, None
    return stats.noise_band_pct(cv, n_base, n_cand), f"pooled CV {cv:.2f}% over {n_same} reps"


def calibrate_band(metric: str, base: LegEvidence, aa_legs: list[LegEvidence], n_base: int,
                   n_cand: int) -> tuple[float, str]:
    """Noise band for one metric: what the baseline's own reps show (else the default), widened -- never
    narrowed -- by the reps of same-config legs (declared A/A legs and uncited twins): a producer's
    choice of legs can only make the statistics more conservative."""
    own, own_source = _pooled_band(metric, [base], n_base, n_cand)
    own_label = f"baseline_reps ({own_source})" if own_source else "default"
    if not aa_legs:
        return own, own_label
    pooled, pooled_source = _pooled_band(metric, [base, *aa_legs], n_base, n_cand)
    if pooled_source is None or pooled <= own:
        return own, own_label + (f"; same-config legs would narrow it to ±{pooled:.2f}%, not used"
                                 if pooled_source and pooled < own else "")
    return pooled, f"aa_legs ({pooled_source}; widens the baseline's own ±{own:.2f}%)"


def compare(metric: str, base: LegEvidence, cand: LegEvidence, aa_legs: list[LegEvidence]) -> Comparison | None:
    """Baseline vs candidate on one metric at the rep level; None if either leg lacks the metric."""
    b = [r.metrics[metric] for r in base.reps if metric in r.metrics]
    c = [r.metrics[metric] for r in cand.reps if metric in r.metrics]
    if not b or not c or len(b) != len(base.reps) or len(c) != len(cand.reps):
        return None
    higher = METRICS[metric]
    band, source = calibrate_band(metric, base, aa_legs, len(b), len(c))
    try:
        decision = stats.decide(b, c, higher, band)
        worst = stats.worst_vs_best_pct(b, c, higher)
        ci = stats.bootstrap_ratio_ci(b, c) if len(b) >= 2 and len(c) >= 2 else None
    except stats.StatsError:
        return None
    return Comparison(metric=metric, higher_is_better=higher, delta_pct=decision.delta_pct,
                      p_value=decision.p_value, noise_band_pct=band, noise_band_source=source,
                      worst_candidate_vs_best_baseline_pct=worst,
                      ratio_ci_low=ci[0] if ci else None, ratio_ci_high=ci[1] if ci else None,
                      significant=decision.significant_better)


def significant_worse(comp: Comparison, base: LegEvidence, cand: LegEvidence) -> bool:
    b = [r.metrics[comp.metric] for r in base.reps]
    c = [r.metrics[comp.metric] for r in cand.reps]
    return stats.decide(b, c, comp.higher_is_better, comp.noise_band_pct).significant_worse


def check_headline(run: Path, claim: Claim, comp: Comparison | None, n_reps: tuple[int, int],
                   contended: bool = False, worse: bool = False, changed: bool = True) -> GateResult[None]:
    """The headline must be a real change: outside the noise band and significant at the rep level.

    ``worse``: the candidate is significantly worse, outside the band -- a regression (DELTA_REGRESSION),
    named apart from an undecided delta (DELTA_NOT_SIGNIFICANT) so that a clear loss never reads as "not
    significant". ``changed``: the legs' conditions differ at all; two legs of one configuration (an A/A
    pair) have no change to regress, so a significant gap between them is the session's drift, said as
    such under DELTA_NOT_SIGNIFICANT. When a leg was contended, a missing delta may be the neighbour's doing: the change is
    neither banked nor ejected on that data -- the check is reported as not made and the verdict (FLAG
    from CONTENDED_LEG) asks for a re-measure."""
    findings = Findings()
    not_checked: list[str] = []
    metric = claim.headline.metric
    if comp is None:
        findings.add("EVIDENCE_MISSING", "FAIL", f"headline metric {metric!r} cannot be re-derived for both legs",
                     gate="significance")
        return GateResult(findings.items, not_checked)
    improvement = stats.improvement_pct(comp.delta_pct, comp.higher_is_better)
    if n_reps[0] < 2 or n_reps[1] < 2:
        findings.add("DELTA_NOT_SIGNIFICANT", "FAIL", f"{metric} has {n_reps[0]} baseline and {n_reps[1]} candidate "
                     "reps; a rep-level test needs at least 2 each", measured=list(n_reps), threshold=">= 2 reps per leg",
                     action="remeasure", gate="significance")
        return GateResult(findings.items, not_checked)
    if comp.significant:
        return GateResult(findings.items, not_checked)
    if contended:
        findings.add("DELTA_NOT_SIGNIFICANT", "INFO", f"{metric} improves {improvement:+.2f}% (p={comp.p_value:.3g}) "
                     "on contended legs: not judged", measured=round(improvement, 4), gate="significance")
        not_checked.append("significance: a leg was contended, so the delta cannot be judged; re-measure")
        return GateResult(findings.items, not_checked)
    threshold = {"noise_band_pct": round(comp.noise_band_pct, 4), "alpha": stats.ALPHA}
    if worse and not changed:
        findings.add("DELTA_NOT_SIGNIFICANT", "FAIL",
                     f"{metric} is {-improvement:.2f}% worse in the candidate, outside the ±{comp.noise_band_pct:.2f}% "
                     f"noise band [{comp.noise_band_source}] and significant at the rep level, yet both legs ran "
                     "the same configuration: no change to credit or blame, the gap is the session's drift",
                     measured={"improvement_pct": round(improvement, 4), "p_value": comp.p_value}, threshold=threshold,
                     action="eject", gate="significance")
        return GateResult(findings.items, not_checked)
    if worse:
        findings.add("DELTA_REGRESSION", "FAIL",
                     f"{metric} is {-improvement:.2f}% worse in the candidate, outside the ±{comp.noise_band_pct:.2f}% "
                     f"noise band [{comp.noise_band_source}] and significant at the rep level: the change is a "
                     "regression", measured={"improvement_pct": round(improvement, 4)}, threshold=threshold,
                     action="eject", gate="significance")
        return GateResult(findings.items, not_checked)
    inside = abs(improvement) <= comp.noise_band_pct
    # The band shrinks with reps: re-measuring can only help if the observed improvement would clear
    # the band at the most reps a comparison may use.
    band_at_max = comp.noise_band_pct * math.sqrt((2.0 / MAX_REPS) / (1.0 / n_reps[0] + 1.0 / n_reps[1]))
    more_reps_could_help = min(n_reps) < MAX_REPS and improvement > band_at_max
    findings.add("DELTA_NOT_SIGNIFICANT", "FAIL",
                 f"{metric} changes {improvement:+.2f}% (one-sided p={comp.p_value:.3g} for better) against a noise "
                 f"band of ±{comp.noise_band_pct:.2f}% [{comp.noise_band_source}]: "
                 + ("inside the noise band" if inside else "outside the band, yet not significant at the rep level")
                 + ": undecided",
                 measured={"improvement_pct": round(improvement, 4), "p_value": comp.p_value}, threshold=threshold,
                 action="remeasure" if more_reps_could_help else "eject", gate="significance")
    return GateResult(findings.items, not_checked)


PRIMARY_METRICS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                   "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms")
"""Metrics a user of the server feels: every one is checked whatever the headline metric is, so a
TTFT headline cannot hide a throughput loss nor a throughput headline a tail-ITL stall."""


def disclosure_tolerance_pts(worse_pct: float, band_pct: float) -> float:
    """How far a stated regression may be from the measured one, in points: the noise band, which is
    relative, applied to the measured ratio (a 175% regression is known to ±band% of 2.75x)."""
    return band_pct * (1.0 + worse_pct / 100.0)


def check_hidden_regressions(comparisons: dict[str, Comparison], headline_metric: str, base: LegEvidence,
                             cand: LegEvidence, disclosed: dict[str, float] | None = None,
                             reference: str = "") -> GateResult[None]:
    """No primary metric may regress behind the headline unless the claim states the regression at its
    measured size: a disclosure counts only within the noise band of the measured regression, so a
    blanket or inflated disclosure covers nothing (INFO for a truthful one, FLAG otherwise).
    ``reference``: what ``base`` is when it is not the claim's baseline (said in each message)."""
    disclosed = disclosed or {}
    against = f" against {reference}" if reference else ""
    out = []
    for metric in PRIMARY_METRICS:
        if metric == headline_metric:
            continue
        comp = comparisons.get(metric)
        if comp is None or not significant_worse(comp, base, cand):
            continue
        worse = -stats.improvement_pct(comp.delta_pct, comp.higher_is_better)
        stated = disclosed.get(metric)
        tol = disclosure_tolerance_pts(worse, comp.noise_band_pct)
        evidence = [line_evidence_for(cand, 0)]
        if stated is not None and abs(stated - worse) <= tol:
            out.append(finding("HIDDEN_LATENCY_REGRESSION", "INFO", f"{metric} is {worse:.1f}% worse{against}; disclosed as "
                               f"{stated:.1f}% (within ±{tol:.1f} points)", measured={"metric": metric,
                                                                                       "worse_pct": round(worse, 3)},
                               threshold={"disclosed_pct": stated, "tolerance_pts": round(tol, 3)}, evidence=evidence,
                               gate="latency"))
            continue
        if stated is None:
            what = "not disclosed"
        elif stated > worse:
            what = f"disclosed as {stated:.1f}%: inflated, so it covers nothing"
        else:
            what = f"understated: disclosed {stated:.1f}%"
        out.append(finding(
            "HIDDEN_LATENCY_REGRESSION", "FLAG", f"{metric} is {worse:.1f}% worse in the candidate{against} (p<{stats.ALPHA}), "
            f"outside the ±{comp.noise_band_pct:.2f}% band, behind a {headline_metric} headline ({what})",
            measured={"metric": metric, "worse_pct": round(worse, 3)},
            threshold={"noise_band_pct": round(comp.noise_band_pct, 3), "disclosed_pct": stated,
                       "tolerance_pts": round(tol, 3)}, evidence=evidence, action="flag", gate="latency"))
    return GateResult(findings=out)


def line_evidence_for(leg: LegEvidence, index: int) -> EvidenceRef:
    rep = leg.reps[min(index, len(leg.reps) - 1)]
    run = rep.ref.path.parents[2]
    return line_evidence(run, rep.ref)


def check_noisy_baseline(run: Path, base: LegEvidence, aa_legs: list[LegEvidence], metric: str) -> GateResult[None]:
    """Baseline rep spread must sit inside what same-session A/A reps show (or the documented default)."""
    findings = Findings()
    values = [r.metrics[metric] for r in base.reps if metric in r.metrics]
    if len(values) < 2:
        findings.add("NOISY_BASELINE", "FLAG", f"baseline {base.name!r} has {len(values)} rep(s) of {metric}: "
                     "its noise cannot be judged", measured=len(values), threshold=">= 2 reps",
                     action="remeasure", gate="noise")
        return GateResult(findings.items, [])
    spread = stats.spread_pct(values)
    aa_spreads = []
    for leg in aa_legs:
        aa_values = [r.metrics[metric] for r in leg.reps if metric in r.metrics]
        if len(aa_values) >= 2:
            aa_spreads.append(stats.spread_pct(aa_values))
    if aa_spreads:
        # A/A legs can tighten the documented limit, never loosen it: noisy twins do not excuse a noisy baseline.
        limit = min(stats.DEFAULT_MAX_BASELINE_SPREAD_PCT, max(1.0, 2.0 * float(np.median(aa_spreads))))
        source = f"2x median spread of {len(aa_spreads)} A/A leg(s), at most the documented default"
    else:
        limit = stats.DEFAULT_MAX_BASELINE_SPREAD_PCT
        source = "documented default (no A/A legs)"
    if spread > limit:
        med = float(np.median(values))
        worst = max(range(len(values)), key=lambda i: abs(values[i] - med))
        findings.add("NOISY_BASELINE", "FLAG", f"baseline {metric} reps spread {spread:.2f}% > {limit:.2f}% "
                     f"[{source}]; rep {base.reps[worst].rep} is furthest from the median",
                     measured=round(spread, 4), threshold=round(limit, 4),
                     evidence=[line_evidence(run, base.reps[worst].ref)], action="remeasure", gate="noise")
    return GateResult(findings.items, [])


def check_drift(run: Path, claim: Claim, base: LegEvidence, band_pct: float) -> GateResult[None]:
    """A previously provided baseline number must agree with the re-derived one."""
    findings = Findings()
    not_checked: list[str] = []
    provided = claim.provided_baseline
    if provided is None:
        return GateResult(findings.items, not_checked)
    values = [r.metrics[provided.metric] for r in base.reps if provided.metric in r.metrics]
    if not values:
        findings.add("EVIDENCE_MISSING", "FAIL", f"cannot re-derive {provided.metric!r} to check drift",
                     gate="drift")
        return GateResult(findings.items, not_checked)
    med = float(np.median(values))
    if any(abs(provided.value - v) <= 1e-9 * max(1.0, abs(v)) for v in values + [med]):
        not_checked.append(f"BASELINE_DRIFT: the provided baseline {provided.value!r} is this leg's own "
                           "number, so drift is unmeasurable")
        return GateResult(findings.items, not_checked)
    drift = stats.relative_delta_pct(provided.value, med)
    limit = max(DRIFT_FLOOR_PCT, band_pct)
    if abs(drift) > limit:
        findings.add("BASELINE_DRIFT", "FAIL", f"re-derived baseline {provided.metric} {med:.3f} differs "
                     f"{drift:+.2f}% from the provided {provided.value!r} ({provided.source or 'no source'})",
                     measured=round(med, 4), threshold={"provided": provided.value, "max_drift_pct": limit},
                     evidence=[line_evidence(run, r.ref) for r in base.reps[:3]], action="eject", gate="drift")
    return GateResult(findings.items, not_checked)


LOADAVG_PER_CORE = 2.0
"""A 1-minute load average of this many runnable tasks per core is contention (the server's own
threads account for about one per core)."""
OTHERS_MIN_CORES = 0.5
OTHERS_CORE_SHARE = 0.25
"""Other processes together using max(half a core, a quarter of the cores) contend with the rep."""


def machine_cores(sample: dict[str, Any]) -> float | None:
    """Cores the server could use: the smallest of the CPU count, this process's affinity and its
    cgroup quota, where recorded."""
    values = [sample.get(k) for k in ("ncpu", "ncpu_available", "cpu_quota_cores")]
    usable = [float(v) for v in values if _number(v) and v > 0]
    return min(usable) if usable else None


def sample_contention(sample: dict[str, Any], judge_load: bool = True) -> list[str]:
    """Why one contention sample shows a busy machine (empty when it does not). Judged on the whole
    machine: any one other process past half a core, the summed CPU of every other process, the
    machine's busy share while the server idled (samples are taken just before and after the load),
    and the load average -- each against the number of cores. ``judge_load=False`` where the rep's CPU
    window (:func:`window_contention`) measured the other processes over the rep itself: the load
    average mixes the server's own runnable threads into the neighbours'."""
    reasons = []
    _check_figures(sample)
    cores = machine_cores(sample)
    procs = _busy_list(sample)
    if procs:
        top = max(procs, key=lambda p: p[1])
        if top[1] >= BUSY_PROCESS_CPU_PCT:
            reasons.append(f"process {top[0]!r} used {top[1]:.0f}% of a core")
    others_limit = 100.0 * max(OTHERS_MIN_CORES, OTHERS_CORE_SHARE * (cores or 1.0))
    total = sum(cpu for _, cpu in procs)
    if total >= others_limit and not reasons:
        reasons.append(f"{len(procs)} other processes used {total:.0f}% of a core together (limit "
                       f"{others_limit:.0f}% on {cores or 1:g} cores)")
    busy_pct = sample.get("cpu_busy_pct")
    if _number(busy_pct) and cores:
        if busy_pct < 0 or busy_pct > 100:
            raise ContentionFormatError(f"contention cpu_busy_pct {busy_pct!r} is not a percentage")
        if busy_pct * cores >= others_limit:
            reasons.append(f"the machine was {busy_pct:.0f}% busy ({busy_pct * cores / 100:.2g} of {cores:g} cores) "
                           "while the server idled")
    load = sample.get("loadavg", sample.get("loadavg_1m"))
    load1 = load[0] if isinstance(load, list) and load else load
    if _number(load1) and cores:
        if load1 < 0:
            raise ContentionFormatError(f"contention load average {load1!r} is negative")
        if judge_load and load1 >= LOADAVG_PER_CORE * cores:
            reasons.append(f"1-minute load average {load1:.2f} on {cores:g} cores")
    return reasons


WINDOW_FIELDS = frozenset({"wall_s", "machine_cpu_s", "server_cpu_s", "harness_cpu_s"})
"""The rep's CPU window (``harness/contention.py`` ``close_cpu_window``): CPU seconds of the whole machine,
of the server's processes and of the harness's own process (LoadGen and the client) over the rep."""
WINDOW_SLACK_S = 0.05
"""Clock-tick rounding of the per-process and machine readings (1/100 s each, a few processes)."""


def window_contention(window: Any, cores: float | None) -> list[str]:
    """Why the rep's CPU window shows other work (empty when it does not): everything the machine ran
    over the rep less the server's and the harness's own processes -- neighbours, and the kernel's work
    for them -- against the same limit as the samples. Figures the readings cannot produce are corrupt."""
    if not isinstance(window, dict) or set(window) != WINDOW_FIELDS:
        raise ContentionFormatError(f"the rep's CPU window holds {sorted(window) if isinstance(window, dict) else window!r}, "
                                    f"not {sorted(WINDOW_FIELDS)}")
    if not all(_number(v) and v >= 0 for v in window.values()) or window["wall_s"] <= 0:
        raise ContentionFormatError(f"the rep's CPU window {window!r} holds a figure that is not a non-negative number")
    wall, machine = window["wall_s"], window["machine_cpu_s"]
    own = window["server_cpu_s"] + window["harness_cpu_s"]
    slack = WINDOW_SLACK_S + 0.02 * machine
    if own > machine + slack or (cores and machine > cores * wall + slack):
        raise ContentionFormatError(f"the rep's CPU window is impossible: the server and harness used {own:.3f} s, "
                                    f"the machine {machine:.3f} s on {cores or '?'} cores in {wall:.3f} s")
    others_pct = 100.0 * max(machine - own, 0.0) / wall
    limit = 100.0 * max(OTHERS_MIN_CORES, OTHERS_CORE_SHARE * (cores or 1.0))
    if others_pct >= limit:
        return [f"other work used {others_pct:.0f}% of a core over the rep (limit {limit:.0f}% on {cores or 1:g} cores)"]
    return []


_CORE_KEYS = ("ncpu", "ncpu_available", "cpu_quota_cores")
_FIGURES = (*_CORE_KEYS, "cpu_busy_pct", "loadavg", "loadavg_1m", "busy", "busy_processes", "other_busy", "error")


def _check_figures(sample: dict[str, Any]) -> None:
    """Every figure the judgement reads is a number where the sample states it (null: not measured). One
    written as a string or a list would be skipped, and the rep judged quiet (found by the field explorer)."""
    imitations = [k for k in sample if isinstance(k, str) and shadows(k, _FIGURES)]
    if imitations:
        raise ContentionFormatError(f"contention key(s) {imitations!r} imitate the figures {list(_FIGURES)!r}")
    for key in (*_CORE_KEYS, "cpu_busy_pct", "loadavg_1m"):
        value = sample.get(key)
        if value is not None and not _number(value):
            raise ContentionFormatError(f"contention {key} {value!r} is not a number")
    load = sample.get("loadavg")
    if load is not None and not _number(load) and not (isinstance(load, list) and load and all(map(_number, load))):
        raise ContentionFormatError(f"contention loadavg {load!r} is not a number or a list of numbers")


def _unjudgeable(sample: dict[str, Any]) -> bool:
    """A sample stating a machine-wide figure (load average, busy share) but no core count: it is judged per
    core, so without one it shows nothing -- not a quiet machine (found by the field explorer)."""
    figures = [sample.get(k) for k in ("loadavg", "loadavg_1m", "cpu_busy_pct")]
    return any(v is not None for v in figures) and machine_cores(sample) is None


BUSY_LISTS = ("busy", "busy_processes", "other_busy")
"""Where a sample lists the other busy processes (the harness's key, and the earlier format's)."""
HARNESS_FIGURES = {"load average": ("loadavg", "loadavg_1m"), "core count": ("ncpu",)}
"""The machine-wide figures the harness writes together: in every error-free sample of a version-2 line, and in a
flat (earlier) sample wherever it states either (one of those holds only the busy list)."""


JUDGED_FIGURES = ("ncpu", "loadavg", "cpu_busy_pct", "busy")
"""Figures every start/end sample the harness took holds (every version): one absent or null was removed."""


def _harness_gap(sample: dict[str, Any], version: int, nested: bool) -> list[str]:
    """The judged machine-wide figures a harness-written sample lacks: the harness writes them together, so one
    missing was removed, and the sample cannot show a quiet machine (found by the field explorer: a dropped load
    average left the rep judged quiet). A start/end sample without an error holds every judged figure set, and
    from version 2 every field the harness writes (``SAMPLE_FIELDS``) (found by the field explorer: a dropped or
    nulled busy share)."""
    if nested:
        return [k for k in JUDGED_FIGURES if sample.get(k) is None] + (
            sorted(SAMPLE_FIELDS - set(sample)) if version >= 2 else [])
    missing = [what for what, keys in HARNESS_FIGURES.items() if all(sample.get(k) is None for k in keys)]
    judged = version >= 2 or len(missing) < len(HARNESS_FIGURES)
    if judged and all(sample.get(k) is None for k in BUSY_LISTS):
        missing.append("busy processes")  # "nothing busy" is an empty list; no list is "not looked at"
    return missing if judged else []


WINDOW_VERSION = 3
"""The bench line version from which the harness writes the rep's CPU window beside its samples."""


def _window_removed(contention: dict[str, Any], version: int | None) -> bool:
    """A line of version 3 or later whose two samples were both taken carries its window (the harness reads
    the same /proc for both): without it the window was removed, and the load average it replaces would
    judge a neighbour that ran between the samples as absent."""
    samples = [contention.get(k) for k in ("start", "end")]
    return (version is not None and version >= WINDOW_VERSION and "window" not in contention
            and all(isinstance(x, dict) and x.get("error") is None for x in samples))


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _samples(contention: Any) -> list[dict[str, Any]]:
    """The samples of one rep's contention record: ``{"start": s, "end": s}``, or one flat sample."""
    if not isinstance(contention, dict):
        raise ContentionFormatError(f"contention is {type(contention).__name__}, not an object")
    nested = [contention[k] for k in ("start", "end") if k in contention]
    if any(not isinstance(x, dict) for x in nested):
        raise ContentionFormatError("contention start/end samples must be objects")
    return nested or [contention]


_SAMPLE_KEYS = ("busy", "busy_processes", "other_busy", "cpu_busy_pct", "loadavg", "loadavg_1m")
SAMPLE_FIELDS = frozenset({"t", "interval_s", "ncpu", "ncpu_available", "cpu_quota_cores", "loadavg", "procs_running",
                           "procs_total", "cpu_busy_pct", "busy", "threshold_pct", "self_pid", "excluded_pids", "error"})
"""What ``harness/contention.py`` writes in one sample."""
LEGACY_FIELDS = frozenset({"loadavg_1m", "busy_processes", "other_busy"})
"""Fields of the flat sample the harness wrote before samples were taken at a rep's start and end."""
BUSY_FIELDS = frozenset({"pid", "name", "cpu_pct"})


def validate_sample_fields(contention: dict[str, Any], version: int) -> None:
    """A harness line's contention record holds only the harness's fields: ``start``/``end`` samples
    (version 2 lines: nothing else), or one flat sample of the earlier format. Raises
    ``ContentionFormatError`` on a field the harness never writes."""
    nested = "start" in contention or "end" in contention
    if version >= 2 and not nested:
        raise ContentionFormatError(f"a version-{version} line's contention holds 'start' and 'end' samples, not "
                                    f"{', '.join(map(repr, sorted(contention)[:5]))}")
    if nested:
        extra = sorted(set(contention) - {"start", "end", "window"})
        samples, allowed = [contention.get("start"), contention.get("end")], SAMPLE_FIELDS
    else:
        extra, samples, allowed = [], [contention], SAMPLE_FIELDS | LEGACY_FIELDS
    for sample in samples:
        if isinstance(sample, dict):
            extra += sorted(set(sample) - allowed)
            for proc in sample.get("busy") or []:
                extra += sorted(set(proc) - BUSY_FIELDS) if isinstance(proc, dict) else []
    if extra:
        raise ContentionFormatError(f"the contention sample has field(s) the harness never writes: "
                                    f"{', '.join(map(repr, extra[:5]))}")


def check_contention(run: Path, leg: LegEvidence, severity: Severity = "FLAG") -> GateResult[None]:
    """Another busy process -- or a busy machine -- during a rep makes that rep measure the neighbour
    too. A rep perfwarden's harness wrote without a sample cannot show its machine was quiet."""
    findings: list[Finding] = []
    not_checked: list[RepMetrics] = []
    unsampled: list[RepMetrics] = []
    errored: list[RepMetrics] = []
    for rep in leg.reps:
        if rep.contention is None:
            (unsampled if rep.schema_version is not None else not_checked).append(rep)
            continue
        try:
            samples = _samples(rep.contention)
            if rep.schema_version is not None:
                validate_sample_fields(rep.contention, rep.schema_version)
            usable = [x for x in samples if x.get("error") is None and any(k in x for k in _SAMPLE_KEYS)]
            version = rep.schema_version
            nested = "start" in rep.contention or "end" in rep.contention
            if version is not None and nested and not all(k in rep.contention for k in ("start", "end")):
                unsampled.append(rep)  # the harness writes both samples, an error in one it could not take
                continue
            if version is not None and any(x.get("error") is not None for x in samples):
                unsampled.append(rep)  # a sample the harness could not take shows no quiet machine
                continue
            taken = [x for x in samples if x.get("error") is None] if nested else usable
            if any(map(_unjudgeable, usable)) or (version is not None and any(
                    _harness_gap(x, version, nested) for x in taken)):
                unsampled.append(rep)
                continue
            if not usable:
                (errored if any(x.get("error") for x in samples) else unsampled).append(rep)
                continue
            window = rep.contention.get("window") if version is not None else None
            if window is None and _window_removed(rep.contention, version):
                unsampled.append(rep)
                continue
            reasons = [r for x in usable for r in sample_contention(x, judge_load=window is None)]
            if window is not None:
                reasons += window_contention(window, min(filter(None, map(machine_cores, usable)), default=None))
        except ContentionFormatError as exc:
            findings.append(finding("EVIDENCE_CORRUPT", "FAIL", f"leg {leg.name!r} rep {rep.rep}: {exc}",
                                    evidence=[line_evidence(run, rep.ref)], gate="contention"))
            continue
        if reasons:
            top = _top_busy(usable)
            findings.append(finding("CONTENDED_LEG", severity, f"leg {leg.name!r} rep {rep.rep}: " + "; ".join(
                dict.fromkeys(reasons)), measured=round(top, 1) if top is not None else reasons,
                threshold={"process_pct": BUSY_PROCESS_CPU_PCT, "others_min_cores": OTHERS_MIN_CORES,
                           "others_core_share": OTHERS_CORE_SHARE, "loadavg_per_core": LOADAVG_PER_CORE},
                evidence=[line_evidence(run, rep.ref)], action="remeasure", gate="contention"))
    if unsampled:
        findings.append(finding("EVIDENCE_MISSING", "FLAG", f"leg {leg.name!r}: {len(unsampled)} rep(s) written by "
                                f"perfwarden's harness (lines {', '.join(str(r.ref.line) for r in unsampled[:5])}) "
                                "carry no contention sample that can be judged (none, a load figure without the core "
                                "count it is judged against, a harness sample missing a figure it always writes, or one "
                                "the harness could not take): whether the machine was quiet cannot be shown",
                                evidence=[line_evidence(run, unsampled[0].ref)], action="remeasure",
                                gate="contention"))
    if not_checked:
        notes = [f"contention of leg {leg.name!r}: {len(not_checked)} rep(s) from a foreign bench file carry no "
                 "sample"]
    else:
        notes = []
    if errored:
        notes.append(f"contention of leg {leg.name!r}: {len(errored)} rep(s) of a foreign bench file carry a sample "
                     "that states an error")
    return GateResult(findings=findings, not_checked=notes)


def _busy_list(sample: dict[str, Any]) -> list[tuple[str, float]]:
    """Other busy processes listed in one sample (``busy``/``busy_processes``/``other_busy``)."""
    out = []
    for key in ("busy", "busy_processes", "other_busy"):
        procs = sample.get(key)
        if procs is None:
            continue
        if not isinstance(procs, list):
            raise ContentionFormatError(f"contention {key!r} is {type(procs).__name__}, not a list")
        for proc in procs:
            if not isinstance(proc, dict):
                raise ContentionFormatError(f"contention {key!r} entry {proc!r} is not an object")
            cpu = proc.get("cpu_pct", proc.get("cpu_percent"))
            if not _number(cpu) or cpu < 0:
                raise ContentionFormatError(f"contention {key!r} entry has cpu_pct {cpu!r}")
            out.append((str(proc.get("name", proc.get("pid", "?"))), float(cpu)))
    return out


def _top_busy(samples: list[dict[str, Any]]) -> float | None:
    procs = [cpu for x in samples for _, cpu in _busy_list(x)]
    return max(procs) if procs else None


class ContentionFormatError(ValueError):
    """A contention sample the harness could not have written: the evidence is corrupt."""


def check_interleaving(run: Path, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
    """Compared legs must interleave in time (A B A B ..., or randomized), judged from rep start
    times: legs measured in separate blocks let slow drift of the machine masquerade as a delta."""
    legs = (base, cand)
    if any(len(leg.reps) < 2 for leg in legs):
        return GateResult(not_checked=["interleaving: a leg has fewer than 2 reps"])
    unstamped = [(leg, r) for leg in legs for r in leg.reps if r.started_at is None]
    if unstamped:
        harness = [(leg, r) for leg, r in unstamped if r.schema_version is not None]
        if harness:
            leg, rep = harness[0]
            return GateResult(findings=[finding(
                "EVIDENCE_MISSING", "FLAG", f"leg {leg.name!r} rep {rep.rep} was written by perfwarden's harness but "
                "has no started_at: the order of the reps cannot be shown", evidence=[line_evidence(run, rep.ref)],
                action="remeasure", gate="interleaving")])
        return GateResult(not_checked=["interleaving: rep start times absent (a foreign bench file): A B A B "
                                       "order not verifiable"])
    found = order_finding(run, base, cand, _started)
    return GateResult(findings=[found] if found is not None else [])


def _started(rep: RepMetrics) -> float:
    assert rep.started_at is not None  # check_interleaving orders stamped reps only
    return rep.started_at


def order_finding(run: Path, base: LegEvidence, cand: LegEvidence,
                  start: Callable[[RepMetrics], float]) -> Finding | None:
    """NOT_INTERLEAVED when the legs' reps, ordered by ``start`` (one clock for both legs), switch legs at
    most once: every rep of one leg before every rep of the other."""
    order = "".join(tag for _, _, tag in sorted([(start(r), i, "B") for i, r in enumerate(base.reps)]
                                                + [(start(r), i, "C") for i, r in enumerate(cand.reps)]))
    switches = sum(a != b for a, b in zip(order, order[1:]))
    if switches > 1:
        return None
    first = min((base, cand), key=lambda leg: min(start(r) for r in leg.reps))
    second = cand if first is base else base
    return finding(
        "NOT_INTERLEAVED", "FLAG", f"the legs were measured in separate blocks ({order}: every rep of "
        f"{first.name!r} before every rep of {second.name!r}), so slow drift of the machine would look like a "
        "delta; re-measure them interleaved", measured=order, threshold="more than one switch between legs",
        evidence=[line_evidence(run, max(first.reps, key=start).ref),
                  line_evidence(run, min(second.reps, key=start).ref)],
        action="remeasure", gate="interleaving")


def check_errors(run: Path, leg: LegEvidence, severity: Severity, action: Action) -> GateResult[int]:
    """Failed requests in a leg; returns the count."""
    findings = Findings()
    total = sum(r.n_errors for r in leg.reps)
    if total:
        first = next(r for r in leg.reps if r.n_errors)
        sample = first.error_samples[0].strip().splitlines()[-1][:160] if first.error_samples else ""
        n_all = sum(r.n_requests for r in leg.reps)
        findings.add("REQUEST_ERRORS", severity, f"leg {leg.name!r}: {total} of {n_all} requests failed "
                     f"(e.g. {sample!r})", measured=total, threshold=0,
                     evidence=[line_evidence(run, first.ref)], action=action, gate="errors")
    return GateResult(findings.items, [], total)


def check_crash(run: Path, leg: LegEvidence, expected_reps: int | None) -> GateResult[None]:
    """Do no harm: a server that died fails the change. Death needs evidence -- the leg marked failed,
    a fatal log line (a kill, a segfault, an exit status), or a logged error in a leg that failed.
    Fewer reps than the baseline is not such evidence: a torn last line is the writer's interruption
    (already EVIDENCE_CORRUPT at FLAG), and any other shortfall is missing evidence to re-measure."""
    findings: list[Finding] = []
    spec = leg.spec
    failed = spec is not None and spec.status == "failed"
    if spec is not None and failed:
        findings.append(finding("SERVER_CRASH", "FAIL", f"leg {leg.name!r} failed: "
                                f"{spec.failure or 'no reason recorded'}",
                                evidence=[leg.spec_file.evidence(run, leg.spec_file.key_line("status"))]
                                if leg.spec_file else [], action="eject", gate="crash"))
    fatal = False
    log = leg.log
    crash = log.crash_line(failed) if log is not None else None
    if log is not None and crash is not None:
        i, text = crash
        fatal = True
        findings.append(finding("SERVER_CRASH", "FAIL", f"server log of {leg.name!r} line {i}: {text!r}",
                                evidence=[log.evidence(run, i)], action="eject", gate="crash"))
    missing = expected_reps - len(leg.reps) if expected_reps is not None and leg.reps else 0
    short = missing > 0
    if short and not (failed or fatal):
        explained = 1 if leg.torn_tail else 0
        explained += leg.corrupt_reps
        if missing > explained:
            findings.append(finding("EVIDENCE_MISSING", "FLAG", f"leg {leg.name!r} has {len(leg.reps)} reps, the "
                                    f"baseline has {expected_reps}, and nothing shows the server died: "
                                    f"{missing - explained} rep(s) are missing; re-measure",
                                    measured=len(leg.reps), threshold=expected_reps,
                                    evidence=[EvidenceRef(file=_rel_path(run, leg.bench_path))]
                                    if leg.bench_path else [],
                                    action="remeasure", gate="crash"))
    elif short:
        findings.append(finding("SERVER_CRASH", "FAIL", f"leg {leg.name!r} has {len(leg.reps)} reps, the baseline "
                                f"has {expected_reps}: the server died before finishing", measured=len(leg.reps),
                                threshold=expected_reps, action="eject", gate="crash"))
    return GateResult(findings=findings)


def _rel_path(run: Path, path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(run).resolve()))
    except ValueError:
        return str(path)


def check_line_aggregates(run: Path, leg: LegEvidence) -> GateResult[None]:
    """A bench line's own aggregates must agree with its per-request arrays. Counts that differ and
    aggregates off by 10x or more (a unit error) already made the rep corrupt while it was read
    (``rederive``); what remains here is a few percent up to 10x: the line misstates its own data
    (REPORTED_MISMATCH at FLAG)."""
    findings = []
    for rep in leg.reps:
        for name, reported in rep.reported.items():
            ours = rep.metrics.get(name)
            if ours is None or not math.isfinite(reported):
                continue
            tol = AGGREGATE_TOLERANCE_PCT.get(name, AGGREGATE_TOLERANCE_PCT["default"])
            if ours == 0 and reported == 0:
                continue
            off = abs(reported - ours) / max(abs(ours), 1e-12) * 100.0
            if off > tol:
                findings.append(finding("REPORTED_MISMATCH", "FLAG", f"leg {leg.name!r} rep {rep.rep}: the line "
                                        f"reports {name}={reported:.4g} but its per-request data give {ours:.4g} "
                                        f"({off:.1f}% off)",
                                        measured=round(ours, 6), threshold={"reported": reported, "tolerance_pct": tol},
                                        evidence=[line_evidence(run, rep.ref)], action="flag", gate="reported"))
    return GateResult(findings=findings)


def check_reported_numbers(claim: Claim, leg_stats: dict[str, dict[str, MetricStats]],
                           headline_delta: float | None) -> GateResult[None]:
    """Cross-check numbers the producer reported; nulls mean "not reported" and raise nothing."""
    findings = Findings()
    reported = claim.reported if isinstance(claim.reported, dict) else {}
    role_to_leg = {"baseline": claim.legs.baseline, "candidate": claim.legs.candidate}
    for leg_key, metrics in (reported.get("legs") or {}).items():
        leg_name = role_to_leg.get(leg_key) or leg_key
        if not isinstance(metrics, dict):
            continue
        for metric, value in metrics.items():
            stated = value.get("median") if isinstance(value, dict) else value
            ours = leg_stats.get(leg_name, {}).get(metric)
            if not isinstance(stated, (int, float)) or isinstance(stated, bool) or ours is None:
                continue
            off = abs(stated - ours.median) / max(abs(ours.median), 1e-12) * 100.0
            if off > REPORTED_TOLERANCE_PCT:
                findings.add("REPORTED_MISMATCH", "FLAG", f"reported {leg_name}.{metric} median {stated!r} vs "
                             f"re-derived {ours.median:.4f} ({off:.1f}% off)", measured=round(ours.median, 6),
                             threshold={"reported": stated, "tolerance_pct": REPORTED_TOLERANCE_PCT},
                             action="downgrade_headline", gate="reported")
    claimed = claim.headline.value
    if claimed is not None and headline_delta is not None and math.isfinite(claimed):
        if abs(claimed - headline_delta) > max(HEADLINE_TOLERANCE_PTS, 0.1 * abs(headline_delta)):
            findings.add("REPORTED_MISMATCH", "FLAG", f"headline claims {claimed:+.2f}% but the raw gives "
                         f"{headline_delta:+.2f}%", measured=round(headline_delta, 4),
                         threshold={"claimed": claimed}, action="downgrade_headline", gate="reported")
    return GateResult(findings.items, [])


def summarize(values: list[Any]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)
