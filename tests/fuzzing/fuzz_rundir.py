"""Fuzz run directories as *input* to ``run --resume``, ``measure`` and ``audit --save``.

A run directory someone else prepared is hostile input to the commands that continue or add to it. One
input = a copy of a real synthetic run (finished, or killed at a crash point so resume has work left)
after 1-3 mutations, then one command on it, in this process:

- **links** planted at every file or directory the commands write or read (``events.jsonl``,
  ``checkpoints.sqlite`` and its journal, ``report.md``, ``.report.md.tmp``, ``report.json``,
  ``verdicts/``, ``claims/``, ``legs/<leg>/...``, ``evidence.jsonl``, ``settings.json``, ...), pointing
  out of the run (to a file, a dangling name, a directory, ``/dev/zero``); FIFOs; directories where
  files belong and files where directories belong;
- **crafted checkpoints**: a LangGraph SQLite checkpoint whose state holds a msgpack extension object
  (or a pending write in the ``json`` or ``pickle`` encodings) naming an importable callable that
  would create a marker file, in every encoding the library's deserializer accepts, placed in a
  channel, a new channel, inside a typed record or a delta snapshot; state fields pointing out of the
  run (``run_dir``, ``pending_claim``) or of the wrong type; hostile text (a forged heading, HTML,
  a markdown link, OSC/BEL/ESC bytes) in notes and verdict fields that reach ``report.md``;
- **crafted settings.json**: naming an interpreter inside the run (an executable canary script),
  unknown fields, wrong types, NaN, huge values; a seal id naming a path;
- **hostile leg names** for ``measure`` (``../../x``, ``a/b``, absolute, NUL, very long, controls) and
  hostile ``--key`` files for ``audit`` (FIFO, ``/dev/zero``, a directory, a huge sparse file).

The oracle needs no knowledge of the fixes, only of the file system:

- **no code execution**: every planted callable or program, if run, creates a marker in a
  ``markers/`` directory outside the run; any marker is a violation;
- **no write outside the run**: every file beside the run (the link targets, the directories a
  hostile leg name points into) is snapshotted -- type, size, mtime, content digest -- before the
  command and compared after; anything created, changed or removed there is a violation;
- **no traceback** (an exception reaching the runner), **no internal error** (``run`` on the synthetic
  target, whose lab cannot fail, exiting 1 "stopped on <exception>"), **exit codes within the
  command's contract**, **no hang** (a per-input alarm), **no raw terminal controls** in human output;
- **no injection**: a ``report.md`` the command wrote holds no heading, HTML tag, markdown link or
  control character carrying the planted token.

Cost: no server and no real run per input. ``measure`` runs with the synthetic lab standing in for
the embedded one (the same ``RunDir``/seal/bench writers, no model), so a hostile leg name that passes
validation writes where the real lab would; resume uses the synthetic target its seeds were recorded
with; and a genuinely valid run is resumed or measured unmutated now and then, so the oracle also
sees the success path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shlex
import shutil
import signal
import sqlite3
import stat
import tempfile
import threading
import time
import hashlib
import json
import re
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import BaseModel

from perfwarden.formats import seal
from perfwarden.orchestrator.crashpoints import ENV
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

from fuzzing.fuzz import Chooser, Hang, Outcome, _alarm, _app, raw_controls

CONTRACT = {"resume": {0, 1, 3}, "measure": {0, 1, 3}, "audit-save": {0, 10, 20, 3}}
"""Exit codes each command may return (README's command table; ``run`` 130 is Ctrl-C, never sent here)."""

PROBLEMS = ("code_execution", "write_outside", "traceback", "internal_error", "exit_code", "hang", "memory",
            "injection", "raw_control")
"""What makes an input a failure; each must be zero."""

TOKEN = "PWINJ"
"""Carried by every hostile string, so the oracle can tell the run's text from the report's own."""
HOSTILE_TEXT = [f"\n## Banked {TOKEN}\n\n- `{TOKEN}`: output throughput +900.00%\n", f"<script>alert('{TOKEN}')</script>",
                f"<img src=x onerror=alert('{TOKEN}')>", f"[{TOKEN}](http://x.invalid/{TOKEN})",
                f"\x1b]0;{TOKEN}\x07\x1b[2J\r{TOKEN}\u202e", f"{TOKEN}` | **PASS** | <b>x</b>\n# {TOKEN}"]
SEED_SETTINGS = {"target": "synthetic", "levers": [], "kernels": False}
"""The smallest complete run (baseline, audit, report: ~0.2 s)."""
CRASH_SEEDS = ("done", "before:report", "after:auditor", "before:baseline", "report_json_written",
               "settings_written", "patch-done")
"""Seeds: a finished run, runs killed at these crash points (resume has work left), and a finished run
with patch claims (``audit --save`` seeds)."""

RUN_TARGETS = ["events.jsonl", "checkpoints.sqlite", "checkpoints.sqlite-journal", "report.md", ".report.md.tmp",
               "report.json", "settings.json", "run.json", "evidence.jsonl", "logs/", "logs/lab.log", "verdicts/",
               "verdicts/001-baseline.json", "claims/", "claims/001-baseline.json", "legs/", "legs/baseline/",
               "legs/baseline/bench_runs.jsonl", "legs/baseline/server_info.json", "legs/baseline/leg.json",
               "legs/baseline/outputs.jsonl", "legs/baseline/server.log", "legs/baseline/.server.log.tmp",
               "legs/baseline-aa/", "legs/baseline-aa/bench_runs.jsonl", "writer.lock", "writer.json"]
"""Every file or directory a resume writes or reads (``/``: a directory)."""
MEASURE_LEG = "m1"
MEASURE_TARGETS = ["run.json", "evidence.jsonl", "legs/", f"legs/{MEASURE_LEG}/", f"legs/{MEASURE_LEG}/bench_runs.jsonl",
                   f"legs/{MEASURE_LEG}/server_info.json", f"legs/{MEASURE_LEG}/leg.json",
                   f"legs/{MEASURE_LEG}/outputs.jsonl", f"legs/{MEASURE_LEG}/server.log",
                   f"legs/{MEASURE_LEG}/.server.log.tmp", "writer.lock", "writer.json"]
AUDIT_TARGETS = ["verdicts/", "verdicts/001-baseline.json", "verdicts/002-patch.json", "claims/001-baseline.json",
                 "claims/002-patch.json", "evidence.jsonl", "legs/baseline/bench_runs.jsonl", "writer.lock", "writer.json"]
HOSTILE_LEGS = ["../../x", "../../../x", "../x", "a/b", "a/../../../x", "..", ".", "", "<abs>", "x\x00y", "x" * 300,
                "\x1b[31mred", "legs/../../x", " ", "-rf", "baseline/../../../../x"]


# ----------------------------------------------------------------------------------------- canaries


def canary(marker: str) -> None:
    """A callable a crafted checkpoint names: creates ``marker`` if anything calls it."""
    Path(marker).write_text("executed\n")


class CanaryState(BaseModel):
    """A pydantic model a crafted checkpoint names (the library's pydantic encodings construct it)."""

    marker: str

    def model_post_init(self, context: Any) -> None:
        canary(self.marker)


class _Reduce:
    """Pickles as ``fn(*args)``: what a ``pickle`` pending write runs when loaded."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]):
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.fn, self.args


CALLABLES: list[tuple[str, str, Callable[[str], dict[str, Any]]]] = [
    ("os", "system", lambda m: {"single": f"touch {shlex.quote(m)}", "pos": [f"touch {shlex.quote(m)}"],
                                "kw": {"command": f"touch {shlex.quote(m)}"}}),
    ("os", "mkdir", lambda m: {"single": m, "pos": [m], "kw": {"path": m}}),
    ("os", "makedirs", lambda m: {"single": m, "pos": [m], "kw": {"name": m}}),
    ("builtins", "open", lambda m: {"pos": [m, "w"], "kw": {"file": m, "mode": "w"}}),
    ("subprocess", "call", lambda m: {"single": ["touch", m], "pos": [["touch", m]], "kw": {"args": ["touch", m]}}),
    (__name__, "canary", lambda m: {"single": m, "pos": [m], "kw": {"marker": m}}),
    (__name__, "CanaryState", lambda m: {"kw": {"marker": m}}),
]
"""(module, name, marker -> argument per call shape it accepts): real dangerous callables and the project's
own namespace (an allow-list by module prefix would let these through)."""
EXT_SHAPES = {0: "single", 1: "pos", 2: "kw", 4: "kw", 5: "kw"}
"""jsonplus extension codes that construct (0 one argument, 1 positional, 2 keywords, 4/5 pydantic)."""


# -------------------------------------------------------------------------------- checkpoint codec


class RawExt:
    """A msgpack extension object as stored: its code and bytes (``ormsgpack.Ext`` hides both). Not a
    dataclass: ormsgpack would pack a dataclass as a map."""

    __slots__ = ("code", "data")

    def __init__(self, code: int, data: bytes):
        self.code, self.data = code, data


def _ext_keep(code: int, data: bytes) -> RawExt:
    return RawExt(code, data)


def _ext_out(obj: Any) -> Any:
    import ormsgpack

    if isinstance(obj, RawExt):
        return ormsgpack.Ext(obj.code, obj.data)
    raise TypeError(type(obj).__name__)


def unpack(blob: bytes) -> Any:
    """A checkpoint blob with its extension objects kept as they are (nothing is constructed)."""
    import ormsgpack

    return ormsgpack.unpackb(blob, ext_hook=_ext_keep, option=ormsgpack.OPT_NON_STR_KEYS)


def pack(obj: Any) -> bytes:
    import ormsgpack

    return ormsgpack.packb(obj, default=_ext_out, option=ormsgpack.OPT_NON_STR_KEYS)


def payload(choose: Chooser, marker: str) -> tuple[str, RawExt]:
    """(label, an extension object that calls something creating ``marker`` when constructed)."""
    module, name, args = choose.pick(CALLABLES, "callable")
    code = choose.pick([0, 1, 2, 4, 5, 3, 7], "ext_code")
    if code == 3:  # a method call: module.name.method(arg)
        return "ext3 pathlib.Path.mkdir", RawExt(3, pack(["pathlib", "Path", marker, "mkdir"]))
    fits = [c for c in (0, 1, 2, 4, 5) if EXT_SHAPES[c] in args(marker)]
    inner = choose.pick(fits, "inner_code") if code == 7 or code not in fits else code
    ext = RawExt(inner, pack([module, name, args(marker)[EXT_SHAPES[inner]]] + ([None] if inner == 5 else [])))
    if code == 7:  # the same inside a delta snapshot (decoded with the same hook)
        ext = RawExt(7, pack(ext))
    return f"ext{code}{f'/{inner}' if code != inner else ''} {module}.{name}", ext


def _latest(db: sqlite3.Connection) -> tuple[str, str, bytes] | None:
    try:
        row = db.execute("SELECT checkpoint_id, type, checkpoint FROM checkpoints ORDER BY checkpoint_id DESC "
                         "LIMIT 1").fetchone()
    except sqlite3.Error:
        return None
    return row if row and row[1] == "msgpack" else None


@contextlib.contextmanager
def _database(path: Path) -> Iterator[sqlite3.Connection | None]:
    """The run's checkpoint database, opened by the fuzzer only when it and the files SQLite reads beside
    it are regular files (a FIFO at the journal would block SQLite's read where no alarm reaches)."""
    side = [path.with_name(path.name + s) for s in ("-journal", "-wal", "-shm")]
    if path.is_symlink() or not path.is_file() or any(
            os.path.lexists(p) and (p.is_symlink() or not p.is_file()) for p in side):
        yield None
        return
    db = sqlite3.connect(path)
    try:
        yield db
        db.commit()
    finally:
        db.close()


def retarget(db_path: Path, old: str, new: str) -> None:
    """Point a copied run's checkpoints at the copy (state ``run_dir`` names where the run was recorded)."""
    with _database(db_path) as db:
        if db is None:
            return
        for cid, type_, blob in db.execute("SELECT checkpoint_id, type, checkpoint FROM checkpoints").fetchall():
            if type_ != "msgpack":
                continue
            obj = unpack(blob)
            if obj.get("channel_values", {}).get("run_dir") == old:
                obj["channel_values"]["run_dir"] = new
                db.execute("UPDATE checkpoints SET checkpoint = ? WHERE checkpoint_id = ?", (pack(obj), cid))
        for rowid, value in db.execute("SELECT rowid, value FROM writes WHERE channel = 'run_dir'").fetchall():
            if unpack(value) == old:
                db.execute("UPDATE writes SET value = ? WHERE rowid = ?", (pack(new), rowid))


def edit_state(db_path: Path, edit: Callable[[dict[str, Any]], None]) -> bool:
    """Apply ``edit`` to the latest checkpoint's channel values; False when there is no checkpoint."""
    with _database(db_path) as db:
        latest = _latest(db) if db is not None else None
        if db is None or latest is None:
            return False
        obj = unpack(latest[2])
        edit(obj.setdefault("channel_values", {}))
        db.execute("UPDATE checkpoints SET checkpoint = ? WHERE checkpoint_id = ?", (pack(obj), latest[0]))
        return True


def add_write(db_path: Path, type_: str, value: bytes) -> bool:
    """A pending write on the latest checkpoint (loaded with the checkpoint on resume)."""
    with _database(db_path) as db:
        latest = _latest(db) if db is not None else None
        if db is None or latest is None:
            return False
        db.execute("INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
                   "type, value) VALUES ('perfwarden-run', '', ?, 'fuzz-task', '', 0, 'notes', ?, ?)",
                   (latest[0], type_, value))
        return True


def _edit_record(value: Any, fields: dict[str, Any]) -> Any:
    """A pydantic extension object (code 5) with some of its fields replaced."""
    if not isinstance(value, RawExt) or value.code != 5:
        return value
    inner = unpack(value.data)
    inner[2].update(fields)
    return RawExt(5, pack(inner))


# ------------------------------------------------------------------------------------------- seeds


@dataclass(frozen=True)
class RunSeed:
    name: str
    path: Path
    """The seed run; its checkpoints name this path as ``run_dir``."""


def _fork_run(path: Path, crash_at: str | None, settings_kw: dict[str, Any]) -> None:
    """Record one synthetic run in a forked child (killed at ``crash_at``, a crash point)."""
    pid = os.fork()
    if pid == 0:  # the child never returns into the caller's stack
        code = 70
        try:
            from perfwarden.orchestrator.runner import run_graph  # lazy: langgraph, in the child only

            if crash_at:
                os.environ[ENV] = crash_at
            run_graph(path, RunSettings(**settings_kw), SyntheticLab())
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)


def build_seeds(root: Path) -> list[RunSeed]:
    """Every seed run, recorded once under ``root/runs`` with their seal keys in ``root/keys`` (several
    fuzzers may share them: each copies the keys into its own key store)."""
    from perfwarden.orchestrator.runner import run_graph  # noqa: F401 - warm the imports before forking

    seeds = []
    with _environment(root / "keys"):
        for name in CRASH_SEEDS:
            path = root / "runs" / name.replace(":", "-")
            if not (path / "settings.json").is_file():
                shutil.rmtree(path, ignore_errors=True)
                kw = dict(SEED_SETTINGS, levers=["batch_wait_ms"]) if name == "patch-done" else SEED_SETTINGS
                _fork_run(path, None if name in ("done", "patch-done") else name, kw)
            if (path / "settings.json").is_file():
                seeds.append(RunSeed(name, path))
    return seeds


# --------------------------------------------------------------------------------------- one input


@dataclass
class Box:
    """One input's files: ``run`` (the run), ``outside`` (beside it: link targets), ``markers`` (canaries)."""

    work: Path
    seed: RunSeed
    command: str
    args: list[str] = field(default_factory=list)
    planted_text: bool = False
    fifos: list[Path] = field(default_factory=list)
    devices: bool = True
    """Whether unbounded inputs (``/dev/zero``, a 2 GiB file) may be planted where unfixed code reads them whole."""

    @property
    def run(self) -> Path:
        return self.work / "box" / "run"

    @property
    def outside(self) -> Path:
        return self.work / "outside"

    @property
    def markers(self) -> Path:
        return self.work / "markers"

    def marker(self, label: str) -> str:
        return str(self.markers / f"{len(os.listdir(self.markers))}-{label}")

    def spare(self, name: str) -> Path:
        """A fresh path in ``outside``."""
        return self.outside / f"{len(os.listdir(self.outside))}-{Path(name).name or 'x'}"


def snapshot(box: Box) -> dict[str, tuple[Any, ...]]:
    """Everything beside the run (the run's own subtree and the markers excluded): kind, size, mtime and
    a digest of each entry. A change here is a write outside the run."""
    out: dict[str, tuple[Any, ...]] = {}
    skip = {str(box.run), str(box.markers)}
    for top, dirs, files in os.walk(box.work):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in skip]
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            kind = stat.S_IFMT(st.st_mode)
            digest: Any = None
            if stat.S_ISLNK(st.st_mode):
                digest = os.readlink(path)
            elif stat.S_ISREG(st.st_mode) and st.st_size <= 1 << 20:
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
            out[path] = (kind, st.st_size if not stat.S_ISDIR(st.st_mode) else 0, st.st_mtime_ns, digest)
    return out


