"""The op-level exploit catalogue (``proof/op_exploits``) run through the op bench.

``load_catalogue`` reads each file's docstring header (the op, the public catalogue entry, what must refuse
it) without importing it; ``run`` benchmarks every entry and the shipped honest alternatives with the op
bench (which runs them in its sandbox) and returns one ``Row`` each: refused by the op bench or not, why,
and the speedup it was timed at. ``benchmarks/op_exploits.py`` prints the table; the red team can report
the same rows.
"""

from __future__ import annotations

import ast
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from perfwarden.harness.opbench import run_opbench
from perfwarden.harness.ops.alternatives import for_op

CATALOGUE = Path(__file__).resolve().parents[1] / "proof" / "op_exploits"
"""The exploit candidates: data in proof/ (located, never imported: the running system imports nothing of proof/)."""
SHAPES = {"rmsnorm": [[16, 576]], "silu_mul": [[16, 1536]], "rotary": [[1, 9, 16, 64]]}
REQUIRED_REFUSED = 15
class BenchSettings(TypedDict):
    """The op bench's keyword arguments for a catalogue run."""

    trials: int
    iters: int
    warmup: int
    threads: int
    timeout_s: float


SETTINGS: BenchSettings = {"trials": 3, "iters": 20, "warmup": 5, "threads": 1, "timeout_s": 60.0}


@dataclass(frozen=True)
class Entry:
    """One catalogue file, from its header."""

    name: str
    op: str
    catalogue: str
    refused_by: str
    path: Path


@dataclass
class Row:
    name: str
    op: str
    kind: str
    refused: bool
    why: str | None
    speedup: float | None
    catalogue: str


def header_field(doc: str, key: str) -> str:
    """``key: value`` of a docstring header, continuation lines (indented) joined."""
    out: list[str] = []
    for line in doc.splitlines():
        if out and line.startswith("  "):
            out.append(line.strip())
        elif out:
            break
        elif line.startswith(f"{key}:"):
            out.append(line.split(":", 1)[1].strip())
    return " ".join(out)


def load_catalogue(folder: Path = CATALOGUE) -> list[Entry]:
    entries = []
    for path in sorted(folder.glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        op = header_field(doc, "op")
        if op not in SHAPES:
            raise ValueError(f"op_exploits: {path.name} names no benched op in its header")
        entries.append(Entry(path.stem, op, header_field(doc, "catalogue"), header_field(doc, "refused_by"), path))
    return entries


def _verdicts(jsonl: Path) -> dict[str, tuple[bool, str | None, float | None]]:
    """backend -> (refused by the op bench, why, median-ms speedup over the reference), read as plain JSON."""
    rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines() if line.strip()]
    ref = [t for r in rows if r.get("is_reference") for t in (r.get("times_ms") or [])]
    out = {}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        mine = [r for r in rows if r["backend"] == backend]
        why = next((r.get("refused") or r.get("raised") for r in mine
                    if r.get("refused") or r.get("raised") or r.get("correct") is False), None)
        refused = any(r.get("refused") or r.get("correct") is False or r.get("raised") for r in mine)
        times = [t for r in mine for t in (r.get("times_ms") or [])]
        speed = statistics.median(ref) / statistics.median(times) if ref and times and statistics.median(times) else None
        out[backend] = (refused, (why or "incorrect") if refused else None, speed)
    return out


def run(run_dir: Path) -> list[Row]:
    entries = load_catalogue()
    rows: list[Row] = []
    for op, shapes in SHAPES.items():
        mine = [e for e in entries if e.op == op]
        honest = {f"honest:{a.file[:-3]}": a.spec for a in for_op(op, ("alternative",))}
        cands = {e.name: f"{e.path}:{op}" for e in mine} | honest
        path = run_opbench(run_dir / op, op, cands, shapes, "float32", **SETTINGS)
        verdicts = _verdicts(path)
        for e in mine:
            refused, why, speed = verdicts[e.name]
            rows.append(Row(e.name, op, "exploit", refused, why, speed, e.catalogue))
        for name in honest:
            refused, why, speed = verdicts[name]
            rows.append(Row(name, op, "honest", refused, why, speed, "-"))
    return rows


def table(rows: list[Row]) -> str:
    lines = [f"{'candidate':28} {'op':9} {'kind':8} {'verdict':8} {'speedup':>8}  why"]
    for r in rows:
        speed = f"{r.speedup:.2f}x" if r.speedup else "-"
        verdict = "REFUSED" if r.refused else "passed"
        lines.append(f"{r.name:28} {r.op:9} {r.kind:8} {verdict:8} {speed:>8}  {(r.why or '')[:110]}")
    exploits = [r for r in rows if r.kind == "exploit"]
    honest = [r for r in rows if r.kind == "honest"]
    lines.append(f"refused {sum(r.refused for r in exploits)} of {len(exploits)} exploits; "
                 f"honest alternatives refused: {sum(r.refused for r in honest)} of {len(honest)}")
    return "\n".join(lines)
