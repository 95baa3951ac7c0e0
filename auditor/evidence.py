"""Load a run directory into typed evidence; the loader only reads.

What it meets while reading -- a file refused, a line that does not parse, a rep its arrays cannot
support -- it states as a fact (:class:`ReadProblem`, never a crash); the reading gate
(``gates/reading.py``) makes each fact a finding by the evidence model's ``reading`` table, and what
the loaded reps show together (their clock, their numbering, their writer) is judged there too. The
loader records the sha256 of every file it reads (the verdict's ``input_digests``) and builds
``EvidenceRef``s that point at exact lines: a JSONL record's line, the line of a key inside a
pretty-printed JSON file, a server-log line.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from perfwarden.auditor import bench_extras
from perfwarden.auditor.loadgen_logs import LoadgenRep, read_rep_logs
from perfwarden.auditor.rederive import RepError, RepMetrics, rederive_rep
from perfwarden.auditor.serverlog import ServerLog, scan_server_log
from perfwarden.formats.jsonl import (CITE_HEAD_BYTES, BenchRunLine, LineIssue, LineRef, OpBenchLine, OutputLine,
                                      ProfileLine, ReadReport, iter_jsonl, read_jsonl)
from perfwarden.formats.objective import RunObjective
from perfwarden.formats.records import (QUALITY_ITEMS_FIELDS, EvidenceRef, LegSpec, QualityEval, RunDir,
                                        shadowing_fields, unknown_fields, wrong_types)
from perfwarden.formats.safe_read import (BENCH_LINE_BYTES, LINE_BYTES, LOG_LINE_CHARS, PROFILE_LINE_BYTES,
                                          RECORD_BYTES, TEXT_BYTES, RefusedInput, check_regular, exists, iter_chunks,
                                          read_bytes)
from perfwarden.formats.slo import GoodputSlo
from perfwarden.formats.strict_json import StrictJsonError, loads

_EXCERPT = 200
assert _EXCERPT <= CITE_HEAD_BYTES  # an excerpt is cut from the bytes a cited line keeps
QUALITY_EXTRAS = frozenset({
    "errors", "error_rate", "max_error_rate", "correct", "model", "endpoint", "prompt_template", "few_shot",
    "item_set_version", "item_set_sha256", "max_tokens", "temperature", "started_at", "duration_s", "items",
    "method", "endpoint_unavailable", "text_sha256", "mean_nll"})
"""Fields beyond ``QualityEval``'s schema that the harness's evals write (``harness/quality.py``
``evaluate_qa``/``evaluate_ppl``); any other field is not the harness's, and the record is corrupt."""
LOG_CHUNK = 256 << 10
"""Bytes of a server log read at a time (what one pass holds, a few times over, while it reads)."""
# Per-request arrays every sglang/vLLM bench file carries but rederive can do without: absent, the
# metrics they feed are silently underivable, so their absence is reported (FLAG: a gate cannot decide).
STANDARD_ARRAYS = {"itls": "ITL metrics (and e2e/TPOT when there is no 'latencies' array)",
                    "input_lens": "total throughput and prefix-cache hit rates"}
# Per-request arrays perfwarden's harness writes on every line (schema_version set): a harness line
# without one lost it after writing, and the checks it feeds (each latency against its TTFT and gaps, the
# request timeline inside the rep) would silently not be made (found by the red team's field explorer).
HARNESS_ARRAYS = {"latencies": "each request's latency against its TTFT and gaps, and e2e/TPOT as measured",
                   "request_starts": "the request timeline inside the rep's duration"}

T = TypeVar("T")


def line_evidence(run: Path, ref: LineRef) -> EvidenceRef:
    """Evidence for one JSONL record: file, line, sha256 of the line's bytes and a short excerpt -- from
    what the loader took as it read the line (``cite``): gates judge loaded evidence and never open a
    file again. A line this loader did not read has nothing to cite (``ValueError``: the gate degrades)."""
    if ref.digest is None or ref.head is None:
        raise ValueError(f"line {ref.line} of {ref.path.name!r} was not read by the evidence loader: nothing to cite")
    return EvidenceRef(file=_rel(run, ref.path), line=ref.line, sha256=ref.digest,
                       excerpt=ref.head[:_EXCERPT].decode("utf-8", "replace"))


def _rel(run: Path, path: Path) -> str:
    """``path`` relative to the run as it was named (a link out is still cited by its place in the run),
    else as resolved, else as given."""
    return _rel_cached(str(run), str(path))


@functools.lru_cache(maxsize=4096)
def _rel_cached(run: str, path: str) -> str:
    try:
        return str(Path(os.path.abspath(path)).relative_to(os.path.abspath(run)))
    except ValueError:
        pass
    try:
        return str(Path(path).resolve().relative_to(Path(run).resolve()))
    except (ValueError, OSError, RuntimeError):
        return str(path)


