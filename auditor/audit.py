"""The deterministic auditor: one claim + one run directory -> one verdict.

Each scope runs a fixed list of gates (design §4) over evidence re-derived from raw files. A gate that
crashes does not crash the audit: the verdict is marked degraded and can no longer be PASS (fail open,
never silently). Same files in, same verdict out: nothing here reads the clock or an unseeded RNG.
"""

from __future__ import annotations

import hashlib
import json
import math
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar, overload


from perfwarden.auditor import banking, registry, snapshot, stats, witnesses
# Re-exported: the orchestrator, the review and the red team load claims and catch their errors from here.
from perfwarden.auditor.claim_file import ClaimError as ClaimError, load_claim as load_claim
from perfwarden.auditor.evidence import LegEvidence, QualityRecords, RunLoader, _plain_name
from perfwarden.auditor.findings import Findings, GateResult, decide, deciding_actions
from perfwarden.auditor.gates import (caching, conditions, correctness, engine_witness, explain, foreign_run,
                                      goodput_slo, integrity, knobs, lever, measurement, objective, opbench, process,
                                      profile, prose, reading, same_config, served, target_keys, timeline, workload)
from perfwarden.auditor.manifest import KeyChoice, KeyFileError, Manifest, observe, read_manifest, resolve_key
from perfwarden.auditor.model import mechanisms, parity, roles
from perfwarden.auditor.model import witnesses as rep_witnesses
from perfwarden.auditor.rederive import METRICS
from perfwarden.formats.jsonl import chain_seal_id
from perfwarden.formats.objective import RunObjective
from perfwarden.formats.records import (Claim, Comparison, Finding, IsolatedSpeedup, LeverClass, MetricStats, RunDir,
                                        Seal, Verdict, VerdictCorrectness, write_json_atomic)
from perfwarden.formats.safe_read import REPORT_BYTES, exists
from perfwarden.formats.safe_write import check_name
from perfwarden.formats.slo import GoodputBasis
from perfwarden.formats.verdict_parts import HeadlineReference, LegWitnesses

AUDITOR_VERSION = "1.0.0"

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Audit:
    """Mutable state of one audit while gates run."""

    run: Path
    claim: Claim
    loader: RunLoader
    findings: Findings
    legs_stats: dict[str, dict[str, MetricStats]] = field(default_factory=dict)
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    not_checked: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    diff: dict[str, list[Any]] = field(default_factory=dict)
    lever_detected: LeverClass | None = None
    lever_signals: list[str] = field(default_factory=list)
    correctness: VerdictCorrectness = "not_applicable"
    seal: Seal = "unsealed"
    """Set by the integrity gate; a gate that could not run leaves it unsealed (fail closed)."""
    headline_rederived: float | None = None
    """The headline delta against the claim's own baseline (what the claim's figure is checked against)."""
    fairer: same_config.FairerReference | None = None
    """The same-config legs a handicapped baseline was held against, when it was (the representative gate)."""
    engine_held: dict[str, int | None] = field(default_factory=dict)
    """Leg -> reps the engine-witness gate held against the engine's counters (None: not a vLLM leg)."""
    witnesses: list[LegWitnesses] = field(default_factory=list)
    extra_values: list[float] = field(default_factory=list)
    extra_kind: str = "ratio"
    """What ``extra_values`` are, for prose tracing: ``share`` (profile scope) or ``ratio`` (speedups)."""
    key: Path | None = None
    goodput: GoodputBasis | None = None
    """The SLO the legs' goodput was re-derived at (``goodput_slo``), for the verdict to say so."""
    objective: RunObjective | None = None
    """What the run sealed that it optimizes (``objective.json``; None: it sealed nothing)."""
    manifest: tuple[Manifest | None, str | None] | None = None
    """The seal chain as read before the gates (manifest, error reading it); None until read."""
    """The run's seal key file as given (``--key``), for audits this audit runs itself (bundle components)."""

    @overload
    def gate(self, name: str, fn: Callable[[], GateResult[T]]) -> T | None: ...

    @overload
    def gate(self, name: str, fn: Callable[[], R]) -> R | None: ...

    def gate(self, name: str, fn: Callable[[], object]) -> object:
        """Run one gate; an exception in our own code degrades the verdict instead of crashing it.

        A pure gate returns a ``GateResult`` (or a plain list of findings): its findings and
        not-checked notes are collected here and its ``value`` is returned. Older gates that still add
        to ``a.findings`` themselves return anything else, which is passed through."""
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - the whole point is to contain our own bugs
            self.degraded.append(f"gate {name!r} failed: {type(exc).__name__}: {exc}")
            self.findings.add("AUDITOR_DEGRADED", "FLAG", f"gate {name!r} could not run ({type(exc).__name__}); "
                              "its check is not made", gate=name, action="flag")
            self.not_checked.append(f"{name}: {traceback.format_exception_only(type(exc), exc)[-1].strip()}")
            return None
        if isinstance(result, GateResult):
            self.findings.extend(result.findings)
            self.not_checked.extend(result.not_checked)
            return result.value
        if isinstance(result, list) and all(isinstance(f, Finding) for f in result) and result:
            self.findings.extend(result)
            return None
        return result

    def leg(self, name: str, need_outputs: bool = False, need_conditions: bool = False) -> LegEvidence:
        leg = self.loader.leg(name, need_outputs, need_conditions)
        if name not in self.legs_stats and leg.reps:
            self.legs_stats[name] = measurement.leg_metric_stats(leg.reps)
        return leg