def _outside_code(line: str) -> str:
    """``line`` without its code spans (CommonMark: a run of n backticks closes at the next run of exactly
    n) and without backslash-escaped characters: what a renderer would read as markup."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] == "`":
            n = len(line[i:]) - len(line[i:].lstrip("`"))
            close = re.search(rf"(?<!`)`{{{n}}}(?!`)", line[i + n:])
            if close:
                i += n + close.end()
                continue
            i += n
            continue
        out.append(line[i])
        i += 1
    return "".join(out)


def injected(report: Path) -> list[str]:
    """What of the planted text reached ``report.md`` as markup (empty: nothing): a control character,
    or on a line carrying the token a heading, an HTML tag or a link outside code spans and escapes."""
    if not report.is_file() or report.is_symlink():
        return []
    text = report.read_text("utf-8", "replace")
    found = ["raw control characters"] if raw_controls(text.replace("\t", " ")) else []
    for number, line in enumerate(text.splitlines(), 1):
        if TOKEN not in line:
            continue
        markup = _outside_code(line)
        if re.match(r"^ {0,3}#{1,6}(\s|$)", line):
            found.append(f"line {number}: a heading from the run's data")
        if re.search(r"<\s*/?[A-Za-z]", markup):
            found.append(f"line {number}: an HTML tag from the run's data")
        if "](" in markup:
            found.append(f"line {number}: a markdown link from the run's data")
    return found[:5]


# ---------------------------------------------------------------------------------------- mutations


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def plant(box: Box, rel: str, choose: Chooser) -> str:
    """A file-system mutation at ``rel`` (``/``: a directory): a link out of the run, a FIFO, the other
    kind of entry, or nothing."""
    is_dir = rel.endswith("/")
    path = box.run / rel.rstrip("/")
    for parent in reversed(path.relative_to(box.run).parents[:-1]):  # an earlier mutation may have replaced one
        if (box.run / parent).is_symlink() or (os.path.lexists(box.run / parent) and not (box.run / parent).is_dir()):
            return f"skipped({rel}: {parent} is no longer a directory)"
    path.parent.mkdir(parents=True, exist_ok=True)
    op = choose.pick(["link_file", "link_dangling", "link_dir", "fifo", "other_kind", "link_dev_zero", "delete",
                      "link_file", "link_dir"], "fs_op")
    target = box.spare(path.name)
    if op in ("link_file", "link_dir"):
        if path.is_dir() and not path.is_symlink():
            shutil.copytree(path, target, symlinks=True)
        elif path.is_file() and not path.is_symlink():
            shutil.copy(path, target)
        elif op == "link_dir" or is_dir:
            target.mkdir()
        else:
            target.write_bytes(b"outside\n")
    _clear(path)
    if op in ("link_file", "link_dir", "link_dangling"):
        path.symlink_to(target)
    elif op == "link_dev_zero":
        path.symlink_to("/dev/zero")
    elif op == "fifo":
        os.mkfifo(path)
        box.fifos.append(path)
    elif op == "other_kind":
        if is_dir:
            path.write_bytes(b"a file where a directory belongs\n")
        else:
            path.mkdir()
    return f"{op}({rel})"


def crafted_checkpoint(box: Box, choose: Chooser) -> str:
    """A payload that creates a marker if the checkpoint's loader constructs it."""
    db = box.run / "checkpoints.sqlite"
    where = choose.pick(["notes", "new_channel", "record", "stage", "write_msgpack", "write_json", "write_pickle"],
                        "placement")
    marker = box.marker(where)
    label, ext = payload(choose, marker)
    if where == "write_json":
        module, name, _ = choose.pick(CALLABLES, "json_callable")
        body = {"lc": 2, "type": "constructor", "id": [*module.split("."), name], "kwargs": {"marker": marker}}
        done = add_write(db, "json", json.dumps(body).encode())
        label = f"lc2 {module}.{name}"
    elif where == "write_pickle":
        done = add_write(db, "pickle", pickle.dumps(_Reduce(os.mkdir, (marker,))))
        label = "pickle os.mkdir"
    elif where == "write_msgpack":
        done = add_write(db, "msgpack", pack([ext]))
    else:
        def edit(values: dict[str, Any]) -> None:
            if where == "notes":
                values["notes"] = [*_as_list(values.get("notes")), ext]
            elif where == "new_channel":
                values["fuzz_payload"] = ext
            elif where == "stage":
                values["stage"] = ext
            else:
                values["last_verdict"] = _edit_record(values.get("last_verdict"), {"lever": ext})
                values["verdicts"] = [_edit_record(v, {"claim": ext}) for v in _as_list(values.get("verdicts"))]

        done = edit_state(db, edit)
    return f"checkpoint({where}: {label})" if done else "checkpoint(no checkpoint to craft)"