@dataclass(frozen=True)
class ReadProblem:
    """One thing the loader met while reading, stated as a fact. ``kind`` is a row of the evidence model's
    ``reading`` table, which says what it becomes in the verdict (``gates/reading.py``)."""

    kind: str
    message: str
    evidence: tuple[EvidenceRef, ...] = ()
    measured: Any = None
    threshold: Any = None


@dataclass(frozen=True)
class ForeignFields:
    """The fields a foreign bench file's lines hold beyond the bench schema, and the first line holding one."""

    what: str
    names: frozenset[str]
    line: int


@dataclass
class TextFile:
    """A small text file held as lines, with its digest, so findings can cite any line."""

    path: Path
    lines: list[str]
    sha256: str
    utf8: bool = True
    """False when the bytes were not valid UTF-8 (the lines then hold replacement characters)."""

    def evidence(self, run: Path, line_no: int | None) -> EvidenceRef:
        if line_no is None or not 1 <= line_no <= len(self.lines):
            return EvidenceRef(file=_rel(run, self.path), sha256=self.sha256)
        text = self.lines[line_no - 1]
        return EvidenceRef(file=_rel(run, self.path), line=line_no,
                           sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                           excerpt=text[:_EXCERPT])

    def key_line(self, key: str) -> int | None:
        """Line of ``"key":`` in a pretty-printed JSON file (first match)."""
        needle = f'"{key}"'
        for i, text in enumerate(self.lines, 1):
            if needle in text:
                return i
        return None


@dataclass
class LegEvidence:
    """Everything raw about one leg."""

    name: str
    spec: LegSpec | None = None
    spec_file: TextFile | None = None
    server_info: dict[str, Any] | None = None
    server_info_file: TextFile | None = None
    log: ServerLog | None = None
    """What one pass over ``server.log`` found for the gates (``serverlog.scan_server_log``)."""
    reps: list[RepMetrics] = field(default_factory=list)
    bench_path: Path | None = None
    outputs: list[tuple[LineRef, OutputLine]] | None = None
    torn_tail: bool = False
    """The bench file ends in an unfinished line (a writer interrupted mid-rep)."""
    corrupt_reps: int = 0
    """Lines of the bench file that were not usable reps (corrupt, incomplete, duplicated numbers)."""
    loadgen_issued: dict[int, tuple[int, EvidenceRef]] = field(default_factory=dict)
    """Rep -> samples LoadGen's own detail log says it issued (with the log line), where a log exists."""
    loadgen: dict[int, LoadgenRep] = field(default_factory=dict)
    """Rep -> what LoadGen's own logs of it state (the witnesses of the line), where they exist."""
    loadgen_problems: list[str] = field(default_factory=list)
    """LoadGen logs that exist but could not be read (their cross-check is not made)."""
    served: "Served | None" = None
    """Texts its server returned per prompt id, from the bench lines as loaded (None: no prompt ids)."""
    rep_numbers: list[int] = field(default_factory=list)
    """Every rep number the bench file holds (sorted, unique), the reps not used included."""
    absent_arrays: dict[str, list[int]] = field(default_factory=dict)
    """Standard array -> lines of usable reps without it (a harness line's own arrays included)."""
    lines_sealed: bool = False
    """A verified seal chain sealed every line of the bench file as the harness's."""


