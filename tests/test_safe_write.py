"""Issue 16 §2: every write stays inside the run (``formats/safe_write.py``).

A run directory is input to ``run --resume``, ``measure`` and ``audit --save``. For each file and folder
those commands write, a link planted there (pointing at a file or folder outside the run, in tmp_path)
must make the command exit 3 with the outside file unchanged. Before the fix each of these tests failed:
the command wrote through the link (overwrote or appended to the outside file, grew it as a SQLite
database, wrote a verdict or a whole leg outside the run), or replaced the link and exited 0, or blocked
on a FIFO.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.formats import seal
from perfwarden.formats.records import QualityEval, append_unsealed_jsonl, write_json_atomic
from perfwarden.formats.safe_read import RefusedInput
from perfwarden.orchestrator.paths import default_fixture_roots
from perfwarden.orchestrator.settings import RunSettings

runner = CliRunner()
CLEAN = default_fixture_roots()[0] / "syn-clean-patch-win"  # its one patch claim PASSes intact
SECRET = b"outside the run: must stay as it is\n"


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI in a subprocess: a command that blocks (a FIFO) or starts a server fails on the timeout."""
    return subprocess.run([sys.executable, "-m", "perfwarden.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, env=os.environ.copy())


def new_run(tmp_path: Path) -> Path:
    """A run killed right after its settings were written: ``--resume`` runs every node and writes every
    file a run writes (the synthetic lab, seconds)."""
    run = tmp_path / "run"
    run.mkdir()
    write_json_atomic(run / "settings.json", RunSettings(target="synthetic", levers=["max_batch_size"], kernels=False))
    return run


def plant(run: Path, rel: str, outside: Path, folder: bool) -> Path:
    """A link at ``run/rel`` to a file (or an empty folder) outside the run; returns the outside path."""
    target = outside / ("dir" if folder else "file")
    if folder:
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(SECRET)
    link = run / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=folder)
    return target


def untouched(target: Path) -> bool:
    return sorted(os.listdir(target)) == [] if target.is_dir() else target.read_bytes() == SECRET


RUN_FILES = ["report.md", "report.json", "events.jsonl", "checkpoints.sqlite", "checkpoints.sqlite-journal",
             "evidence.jsonl", "run.json", "logs/lab.log", "claims/001-baseline.json", "verdicts/001-baseline.json",
             "legs/baseline/leg.json", "legs/baseline/server_info.json", "legs/baseline/server.log",
             "legs/baseline/bench_runs.jsonl", "legs/baseline/outputs.jsonl"]
RUN_DIRS = ["claims", "verdicts", "logs", "legs", "legs/baseline", "legs/baseline-aa"]


@pytest.mark.parametrize("rel,folder", [(f, False) for f in RUN_FILES] + [(d, True) for d in RUN_DIRS])
def test_resume_refuses_a_link_where_it_writes(tmp_path, rel, folder):
    run = new_run(tmp_path)
    target = plant(run, rel, tmp_path / "outside", folder)
    result = runner.invoke(app, ["run", "--resume", str(run)])
    assert untouched(target), f"{rel}: the run wrote outside itself through the link"
    assert result.exit_code == 3, (rel, result.exit_code, result.output[-2000:])
    assert "Traceback" not in result.output and "link" in result.output, result.output[-2000:]
    assert (run / rel).is_symlink()  # nothing replaced
    assert written(run) == {"settings.json", rel}, "refused after the run had started writing"


def written(run: Path) -> set[str]:
    """Every file and link in the run (folders are where they lie)."""
    out = set()
    for folder, dirs, files in os.walk(run):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            out.add(os.path.relpath(os.path.join(folder, name), run))
    return out


def test_resume_never_writes_through_a_link_at_the_report_temp_file(tmp_path):
    """The probe's first find: ``.report.md.tmp`` linked out made resume overwrite the outside file and
    leave report.md a link to it. The report is now written through a fresh temp file in the run."""
    run = new_run(tmp_path)
    target = plant(run, ".report.md.tmp", tmp_path / "outside", False)
    result = runner.invoke(app, ["run", "--resume", str(run)])
    assert untouched(target)
    assert result.exit_code == 0, result.output[-2000:]
    assert (run / "report.md").is_file() and not (run / "report.md").is_symlink()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_resume_refuses_a_fifo_or_a_folder_where_a_file_belongs(tmp_path, kind):
    run = new_run(tmp_path)
    rel = "events.jsonl" if kind == "fifo" else "report.md"
    os.mkfifo(run / rel) if kind == "fifo" else (run / rel).mkdir()
    done = cli("run", "--resume", str(run))  # before: blocked on the FIFO (timeout) / exit 1 on the folder
    assert done.returncode == 3, done.stderr[-2000:]
    assert ("a FIFO" if kind == "fifo" else "a directory") in done.stderr and "Traceback" not in done.stderr


# ------------------------------------------------------------------------------------ audit --save


@pytest.mark.parametrize("rel,folder", [("verdicts", True), ("verdicts/001-patch.json", False)])
def test_audit_save_refuses_a_link_where_the_verdict_goes(tmp_path, rel, folder):
    run = tmp_path / "run"
    shutil.copytree(CLEAN / "run", run)
    claim = tmp_path / "claim.json"
    shutil.copy(run / "claims" / "001-patch.json", claim)
    target = plant(run, rel, tmp_path / "outside", folder)
    result = runner.invoke(app, ["audit", str(run), "--claim", str(claim), "--save"])
    assert untouched(target), "the verdict was written outside the run"
    assert result.exit_code == 3, (result.exit_code, result.output[-2000:])
    assert "link" in result.output and (run / rel).is_symlink()


# ----------------------------------------------------------------------------------------- measure


@pytest.fixture
def no_server(monkeypatch) -> list[str]:
    """``measure`` runs in this process (a CLI start per case would cost seconds): a server it starts fails
    the test at once, where a subprocess ran into its timeout; returns the servers it tried to start."""
    from perfwarden.harness.targets import EmbeddedTarget

    started: list[str] = []

    def start(self, *args, **kwargs):
        started.append(str(self))
        raise AssertionError("measure started a server")

    monkeypatch.setattr(EmbeddedTarget, "start", start)
    return started


def measure(out: Path, leg: str):
    """The embedded target's ``measure`` in this process (the resume tests above run so too): an uncaught
    exception ends it with exit 1, never the refusal's 3."""
    return runner.invoke(app, ["measure", "--out", str(out), "--leg", leg, "--reps", "1", "--duration", "0.5"])


@pytest.mark.parametrize("leg", ["../../x", "a/b", "..", ".hidden", "-rf", "x\ny"])
def test_measure_refuses_a_leg_that_is_not_one_path_component(tmp_path, leg, no_server):
    out = tmp_path / "deep" / "run"
    done = measure(out, leg)
    assert done.exit_code == 3, done.output[-2000:]
    assert "single safe path component" in done.output and "Traceback" not in done.output
    assert not (tmp_path / "x").exists() and not out.exists()  # nothing written, in the run or outside
    assert not no_server


@pytest.mark.parametrize("rel,folder", [("legs", True), ("legs/x", True), ("legs/x/bench_runs.jsonl", False),
                                        ("legs/x/server.log", False), ("evidence.jsonl", False),
                                        ("legs/x/loadgen", True), ("run.json", False)])
def test_measure_refuses_a_link_before_any_server_starts(tmp_path, rel, folder, no_server):
    out = tmp_path / "run"
    out.mkdir()
    target = plant(out, rel, tmp_path / "outside", folder)
    done = measure(out, "x")
    assert untouched(target)
    assert done.exit_code == 3, done.output[-2000:]
    assert "link" in done.output and "Traceback" not in done.output
    assert written(out) == {rel}, "refused after the leg had started writing"
    assert not no_server


# ------------------------------------------------------------------------- the harness's writers


@pytest.fixture
def sealed(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    seal.begin(run)
    yield run
    seal.forget(run)


@pytest.mark.parametrize("rel,folder", [("legs", True), ("legs/a", True), ("legs/a/leg.json", False)])
def test_sealed_json_writes_refuse_links(sealed, tmp_path, rel, folder):
    target = plant(sealed, rel, tmp_path / "outside", folder)
    with pytest.raises(RefusedInput, match="link"):
        seal.write_json(sealed / "legs" / "a" / "leg.json", {"leg": "a"})
    assert untouched(target)


@pytest.mark.parametrize("rel,folder", [("legs", True), ("legs/a/bench_runs.jsonl", False)])
def test_sealed_appends_refuse_links(sealed, tmp_path, rel, folder):
    target = plant(sealed, rel, tmp_path / "outside", folder)
    with pytest.raises(RefusedInput, match="link"):
        seal.append_jsonl(sealed / "legs" / "a" / "bench_runs.jsonl", {"leg": "a", "rep": 0})
    assert untouched(target)


def test_quality_profile_and_opbench_outputs_refuse_links(tmp_path):
    from perfwarden.harness.opbench.runner import write_jsonl_atomic
    from perfwarden.harness.quality import write_eval

    run = tmp_path / "run"
    outside = tmp_path / "outside"
    for i, rel in enumerate(["quality", "profile", "opbench"]):
        target = plant(run, rel, outside / str(i), True)
        with pytest.raises(RefusedInput, match="link"):
            if rel == "quality":
                write_eval(run, QualityEval(eval_id="pw-qa-exact-v1", leg="a", n=1, score=1.0))
            elif rel == "profile":
                seal.write_text(run / "profile" / "profile.jsonl", "{}\n", run)
            else:
                write_jsonl_atomic(run / "opbench" / "rmsnorm" / "opbench.jsonl", [{"a": 1}], run)
        assert untouched(target)


def test_a_plain_append_never_follows_a_link_nor_waits_on_a_fifo(tmp_path):
    target = plant(tmp_path, "events.jsonl", tmp_path / "outside", False)
    with pytest.raises(RefusedInput, match="symbolic link"):
        append_unsealed_jsonl(tmp_path / "events.jsonl", {"x": 1})
    assert untouched(target)
    os.mkfifo(tmp_path / "fifo.jsonl")  # no reader: a plain open for append would block forever
    with pytest.raises(RefusedInput, match="FIFO"):
        append_unsealed_jsonl(tmp_path / "fifo.jsonl", {"x": 1})


def test_a_path_that_leaves_its_root_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(RefusedInput, match="not inside the run"):
        write_json_atomic(run / "legs" / ".." / ".." / "x.json", {"x": 1}, run)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("name,ok", [("baseline", True), ("cfg-max_batch_size=8-a0-cand", True), ("b.1@x", True),
                                     ("../x", False), ("a/b", False), ("..", False), ("", False), (".x", False),
                                     ("-x", False), ("a\x00b", False), ("a b", False), ("x" * 129, False)])
def test_one_validator_for_names_that_become_path_components(name, ok):
    from perfwarden.formats import safe_write

    if ok:
        assert safe_write.check_name(name) == name
    else:
        with pytest.raises(RefusedInput, match="single safe path component"):
            safe_write.check_name(name)
