"""Same conditions: only the declared change may differ between the legs' conditions, and no identity.

Every copy of a leg's conditions and identities (``server_info.json``, each bench line's copy, the server
log's configuration, engagement and model lines, ``leg.json``'s overlay) is gathered and compared by the
evidence model's engine (``auditor/model/statements.py``): inside one leg a copy that disagrees with
``server_info.json`` is a misreport (CONDITIONS_MISREPORTED, FAIL); between legs the union of every copy
counts. This gate decides each difference: an **identity** (the model, its weights and tokenizer, the
server's generation defaults, the engine and its version, the hardware) is never the declared change --
two of them are two experiments (CONDITIONS_DIFFER, FAIL) -- unless it is a report of a declared knob (a
``device`` change reports another device name); a **condition** may differ only where it is declared, a
report of how the declared knob was applied, or a derived quantity the raw shows inert. What the model
calls bookkeeping (proven inert) or a measurement (the server's counters) never counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfwarden.auditor import registry
from perfwarden.auditor.evidence import LegEvidence
from perfwarden.auditor.findings import Findings, GateResult
from perfwarden.auditor.model import roles, statements
from perfwarden.auditor.model.statements import (MISSING as _MISSING, ConditionCopy, diff_server_info, flatten,
                                                 key_evidence, leg_copies, union_diff)
from perfwarden.auditor.model.statements import same as _same
from perfwarden.formats.records import Claim

check_condition_copies = statements.check_copies

__all__ = ["ConditionCopy", "check_condition_copies", "check_conditions", "check_reported_conditions", "declared_keys",
           "derived_is_inert", "diff_server_info", "flatten", "is_declared", "key_evidence", "leg_copies", "union_diff"]
"""What the gates import from here (the copies and the diff live in ``auditor/model/statements.py``)."""


def declared_keys(claim: Claim) -> set[str]:
    """Keys the declared change is allowed to alter."""
    lever = claim.lever
    if lever is None:
        return set()
    keys = set(lever.config_keys)
    if lever.kernel_ops:
        keys |= {"op_overrides", "kernel_patches"} | {f"op_overrides.{op}" for op in lever.kernel_ops}
    return keys


def is_declared(key: str, declared: set[str]) -> bool:
    return key in declared or registry.top_key(key) in declared or any(
        key.startswith(d + ".") for d in declared)


def derived_is_inert(key: str, values: list[Any], declared: set[str], base: LegEvidence,
                     cand: LegEvidence) -> tuple[bool, str]:
    """A derived key (e.g. KV pool size) is accepted only if the declared change causes it and the
    logs prove usage never approached the smaller budget."""
    rule = registry.levers()["derived"].get(registry.top_key(key))
    if rule is None:
        return False, "not a derived key"
    if not any(is_declared(k, declared) for k in rule["consequence_of"]):
        return False, f"{key!r} changes only as a consequence of {rule['consequence_of']!r}, none declared"
    try:
        budgets = [float(v) for v in values]
    except (TypeError, ValueError):
        return False, f"{key!r} budgets are not numbers: {values!r}"
    peaks = [leg.log.usage_peaks[rule["usage_pattern"]] if leg.log else None for leg in (base, cand)]
    known = [p for p in peaks if p is not None]
    if len(known) != len(peaks):
        return False, f"no usage lines in the server logs prove {key!r} inert (unproven means confound)"
    used = [p * b if p <= 1.0 else p for p, b in zip(known, budgets)]
    limit = 0.9 * min(budgets)
    if max(used) < limit:
        return True, f"peak usage {max(used):.0f} stayed below 90% of the smaller budget {min(budgets):.0f}"
    return False, f"peak usage {max(used):.0f} approached the smaller budget {min(budgets):.0f}"


def _reports_declared(key: str, declared: set[str]) -> bool:
    """A report of how a declared knob was applied (levers.json ``reports``), not a second knob."""
    parents = registry.levers().get("reports", {}).get(registry.top_key(key), [])
    return any(is_declared(p, declared) for p in parents)


def check_conditions(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence) -> GateResult[dict[str, list[Any]]]:
    """Diff the legs' conditions and identities (server_info.json, then every other copy); an identity
    that differs, and every undeclared, non-inert condition that differs, is a confound."""
    findings = Findings()
    if base.server_info is None or cand.server_info is None:
        return GateResult(findings.items, [], {})  # the reading gate reported the missing/corrupt file (fail closed)
    diff = diff_server_info(base.server_info, cand.server_info)
    for key, values in union_diff(run, base, cand).items():
        diff.setdefault(key, values)
    declared = declared_keys(claim)
    for key, values in diff.items():
        evidence = key_evidence(run, base, key) + key_evidence(run, cand, key)
        if roles.role(key) == "identity" and not _reports_declared(key, declared):
            findings.add("CONDITIONS_DIFFER", "FAIL", f"identity {key!r} differs: baseline {values[0]!r} vs candidate "
                         f"{values[1]!r}; the model, weights, tokenizer, generation defaults, engine and hardware are "
                         "what make it one experiment, never the declared change", measured=values,
                         threshold="equal identities", evidence=evidence, action="eject", gate="conditions")
            continue
        if roles.role(key) in roles.NOT_COMPARED or is_declared(key, declared) \
                or _reports_declared(key, declared):
            continue
        inert, why = derived_is_inert(key, values, declared, base, cand)
        if inert:
            findings.add("CONDITIONS_DIFFER", "INFO", f"{key!r} differs ({values[0]!r} vs {values[1]!r}) as a "
                         f"consequence of the declared change; {why}", measured=values, evidence=evidence,
                         gate="conditions")
            continue
        findings.add("CONDITIONS_DIFFER", "FAIL", f"undeclared difference {key!r}: baseline {values[0]!r} vs "
                     f"candidate {values[1]!r} ({why if 'derived' not in why else 'a confound'})",
                     measured=values, threshold="only declared keys may differ", evidence=evidence,
                     action="eject", gate="conditions")
    for key in sorted(declared):
        if key in ("op_overrides", "kernel_patches") or key.startswith("op_overrides."):
            continue
        if not any(k == key or k.startswith(key + ".") for k in diff):
            findings.add("NOT_ENGAGED", "FLAG", f"declared change {key!r} does not differ between the legs' "
                         "server_info: the candidate may not run the change", measured="identical",
                         evidence=key_evidence(run, base, key) + key_evidence(run, cand, key),
                         action="remeasure", gate="conditions")
    return GateResult(findings.items, [], diff)


def check_reported_conditions(run: Path, claim: Claim, legs: dict[str, LegEvidence]) -> GateResult[None]:
    """A producer summary of conditions must match what each server reported."""
    findings = Findings()
    conditions = claim.reported.get("conditions") if isinstance(claim.reported, dict) else None
    if not isinstance(conditions, dict):
        return GateResult(findings.items, [])
    role_to_leg = {"baseline": claim.legs.baseline, "candidate": claim.legs.candidate,
                   "validation": claim.legs.validation}
    for key, per_leg in conditions.items():
        if not isinstance(per_leg, dict):
            continue
        for leg_name, stated in per_leg.items():
            leg_name = role_to_leg.get(leg_name) or leg_name
            leg = legs.get(leg_name)
            if leg is None or leg.server_info is None:
                continue
            actual = flatten(leg.server_info).get(key, _MISSING)
            if not _same(stated, actual):
                findings.add("CONDITIONS_MISREPORTED", "FAIL",
                             f"the summary says leg {leg_name!r} ran {key}={stated!r}, its server reported {actual!r}",
                             measured=actual, threshold=stated, evidence=key_evidence(run, leg, key),
                             action="eject", gate="conditions")
    return GateResult(findings.items, [])
