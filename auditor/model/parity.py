"""No downgrade buys leniency: the legs of one comparison share one writer, one version and every witness.

A leg is checked by what its records hold. One leg written by a foreign tool, or by another version of
the harness, or stripped of a witness the other leg keeps, would be checked less than the other: a
downgrade that buys leniency. The evidence model names what makes the two legs one experiment beyond
the server's report (``identity`` fields of the bench line, its contention samples, LoadGen's log and a
foreign line) and which records are witnesses; this gate holds the legs to each other:

- the bench lines' writer (the harness, or a foreign tool) and version are one across the legs; so are
  the client (``backend``), the machine's core count the contention samples state, the LoadGen build that
  scheduled the reps, and what a foreign line names of its run (its model, tokenizer and load shape) --
  a difference is CONDITIONS_DIFFER (FAIL): two experiments;
- every witness one leg carries the other carries too (LoadGen's logs of the reps and a real LoadGen's
  version, the server's counters, the contention samples and CPU windows, the per-request arrays, the
  parity dump, the server log and the configuration it states, the process record and node identity):
  one present in one leg only is EVIDENCE_MISSING (FLAG, remeasure: never judged more kindly than the
  leg that has it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.model.statements import LOG_KINDS
from perfwarden.formats.records import EvidenceRef, Finding

GATE = "parity"


def _writers(leg: LegEvidence) -> set[str]:
    return {"foreign" if r.schema_version is None else f"harness v{r.schema_version}" for r in leg.reps}


def _samples(leg: LegEvidence) -> list[dict[str, Any]]:
    out = []
    for rep in leg.reps:
        con = rep.contention if isinstance(rep.contention, dict) else {}
        out += [s for s in (con.get("start"), con.get("end")) if isinstance(s, dict)]
    return out


def _line_identities(leg: LegEvidence) -> dict[str, set[str]]:
    """What the leg's records state of the experiment beyond the server's report: field -> values."""
    out: dict[str, set[str]] = {}

    def add(key: str, value: Any) -> None:
        if value is not None:
            out.setdefault(key, set()).add(json.dumps(value, sort_keys=True, default=str))

    for rep in leg.reps:
        for key in ("backend",):
            add(f"bench_line.{key}", rep.workload.get(key) if key in rep.workload else None)
        for key, value in rep.foreign_stated.items():
            add(f"bench_line.{key}", value)
    for sample in _samples(leg):
        add("contention_sample.ncpu", sample.get("ncpu"))
    for logs in leg.loadgen.values():
        add("loadgen_detail.loadgen_version", logs.version)
    return out


def check_identities(run: Path, base: LegEvidence, cand: LegEvidence) -> list[Finding]:
    """One writer and version of the bench lines, and every identity the legs' records state, across the legs."""
    found = []
    bw, cw = _writers(base), _writers(cand)
    if bw and cw and bw != cw:
        found.append(finding("CONDITIONS_DIFFER", "FAIL", f"the legs' bench lines have different writers: "
                             f"{base.name!r} {sorted(bw)}, {cand.name!r} {sorted(cw)}; the legs of one comparison "
                             "share one harness version and one kind of writer (a leg checked less is not comparable)",
                             measured={base.name: sorted(bw), cand.name: sorted(cw)}, threshold="one writer",
                             evidence=_first_lines(run, base, cand), action="eject", gate=GATE))
    bi, ci = _line_identities(base), _line_identities(cand)
    for key in sorted(set(bi) & set(ci)):
        if bi[key] != ci[key]:
            found.append(finding("CONDITIONS_DIFFER", "FAIL", f"identity {key!r} differs: {base.name!r} "
                                 f"{sorted(bi[key])[:3]} vs {cand.name!r} {sorted(ci[key])[:3]}: not the same "
                                 "experiment", measured={base.name: sorted(bi[key])[:5], cand.name: sorted(ci[key])[:5]},
                                 threshold="equal identities", evidence=_first_lines(run, base, cand), action="eject",
                                 gate=GATE))
    return found


