"""Running the coherent-forgery explorer: apply, seal again, audit blind, count, and fixtures for successes.

Each worker process keeps a pristine copy of a base and, per forgery, makes a fresh working copy, applies the
forgery, writes a seal chain over it from scratch (what a forger who writes the evidence does), and
audits it blind unless the oracle says it moved everything the evidence model names (consistent: counted,
not audited). A forgery the oracle says must be refused that the auditor PASSes on sealed evidence (or that
crashes or degrades the audit) is a success; each success class becomes a fixture whose answer (FLAG or
FAIL) is written before its files. Forgeries are distinct by the bytes they write; the work is split over a
process pool by stride, so the result does not depend on the pool's size.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfwarden.auditor.audit import audit_path
from perfwarden.auditor.claim_file import ClaimError
from perfwarden.formats.records import write_json_atomic
from perfwarden.verify import forgery as fg
from perfwarden.verify import forgery_more
from perfwarden.verify.forgery_files import seal_again, seal_fresh

FORGERY_BASES = ("seal-rec-clean",)
"""Sealed clean A/B runs recorded on a real target with LoadGen (every witness the model names is there)."""
EXTRA = forgery_more.FAMILIES


@dataclass
class ForgeryOutcome:
    base: str
    name: str
    family: str
    records: list[str]
    why: str
    verdict: str
    codes: list[str]
    fixture: str | None = None

    def kind(self) -> str:
        """The success's class: family and the forgery's kind (one fixture per class)."""
        return f"{self.family}:{self.name.split(':')[0]}"


@dataclass
class ForgeryReport:
    forgeries: int = 0
    """Distinct forgeries made (by the bytes they write)."""
    duplicates: int = 0
    consistent: int = 0
    """Forgeries that moved every witness the model names (undetectable by design once sealed again): counted."""
    audited: int = 0
    successes: list[ForgeryOutcome] = field(default_factory=list)
    per_family: dict[str, int] = field(default_factory=dict)
    per_record: dict[str, int] = field(default_factory=dict)
    """Record type -> distinct forgeries that wrote it."""
    refused_as_expected: Counter[str] = field(default_factory=Counter)
    """Verdicts of the audited forgeries."""
    seconds: float = 0.0
    workers: int = 1
    bases: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        classes: dict[str, dict[str, Any]] = {}
        for o in self.successes:
            row = classes.setdefault(o.kind(), {"count": 0, "example": o.name, "verdict": o.verdict, "why": o.why,
                                                "fixture": None})
            row["count"] += 1
            row["fixture"] = row["fixture"] or o.fixture
        return {"forgeries": self.forgeries, "audited": self.audited, "consistent": self.consistent,
                "duplicates": self.duplicates, "successes": len(self.successes), "success_classes": classes,
                "record_types": sorted(self.per_record), "per_record": dict(sorted(self.per_record.items())),
                "per_family": self.per_family, "verdicts": dict(self.refused_as_expected),
                "seconds": round(self.seconds, 1), "workers": self.workers, "bases": self.bases}


def _digest(run: Path) -> str:
    """What the forgery wrote: every file of the run but the seal chain (rebuilt the same way for all)."""
    h = hashlib.sha256()
    for path in sorted(p for p in run.rglob("*") if p.is_file() and p.name != "evidence.jsonl"):
        h.update(str(path.relative_to(run)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _claim(fixture: Path) -> tuple[str, dict[str, Any]]:
    claims = sorted((fixture / "run" / "claims").glob("*.json"))
    return str(claims[0].relative_to(fixture / "run")), json.loads(claims[0].read_text("utf-8"))


def _slice(args: tuple[str, int, int, int | None]) -> dict[str, Any]:
    """Worker entry: every ``stride``-th forgery of one base from ``start``, until ``limit`` distinct ones."""
    fixture_s, start, stride, limit = args
    fixture = Path(fixture_s)
    claim_rel, claim = _claim(fixture)
    planned = fg.plan(fg.view(fixture / "run", claim), EXTRA)[start::stride]
    out: dict[str, Any] = {"digests": {}, "dup": 0, "consistent": 0, "audited": []}
    with tempfile.TemporaryDirectory(prefix="pw-forge-") as tmp:
        work = Path(tmp) / "run"
        key = Path(tmp) / "seal.key"
        for forgery in planned:
            if limit is not None and len(out["digests"]) >= limit:
                break
            fg.apply(fixture / "run", work, forgery)
            digest = _digest(work)
            if digest in out["digests"]:
                out["dup"] += 1
                continue
            out["digests"][digest] = [forgery.family, list(forgery.records)]
            if forgery.expected.outcome == "consistent":
                out["consistent"] += 1
                continue
            _seal(fixture, work, key, forgery)
            out["audited"].append(_audit(fixture.name, work, claim_rel, key, forgery))
    return out


def _seal(fixture: Path, run: Path, key: Path, forgery: fg.Forgery) -> None:
    """The forged run sealed as its forger would: from scratch where it added, removed or left out files
    (the chain then lists what is there), else the base's chain re-made over the edited bytes with its key."""
    if forgery.unsealed or forgery.family in ("records", "downgrades"):
        seal_fresh(run, key, forgery.unsealed)
        return
    shutil.copyfile(fixture / "seal.key", key)
    shutil.copyfile(fixture / "seal.head", key.with_suffix(".head"))
    seal_again(run, key)


