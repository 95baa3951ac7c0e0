"""Running the field explorer: re-seal, oracle, blind audit, report, and fixtures for successes.

Each worker process keeps one pristine and one working copy of a base fixture. Per edit it writes the
edited bytes, seals the run again over them with the run's own key (a sealed base), asks the oracle
whether anything the auditor judges changed, audits only those edits, blind, and puts the files back.
Edits are distinct by the bytes they produce (two edits that write the same bytes count once). Work is
split over a process pool by base and stride, so the result does not depend on the pool's size.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfwarden.auditor.audit import ClaimError, audit_path
from perfwarden.formats import seal as seal_mod
from perfwarden.formats.records import EVIDENCE_DIRS, EVIDENCE_FILE, SealHead, write_json_atomic
from perfwarden.verify import field_explorer as fx
from perfwarden.verify import field_explorer_oracle as oracle

SUCCESS_VERDICTS = ("PASS",)
"""An edit that changed what the auditor judges and got one of these (no finding at FLAG or above)."""


# --------------------------------------------------------------------------------------- re-seal


def reseal(run: Path, key_file: Path) -> None:
    """Rebuild ``run``'s seal chain entry by entry over the files as they are now, with the run's own key:
    what a harness that wrote the edited bytes would have sealed. ``cut``/``gone`` entries are kept."""
    key = bytes.fromhex(seal_mod.read_key_file(key_file).key)
    chain = run / EVIDENCE_FILE
    entries = [json.loads(x) for x in chain.read_text("utf-8").splitlines() if x.strip()]
    contents: dict[str, bytes] = {}
    prev, out, mac, seq = seal_mod.GENESIS_MAC, [], seal_mod.GENESIS_MAC, -1
    for entry in entries:
        entry.pop("mac", None)
        entry["prev"] = prev
        rel = entry.get("file")
        if entry.get("kind") in ("file", "line") and isinstance(rel, str) and (run / rel).is_file():
            data = contents.setdefault(rel, (run / rel).read_bytes())
            if entry["kind"] == "file":
                entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)
            else:
                _reline(entry, data)
        line, mac = seal_mod.encode_entry(entry, key)
        out.append(line)
        prev, seq = mac, entry["seq"]
    chain.write_bytes(b"".join(out))
    head = seal_mod.head_path(key_file)
    seal_id = seal_mod.read_key_file(key_file).seal_id
    head.write_text(SealHead(seal_id=seal_id, seq=seq, mac=mac).model_dump_json() + "\n", encoding="utf-8")


def _reline(entry: dict[str, Any], data: bytes) -> None:
    """A ``line`` entry's offset, length, digests and bench metadata for the file's current bytes."""
    lines = data.split(b"\n")
    index = int(entry.get("line") or 1) - 1
    if index >= len(lines) - (1 if data.endswith(b"\n") else 0):
        return  # the line is gone: the entry keeps its old figures and the auditor finds it missing
    offset = sum(len(x) + 1 for x in lines[:index])
    raw = lines[index]
    entry.update(offset=offset, length=len(raw), sha256=hashlib.sha256(raw).hexdigest(), size=offset + len(raw) + 1,
                 file_sha256=hashlib.sha256(data[:offset + len(raw) + 1]).hexdigest())
    if "rep" in entry or "contention" in entry:
        meta = seal_mod.bench_meta(raw)
        for k in ("rep", "contention"):
            if meta.get(k) is None:
                entry.pop(k, None)
            else:
                entry[k] = meta[k]


# -------------------------------------------------------------------------------------- results


@dataclass
class Outcome:
    """One explored edit that changed something the auditor judges (and so was audited)."""

    base: str
    edit: dict[str, Any]
    """The :class:`field_explorer.Edit`'s fields."""
    name: str
    changed: list[str]
    structural: bool = False
    """A harness record no longer shaped as its schema (refused whether or not the run is sealed)."""
    verdict: str | None = None
    codes: list[str] = field(default_factory=list)
    success: bool = False
    fixture: str | None = None

    def kind(self) -> str:
        """The success's class: record type, top-level field, op family (one fixture per class)."""
        return f"{self.edit['record']}:{self.edit['path'][0]}:{self.edit['op'].split(':')[0]}"