def _first_lines(run: Path, *legs: LegEvidence) -> list[EvidenceRef]:
    return [line_evidence(run, leg.reps[0].ref) for leg in legs if leg.reps]


def _has_contention(leg: LegEvidence, part: str) -> bool:
    return any(isinstance(r.contention, dict) and isinstance(r.contention.get(part), dict) for r in leg.reps)


WITNESSES: dict[str, Callable[[LegEvidence], bool]] = {
    "LoadGen's logs of the reps": lambda leg: bool(leg.loadgen),
    "a real LoadGen's version in its logs": lambda leg: any(x.version for x in leg.loadgen.values()),
    "the server's counters around each rep (server_counters)": lambda leg: any(
        r.server_counters is not None for r in leg.reps),
    "contention samples": lambda leg: any(isinstance(r.contention, dict) and r.contention for r in leg.reps),
    "the rep's CPU window (contention.window)": lambda leg: _has_contention(leg, "window"),
    "the parity dump (outputs.jsonl)": lambda leg: leg.outputs is not None,
    "the server log": lambda leg: leg.log is not None,
    "the process record (server_info process_conditions)": lambda leg: isinstance(
        (leg.server_info or {}).get("process_conditions"), dict),
    "the node identity (server_info node)": lambda leg: isinstance((leg.server_info or {}).get("node"), dict),
}
"""Each witness a leg may carry, and how to tell it carries it."""
SEALED_WITNESSES: dict[str, Callable[[LegEvidence], bool]] = {
    "the server_info copy in its bench lines": lambda leg: any(r.server_info is not None for r in leg.reps),
    "the configuration the server log states": lambda leg: leg.log is not None and any(
        c.source in LOG_KINDS for c in leg.log.copies),
    "the model the server log says it loaded": lambda leg: leg.log is not None and any(
        c.source == "model_loaded" for c in leg.log.copies),
}
"""Witnesses the harness writes from what a server reports -- its log, the server_info copy in each bench
line -- compared where the run is sealed: the harness launched both legs' servers and sealed what they
reported as it was written (a hand-built unsealed run states what its author wrote)."""


def _arrays(leg: LegEvidence) -> frozenset[str]:
    """The per-request arrays every rep of the leg carries."""
    sets = [r.arrays for r in leg.reps]
    return frozenset.intersection(*sets) if sets else frozenset()


def check_witness_parity(run: Path, base: LegEvidence, cand: LegEvidence, sealed: bool) -> list[Finding]:
    """Every witness one leg carries, the other carries too (``sealed``: the server logs' too)."""
    if not base.reps or not cand.reps:
        return []
    lacking: dict[str, list[str]] = {}
    for what, has in {**WITNESSES, **(SEALED_WITNESSES if sealed else {})}.items():
        b, c = has(base), has(cand)
        if b != c:
            lacking.setdefault(cand.name if b else base.name, []).append(what)
    for name in sorted(_arrays(base) ^ _arrays(cand)):
        lacking.setdefault(cand.name if name in _arrays(base) else base.name, []).append(f"the {name!r} array")
    legs = {base.name: base, cand.name: cand}
    return [finding("EVIDENCE_MISSING", "FLAG", f"leg {name!r} lacks what the other leg's records carry: "
                    f"{'; '.join(what)}; a leg stripped of a witness is never judged more kindly than the leg that "
                    "has it: re-measure both with one harness", measured={"lacking": what[:12]},
                    threshold="the same witnesses in both legs", evidence=_first_lines(run, legs[name]),
                    action="remeasure", gate=GATE)
            for name, what in sorted(lacking.items())]


def check_parity(run: Path, base: LegEvidence, cand: LegEvidence, sealed: bool = False) -> GateResult[None]:
    """The legs of one comparison: one writer and version, the same identities, the same witnesses."""
    return GateResult(findings=check_identities(run, base, cand) + check_witness_parity(run, base, cand, sealed))
