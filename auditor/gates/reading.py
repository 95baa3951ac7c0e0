"""Reading: what the loader met becomes findings, and what the loaded reps show together is judged.

The loader only reads (``auditor/evidence.py``): each thing it met is a :class:`~perfwarden.auditor.evidence.
ReadProblem` whose kind is a row of the evidence model's ``reading`` table, which gives its code, severity
and action (:func:`check_reading`). A kind the table does not have is our own bug and raises (the gate
then degrades the verdict: never a PASS). What no single line shows is judged here over the legs as
loaded: a rep that started before its run, two reps with the same per-request timings, rep numbers
with gaps, standard arrays absent, one bench file with two writers, and the LoadGen folders the reps
name (``check_named_folders``). All pure: they read nothing.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from perfwarden.auditor.evidence import (HARNESS_ARRAYS, STANDARD_ARRAYS, ForeignFields, LegEvidence, ReadProblem,
                                         line_evidence)
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.model.schema import evidence_model
from perfwarden.auditor.rederive import RepMetrics
from perfwarden.formats.records import EvidenceRef, Finding

GATE = "evidence"


def check_reading(problems: list[ReadProblem]) -> GateResult[None]:
    """Every fact the loader stated, as the finding the model's ``reading`` table makes it."""
    table = evidence_model().reading
    found = []
    for problem in problems:
        rule = table[problem.kind]
        found.append(finding(rule.code, rule.severity, problem.message, measured=problem.measured,
                             threshold=problem.threshold, evidence=list(problem.evidence),
                             action=rule.action, gate=GATE))
    return GateResult(findings=found)


def check_foreign_fields(files: dict[str, ForeignFields]) -> GateResult[None]:
    """A foreign bench file's fields beyond the bench schema, judged by the evidence model: one it lists as
    not judged is named in ``not_checked`` with the reason; one it lists as an identity or a condition is
    read and compared across the legs (``model/parity.py``); one it gives no role is fail-closed
    (UNKNOWN_KNOB, FLAG): a field nobody thought about is never trusted by default."""
    model = evidence_model()
    findings, notes = [], []
    for rel, found in sorted(files.items()):
        roles = {name: model.role_of("bench_line", name, foreign=True) for name in sorted(found.names)}
        unjudged = [n for n, r in roles.items() if r is not None and r.role == "not_judged"]
        if unjudged:
            notes.append(f"{found.what}: foreign file ({rel!r}) fields the evidence model lists as not judged "
                         f"(statistics a foreign tool writes beside the per-request arrays the verdict re-derives from): "
                         f"{', '.join(unjudged[:40])}" + (" …" if len(unjudged) > 40 else ""))
        roleless = [n for n, r in roles.items() if r is None]
        if roleless:
            findings.append(finding("UNKNOWN_KNOB", "FLAG", f"{found.what}: foreign file {rel!r} holds field(s) the "
                                    f"evidence model gives no role: {', '.join(roleless[:8])}; a field nobody thought "
                                    "about is not trusted by default", measured=roleless[:40],
                                    threshold="a field the model lists for a foreign bench line",
                                    evidence=[EvidenceRef(file=rel, line=found.line)], action="flag", gate=GATE))
    return GateResult(findings=findings, not_checked=notes)


RUN_CLOCK_SLACK_S = 60.0
"""A rep may appear to start this much before its run (clock steps, a manifest written late)."""


def check_rep_clock(run: Path, legs: list[LegEvidence], run_started: float | None) -> GateResult[None]:
    """A rep must start inside its run's clock: not before the run started (run.json, when known)."""
    if run_started is None:
        return GateResult()
    found = []
    for leg in legs:
        for rep in leg.reps:
            if rep.started_at is not None and rep.started_at < run_started - RUN_CLOCK_SLACK_S:
                found.append(finding(
                    "EVIDENCE_CORRUPT", "FAIL", f"leg {leg.name!r} rep {rep.rep} started "
                    f"{run_started - rep.started_at:.0f} s before the run did (run.json started_at): it is not this "
                    "run's measurement", measured=rep.started_at,
                    threshold={"run_started_at": run_started, "slack_s": RUN_CLOCK_SLACK_S},
                    evidence=[line_evidence(run, rep.ref)], gate=GATE))
    return GateResult(findings=found)


def check_duplicate_timings(run: Path, legs: list[LegEvidence]) -> GateResult[None]:
    """Two reps with the same per-request timings, in one leg or across legs, are one measurement written
    twice (constant memory per rep: a digest each)."""
    first: dict[str, tuple[str, RepMetrics]] = {}
    found = []
    for leg in legs:
        for rep in leg.reps:
            if rep.timing_digest is None:
                continue
            seen = first.setdefault(rep.timing_digest, (leg.name, rep))
            if seen[1] is rep:
                continue
            other_leg, other = seen
            where = "the same leg" if other_leg == leg.name else f"leg {other_leg!r}"
            found.append(finding(
                "EVIDENCE_CORRUPT", "FAIL", f"leg {leg.name!r} rep {rep.rep} has the same per-request timings as rep "
                f"{other.rep} of {where} (lines {other.ref.line} and {rep.ref.line}): duplicated evidence, not a "
                "second measurement", measured={"leg": leg.name, "rep": rep.rep},
                threshold={"duplicate_of": {"leg": other_leg, "rep": other.rep}},
                evidence=[line_evidence(run, other.ref), line_evidence(run, rep.ref)], gate=GATE))
    return GateResult(findings=found)


