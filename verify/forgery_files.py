"""Editing a run's files the way a forger holding its key would: the helpers the coherent forgeries share.

Every edit writes the records as their writers write them (bench lines as ``json.dumps`` lines, JSON
records pretty-printed, LoadGen's ``:::MLLOG`` and summary lines), and :func:`seal_again` rebuilds the
seal chain over the edited bytes with the run's own key, without the entries of files the forgery
removed: a rigged harness seals what it writes, so only the records the forgery did not move can tell.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfwarden.formats import seal
from perfwarden.formats.records import EVIDENCE_DIRS, EVIDENCE_FILE
from perfwarden.verify.field_explorer_oracle import rederivable, rederive
from perfwarden.verify.field_explorer_run import reseal

Line = dict[str, Any]
THROUGHPUTS = frozenset({"request_throughput", "output_throughput", "total_throughput", "input_throughput"})


def read_lines(path: Path) -> list[Line]:
    return [json.loads(x) for x in path.read_text("utf-8").splitlines() if x.strip()]


def write_lines(path: Path, lines: list[Line], compact: bool = False) -> None:
    seps = (",", ":") if compact else None
    path.write_text("".join(json.dumps(x, separators=seps) + "\n" for x in lines), encoding="utf-8")


def edit_lines(path: Path, fn: Callable[[Line], None], which: Callable[[int, Line], bool] | None = None) -> None:
    """Apply ``fn`` to every line of a JSONL file (or those ``which(index, line)`` selects)."""
    lines = read_lines(path)
    for i, line in enumerate(lines):
        if which is None or which(i, line):
            fn(line)
    write_lines(path, lines)


def edit_json(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    obj = json.loads(path.read_text("utf-8"))
    fn(obj)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def edit_detail(path: Path, fn: Callable[[str, Any], Any]) -> None:
    """LoadGen's detail log with each record's value replaced by ``fn(key, value)``."""
    out = []
    for raw in path.read_text("utf-8").splitlines(keepends=True):
        if raw.startswith(":::MLLOG "):
            rec = json.loads(raw[len(":::MLLOG "):])
            rec["value"] = fn(rec["key"], rec["value"])
            raw = ":::MLLOG " + json.dumps(rec) + "\n"
        out.append(raw)
    path.write_text("".join(out), encoding="utf-8")


def detail_values(path: Path) -> dict[str, Any]:
    """The first value of every key of LoadGen's detail log."""
    out: dict[str, Any] = {}
    for raw in path.read_text("utf-8").splitlines():
        if raw.startswith(":::MLLOG "):
            rec = json.loads(raw[len(":::MLLOG "):])
            out.setdefault(rec["key"], rec["value"])
    return out


def edit_summary(path: Path, fn: Callable[[str, str], str]) -> None:
    """LoadGen's summary with each ``key : value`` line's value replaced by ``fn(key, value)``."""
    out = []
    for raw in path.read_text("utf-8").splitlines(keepends=True):
        if ":" in raw and not raw.startswith("="):
            key, value = raw.split(":", 1)
            raw = f"{key}: {fn(key.strip(), value.strip())}\n"
        out.append(raw)
    path.write_text("".join(out), encoding="utf-8")


def rederive_aggregates(line: Line, before: Line) -> None:
    """``line``'s aggregates recomputed from its (edited) arrays, as its writer computes them: the ones the
    formula reproduced on the line ``before`` the edit, and the throughputs."""
    line.update(rederive(line, rederivable(before) | THROUGHPUTS))


def seal_again(run: Path, key: Path) -> None:
    """The seal chain rebuilt over the run's files as they are now, with its own key, without the entries of
    files the forgery removed (a harness that never wrote them never sealed them)."""
    chain = run / "evidence.jsonl"
    entries = [json.loads(x) for x in chain.read_text("utf-8").splitlines() if x.strip()]
    kept = [e for e in entries if e.get("kind") not in ("file", "line") or (run / str(e.get("file"))).is_file()]
    for seq, entry in enumerate(kept):
        entry["seq"] = seq
    chain.write_text("".join(json.dumps(e) + "\n" for e in kept), encoding="utf-8")
    reseal(run, key)


def seal_fresh(run: Path, key: Path, unsealed: tuple[str, ...] = ()) -> None:
    """The run sealed from scratch over its evidence as it is now, under a new key written to ``key``: a
    forger who writes the files writes the whole chain (the files it added or renamed included), sealing
    each file whole and each bench line on its own, as the harness's sealed writers do; files under the
    ``unsealed`` prefixes are left out of the chain."""
    src = run.parent / f"{run.name}.forged"
    if src.exists():
        shutil.rmtree(src)
    run.rename(src)
    run.mkdir()
    for key_file in (key, seal.head_path(key)):
        key_file.unlink(missing_ok=True)
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.name != EVIDENCE_FILE)
    for path in files:  # the producer's and the orchestrator's files: not sealed
        rel = path.relative_to(src)
        if rel.parts[0] not in EVIDENCE_DIRS:
            (run / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, run / rel)
    chain = seal.begin(run, key_file=key)
    if chain is None:
        raise ValueError(f"could not open a seal chain in {str(run)!r}")
    for path in files:
        rel = path.relative_to(src)
        if rel.parts[0] in EVIDENCE_DIRS:
            (run / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, run / rel)
            if str(rel).startswith(unsealed):
                continue
            if path.name == "bench_runs.jsonl":
                chain.adopt_lines(run / rel, seal.bench_meta)
            else:
                chain.seal_file(run / rel)
    seal.forget(run)
    shutil.rmtree(src)
