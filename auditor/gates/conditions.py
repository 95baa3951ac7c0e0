"""Same conditions: only the declared change may differ between the legs' conditions.

``server_info.json`` is what the running server reported about itself, not a producer's copy, so it
is the reference for conditions. But a leg states its conditions in several places (issue 13 §3):
``server_info.json``, the ``server_info`` copy sglang/perfwarden writes into every bench line, the
server log (the effective configuration it applied, the mechanisms it reports engaged, sglang's
``server_args``), and ``leg.json``'s overlay. Inside one leg, a copy that disagrees with
``server_info.json`` is a misreport (CONDITIONS_MISREPORTED, FAIL). Between legs the union counts: a
knob whose values differ in any copy is a difference, and a second difference is a confound (FAIL)
unless it is an unavoidable consequence of the declared change *and* the raw shows it inert for this
measurement. Runtime keys (counters, the process record) and inert keys never count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfwarden.auditor import registry
from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import Findings, GateResult, finding
from perfwarden.auditor.serverlog import PRESENT
from perfwarden.harness.records import Claim, EvidenceRef

_MISSING = "<absent>"
_UNKNOWN = object()
"""A key a copy states that server_info.json does not mention: nothing to compare it with there."""


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


# ------------------------------------------------------------------------ copies of the conditions


@dataclass(frozen=True)
class ConditionCopy:
    """One place a leg states its conditions."""

    kind: str
    """``server_info`` (the file), ``bench_line``, ``effective_config``, ``server_args``, ``engaged``,
    ``overlay``."""
    where: str
    """Human name of the copy, e.g. ``bench line 3``."""
    values: dict[str, Any]
    """Flattened key -> value (``serverlog.PRESENT`` where only existence is stated)."""
    evidence: EvidenceRef | None


def _counts(key: str) -> bool:
    """Keys a copy is held to: not inert or runtime, not a report of how a knob was applied (a knob that
    is also filled in from another one, like sglang's ``cuda_graph_bs``, is still a knob: held to it)."""
    if registry.is_inert(key):
        return False
    return registry.top_key(key) not in registry.levers().get("reports", {}) or registry.lever_class(key)[0] is not None


def leg_copies(run: Path, leg: LegEvidence) -> tuple[list[ConditionCopy], list[str]]:
    """Every copy of ``leg``'s conditions other than server_info.json, and notes on copies that could
    not be read (reported as not checked)."""
    copies: list[ConditionCopy] = []
    notes: list[str] = []
    seen: set[str] = set()
    for rep in leg.reps:
        if rep.server_info is None:
            continue
        key = json.dumps(rep.server_info, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        copies.append(ConditionCopy("bench_line", f"the server_info in bench line {rep.ref.line}",
                                    rep.server_info, line_evidence(run, rep.ref)))
    if leg.log is not None:
        for copy in leg.log.copies:
            copies.append(ConditionCopy(copy.source, f"server.log line {copy.line} ({copy.source})", copy.values,
                                        leg.log.evidence(run, copy.line)))
        notes += [f"conditions in the server log of {leg.name!r}: {p}; that copy is not checked"
                  for p in leg.log.problems]
        notes += [f"server log of {leg.name!r}: {note}" for note in leg.log.notes]
        if not any(c.kind in ("effective_config", "server_args") for c in copies):
            notes.append(f"conditions in the server log of {leg.name!r}: no effective_config or server_args line "
                         "states the configuration the server applied")
    if leg.spec is not None:
        overlay: dict[str, Any] = flatten(leg.spec.overlay.config) if leg.spec.overlay.config else {}
        for patch in leg.spec.overlay.kernel_patches:
            overlay[f"op_overrides.{patch.op}"] = PRESENT
        if overlay:
            ev = leg.spec_file.evidence(run, leg.spec_file.key_line("overlay")) if leg.spec_file else None
            copies.append(ConditionCopy("overlay", "leg.json's overlay", overlay, ev))
    return copies, notes


def _agrees(stated: Any, reference: Any) -> bool:
    if stated == PRESENT:
        return reference is not _MISSING and reference != {} and reference is not None and reference is not False
    return _same(stated, reference)


def _lookup(flat: dict[str, Any], key: str) -> Any:
    """Value of ``key`` in a flattened server_info; an op override under an empty ``op_overrides``
    object is known absent (not unknown)."""
    if key in flat:
        return flat[key]
    parent = key.rsplit(".", 1)[0] if "." in key else None
    if parent is not None and (flat.get(parent) == {} or any(k.startswith(parent + ".") for k in flat)):
        return _MISSING  # the parent object is reported, without this key
    return _UNKNOWN


def check_condition_copies(run: Path, leg: LegEvidence) -> GateResult:
    """Inside one leg, every copy of the conditions must agree with server_info.json where both speak
    (a key only one copy mentions cannot be compared there; the union between legs still sees it)."""
    copies, notes = leg_copies(run, leg)
    if leg.server_info is None:
        return GateResult(not_checked=[f"conditions of {leg.name!r}: no server_info.json to hold "
                                       f"{len(copies)} other copies against"] if copies else [])
    reference = flatten(leg.server_info)
    findings = []
    for copy in copies:
        wrong = []
        for key, stated in copy.values.items():
            if not _counts(key):
                continue
            actual = _lookup(reference, key)
            if actual is _UNKNOWN or (actual is _MISSING and stated != PRESENT):
                continue
            if not _agrees(stated, actual):
                wrong.append((key, stated, actual))
        if wrong:
            shown = "; ".join(f"{k}={v!r} there, {a if a is not _MISSING else '<absent>'!r} in server_info.json"
                              for k, v, a in wrong[:5])
            evidence = [e for e in (copy.evidence, key_evidence(run, leg, wrong[0][0])[0]
                                    if key_evidence(run, leg, wrong[0][0]) else None) if e is not None]
            findings.append(finding("CONDITIONS_MISREPORTED", "FAIL", f"leg {leg.name!r}: {copy.where} disagrees with "
                                    f"the leg's server_info.json: {shown}" + (f" (+{len(wrong) - 5} more)"
                                                                              if len(wrong) > 5 else ""),
                                    measured={k: v for k, v, _ in wrong[:20]},
                                    threshold={k: (a if a is not _MISSING else "<absent>") for k, _, a in wrong[:20]},
                                    evidence=evidence, action="eject", gate="conditions"))
    return GateResult(findings=findings, not_checked=notes)


def _canonical(value: Any) -> tuple:
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, float):
        return ("n", value)
    if isinstance(value, int):  # 2 and 2.0 are one value; an int beyond any float stays exact, not an error
        try:
            return ("n", float(value))
        except OverflowError:
            return ("i", value)
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("z",)
    return ("j", json.dumps(value, sort_keys=True, default=str))


# Kinds of copy whose keys count against a leg that has no copy of the same kind: the bench line's
# server_info (sglang and perfwarden write it for every rep), the overlay (the declared change) and
# engagement (a fact about what ran). A log-only key counts only when both legs' logs could state it.
_ALWAYS_COUNTS = ("server_info", "bench_line", "overlay", "engaged")


def union_diff(run: Path, base: LegEvidence, cand: LegEvidence) -> dict[str, list[Any]]:
    """Keys whose values differ between the legs in any copy of the conditions (server_info.json
    excluded: ``diff_server_info`` covers it). key -> [baseline value(s), candidate value(s)]."""
    mentions = {}
    kinds = {}
    for leg in (base, cand):
        copies, _ = leg_copies(run, leg)
        if leg.server_info is not None:
            copies.insert(0, ConditionCopy("server_info", "server_info.json", flatten(leg.server_info), None))
        values: dict[str, dict[tuple, Any]] = {}
        where: dict[str, set[str]] = {}
        for copy in copies:
            for key, value in copy.values.items():
                if not _counts(key) or value == PRESENT:
                    continue
                values.setdefault(key, {})[_canonical(value)] = value
                where.setdefault(key, set()).add(copy.kind)
        mentions[leg.name] = (values, where)
        kinds[leg.name] = {c.kind for c in copies}
    out: dict[str, list[Any]] = {}
    (bv, bw), (cv, cw) = mentions[base.name], mentions[cand.name]
    for key in sorted(set(bv) | set(cv)):
        b, c = bv.get(key, {}), cv.get(key, {})
        if set(b) == set(c):
            continue
        if not b or not c:
            present, absent_leg = (cw, base.name) if not b else (bw, cand.name)
            if not any(kind in _ALWAYS_COUNTS or kind in kinds[absent_leg] for kind in present[key]):
                continue
        out[key] = [_one(b) if b else _MISSING, _one(c) if c else _MISSING]
    return out


def _one(values: dict[tuple, Any]) -> Any:
    items = [values[k] for k in sorted(values)]
    return items[0] if len(items) == 1 else items


def check_conditions(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence,
                     findings: Findings) -> dict[str, list[Any]]:
    """Diff the legs' conditions (server_info.json, then every other copy); every undeclared,
    non-inert difference is a confound."""
    if base.server_info is None or cand.server_info is None:
        return {}  # the loader already reported the missing/corrupt file (fail closed)
    diff = diff_server_info(base.server_info, cand.server_info)
    for key, values in union_diff(run, base, cand).items():
        diff.setdefault(key, values)
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
    """Equal, with numbers compared as numbers (2 == 2.0); integers beyond any float compare exactly."""
    numbers = isinstance(stated, (int, float)) and isinstance(actual, (int, float)) and not isinstance(stated, bool)
    if not numbers or (isinstance(stated, int) and isinstance(actual, int)):
        return stated == actual
    try:
        return abs(float(stated) - float(actual)) <= 1e-9 * max(1.0, abs(float(actual)))
    except OverflowError:
        return False