@dataclass
class ExplorerReport:
    edits: int = 0
    """Distinct edits applied (by the bytes they produce)."""
    not_applicable: int = 0
    duplicates: int = 0
    unjudged: int = 0
    """Edits the oracle could not read (an edited claim it cannot parse): counted, not audited."""
    audited: int = 0
    """Edits the oracle found changed something the auditor judges (each audited blind)."""
    per_record: dict[str, dict[str, int]] = field(default_factory=dict)
    fields: dict[str, list[str]] = field(default_factory=dict)
    """Per record type: the top-level fields edited."""
    unreached: dict[str, list[str]] = field(default_factory=dict)
    """Per record type: declared fields no explored edit touched (absent from every base, or past the budget)."""
    successes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1
    bases: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        classes: dict[str, dict[str, Any]] = {}
        for o in self.successes:
            row = classes.setdefault(o.kind(), {"count": 0, "example": o.name, "base": o.base, "verdict": o.verdict,
                                                "changed": o.changed, "fixture": None})
            row["count"] += 1
            row["fixture"] = row["fixture"] or o.fixture
        return {"edits": self.edits, "audited": self.audited, "not_applicable": self.not_applicable,
                "duplicates": self.duplicates, "unjudged": self.unjudged, "successes": len(self.successes), "success_classes": classes,
                "seconds": round(self.seconds, 1), "workers": self.workers,
                "edits_per_second": round(self.edits / self.seconds, 1) if self.seconds else None,
                "bases": self.bases, "skipped_bases": self.skipped, "record_types": sorted(self.per_record), "per_record": self.per_record,
                "fields_explored": {k: len(v) for k, v in self.fields.items()}, "unreached_fields": self.unreached}


# -------------------------------------------------------------------------------------- worker


class Worker:
    """A pristine and a working copy of one base; explores edits one at a time on the working copy."""

    def __init__(self, base: fx.ExplorerBase, tmp: Path):
        self.base = base
        self.pristine = tmp / "pristine"
        shutil.copytree(base.fixture, self.pristine, ignore=shutil.ignore_patterns("verdicts"))
        self.work = tmp / "work"
        shutil.copytree(self.pristine, self.work)
        self.run = self.work / "run"
        self.key = self.work / "seal.key" if base.key else None
        self.before = oracle.judge_run(self.run, base.claim)
        self.seen: set[str] = set()

    def _restore(self, rels: list[str]) -> None:
        for rel in rels:
            shutil.copyfile(self.pristine / "run" / rel, self.run / rel)
        if self.key:
            shutil.copyfile(seal_mod.head_path(self.pristine / "seal.key"), seal_mod.head_path(self.key))

    def write(self, edit: fx.Edit) -> tuple[str, list[str]] | None:
        """Write the edited bytes (and seal them again); the digest of what was written and the files touched,
        or None where the edit does not apply. The caller restores with :meth:`_restore`."""
        try:
            new = fx.apply_edit(self.run, self.base, edit)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError):
            return None
        if all((self.pristine / "run" / rel).read_bytes() == data for rel, data in new.items()):
            return None  # the edit writes the bytes already there (a scale that rounds back): no edit at all
        digest = hashlib.sha256(b"".join(k.encode() + b"\0" + v for k, v in sorted(new.items()))).hexdigest()[:20]
        for rel, data in new.items():
            (self.run / rel).write_bytes(data)
        if self.key and edit.record != "seal_entry" and edit.op not in fx.WRITER_CANNOT:
            reseal(self.run, self.key)
        return digest, sorted({*new, *([EVIDENCE_FILE] if self.key else [])})

    def explore(self, edit: fx.Edit) -> tuple[str, Outcome | None]:
        """``("na" | "dup" | "<digest>", outcome)``: an outcome (audited) only where the oracle saw a change."""
        written = self.write(edit)
        if written is None:
            return "na", None
        digest, touched = written
        try:
            if digest in self.seen:
                return "dup", None  # the same bytes as an edit already explored
            self.seen.add(digest)
            try:
                changed = oracle.Judged.changed(self.before, oracle.judge_run(self.run, self._claim(edit)))
            except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError):
                return "unjudged", None  # the oracle cannot read what the edit made: counted, not audited
            structural = fx.is_structural(edit, self._bytes(edit.rel)) and fx.rests_on(self.base.claim, edit.rel)
            if (structural or (edit.record == "seal_entry" and self.key)) and "evidence" not in changed:
                changed.append("evidence")  # strict evidence: not the schema's record; the chain is the evidence set
            if not changed:
                return digest, None
            outcome = Outcome(self.base.name, asdict(edit), edit.name(), changed, structural)
            self._audit(outcome)
            return digest, outcome
        finally:
            self._restore(touched)

    def _bytes(self, rel: str) -> bytes | None:
        path = self.run / rel
        return path.read_bytes() if path.is_file() else None

    def _claim(self, edit: fx.Edit) -> dict[str, Any]:
        if edit.record != "claim":
            return self.base.claim
        try:
            claim = json.loads((self.run / self.base.claim_rel).read_text("utf-8"))
        except ValueError:
            return self.base.claim
        return claim if isinstance(claim, dict) else self.base.claim

    def _audit(self, outcome: Outcome) -> None:
        try:
            verdict = audit_path(self.run, self.run / self.base.claim_rel, key=self.key)
        except ClaimError:
            outcome.verdict = "refused_claim"  # exit 3: an unusable claim, never banked
            return
        except Exception as exc:  # noqa: BLE001 - an auditor crash is a success of the attack
            outcome.verdict, outcome.success = f"crash: {type(exc).__name__}", True
            return
        outcome.codes = sorted({f.code for f in verdict.findings if f.severity != "INFO"})
        outcome.verdict = verdict.verdict + (" degraded" if verdict.degraded else "") + \
            ("" if verdict.seal == "sealed" else " (unsealed)")
        # Unsealed evidence is never banked: there a PASS on an edited number is the seal's
        # absence, not a gate's miss; a record no longer shaped as its schema is refused sealed or not.
        bankable = verdict.seal == "sealed" or outcome.structural
        outcome.success = (verdict.verdict in SUCCESS_VERDICTS and bankable) or bool(verdict.degraded)