class RunLoader:
    """Reads raw files of one run directory, caching them and recording digests and what it met."""

    def __init__(self, run: Path, log_ops: tuple[str, ...] = (), goodput_slo: GoodputSlo | None = None):
        self.run = Path(run)
        self.log_ops = log_ops
        """Kernel ops whose engagement the claim declares: the one pass over each server log looks for them."""
        self.goodput_slo = goodput_slo
        """The SLO the claim states goodput at: each rep's good requests at it are counted as the rep streams."""
        self.paths = RunDir(run)
        self.problems: list[ReadProblem] = []
        """What reading met, in order (the reading gate judges them)."""
        self.foreign_fields: dict[str, ForeignFields] = {}
        """File (relative to the run) -> the fields its foreign lines hold beyond the bench schema."""
        self.digests: dict[str, str] = {}
        self._legs: dict[str, LegEvidence] = {}
        self._conditions_reported: set[str] = set()
        self._legs_torn: dict[str, bool] = {}
        self._lines_seen = 0
        self._run_started: float | None | bool = False
        """Unix time the run started (run.json), None when unknown; False until read."""
        self._manifest: dict[str, Any] | None = None
        """run.json as an object (None when absent or unreadable: the loader reported why)."""
        self._manifest_read = False
        self.notes: list[str] = []
        """What the loader read but did not check (a foreign file's fields perfwarden does not know)."""
        self.line_sealed: frozenset[str] = frozenset()
        # {file: {byte offset: length}} of the lines a verified seal lists: a read-size hint for the long
        # bench lines (formats/jsonl.iter_raw_lines checks every byte as it would without it).
        self.sealed_line_lengths: dict[str, dict[int, int]] = {}
        """Files (relative to the run) whose every line a *verified* seal chain says the harness appended
        through its own writer, which cannot write a repeated key: their lines skip that scan. A line
        whose bytes differ from the sealed ones is EVIDENCE_TAMPERED (integrity gate) anyway."""

    # ---------------------------------------------------------------- generic
    def _digest(self, path: Path, sha: str) -> None:
        self.digests[_rel(self.run, path)] = sha

    def met(self, kind: str, message: str, evidence: list[EvidenceRef] | tuple[EvidenceRef, ...] = (),
            measured: Any = None, threshold: Any = None) -> None:
        """State one thing reading met (``kind``: a row of the evidence model's ``reading`` table)."""
        self.problems.append(ReadProblem(kind, message, tuple(evidence), measured, threshold))

    def loaded_legs(self) -> list[LegEvidence]:
        """Every leg read so far, in the order it was read."""
        return list(self._legs.values())

    def refused(self, exc: RefusedInput, what: str) -> None:
        """A file that was handed over but must not be read (``safe_read``): fail closed. A link out of
        the run directory is evidence that is not in the run (EVIDENCE_MISSING); a FIFO, a device, a
        directory or a file over its size bound is not evidence at all (EVIDENCE_CORRUPT)."""
        kind = "refused_missing" if exc.reason in ("missing", "outside") else "refused"
        message = str(exc) if str(exc).startswith(what) else f"{what}: {exc}"
        self.met(kind, message, [EvidenceRef(file=_rel(self.run, exc.path))])

    def unreadable(self, path: Path, what: str, exc: OSError) -> None:
        """A file that is there but could not be read (an I/O error): its evidence is missing; fail closed."""
        self.met("unreadable", f"cannot read {what} {_rel(self.run, path)!r}: {exc}",
                 [EvidenceRef(file=_rel(self.run, path))])

    def present(self, path: Path, required: bool, what: str, missing: str | None = None) -> bool:
        """Whether ``path`` is a regular file inside the run that may be read. Absent: a finding only
        when ``required`` (``missing`` is its message). Present but not readable evidence -- a link
        out, a FIFO, a device, a directory -- is always a FAIL finding, required or not: something was
        handed over in the evidence's place."""
        if not exists(path):
            if required:
                self.met("missing", missing or f"{what} {_rel(self.run, path)!r} is missing",
                         [EvidenceRef(file=_rel(self.run, path))])
            return False
        try:
            check_regular(path, self.run, what)
        except RefusedInput as exc:
            self.refused(exc, what)
            return False
        return True

    def text(self, path: Path, required: bool, what: str, limit: int = TEXT_BYTES) -> TextFile | None:
        """Read a text file of at most ``limit`` bytes; a missing required file is EVIDENCE_MISSING
        (fail closed), and so is anything ``present`` refuses."""
        data = self._bytes(path, required, what, limit)
        return None if data is None else self._text_file(path, data)

    def _bytes(self, path: Path, required: bool, what: str, limit: int) -> bytes | None:
        if not self.present(path, required, what):
            return None
        try:
            return read_bytes(path, self.run, limit=limit, what=what)
        except RefusedInput as exc:
            self.refused(exc, what)
        except OSError as exc:
            self.unreadable(path, what, exc)
        return None

    def _text_file(self, path: Path, data: bytes) -> TextFile:
        sha = hashlib.sha256(data).hexdigest()
        self._digest(path, sha)
        try:
            return TextFile(path, data.decode("utf-8").splitlines(), sha)
        except UnicodeDecodeError:
            return TextFile(path, data.decode("utf-8", "replace").splitlines(), sha, utf8=False)

    def server_log(self, path: Path, what: str) -> ServerLog | None:
        """Read a server log once, streaming, into what every gate needs from it (never its lines).
        A line over ``LOG_LINE_CHARS`` is EVIDENCE_CORRUPT and the log is read only up to it, cut at
        the bound: the verdict is a FAIL anyway, and the gates never scan megabytes of one line."""
        if not self.present(path, False, what):
            return None
        try:
            log = scan_server_log(iter_chunks(path, self.run, limit=TEXT_BYTES, what=what, chunk=LOG_CHUNK),
                                  _rel(self.run, path), self.log_ops, LOG_LINE_CHARS)
        except RefusedInput as exc:
            self.refused(exc, what)
            return None
        except OSError as exc:
            self.unreadable(path, what, exc)
            return None
        self._digest(path, log.sha256)
        long = log.long_line
        if long is not None:
            self.met("long_log_line", f"{what} {log.file!r} line {long.line} is {long.chars:,} characters, over "
                     f"the {LOG_LINE_CHARS:,}-character bound for one log line: the log is not read past it",
                     [EvidenceRef(file=log.file, line=long.line, sha256=long.sha256, excerpt=long.excerpt)],
                     measured=long.chars, threshold=LOG_LINE_CHARS)
        return log

    def json_object(self, path: Path, required: bool, what: str,
                    limit: int = RECORD_BYTES) -> tuple[dict[str, Any] | None, TextFile | None]:
        data = self._bytes(path, required, what, limit)
        if data is None:
            return None, None
        tf = self._text_file(path, data)
        if not tf.utf8:
            # Replacement characters would make two different damaged values compare equal.
            self.met("not_utf8", f"{what} {_rel(self.run, path)!r} is not valid UTF-8", [tf.evidence(self.run, None)])
            return None, tf
        try:  # the bytes as written: lines re-joined would be a copy, and lose a raw U+2028 in a string
            obj = loads(data, what=f"{what} {_rel(self.run, path)!r}")
        except StrictJsonError as exc:
            self.met("not_json", f"{what} {_rel(self.run, path)!r} is not valid JSON: {exc}",
                     [tf.evidence(self.run, None)])
            return None, tf
        if not isinstance(obj, dict):
            self.met("not_json", f"{what} {_rel(self.run, path)!r} is not a JSON object", [tf.evidence(self.run, None)])
            return None, tf
        return obj, tf

    def report_issues(self, issues: list[LineIssue], what: str) -> None:
        """Each line issue as a fact (torn tail, corrupt, missing); a foreign file's fields beyond the
        schema are recorded per file (``foreign_fields``: the reading gate asks the model what they are)."""
        foreign = {name for issue in issues if issue.kind == "foreign_fields" for name in issue.message.split(", ")}
        if foreign:
            rel = _rel(self.run, issues[0].ref.path)
            first = next(i.ref for i in issues if i.kind == "foreign_fields")
            self.foreign_fields[rel] = ForeignFields(what, frozenset(foreign), first.line)
        for issue in issues:
            if issue.kind == "foreign_fields":
                continue
            # A line over its size bound was hashed while skipped (never re-read); others are short.
            sha = issue.sha256 or (hashlib.sha256(issue.ref.raw()).hexdigest() if issue.ref.length else None)
            ev = [EvidenceRef(file=_rel(self.run, issue.ref.path), line=issue.ref.line or None, sha256=sha)]
            kind = issue.kind if issue.kind in ("torn_tail", "empty_file", "missing_field") else "corrupt_line"
            self.met(kind, f"{what}: {issue.message}", ev)

    # ---------------------------------------------------------------- legs
    def leg(self, name: str, need_outputs: bool = False, need_conditions: bool = False) -> LegEvidence:
        """Load a leg once. ``need_conditions``: its server_info is required (patch/bundle compare
        conditions); otherwise a foreign benchmark file without one still audits."""
        if name in self._legs:
            leg = self._legs[name]
        else:
            leg = self._load_leg(name)
            self._legs[name] = leg
        if need_conditions and leg.server_info is None and name not in self._conditions_reported:
            self._conditions_reported.add(name)
            path = self.paths.server_info(name)
            if leg.server_info_file is None:
                self.met("server_info_missing", f"server_info of {name!r} is missing: conditions cannot be compared",
                         [EvidenceRef(file=_rel(self.run, path))])
        if need_outputs and leg.outputs is None:
            leg.outputs = self._load_outputs(name)
            if leg.outputs is None and leg.served is not None and leg.served.positional:
                leg.outputs = served_dump(leg.served)
                self.notes.append(f"parity dump of {name!r}: no outputs.jsonl; the texts its foreign benchmark "
                                  "recorded as served (generated_texts, named by request position and input length) "
                                  "stand in for it")
        return leg

    def _load_leg(self, name: str) -> LegEvidence:
        leg = LegEvidence(name)
        leg_dir = self.paths.leg_dir(name)
        if not _plain_name(name):
            self.met("missing", f"leg name {name!r} is not a directory name under legs/: evidence outside the run "
                     "directory is not read", [EvidenceRef(file="legs")])
            return leg
        if not leg_dir.is_dir():
            self.met("missing", f"leg {name!r} has no directory {_rel(self.run, leg_dir)!r}",
                     [EvidenceRef(file=_rel(self.run, leg_dir))])
            return leg
        spec_obj, leg.spec_file = self.json_object(self.paths.leg_spec(name), False, f"leg spec of {name!r}")
        if spec_obj is not None and leg.spec_file is not None:  # json_object returns both or no object
            try:
                leg.spec = LegSpec.model_validate(spec_obj)
                self._refuse_wrong_types(LegSpec, spec_obj, f"leg spec of {name!r}", leg.spec_file)
                unknown = unknown_fields(leg.spec)
                if unknown:
                    self.met("unknown_fields", f"leg spec of {name!r} has field(s) its schema does not have: "
                             f"{', '.join(unknown[:8])} (the harness never writes them)",
                             [leg.spec_file.evidence(self.run, leg.spec_file.key_line(unknown[0].rsplit('.', 1)[-1]))])
            except ValidationError as exc:
                self.met(_invalid_kind(exc), f"leg spec of {name!r} is invalid: {exc.errors()[0]['msg']} at "
                         f"{exc.errors()[0]['loc']!r}", [leg.spec_file.evidence(self.run, None)])
        leg.server_info, leg.server_info_file = self.json_object(self.paths.server_info(name), False,
                                                                 f"server_info of {name!r}")
        leg.log = self.server_log(self.paths.server_log(name), f"server log of {name!r}")
        leg.bench_path = self.paths.bench_runs(name)
        lines_before = self._lines_seen
        served = ServedReader()
        leg.reps = self._load_reps(leg, leg.bench_path, served)
        leg.served = served.result()
        leg.torn_tail = self._legs_torn.get(name, False)
        leg.corrupt_reps = max(self._lines_seen - lines_before - len(leg.reps), 0)
        leg.loadgen, leg.loadgen_problems = self._loadgen_counts(name, leg.reps)
        leg.loadgen_issued = {k: r.issued for k, r in leg.loadgen.items() if r.issued is not None}
        leg.lines_sealed = _rel(self.run, leg.bench_path) in self.line_sealed
        return leg

    # ---------------------------------------------------------------- consistency across reps
    def manifest(self) -> dict[str, Any] | None:
        """run.json as an object, read once (None when absent or unreadable; an unreadable one is reported)."""
        if not self._manifest_read:
            self._manifest_read = True
            self._manifest = self.json_object(self.paths.manifest, False, "run manifest")[0] \
                if exists(self.paths.manifest) else None
        return self._manifest

    def objective(self) -> RunObjective | None:
        """``objective.json``, the run's sealed objective (None when absent: the run recorded none; or not a
        valid record, which is EVIDENCE_CORRUPT, FAIL: an objective nobody can read vouches for no SLO)."""
        if not exists(self.paths.objective):
            return None
        obj, tf = self.json_object(self.paths.objective, False, "run objective")
        if obj is None or tf is None or self._refuse_wrong_types(RunObjective, obj, "run objective", tf):
            return None
        try:
            record = RunObjective.model_validate(obj)
        except ValidationError as exc:
            self.met(_invalid_kind(exc), f"run objective is invalid: {exc.errors()[0]['msg']}",
                     [tf.evidence(self.run, None)])
            return None
        unknown = unknown_fields(record)
        if unknown:
            self.met("unknown_fields", f"run objective has field(s) its schema does not have: {', '.join(unknown[:8])}",
                     [tf.evidence(self.run, None)])
            return None
        return record

    def run_target(self) -> str | None:
        """The serving target run.json names (the harness writes it in every run); None when it names none."""
        target = (self.manifest() or {}).get("target")
        return target if isinstance(target, str) else None

    def run_started(self) -> float | None:
        """Unix time the run started, from run.json's ``started_at`` (None when absent or unreadable)."""
        if self._run_started is False:
            self._run_started = None
            obj = self.manifest()
            if obj is not None:
                stamp = obj.get("started_at")
                if isinstance(stamp, str):
                    try:
                        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
                        if parsed.tzinfo is None:
                            parsed = parsed.replace(tzinfo=timezone.utc)
                        self._run_started = parsed.timestamp()
                    except ValueError:
                        self._run_started = None
        return self._run_started

    def _loadgen_counts(self, leg: str, reps: list[RepMetrics]) -> tuple[dict[int, LoadgenRep], list[str]]:
        """What LoadGen's own logs say of each rep (``legs/<leg>/loadgen/rep-<k>/``), where they exist
        (one folder per rep at most: bounded by the reps already read)."""
        logs: dict[int, LoadgenRep] = {}
        problems: list[str] = []
        for rep in reps:
            folder = self.paths.loadgen_rep(leg, rep.rep)
            record = read_rep_logs(self.run, folder, _rel(self.run, folder))
            for path, sha in record.digests.items():
                self._digest(path, sha)
            problems += record.problems
            if record.issued is not None or record.detail or record.summary:
                logs[rep.rep] = record
        return logs, problems

    def _load_reps(self, leg: LegEvidence, path: Path, served: "ServedReader") -> list[RepMetrics]:
        """Stream bench_runs.jsonl, re-deriving each rep and dropping its arrays (memory stays flat);
        ``served`` takes each decoded line's served texts in the same pass. The rep numbers read and the
        arrays absent from usable reps are recorded on ``leg``."""
        name = leg.name
        if not self.present(path, True, f"bench_runs of leg {name!r}", f"leg {name!r} has no bench_runs.jsonl"):
            return []
        issues: list[LineIssue] = []
        digest = hashlib.sha256()
        reps: list[RepMetrics] = []
        seen: dict[int, RepMetrics] = {}
        absent: dict[str, list[int]] = {}
        index = -1
        # The cyclic GC is paused while lines stream: decoding one rep allocates tens of thousands of
        # lists (one per request's gaps), and every generation-0 collection would walk them all again
        # (~11% of a bare parse, measured with callgrind). Decoded lines hold no reference cycles, so
        # reference counting frees them as before; the GC's previous state is restored after.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            # No enumerate(): it keeps the previous item alive while the next line is read, i.e. two
            # reps' decoded arrays at once. Here ``line`` is dropped before the next read.
            for ref, line in iter_jsonl(path, BenchRunLine, issues, digest, self.run, BENCH_LINE_BYTES,
                                        check_keys=_rel(self.run, path) not in self.line_sealed, cite=True,
                                        line_lengths=self.sealed_line_lengths.get(_rel(self.run, path))):
                index += 1
                self._lines_seen += 1
                served.add(ref, line)
                claimed_leg, rep, error = line.leg, None, None
                if claimed_leg is None or claimed_leg == name:
                    try:
                        rep = rederive_rep(line, ref, name, index)
                        rep.goodput = bench_extras.rep_goodput(line, ref, self.goodput_slo)
                        rep.stated = bench_extras.stated_run(line, ref)
                    except RepError as exc:
                        error = exc
                    else:
                        for array in (*STANDARD_ARRAYS, *(HARNESS_ARRAYS if line.schema_version is not None else ())):
                            if getattr(line, array) is None:
                                absent.setdefault(array, []).append(ref.line)
                del line
                if claimed_leg is not None and claimed_leg != name:
                    self.met("leg_mismatch", f"line {ref.line} says leg {claimed_leg!r} but lives in leg {name!r}",
                             [line_evidence(self.run, ref)])
                    continue
                if error is not None:
                    for kind, message in error.problems:
                        message = message.removeprefix(f"line {ref.line}: ")
                        self.met("rep_unusable_missing" if kind == "missing" else "rep_unusable",
                                 f"leg {name!r} rep at line {ref.line}: {message}", [line_evidence(self.run, ref)])
                    continue
                if rep is None:  # a line of another leg, reported above
                    continue
                if rep.rep in seen:
                    first = seen[rep.rep]
                    same = first.ref.raw() == ref.raw()
                    self.met("duplicate_rep_identical" if same else "duplicate_rep",
                             f"leg {name!r} rep {rep.rep} appears twice (lines {first.ref.line} and {ref.line})"
                             + ("; identical, counted once" if same else "; they differ, so neither is trusted"),
                             [line_evidence(self.run, first.ref), line_evidence(self.run, ref)])
                    if not same:
                        reps = [r for r in reps if r.rep != rep.rep]
                    continue
                seen[rep.rep] = rep
                reps.append(rep)
        except RefusedInput as exc:
            self.refused(exc, f"bench_runs of leg {name!r}")
            return []
        except OSError as exc:
            self.unreadable(path, f"bench_runs of leg {name!r}", exc)
            return []
        finally:
            if gc_was_enabled:
                gc.enable()
        self._digest(path, digest.hexdigest())
        self.report_issues(issues, f"bench_runs of leg {name!r}")
        self._legs_torn[name] = any(issue.kind == "torn_tail" for issue in issues)
        leg.rep_numbers = sorted(seen)
        leg.absent_arrays = absent
        return reps

    def _refuse_wrong_types(self, model: type, obj: dict[str, Any], what: str, tf: TextFile | None) -> bool:
        """A harness record holding a field of another JSON type than its schema's is corrupt:
        pydantic would coerce ``"0.5"`` to a number and ``1`` to ``True``, so two readers would disagree."""
        wrong = wrong_types(model, obj)
        if wrong:
            self.met("wrong_types", f"{what} has field(s) of the wrong type: {', '.join(wrong[:8])} (the harness "
                     "never writes them so)", [tf.evidence(self.run, tf.key_line(wrong[0].split('.')[0]))] if tf else [],
                     measured=wrong[:8])
        return bool(wrong)

    def _load_outputs(self, name: str) -> list[tuple[LineRef, OutputLine]] | None:
        path = self.paths.outputs(name)
        if not self.present(path, False, f"outputs of leg {name!r}"):
            return None
        report = read_jsonl(path, OutputLine, root=self.run, cite=True)
        self._digest(path, report.sha256)
        self.report_issues(report.issues, f"outputs of leg {name!r}")
        return report.records

    # ---------------------------------------------------------------- other raw files
    def jsonl(self, path: Path, schema: type[T], what: str,
              max_line: int = LINE_BYTES) -> list[tuple[LineRef, T]] | None:
        if not self.present(path, True, what):
            return None
        report: ReadReport[T] = read_jsonl(path, schema, root=self.run, max_line=max_line, cite=True)
        self._digest(path, report.sha256)
        self.report_issues(report.issues, what)
        return report.records

    def opbench(self, rel_path: str) -> list[tuple[LineRef, OpBenchLine]] | None:
        return self.jsonl(self._inside(rel_path), OpBenchLine, "op benchmark")

    def profile(self) -> list[tuple[LineRef, ProfileLine]] | None:
        return self.jsonl(self.paths.profile, ProfileLine, "profile", PROFILE_LINE_BYTES)

    def quality(self, eval_id: str, leg: str | None = None) -> tuple[QualityEval | None, TextFile | None]:
        path = self.paths.quality(eval_id, leg)
        if leg and not exists(path):
            path = self.paths.quality(eval_id)
        obj, tf = self.json_object(path, False, f"quality eval {eval_id!r}")
        if obj is None or tf is None:  # json_object returns both or no object
            return None, tf
        try:
            record = QualityEval.model_validate(obj)
        except ValidationError as exc:
            self.met(_invalid_kind(exc), f"quality eval {eval_id!r} is invalid: {exc.errors()[0]['msg']} at "
                     f"{exc.errors()[0]['loc']!r}", [tf.evidence(self.run, None)])
            return None, tf
        unknown = sorted(set(record.model_extra or {}) - QUALITY_EXTRAS)
        if unknown:
            self.met("unknown_fields", f"quality eval {eval_id!r} has field(s) neither its schema nor the harness's "
                     f"evals write: {', '.join(unknown[:8])}", [tf.evidence(self.run, tf.key_line(unknown[0]))])
            return None, tf
        wrong = self._refuse_wrong_types(QualityEval, obj, f"quality eval {eval_id!r}", tf)
        shadowing = shadowing_fields(record, also=QUALITY_ITEMS_FIELDS)
        if shadowing:  # its other unknown fields are the harness's extras; these imitate declared ones
            self.met("shadowing", f"quality eval {eval_id!r} has field(s) imitating declared ones (a case variant or a "
                     f"non-ASCII look-alike): {shadowing[:8]!r}", [tf.evidence(self.run, None)] if tf else [])
        return (None if wrong or shadowing else record), tf

    def quality_pair(self, eval_id: str, base: str, cand: str) -> QualityRecords:
        """The candidate's record of ``eval_id``, then the compared baseline's (read only when its file
        exists), for the quality gate to judge."""
        base_path = self.paths.quality(eval_id, base)
        return QualityRecords(self.quality(eval_id, cand),
                              self.quality(eval_id, base) if base_path.is_file() else (None, None), base_path.name)

    def _inside(self, rel_path: str) -> Path:
        """Resolve a path named by a claim, refusing anything outside the run directory."""
        path = (self.run / rel_path).resolve()
        if not path.is_relative_to(self.run.resolve()):
            return self.run / "__outside_run_dir__" / Path(rel_path).name
        return path

    def inside(self, rel_path: str) -> Path:
        return self._inside(rel_path)


