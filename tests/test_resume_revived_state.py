"""A revived checkpoint's state is input: it names no place to write or read, and its types are checked.

Found by ``benchmarks/fuzz.py --rundir`` after issue 16's fixes: ``graph._run(state)`` wrote wherever the
checkpoint's ``run_dir`` pointed (a folder outside the run, or the original of a copied run), a
``pending_claim`` outside ``claims/`` was read, and a field of the wrong type ended in a node's
``TypeError`` (exit 1). Each test failed before the fix.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab
from fuzzing.fuzz_rundir import _edit_record, edit_state


def unfinished_run(path: Path) -> Path:
    """A synthetic run killed mid-measurement (resume has nodes left to run)."""
    settings = RunSettings(target="synthetic", levers=["max_batch_size=2"], kernels=False)
    try:
        run_graph(path, settings, SyntheticLab(crash_after=6), capture_logs=False)
    except KeyboardInterrupt:
        pass
    return path


def resume(run: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", "--resume", str(run), "--target", "synthetic"])
    return result.exit_code, " ".join(result.output.split())


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder``: size and mtime (what a write would change)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def set_state(run: Path, **fields: Any) -> None:
    assert edit_state(run / "checkpoints.sqlite", lambda values: values.update(fields))


def test_a_checkpoint_naming_another_run_dir_writes_nothing_there(tmp_path):
    run = unfinished_run(tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    set_state(run, run_dir=str(elsewhere))
    code, out = resume(run)
    assert code == 0, out
    assert list(elsewhere.iterdir()) == []  # before: claims/001-baseline.json and events.jsonl
    assert (run / "report.md").is_file() and (run / "claims" / "001-baseline.json").is_file()


def test_a_copied_run_resumes_in_its_new_place_and_leaves_the_original_alone(tmp_path):
    original = unfinished_run(tmp_path / "recorded-here")
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, symlinks=True)
    before = tree(original)
    code, out = resume(copy)
    assert code == 0, out
    assert tree(original) == before  # before: events.jsonl, report.json, report.md written into the original
    assert (copy / "report.md").is_file()
    assert str(copy) in (copy / "report.md").read_text("utf-8")


@pytest.mark.parametrize("fields, says", [
    ({"started_at": {"a": 1}}, "'started_at'"),
    ({"notes": 1e308}, "'notes'"),
    ({"aa_legs": [1]}, "'aa_legs.0'"),
    ({"started_at": float("nan")}, "'started_at'"),
    ({"started_at": 1e308}, "'started_at'"),
    ({"seq": 2**63 - 1}, "'seq'"),
    ({"verdicts": "x"}, "'verdicts'"),
])
def test_revived_state_of_the_wrong_type_is_exit_3_naming_the_field(tmp_path, fields, says):
    run = unfinished_run(tmp_path / "run")
    set_state(run, **fields)
    code, out = resume(run)
    assert code == 3, out
    assert says in out


@pytest.mark.parametrize("fields", [
    {"pending_claim": "../../outside/claim.json"}, {"pending_claim": "claims/../../claim.json"},
    {"pending_claim": "/etc/passwd"}, {"aa_legs": ["baseline", "../../x"]},
])
def test_revived_state_naming_a_place_outside_the_run_is_refused(tmp_path, fields):
    run = unfinished_run(tmp_path / "run")
    set_state(run, **fields)
    code, out = resume(run)
    assert code == 3, out
    assert "checkpoint" in out


@pytest.mark.parametrize("field, value", [("claim", "../../outside/claim.json"), ("claim", "/etc/passwd"),
                                          ("path", "verdicts/../../x.json")])
def test_revived_verdicts_naming_a_file_outside_the_run_are_refused(tmp_path, field, value):
    """The fix node reads ``last_verdict.claim`` (``load_claim(run / v.claim)``): an absolute or ``..`` path
    there reads outside the run."""
    run = tmp_path / "run"
    run_graph(run, RunSettings(target="synthetic", levers=["max_batch_size=2"], kernels=False), SyntheticLab(),
              capture_logs=False)

    def edit(values: dict[str, Any]) -> None:
        values["verdicts"] = [_edit_record(v, {field: value}) for v in values["verdicts"]]
        values["last_verdict"] = _edit_record(values["last_verdict"], {field: value})
    assert edit_state(run / "checkpoints.sqlite", edit)
    code, out = resume(run)
    assert code == 3, out
    assert f"verdict.{field}" in out or f"verdicts.{field}" in out


@pytest.mark.parametrize("with_pending_note", [False, True], ids=["stored", "stored+pending-write"])
def test_a_state_channel_stored_as_none_is_refused_not_a_reducer_typeerror(tmp_path, with_pending_note):
    """``notes=None`` stored, alone or with a pending note a reducer would add to it, is exit 3 naming the
    field, never the reducer's ``None + list`` TypeError (exit 1) seen once in fuzz --rundir (seed 0, input
    4402, not reproduced alone: this guards the path, it did not fail before)."""
    from fuzzing.fuzz_rundir import add_write, pack

    run = unfinished_run(tmp_path / "run")
    set_state(run, notes=None)
    if with_pending_note:
        assert add_write(run / "checkpoints.sqlite", "msgpack", pack(["a planted note"]))
    code, out = resume(run)
    assert code == 3, out
    assert "'notes'" in out



@pytest.mark.slow
@pytest.mark.parametrize("index", [5499, 7502])
def test_the_fuzz_inputs_that_ended_in_exit_1_are_input_errors_now(tmp_path, index):
    """benchmarks/fuzz.py --rundir, seed 0: input 5499 (a run killed after writing report.json, its state's
    ``notes`` set to None: ``get_state`` already runs the ``notes`` reducer over the last task's pending
    writes, so it raised ``None + list`` before any check saw the state) and input 7502 (settings'
    ``recursion_limit`` true, read as 1: GraphRecursionError) both ended in exit 1; each is exit 3 now.
    The inputs are replayed exactly as the benchmark's ``--replay`` does."""
    from fuzzing.fuzz import RandomChooser
    from fuzzing.fuzz_rundir import RundirFuzzer

    outcome = RundirFuzzer(tmp_path, timeout_s=60, memory_limit=3 << 30).run_one(RandomChooser(index))
    assert outcome.exit_code == 3 and not outcome.problems, outcome

def test_a_settings_recursion_limit_too_low_to_finish_a_run_is_refused(tmp_path, monkeypatch):
    """benchmarks/fuzz.py --rundir (seed 0, input 7502): ``"recursion_limit": true`` reads as 1 and the
    resumed graph stopped on GraphRecursionError (exit 1); a limit below 100 is a settings error (exit 3)."""
    import json

    from fuzzing.fuzz_rundir import SEED_SETTINGS, _fork_run

    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path / "keys"))
    run = tmp_path / "run"
    _fork_run(run, "before:report", SEED_SETTINGS)
    settings = json.loads((run / "settings.json").read_text())
    (run / "settings.json").write_text(json.dumps({**settings, "recursion_limit": True}))
    code, out = resume(run)
    assert code == 3 and "recursion_limit" in out, out