# ----------------------------------------------------------------------------------------- scopes


def _require(a: Audit, role: str, name: str | None) -> str | None:
    """The leg the claim names for ``role``; None, and a FAIL, where it names none."""
    if not name:
        a.findings.add("EVIDENCE_MISSING", "FAIL", f"the {a.claim.scope} claim names no {role} leg", gate="evidence")
        return None
    return name


def _aa_legs(a: Audit, base: LegEvidence) -> list[LegEvidence]:
    """Same-config evidence: the declared A/A legs and every uncited leg measured with the baseline's
    configuration and load (they widen the noise band, never narrow it)."""
    declared = [leg for leg in (a.leg(n) for n in a.claim.legs.aa if n) if leg.reps]
    legs = a.claim.legs
    cited = {n for n in (legs.baseline, legs.candidate, legs.validation, legs.caching_audit, legs.caching_control,
                         *legs.aa) if n}
    twins = a.gate("same_config", lambda: same_config.same_config_legs(a.run, a.claim, base, cited)) or []
    if twins:
        a.not_checked.append("A/A evidence: uncited leg(s) " + ", ".join(repr(t.name) for t in twins)
                             + " ran the baseline's configuration and load; their reps count as A/A reps")
    return declared + twins


def audit_baseline(a: Audit) -> None:
    claim = a.claim
    base_name = _require(a, "baseline", claim.legs.baseline)
    if base_name is None:
        return
    base = a.leg(base_name, need_outputs=True)
    if not base.reps:
        a.findings.add("EVIDENCE_MISSING", "FAIL", f"baseline {base.name!r} has no usable rep", gate="evidence")
        return
    aa = _aa_legs(a, base)
    _goodput(a, [base])
    metric = claim.headline.metric if claim.headline.metric in METRICS else "output_throughput"
    a.gate("crash", lambda: measurement.check_crash(a.run, base, None))
    a.gate("errors", lambda: measurement.check_errors(a.run, base, "FLAG", "remeasure"))
    a.gate("contention", lambda: measurement.check_contention(a.run, base))
    _engine_witness(a, base)
    a.gate("mechanisms", lambda: mechanisms.check_mechanisms(a.run, base))
    a.gate("noise", lambda: measurement.check_noisy_baseline(a.run, base, aa, metric))
    a.gate("aggregates", lambda: measurement.check_line_aggregates(a.run, base))
    a.gate("condition_copies", lambda: conditions.check_condition_copies(a.run, base))
    a.gate("witness", lambda: rep_witnesses.check_witnesses(a.run, base, _sealed(a)))
    a.gate("process_conditions", lambda: process.check_process_conditions(a.run, [base]))
    a.gate("target_keys", lambda: target_keys.check_target_keys(a.run, a.loader.run_target(), [base]))
    band, _ = measurement.calibrate_band(metric, base, aa, len(base.reps), len(base.reps))
    a.gate("drift", lambda: measurement.check_drift(a.run, claim, base, band))
    random_weights = a.gate("random_weights", lambda: correctness.check_random_weights(a.run, [base]))
    if random_weights:
        a.correctness = "unverifiable"
    elif base.outputs is None:
        a.not_checked.append("reference coherence: no outputs.jsonl in the baseline leg")
    else:
        coherent = a.gate("coherence", lambda: correctness.check_reference_coherence(a.run, base))
        a.correctness = "verified" if coherent else "unverifiable"
    a.gate("reported", lambda: measurement.check_reported_numbers(claim, a.legs_stats, None))


def _engine_witness(a: Audit, leg: LegEvidence) -> None:
    """The leg's reps against the engine's own counters; how many were held is kept for the witnesses."""
    a.engine_held[leg.name] = a.gate("engine_witness", lambda: engine_witness.check_engine_witness(
        a.run, engine_witness.load_engine_witness(a.loader, leg), leg))


def _witnesses(a: Audit) -> None:
    """Per leg the witness gates ran on: what its reps were held against, and the reps no server-side
    account covered (the one not-checked line about server counters)."""
    for name in a.engine_held:
        leg = a.loader.leg(name)
        held = witnesses.leg_witnesses(leg, a.engine_held[name], a.seal == "sealed")
        a.witnesses.append(held)
        note = witnesses.unwitnessed_note(held)
        if note is not None:
            a.not_checked.append(note)


def audit_profile(a: Audit) -> None:
    rows = a.loader.profile()
    if rows is None:
        return
    if not rows:
        a.findings.add("EVIDENCE_MISSING", "FAIL", "the profile has no complete line", gate="profile")
        return
    reported = a.claim.reported.get("op_share") if isinstance(a.claim.reported, dict) else None
    ranking = a.gate("profile", lambda: profile.check_routed_op(a.run, rows, a.claim.op, reported))
    a.extra_kind = "share"
    for _, share in ranking or []:
        a.extra_values.append(share)