def _explore_slice(args: tuple[str, int, int, int | None, int]) -> dict[str, Any]:
    """Worker entry: every ``stride``-th planned edit of one base from ``start``, until ``limit`` distinct ones."""
    fixture, start, stride, limit, seed = args
    base = fx.load_explorer_base(Path(fixture))
    out: dict[str, Any] = {"digests": {}, "na": 0, "dup": 0, "unjudged": 0, "outcomes": []}
    if base is None:
        return out
    with tempfile.TemporaryDirectory(prefix="pw-explore-") as tmp:
        worker = Worker(base, Path(tmp))
        for edit in fx.planned_edits(base, seed)[start::stride]:
            if limit is not None and len(out["digests"]) >= limit:
                break
            status, outcome = worker.explore(edit)
            if status in ("na", "dup", "unjudged"):
                out[status] += 1
                continue
            out["digests"][status] = [edit.record, edit.path[0]]
            if outcome is not None:
                out["outcomes"].append(asdict(outcome))
    return out


def sealed_copy(fixture: Path, dest: Path) -> Path:
    """``fixture`` copied to ``dest`` and sealed the way the harness seals what it writes (bench lines one
    entry each, every other evidence file whole; op bench scratch ``work/`` and verdicts left out), with
    its key beside the run: a real run's records, sealed, for fixtures recorded before sealing."""
    src, run = fixture / "run", dest / "run"
    run.mkdir(parents=True)
    for name in ("run.json", "claims"):
        if (src / name).is_dir():
            shutil.copytree(src / name, run / name)
        elif (src / name).is_file():
            shutil.copyfile(src / name, run / name)
    chain = seal_mod.begin(run, key_file=dest / "seal.key")
    if chain is None:
        raise ValueError(f"{fixture.name}: could not open a seal chain")
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        if rel.parts[0] not in EVIDENCE_DIRS or "work" in rel.parts or "verdicts" in rel.parts:
            continue
        target = run / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        if path.name == "bench_runs.jsonl":
            chain.adopt_lines(target, seal_mod.bench_meta)
        else:
            chain.seal_file(target)
    seal_mod.forget(run)
    return dest


def prepare_bases(fixtures: list[Path], tmp: Path) -> tuple[list[Path], dict[str, str]]:
    """The bases to explore: each fixture as shipped when sealed, else a sealed copy of it where that copy
    audits clean, else the fixture itself (unsealed: only structural edits can succeed there). A base
    whose unedited claim does not PASS is skipped, with why."""
    bases, skipped = [], {}
    for fixture in fixtures:
        base = fx.load_explorer_base(Path(fixture))
        if base is None:
            skipped[Path(fixture).name] = "not a fixture with exactly one claim"
            continue
        options = [Path(fixture)]
        if base.key is None:
            try:
                options.insert(0, sealed_copy(Path(fixture), tmp / Path(fixture).name))
            except (OSError, ValueError, seal_mod.SealError):
                pass
        why = "no option audits clean"
        for option in options:
            key = option / "seal.key"
            verdict = audit_path(option / "run", option / "run" / base.claim_rel, key=key if key.is_file() else None)
            if verdict.verdict == "PASS":
                bases.append(option)
                break
            why = f"not clean: {verdict.verdict} {sorted({f.code for f in verdict.findings if f.severity != 'INFO'})}"
        else:
            skipped[Path(fixture).name] = why
    return bases, skipped