def crafted_state(box: Box, choose: Chooser) -> str:
    """State fields naming places out of the run, of the wrong type, or carrying hostile text."""
    db = box.run / "checkpoints.sqlite"
    what = choose.pick(["run_dir_moved", "run_dir_outside", "pending_claim", "text", "text", "text", "wrong_type"],
                       "state_field")
    text = choose.pick(HOSTILE_TEXT, "text")
    if what == "run_dir_moved":  # the run was recorded elsewhere and copied here: the original must stay put
        moved = box.spare("recorded-here")
        shutil.copytree(box.seed.path, moved, symlinks=True)
        edit: Callable[[dict[str, Any]], None] = lambda v: v.__setitem__("run_dir", str(moved))
    elif what == "run_dir_outside":
        elsewhere = box.spare("elsewhere")
        elsewhere.mkdir()
        edit = lambda v: v.__setitem__("run_dir", choose.pick([str(elsewhere), str(box.run / ".." / ".."), "/"], "dir"))
    elif what == "pending_claim":
        claim = box.spare("claim.json")
        claim.write_text(next(box.seed.path.parent.glob("*/claims/001-baseline.json")).read_text())
        edit = lambda v: v.update(pending_claim=choose.pick(["../../outside/" + claim.name, str(claim),
                                                             "claims/../../" + claim.name], "claim"),
                                  stage=v.get("stage"))
    elif what == "text":
        box.planted_text = True
        field_ = choose.pick(["notes", "lever", "path", "claim"], "text_field")

        def edit(v: dict[str, Any]) -> None:
            if field_ == "notes":
                v["notes"] = [*_as_list(v.get("notes")), text]
            else:
                v["verdicts"] = [_edit_record(x, {field_: text}) for x in _as_list(v.get("verdicts"))]
        if choose.integer(0, 1, "drop_report"):  # a finished run rewrites a missing report from its state
            _clear(box.run / choose.pick(["report.md", "report.json"], "dropped"))
    else:
        key = choose.pick(["stage", "state_version", "seq", "started_at", "aa_legs", "baseline_attempts", "notes"], "key")
        value = choose.pick([None, "x", -1, 2**63 - 1, float("nan"), 1e308, [1], {"a": 1}, ["../../x"], True], "value")
        edit = lambda v: v.__setitem__(key, value)
        what = f"{key}={value!r}"[:60]
    return f"state({what})" if edit_state(db, edit) else "state(no checkpoint to craft)"