def audit_harness(a: Audit) -> None:
    claim = a.claim
    path = claim.opbench or (claim.isolated_speedup.opbench if claim.isolated_speedup else None)
    op = claim.op or (claim.isolated_speedup.op if claim.isolated_speedup else None)
    if not path or not op:
        a.findings.add("EVIDENCE_MISSING", "FAIL", "the harness claim names no op or op benchmark", gate="harness")
        return
    rows = a.loader.opbench(path)
    if rows is None:
        return
    if not rows:
        a.findings.add("EVIDENCE_MISSING", "FAIL", f"op benchmark {path!r} has no complete line", gate="harness")
        return
    server = a.leg(claim.legs.baseline) if claim.legs.baseline else None
    server_info = server.server_info if server else None
    if server_info is None:
        a.not_checked.append("dispatch path: no baseline leg server_info names what the server runs")
    profile_rows = a.loader.profile() if exists(a.loader.paths.profile) else None
    if profile_rows is None:
        a.not_checked.append("served shapes: no profile.jsonl lists the shapes the server serves")
    iso = claim.isolated_speedup
    # rig.json read once for the roofline and for the figures' count and time: two reads could see two files
    rig_json, rig_file = _rig_json(a, path)
    figures = opbench.rig_figures(rig_json, required=_sealed_rig(a))
    a.gate("harness", lambda: opbench.check_rig_samples(a.run, rows, rig_json, rig_file, _sealed_rig(a)))
    result = a.gate("harness", lambda: opbench.audit_rig(
        a.run, rows, iso.baseline_backend if iso else None, iso.candidate_backend if iso else None,
        server_info, profile_rows, op, claimed_speedup=iso.value if iso else None, rig=figures))
    if result and result.speedup is not None:
        a.headline_rederived = result.speedup
        a.extra_values += [result.speedup, *result.per_shape.values()]
        if iso and abs(iso.value - result.speedup) > opbench.SPEEDUP_TOLERANCE * result.speedup:
            a.findings.add("REPORTED_MISMATCH", "FLAG", f"claimed {iso.value:.3g}x vs re-derived {result.speedup:.3g}x",
                           measured=round(result.speedup, 4), threshold=iso.value, action="downgrade_headline",
                           gate="harness")


def _rig_figures(a: Audit, opbench_path: str) -> opbench.RigFigures:
    """The memory roofline the op bench recorded beside its lines (``rig.json``); required -- a missing
    figure fails closed -- where the run carries a seal chain, whose harness always records one."""
    return opbench.rig_figures(_rig_json(a, opbench_path)[0], required=_sealed_rig(a))


def _rig_json(a: Audit, opbench_path: str) -> tuple[dict[str, object] | None, str]:
    """The op bench's ``rig.json`` beside its lines (None where there is none), and its path in the run."""
    rig_path = a.loader.inside(opbench_path).parent / "rig.json"
    obj = a.loader.json_object(rig_path, False, "op bench rig")[0] if exists(rig_path) else None
    return obj, rig_path.relative_to(a.run).as_posix() if rig_path.is_relative_to(a.run) else str(rig_path)


def _sealed_rig(a: Audit) -> bool:
    """Whether the run carries a seal chain, whose harness always writes a full rig.json."""
    return a.manifest is not None and a.manifest[0] is not None


