"""Conditions and identities wherever a leg states them: the evidence model's engine for those two roles.

A leg states its conditions and identities in several places: ``server_info.json`` (what the running
server reported), the ``server_info`` copy in every bench line, the server log (the configuration it
applied, the mechanisms it reports engaged, the model it says it loaded and serves, SGLang's
``server_args``, vLLM's non-default args) and ``leg.json``'s overlay. Every key is looked up in the
evidence model (``server_info``'s roles): a condition or an identity is compared, bookkeeping (proven
inert), a measurement (the server's running counters) or a field the model does not judge is not. A key
the model does not know is compared too: unknown is not inert (the target-keys gate names it).

- Inside one leg, a copy that disagrees with ``server_info.json`` where both state a key is a misreport
  (:func:`check_copies`, CONDITIONS_MISREPORTED).
- Between legs the union of every copy counts (:func:`union_diff`): a key whose values differ in any
  copy is a difference; the conditions gate decides whether it is the declared change (an identity never
  is).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfwarden.auditor import registry
from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.model.roles import NOT_COMPARED, role
from perfwarden.auditor.rederive import flatten_json
from perfwarden.auditor.serverlog import PRESENT
from perfwarden.formats.records import EvidenceRef, Finding

MISSING = "<absent>"
UNKNOWN = object()
"""A key a copy states that server_info.json does not mention: nothing to compare it with there."""
GATE = "conditions"


def flatten(info: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts become dotted keys; lists, scalars and empty objects are leaf values."""
    return flatten_json(info, prefix)


def compared(key: str) -> bool:
    """Whether copies are held to ``key``: a condition, an identity or an unknown key; never bookkeeping,
    a measurement or a field not judged. A report of how a knob was applied (levers.json ``reports``) is
    held only where it is a lever itself or an identity (the hardware a ``device`` knob reports)."""
    found = role(key)
    if found in NOT_COMPARED:
        return False
    report = registry.top_key(key) in registry.levers().get("reports", {})
    return not report or found == "identity" or registry.lever_class(key)[0] is not None


@dataclass(frozen=True)
class ConditionCopy:
    """One place a leg states its conditions and identities."""

    kind: str
    """``server_info`` (the file), ``bench_line``, ``effective_config``, ``server_args``, ``vllm_args``,
    ``engaged``, ``model_loaded``, ``serving``, ``overlay``."""
    where: str
    """Human name of the copy, e.g. ``bench line 3``."""
    values: dict[str, Any]
    """Flattened key -> value (``serverlog.PRESENT`` where only existence is stated)."""
    evidence: EvidenceRef | None


LOG_KINDS = ("effective_config", "server_args", "vllm_args")
"""Log lines that state the whole configuration the server applied."""


def leg_copies(run: Path, leg: LegEvidence) -> tuple[list[ConditionCopy], list[str]]:
    """Every copy of ``leg``'s conditions other than server_info.json, and notes on copies that could
    not be read (reported as not checked)."""
    copies: list[ConditionCopy] = []
    notes: list[str] = []
    seen: set[str] = set()
    for rep in leg.reps:
        if rep.server_info is None:
            continue
        digest = json.dumps(rep.server_info, sort_keys=True, default=str)
        if digest in seen:
            continue
        seen.add(digest)
        copies.append(ConditionCopy("bench_line", f"the server_info in bench line {rep.ref.line}",
                                    rep.server_info, line_evidence(run, rep.ref)))
    if leg.log is not None:
        for copy in leg.log.copies:
            copies.append(ConditionCopy(copy.source, f"server.log line {copy.line} ({copy.source})", copy.values,
                                        leg.log.evidence(run, copy.line)))
        notes += [f"conditions in the server log of {leg.name!r}: {p}; that copy is not checked"
                  for p in leg.log.problems]
        notes += [f"server log of {leg.name!r}: {note}" for note in leg.log.notes]
        if not any(c.kind in LOG_KINDS for c in copies):
            notes.append(f"conditions in the server log of {leg.name!r}: no effective_config, server_args or vLLM "
                         "non-default args line states the configuration the server applied")
    if leg.spec is not None:
        overlay: dict[str, Any] = flatten(leg.spec.overlay.config) if leg.spec.overlay.config else {}
        for patch in leg.spec.overlay.kernel_patches:
            overlay[f"op_overrides.{patch.op}"] = PRESENT
        if overlay:
            ev = leg.spec_file.evidence(run, leg.spec_file.key_line("overlay")) if leg.spec_file else None
            copies.append(ConditionCopy("overlay", "leg.json's overlay", overlay, ev))
    return copies, notes


def same(stated: Any, actual: Any) -> bool:
    """Equal, with numbers compared as numbers (2 == 2.0); integers beyond any float compare exactly."""
    numbers = isinstance(stated, (int, float)) and isinstance(actual, (int, float)) and not isinstance(stated, bool)
    if not numbers or (isinstance(stated, int) and isinstance(actual, int)):
        return bool(stated == actual)
    try:
        return abs(float(stated) - float(actual)) <= 1e-9 * max(1.0, abs(float(actual)))
    except OverflowError:
        return False


def _agrees(stated: Any, reference: Any) -> bool:
    if stated == PRESENT:
        return reference is not MISSING and reference != {} and reference is not None and reference is not False
    return same(stated, reference)