def canary_program(box: Box) -> Path:
    """An executable inside the run that creates a marker when run."""
    program = box.run / "bin" / "python"
    program.parent.mkdir(exist_ok=True)
    program.write_text(f"#!/bin/sh\ntouch {shlex.quote(box.marker('program'))}\nexit 1\n")
    program.chmod(0o755)
    return program


def crafted_settings(box: Box, choose: Chooser) -> str:
    """settings.json naming a program in the run, or with unknown fields, wrong types, NaN, huge values."""
    path = box.run / "settings.json"
    try:
        settings = json.loads(path.read_text()) if path.is_file() and not path.is_symlink() else dict(SEED_SETTINGS)
    except ValueError:
        settings = dict(SEED_SETTINGS)
    what = choose.pick(["interpreter", "interpreter", "unknown", "wrong_type", "nan", "huge", "llm", "seal_id"], "settings")
    if what == "interpreter":
        model = box.run / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text("{}\n")
        settings.update(target="sglang", model=str(model), sglang_python=str(canary_program(box)))
    elif what == "unknown":
        settings[choose.pick(["exec", "python", "command", "sglang_python_path"], "name")] = str(canary_program(box))
    elif what == "seal_id":  # the evidence chain's seal id naming a path (a key would be read from it)
        return seal_id_path(box, choose)
    else:
        key = choose.pick(["reps", "budget_minutes", "max_reps", "recursion_limit", "max_proposals", "rep_seconds",
                           "offline_samples", "seed", "levers", "base_config", "target"], "key")
        settings[key] = {"wrong_type": choose.pick(["3", [], {}, None, True, "synthetic\x00"], "value"),
                         "nan": float("nan"), "huge": choose.pick([10**30, 1e308, 2**63, -(10**30)], "huge"),
                         "llm": None}[what]
        if what == "llm":
            settings.update(llm_model="fuzz-model", llm_timeout_s=0.5, llm_max_retries=0)
    path.unlink(missing_ok=True) if not path.is_dir() else shutil.rmtree(path)
    path.write_text(json.dumps(settings))
    return f"settings({what})"


