"""Workload parity: the compared legs ran the same load, unless the load is the declared change.

What defines the load, read from every rep's bench line (sglang's own fields and the
ones perfwarden's LoadGen client adds) and from each leg's ``leg.json``:

- the prompt set and the requests issued per rep: a digest of the rep's prompt ids (order-free), or
  of its sorted ``input_lens`` where a file has no ids; LoadGen's own detail log for the rep where it
  exists (its issued sample count);
- output budget and sampling: ``request_params`` (``max_tokens``, ``ignore_eos``, ``temperature``, ...),
  sglang's ``random_output_len``/``sharegpt_output_len``;
- concurrency, request rate and LoadGen scenario: ``max_concurrency``, ``request_rate``, ``scenario``,
  ``loadgen.settings.*``;
- the dataset: ``dataset_name``, ``dataset_path``, ``random_input_len``, ``random_range_ratio``.

Decisions: a load value that differs between the legs and is not the declared change is a confound
(CONDITIONS_DIFFER, FAIL, eject), citing a line of each leg; reps of one leg that ran different loads
are the same confound inside the leg; ``leg.json`` stating another load than the leg's own lines is a
misreport (CONDITIONS_MISREPORTED, FAIL); LoadGen saying it issued more samples than the line holds is
evidence removed (EVIDENCE_MISSING, FAIL). A descriptor neither leg records (a foreign file) is listed
in the verdict's ``not_checked``, never taken as equal. JSON null and an absent key both mean "not
set" (sglang omits unset arguments).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates.conditions import declared_keys, is_declared
from perfwarden.auditor.model.statements import canonical
from perfwarden.auditor.rederive import RepMetrics, flatten_json
from perfwarden.formats.records import Claim, Finding

_DESCRIBED = {
    "request_params": "output budget and sampling parameters (request_params)",
    "max_concurrency": "concurrency limit (max_concurrency)",
    "request_rate": "request rate",
    "scenario": "LoadGen scenario",
    "dataset_name": "dataset",
}
"""Descriptors whose absence from both legs is reported as not checked."""


Stated = Mapping[tuple[Any, ...], tuple[Any, RepMetrics | None]]
"""Canonical value -> (value, the first rep stating it, or None when only the leg's spec states it)."""


def _values(reps: list[RepMetrics], key: str) -> dict[tuple[Any, ...], tuple[Any, RepMetrics]]:
    """Canonical value -> (value, first rep stating it); an absent key reads as None."""
    out: dict[tuple[Any, ...], tuple[Any, RepMetrics]] = {}
    for rep in reps:
        value = rep.workload.get(key)
        out.setdefault(canonical(value), (value, rep))
    return out


def _show(values: Stated) -> Any:
    items = [v for v, _ in values.values()]
    return items[0] if len(items) == 1 else items


def _spec_workload(leg: LegEvidence) -> dict[str, Any]:
    spec = leg.spec.workload if leg.spec is not None else None
    return flatten_json(spec) if isinstance(spec, dict) else {}


def _leg_consistency(run: Path, leg: LegEvidence, keys: set[str]) -> list[Finding]:
    """One leg's reps ran one load, and its leg.json says the load its lines show."""
    findings = []
    for key in sorted(keys):
        values = _values(leg.reps, key)
        if len(values) > 1:
            (v1, r1), (v2, r2) = list(values.values())[:2]
            findings.append(finding("CONDITIONS_DIFFER", "FAIL", f"the reps of leg {leg.name!r} ran different loads: "
                                    f"{key}={v1!r} in rep {r1.rep}, {v2!r} in rep {r2.rep}: they are not replicates",
                                    measured=[v for v, _ in values.values()], threshold="one load per leg",
                                    evidence=[line_evidence(run, r1.ref), line_evidence(run, r2.ref)],
                                    action="eject", gate="workload"))
    spec = _spec_workload(leg)
    wrong = []
    for key, stated in spec.items():
        lines = {c: vr for c, vr in _values(leg.reps, key).items() if any(key in r.workload for r in leg.reps)}
        if lines and canonical(stated) not in lines:
            wrong.append((key, stated, _show(lines), next(iter(lines.values()))[1]))
    if wrong:
        key, stated, lines_value, rep = wrong[0]
        evidence = [line_evidence(run, rep.ref)]
        if leg.spec_file is not None:
            evidence.insert(0, leg.spec_file.evidence(run, leg.spec_file.key_line(key.split(".")[-1])))
        findings.append(finding("CONDITIONS_MISREPORTED", "FAIL", f"leg {leg.name!r}: leg.json says the load was "
                                f"{key}={stated!r}, its bench lines say {lines_value!r}"
                                + (f" (+{len(wrong) - 1} more keys)" if len(wrong) > 1 else ""),
                                measured={k: lv for k, _, lv, _ in wrong[:20]},
                                threshold={k: st for k, st, _, _ in wrong[:20]}, evidence=evidence,
                                action="eject", gate="workload"))
    return findings


RECORDED = ("request_params", "loadgen", "scenario")
"""Fields perfwarden's LoadGen client records (absent = not recorded, unlike sglang's arguments, whose
absence means "not set"): one leg recording them and the other not is missing evidence."""


def _recorded_group(key: str) -> str | None:
    top = key.split(".", 1)[0]
    return top if top in RECORDED else None


def _between_legs(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence, keys: set[str]) -> list[Finding]:
    declared = declared_keys(claim)
    findings = []
    specs = {leg.name: _spec_workload(leg) for leg in (base, cand)}
    states = {leg.name: {g for k in keys | set(specs[leg.name]) if (g := _recorded_group(k))
                         and (k in specs[leg.name] or any(k in r.workload for r in leg.reps))}
              for leg in (base, cand)}
    for group in sorted(states[base.name] ^ states[cand.name]):
        has, lacks = (base, cand) if group in states[base.name] else (cand, base)
        findings.append(finding("EVIDENCE_MISSING", "FLAG", f"leg {has.name!r} records {group!r} for its load, leg "
                                f"{lacks.name!r} does not: the loads cannot be shown equal (a leg recorded by "
                                "another harness version, or a field removed); re-measure both legs together",
                                evidence=[line_evidence(run, lacks.reps[0].ref)], action="remeasure", gate="workload"))
    skipped = states[base.name] ^ states[cand.name]
    for key in sorted(keys | set(specs[base.name]) | set(specs[cand.name])):
        if is_declared(key, declared) or is_declared(key.split(".")[-1], declared):
            continue
        if _recorded_group(key) in skipped:
            continue
        sides: list[Stated] = []
        for leg in (base, cand):
            values: Stated = _values(leg.reps, key) if any(key in r.workload for r in leg.reps) else {}
            if not values and key in specs[leg.name]:
                values = {canonical(specs[leg.name][key]): (specs[leg.name][key], None)}
            if not values:
                values = {canonical(None): (None, None)}
            sides.append(values)
        if set(sides[0]) == set(sides[1]):
            continue
        reps = [next((r for _, r in side.values() if r is not None), None) for side in sides]
        evidence = [line_evidence(run, r.ref) for r in reps if r is not None]
        findings.append(finding("CONDITIONS_DIFFER", "FAIL", f"the legs ran different loads: {key}={_show(sides[0])!r} "
                                f"in {base.name!r}, {_show(sides[1])!r} in {cand.name!r} (not the declared change)",
                                measured=[_show(sides[0]), _show(sides[1])], threshold="the same load in both legs",
                                evidence=evidence, action="eject", gate="workload"))
    return findings


def _prompt_sets(run: Path, base: LegEvidence, cand: LegEvidence) -> tuple[list[Finding], list[str]]:
    """Both legs issued the same prompts (with the same number of requests) per rep: by prompt ids
    where both legs record them, and by input lengths over reps whose every request succeeded (a
    failed request's length may be an estimate) -- so ids that stayed while the prompts behind them
    changed are seen too."""
    findings: list[Finding] = []
    compared = False
    for basis, attr, complete_only in (("prompt ids", "prompt_digest", False),
                                       ("sorted input lengths", "lens_digest", True)):
        pools = [[r for r in leg.reps if not complete_only or r.n_ok == r.n_requests] for leg in (base, cand)]
        sides = [{getattr(r, attr): r for r in pool} for pool in pools]
        if any(None in side or not side for side in sides):
            continue
        compared = True
        if set(sides[0]) == set(sides[1]):
            continue
        only_base = [r for d, r in sides[0].items() if d not in sides[1]]
        only_cand = [r for d, r in sides[1].items() if d not in sides[0]]
        rb, rc = (only_base or list(sides[0].values()))[0], (only_cand or list(sides[1].values()))[0]
        findings.append(finding(
            "CONDITIONS_DIFFER", "FAIL", f"the legs issued different prompt sets (by {basis}): rep {rb.rep} of "
            f"{base.name!r} ({rb.n_requests} requests) matches no rep of {cand.name!r}, rep {rc.rep} of {cand.name!r} "
            f"({rc.n_requests} requests) matches no rep of {base.name!r}",
            measured={"baseline_requests": sorted({r.n_requests for r in base.reps}),
                      "candidate_requests": sorted({r.n_requests for r in cand.reps})},
            threshold="the same prompts and request count per rep",
            evidence=[line_evidence(run, rb.ref), line_evidence(run, rc.ref)], action="eject", gate="workload"))
        break  # one finding says it; the other basis would repeat it
    if compared:
        return findings, []
    return [], ["workload: prompt set not comparable (neither prompt ids nor input_lens in every rep of both legs)"]


def _loadgen_logs(run: Path, leg: LegEvidence) -> tuple[list[Finding], list[str]]:
    """LoadGen's own count of issued samples, where its detail log exists for a rep."""
    findings = []
    for rep in leg.reps:
        logged = leg.loadgen_issued.get(rep.rep)
        if logged is None:
            continue
        issued, ref = logged
        if issued == rep.n_requests:
            continue
        removed = issued > rep.n_requests
        findings.append(finding("EVIDENCE_MISSING" if removed else "EVIDENCE_CORRUPT", "FAIL",
                                f"leg {leg.name!r} rep {rep.rep}: LoadGen's detail log says it issued {issued} "
                                f"samples, the bench line holds {rep.n_requests} requests"
                                + (": requests were removed from the evidence" if removed else ""),
                                measured=rep.n_requests, threshold={"loadgen_issued": issued},
                                evidence=[ref, line_evidence(run, rep.ref)], gate="workload"))
    notes = [f"workload: LoadGen log not read ({p})" for p in leg.loadgen_problems]
    return findings, notes


def same_load(run: Path, claim: Claim, base: LegEvidence, leg: LegEvidence) -> bool:
    """Whether ``leg`` ran the baseline's load: no load descriptor differs, the prompt sets match
    (the rules of :func:`check_workload`, with whatever change ``claim`` declares allowed)."""
    keys = {k for each in (base, leg) for r in each.reps for k in r.workload}
    if any(f.severity != "INFO" for f in _between_legs(run, claim, base, leg, keys)):
        return False
    findings, notes = _prompt_sets(run, base, leg)
    return not findings and not notes


def check_workload(run: Path, claim: Claim, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
    """Workload parity between the compared legs (module docstring)."""
    if not base.reps or not cand.reps:
        return GateResult(not_checked=["workload: a leg has no usable rep"])
    findings: list[Finding] = []
    notes: list[str] = []
    keys = {k for leg in (base, cand) for r in leg.reps for k in r.workload}
    for leg in (base, cand):
        findings += _leg_consistency(run, leg, keys)
        log_findings, log_notes = _loadgen_logs(run, leg)
        findings += log_findings
        notes += log_notes
    findings += _between_legs(run, claim, base, cand, keys)
    prompt_findings, prompt_notes = _prompt_sets(run, base, cand)
    findings += prompt_findings
    notes += prompt_notes
    recorded = {k.split(".", 1)[0] for k in keys} | {k.split(".", 1)[0] for leg in (base, cand)
                                                      for k in _spec_workload(leg)}
    notes += [f"workload: {what} recorded in neither leg" for key, what in _DESCRIBED.items() if key not in recorded]
    if not any(r.issued is not None or r.rep in leg.loadgen_issued for leg in (base, cand) for r in leg.reps):
        notes.append("workload: requests issued per rep recorded in neither leg (no 'issued' field, no LoadGen log): "
                     "a removed request shows only through the counts and the prompt set")
    return GateResult(findings=findings, not_checked=notes)
