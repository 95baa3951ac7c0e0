"""Lever class (A: kernel/implementation, B: orthogonal serving lever) and engagement.

The class is judged from the server_info diff *and* from raw signals, because a diff can hide a lever
(e.g. speculative decoding switched on by a default) while the raw cannot: a non-null ``accept_length``
means speculative decoding ran; response-cache hits in the server log mean caching.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from perfwarden.agents.auditor import registry
from perfwarden.agents.auditor.evidence import LegEvidence, line_evidence
from perfwarden.agents.auditor.findings import Findings
from perfwarden.harness.records import Claim

RESPONSE_CACHE_HIT = re.compile(r"response[ _-]?cache[^\n]*\bhit\b", re.IGNORECASE)
NOT_ENGAGED_RX = re.compile(r"not engaged|engaged\s*[=:]\s*(0|false|no)\b|\b0 calls\b", re.IGNORECASE)


def detect_lever(diff: dict[str, list[Any]], base: LegEvidence, cand: LegEvidence) -> tuple[str | None, list[str]]:
    """Detected lever class and the signals it rests on. Any B signal makes the change class B."""
    signals: list[str] = []
    classes: set[str] = set()
    for key in diff:
        if registry.is_inert(key):
            continue
        cls, why = registry.lever_class(key)
        if cls:
            classes.add(cls)
            signals.append(f"diff {key!r}: class {cls} ({why})")
    cand_accept = [r.accept_length for r in cand.reps if r.accept_length is not None]
    base_accept = [r.accept_length for r in base.reps if r.accept_length is not None]
    if cand_accept and not base_accept:
        classes.add("B")
        signals.append(f"raw: accept_length={cand_accept[0]!r} in the candidate reps (speculative decoding)")
    if cand.log is not None and any(RESPONSE_CACHE_HIT.search(t) for t in cand.log.lines):
        classes.add("B")
        signals.append("raw: response-cache hits in the candidate server log (caching)")
    if "B" in classes:
        return "B", signals
    if "A" in classes:
        return "A", signals
    return None, signals


def check_orthogonal(claim: Claim, detected: str | None, signals: list[str], cand: LegEvidence, run: Path,
                     findings: Findings) -> None:
    """A class-B lever presented as a kernel/implementation win is reclassified (headline downgraded)."""
    declared = claim.lever.lever_class if claim.lever else None
    presented_as_kernel = declared == "A" or claim.headline.kind in ("kernel", "isolated")
    if detected == "B" and presented_as_kernel:
        evidence = [line_evidence(run, r.ref) for r in cand.reps[:1] if r.accept_length is not None]
        findings.add("ORTHOGONAL_LEVER", "FLAG", "the change is a class-B serving lever ("
                     + "; ".join(s for s in signals if "class B" in s or s.startswith("raw"))
                     + ") presented as a kernel/implementation win", measured="B", threshold=declared or "A",
                     evidence=evidence, action="downgrade_headline", gate="lever")


def _engaged(op: str, lines: list[str]) -> int | None:
    rx = re.compile(rf"\b{re.escape(op)}\b", re.IGNORECASE)
    for i, text in enumerate(lines, 1):
        if rx.search(text) and re.search(r"\bengaged\b", text, re.IGNORECASE) and not NOT_ENGAGED_RX.search(text):
            return i
    return None


def check_engagement(claim: Claim, cand: LegEvidence, run: Path, findings: Findings) -> None:
    """Every declared kernel op must show an engagement line in the candidate's server log."""
    ops = claim.lever.kernel_ops if claim.lever else []
    if not ops:
        return
    if cand.log is None:
        findings.add("NOT_ENGAGED", "FAIL", f"no server log for {cand.name!r}: engagement of {ops!r} is unproven",
                     action="eject", gate="engagement")
        return
    for op in ops:
        if _engaged(op, cand.log.lines) is None:
            refusal = next((i for i, t in enumerate(cand.log.lines, 1)
                            if op.lower() in t.lower() and NOT_ENGAGED_RX.search(t)), None)
            findings.add("NOT_ENGAGED", "FAIL", f"the candidate server log never says override {op!r} engaged",
                         measured="no engagement line", threshold=f"a line naming {op!r} and 'engaged'",
                         evidence=[cand.log.evidence(run, refusal)], action="eject", gate="engagement")
