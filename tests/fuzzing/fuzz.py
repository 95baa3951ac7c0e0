"""Fuzz every reader and command over mutated real fixtures, with an oracle that needs no seal.

One input = a command (``audit``, ``audit-mlperf``, ``backtest``, ``review``, or a reader called
directly) run on a copy of a real seed (a proof fixture, a vendored MLPerf case) after 1-3 mutations:
bytes flipped, lines truncated / duplicated / reordered / dropped / spliced, numbers replaced by NaN,
1e308, -1, huge integers or wrong types, deep nesting, invalid UTF-8, control characters, a file
replaced by a link out of the run, a FIFO, a directory, a huge sparse file, or deleted.

The oracle, for every input:

- **no traceback**: the command returns (or the reader raises only its documented error);
- **exit code within the command's contract** (audit 0/10/20/3, audit-mlperf 0/10/20/3, backtest 0/1/3,
  review 0/3);
- **no raw terminal controls** in the human output;
- **no hang** (a per-input alarm) and **bounded memory** (peak RSS checked after each input);
- **no PASS on damaged evidence**, where *damaged* is decided without the auditor, from the formats
  alone: a file that a gate of the claim's scope must read (design §2/§4: the legs' bench runs and,
  for patch/bundle, their server_info and parity dumps; the op benchmark; the profile; the report)
  and that is, after mutation, missing (when required), not a regular file inside the run, not UTF-8,
  not strict JSON (NaN/Infinity, out-of-range floats, nesting past the parser's limit), or a record that
  does not validate against its shared schema (``formats/jsonl.py``, ``formats/records.py``), or a
  JSONL file with a torn last line. A mutation that leaves every such file well-formed (a changed
  number, a dropped or duplicated line, an edit to a field no gate reads) may legitimately PASS, so it
  is not counted: the oracle only claims what it can prove. Auditor findings beyond it (a FAIL where
  the oracle saw no damage) are the auditor being stricter, never a violation.

Gate crashes (``AUDITOR_DEGRADED``, the MLPerf auditor's internal error) fail open by design, so they
are not violations, but they are counted: each one is a bug the fuzzer found.

Choices are made through a ``Chooser`` so the same engine runs under hypothesis in the test suite
(shrinkable choices) and under a seeded ``random.Random`` in ``benchmarks/fuzz.py`` (fast, many
processes).
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import resource
import shutil
import signal
import stat
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, TypeVar

import msgspec
from pydantic import ValidationError

from perfwarden.auditor.claim_file import ClaimError, load_claim
from perfwarden.auditor.evidence import RunLoader
from perfwarden.cli.main import app
from perfwarden.formats import jsonl as jsonl_formats
from perfwarden.formats.records import Claim, LegSpec
from perfwarden.orchestrator.review.model import ReviewError, read_verdict
from perfwarden.verify.answer_key import AnswerKeyError, load_answer_key

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "proof" / "fixtures"
MLPERF_CASES = REPO_ROOT / "tests" / "data" / "mlperf"

CONTRACT = {"audit": {0, 10, 20, 3}, "audit-mlperf": {0, 10, 20, 3}, "backtest": {0, 1, 3}, "review": {0, 3}}
"""Exit codes each command may return (README's command table)."""

PROBLEMS = ("traceback", "exit_code", "pass_on_damaged", "hang", "memory", "raw_control")
"""What makes an input a failure. ``degraded`` (a gate crash that failed open) is counted apart."""


class Chooser(Protocol):
    def pick(self, options: Sequence[T], label: str) -> T: ...
    def integer(self, lo: int, hi: int, label: str) -> int: ...


class RandomChooser:
    """Choices from a seeded ``random.Random`` (the benchmark)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def pick(self, options: Sequence[T], label: str) -> T:
        return options[self.rng.randrange(len(options))]

    def integer(self, lo: int, hi: int, label: str) -> int:
        return self.rng.randint(lo, hi)


class HypothesisChooser:
    """Choices drawn from hypothesis ``st.data()`` (the suite: shrinkable, replayable)."""

    def __init__(self, data: Any):
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def pick(self, options: Sequence[T], label: str) -> T:
        return self.data.draw(self.st.sampled_from(list(options)), label=label)

    def integer(self, lo: int, hi: int, label: str) -> int:
        return self.data.draw(self.st.integers(lo, hi), label=label)


# ------------------------------------------------------------------------------- formats (oracle)

SCHEMAS: dict[str, type] = {"bench": jsonl_formats.BenchRunLine, "outputs": jsonl_formats.OutputLine,
                            "opbench": jsonl_formats.OpBenchLine, "profile": jsonl_formats.ProfileLine}
JSONL_KINDS = {"bench_runs.jsonl": "bench", "outputs.jsonl": "outputs", "opbench.jsonl": "opbench",
               "profile.jsonl": "profile"}
"""File name -> schema kind, for the readers called directly."""
ORACLE_READ_BYTES = 64 << 20
"""The oracle reads at most this much of a file; a larger one is damaged for every kind it checks
(JSON records are bounded far lower, JSONL lines are, and the fixtures' files are kilobytes)."""


class Damage(Exception):
    """Why a file is provably not well-formed evidence."""


def _reject_constant(name: str) -> Any:
    raise Damage(f"non-finite constant {name}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Damage(f"number {text[:20]} out of float range")
    return value


def strict_json(raw: bytes) -> Any:
    """RFC 8259 JSON: UTF-8, finite numbers, no NaN/Infinity, nesting the parser can hold."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Damage(f"not UTF-8: {exc}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        raise Damage(f"not JSON: {type(exc).__name__}") from None


def _regular_inside(path: Path, root: Path) -> int:
    """The file's size; Damage when it is not a regular file inside ``root``."""
    real = os.path.realpath(path)
    if not (real + os.sep).startswith(os.path.realpath(root) + os.sep):
        raise Damage("resolves outside the run")
    try:
        st = os.stat(real)
    except OSError as exc:
        raise Damage(f"cannot stat: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Damage("not a regular file")
    return st.st_size


def file_damage(path: Path, root: Path, kind: str, required: bool) -> str | None:
    """Why ``path`` is damaged evidence of ``kind``, or None when it is well-formed (or, optional,
    absent). ``kind``: a JSONL schema name, ``server_info``, ``leg``, or ``fs`` (only the file system
    state is checked: a text file's content has no format)."""
    if not os.path.lexists(path):
        return "missing" if required else None
    try:
        size = _regular_inside(path, root)
        if kind == "fs":
            return None
        with open(path, "rb") as handle:
            if size > ORACLE_READ_BYTES:
                # Not read whole. Only the sparse mutation makes such files here (NUL bytes after the
                # first 100): NUL is never JSON text. Anything else is undecided, so not claimed.
                handle.seek(size - 64)
                if b"\x00" in handle.read(64):
                    raise Damage("NUL bytes: not JSON text")
                return None
            data = handle.read()
        if kind in SCHEMAS:
            _check_jsonl(data, SCHEMAS[kind])
        else:
            obj = strict_json(data)
            if not isinstance(obj, dict):
                raise Damage("not a JSON object")
            if kind == "leg":
                try:
                    LegSpec.model_validate(obj)
                except ValidationError as exc:
                    raise Damage(f"not a leg spec: {exc.errors()[0]['msg']}") from None
    except Damage as exc:
        return str(exc)
    return None


def _check_jsonl(data: bytes, schema: type) -> None:
    if not data.strip():
        raise Damage("empty")
    tail = data.rsplit(b"\n", 1)[-1]
    if tail.strip() and not _finished_foreign_tail(tail, schema):
        raise Damage("torn last line")
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        obj = strict_json(line)
        if not isinstance(obj, dict):
            raise Damage(f"line {number} is not an object")
        # A foreign bench line (no schema_version) may carry fields perfwarden does not read.
        kind = jsonl_formats.FOREIGN_SCHEMAS.get(schema, schema) if obj.get("schema_version") is None else schema
        try:  # decoded from the line itself: a schema's raw-JSON fields (msgspec.Raw) cannot be converted
            msgspec.json.decode(line, type=kind)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
            raise Damage(f"line {number} does not validate: {str(exc)[:80]}") from None


def _finished_foreign_tail(tail: bytes, schema: type) -> bool:
    """A last line without its newline is finished when another tool wrote it whole: vLLM's bench file is
    one JSON object with no newline after it. The harness always ends its own lines, so its tail is torn."""
    if schema not in jsonl_formats.FOREIGN_SCHEMAS:
        return False
    try:
        obj = strict_json(tail)
    except Damage:
        return False
    return isinstance(obj, dict) and obj.get("schema_version") is None


def _plain(name: str) -> bool:
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\x00")


def must_read(claim: Claim) -> dict[str, tuple[str, bool]]:
    """rel path -> (kind, required): the files design §4 says the claim's scope reads. A leg name that
    is not a plain directory name names evidence outside the run: reported as a ``"<outside>"`` key."""
    out: dict[str, tuple[str, bool]] = {}
    legs = claim.legs

    def leg(name: str | None, *files: tuple[str, str, bool]) -> None:
        if not name:
            return
        if not _plain(name):
            out["<outside>"] = ("fs", True)
            return
        for file, kind, required in files:
            out.setdefault(f"legs/{name}/{file}", (kind, required))

    if claim.scope == "baseline":
        leg(legs.baseline, ("bench_runs.jsonl", "bench", True), ("outputs.jsonl", "outputs", False))
        if not legs.baseline:
            out["<no baseline>"] = ("fs", True)
        for aa in legs.aa:
            leg(aa, ("bench_runs.jsonl", "bench", False))
    elif claim.scope in ("patch", "bundle"):
        parity = claim.correctness.parity != "none"
        for name in (legs.baseline, legs.candidate):
            leg(name, ("bench_runs.jsonl", "bench", True), ("server_info.json", "server_info", True),
                *([("outputs.jsonl", "outputs", False)] if parity else []))
        if not (legs.baseline and legs.candidate):
            out["<no leg>"] = ("fs", True)
        leg(legs.candidate, ("server.log", "fs", False))
        if claim.scope == "bundle":
            leg(legs.baseline, ("leg.json", "leg", False))
        for name in (legs.validation, legs.caching_audit, legs.caching_control, *legs.aa):
            leg(name, ("bench_runs.jsonl", "bench", False))
        if claim.isolated_speedup is not None and claim.isolated_speedup.opbench:
            out[claim.isolated_speedup.opbench] = ("opbench", True)
    elif claim.scope == "harness":
        path = claim.opbench or (claim.isolated_speedup.opbench if claim.isolated_speedup else None)
        out[path or "<no opbench>"] = ("opbench", True)
        out.setdefault("profile/profile.jsonl", ("profile", False))
    elif claim.scope == "profile":
        out["profile/profile.jsonl"] = ("profile", True)
    if claim.report:
        out.setdefault(claim.report, ("fs", True))
    return out


def evidence_damage(run: Path, claim_path: Path) -> list[str]:
    """Damage the oracle can prove in the files the claim's audit must read (empty: none proven).
    A claim that is not a valid claim is not evidence: the command must refuse it (exit 3)."""
    try:
        if _regular_inside(claim_path, run) > ORACLE_READ_BYTES:
            return []
        claim = Claim.model_validate(strict_json(claim_path.read_bytes()))
    except (Damage, ValidationError, OSError):
        return []
    out = []
    for rel, (kind, required) in must_read(claim).items():
        if rel.startswith("<"):
            out.append(f"{rel}: the claim names no usable evidence")
            continue
        path = run / rel
        if not os.path.realpath(path).startswith(os.path.realpath(run) + os.sep):
            out.append(f"{rel}: outside the run")
            continue
        why = file_damage(path, run, kind, required)
        if why:
            out.append(f"{rel}: {why}")
    return out


def mlperf_damage(directory: Path) -> list[str]:
    """Damage in one LoadGen run directory: a log missing, not a regular file inside it, empty, or a
    ``:::MLLOG`` line whose JSON is not strict JSON (the detail log is JSON lines behind a marker)."""
    out = []
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt"):
        path = directory / name
        why = file_damage(path, directory, "fs", True)
        if why:
            out.append(f"{name}: {why}")
            continue
        data = path.read_bytes()
        if not data.strip():
            out.append(f"{name}: empty")
            continue
        if name.endswith("detail.txt"):
            for number, line in enumerate(data.split(b"\n"), 1):
                if line.startswith(b":::MLLOG "):
                    try:
                        strict_json(line[len(b":::MLLOG "):])
                    except Damage as exc:
                        out.append(f"{name} line {number}: {exc}")
                        break
    return out


# ------------------------------------------------------------------------------------- mutations

NUMBER_TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"1e308", b"1e400", b"-1", b"-0.5", b"0",
                 b"99999999999999999999999999999999", b"1" + b"0" * 400, b'"x"', b"null", b"true", b"[]", b"{}",
                 b"[[1]]", b'{"a": 1}']
STRING_TOKENS = ['"\\u001b[31m\\r\\u009b2J\\u202e"', '"' + "A" * 5000 + '"', '"[/red][bold]"', '""', "1",
                 '"../../etc/passwd"', '"\\u0000"']
CONTROL = "\x1b[2J\x1b]0;t\x07\r\u202e"


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _json_spans(data: bytes, pattern: bytes) -> list[tuple[int, int]]:
    """Byte spans of JSON number literals (``pattern`` = b"number") or strings (b"string")."""
    import re

    rx = (re.compile(rb"(?<=[:\[,\s])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?=[,\]\}\s])") if pattern == b"number"
          else re.compile(rb'"(?:[^"\\\n]|\\.)*"'))
    return [m.span() for m in rx.finditer(data)]


@dataclass
class Mutation:
    op: str
    rel: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.op}({self.rel}{': ' + self.detail if self.detail else ''})"


def _rewrite(path: Path, data: bytes) -> None:
    if path.is_symlink() or not path.is_file():
        return
    path.write_bytes(data)


@dataclass
class _Target:
    """The file one mutation works on: its bytes (empty when unreadable or huge) and lines."""

    path: Path
    rel: str
    choose: Chooser
    data: bytes
    lines: list[bytes]

    def line_index(self) -> int:
        n = len(self.lines)
        return self.choose.integer(0, max(0, n - 2), "line") if n > 1 else 0

    def write(self, data: bytes, op: str, detail: str = "") -> Mutation:
        _rewrite(self.path, data)
        return Mutation(op, self.rel, detail)


def _target(root: Path, rel: str, choose: Chooser) -> _Target:
    path = root / rel
    try:  # a file an earlier mutation made huge (sparse) is only replaced, never read
        small = path.is_file() and not path.is_symlink() and path.stat().st_size <= 16 << 20
        data = path.read_bytes() if small else b""
    except OSError:
        data = b""
    return _Target(path, rel, choose, data, _lines(data))


def _flip_bytes(t: _Target, op: str) -> Mutation | None:
    if not t.data:
        return None
    out = bytearray(t.data)
    for _ in range(t.choose.integer(1, 4, "flips")):
        i = t.choose.integer(0, len(out) - 1, "byte")
        out[i] ^= 1 << t.choose.integer(0, 7, "bit")
    return t.write(bytes(out), op)


def _truncate_file(t: _Target, op: str) -> Mutation | None:
    if not t.data:
        return None
    cut = t.choose.integer(0, len(t.data) - 1, "cut")
    return t.write(t.data[:cut], op, f"at {cut}")


def _cut_line(t: _Target, op: str) -> Mutation | None:
    if len(t.lines) <= 1:
        return None
    lines, i = list(t.lines), t.line_index()
    lines[i] = lines[i][: t.choose.integer(0, max(0, len(lines[i]) - 1), "keep")]
    return t.write(b"\n".join(lines), op, f"line {i + 1}")


def _drop_line(t: _Target, op: str) -> Mutation | None:
    if len(t.lines) <= 1:
        return None
    i = t.line_index()
    return t.write(b"\n".join(t.lines[:i] + t.lines[i + 1:]), op, f"line {i + 1}")


def _dup_line(t: _Target, op: str) -> Mutation | None:
    if len(t.lines) <= 1:
        return None
    i = t.line_index()
    return t.write(b"\n".join(t.lines[: i + 1] + [t.lines[i]] + t.lines[i + 1:]), op, f"line {i + 1}")


def _swap_lines(t: _Target, op: str) -> Mutation | None:
    if len(t.lines) <= 2:
        return None
    lines = list(t.lines)
    i, j = t.line_index(), t.line_index()
    lines[i], lines[j] = lines[j], lines[i]
    return t.write(b"\n".join(lines), op, f"lines {i + 1},{j + 1}")


def _splice_lines(t: _Target, op: str) -> Mutation | None:
    lines, n = t.lines, len(t.lines)
    if n <= 2:
        return None
    i = min(t.line_index(), n - 3)
    a = t.choose.integer(0, len(lines[i]), "keep")
    b = t.choose.integer(0, len(lines[i + 1]), "from")
    return t.write(b"\n".join(lines[:i] + [lines[i][:a] + lines[i + 1][b:]] + lines[i + 2:]), op,
                   f"lines {i + 1}+{i + 2}")


def _json_token(t: _Target, op: str) -> Mutation | None:
    """``number`` / ``string``: one JSON number or string replaced by a hostile token."""
    spans = _json_spans(t.data, op.encode()) if t.data else []
    if not spans:
        return None
    start, end = spans[t.choose.integer(0, len(spans) - 1, "span")]
    token = t.choose.pick(NUMBER_TOKENS, "token") if op == "number" else t.choose.pick(STRING_TOKENS, "token").encode()
    return t.write(t.data[:start] + token + t.data[end:], op, f"{t.data[start:end][:30]!r} -> {token[:30]!r}")


def _bad_utf8(t: _Target, op: str) -> Mutation | None:
    if not t.data:
        return None
    i = t.choose.integer(0, len(t.data), "at")
    bad = t.choose.pick([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b"\xe2\x82"], "bytes")
    return t.write(t.data[:i] + bad + t.data[i:], op, f"at {i}")


def _control_chars(t: _Target, op: str) -> Mutation | None:
    if not t.data:
        return None
    spans = _json_spans(t.data, b"string")
    if not spans:
        return t.write(t.data + CONTROL.encode() + b"\n", op, "appended")
    start, end = spans[t.choose.integer(0, len(spans) - 1, "span")]
    inner = json.dumps(CONTROL)[1:-1].encode() if t.rel.endswith((".json", ".jsonl")) else CONTROL.encode()
    return t.write(t.data[: end - 1] + inner + t.data[end - 1:], op)


def _deep_nesting(t: _Target, op: str) -> Mutation | None:
    if not t.data:
        return None
    spans = _json_spans(t.data, b"number")
    depth = t.choose.pick([900, 5_000, 100_000], "depth")
    if not spans:
        return None
    start, end = spans[t.choose.integer(0, len(spans) - 1, "span")]
    return t.write(t.data[:start] + b"[" * depth + t.data[start:end] + b"]" * depth + t.data[end:], op,
                   f"depth {depth}")


def _garbage_line(t: _Target, op: str) -> Mutation | None:
    if not t.data:
        return None
    i = t.line_index()
    junk = t.choose.pick([b"{", b"not json", b"\x00\x00", b"[/red]", b"{}{}", b'{"a":1,}', b"NaN",
                          CONTROL.encode()], "junk")
    return t.write(b"\n".join(t.lines[:i] + [junk] + t.lines[i:]), op, f"line {i + 1}")


def _crlf(t: _Target, op: str) -> Mutation | None:
    return t.write(t.data.replace(b"\n", b"\r\n"), op) if t.data else None


def _empty(t: _Target, op: str) -> Mutation | None:
    return t.write(b"", op)


CONTENT_OPS: dict[str, Callable[[_Target, str], Mutation | None]] = {
    "flip_bytes": _flip_bytes, "truncate_file": _truncate_file, "cut_line": _cut_line, "drop_line": _drop_line,
    "dup_line": _dup_line, "swap_lines": _swap_lines, "splice_lines": _splice_lines, "number": _json_token,
    "string": _json_token, "bad_utf8": _bad_utf8, "control_chars": _control_chars, "deep_nesting": _deep_nesting,
    "garbage_line": _garbage_line, "empty": _empty, "crlf": _crlf,
}
"""Mutations of a file's bytes; each returns None when it does not apply to this file."""
FS_OPS = ("delete", "link_out", "link_inside", "fifo", "directory", "sparse_huge", "link_dev_zero")
"""Mutations of what the path is (``_fs_mutation``)."""
MUTATION_OPS = ["flip_bytes", "truncate_file", "cut_line", "drop_line", "dup_line", "swap_lines", "splice_lines",
                "number", "string", "bad_utf8", "control_chars", "deep_nesting", "garbage_line", "empty",
                "delete", "link_out", "link_inside", "fifo", "directory", "sparse_huge", "link_dev_zero", "crlf"]
"""Every mutation, in the order the chooser picks from (the order fixes what a seed draws)."""


def mutate(root: Path, rel: str, choose: Chooser, outside: Path) -> Mutation:
    """Apply one mutation to ``root/rel``; returns what was done."""
    op = choose.pick(MUTATION_OPS, "op")
    t = _target(root, rel, choose)
    content = CONTENT_OPS.get(op)
    done = content(t, op) if content else None
    if done is not None:
        return done
    if op in FS_OPS:
        return _fs_mutation(op, root, rel, choose, outside)
    if t.data:  # the op did not apply to this file (too short, no number in it): flip one byte instead
        out = bytearray(t.data)
        out[choose.integer(0, len(out) - 1, "byte")] ^= 0x20
        return t.write(bytes(out), "flip_bytes", f"fallback for {op}")
    return _fs_mutation("delete", root, rel, choose, outside)


def _fs_mutation(op: str, root: Path, rel: str, choose: Chooser, outside: Path) -> Mutation:
    path = root / rel
    copy = outside / f"{len(list(outside.iterdir()))}-{path.name}"
    if path.is_file() and not path.is_symlink():
        shutil.copy(path, copy)
    else:
        copy.write_bytes(b"{}\n")
    if os.path.lexists(path):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if op == "delete":
        pass
    elif op == "link_out":
        path.symlink_to(copy)  # byte-identical content, but outside the run: not evidence
    elif op == "link_inside":
        siblings = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p != path)
        target = choose.pick(siblings, "target") if siblings else copy
        path.symlink_to(target)
        return Mutation(op, rel, str(target.relative_to(root)) if target != copy else "outside")
    elif op == "fifo":
        os.mkfifo(path)
    elif op == "directory":
        path.mkdir()
    elif op == "sparse_huge":
        with open(path, "wb") as handle:
            handle.write(copy.read_bytes()[:100])
            handle.truncate(choose.pick([17 << 20, 70 << 20, 300 << 20], "size"))
    elif op == "link_dev_zero":
        path.symlink_to("/dev/zero")
    return Mutation(op, rel)


# -------------------------------------------------------------------------------------- targets


@dataclass
class Outcome:
    """One fuzz input and what the oracle found."""

    target: str
    seed: str
    mutations: list[str]
    exit_code: int | None = None
    problems: list[str] = field(default_factory=list)
    degraded: bool = False
    damaged: list[str] = field(default_factory=list)
    verdict: str | None = None
    seconds: float = 0.0
    exercised: list[str] = field(default_factory=list)
    """What the input reached (the run-directory fuzz: a payload planted, a report rewritten, ...)."""


class Hang(BaseException):
    """Raised by the per-input alarm (a BaseException so no ``except Exception`` swallows it)."""


def raw_controls(text: str) -> bool:
    return any(unicodedata.category(c) in ("Cc", "Cf") and c != "\n" for c in text)


def fixture_seeds() -> list[tuple[Path, str]]:
    """(fixture directory, claim rel) for every claim of every shipped fixture."""
    out = []
    for key in sorted(FIXTURES.rglob("answer_key.json")):
        run = key.parent / "run"
        out += [(key.parent, str(c.relative_to(run))) for c in sorted((run / "claims").glob("*.json"))]
    return out


def mlperf_seeds() -> list[Path]:
    return sorted(p for p in MLPERF_CASES.iterdir() if (p / "reference").is_dir()) if MLPERF_CASES.is_dir() else []


class Fuzzer:
    """Runs inputs in this process. ``scratch`` holds one input's copy at a time."""

    TARGETS = ("audit", "audit", "audit", "audit-mlperf", "backtest", "review", "readers")

    def __init__(self, scratch: Path, timeout_s: int = 30, memory_limit: int = 3 << 30):
        from typer.testing import CliRunner

        self.scratch = Path(scratch)
        self.timeout_s = timeout_s
        self.memory_limit = memory_limit
        self.runner = CliRunner()
        self.fixtures = fixture_seeds()
        self.mlperf = mlperf_seeds()
        self._review_seeds: dict[Path, Path] = {}

    # --- one input
    def run_one(self, choose: Chooser, target: str | None = None) -> Outcome:
        import time

        target = target or choose.pick(self.TARGETS, "target")
        work = Path(tempfile.mkdtemp(prefix="fz-", dir=self.scratch))
        started = time.monotonic()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(self.timeout_s)
        self._current = Outcome(target, "?", [])
        try:
            outcome = getattr(self, "_" + target.replace("-", "_"))(choose, work)
        except Hang:
            outcome = self._current  # what the input was, as far as it got
            outcome.problems.append("hang")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
            shutil.rmtree(work, ignore_errors=True)
        outcome.seconds = round(time.monotonic() - started, 3)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if peak > self.memory_limit >= rss_before:  # this input pushed the peak past the bound
            outcome.problems.append("memory")
        return outcome

    def _invoke(self, outcome: Outcome, args: list[str], human: bool) -> Any:
        result = self.runner.invoke(_app(), args)
        outcome.exit_code = result.exit_code
        if isinstance(result.exception, Hang):
            raise result.exception
        if isinstance(result.exception, MemoryError):
            outcome.problems.append("memory")
        elif result.exception is not None and not isinstance(result.exception, SystemExit):
            outcome.problems.append("traceback")
            outcome.mutations.append(f"EXCEPTION {type(result.exception).__name__}: {str(result.exception)[:200]}")
        # (A "Traceback" in the output is not one: a crash fixture's server log quotes Python tracebacks.
        # Every command catches its errors itself, so an exception reaching the runner is the signal.)
        if result.exit_code not in CONTRACT[args[0]] and "traceback" not in outcome.problems:
            outcome.problems.append("exit_code")
        if human and raw_controls(result.output):
            outcome.problems.append("raw_control")
        return result

    def _mutate_some(self, choose: Chooser, root: Path, files: list[str], weighted: list[str],
                     work: Path) -> list[str]:
        outside = work / "outside"
        outside.mkdir(exist_ok=True)
        done = []
        for _ in range(choose.integer(1, 3, "n_mutations")):
            pool = weighted if weighted and choose.integer(0, 3, "weight") else files
            rel = choose.pick(pool, "file")
            done.append(str(mutate(root, rel, choose, outside)))
        return done

    def _audit(self, choose: Chooser, work: Path) -> Outcome:
        fixture, claim_rel = choose.pick(self.fixtures, "seed")
        run = work / "run"
        shutil.copytree(fixture / "run", run)
        claim = Claim.model_validate_json((run / claim_rel).read_text())
        files = _files(run)
        weighted = [r for r in must_read(claim) if r in files] + [claim_rel]
        outcome = self._current = Outcome("audit", f"{fixture.name}/{claim_rel}",
                                          self._mutate_some(choose, run, files, weighted, work))
        as_json = bool(choose.integer(0, 1, "json"))
        result = self._invoke(outcome, ["audit", str(run), "--claim", str(run / claim_rel)]
                              + (["--json"] if as_json else []), human=not as_json)
        outcome.damaged = evidence_damage(run, run / claim_rel)
        outcome.verdict = {0: "PASS", 10: "FLAG", 20: "FAIL", 3: "error"}.get(result.exit_code)
        if as_json and result.exit_code in (0, 10, 20):
            verdict = json.loads(result.stdout)
            outcome.degraded = bool(verdict.get("degraded"))
            if {0: "PASS", 10: "FLAG", 20: "FAIL"}[result.exit_code] != verdict["verdict"]:
                outcome.problems.append("exit_code")
        elif "degraded:" in result.output:
            outcome.degraded = True
        if outcome.damaged and result.exit_code == 0:
            outcome.problems.append("pass_on_damaged")
        return outcome

    def _audit_mlperf(self, choose: Chooser, work: Path) -> Outcome:
        case = choose.pick(self.mlperf, "seed")
        ref, comp = work / "reference", work / "compliance"
        shutil.copytree(case / "reference", ref)
        shutil.copytree(case / "compliance", comp)
        files = [f"reference/{f}" for f in _files(ref)] + [f"compliance/{f}" for f in _files(comp)]
        outcome = self._current = Outcome("audit-mlperf", case.name, self._mutate_some(choose, work, files, [], work))
        as_json = bool(choose.integer(0, 1, "json"))
        result = self._invoke(outcome, ["audit-mlperf", "--reference", str(ref), "--compliance", str(comp)]
                              + (["--json"] if as_json else []), human=not as_json)
        outcome.damaged = [f"reference/{d}" for d in mlperf_damage(ref)] + [f"compliance/{d}" for d in mlperf_damage(comp)]
        outcome.verdict = {0: "PASS", 10: "FLAG", 20: "FAIL", 3: "error"}.get(result.exit_code)
        if "internal error" in result.output:
            outcome.degraded = True
        if outcome.damaged and result.exit_code == 0:
            outcome.problems.append("pass_on_damaged")
        return outcome

    def _backtest(self, choose: Chooser, work: Path) -> Outcome:
        fixture, _ = choose.pick(self.fixtures, "seed")
        copy = work / fixture.name
        shutil.copytree(fixture, copy)
        files = _files(copy)
        weighted = ["answer_key.json"] + [f for f in files if f.startswith("run/claims/")]
        outcome = self._current = Outcome("backtest", fixture.name, self._mutate_some(choose, copy, files, weighted, work))
        result = self._invoke(outcome, ["backtest", str(copy), "--no-mlperf", "--json"], human=False)
        if result.exit_code in (0, 1, 3) and result.stdout.strip():
            try:
                report = json.loads(result.stdout)
            except ValueError:
                outcome.problems.append("exit_code")
                return outcome
            for case in report.get("results", []):
                claim = copy / "run" / case["claim"]
                damaged = evidence_damage(copy / "run", claim) if os.path.lexists(claim) else []
                outcome.damaged += damaged
                if damaged and case["verdict"] == "PASS":
                    outcome.problems.append("pass_on_damaged")
        return outcome

    def _review_seed(self, fixture: Path) -> Path:
        """A copy of the fixture's run with its verdicts saved (what ``review`` reads), made once."""
        if fixture not in self._review_seeds:
            # lazy: scipy: the auditor, only for this seed
            from perfwarden.auditor.audit import audit_path, write_verdict

            seed = self.scratch / "review-seeds" / fixture.name
            if not seed.exists():
                shutil.copytree(fixture / "run", seed)
                for claim in sorted((seed / "claims").glob("*.json")):
                    write_verdict(seed, audit_path(seed, claim))
            self._review_seeds[fixture] = seed
        return self._review_seeds[fixture]

    def _review(self, choose: Chooser, work: Path) -> Outcome:
        fixture, _ = choose.pick(self.fixtures, "seed")
        run = work / "run"
        shutil.copytree(self._review_seed(fixture), run)
        files = _files(run)
        weighted = [f for f in files if f.startswith(("verdicts/", "claims/"))]
        outcome = self._current = Outcome("review", fixture.name, self._mutate_some(choose, run, files, weighted, work))
        fmt = choose.pick([[], [], ["--format", "md"], ["--format", "csv"], ["--format", "json"]], "format")
        single = choose.integer(0, 3, "single") == 0 and (run / "verdicts").is_dir()
        target = str(next(iter(sorted((run / "verdicts").glob("*.json"))), run)) if single else str(run)
        self._invoke(outcome, ["review", target, *fmt], human=True)
        return outcome

    def _readers(self, choose: Chooser, work: Path) -> Outcome:
        """The readers called directly: each may raise only its documented error."""
        fixture, claim_rel = choose.pick(self.fixtures, "seed")
        copy = work / fixture.name
        shutil.copytree(fixture, copy)
        run = copy / "run"
        files = _files(copy)
        outcome = self._current = Outcome("readers", fixture.name, self._mutate_some(choose, copy, files, files, work))
        calls: list[tuple[str, Callable[[], Any], tuple[type[BaseException], ...]]] = [
            ("load_claim", lambda: load_claim(run / claim_rel, run), (ClaimError,)),
            ("load_answer_key", lambda: load_answer_key(copy / "answer_key.json", root=copy), (AnswerKeyError,)),
            ("read_verdict", lambda: read_verdict(run / claim_rel, run), (ReviewError,)),
        ]
        for rel in files:
            schema = next((SCHEMAS[kind] for name, kind in JSONL_KINDS.items() if rel.endswith(name)), None)
            if schema is not None:
                calls.append((f"read_jsonl {rel}", functools.partial(jsonl_formats.read_jsonl, copy / rel, schema, copy),
                              ()))
            elif rel.endswith(".json") and "/legs/" in f"/{rel}":
                calls.append((f"json_object {rel}", functools.partial(_json_object, run, copy / rel), ()))
        for name, call, allowed in calls:
            try:
                call()
            except allowed:
                pass
            except Hang:
                raise
            except MemoryError:
                outcome.problems.append("memory")
            except Exception as exc:  # noqa: BLE001 - that is what the oracle looks for
                outcome.problems.append("traceback")
                outcome.mutations.append(f"EXCEPTION in {name}: {type(exc).__name__}: {str(exc)[:200]}")
        return outcome


def _json_object(run: Path, path: Path) -> Any:
    """The auditor's reader of one JSON record of a leg (the loader is made at the call, inside its try)."""
    return RunLoader(run).json_object(path, True, "record")


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _app():
    return app