def missing_rep_numbers(numbered: list[int], show: int = 10) -> tuple[int, list[int]]:
    """How many rep numbers are missing between the first and last of ``numbered`` (sorted, unique),
    and the first ``show`` of them -- counted from adjacent differences, so an absurd rep number never
    sizes anything."""
    missing, shown = 0, list[int]()
    for a, b in zip(numbered, numbered[1:]):
        gap = b - a - 1
        if gap > 0:
            missing += gap
            shown.extend(range(a + 1, min(b, a + 1 + show - len(shown))))
    return missing, shown[:show]


def _line_list(lines: list[int]) -> str:
    return ", ".join(map(str, lines[:5])) + (f", … ({len(lines)} in all)" if len(lines) > 5 else "")


def check_rep_set(run: Path, leg: LegEvidence) -> GateResult[None]:
    """One leg's bench file as a whole: its rep numbers have no gaps (a lost, deleted or spliced line), its
    usable reps carry the standard arrays (absent, the metrics they feed are silently underivable), and it
    has one writer (a line without ``schema_version`` among the harness's, or in a file a verified seal
    chain sealed as the harness's, would escape the harness schema, the contention sample and the clock)."""
    found = []
    rel = str(leg.bench_path.relative_to(run)) if leg.bench_path is not None and leg.bench_path.is_relative_to(run) \
        else f"legs/{leg.name}/bench_runs.jsonl"
    missing, shown = missing_rep_numbers(leg.rep_numbers)
    if missing:
        found.append(finding("EVIDENCE_MISSING", "FLAG", f"leg {leg.name!r} has reps {leg.rep_numbers[:20]!r}: "
                             f"{missing} rep(s) between them are missing, e.g. {shown!r} (a lost, deleted or spliced "
                             "line)", measured=leg.rep_numbers[:20], threshold="consecutive rep numbers",
                             evidence=[EvidenceRef(file=rel)], action="remeasure", gate=GATE))
    for array, lines in leg.absent_arrays.items():
        found.append(finding("EVIDENCE_MISSING", "FLAG", f"leg {leg.name!r}: {len(lines)} rep(s) (lines "
                             f"{_line_list(lines)}) have no {array!r} array, so "
                             f"{STANDARD_ARRAYS.get(array) or HARNESS_ARRAYS[array]} cannot be re-derived and the "
                             "gates that use them cannot check them", evidence=[EvidenceRef(file=rel, line=lines[0])],
                             action="remeasure", gate=GATE))
    found += _one_writer(run, leg)
    return GateResult(findings=found)


def _one_writer(run: Path, leg: LegEvidence) -> list[Finding]:
    harness = [r for r in leg.reps if r.schema_version is not None]
    foreign = [r for r in leg.reps if r.schema_version is None]
    if harness and foreign:
        return [finding("EVIDENCE_CORRUPT", "FAIL", f"bench_runs of leg {leg.name!r} mixes {len(harness)} harness-"
                        f"written line(s) with {len(foreign)} foreign-format line(s) (no schema_version), e.g. line "
                        f"{foreign[0].ref.line}: one file has one writer",
                        measured={"harness": len(harness), "foreign": len(foreign)},
                        evidence=[line_evidence(run, harness[0].ref), line_evidence(run, foreign[0].ref)], gate=GATE)]
    if foreign and leg.lines_sealed:
        return [finding("EVIDENCE_CORRUPT", "FAIL", f"bench_runs of leg {leg.name!r}: the run's verified seal chain "
                        f"sealed its lines as the harness's, yet {len(foreign)} line(s) (e.g. line "
                        f"{foreign[0].ref.line}) carry no schema_version: judged as a foreign file's they would escape "
                        "the harness schema, the contention sample and the rep clock", measured={"foreign": len(foreign)},
                        threshold="schema_version on every sealed line", evidence=[line_evidence(run, foreign[0].ref)],
                        gate=GATE)]
    return []


# ------------------------------------------------------------------ the LoadGen folders the reps name


