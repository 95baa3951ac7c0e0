"""Unknown knobs fail closed.

A changed ``server_info`` key that ``levers.json`` does not know is *unclassified*: the producer's word
about its class or losslessness counts for nothing. Its change must show exact greedy parity or pass a
registered quality eval (``lossy_reasons`` makes the correctness gates demand one when parity is not
exact), and the verdict stays at least FLAG until the registry knows the knob.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfwarden.auditor.evidence import LegEvidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates.conditions import declared_keys, is_declared, key_evidence
from perfwarden.auditor.model import roles
from perfwarden.formats.records import Claim


def unknown_knobs(diff: dict[str, list[Any]]) -> list[str]:
    """Keys of the server_info diff the registry cannot classify, in diff order."""
    return [key for key in diff if not roles.is_known(key)]


def check_unknown_knobs(run: Path, claim: Claim, diff: dict[str, list[Any]], base: LegEvidence,
                        cand: LegEvidence) -> GateResult[list[str]]:
    """One UNKNOWN_KNOB FLAG per unclassified key that differs between the legs (declared or not: an
    undeclared one is also a confound, which the conditions gate FAILs)."""
    declared = declared_keys(claim)
    out = []
    for key in unknown_knobs(diff):
        before, after = diff[key]
        how = "declared" if is_declared(key, declared) else "undeclared"
        out.append(finding(
            "UNKNOWN_KNOB", "FLAG", f"{how} knob {key!r} ({before!r} -> {after!r}) is not in the lever registry: "
            "its class and losslessness are unknown, so the producer's are not taken; it needs exact parity or a "
            "passing registered quality eval", measured={"key": key, "values": [before, after]},
            threshold="a knob levers.json classifies", evidence=key_evidence(run, base, key) + key_evidence(run, cand, key),
            action="flag", gate="knobs"))
    return GateResult(findings=out, value=unknown_knobs(diff))


def exact_parity(base: LegEvidence, cand: LegEvidence) -> bool:
    """Every prompt both parity dumps share has identical text (and there is at least one)."""
    if not base.outputs or not cand.outputs:
        return False
    by_id = {str(o.prompt_id): o.text for _, o in base.outputs}
    shared = [(by_id[str(o.prompt_id)], o.text) for _, o in cand.outputs if str(o.prompt_id) in by_id]
    return bool(shared) and all(a == b for a, b in shared)


def lossy_reasons(unknown: list[str], base: LegEvidence, cand: LegEvidence) -> list[str]:
    """Unknown knobs without exact parity are treated as lossy: judged by a registered quality eval."""
    if not unknown or exact_parity(base, cand):
        return []
    return [f"unclassified knob {key!r} without exact parity" for key in unknown]
