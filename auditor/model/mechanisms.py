"""Counters witness mechanisms: what a server reports of its configuration, held against its own counters.

The evidence model (``mechanisms``) names, for each mechanism a server can run, the configuration keys
that switch it on (and the values that mean off) and the counters that show it ran: the server's running
totals around a rep (``server_counters``, a delta), the totals it reports after the rep (the
``internal_states`` of each bench line's server_info copy, and of ``server_info.json``). (A bench line's
``accept_length`` is the bench tool's report, a signal of the lever gate.) A leg whose configuration states the mechanism off while its own counters show it ran
misreports itself (CONDITIONS_MISREPORTED, FAIL): the configuration is what the server says, the counters
what it did, and a producer that can reach one can reach a lever the other hides. The same counters are
raw signals of the lever gate (:func:`counter_signals`): a mechanism only the candidate's counters show,
undeclared, is a second difference between the legs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.model.schema import CounterSignal, MechanismModel, evidence_model
from perfwarden.auditor.model.statements import flatten, key_evidence
from perfwarden.auditor.rederive import RepMetrics
from perfwarden.auditor.serverlog import Family, LogSignal
from perfwarden.formats.jsonl import LineRef
from perfwarden.formats.records import EvidenceRef, Finding

GATE = "mechanisms"
STATES = "internal_states.0."
"""How the model names a counter inside a server_info's running totals (its first ``internal_states`` entry)."""


@dataclass(frozen=True)
class Shown:
    """One counter showing a mechanism ran."""

    mechanism: str
    where: str
    value: Any
    detail: str | None
    """The op a kernel-override counter names."""
    line: LineRef | None
    """The bench line that states it (None: server_info.json)."""


def _off(value: Any, spec: MechanismModel) -> bool:
    return any(value == off and type(value) is type(off) for off in spec.off) or value in ({}, None)


def configured(info: dict[str, Any] | None, spec: MechanismModel) -> bool | None:
    """Whether a server's configuration (its server_info) says the mechanism is on (True), off (False:
    it states a switch, and every switch it states is off) or says nothing (None)."""
    if not isinstance(info, dict):
        return None
    flat = flatten(info)
    stated = {key: flat[key] for key in spec.config if key in flat}
    nested = [key for key in flat for sw in spec.config if key.startswith(sw + ".")]
    if not stated and not nested:
        return None
    return bool(nested) or not all(_off(v, spec) for v in stated.values())


def _lit(value: Any) -> tuple[bool, str | None]:
    """Whether a counter's value shows activity, and the op it names (a per-op counter object)."""
    if isinstance(value, dict):
        for op, calls in value.items():
            if isinstance(calls, (int, float)) and not isinstance(calls, bool) and calls > 0:
                return True, str(op)
        return False, None
    if isinstance(value, bool) or value is None:
        return False, None
    return (value > 0, None) if isinstance(value, (int, float)) else (True, None)


def _states(info: dict[str, Any] | None) -> dict[str, Any]:
    states = info.get("internal_states") if isinstance(info, dict) else None
    first = states[0] if isinstance(states, list) and states else None
    return first if isinstance(first, dict) else {}


def _rep_shown(rep: RepMetrics, name: str, counter: CounterSignal) -> Shown | None:
    field = counter.field
    if counter.record == "server_counters" and rep.server_counters is not None:
        before, after = rep.server_counters
        value: Any = after.get(field, 0.0) - before.get(field, 0.0) if counter.shows == "delta" else after.get(field)
        where = f"the server's {field} over rep {rep.rep}"
    elif counter.record == "server_info" and field.startswith(STATES) and rep.server_info is not None:
        value, where = _states(rep.server_info).get(field[len(STATES):]), f"{field} after rep {rep.rep}"
    else:
        return None
    lit, detail = _lit(value)
    return Shown(name, where, value, detail, rep.ref) if lit else None


def shown(leg: LegEvidence, name: str, spec: MechanismModel) -> list[Shown]:
    """Every counter of ``leg`` showing mechanism ``name`` ran (the first of each counter is enough)."""
    out: list[Shown] = []
    for counter in spec.counters:
        found = next((s for rep in leg.reps if (s := _rep_shown(rep, name, counter)) is not None), None)
        if found is None and counter.record == "server_info" and counter.field.startswith(STATES):
            value = _states(leg.server_info).get(counter.field[len(STATES):])
            lit, detail = _lit(value)
            if lit:
                found = Shown(name, f"{counter.field} in server_info.json", value, detail, None)
        if found is not None:
            out.append(found)
    return out


def _evidence(run: Path, leg: LegEvidence, s: Shown) -> EvidenceRef | None:
    if s.line is not None:
        return line_evidence(run, s.line)
    cited = key_evidence(run, leg, "internal_states")
    return cited[0] if cited else None


def check_mechanisms(run: Path, leg: LegEvidence) -> GateResult[None]:
    """A leg whose configuration states a mechanism off while its own counters show it ran misreports itself."""
    findings: list[Finding] = []
    for name, spec in evidence_model().mechanisms.items():
        if configured(leg.server_info, spec) is not False:
            continue
        seen = shown(leg, name, spec)
        if not seen:
            continue
        shown_text = "; ".join(f"{s.where} = {s.value!r}" for s in seen[:3])
        findings.append(finding(
            "CONDITIONS_MISREPORTED", "FAIL", f"leg {leg.name!r}: its server's configuration says {name} is off "
            f"({', '.join(spec.config)}) but its own counters show it ran ({shown_text}): the configuration it "
            "reports is not the one it ran, and the mechanism is a lever nobody declared",
            measured={s.where: s.value for s in seen[:10]}, threshold=f"{name} off: counters at rest",
            evidence=[e for e in (_evidence(run, leg, s) for s in seen[:3]) if e is not None], action="eject",
            gate=GATE))
    return GateResult(findings=findings)


FAMILIES: dict[str, Family] = {"spec_decode": "spec_decode", "response_cache": "response_cache",
                               "kernel_override": "kernel_override"}
"""The lever gate's signal family of each mechanism the model names."""


def counter_signals(leg: LegEvidence) -> list[LogSignal]:
    """Every mechanism ``leg``'s counters show ran, as the lever gate's raw signals (no log line: line 0)."""
    out = []
    for name, spec in evidence_model().mechanisms.items():
        family = FAMILIES.get(name)
        if family is None:
            continue
        out += [LogSignal(family, 0, f"{s.where} = {s.value!r} (the server's own counters)", s.detail)
                for s in shown(leg, name, spec)]
    return out