def explore(fixtures: list[Path], edits: int = 10_000, workers: int = 2, seed: int = 0,
            out: Path | None = None) -> ExplorerReport:
    """Explore ``edits`` distinct edits spread evenly over the bases with ``workers`` processes; every
    success class becomes a fixture under ``out`` (its answer written first)."""
    with tempfile.TemporaryDirectory(prefix="pw-explore-bases-") as tmp:
        bases, skipped = prepare_bases(fixtures, Path(tmp))
        report = _explore(bases, edits, workers, seed, out)
        report.skipped = skipped
        return report


def _explore(fixtures: list[Path], edits: int, workers: int, seed: int, out: Path | None) -> ExplorerReport:
    started = time.perf_counter()
    # Headroom: a slice that runs out of edits (a small base) cannot hand its share to another.
    per_job = -(-int(edits * 1.1) // max(1, len(fixtures) * workers)) if edits else None
    jobs = [(str(f), k, workers, per_job, seed) for f in fixtures for k in range(workers)]
    report = ExplorerReport(workers=workers, bases=[Path(f).name + (" (sealed)" if (Path(f) / "seal.key").is_file()
                                                                    else " (unsealed)") for f in fixtures])
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(_explore_slice, jobs))
    else:
        parts = [_explore_slice(j) for j in jobs]
    seen: dict[str, list[str]] = {}
    for (fixture, *_), part in zip(jobs, parts):
        report.not_applicable += part["na"]
        report.unjudged += part["unjudged"]
        report.duplicates += part["dup"]
        for digest, where in part["digests"].items():
            key = f"{Path(fixture).name}:{digest}"
            report.duplicates += key in seen
            seen.setdefault(key, where)
        for o in part["outcomes"]:
            outcome = Outcome(**o)
            report.audited += 1
            row = report.per_record.setdefault(outcome.edit["record"], {"edits": 0, "audited": 0, "successes": 0})
            row["audited"] += 1
            if outcome.success:
                row["successes"] += 1
                report.successes.append(outcome)
    for record, top in seen.values():
        report.per_record.setdefault(record, {"edits": 0, "audited": 0, "successes": 0})["edits"] += 1
        names = report.fields.setdefault(record, [])
        if top not in names:
            names.append(top)
    report.edits = len(seen)
    for name, declared in fx.coverage().items():
        report.unreached[name] = sorted(set(declared) - set(report.fields.get(name, [])))
    if out is not None:
        write_fixtures(report, {Path(f).name: Path(f) for f in fixtures}, Path(out))
    report.seconds = time.perf_counter() - started
    return report


# ------------------------------------------------------------------------------------- fixtures


def write_fixtures(report: ExplorerReport, fixtures: dict[str, Path], out: Path) -> None:
    """One fixture per success class (its first success): the answer key -- FAIL or FLAG, never PASS, from
    the oracle's finding that the edit changed what the auditor judges -- is written before the files it
    judges, and the auditor is not consulted."""
    done: dict[str, str] = {}
    for o in report.successes:
        if o.kind() in done:
            o.fixture = done[o.kind()]
            continue
        base = fx.load_explorer_base(fixtures[o.base])
        if base is None:
            continue
        edit = fx.Edit(o.edit["record"], o.edit["rel"], o.edit["where"], tuple(o.edit["path"]), o.edit["op"])
        digest = hashlib.sha256(f"{o.base}|{o.name}".encode()).hexdigest()[:8]
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in o.kind().replace(":", "-"))[:60]
        name = f"explore-{safe}-{digest}"
        dest = out / name
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        write_json_atomic(dest / "answer_key.json", {
            "schema_version": 1, "frozen": time.strftime("%Y-%m-%d", time.gmtime()),
            "answers": [{"claim": base.claim_rel, "verdict": ["FLAG", "FAIL"], "must_include_any": []}],
            "provenance": f"field explorer (verify/field_explorer.py): edit {o.name!r} of {o.base!r}"
                          + (", sealed again with the run's key" if base.key else ""),
            "rationale": f"The edit changed {', '.join(o.changed)} as the oracle (verify/field_explorer_oracle.py) "
                         "judges it from the files alone, so the claim must not PASS as if nothing changed. Answer "
                         "written before the fixture's files; when the explorer ran, the auditor answered "
                         f"{o.verdict}."})
        with tempfile.TemporaryDirectory(prefix="pw-explore-fixture-") as tmp:
            worker = Worker(base, Path(tmp))
            if worker.write(edit) is None:
                shutil.rmtree(dest)
                continue
            shutil.copytree(worker.run, dest / "run")
            if worker.key:
                shutil.copyfile(worker.key, dest / "seal.key")
                shutil.copyfile(seal_mod.head_path(worker.key), dest / "seal.head")
        o.fixture = done[o.kind()] = name
