"""Every server_info key is one the leg's target reports. A pure gate.

The conditions gate judges keys whose values *differ*; a key the registry does not know, held equal in
both legs, said nothing, so a producer could add any field (one the engine honours that the registry
does not know, a confusable or case variant of a known key, a key of another target) and pass.
``auditor/data/target_keys.json`` lists what each target's server_info holds; any other key in a leg's
``server_info.json`` or in the server_info copy of its bench lines is UNKNOWN_KNOB (FLAG: like a
changed unclassified knob, the auditor cannot say what it does, so the verdict cannot PASS), equal or
not. A leg's target is what run.json names; a run naming no listed target cannot attribute any key,
which is the same finding for every leg that reports keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from perfwarden.auditor import registry
from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates.conditions import flatten, key_evidence
from perfwarden.formats.records import EvidenceRef, Finding

GATE = "target_keys"
SHOWN = 8
"""Keys named in one finding's message (all of them, up to 40, in ``measured``)."""


def leg_keys(run: Path, leg: LegEvidence) -> dict[str, EvidenceRef | None]:
    """Flattened key -> where it is stated, over server_info.json and every bench line's server_info
    (the file's own line when it states the key, else the first bench line that does)."""
    out: dict[str, EvidenceRef | None] = {}
    if leg.server_info is not None:
        out.update({key: None for key in flatten(leg.server_info)})
    seen: set[str] = set()
    for rep in leg.reps:
        if not isinstance(rep.server_info, dict):
            continue
        digest = json.dumps(rep.server_info, sort_keys=True, default=str)
        if digest in seen:
            continue
        seen.add(digest)
        for key in flatten(rep.server_info):
            out.setdefault(key, line_evidence(run, rep.ref))
    return out


def _evidence(run: Path, leg: LegEvidence, key: str, where: EvidenceRef | None) -> list[EvidenceRef]:
    return [where] if where is not None else key_evidence(run, leg, key)


def _finding(leg: LegEvidence, keys: list[str], why: str, evidence: list[EvidenceRef]) -> Finding:
    shown = ", ".join(map(repr, keys[:SHOWN])) + (f" (+{len(keys) - SHOWN} more)" if len(keys) > SHOWN else "")
    return finding("UNKNOWN_KNOB", "FLAG", f"leg {leg.name!r}: server_info key(s) {shown} {why}; equal in both legs "
                   "or not, a key the registry cannot attribute is not inert by default",
                   measured={"leg": leg.name, "keys": keys[:40]}, threshold="keys target_keys.json lists for the "
                   "leg's target", evidence=evidence, action="flag", gate=GATE)


def unattributable(target: str | None, leg: LegEvidence) -> str | None:
    """Why ``leg``'s target cannot be told (None when it can): run.json names no listed target, or the
    engine the harness recorded launching is not one of that target's."""
    if target is None:
        return "cannot be attributed: run.json names no target"
    if target not in registry.targets():
        return f"cannot be attributed: run.json names target {target!r}, which the registry does not list"
    conditions = (leg.server_info or {}).get("process_conditions")
    engine = conditions.get("engine") if isinstance(conditions, dict) else None
    if isinstance(engine, str) and registry.target_engines(target) and engine not in registry.target_engines(target):
        return (f"cannot be attributed: run.json names target {target!r} but the harness recorded launching "
                f"engine {engine!r} (process_conditions.engine)")
    return None


def check_target_keys(run: Path, target: str | None, legs: list[LegEvidence],
                      reported: Iterable[str] = ()) -> GateResult[None]:
    """One UNKNOWN_KNOB FLAG per leg whose server_info holds keys its target does not report; ``reported``:
    keys the knobs gate already flagged (a changed unclassified knob), not named twice."""
    already = set(reported)
    findings = []
    for leg in legs:
        keys = leg_keys(run, leg)
        why = unattributable(target, leg)
        if why is None and target is not None:
            stray = [k for k in sorted(keys) if k not in already and not registry.target_reports(target, k)]
            why = f"are not keys the {target!r} target reports"
        else:
            stray = sorted(keys)
        if stray and why:
            findings.append(_finding(leg, stray, why, _evidence(run, leg, stray[0], keys[stray[0]])))
    return GateResult(findings=findings)
