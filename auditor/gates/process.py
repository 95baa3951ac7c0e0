"""Process-level conditions are recorded and well-formed. A pure gate.

The harness measures, from outside each server it launches, what the process may use (cores, CPU
affinity, cgroup quota, priority, thread environment, engine: ``harness/process_conditions.py``) and
writes it into the leg's ``server_info.json`` as ``process_conditions``; the conditions gate diffs it
like any other condition (``levers.json`` class B ``process_conditions*``). This gate holds the record
itself: it has exactly the harness's fields, each of its type (an unknown or retyped field is
EVIDENCE_CORRUPT), and a leg whose bench lines the current harness wrote (version 2) without it lost
it (EVIDENCE_MISSING): a record that would show a handicapped baseline cannot be removed to hide one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfwarden.auditor.evidence import LegEvidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.rederive import BENCH_V2

GATE = "process_conditions"
FIELD_TYPES: dict[str, tuple[type, ...]] = {"engine": (str,), "cpu_count": (int, type(None)),
                                            "cpus_allowed": (list, type(None)),
                                            "cpu_quota_cores": (int, float, type(None)),
                                            "nice": (int, type(None)), "thread_env": (dict,)}
"""The fields ``process_conditions`` has, and their types (an integer may be written as a float)."""


def _wrong(record: Any) -> str | None:
    """Why ``record`` is not a process-conditions record the harness wrote (None when it is)."""
    if not isinstance(record, dict):
        return f"it is a {type(record).__name__}, not an object"
    unknown = sorted(set(record) - set(FIELD_TYPES))
    if unknown:
        return f"field(s) its schema does not have: {', '.join(map(repr, unknown[:5]))}"
    missing = sorted(set(FIELD_TYPES) - set(record))
    if missing:
        return f"no {', '.join(missing)}"
    for name, types in FIELD_TYPES.items():
        value = record[name]
        if isinstance(value, float) and value.is_integer() and int in types:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            return f"{name!r} is a {type(value).__name__}, the wrong type"
    env = record["thread_env"]
    if not all(isinstance(v, str) for v in env.values()):
        return "'thread_env' holds a value that is not a string"
    return None


def check_process_conditions(run: Path, legs: list[LegEvidence]) -> GateResult[None]:
    findings, recorded = [], 0
    for leg in legs:
        if leg.server_info is None:
            continue  # the loader already reported it
        evidence = [leg.server_info_file.evidence(run, leg.server_info_file.key_line("process_conditions"))] \
            if leg.server_info_file is not None else []
        record = leg.server_info.get("process_conditions")
        if record is None:
            if any((rep.schema_version or 0) >= BENCH_V2 for rep in leg.reps):
                findings.append(finding("EVIDENCE_MISSING", "FAIL", f"leg {leg.name!r}: server_info.json has no "
                                        "process_conditions, which the harness records for every server it "
                                        "launches (its bench lines are version 2): the record of what the server "
                                        "process could use was removed", evidence=evidence, action="eject",
                                        gate=GATE))
            continue
        recorded += 1
        why = _wrong(record)
        if why is not None:
            findings.append(finding("EVIDENCE_CORRUPT", "FAIL", f"leg {leg.name!r}: process_conditions in "
                                    f"server_info.json: {why}", evidence=evidence, action="eject", gate=GATE))
    notes = [] if recorded or findings else [
        "process conditions (cores, affinity, cgroup quota, thread environment): no leg's server_info.json records "
        "them (a run recorded before the harness wrote them, or a foreign file), so only what the servers report "
        "is compared"]
    return GateResult(findings=findings, not_checked=notes)