def audit_patch(a: Audit, bundle: bool = False) -> None:
    claim = a.claim
    base_name = _require(a, "baseline", claim.legs.baseline)
    cand_name = _require(a, "candidate", claim.legs.candidate) if base_name is not None else None
    if base_name is None or cand_name is None:
        return
    a.gate("objective", lambda: objective.check_headline_objective(claim, a.objective))
    base = a.leg(base_name, need_outputs=True, need_conditions=True)
    cand = a.leg(cand_name, need_outputs=True, need_conditions=True)
    legs = {base.name: base, cand.name: cand}
    if claim.legs.validation:
        val = a.leg(claim.legs.validation)
        legs[val.name] = val
    aa = _aa_legs(a, base)

    # Do no harm first: a crash or failed requests in the candidate ends the discussion.
    a.gate("crash", lambda: measurement.check_crash(a.run, cand, len(base.reps) or None))
    a.gate("errors", lambda: _errors(a, base, cand))
    for leg in (base, cand):
        _leg_gates(a, leg)
    a.gate("workload", lambda: workload.check_workload(a.run, claim, base, cand))
    a.gate("foreign_identities", lambda: foreign_run.check_identities(a.run, [base, cand]))
    a.gate("parity", lambda: parity.check_parity(a.run, base, cand, _sealed(a)))
    claimed = [a.leg(n) for n in _claim_legs(claim) if _plain_name(n)]
    if not a.gate("foreign_clock", lambda: foreign_run.check_clock(a.run, base, cand, claim.legs.concurrent)):
        a.gate("interleaving", lambda: measurement.check_interleaving(a.run, base, cand))
        a.gate("overlap", lambda: timeline.check_overlap(a.run, claimed, claim.legs.concurrent))
    a.gate("process_conditions", lambda: process.check_process_conditions(a.run, claimed))
    a.gate("named_files", lambda: reading.check_named_folders(a.run, claimed, a.manifest is not None
                                                              and a.manifest[0] is not None))

    a.diff = a.gate("conditions", lambda: conditions.check_conditions(a.run, claim, base, cand)) or {}
    unknown = a.gate("knobs", lambda: knobs.check_unknown_knobs(a.run, claim, a.diff, base, cand)) or []
    a.gate("target_keys", lambda: target_keys.check_target_keys(a.run, a.loader.run_target(), [base, cand], unknown))
    a.gate("reported_conditions", lambda: conditions.check_reported_conditions(a.run, claim, legs))
    if bundle:
        a.gate("bundle", lambda: _bundle_gates(a, base, cand))

    _goodput(a, [base, cand])
    if base.reps and cand.reps:
        for metric in METRICS:
            comp = measurement.compare(metric, base, cand, aa)
            if comp is not None:
                a.comparisons[metric] = comp
        head = a.comparisons.get(claim.headline.metric)
        a.headline_rederived = head.delta_pct if head else None
        a.gate("significance", lambda: _significance(a, head, base, cand))
        a.fairer = a.gate("representative", lambda: same_config.check_representative_baseline(
            a.run, claim, base, cand, aa))
        a.gate("latency", lambda: _latency(a, base, cand))
        a.gate("explain", lambda: explain.check_unexplained_delta(claim, head, _profile_rows(a)))
        a.gate("output_length", lambda: correctness.check_output_length(a.run, base, cand))
    else:
        a.findings.add("EVIDENCE_MISSING", "FAIL", "a leg has no usable rep, so no delta can be re-derived",
                       gate="significance")

    detected = a.gate("lever", lambda: lever.detect_lever(a.diff, base, cand))
    if detected:
        a.lever_detected, a.lever_signals = detected
        a.gate("orthogonal", lambda: lever.check_orthogonal(claim, a.lever_detected, a.lever_signals, cand, a.run))
    a.gate("engagement", lambda: lever.check_engagement(claim, cand, a.run))
    a.gate("signals", lambda: lever.check_undeclared_signals(a.run, claim, base, cand))
    a.gate("acceptance", lambda: lever.check_acceptance_rate(a.run, claim, cand))

    lossy = correctness.lossy_signals(claim, a.diff) + knobs.lossy_reasons(unknown, base, cand)
    random_weights = a.gate("random_weights", lambda: correctness.check_random_weights(
        a.run, list(legs.values()))) is True
    a.correctness = a.gate("parity", lambda: correctness.check_parity(a.run, claim, base, cand, bool(lossy),
                                                                      random_weights)) or "unverifiable"
    if random_weights and a.correctness in ("verified", "not_applicable"):
        a.correctness = "unverifiable"
    a.gate("served", lambda: _served_gates(a, base, cand, bool(lossy), bool(unknown)))
    a.gate("quality", lambda: correctness.check_quality(a.run, claim, _quality_records(a, lossy, base, cand),
                                                        base.name, cand.name, lossy))
    spec_signals = [s for s in lever.raw_signals(cand) if s.family == "spec_decode"]
    a.gate("spec_decode", lambda: correctness.check_spec_decode_documented(claim, bool(spec_signals),
                                                                           bool(spec_signals)))

    a.gate("response_cache", lambda: caching.check_response_cache(a.run, [base, cand]))
    a.gate("prefix_warmth", lambda: caching.check_prefix_warmth(a.run, base, cand))
    if claim.legs.caching_audit:
        cache_leg = a.leg(claim.legs.caching_audit)
        control = a.leg(claim.legs.caching_control) if claim.legs.caching_control else cand
        if cache_leg.reps and control.reps:
            a.gate("test04", lambda: caching.check_test04_leg(a.run, control, cache_leg))
    elif bundle:
        a.not_checked.append("TEST04-style caching leg: none was measured")

    iso = claim.isolated_speedup
    if iso is not None:
        a.gate("isolated_vs_e2e", lambda: _isolated_vs_e2e(a, iso, base, cand))
    a.gate("reported", lambda: measurement.check_reported_numbers(claim, a.legs_stats, a.headline_rederived))


def _leg_gates(a: Audit, leg: LegEvidence) -> None:
    """The gates a patch audit runs on each of its two legs alone."""
    a.gate("contention", lambda: measurement.check_contention(a.run, leg))
    _engine_witness(a, leg)
    a.gate("mechanisms", lambda: mechanisms.check_mechanisms(a.run, leg))
    a.gate("aggregates", lambda: measurement.check_line_aggregates(a.run, leg))
    a.gate("condition_copies", lambda: conditions.check_condition_copies(a.run, leg))
    a.gate("witness", lambda: rep_witnesses.check_witnesses(a.run, leg, _sealed(a)))