def check_named_folders(run: Path, legs: list[LegEvidence], sealed: bool) -> GateResult[None]:
    """Every LoadGen folder a rep's line names (``loadgen.dir``) exists inside the run, or evidence was
    removed (EVIDENCE_MISSING, FAIL). The harness keeps LoadGen's logs of every rep it writes a line
    for, so a harness line's folder is always decided, sealed run or not. A foreign line naming one is
    decided where the run shows it keeps them (sealed, or another named folder exists); otherwise it is
    listed as not checked. Each named folder lies under its own leg's and is named once (EVIDENCE_CORRUPT,
    FAIL); a harness line of a leg LoadGen scheduled names one (EVIDENCE_MISSING, FLAG)."""
    legs = list({leg.name: leg for leg in legs}.values())
    named: list[tuple[LegEvidence, RepMetrics, bool]] = []
    for leg in legs:
        for rep in leg.reps:
            if rep.loadgen_dir is not None:
                named.append((leg, rep, _folder_inside(run, rep.loadgen_dir)))
    absent = [(leg, rep) for leg, rep, there in named if not there]
    found = _misplaced_folders(run, legs) + _unnamed_folders(run, legs)
    if not absent:
        return GateResult(findings=found)
    if not sealed and len(absent) == len(named) and all(rep.schema_version is None for _, rep in absent):
        return GateResult(findings=found, not_checked=[
            f"LoadGen logs: the {len(named)} folder(s) the reps name are all absent from this unsealed run, so "
            "LoadGen's own logs cannot be held against the lines"])
    for leg, rep in absent[:MAX_NAMED]:
        found.append(finding("EVIDENCE_MISSING", "FAIL", f"leg {leg.name!r} rep {rep.rep} names LoadGen folder "
                             f"{rep.loadgen_dir!r}, which is not in the run" + (" (the run is sealed)" if sealed else
                             " (the harness keeps every rep's LoadGen logs)" if rep.schema_version is not None
                             else " while other reps' folders are") + ": evidence a record names was removed",
                             measured=rep.loadgen_dir, threshold="an existing folder inside the run",
                             evidence=[line_evidence(run, rep.ref)], gate="evidence"))
    return GateResult(findings=found)


MAX_NAMED = 25


def _misplaced_folders(run: Path, legs: list[LegEvidence]) -> list[Finding]:
    """A rep's LoadGen folder lies under its own leg's folder (``legs/<leg>/loadgen/...``) and no other rep
    names it: a line naming another leg's (or rep's) logs borrows a witness that never saw its requests
    (EVIDENCE_CORRUPT, FAIL; found by the field explorer)."""
    owners: dict[str, tuple[LegEvidence, RepMetrics]] = {}
    found = []
    for leg in legs:
        for rep in leg.reps:
            if rep.loadgen_dir is None:
                continue
            name = posixpath.normpath(rep.loadgen_dir)
            first = owners.setdefault(name, (leg, rep))
            shared = first[1] is not rep
            if not shared and name.startswith(f"legs/{leg.name}/loadgen/"):
                continue
            why = (f"rep {first[1].rep} of leg {first[0].name!r} names it too" if shared
                   else f"it is not under the leg's own folder legs/{leg.name}/loadgen/")
            found.append(finding("EVIDENCE_CORRUPT", "FAIL", f"leg {leg.name!r} rep {rep.rep} names LoadGen folder "
                                 f"{rep.loadgen_dir!r}, but {why}: its LoadGen logs are not this rep's witness",
                                 measured=rep.loadgen_dir, threshold=f"a folder under legs/{leg.name}/loadgen/ "
                                 "named by one rep", evidence=[line_evidence(run, rep.ref)], action="eject",
                                 gate="evidence"))
    return found[:MAX_NAMED]


def _scheduled_by_loadgen(leg: LegEvidence) -> bool:
    """The leg's lines show LoadGen scheduled its reps: a rep names a LoadGen folder or records LoadGen's
    settings. A ``loadgen/`` folder alone does not: harness lines of an earlier version kept the logs without
    naming them (proof/fixtures/int-wl-loadgen-log-agrees)."""
    return any(r.loadgen_dir is not None or any(k.startswith("loadgen.") for k in r.workload) for r in leg.reps)


def _unnamed_folders(run: Path, legs: list[LegEvidence]) -> list[Finding]:
    """A harness line in a leg LoadGen scheduled names its rep's LoadGen folder: the harness writes it for
    every such rep, so a line without one hides its second witness (EVIDENCE_MISSING, FLAG; found by the
    field explorer)."""
    found = []
    for leg in legs:
        unnamed = [r for r in leg.reps if r.schema_version is not None and r.loadgen_dir is None]
        if unnamed and _scheduled_by_loadgen(leg):
            found.append(finding("EVIDENCE_MISSING", "FLAG", f"leg {leg.name!r}: {len(unnamed)} harness rep(s) "
                                 f"(lines {', '.join(str(r.ref.line) for r in unnamed[:5])}) name no LoadGen folder "
                                 "in a leg LoadGen scheduled: their lines cannot be held against LoadGen's logs",
                                 measured=[r.rep for r in unnamed[:MAX_NAMED]], threshold="loadgen.dir on every rep",
                                 evidence=[line_evidence(run, unnamed[0].ref)], action="remeasure", gate="evidence"))
    return found


def _folder_inside(run: Path, name: str) -> bool:
    """``name`` (relative to the run) is a real directory inside the run, reached without links out."""
    if not name or "\x00" in name or os.path.isabs(name):
        return False
    path = (run / name)
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        return False
    return resolved.is_relative_to(run.resolve()) and resolved.is_dir() and not path.is_symlink()