def seal_id_path(box: Box, choose: Chooser) -> str:
    """The chain's first entry names a seal id that is a path: a key looked up there lies in the run."""
    evidence = box.run / "evidence.jsonl"
    if evidence.is_symlink() or not evidence.is_file():
        return "seal_id(no chain)"
    lines = evidence.read_bytes().split(b"\n")
    try:
        first = json.loads(lines[0])
    except ValueError:
        return "seal_id(no chain)"
    key = box.run / "evil.key"
    with open(key, "wb") as handle:  # a huge sparse "key": reading it whole is unbounded
        handle.truncate(choose.pick([70 << 20, 2 << 30 if box.devices else 70 << 20], "key_size"))
    first["seal_id"] = choose.pick([str(box.run / "evil"), "../../" + str(box.run.relative_to(box.work)) + "/evil",
                                    "../evil"], "seal_id")
    evidence.write_bytes(b"\n".join([json.dumps(first).encode(), *lines[1:]]))
    return f"seal_id({first['seal_id'][-40:]})"


def measure_args(box: Box, choose: Chooser) -> tuple[list[str], str]:
    """``measure`` arguments: a hostile leg name or the usual one, and sometimes a hostile ``--set``."""
    leg = choose.pick(HOSTILE_LEGS + [MEASURE_LEG] * 6, "leg")
    if leg == "<abs>":
        leg = str(box.outside / "abs-leg")
    args = ["measure", "--out", str(box.run), "--leg", leg, "--reps", "1", "--duration", "0.5", "--scenario", "offline"]
    if choose.integer(0, 7, "set") == 0:
        args += ["--set", choose.pick(["max_batch_size=NaN", "max_batch_size=1e400", "threads=-1", "x=1",
                                       "batch_wait_ms=" + "9" * 400, "op_overrides=../../x.py:f"], "knob")]
    return args, leg