def _significance(a: Audit, head: Comparison | None, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
    """The headline's significance gate; a goodput headline with a rep where no request met the SLO has no
    ratio to test and is judged apart (``objective.check_unjudgeable_goodput``)."""
    if head is None and a.claim.headline.metric == objective.GOODPUT:
        zero = objective.check_unjudgeable_goodput(a.run, base, cand)
        if zero.findings:
            return zero
    return measurement.check_headline(
        a.run, a.claim, head, (len(base.reps), len(cand.reps)), a.findings.has("CONTENDED_LEG", "FLAG"),
        worse=head is not None and measurement.significant_worse(head, base, cand),
        changed=any(not roles.is_inert(key) for key in a.diff))


def _goodput(a: Audit, legs: list[LegEvidence]) -> None:
    """Decide the SLO goodput is re-derived at (``goodput_slo``), then give every rep of ``legs`` its
    goodput at it, from the good requests the loader counted while the rep streamed."""
    a.goodput = a.gate("goodput_slo", lambda: goodput_slo.check_goodput_slo(a.run, a.claim, legs, a.objective))
    if a.goodput is None:
        return
    for leg in legs:
        for rep in leg.reps:
            if rep.goodput is not None and a.goodput.slo in rep.goodput.good:
                rep.metrics[goodput_slo.METRIC] = rep.goodput.good[a.goodput.slo] / rep.duration_s
        if leg.reps:
            a.legs_stats[leg.name] = measurement.leg_metric_stats(leg.reps)


def _quality_records(a: Audit, lossy: list[str], base: LegEvidence, cand: LegEvidence) -> QualityRecords:
    """What the quality gate judges, read by the loader: the named registered eval's records of both legs
    (nothing when the change is lossless or names no registered eval: the gate says so)."""
    eval_id = a.claim.correctness.quality_eval_id
    if not lossy or not eval_id or eval_id not in registry.quality_evals():
        return QualityRecords()
    return a.loader.quality_pair(eval_id, base.name, cand.name)


def _profile_rows(a: Audit) -> opbench.ProfileRows | None:
    return a.loader.profile() if a.loader.paths.profile.is_file() else None


def _served_gates(a: Audit, base: LegEvidence, cand: LegEvidence, lossy: bool, unknown_knob: bool) -> None:
    """Parity from what was served: each leg's dump against its own served texts, then served texts
    across legs (exact for an unclassified knob)."""
    base_served, cand_served = base.served, cand.served
    results: list[GateResult[None] | GateResult[float]] = [served.check_dump_matches_served(a.run, base, base_served),
               served.check_dump_matches_served(a.run, cand, cand_served),
               served.check_served_parity(a.run, base, cand, base_served, cand_served, lossy,
                                          1.0 if unknown_knob else correctness.PARITY_MIN_IDENTICAL)]
    for result in results:
        a.findings.extend(result.findings)
        a.not_checked.extend(result.not_checked)
    if any(f.severity == "FAIL" for r in results for f in r.findings):
        a.correctness = "failed"


def _errors(a: Audit, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
    base_errors = sum(r.n_errors for r in base.reps)
    cand_errors = sum(r.n_errors for r in cand.reps)
    results = [measurement.check_errors(a.run, base, "FLAG", "remeasure")]
    if cand_errors > base_errors:
        results.append(measurement.check_errors(a.run, cand, "FAIL", "eject"))
    elif cand_errors:
        results.append(measurement.check_errors(a.run, cand, "FLAG", "remeasure"))
    return GateResult([f for r in results for f in r.findings])


def _latency(a: Audit, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
    """Latency regressions behind the headline, against the claim's baseline and, where that baseline is
    handicapped, against its same-config legs too: a baseline slow in its latencies as well would otherwise
    hide a regression the candidate shows against the level its configuration really serves at."""
    metric, disclosed = a.claim.headline.metric, a.claim.headline.disclosed_regressions
    own = measurement.check_hidden_regressions(a.comparisons, metric, base, cand, disclosed)
    if a.fairer is None:
        return own
    pool = a.fairer.pool
    comparisons = {m: c for m in METRICS if (c := measurement.compare(m, pool, cand, [])) is not None}
    against = measurement.check_hidden_regressions(comparisons, metric, pool, cand, disclosed,
                                                   reference=f"the same-config leg(s) {pool.name!r}")
    flagged = {f.measured["metric"] for f in own.findings if f.severity == "FLAG"}
    more = [f for f in against.findings if f.severity == "FLAG" and f.measured["metric"] not in flagged]
    return GateResult(findings=own.findings + more)


def _isolated_vs_e2e(a: Audit, iso: IsolatedSpeedup, base: LegEvidence, cand: LegEvidence) -> None:
    """An isolated speedup (``iso``, the claim's) must come from an honest rig and be consistent with the
    e2e delta."""
    head = a.comparisons.get(a.claim.headline.metric)
    e2e_real = head is not None and head.significant
    if iso.opbench:
        rows = a.loader.opbench(iso.opbench)
        if rows:
            profile_rows = a.loader.profile() if exists(a.loader.paths.profile) else None
            # In a patch audit the e2e legs are the evidence: a bad rig discredits the isolated number,
            # so its findings ask to replace the headline with the e2e delta when that delta is real.
            rig = opbench.audit_rig(a.run, rows, iso.baseline_backend, iso.candidate_backend, base.server_info,
                                    profile_rows, iso.op, severity="FLAG" if e2e_real else "FAIL",
                                    action="replace_headline_with_e2e" if e2e_real else "eject",
                                    claimed_speedup=iso.value, rig=_rig_figures(a, iso.opbench))
            a.findings.extend(rig.findings)
            a.not_checked.extend(rig.not_checked)
    else:
        a.not_checked.append("isolated speedup: no op benchmark file cited, rig not audited")
    if head is None:
        return
    improvement = stats.improvement_pct(head.delta_pct, head.higher_is_better)
    if not e2e_real:
        a.findings.add("ISOLATED_E2E_GAP", "FAIL", f"isolated {iso.value:.3g}x on {iso.op!r} but the e2e "
                       f"{head.metric} change {improvement:+.2f}% is not a real delta", measured=round(improvement, 3),
                       threshold={"noise_band_pct": round(head.noise_band_pct, 3)}, action="eject",
                       gate="isolated_vs_e2e")
        return
    profile_rows = a.loader.profile() if exists(a.loader.paths.profile) else None
    fraction = iso.op_time_fraction if iso.op_time_fraction is not None else opbench.op_fraction(profile_rows, iso.op)
    if fraction is not None and 0 < fraction <= 1 and iso.value > 0:
        bound = opbench.amdahl_bound_pct(iso.value, fraction)
        if improvement > bound + head.noise_band_pct:
            a.findings.add("IMPLAUSIBLE_SPEEDUP", "FLAG", f"e2e improvement {improvement:.1f}% exceeds the Amdahl bound "
                           f"{bound:.1f}% of a {iso.value:.3g}x speedup on an op taking {fraction:.1%}: the win comes "
                           "from something else", measured=round(improvement, 3), threshold=round(bound, 3),
                           action="replace_headline_with_e2e", gate="isolated_vs_e2e")
    if a.claim.headline.kind == "isolated":
        a.findings.add("ISOLATED_E2E_GAP", "FLAG", f"the headline is an isolated {iso.value:.3g}x; the re-derived e2e "
                       f"{head.metric} change is {improvement:+.2f}%", measured=round(improvement, 3),
                       threshold=iso.value, action="replace_headline_with_e2e", gate="isolated_vs_e2e")


def _bundle_gates(a: Audit, base: LegEvidence, cand: LegEvidence) -> None:
    """Bundle: measured against the true no-overlay baseline; every difference is an accepted change."""
    if base.spec is not None and (base.spec.overlay.config or base.spec.overlay.kernel_patches):
        a.findings.add("CONDITIONS_DIFFER", "FAIL", f"bundle baseline {base.name!r} carries an overlay; a bundle is "
                       "judged against the true no-overlay baseline", measured=base.spec.overlay.model_dump(),
                       threshold="empty overlay", action="eject", gate="bundle")
    components = a.claim.lever.components if a.claim.lever else []
    accepted = accepted_changes(a.run, components, a.key)
    unaccepted = [c for c in components if c not in accepted]
    if unaccepted:
        a.findings.add("CONDITIONS_DIFFER", "FAIL", f"bundle components {unaccepted!r} have no patch claim in this run "
                       f"that the auditor banks when audited again (banked: {sorted(accepted)!r})",
                       measured=unaccepted, action="eject", gate="bundle")


def accepted_changes(run: Path, names: list[str], key: Path | None = None) -> dict[str, list[str]]:
    """Lever names among ``names`` that a patch claim in this run keeps *now*: each candidate claim is
    audited again rather than its verdict file believed. Verdict files are not sealed evidence, and a
    producer that writes ``verdicts/<seq>-patch.json`` saying PASS must not get a component into a bundle."""
    out: dict[str, list[str]] = {}
    cdir = Path(run) / "claims"
    if not cdir.is_dir() or not names:
        return out
    for cpath in sorted(cdir.glob("*-patch.json")):
        try:
            claim, _ = load_claim(cpath, root=run)
        except ClaimError:
            continue
        if claim.lever is None or claim.lever.name not in names or claim.lever.name in out:
            continue
        try:
            verdict = audit_path(run, cpath, claim_root=run, key=key)
        except ClaimError:
            continue
        # ``kept_as``, not ``banks``: a component's evidence is the bundle's own run, sealed or not alike, and
        # an unsealed bundle keeps its verdict (shown "(unsealed)", never banked) rather than a FAIL.
        if banking.kept_as(verdict.verdict, banking.verdict_actions(verdict)) is not None:
            out[claim.lever.name] = claim.lever.config_keys
    return out


SCOPES: dict[str, Callable[[Audit], None]] = {
    "baseline": audit_baseline,
    "profile": audit_profile,
    "harness": audit_harness,
    "patch": audit_patch,
    "bundle": lambda a: audit_patch(a, bundle=True),
}


# ---------------------------------------------------------------------------------------- entry


def audit_claim(run: Path, claim: Claim, claim_ref: str, claim_sha: str, key: Path | None = None) -> Verdict:
    """Audit one claim against the raw files of ``run``. ``key``: the run's seal key file (``--key``);
    without it the key store is consulted (``manifest.resolve_key``)."""
    run = Path(run)
    try:
        key_choice = resolve_key(run, key, chain_seal_id(RunDir(run).evidence))
    except KeyFileError as exc:
        raise ClaimError(str(exc)) from None
    findings = Findings()
    loader = RunLoader(run, tuple(claim.lever.kernel_ops) if claim.lever else (), claim.headline.slo)
    a = Audit(run=run, claim=claim, loader=loader, findings=findings, key=key)
    a.objective = loader.objective()
    if a.objective is not None and a.objective.slo is not None:  # before any leg: reps count good requests at it
        loader.goodput_slo = a.objective.slo
    a.manifest = _read_chain(a, key_choice)
    if a.manifest[0] is not None and a.manifest[0].verified and a.manifest[0].broken is None:
        loader.line_sealed = frozenset(f.path for f in a.manifest[0].files.values() if f.lines and not f.whole)
        loader.sealed_line_lengths = {f.path: {line.offset: line.length for line in f.lines}
                                      for f in a.manifest[0].files.values() if f.lines and not f.whole}
    if not run.is_dir():
        findings.add("EVIDENCE_MISSING", "FAIL", f"run directory {str(run)!r} does not exist", gate="evidence")
    else:
        a.gate(f"scope:{claim.scope}", lambda: SCOPES[claim.scope](a))
        report = claim.report
        if report:
            a.gate("prose", lambda: _prose(a, report))
        a.seal = a.gate("integrity", lambda: _integrity(a, key_choice)) or "unsealed"
        _witnesses(a)
    a.gate("reading", lambda: _reading(a))
    return build_verdict(a, claim_ref, claim_sha)


def _reading(a: Audit) -> GateResult[None]:
    """What the loader met while reading, and what the legs it loaded show as a whole (``gates/reading.py``),
    judged after every other gate has read its files."""
    legs = a.loader.loaded_legs()
    results = [reading.check_reading(a.loader.problems), reading.check_foreign_fields(a.loader.foreign_fields),
               reading.check_rep_clock(a.run, legs, a.loader.run_started() if legs else None),
               reading.check_duplicate_timings(a.run, legs), *(reading.check_rep_set(a.run, leg) for leg in legs)]
    return GateResult([f for r in results for f in r.findings], [n for r in results for n in r.not_checked])


def _claim_legs(claim: Claim) -> list[str]:
    legs = claim.legs
    names = [legs.baseline, legs.candidate, legs.validation, legs.caching_audit, legs.caching_control, *legs.aa]
    return list(dict.fromkeys(n for n in names if n))


def _sealed(a: Audit) -> bool:
    """The run's seal chain was read and verifies with its key (read before any gate)."""
    manifest = a.manifest[0] if a.manifest is not None else None
    return manifest is not None and manifest.verified and manifest.broken is None


def _integrity(a: Audit, key: KeyChoice) -> GateResult[Seal]:
    """Gather what the integrity gate decides from (the manifest, the files on disk, the claim's legs)
    after every other gate has read its files, so each file's digest is computed once."""
    on_disk = []
    for name in _claim_legs(a.claim):
        if not _plain_name(name):
            continue  # the loader already refused it (EVIDENCE_MISSING)
        leg = a.leg(name)
        leg_dir = a.loader.paths.leg_dir(name)
        on_disk.append(integrity.LegOnDisk(
            name, leg_dir.is_dir(), frozenset(f for f in integrity.REQUIRED_LEG_FILES if (leg_dir / f).is_file()),
            {r.rep: r.contention is not None for r in leg.reps}))
    prose_file = None  # a producer's report: prose about the evidence, not harness evidence
    if a.claim.report:
        report, root = a.loader.inside(a.claim.report).resolve(), a.run.resolve()
        prose_file = str(report.relative_to(root)) if report.is_relative_to(root) else None
    # Not the harness's evidence, so never sealed: the producer's report, and run.json (the orchestrator's
    # manifest of the run; the rep-clock check reads its start time, and in a sealed run an edited start
    # cannot admit a foreign rep, whose line the chain never sealed).
    unsealed_by_design = {prose_file, "run.json"}
    read = {rel: sha for rel, sha in a.loader.digests.items() if rel not in unsealed_by_design}
    manifest, error = a.manifest if a.manifest is not None else _read_chain(a, key)
    if manifest is not None:
        a.loader.digests[integrity.CHAIN] = manifest.sha256
    files = observe(a.run, manifest, a.loader.digests) if manifest is not None else {}
    return integrity.check_integrity(integrity.IntegrityEvidence(key, manifest, files, read, on_disk, error))


def _read_chain(a: Audit, key: KeyChoice) -> tuple[Manifest | None, str | None]:
    """The run's seal chain, read once before any gate (the loader needs to know which lines a verified
    seal covers) and reused by the integrity gate."""
    chain = a.loader.paths.evidence
    if not chain.is_file():
        return None, None
    try:
        return read_manifest(chain, key.key, key.head), None
    except OSError as exc:
        return None, f"{str(chain)!r}: {exc}"


def _prose(a: Audit, report: str) -> GateResult[int] | None:
    """The producer's report (``report``, the claim's) traced against the re-derived values."""
    tf = a.loader.text(a.loader.inside(report), True, "report", limit=REPORT_BYTES)
    if tf is None:
        return None
    return prose.check_report(a.run, tf, traceable_pool(a), a.claim.headline.metric, a.claim.legs.baseline,
                              a.claim.legs.candidate, a.legs_stats)


def traceable_pool(a: Audit) -> list[prose.Traceable]:
    """Every re-derived value a report may quote, typed by what it is (prose traces by meaning)."""
    T = prose.Traceable
    pool: list[prose.Traceable] = []
    for leg_name, per_metric in a.legs_stats.items():
        for metric, st in per_metric.items():
            levels = [*st.values, st.median, st.min, st.max, st.ci_low, st.ci_high]
            pool += [T(v, "level", metric, leg_name) for v in prose.finite(levels)]
            pool += [T(v, "spread", metric, leg_name) for v in prose.finite([st.spread_pct])]
        leg = a.loader.leg(leg_name)
        pool += [T(v, "count", None, leg_name) for v in (len(leg.reps), sum(r.n_requests for r in leg.reps))]
        for r in leg.reps:
            pool += [T(v, "count", None, leg_name) for v in prose.finite([r.n_requests, r.n_ok, r.mean_output_len])]
            pool += [T(v, "duration", None, leg_name) for v in prose.finite([r.duration_s])]
        for v in conditions.flatten(leg.server_info or {}).values():
            pool += [T(x, "config", None, leg_name) for x in prose.finite([v])]
    for comp in a.comparisons.values():
        m = comp.metric
        pool += [T(comp.delta_pct, "delta", m), T(1.0 + comp.delta_pct / 100.0, "ratio", m),
                 T(comp.noise_band_pct, "band", m), T(comp.worst_candidate_vs_best_baseline_pct, "worst", m)]
        if 100.0 + comp.delta_pct > 0:
            pool.append(T(100.0 / (100.0 + comp.delta_pct), "ratio", m))  # "2x faster" on a lower-is-better metric
        pool += [T((v - 1.0) * 100.0, "ci", m) for v in prose.finite([comp.ratio_ci_low, comp.ratio_ci_high])]
        pool += [T(v, "pvalue", m) for v in prose.finite([comp.p_value])]
    if a.comparisons:
        pool.append(prose.Traceable(stats.ALPHA, "pvalue"))
    pool += [T(v, a.extra_kind, None) for v in prose.finite(a.extra_values)]
    if a.headline_rederived is not None and a.claim.scope == "harness":
        pool.append(T(a.headline_rederived, "ratio"))
    pool += _quality_values(a)
    return pool


def _quality_values(a: Audit) -> list[prose.Traceable]:
    eval_id = a.claim.correctness.quality_eval_id
    out = []
    if eval_id:
        for leg in filter(None, (a.claim.legs.baseline, a.claim.legs.candidate)):
            if exists(a.loader.paths.quality(eval_id, leg)):
                qe, _ = a.loader.quality(eval_id, leg)
                if qe is not None:
                    out += [prose.Traceable(v, "quality", None, leg) for v in prose.finite([qe.score, qe.ci_low,
                                                                                             qe.ci_high])]
                    out.append(prose.Traceable(float(qe.n), "count", None, leg))
    return out


def build_verdict(a: Audit, claim_ref: str, claim_sha: str) -> Verdict:
    items = a.findings.items
    label, action = decide(items, degraded=bool(a.degraded))
    references: list[HeadlineReference] = []
    headline, note = a.headline_rederived, None
    if a.claim.scope in ("patch", "bundle"):
        headline, references, note = same_config.conservative_headline(
            a.claim.legs.baseline or "", a.comparisons.get(a.claim.headline.metric), a.fairer)
    digests = dict(sorted(a.loader.digests.items()))
    digest_src = json.dumps({"claim": claim_sha, "inputs": digests, "auditor": AUDITOR_VERSION}, sort_keys=True)
    return Verdict(
        scope=a.claim.scope, claim=claim_ref, claim_seq=a.claim.seq, verdict=label, action=action,
        actions=(deciding_actions(items, label) or [action]) if label != "PASS" else [],
        findings=items, legs=a.legs_stats, comparisons=list(a.comparisons.values()),
        headline_claimed=a.claim.headline.value, headline_rederived=_finite(headline),
        headline_references=references, headline_note=note,
        lever_declared=a.claim.lever.lever_class if a.claim.lever else None,
        lever_detected=a.lever_detected, lever_signals=a.lever_signals, server_info_diff=a.diff,
        correctness=a.correctness, not_checked=a.not_checked + a.loader.notes, witnesses=a.witnesses, seal=a.seal,
        degraded=bool(a.degraded),
        degraded_reasons=a.degraded, auditor_version=AUDITOR_VERSION, input_digests=digests,
        digest=hashlib.sha256(digest_src.encode()).hexdigest(), goodput=a.goodput,
    )


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def audit_path(run: Path, claim_path: Path, claim_root: Path | None = None, key: Path | None = None) -> Verdict:
    """CLI/orchestrator entry: load the claim file, audit, return the verdict (raises ClaimError, also
    for a ``key`` file that cannot be used). ``claim_root``: the directory the claim must stay inside (a
    claim found in a run, not one named on the command line)."""
    claim, sha = load_claim(claim_path, claim_root)
    try:
        ref = str(Path(claim_path).resolve().relative_to(Path(run).resolve()))
    except ValueError:
        ref = str(claim_path)
    # Another process may be writing the run: audit one state of it (auditor/snapshot.py).
    verdict, note = snapshot.consistent(Path(run), lambda: audit_claim(run, claim, ref, sha, key=key))
    return verdict if note is None else verdict.model_copy(update={"not_checked": [*verdict.not_checked, note]})


def write_verdict(run: Path, verdict: Verdict) -> Path:
    """Write the verdict atomically next to the claims: verdicts/<seq>-<scope>.json."""
    path = Path(run) / "verdicts" / check_name(f"{verdict.claim_seq:03d}-{verdict.scope}.json", "verdict file name")
    write_json_atomic(path, verdict, run)  # never through a link planted at verdicts/ or the file
    return path
