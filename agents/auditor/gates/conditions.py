"""Same conditions: only the declared change may differ between the legs' ``server_info``.

``server_info.json`` is what the running server reported about itself, not a producer's copy, so it
is the ground truth for conditions. A second difference is a confound (FAIL) unless it is an
unavoidable consequence of the declared change *and* the raw shows it inert for this measurement.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from perfwarden.agents.auditor import registry
from perfwarden.agents.auditor.evidence import LegEvidence
from perfwarden.agents.auditor.findings import Findings
from perfwarden.harness.records import Claim, EvidenceRef

_MISSING = "<absent>"


def flatten(info: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts become dotted keys; lists and scalars are leaf values."""
    flat: dict[str, Any] = {}
    for key, value in info.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def diff_server_info(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, list[Any]]:
    """Keys whose values differ: key -> [baseline, candidate] (``<absent>`` when one side lacks it)."""
    fb, fc = flatten(base), flatten(cand)
    out: dict[str, list[Any]] = {}
    for key in sorted(set(fb) | set(fc)):
        vb, vc = fb.get(key, _MISSING), fc.get(key, _MISSING)
        if vb != vc:
            out[key] = [vb, vc]
    return out


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


def _peak_usage(log_lines: list[str], pattern: str) -> float | None:
    rx = re.compile(pattern)
    peak = None
    for text in log_lines:
        m = rx.search(text)
        if m:
            try:
                value = float(m.group(1))
            except ValueError:
                continue
            peak = value if peak is None else max(peak, value)
    return peak


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
    peaks = [_peak_usage(leg.log.lines if leg.log else [], rule["usage_pattern"]) for leg in (base, cand)]
    if any(p is None for p in peaks):
        return False, f"no usage lines in the server logs prove {key!r} inert (unproven means confound)"
    used = [p * b if p <= 1.0 else p for p, b in zip(peaks, budgets)]
    limit = 0.9 * min(budgets)
    if max(used) < limit:
        return True, f"peak usage {max(used):.0f} stayed below 90% of the smaller budget {min(budgets):.0f}"
    return False, f"peak usage {max(used):.0f} approached the smaller budget {min(budgets):.0f}"


def key_evidence(run: Path, leg: LegEvidence, key: str) -> list[EvidenceRef]:
    if leg.server_info_file is None:
        return []
    return [leg.server_info_file.evidence(run, leg.server_info_file.key_line(key.split(".")[-1]))]


def check_conditions(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence,
                     findings: Findings) -> dict[str, list[Any]]:
    """Diff the legs' server_info; every undeclared, non-inert difference is a confound."""
    if base.server_info is None or cand.server_info is None:
        return {}  # the loader already reported the missing/corrupt file (fail closed)
    diff = diff_server_info(base.server_info, cand.server_info)
    declared = declared_keys(claim)
    for key, values in diff.items():
        if registry.is_inert(key) or is_declared(key, declared):
            continue
        parents = registry.levers().get("reports", {}).get(registry.top_key(key), [])
        if any(is_declared(p, declared) for p in parents):
            continue  # a report of how the declared knob was applied, not a second knob
        inert, why = derived_is_inert(key, values, declared, base, cand)
        evidence = key_evidence(run, base, key) + key_evidence(run, cand, key)
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
    return diff


def check_reported_conditions(run: Path, claim: Claim, legs: dict[str, LegEvidence], findings: Findings) -> None:
    """A producer summary of conditions must match what each server reported."""
    conditions = claim.reported.get("conditions") if isinstance(claim.reported, dict) else None
    if not isinstance(conditions, dict):
        return
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


def _same(stated: Any, actual: Any) -> bool:
    if isinstance(stated, (int, float)) and isinstance(actual, (int, float)) and not isinstance(stated, bool):
        return abs(float(stated) - float(actual)) <= 1e-9 * max(1.0, abs(float(actual)))
    return stated == actual