def key_option(box: Box, choose: Chooser) -> list[str]:
    """An ``audit --key`` that is not a regular key file (or none)."""
    kind = choose.pick(["none", "none", "fifo", "directory", "sparse", "link", "dev_zero"], "key")
    devices = box.devices
    if kind == "none" or (kind == "dev_zero" and not devices):
        return []
    key = box.spare("key")
    if kind == "fifo":
        os.mkfifo(key)
        box.fifos.append(key)
    elif kind == "directory":
        key.mkdir()
    elif kind == "sparse":
        with open(key, "wb") as handle:
            handle.truncate(2 << 30 if devices else 70 << 20)
    elif kind == "link":
        key.symlink_to("/dev/zero" if devices else "/dev/null")
    else:
        return ["--key", "/dev/zero"]
    return ["--key", str(key)]


# ------------------------------------------------------------------------------------------ fuzzer


class StandInLab:
    """``measure``'s lab during the fuzz: the synthetic target (same RunDir, seal and bench writers as a
    real leg), so an input costs milliseconds instead of a model load."""

    def __new__(cls, **kw: Any) -> Any:
        return SyntheticLab(on_rep=kw.get("on_rep"))


@contextlib.contextmanager
def _environment(key_dir: Path) -> Iterator[None]:
    """The fuzz's own key store, an interpreter variable naming nothing, an LLM endpoint that refuses at
    once; restored afterwards (the test suite shares the process)."""
    names = {"PERFWARDEN_KEY_DIR": str(key_dir), "PERFWARDEN_SGLANG_PYTHON": "/nonexistent/python",
             "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "fuzz", "PERFWARDEN_CRASH_AT": None}
    saved = {k: os.environ.get(k) for k in names}
    for k, v in names.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


class RundirFuzzer:
    """Runs run-directory inputs in this process. ``scratch`` holds the seeds, the key store and one
    input's copy at a time."""

    TARGETS = ("resume", "resume", "resume", "resume", "measure", "measure", "audit-save", "audit-save")

    def __init__(self, scratch: Path, timeout_s: int = 10, memory_limit: int = 3 << 30, devices: bool = True,
                 seeds_root: Path | None = None):
        from typer.testing import CliRunner

        self.scratch = Path(scratch)
        self.timeout_s = timeout_s
        self.memory_limit = memory_limit
        self.devices = devices
        """Whether ``/dev/zero`` and a 2 GiB key may be handed to ``--key`` (only under an address-space
        limit: unfixed code reads them until memory runs out)."""
        self.runner = CliRunner()
        self._command: Any = None
        self._graph: Any = None
        self.key_dir = self.scratch / "keys"
        logging.getLogger("langgraph").setLevel(logging.CRITICAL)
        seeds_root = Path(seeds_root or self.scratch / "seeds")
        self.seeds = build_seeds(seeds_root)
        if len(self.seeds) < 5:
            raise RuntimeError(f"only {len(self.seeds)} synthetic seed runs could be recorded")
        shutil.copytree(seeds_root / "keys", self.key_dir, dirs_exist_ok=True)

    def run_one(self, choose: Chooser, target: str | None = None) -> Outcome:
        target = target or choose.pick(self.TARGETS, "target")
        work = Path(tempfile.mkdtemp(prefix="fr-", dir=self.scratch))
        started = time.monotonic()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        keys_before = set(os.listdir(self.key_dir)) if self.key_dir.is_dir() else set()
        outcome = Outcome(target, "?", [])
        old = signal.signal(signal.SIGALRM, _alarm)
        try:
            with _environment(self.key_dir):
                self._one(choose, target, work, outcome)
        except Hang:
            outcome.problems.append("hang")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
            self._cleanup(work, keys_before)
        outcome.seconds = round(time.monotonic() - started, 3)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if peak > self.memory_limit >= rss_before:
            outcome.problems.append("memory")
        return outcome

    def _one(self, choose: Chooser, target: str, work: Path, outcome: Outcome) -> None:
        box = self._prepare(choose, target, work, outcome)
        before = snapshot(box)
        report_before = _stat_or_none(box.run / "report.md")
        # The alarm breaks a wait in Python; the timer gives a reader blocked inside C code its end of file.
        watchdog = threading.Timer(self.timeout_s + 1, _unblock, [box.fifos])
        watchdog.daemon = True
        signal.alarm(self.timeout_s)
        watchdog.start()
        try:
            self._invoke(box, outcome)
        finally:
            signal.alarm(0)
            watchdog.cancel()
        self._judge(box, outcome, before, report_before)

    def _prepare(self, choose: Chooser, target: str, work: Path, outcome: Outcome) -> Box:
        """Copy a seed, mutate it, and build the command line (recorded in ``outcome``)."""
        seeds = [s for s in self.seeds if s.name.endswith("done")] if target == "audit-save" else self.seeds
        seed = choose.pick(seeds, "seed")
        box = Box(work, seed, target, devices=self.devices)
        for d in (box.run.parent, box.outside, box.markers):
            d.mkdir(parents=True)
        shutil.copytree(seed.path, box.run, symlinks=True)
        retarget(box.run / "checkpoints.sqlite", str(seed.path), str(box.run))
        outcome.seed = seed.name
        leg = MEASURE_LEG
        if target == "measure":
            box.args, leg = measure_args(box, choose)
        elif target == "resume":
            box.args = ["run", "--resume", str(box.run), "--target", "synthetic"]
        else:
            claim = choose.pick(sorted(p.name for p in (box.run / "claims").glob("*.json")), "claim")
            box.args = ["audit", str(box.run), "--claim", str(box.run / "claims" / claim), "--save",
                        *(["--json"] if choose.integer(0, 1, "json") else []), *key_option(box, choose)]
        outcome.mutations.append(" ".join(_short(a.replace(str(work), "<work>")) for a in box.args))
        # Now and then a genuinely valid run (the success path); else 1-3 mutations.
        for _ in range(0 if choose.integer(0, 9, "valid") == 0 else choose.integer(1, 3, "n_mutations")):
            outcome.mutations.append(self._mutate(box, choose, leg))
        done = " ".join(outcome.mutations[1:])
        outcome.exercised += [tag for tag, seen in [("unmutated", len(outcome.mutations) == 1),
                                                    ("payload", "checkpoint(" in done and "no checkpoint" not in done),
                                                    ("program", "settings(interpreter)" in done or "settings(unknown)" in done),
                                                    ("link", "link_" in done), ("fifo", "fifo(" in done),
                                                    ("fuzzer_error", "FUZZER ERROR" in done)] if seen]
        return box

    def _mutate(self, box: Box, choose: Chooser, leg: str) -> str:
        own = {"resume": RUN_TARGETS, "measure": MEASURE_TARGETS, "audit-save": AUDIT_TARGETS}[box.command]
        kinds = ["plant"] * 4 + (["checkpoint", "checkpoint", "state", "state", "settings"]
                                 if box.command == "resume" else ["settings"])
        kind = choose.pick(kinds, "mutation")
        try:
            return self._apply(box, choose, leg, own, kind)
        except (OSError, sqlite3.Error) as exc:  # the fuzzer's own step failed on what an earlier mutation left
            return f"{kind} not applied ({type(exc).__name__}: {exc})"
        except Exception as exc:  # noqa: BLE001 - a fuzzer bug: shown (printed as fuzzer_error), not fatal to the run
            return f"FUZZER ERROR in {kind}: {type(exc).__name__}: {exc}"

    def _apply(self, box: Box, choose: Chooser, leg: str, own: list[str], kind: str) -> str:
        if kind == "checkpoint":
            return crafted_checkpoint(box, choose)
        if kind == "state":
            return crafted_state(box, choose)
        if kind == "settings":
            return crafted_settings(box, choose)
        rel = choose.pick(own if choose.integer(0, 3, "own") else RUN_TARGETS + MEASURE_TARGETS, "file")
        return plant(box, rel.replace(f"legs/{MEASURE_LEG}/", f"legs/{leg}/") if _plain(leg) else rel, choose)

    def _invoke(self, box: Box, outcome: Outcome) -> None:
        from unittest import mock

        # fsync is a no-op here: durability is not what this fuzz checks, and it is a third of an input's
        # cost; the click command and the graph's builder are made once, not per input.
        if self._command is None:
            import typer.main

            self._command = typer.main.get_command(_app())
            from perfwarden.orchestrator.graph import build_graph  # lazy: langgraph (the orchestrator extra)

            self._graph = build_graph()  # the same for every input; compiled per run as always
        with mock.patch("perfwarden.harness.labs.embedded.EmbeddedLab", StandInLab), \
                mock.patch("os.fsync", lambda fd: None), mock.patch("typer.testing._get_command", lambda app: self._command), \
                mock.patch("perfwarden.orchestrator.runner.build_graph", lambda: self._graph):
            result = self.runner.invoke(_app(), box.args)
        outcome.exit_code = result.exit_code
        exc = result.exception
        if isinstance(exc, Hang):
            raise exc
        if isinstance(exc, MemoryError):
            outcome.problems.append("memory")
        elif exc is not None and not isinstance(exc, SystemExit):
            outcome.problems.append("traceback")
            outcome.mutations.append(f"EXCEPTION {type(exc).__name__}: {str(exc)[:200]}")
        if box.command == "resume" and result.exit_code == 1:  # the synthetic lab cannot fail: an internal error
            outcome.problems.append("internal_error")
            outcome.mutations.append("OUTPUT " + " ".join(result.output.split())[-240:])
        elif result.exit_code not in CONTRACT[box.command] and "traceback" not in outcome.problems:
            outcome.problems.append("exit_code")
        if "--json" not in box.args and raw_controls(result.output):
            outcome.problems.append("raw_control")
        outcome.verdict = str(result.exit_code)

    def _judge(self, box: Box, outcome: Outcome, before: dict[str, tuple[Any, ...]],
               report_before: tuple[int, int] | None) -> None:
        executed = sorted(os.listdir(box.markers))
        if executed:
            outcome.problems.append("code_execution")
            outcome.mutations.append(f"MARKERS {executed[:3]}")
        after = snapshot(box)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        if changed:
            outcome.problems.append("write_outside")
            outcome.mutations.append("OUTSIDE " + ", ".join(os.path.relpath(c, box.work) for c in changed[:4]))
        report = box.run / "report.md"
        if box.planted_text and _stat_or_none(report) != report_before:
            outcome.exercised.append("report_text")
            found = injected(report)
            if found:
                outcome.problems.append("injection")
                outcome.mutations.append(f"REPORT {found[:3]}")

    def _cleanup(self, work: Path, keys_before: set[str]) -> None:
        with contextlib.suppress(Exception):
            seal.forget(work / "box" / "run")
        with seal._REGISTRY_LOCK:  # chains this input opened (a measure's stand-in lab, a resume)
            for root in [r for r in seal._CHAINS if str(r).startswith(str(work))]:
                del seal._CHAINS[root]
        if self.key_dir.is_dir():
            for name in set(os.listdir(self.key_dir)) - keys_before:
                (self.key_dir / name).unlink(missing_ok=True)
        _make_writable(work)
        shutil.rmtree(work, ignore_errors=True)


def _as_list(value: Any) -> list[Any]:
    """A state list an earlier mutation may have replaced by another type."""
    return value if isinstance(value, list) else []


def _plain(name: str) -> bool:
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\x00") and len(name) < 200


def _short(arg: str) -> str:
    return repr(arg[:40] + ("..." if len(arg) > 40 else "")) if not arg.isprintable() or len(arg) > 40 else arg


def _stat_or_none(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ino


def _unblock(fifos: list[Path]) -> None:
    """Give any reader still blocked on a planted FIFO its end of file."""
    for fifo in fifos:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _make_writable(root: Path) -> None:
    for top, dirs, _ in os.walk(root):
        for d in dirs:
            path = os.path.join(top, d)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o755)