def _audit(base: str, run: Path, claim_rel: str, key: Path, forgery: fg.Forgery) -> dict[str, Any]:
    codes: list[str] = []
    try:
        verdict = audit_path(run, run / claim_rel, key=key)
    except ClaimError:
        label, success = "refused_claim", False
    except Exception as exc:  # noqa: BLE001 - an auditor crash is a success of the forgery
        label, success = f"crash: {type(exc).__name__}", True
    else:
        codes = sorted({f.code for f in verdict.findings if f.severity != "INFO"})
        label = verdict.verdict + (" degraded" if verdict.degraded else "") + \
            ("" if verdict.seal == "sealed" else " (unsealed)")
        success = (verdict.verdict == "PASS" and verdict.seal == "sealed") or verdict.degraded
    return {"outcome": {"base": base, "name": forgery.name, "family": forgery.family, "records": list(forgery.records),
                        "why": forgery.expected.why, "verdict": label, "codes": codes}, "success": success}


def explore(fixtures: list[Path], forgeries: int = 10_000, workers: int = 2, out: Path | None = None) -> ForgeryReport:
    """``forgeries`` distinct forgeries spread over the bases with ``workers`` processes; every success class
    becomes a fixture under ``out`` (its answer written first)."""
    started = time.perf_counter()
    per_job = -(-int(forgeries * 1.05) // max(1, len(fixtures) * workers)) if forgeries else None
    jobs = [(str(f), k, workers, per_job) for f in fixtures for k in range(workers)]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(_slice, jobs))
    else:
        parts = [_slice(j) for j in jobs]
    report = ForgeryReport(workers=workers, bases=[Path(f).name for f in fixtures])
    seen: dict[str, list[Any]] = {}
    for (fixture, *_), part in zip(jobs, parts):
        report.duplicates += part["dup"]
        report.consistent += part["consistent"]
        for digest, where in part["digests"].items():
            key = f"{Path(fixture).name}:{digest}"
            report.duplicates += key in seen
            seen.setdefault(key, where)
        for row in part["audited"]:
            report.audited += 1
            outcome = ForgeryOutcome(**row["outcome"])
            report.refused_as_expected[outcome.verdict.split(" ")[0]] += 1
            if row["success"]:
                report.successes.append(outcome)
    for family, records in seen.values():
        report.per_family[family] = report.per_family.get(family, 0) + 1
        for record in {*records, "seal_entry"}:
            report.per_record[record] = report.per_record.get(record, 0) + 1
    report.forgeries = len(seen)
    if out is not None:
        write_fixtures(report, {Path(f).name: Path(f) for f in fixtures}, Path(out))
    report.seconds = time.perf_counter() - started
    return report


def write_fixtures(report: ForgeryReport, fixtures: dict[str, Path], out: Path) -> None:
    """One fixture per success class: the answer (FLAG or FAIL: the model says the forgery left a witness out
    of step) first, then the forged, sealed-again files."""
    done: dict[str, str] = {}
    for o in report.successes:
        if o.kind() in done:
            o.fixture = done[o.kind()]
            continue
        fixture = fixtures[o.base]
        claim_rel, claim = _claim(fixture)
        forgery = next(f for f in fg.plan(fg.view(fixture / "run", claim), EXTRA) if f.name == o.name)
        name = f"forge-{o.kind().replace(':', '-')}-{hashlib.sha256(o.name.encode()).hexdigest()[:8]}"
        dest = out / name
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        write_json_atomic(dest / "answer_key.json", {
            "schema_version": 1, "frozen": time.strftime("%Y-%m-%d", time.gmtime()),
            "answers": [{"claim": claim_rel, "verdict": ["FLAG", "FAIL"], "must_include_any": []}],
            "provenance": f"coherent-forgery explorer (verify/forgery.py): {o.name!r} of {o.base!r}, sealed "
                          "afresh over the forged files",
            "rationale": f"The evidence model says: {o.why}; so the claim must not PASS. Answer written before the "
                         f"fixture's files; when the explorer ran, the auditor answered {o.verdict}."})
        fg.apply(fixture / "run", dest / "run", forgery)
        _seal(fixture, dest / "run", dest / "seal.key", forgery)
        o.fixture = done[o.kind()] = name
