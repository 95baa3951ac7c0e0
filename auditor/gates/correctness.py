"""Correctness: parity against the true baseline, a coherent reference, quality evals for lossy
mechanisms, and an unchanged output-length distribution."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from perfwarden.auditor import registry
from perfwarden.auditor.coherence import coherence_score
from perfwarden.auditor.evidence import LegEvidence, QualityRecords, line_evidence, stood_in_digest
from perfwarden.auditor.findings import Findings, GateResult, finding
from perfwarden.auditor.gates.conditions import flatten, key_evidence
from perfwarden.auditor.model.schema import evidence_model
from perfwarden.formats.records import (QUALITY_ITEMS_FIELDS, Claim, EvidenceRef, QualityEval, Severity,
                                        VerdictCorrectness)

PARITY_MIN_IDENTICAL = 0.75
"""Lossless changes: at least this fraction of greedy outputs must be identical to the baseline's.
Below 1.0 because float reassociation in a faster kernel can flip a late near-tie token."""
OUTPUT_LENGTH_SHIFT_PCT = 5.0
"""Median per-rep mean output length may move this much before it is a shift."""


def lossy_signals(claim: Claim, diff: dict[str, list[Any]]) -> list[str]:
    """Why this change is lossy: its declared mechanism, or a lossy knob in the diff."""
    out = []
    mech = registry.mechanisms().get(claim.mechanism.name, {})
    if mech.get("lossy"):
        out.append(f"mechanism {claim.mechanism.name!r}")
    for key, (vb, vc) in diff.items():
        if registry.is_lossy_change(key, vb, vc):
            out.append(f"{key}={vc!r}")
    return out


def random_weight_keys(leg: LegEvidence) -> list[tuple[str, Any]]:
    """The server_info keys by which ``leg``'s server says it serves random weights (empty: it does not
    say so, or it has no server_info)."""
    if not leg.server_info:
        return []
    return [(k, v) for k, v in flatten(leg.server_info).items() if registry.random_weights_value(k, v)]


def check_random_weights(run: Path, legs: list[LegEvidence]) -> GateResult[bool]:
    """A leg on random weights (a performance-only run) makes correctness unverifiable: its outputs are
    noise by construction, so the reference cannot be held to the coherence check (that noise is
    expected, not a broken server) and no parity or quality eval on it can show that the change keeps
    the *model* correct. The timing may stand; the verdict is at most FLAG. ``value``: whether any leg
    served random weights (the caller then skips the coherence check)."""
    hits = [(leg, key, value) for leg in legs for key, value in random_weight_keys(leg)]
    if not hits:
        return GateResult(value=False)
    names = list(dict.fromkeys(leg.name for leg, _, _ in hits))
    said = ", ".join(f"{leg.name!r}: {key}={value!r}" for leg, key, value in hits)
    evidence = [ref for leg, key, _ in hits for ref in key_evidence(run, leg, key)]
    return GateResult(
        findings=[finding("CORRECTNESS_UNVERIFIABLE", "FLAG",
                          f"leg(s) {names!r} served random weights ({said}): their outputs are noise by construction, "
                          "so no parity, coherence or quality check can verify that the change keeps the model "
                          "correct; a performance-only result, never a PASS", measured=said,
                          threshold="pretrained weights on every compared leg", evidence=evidence, action="flag",
                          gate="random_weights")],
        not_checked=[f"reference coherence: {names!r} served random weights, whose outputs are noise by construction"],
        value=True)


def check_reference_coherence(run: Path, ref: LegEvidence) -> GateResult[bool]:
    """The reference outputs must be coherent text, or parity against them proves nothing."""
    findings = Findings()
    if not ref.outputs:
        return GateResult(findings.items, [], None)
    # A text known only by its digest (a dump made from served texts past their bound) cannot be scored.
    scored_outputs = [(r, o) for r, o in ref.outputs if stood_in_digest(o.text) is None]
    result = coherence_score([o.text for _, o in scored_outputs])
    if not result.is_coherent:
        scored = [(i, s.score) for i, s in enumerate(result.per_text) if s.score is not None]
        worst = min(scored, key=lambda kv: kv[1])[0] if scored else 0
        score = "unjudgeable (too little text)" if result.score is None else f"{result.score:.3f}"
        findings.add("NONCOHERENT_REFERENCE", "FAIL", f"reference outputs of {ref.name!r} score {score} "
                     f"on the coherence check (threshold {result.threshold:.3f}): parity against them is "
                     "unverifiable", measured=None if result.score is None else round(result.score, 4),
                     threshold=result.threshold,
                     evidence=[line_evidence(run, (scored_outputs or ref.outputs)[worst][0])], action="eject",
                     gate="coherence")
        return GateResult(findings.items, [], False)
    return GateResult(findings.items, [], True)


def check_parity(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence, lossy: bool,
                 random_weights: bool = False) -> GateResult[VerdictCorrectness]:
    """Greedy parity vs the true baseline; returns the correctness status.

    ``random_weights``: a leg served random weights (``check_random_weights``): the reference is noise by
    construction, so it is not held to the coherence check, but parity still binds (a lossless change must
    reproduce the same deterministic model's greedy outputs); at best the status is ``unverifiable``."""
    findings = Findings()
    if claim.correctness.parity == "none" and lossy:
        return GateResult(findings.items, [], "not_applicable")
    if base.outputs is None or cand.outputs is None:
        missing = [leg.name for leg in (base, cand) if leg.outputs is None]
        findings.add("EVIDENCE_MISSING", "FAIL" if not lossy else "FLAG",
                     f"no parity dump (outputs.jsonl) for {missing!r}", gate="parity")
        return GateResult(findings.items, [], "unverifiable")
    if not random_weights:
        coherent = check_reference_coherence(run, base)
        findings.extend(coherent.findings)
        if coherent.value is False:
            return GateResult(findings.items, [], "unverifiable")
    by_id = {str(o.prompt_id): (ref, o) for ref, o in base.outputs}
    pairs = [(by_id[str(o.prompt_id)], (ref, o)) for ref, o in cand.outputs if str(o.prompt_id) in by_id]
    if not pairs:
        findings.add("EVIDENCE_MISSING", "FAIL", "baseline and candidate parity dumps share no prompt id",
                     gate="parity")
        return GateResult(findings.items, [], "unverifiable")
    cand_ids = {str(o.prompt_id) for _, o in cand.outputs}
    unpaired = sorted((set(by_id) - cand_ids) | (cand_ids - set(by_id)))
    if unpaired:  # parity over fewer prompts than were served is parity over a chosen subset
        findings.add("EVIDENCE_MISSING", "FLAG", f"the parity dumps cover different prompts: {len(unpaired)} prompt "
                     f"id(s) have no counterpart in the other leg (e.g. {unpaired[:3]!r}), so parity is decided on "
                     f"{len(pairs)} of {len(by_id | dict.fromkeys(cand_ids))} prompts", measured=unpaired[:10],
                     threshold="the same prompt ids in both dumps", action="remeasure", gate="parity")
    use_tokens = claim.correctness.parity == "token_ids"
    mismatched = []
    for (bref, bo), (cref, co) in pairs:
        same = (bo.token_ids == co.token_ids) if use_tokens and bo.token_ids is not None else bo.text == co.text
        if not same:
            mismatched.append(cref)
    identical = 1.0 - len(mismatched) / len(pairs)
    if lossy:
        if mismatched:
            findings.add("PARITY_MISMATCH", "INFO", f"{len(mismatched)}/{len(pairs)} outputs differ; expected for a "
                         "lossy change, judged by its quality eval instead", measured=round(identical, 4), gate="parity")
        return GateResult(findings.items, [], "unverifiable" if random_weights else "verified")
    if identical < PARITY_MIN_IDENTICAL:
        findings.add("PARITY_MISMATCH", "FAIL", f"only {len(pairs) - len(mismatched)}/{len(pairs)} greedy outputs are "
                     "identical to the true baseline's for a change declared lossless",
                     measured=round(identical, 4), threshold=PARITY_MIN_IDENTICAL,
                     evidence=[line_evidence(run, r) for r in mismatched[:3]], action="eject", gate="parity")
        return GateResult(findings.items, [], "failed")
    if mismatched:
        findings.add("PARITY_MISMATCH", "INFO", f"{len(mismatched)}/{len(pairs)} outputs differ (within the "
                     f"{PARITY_MIN_IDENTICAL:.0%} allowance)", measured=round(identical, 4),
                     threshold=PARITY_MIN_IDENTICAL, evidence=[line_evidence(run, r) for r in mismatched[:3]],
                     gate="parity")
    return GateResult(findings.items, [], "unverifiable" if random_weights else "verified")


ITEMS_DIGEST_FIELDS = QUALITY_ITEMS_FIELDS
"""Where a quality record names the items it scored (one place: ``formats.records``)."""
BASELINE_SCORE_TOLERANCE = 1e-9


def items_digest(qe: QualityEval) -> str | None:
    """The item-set digest a quality record carries (None when it carries none)."""
    for name in ITEMS_DIGEST_FIELDS:
        value = getattr(qe, name, None) if name in type(qe).model_fields else (qe.model_extra or {}).get(name)
        if isinstance(value, str) and value:
            return value
    return None


def check_quality(run: Path, claim: Claim, records: QualityRecords, base_name: str, cand_name: str,
                  lossy: list[str]) -> GateResult[None]:
    """A lossy change needs a completed, registered quality eval that the harness recorded for both
    compared legs, on the same eval and the same items, and no worse than its tolerance.

    The comparison must be the harness's own: the candidate's record names the compared baseline leg as
    its baseline, that leg has its own record of the same eval on the same item set, and the baseline
    score the candidate record quotes is that record's score. An eval graded against the candidate
    itself, another leg or another item set compares nothing, so it counts as missing."""
    if not lossy:
        return GateResult()
    severity: Severity = "FAIL" if claim.mechanism.support == "supported" else "FLAG"
    eval_id = claim.correctness.quality_eval_id
    why = ", ".join(lossy)

    def missing(message: str, ev: list[EvidenceRef] | None = None) -> GateResult[None]:
        return GateResult(findings=[finding("QUALITY_EVAL_MISSING", severity, message, evidence=ev or [],
                                            threshold="a completed registered eval of both compared legs",
                                            action="eject", gate="quality")])

    if not eval_id:
        return missing(f"lossy change ({why}) claimed {claim.mechanism.support!r} without a quality eval")
    registered = registry.quality_evals()
    if eval_id not in registered:
        return missing(f"quality eval {eval_id!r} is not registered (registered: {sorted(registered)!r})")
    spec = registered[eval_id]
    qe, tf = records.cand
    if qe is None:
        return missing(f"quality eval {eval_id!r} has no result file in the run")
    ev = [tf.evidence(run, tf.key_line("score"))] if tf else []
    bounded = spec.metric in ("exact_match", "accuracy")
    values = [v for v in (qe.score, qe.baseline_score) if v is not None]
    if any(not math.isfinite(v) or v < 0 or (bounded and v > 1) for v in values) or qe.n < 0:
        return GateResult(findings=[finding("EVIDENCE_CORRUPT", "FAIL", f"quality eval {eval_id!r} holds impossible "
                                            f"values (score {qe.score!r}, baseline {qe.baseline_score!r}, n {qe.n!r})",
                                            evidence=ev, action="eject", gate="quality")])
    if not qe.completed or qe.n < spec.min_n or qe.leg != cand_name:
        return missing(f"quality eval {eval_id!r} is incomplete or for another leg (completed={qe.completed}, "
                       f"n={qe.n}, leg={qe.leg!r}, need n>={spec.min_n} on {cand_name!r})", ev)
    if qe.baseline_leg != base_name:
        graded = "the candidate itself" if qe.baseline_leg == cand_name else repr(qe.baseline_leg)
        return missing(f"quality eval {eval_id!r} of {cand_name!r} was graded against {graded}, not the compared "
                       f"baseline {base_name!r}: it compares nothing this claim rests on", ev)
    bq, btf = records.base
    if bq is None or bq.leg != base_name:
        return missing(f"the baseline {base_name!r} has no harness record of {eval_id!r} "
                       f"({'quality/' + records.base_file!r}): the baseline score {qe.baseline_score!r} rests on nothing", ev)
    bev = [btf.evidence(run, btf.key_line("score"))] if btf else []
    if not bq.completed or bq.n < spec.min_n or bq.eval_id != eval_id or qe.eval_id != eval_id:
        return missing(f"the baseline's {eval_id!r} record is incomplete or of another eval (completed={bq.completed},"
                       f" n={bq.n}, eval {bq.eval_id!r})", bev)
    if not math.isfinite(bq.score) or bq.score < 0 or (bounded and bq.score > 1):
        return GateResult(findings=[finding("EVIDENCE_CORRUPT", "FAIL", f"the baseline's {eval_id!r} record holds an "
                                            f"impossible score {bq.score!r}", evidence=bev, action="eject",
                                            gate="quality")])
    dc, db = items_digest(qe), items_digest(bq)
    if dc is None or db is None or dc != db or (spec.items_sha256 is not None and dc != spec.items_sha256) \
            or qe.n != bq.n:
        return missing(f"the legs' {eval_id!r} results are not on one registered item set (candidate items "
                       f"{dc!r}, n={qe.n}; baseline items {db!r}, n={bq.n}; registered {spec.items_sha256!r})", ev + bev)
    differ = quality_conditions_differ(qe, bq)
    if differ:
        return missing(f"the legs' {eval_id!r} results were taken under different conditions: "
                       + "; ".join(f"{k} {c!r} in the candidate's, {b!r} in the baseline's" for k, c, b in differ[:5])
                       + " (the evidence model's conditions and identities of a quality record)", ev + bev)
    if qe.baseline_score is not None and abs(qe.baseline_score - bq.score) > BASELINE_SCORE_TOLERANCE:
        return missing(f"the candidate's record says the baseline scored {qe.baseline_score!r}; the baseline's own "
                       f"record says {bq.score!r}: the stated comparison is not the harness's", ev + bev)
    base_score = bq.score
    drop = (base_score - qe.score) if spec.higher_is_better else (
        (qe.score - base_score) / base_score if base_score else float("inf"))
    if drop > spec.max_drop:
        return GateResult(findings=[finding(
            "QUALITY_REGRESSION", "FAIL", f"{eval_id}: candidate {qe.score:.4g} vs baseline {base_score:.4g} (drop "
            f"{drop:.4g} > {spec.max_drop})", measured=round(drop, 6), threshold=spec.max_drop, evidence=ev + bev,
            action="eject", gate="quality")])
    return GateResult()


def quality_conditions_differ(cand: QualityEval, base: QualityEval) -> list[tuple[str, object, object]]:
    """The fields both quality records state that the evidence model calls a condition or an identity of the
    eval, where they differ (the item set and the eval id are judged above): (field, candidate's, baseline's)."""
    model = evidence_model()
    c = {**cand.model_dump(exclude_unset=True), **(cand.model_extra or {})}
    b = {**base.model_dump(exclude_unset=True), **(base.model_extra or {})}
    out = []
    for key in sorted(set(c) & set(b)):
        found = model.role_of("quality_eval", key)
        if found is not None and found.role in ("condition", "identity") and c[key] != b[key] \
                and key not in ("eval_id", *ITEMS_DIGEST_FIELDS):
            out.append((key, c[key], b[key]))
    return out


def check_spec_decode_documented(claim: Claim, detected_spec: bool, raw_signal: bool) -> GateResult[None]:
    """Speculative decoding must document its draft and acceptance. When the raw carries the acceptance
    (``accept_length``, engagement/acceptance lines in the log) the auditor reads it there, so missing
    paperwork is INFO; without any raw signal it is a FLAG (the method may not even have run)."""
    if claim.mechanism.name != "speculative_decoding" and not detected_spec:
        return GateResult()
    missing = [f for f in ("draft_model_id", "acceptance_rate") if getattr(claim.mechanism, f) is None]
    if not missing:
        return GateResult()
    if raw_signal:
        return GateResult(findings=[finding("EVIDENCE_MISSING", "INFO", f"speculative decoding without {missing!r} in "
                                            "the claim; the raw acceptance signal is read instead", gate="quality")])
    return GateResult(findings=[finding("EVIDENCE_MISSING", "FLAG", f"speculative decoding without {missing!r} and no "
                                        "raw acceptance signal", action="flag", gate="quality")])


def check_output_length(run: Path, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
    """Truncation or early EOS shows as a shift in output lengths; tok/s then measures something else."""
    findings = Findings()
    b = [r.mean_output_len for r in base.reps if r.n_ok]
    c = [r.mean_output_len for r in cand.reps if r.n_ok]
    if not b or not c:
        return GateResult(findings.items, [])
    mb, mc = float(np.median(b)), float(np.median(c))
    if mb <= 0:
        return GateResult(findings.items, [])
    shift = (mc / mb - 1.0) * 100.0
    if abs(shift) > OUTPUT_LENGTH_SHIFT_PCT:
        findings.add("OUTPUT_LENGTH_SHIFT", "FAIL", f"mean output length moved {shift:+.1f}% ({mb:.1f} -> {mc:.1f} "
                     "tokens): truncation or early EOS, so the legs did different work",
                     measured=round(shift, 3), threshold=OUTPUT_LENGTH_SHIFT_PCT,
                     evidence=[line_evidence(run, cand.reps[0].ref)], action="eject", gate="output_length")
    return GateResult(findings.items, [])


def server_flag(info: dict[str, Any] | None, key: str) -> bool:
    """Truthy knob value in server_info ("off", "false", "none", 0 are off)."""
    if not info:
        return False
    value = flatten(info).get(key)
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "off", "false", "none", "no", "disabled")
    return bool(value)