def _lookup(flat: dict[str, Any], key: str) -> Any:
    """Value of ``key`` in a flattened server_info; an op override under an empty ``op_overrides``
    object is known absent (not unknown)."""
    if key in flat:
        return flat[key]
    parent = key.rsplit(".", 1)[0] if "." in key else None
    if parent is not None and (flat.get(parent) == {} or any(k.startswith(parent + ".") for k in flat)):
        return MISSING  # the parent object is reported, without this key
    return UNKNOWN


def key_evidence(run: Path, leg: LegEvidence, key: str) -> list[EvidenceRef]:
    if leg.server_info_file is None:
        return []
    return [leg.server_info_file.evidence(run, leg.server_info_file.key_line(key.split(".")[-1]))]


def check_copies(run: Path, leg: LegEvidence) -> GateResult[None]:
    """Inside one leg, every copy of the conditions and identities must agree with server_info.json where
    both speak (a key only one copy mentions cannot be compared there; the union between legs sees it)."""
    copies, notes = leg_copies(run, leg)
    if leg.server_info is None:
        return GateResult(not_checked=[f"conditions of {leg.name!r}: no server_info.json to hold "
                                       f"{len(copies)} other copies against"] if copies else [])
    reference = flatten(leg.server_info)
    findings = [f for copy in copies if (f := _misreport(run, leg, copy, reference)) is not None]
    return GateResult(findings=findings, not_checked=notes)


def _misreport(run: Path, leg: LegEvidence, copy: ConditionCopy, reference: dict[str, Any]) -> Finding | None:
    wrong = []
    for key, stated in copy.values.items():
        if not compared(key):
            continue
        actual = _lookup(reference, key)
        if actual is UNKNOWN or (actual is MISSING and stated != PRESENT):
            continue
        if not _agrees(stated, actual):
            wrong.append((key, stated, actual))
    if not wrong:
        return None
    shown = "; ".join(f"{k}={v!r} there, {a if a is not MISSING else '<absent>'!r} in server_info.json"
                      for k, v, a in wrong[:5])
    cited = key_evidence(run, leg, wrong[0][0])
    evidence = [e for e in (copy.evidence, cited[0] if cited else None) if e is not None]
    return finding("CONDITIONS_MISREPORTED", "FAIL", f"leg {leg.name!r}: {copy.where} disagrees with the leg's "
                   f"server_info.json: {shown}" + (f" (+{len(wrong) - 5} more)" if len(wrong) > 5 else ""),
                   measured={k: v for k, v, _ in wrong[:20]},
                   threshold={k: (a if a is not MISSING else "<absent>") for k, _, a in wrong[:20]},
                   evidence=evidence, action="eject", gate=GATE)


def canonical(value: Any) -> tuple[Any, ...]:
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


ALWAYS_COUNTS = ("server_info", "bench_line", "overlay", "engaged")
"""Kinds of copy whose keys count against a leg that has no copy of the same kind: the bench line's
server_info (sglang and perfwarden write it for every rep), the overlay (the declared change) and
engagement (a fact about what ran). A log-only key counts only when both legs' logs could state it."""


def diff_server_info(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, list[Any]]:
    """Keys whose values differ: key -> [baseline, candidate] (``<absent>`` when one side lacks it)."""
    fb, fc = flatten(base), flatten(cand)
    out: dict[str, list[Any]] = {}
    for key in sorted(set(fb) | set(fc)):
        vb, vc = fb.get(key, MISSING), fc.get(key, MISSING)
        if vb != vc:
            out[key] = [vb, vc]
    return out


def _mentions(run: Path, leg: LegEvidence) -> tuple[dict[str, dict[tuple[Any, ...], Any]], dict[str, set[str]], set[str]]:
    """Every compared key ``leg``'s copies state: key -> {canonical value: value}, key -> kinds of copy
    stating it, and the kinds of copy the leg has."""
    copies, _ = leg_copies(run, leg)
    if leg.server_info is not None:
        copies.insert(0, ConditionCopy("server_info", "server_info.json", flatten(leg.server_info), None))
    values: dict[str, dict[tuple[Any, ...], Any]] = {}
    where: dict[str, set[str]] = {}
    for copy in copies:
        for key, value in copy.values.items():
            if not compared(key) or value == PRESENT:
                continue
            values.setdefault(key, {})[canonical(value)] = value
            where.setdefault(key, set()).add(copy.kind)
    return values, where, {c.kind for c in copies}


def union_diff(run: Path, base: LegEvidence, cand: LegEvidence) -> dict[str, list[Any]]:
    """Keys whose values differ between the legs in any copy (server_info.json's own difference is
    ``diff_server_info``'s). key -> [baseline value(s), candidate value(s)]."""
    (bv, bw, bkinds), (cv, cw, ckinds) = _mentions(run, base), _mentions(run, cand)
    kinds = {base.name: bkinds, cand.name: ckinds}
    out: dict[str, list[Any]] = {}
    for key in sorted(set(bv) | set(cv)):
        b, c = bv.get(key, {}), cv.get(key, {})
        if set(b) == set(c):
            continue
        if not b or not c:
            present, absent_leg = (cw, base.name) if not b else (bw, cand.name)
            if not any(kind in ALWAYS_COUNTS or kind in kinds[absent_leg] for kind in present[key]):
                continue
        out[key] = [_one(b) if b else MISSING, _one(c) if c else MISSING]
    return out


def _one(values: dict[tuple[Any, ...], Any]) -> Any:
    items = [values[k] for k in sorted(values)]
    return items[0] if len(items) == 1 else items