def _invalid_kind(exc: ValidationError) -> str:
    """A record that only lacks required fields is missing evidence; anything else is corrupt."""
    return "invalid_missing" if all(e["type"] == "missing" for e in exc.errors()) else "invalid"


def _plain_name(name: str) -> bool:
    """A single path component that stays inside its parent (no separators, no '..', no NUL)."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in ("/", "\\", "\x00"))


# ------------------------------------------------------------------ quality evals


@dataclass(frozen=True)
class QualityRecords:
    """The quality evals a lossy claim rests on, as the loader read them: (record, its file) of the
    candidate and of the compared baseline, and the file name the baseline's record has."""

    cand: tuple[QualityEval | None, TextFile | None] = (None, None)
    base: tuple[QualityEval | None, TextFile | None] = (None, None)
    base_file: str = ""


# ------------------------------------------------------------------ what each server returned


MAX_PROMPT_IDS = 4096
"""Distinct prompt ids remembered per leg (memory stays bounded on million-request files)."""
SERVED_TEXT_CHARS = 16 << 20
"""Characters of served texts held per leg (each distinct text once, for the dump's prefix check); a
further distinct text is counted by its digest alone, so a file of ever-new texts costs digests, not
its texts."""


def served_digest(text: str) -> bytes:
    """The digest a served text is counted by once the held texts reach ``SERVED_TEXT_CHARS``."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


DIGEST_STAND_IN = "\udcff"
"""First character of the text a parity dump made from served texts holds for a text counted only by its
digest: a lone surrogate, which no text a reader decoded can hold (the JSON decoder refuses them), so a
stand-in equals another only when their digests are equal, and never equals a text."""


def digest_stand_in(digest: bytes) -> str:
    """The dump text standing for a served text known only by its digest."""
    return DIGEST_STAND_IN + digest.hex()


def stood_in_digest(text: str) -> bytes | None:
    """The digest a dump text stands for (None for a text)."""
    if not text.startswith(DIGEST_STAND_IN):
        return None
    try:
        return bytes.fromhex(text[len(DIGEST_STAND_IN):])
    except ValueError:
        return None


@dataclass
class Served:
    """What one leg's server returned, per prompt id: the texts (a text held once, or its digest past the
    bound) and the first line serving each."""

    texts: dict[str, Counter[str | bytes]] = field(default_factory=dict)
    first_ref: dict[str, LineRef] = field(default_factory=dict)
    positional: bool = False
    """Keyed by request position, not prompt id: a foreign file (``vllm bench serve --save-detailed``)
    names no prompts, but a benchmark re-run with the same dataset and seed sends them in one order, so
    position and input length name a prompt (a mismatch only makes texts disagree, never agree)."""

    def modal(self, pid: str) -> str | bytes:
        """The text most often returned for ``pid`` (greedy: normally the only one), or its digest when
        it came past the bound."""
        return self.texts[pid].most_common(1)[0][0]


@dataclass
class ServedReader:
    """Texts served per prompt id, taken from each bench line as the evidence loader decodes it.

    Why in the loader's pass: a second read of the file cost a full pass over a million-request file,
    judged bytes that could have changed since the loader hashed them, and skipped every line over the
    generic line bound (a 100k-request rep), so served parity went unchecked on exactly the large runs.
    A writer names its prompts on every line or on none: once a first line names none, later lines are
    not looked at."""

    served: Served = field(default_factory=Served)
    keyed: bool = False
    closed: bool = False
    held_chars: int = 0

    def add(self, ref: LineRef, line: BenchRunLine) -> None:
        """Count the successful requests' texts of one decoded line."""
        if self.closed:
            return
        prompt_ids: list[str | int] | None = line.prompt_ids
        if prompt_ids is None and line.schema_version is None and line.generated_texts is not None:
            prompt_ids = positional_ids(line)
            self.served.positional = True
        if prompt_ids is None or line.generated_texts is None:
            self.closed = not self.keyed
            return
        self.keyed = True
        texts, first_ref = self.served.texts, self.served.first_ref
        errors = line.errors or [None] * len(prompt_ids)
        for pid, text, err in zip(prompt_ids, line.generated_texts, errors):
            if pid is None or text is None or err:
                continue
            key = str(pid)
            if key not in texts:
                if len(texts) >= MAX_PROMPT_IDS:
                    continue
                texts[key] = Counter()
                first_ref[key] = ref
            counter = texts[key]
            if text in counter:
                counter[text] += 1
            elif self.held_chars + len(text) <= SERVED_TEXT_CHARS:
                counter[text] += 1
                self.held_chars += len(text)
            else:
                counter[served_digest(text)] += 1

    def result(self) -> Served | None:
        """The served texts, or None when no line names its prompts."""
        return self.served if self.keyed else None


def positional_ids(line: BenchRunLine) -> list[str | int]:
    """Prompt names for a foreign line that has none: each request's position and input length."""
    lens = line.input_lens
    n = len(line.generated_texts or [])
    return [f"#{i}/{lens[i]}" if lens is not None and i < len(lens) else f"#{i}" for i in range(n)]


def served_dump(served: Served) -> list[tuple[LineRef, OutputLine]]:
    """A leg's parity dump from what its server returned (one line per prompt: its most frequent text),
    each citing the first bench line that served it."""
    dump = []
    for pid in served.texts:
        text = served.modal(pid)
        dump.append((served.first_ref[pid], OutputLine(prompt_id=pid, text=text if isinstance(text, str)
                                                        else digest_stand_in(text))))
    return dump
