"""Lever class (A: kernel/implementation, B: orthogonal serving lever), engagement, and raw signals.

The class is judged from the server_info diff *and* from raw signals, because a diff can hide a lever
(e.g. speculative decoding switched on by a default) while the raw cannot: a non-null
``accept_length``, a speculative method's engagement or acceptance lines in ``server.log`` (the embedded
target's ``ENGAGED prompt_lookup``/``prompt_lookup rid=…`` lines, sglang's ``accept len:`` decode lines,
vLLM's ``SpecDecoding metrics:``), a response cache's engagement or hits, a kernel override's
engagement. A signal only the candidate shows is a lever of the change; one the claim does not declare
is a second, undisclosed difference between the legs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from perfwarden.auditor import registry
from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import Findings, GateResult, finding
from perfwarden.auditor.gates.conditions import declared_keys, flatten
from perfwarden.auditor.model import mechanisms, roles
from perfwarden.auditor.serverlog import (NOT_ENGAGED_RX, RESPONSE_CACHE_HIT,  # noqa: F401
                                          SIGNAL_PATTERNS, LogSignal)  # re-exported for their importers
from perfwarden.formats.records import Claim, EvidenceRef, LeverClass

Signal = LogSignal
"""One raw sign that a mechanism ran in a leg (the log's are found by ``serverlog.scan_server_log``)."""

FAMILY_CLASS: dict[str, str] = {"spec_decode": "B", "response_cache": "B", "kernel_override": "A"}
_DRAFT_WIDTH_KEYS = ("num_speculative_tokens", "speculative_num_draft_tokens", "prompt_lookup_num_tokens",
                     "speculative_config.num_speculative_tokens")
ACCEPTANCE_TOLERANCE = 0.05
"""A claimed acceptance rate may differ from the raw one by this much (absolute)."""


def raw_signals(leg: LegEvidence) -> list[Signal]:
    """Every mechanism the leg's raw says ran: log lines (the first ``serverlog.MAX_SIGNALS`` of each
    kind), a non-null ``accept_length`` and the server's own counters (the evidence model's
    ``mechanisms``, ``auditor/model/mechanisms.py``)."""
    out: list[Signal] = list(leg.log.signals) if leg.log else []
    accepts = [r for r in leg.reps if r.accept_length is not None]
    if accepts:
        out.append(Signal("spec_decode", 0, f"accept_length={accepts[0].accept_length!r} in rep {accepts[0].rep}"))
    return out + mechanisms.counter_signals(leg)


def candidate_only(base: LegEvidence, cand: LegEvidence) -> list[Signal]:
    """Signals of the candidate whose family (and, for overrides, op) the baseline never shows."""
    seen = {(s.family, s.detail) for s in raw_signals(base)}
    seen_families = {f for f, _ in seen}
    out = []
    for s in raw_signals(cand):
        if s.family == "kernel_override" and s.detail is not None:
            if (s.family, s.detail) not in seen:
                out.append(s)
        elif s.family not in seen_families:
            out.append(s)
    return out


def signal_evidence(run: Path, leg: LegEvidence, signal: Signal) -> list[EvidenceRef]:
    if signal.line and leg.log is not None:
        return [leg.log.evidence(run, signal.line)]
    rep = next((r for r in leg.reps if r.accept_length is not None), None)
    return [line_evidence(run, rep.ref)] if rep is not None else []


def detect_lever(diff: dict[str, list[Any]], base: LegEvidence, cand: LegEvidence
                 ) -> tuple[LeverClass | None, list[str]]:
    """Detected lever class and the signals it rests on. Any B signal makes the change class B; an
    unknown knob contributes no class (it is classified by nobody)."""
    signals: list[str] = []
    classes: set[str] = set()
    for key in diff:
        if roles.is_inert(key):
            continue
        cls, why = registry.lever_class(key)
        if cls:
            classes.add(cls)
            signals.append(f"diff {key!r}: class {cls} ({why})")
        elif not roles.is_known(key):
            signals.append(f"diff {key!r}: unclassified knob (no class)")
    for s in candidate_only(base, cand):
        cls = FAMILY_CLASS[s.family]
        classes.add(cls)
        where = f"server.log line {s.line}" if s.line else "bench reps"
        signals.append(f"raw: {s.family.replace('_', ' ')} in the candidate ({where}: {s.text[:80]!r})")
    if "B" in classes:
        return "B", signals
    if "A" in classes:
        return "A", signals
    return None, signals


def _declares(claim: Claim, signal: Signal) -> bool:
    """Whether the claim discloses the mechanism a candidate-only signal shows."""
    declared = declared_keys(claim)
    if signal.family == "spec_decode":
        return claim.mechanism.name == "speculative_decoding" or any(registry.is_spec_decode_key(k) for k in declared)
    if signal.family == "response_cache":
        return any(registry.is_response_cache_key(k) for k in declared)
    # Declaring one op's override does not declare another's: only the named ops, or an explicit
    # config key for that op (or for every override), cover an engaged override.
    ops = {o.lower() for o in (claim.lever.kernel_ops if claim.lever else [])}
    keys = set(claim.lever.config_keys if claim.lever else [])
    if signal.detail is None:
        return bool(ops) or bool(keys & {"op_overrides", "kernel_patches"})
    return signal.detail in ops or bool(keys & {"op_overrides", "kernel_patches", f"op_overrides.{signal.detail}"})


def check_undeclared_signals(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
    """A mechanism only the candidate's raw shows, which the claim does not declare, is a second
    difference between the legs: a confound (FAIL), whatever the server_info diff says."""
    out = []
    reported: set[tuple[str, str | None]] = set()
    for s in candidate_only(base, cand):
        if _declares(claim, s) or (s.family, s.detail) in reported:
            continue
        reported.add((s.family, s.detail))
        what = {"spec_decode": "speculative decoding", "response_cache": "a response cache",
                "kernel_override": f"kernel override {s.detail!r}" if s.detail else "a kernel override"}[s.family]
        out.append(finding(
            "CONDITIONS_DIFFER", "FAIL", f"the candidate's raw shows {what} ran ({s.text[:100]!r}) and the baseline's "
            "does not, but the claim does not declare it: an undisclosed lever beside the declared change",
            measured=s.family, threshold="only the declared change differs", evidence=signal_evidence(run, cand, s),
            action="eject", gate="lever"))
    return GateResult(findings=out)


def check_orthogonal(claim: Claim, detected: str | None, signals: list[str], cand: LegEvidence,
                     run: Path) -> GateResult[None]:
    """A class-B lever presented as a kernel/implementation win is reclassified (headline downgraded)."""
    findings = Findings()
    declared = claim.lever.lever_class if claim.lever else None
    presented_as_kernel = declared == "A" or claim.headline.kind in ("kernel", "isolated")
    if detected == "B" and presented_as_kernel:
        evidence = [line_evidence(run, r.ref) for r in cand.reps[:1] if r.accept_length is not None]
        findings.add("ORTHOGONAL_LEVER", "FLAG", "the change is a class-B serving lever ("
                     + "; ".join(s for s in signals if "class B" in s or s.startswith("raw"))
                     + ") presented as a kernel/implementation win", measured="B", threshold=declared or "A",
                     evidence=evidence, action="downgrade_headline", gate="lever")
    return GateResult(findings.items, [])


def raw_acceptance_rate(leg: LegEvidence) -> tuple[float | None, int | None]:
    """Accepted / drafted draft tokens from the log (embedded or vLLM counts, else sglang's rates);
    returns the rate and the log line it starts at."""
    return leg.log.acceptance_rate() if leg.log else (None, None)


def draft_width(info: dict[str, Any] | None) -> int | None:
    """Draft tokens per verify step the server reports (bounds what an accept length implies)."""
    flat = flatten(info or {})
    for key in _DRAFT_WIDTH_KEYS:
        value = flat.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_acceptance_rate(run: Path, claim: Claim, cand: LegEvidence) -> GateResult[None]:
    """A claimed ``acceptance_rate`` (accepted / drafted tokens) must match the raw: the log's counts
    when it has them, else what the raw ``accept_length`` implies (``L - 1 <= rate * draft width``)."""
    claimed = claim.mechanism.acceptance_rate
    if claimed is None:
        return GateResult()
    rate, line = raw_acceptance_rate(cand)
    accepts = [r.accept_length for r in cand.reps if r.accept_length is not None]
    length = float(np.median(accepts)) if accepts else None

    def mismatch(message: str, raw: Any, evidence: list[EvidenceRef]) -> GateResult[None]:
        return GateResult(findings=[finding("REPORTED_MISMATCH", "FLAG", message, measured=raw, threshold=claimed,
                                            evidence=evidence, action="downgrade_headline", gate="lever")])

    log_ev = [cand.log.evidence(run, line)] if line and cand.log else []
    rep_ev = [line_evidence(run, r.ref) for r in cand.reps[:1]]
    if claimed > 1.0:
        if length is not None and abs(claimed - length) <= 0.05 * length:
            return GateResult(findings=[finding("REPORTED_MISMATCH", "INFO", f"acceptance_rate {claimed!r} is the raw "
                                                f"accept length ({length:.3g}), not a rate", gate="lever")])
        return mismatch(f"acceptance_rate {claimed!r} is not a fraction of drafted tokens", rate or length, rep_ev)
    if rate is not None:
        if abs(claimed - rate) > ACCEPTANCE_TOLERANCE:
            return mismatch(f"claimed acceptance rate {claimed:.3g}; the server log gives {rate:.3g} (accepted / "
                            "drafted tokens)", round(rate, 4), log_ev)
        return GateResult()
    width = draft_width(cand.server_info)
    if length is not None and width is not None:
        floor = (length - 1.0) / width
        if claimed < floor - ACCEPTANCE_TOLERANCE or (length <= 1.0 and claimed > ACCEPTANCE_TOLERANCE):
            return mismatch(f"claimed acceptance rate {claimed:.3g}, but an accept length of {length:.3g} with "
                            f"{width} draft tokens per step needs at least {floor:.3g}", round(floor, 4), rep_ev)
        return GateResult()
    return GateResult(not_checked=["acceptance rate: the raw has no acceptance counts to check the claimed rate"])


def check_engagement(claim: Claim, cand: LegEvidence, run: Path) -> GateResult[None]:
    """Every declared kernel op must show an engagement line in the candidate's server log."""
    findings = Findings()
    ops = claim.lever.kernel_ops if claim.lever else []
    if not ops:
        return GateResult(findings.items, [])
    if cand.log is None:
        findings.add("NOT_ENGAGED", "FAIL", f"no server log for {cand.name!r}: engagement of {ops!r} is unproven",
                     action="eject", gate="engagement")
        return GateResult(findings.items, [])
    for op in ops:
        # ``log.engaged``/``log.refused`` hold the ops the loader was given (the claim's): another op is
        # a KeyError, i.e. this gate fails visibly instead of calling the op unengaged.
        if cand.log.engaged[op] is None:
            refusal = cand.log.refused[op]
            findings.add("NOT_ENGAGED", "FAIL", f"the candidate server log never says override {op!r} engaged",
                         measured="no engagement line", threshold=f"a line naming {op!r} and 'engaged'",
                         evidence=[cand.log.evidence(run, refusal)], action="eject", gate="engagement")
    return GateResult(findings.items, [])
