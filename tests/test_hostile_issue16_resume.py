"""Issue 16, item 1: resuming executes nothing a run's files name.

A run directory someone else prepared is input to ``run --resume``: its checkpoint may name any type
(LangGraph's default serializer imports and calls it), and its settings.json may name an interpreter
or code to load. Each attack here plants a command that would create a marker file and checks that
the resume exits 3 with a message naming what was refused, and that the marker does not exist. Each
test failed before the fix (the marker was created, or the resume exited 0).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_SINGLE_ARG, JsonPlusSerializer
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.orchestrator.runner import RunUsageError, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab


def cli(*args: str) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess (the attack as a person would meet it)."""
    return subprocess.run([sys.executable, "-m", "perfwarden.cli.main", *args], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def cli_here(*args: str) -> tuple[int, str]:
    """The CLI in this process (fast): exit code and its output, whitespace collapsed."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, " ".join(result.output.split())


def synthetic_run(path: Path, **lab) -> Path:
    """A small real run of the synthetic target (a second or so), finished unless ``lab`` crashes it."""
    settings = RunSettings(target="synthetic", levers=["max_batch_size=2"], kernels=False)
    try:
        run_graph(path, settings, SyntheticLab(**lab), capture_logs=False)
    except KeyboardInterrupt:  # SyntheticLab(crash_after=N) stops the run mid-rep, as a kill would
        pass
    return path


def plant(run: Path, payload: ormsgpack.Ext) -> None:
    """Add ``payload`` to the notes of every checkpoint in the run; every other value is kept byte for byte
    (extension objects are decoded as themselves, never revived)."""
    def keep(code: int, data: bytes) -> ormsgpack.Ext:
        return ormsgpack.Ext(code, data)

    with sqlite3.connect(run / "checkpoints.sqlite") as conn:
        rows = conn.execute("SELECT rowid, type, checkpoint FROM checkpoints").fetchall()
        assert rows and all(kind == "msgpack" for _, kind, _ in rows)
        for rowid, _, blob in rows:
            checkpoint = ormsgpack.unpackb(blob, ext_hook=keep, option=ormsgpack.OPT_NON_STR_KEYS)
            values = checkpoint["channel_values"]
            values["notes"] = [*values.get("notes", []), payload]
            conn.execute("UPDATE checkpoints SET checkpoint = ? WHERE rowid = ?",
                         (ormsgpack.packb(checkpoint, option=ormsgpack.OPT_NON_STR_KEYS), rowid))


def os_system(command: str) -> ormsgpack.Ext:
    """The msgpack extension object the library revives as ``os.system(command)``."""
    return ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, ormsgpack.packb(("os", "system", command)))


@pytest.mark.integration
def test_a_checkpoint_naming_os_system_is_refused_naming_the_type_and_runs_nothing(tmp_path):
    run = synthetic_run(tmp_path / "run")
    marker = tmp_path / "pwned"
    plant(run, os_system(f"touch {marker}"))
    done = cli("run", "--resume", str(run))
    assert not marker.exists(), "the checkpoint's os.system ran on resume"
    assert done.returncode == 3, done.stderr[-2000:]
    assert "os.system" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("payload", [
    ormsgpack.Ext(3, ormsgpack.packb(("pathlib", "Path", "x", "touch"))),  # a method call
    ormsgpack.Ext(6, ormsgpack.packb(("|O", [1], "C", b"\0" * 8))),  # an array
    ormsgpack.Ext(5, ormsgpack.packb(("perfwarden.orchestrator.settings", "RunSettings", {}, "x"))),  # ours, not state
])
def test_any_other_extension_is_refused_in_process(tmp_path, payload):
    run = synthetic_run(tmp_path / "run")
    plant(run, payload)
    with pytest.raises(RunUsageError, match="cannot be resumed: the checkpoint"):
        run_graph(run, RunSettings(), SyntheticLab(), resume=True)


def test_a_pending_write_naming_a_function_is_refused_too(tmp_path):
    """Writes saved for a task that finished just before a crash are loaded on resume as well."""
    run = synthetic_run(tmp_path / "run", crash_after=6)
    marker = tmp_path / "pwned"
    serde = JsonPlusSerializer()
    with sqlite3.connect(run / "checkpoints.sqlite") as conn:
        thread, ns, cid = conn.execute("SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints "
                                       "ORDER BY checkpoint_id DESC LIMIT 1").fetchone()
        kind, blob = serde.dumps_typed([os_system(f"touch {marker}")])
        conn.execute("INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, "
                     "value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (thread, ns, cid, "planted-task", 0, "notes", kind, blob))
    with pytest.raises(RunUsageError, match="os.system"):
        run_graph(run, RunSettings(), SyntheticLab(), resume=True)
    assert not marker.exists()


def test_a_fresh_runs_checkpoints_name_only_allowed_types_and_it_resumes(tmp_path):
    """The allow-list covers everything a real run writes: crash a run, check every stored value, resume."""
    from perfwarden.orchestrator.checkpoint_serde import ALLOWED_TYPES, named_types

    run = synthetic_run(tmp_path / "run", crash_after=12)
    assert not (run / "report.json").exists()
    named: set[tuple[str, str]] = set()
    with sqlite3.connect(run / "checkpoints.sqlite") as conn:
        values = [*conn.execute("SELECT type, checkpoint FROM checkpoints"),
                  *conn.execute("SELECT type, value FROM writes")]
    for kind, blob in values:
        assert kind in ("msgpack", "null")
        if kind == "msgpack":
            named |= set(named_types(blob))
    assert named and named <= ALLOWED_TYPES, named - ALLOWED_TYPES
    state = run_graph(run, RunSettings(), SyntheticLab(), resume=True)
    assert state["stage"] == "done" and (run / "report.json").is_file()
    assert [b.name for b in state["banked"]] == ["cfg-max_batch_size=2"]


# ------------------------------------------------------------------------------------- settings.json

def sglang_settings(run: Path, model: Path, **fields) -> None:
    """An sglang run's settings.json as a hostile colleague writes it (no checkpoint: resume starts it)."""
    run.mkdir(parents=True, exist_ok=True)
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    (run / "settings.json").write_text(json.dumps({"target": "sglang", "model": str(model), **fields}))


def marker_script(path: Path, marker: Path) -> str:
    path.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_settings_file_naming_the_sglang_interpreter_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    """settings.json pointed the SGLang interpreter at a script inside the run: resume ran it, unconfined."""
    monkeypatch.delenv("PERFWARDEN_SGLANG_PYTHON", raising=False)
    run, marker = tmp_path / "run", tmp_path / "pwned"
    run.mkdir()
    sglang_settings(run, tmp_path / "weights", sglang_python=marker_script(run / "python", marker))
    for extra in ([], ["--sglang-python", sys.executable]):  # given an interpreter or not: the field is refused
        code, message = cli_here("run", "--resume", str(run), *extra)
        assert not marker.exists(), "resume ran the interpreter the run's settings named"
        assert code == 3, message
        assert "may not name an interpreter ('sglang_python')" in message and "--sglang-python" in message


@pytest.mark.parametrize("base_config, says", [
    ({"op_overrides": {"rmsnorm": "RUN/evil.py:fn"}}, "name code to load"),  # a file inside the run, imported
    ({"op_overrides": {"rmsnorm": "subprocess:getoutput"}}, "name code to load"),  # a module function
    ({"trust_remote_code": True}, "unknown knob 'trust_remote_code'"),  # would become an SGLang launch flag
    ({"max_batch_size": "2; touch x"}, "invalid knob 'max_batch_size'"),
])
def test_a_settings_file_whose_baseline_names_code_or_unknown_knobs_is_refused(tmp_path, base_config, says):
    """The baseline knobs were never checked on resume: an op override named code to import, an unknown
    knob became a launch flag of the server."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "evil.py").write_text(f"open({str(tmp_path / 'pwned')!r}, 'w').close()\ndef fn(*a):\n    return a[0]\n")
    text = json.dumps({"target": "synthetic", "kernels": False, "base_config": base_config})
    (run / "settings.json").write_text(text.replace("RUN", str(run)))
    with pytest.raises(RunUsageError, match="settings.json"):
        run_graph(run, RunSettings(), SyntheticLab(), resume=True)
    code, message = cli_here("run", "--resume", str(run))
    assert code == 3 and says in message, message
    assert not (run / "checkpoints.sqlite").exists() and not (tmp_path / "pwned").exists()


def test_a_new_run_cannot_put_code_into_its_settings(tmp_path):
    """``--set op_overrides...`` on ``run`` would have been written to settings.json and imported on resume."""
    code, message = cli_here("run", "--target", "synthetic", "--out", str(tmp_path / "run"), "--set",
                             f"op_overrides.rmsnorm={tmp_path / 'k.py'}:fn")
    assert code == 3 and "name code to load" in message, message
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- what the checkpoint's records name

def rewrite_proposals(run: Path, **update) -> None:
    """Change every proposal of every checkpoint (records of the allowed types, so only what they name
    can give the forgery away)."""
    from perfwarden.orchestrator.checkpoint_serde import ALLOWED_TYPES

    serde = JsonPlusSerializer(allowed_msgpack_modules=sorted(ALLOWED_TYPES))
    with sqlite3.connect(run / "checkpoints.sqlite") as conn:
        for rowid, kind, blob in conn.execute("SELECT rowid, type, checkpoint FROM checkpoints").fetchall():
            checkpoint = serde.loads_typed((kind, blob))
            values = checkpoint["channel_values"]
            values["proposals"] = [p.model_copy(update=update) for p in values.get("proposals", [])]
            conn.execute("UPDATE checkpoints SET checkpoint = ? WHERE rowid = ?", (serde.dumps_typed(checkpoint)[1],
                                                                                   rowid))


@pytest.mark.parametrize("update, says", [
    ({"config": {"op_overrides": {"rmsnorm": "subprocess:getoutput"}}}, "'subprocess:getoutput'"),
    ({"op": "rmsnorm", "candidates": ["RUN/evil.py:fn"]}, "evil.py:fn"),  # a file the run planted, not generated/
    ({"op": "rmsnorm", "chosen": "/tmp/elsewhere/k.py:fn"}, "k.py:fn"),
    ({"config": {"trust_remote_code": True}}, "unknown knob 'trust_remote_code'"),  # an SGLang launch flag
])
def test_a_checkpoint_whose_records_name_foreign_code_or_knobs_is_refused(tmp_path, update, says):
    run = synthetic_run(tmp_path / "run")
    update = json.loads(json.dumps(update).replace("RUN", str(run)))
    rewrite_proposals(run, **update)
    with pytest.raises(RunUsageError, match="cannot be resumed") as info:
        run_graph(run, RunSettings(), SyntheticLab(), resume=True)
    assert says in str(info.value)


def test_kernels_the_run_generated_or_perfwarden_offers_still_resume(tmp_path):
    """A genuine kernel candidate: generated into RUN/generated/ (run only in the sandbox) or perfwarden's own.
    The companion of the test above (it passes before the fix too): the guard must not refuse these."""
    from perfwarden.harness import ops

    run = synthetic_run(tmp_path / "run")
    own = next(Path(ops.__file__).parent.glob("*_alt.py"))
    rewrite_proposals(run, op="rmsnorm", candidates=[f"{run}/generated/rmsnorm_llm_0.py:rmsnorm", f"{own}:fn",
                                                     "perfwarden.harness.ops.rmsnorm_alt:rmsnorm"])
    assert run_graph(run, RunSettings(), SyntheticLab(), resume=True)["stage"] == "done"


@pytest.mark.parametrize("field", ["model", "speculative_draft_model_path"])
def test_weights_inside_the_run_are_not_loaded_on_resume(tmp_path, field):
    """The run's author's own files are never handed to SGLang as weights (a pickled .bin is code)."""
    run = tmp_path / "run"
    run.mkdir()
    planted = run / "weights"
    planted.mkdir()
    (planted / "config.json").write_text("{}")
    marker = tmp_path / "pwned"
    python = marker_script(tmp_path / "sglang-python", marker)  # the person's interpreter: probing it is fine
    extra = {"base_config": {"speculative_draft_model_path": str(planted)}} if field != "model" else {}
    sglang_settings(run, planted if field == "model" else tmp_path / "weights", **extra)
    code, message = cli_here("run", "--resume", str(run), "--sglang-python", python)
    assert code == 3 and "weights inside the run" in message and field in message, message
    assert not marker.exists()  # refused before the interpreter is even probed
