"""Correctness: parity against the true baseline, a coherent reference, quality evals for lossy
mechanisms, and an unchanged output-length distribution."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from perfwarden.agents.auditor import registry
from perfwarden.agents.auditor.coherence import coherence_score
from perfwarden.agents.auditor.evidence import LegEvidence, line_evidence
from perfwarden.agents.auditor.findings import Findings
from perfwarden.agents.auditor.gates.conditions import flatten
from perfwarden.harness.records import Claim

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
    lossless_values = registry.load("mechanisms.json")["lossy_config_keys"]
    for key, (vb, vc) in diff.items():
        top = registry.top_key(key)
        if top in lossless_values and vc not in lossless_values[top] and vc != vb:
            out.append(f"{key}={vc!r}")
    return out


def check_reference_coherence(run: Path, ref: LegEvidence, findings: Findings) -> bool | None:
    """The reference outputs must be coherent text, or parity against them proves nothing."""
    if not ref.outputs:
        return None
    texts = [o.text for _, o in ref.outputs]
    result = coherence_score(texts)
    if not result.is_coherent:
        scored = [(i, s.score) for i, s in enumerate(result.per_text) if s.score is not None]
        worst = min(scored, key=lambda kv: kv[1])[0] if scored else 0
        score = "unjudgeable (too little text)" if result.score is None else f"{result.score:.3f}"
        findings.add("NONCOHERENT_REFERENCE", "FAIL", f"reference outputs of {ref.name!r} score {score} "
                     f"on the coherence check (threshold {result.threshold:.3f}): parity against them is "
                     "unverifiable", measured=None if result.score is None else round(result.score, 4),
                     threshold=result.threshold,
                     evidence=[line_evidence(run, ref.outputs[worst][0])], action="eject", gate="coherence")
        return False
    return True


def check_parity(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence, lossy: bool,
                 findings: Findings) -> str:
    """Greedy parity vs the true baseline; returns the correctness status."""
    if claim.correctness.parity == "none" and lossy:
        return "not_applicable"
    if base.outputs is None or cand.outputs is None:
        missing = [leg.name for leg in (base, cand) if leg.outputs is None]
        findings.add("EVIDENCE_MISSING", "FAIL" if not lossy else "FLAG",
                     f"no parity dump (outputs.jsonl) for {missing!r}", gate="parity")
        return "unverifiable"
    coherent = check_reference_coherence(run, base, findings)
    if coherent is False:
        return "unverifiable"
    by_id = {str(o.prompt_id): (ref, o) for ref, o in base.outputs}
    pairs = [(by_id[str(o.prompt_id)], (ref, o)) for ref, o in cand.outputs if str(o.prompt_id) in by_id]
    if not pairs:
        findings.add("EVIDENCE_MISSING", "FAIL", "baseline and candidate parity dumps share no prompt id",
                     gate="parity")
        return "unverifiable"
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
        return "verified"
    if identical < PARITY_MIN_IDENTICAL:
        findings.add("PARITY_MISMATCH", "FAIL", f"only {len(pairs) - len(mismatched)}/{len(pairs)} greedy outputs are "
                     "identical to the true baseline's for a change declared lossless",
                     measured=round(identical, 4), threshold=PARITY_MIN_IDENTICAL,
                     evidence=[line_evidence(run, r) for r in mismatched[:3]], action="eject", gate="parity")
        return "failed"
    if mismatched:
        findings.add("PARITY_MISMATCH", "INFO", f"{len(mismatched)}/{len(pairs)} outputs differ (within the "
                     f"{PARITY_MIN_IDENTICAL:.0%} allowance)", measured=round(identical, 4),
                     threshold=PARITY_MIN_IDENTICAL, evidence=[line_evidence(run, r) for r in mismatched[:3]],
                     gate="parity")
    return "verified"


def check_quality(run: Path, claim: Claim, loader, cand_name: str, lossy: list[str], findings: Findings) -> None:
    """Lossy changes need a completed, registered quality eval on the candidate, no worse than baseline."""
    if not lossy:
        return
    severity = "FAIL" if claim.mechanism.support == "supported" else "FLAG"
    eval_id = claim.correctness.quality_eval_id
    registered = registry.quality_evals()
    why = ", ".join(lossy)
    if not eval_id:
        findings.add("QUALITY_EVAL_MISSING", severity, f"lossy change ({why}) claimed "
                     f"{claim.mechanism.support!r} without a quality eval", threshold="a completed registered eval",
                     action="eject", gate="quality")
        return
    if eval_id not in registered:
        findings.add("QUALITY_EVAL_MISSING", severity, f"quality eval {eval_id!r} is not registered "
                     f"(registered: {sorted(registered)!r})", action="eject", gate="quality")
        return
    qe, tf = loader.quality(eval_id, cand_name)
    if qe is None:
        findings.add("QUALITY_EVAL_MISSING", severity, f"quality eval {eval_id!r} has no result file in the run",
                     action="eject", gate="quality")
        return
    spec = registered[eval_id]
    ev = [tf.evidence(run, tf.key_line("score"))] if tf else []
    bounded = spec.get("metric") in ("exact_match", "accuracy")
    values = [v for v in (qe.score, qe.baseline_score) if v is not None]
    if any(not math.isfinite(v) or v < 0 or (bounded and v > 1) for v in values) or qe.n < 0:
        findings.add("EVIDENCE_CORRUPT", "FAIL", f"quality eval {eval_id!r} holds impossible values "
                     f"(score {qe.score!r}, baseline {qe.baseline_score!r}, n {qe.n!r})", evidence=ev,
                     action="eject", gate="quality")
        return
    if not qe.completed or qe.n < spec.get("min_n", 1) or qe.leg != cand_name:
        findings.add("QUALITY_EVAL_MISSING", severity, f"quality eval {eval_id!r} is incomplete or for another leg "
                     f"(completed={qe.completed}, n={qe.n}, leg={qe.leg!r}, need n>={spec.get('min_n', 1)} on "
                     f"{cand_name!r})", evidence=ev, action="eject", gate="quality")
        return
    if qe.baseline_score is None:
        findings.add("QUALITY_EVAL_MISSING", severity, f"quality eval {eval_id!r} has no baseline score to compare",
                     evidence=ev, action="eject", gate="quality")
        return
    drop = (qe.baseline_score - qe.score) if spec.get("higher_is_better", True) else (
        (qe.score - qe.baseline_score) / qe.baseline_score if qe.baseline_score else float("inf"))
    if drop > spec.get("max_drop", 0.0):
        findings.add("QUALITY_REGRESSION", "FAIL", f"{eval_id}: candidate {qe.score:.4g} vs baseline "
                     f"{qe.baseline_score:.4g} (drop {drop:.4g} > {spec['max_drop']})", measured=round(drop, 6),
                     threshold=spec["max_drop"], evidence=ev, action="eject", gate="quality")


def check_spec_decode_documented(claim: Claim, detected_spec: bool, findings: Findings) -> None:
    if claim.mechanism.name != "speculative_decoding" and not detected_spec:
        return
    missing = [f for f in ("draft_model_id", "acceptance_rate") if getattr(claim.mechanism, f) is None]
    if missing:
        findings.add("EVIDENCE_MISSING", "FLAG", f"speculative decoding without {missing!r}", action="flag",
                     gate="quality")


def check_output_length(run: Path, base: LegEvidence, cand: LegEvidence, findings: Findings) -> None:
    """Truncation or early EOS shows as a shift in output lengths; tok/s then measures something else."""
    b = [r.mean_output_len for r in base.reps if r.n_ok]
    c = [r.mean_output_len for r in cand.reps if r.n_ok]
    if not b or not c:
        return
    mb, mc = float(np.median(b)), float(np.median(c))
    if mb <= 0:
        return
    shift = (mc / mb - 1.0) * 100.0
    if abs(shift) > OUTPUT_LENGTH_SHIFT_PCT:
        findings.add("OUTPUT_LENGTH_SHIFT", "FAIL", f"mean output length moved {shift:+.1f}% ({mb:.1f} -> {mc:.1f} "
                     "tokens): truncation or early EOS, so the legs did different work",
                     measured=round(shift, 3), threshold=OUTPUT_LENGTH_SHIFT_PCT,
                     evidence=[line_evidence(run, cand.reps[0].ref)], action="eject", gate="output_length")


def server_flag(info: dict | None, key: str) -> bool:
    """Truthy knob value in server_info ("off", "false", "none", 0 are off)."""
    if not info:
        return False
    value = flatten(info).get(key)
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "off", "false", "none", "no", "disabled")
    return bool(value)
