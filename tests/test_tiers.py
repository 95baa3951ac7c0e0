"""The suite's tiers (issue 19): ``pytest -m "not slow"`` is the developer's fast tier; ``integration``
and ``e2e`` tests are in the slow tier by their marker alone; one crash point of the resume test runs
alone by its id."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from source_tree import source_files

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def tracked_test_files() -> list[Path]:
    """The test modules, ``tests/test_*.py``, that git tracks (tests/source_tree.py)."""
    return [path for path in source_files(".py", under="tests") if path.parent == TESTS and path.name.startswith("test_")]


def collect(*args: str, cwd: Path = ROOT) -> list[str]:
    """Test ids pytest collects with ``args`` (no test runs)."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-o", "addopts=", "-q", "-p", "no:cacheprovider", *args]
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # collection needs no plugin: a fast start
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 5), done.stdout[-2000:] + done.stderr[-2000:]  # 5: nothing collected
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_integration_and_e2e_tests_are_left_out_of_the_fast_tier(tmp_path):
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    tests = [("", "unit"), ("@pytest.mark.integration\n", "integration"), ("@pytest.mark.e2e\n", "e2e"),
             ("@pytest.mark.slow\n", "slow")]
    (tmp_path / "test_tiered.py").write_text("import pytest\n" + "".join(
        f"\n\n{mark}def test_{name}():\n    pass\n" for mark, name in tests))
    fast = collect("-m", "not slow", "test_tiered.py", cwd=tmp_path)
    assert fast == ["test_tiered.py::test_unit"]
    assert len(collect("test_tiered.py", cwd=tmp_path)) == 4  # the README's command runs every tier


@pytest.mark.slow  # collecting the e2e modules imports the model stack
def test_the_long_real_path_tests_are_in_the_slow_tier():
    files = ["tests/test_embedded_run_e2e.py", "tests/test_llm_embedded_e2e.py", "tests/test_resume_anywhere.py"]
    assert collect("-m", "not slow", *files) == []
    assert len(collect("-m", "slow", "tests/test_resume_anywhere.py")) > 50


def test_one_crash_point_of_the_resume_test_runs_alone_by_its_id():
    assert collect("tests/test_resume_anywhere.py", "-k", "rep_unsealed-9") == [
        "tests/test_resume_anywhere.py::test_a_run_killed_here_resumes_to_the_same_result[rep_unsealed-9]"]


JUDGING_FIXTURES = {"embedded_alone"}
"""Fixtures that make a real timed run for the test that takes them (conftest.py): the test judges its timings."""


def contention_judging_tests() -> set[str]:
    """``file::test`` of every test function that asks ``machine_quiet`` whether it may spend its minutes, or
    takes a fixture that made a real timed run: those judge real timings, so they must run alone."""
    found = set()
    for path in tracked_test_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            asks = any(isinstance(call, ast.Call) and getattr(call.func, "id", None) == "skip_if_contended"
                       for call in ast.walk(node))
            if asks or JUDGING_FIXTURES & {arg.arg for arg in node.args.args}:
                found.add(f"tests/{path.name}::{node.name}")
    return found


@pytest.mark.slow  # collecting the e2e modules imports the model stack
def test_every_test_that_judges_real_timings_runs_alone():
    judging = contention_judging_tests()
    assert len(judging) >= 2  # the embedded run and the vLLM run
    assert "tests/test_embedded_run_e2e.py::test_embedded_run_banks_batching_on_goodput" in judging
    quiet = {test.split("[")[0] for test in collect("-m", "quiet", *sorted({t.split("::")[0] for t in judging}))}
    assert judging <= quiet, f"mark these @pytest.mark.quiet (scripts/test.sh runs them alone): {judging - quiet}"


RUNNER_PROBE = '''
import os, time, pytest

def note(what):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(f"{what} {os.environ.get('PYTEST_XDIST_WORKER', 'main')} {time.time():.3f}\\n")

@pytest.mark.parametrize("n", range(4))
def test_busy(n):
    note(f"busy-start-{n}")
    time.sleep(0.5)
    note(f"busy-end-{n}")

@pytest.mark.quiet
def test_judges_timings():
    note("quiet-start")
    note("quiet-end")
'''


UNUSED_PLUGINS = ["-p", "no:langsmith_plugin", "-p", "no:hypothesispytest"]
"""Installed pytest plugins no probe uses, left unloaded: importing them costs ~3 s of CPU in every pytest
process, and one run of ``scripts/test.sh`` starts three or four (the phases and the xdist workers)."""


def runner_cmd(*args: str) -> list[str]:
    """``scripts/test.sh`` with ``args``, without the cache and the unused plugins."""
    return ["bash", str(ROOT / "scripts" / "test.sh"), "-p", "no:cacheprovider", *UNUSED_PLUGINS, *args]


def runner_env() -> dict[str, str]:
    """This environment for ``scripts/test.sh``, less what xdist set for this very test (run on a worker,
    it would make the runner's own phase 2 look like a worker)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return {**env, "PYTHON": sys.executable}


@pytest.mark.integration  # starts pytest with xdist workers, twice
def test_the_runner_runs_the_quiet_tests_alone_after_every_other_test(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quiet: judges real timings\n")
    (tmp_path / "test_probe.py").write_text(RUNNER_PROBE)
    log = tmp_path / "probe.log"
    env = {**runner_env(), "PROBE_LOG": str(log), "PERFWARDEN_TEST_WORKERS": "2"}
    done = subprocess.run(runner_cmd(str(tmp_path)), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = [line.split() for line in log.read_text().splitlines()]
    assert all(worker.startswith("gw") for what, worker, _ in events if what.startswith("busy"))  # on xdist workers
    quiet = {what: (worker, float(t)) for what, worker, t in events if what.startswith("quiet")}
    assert quiet["quiet-start"][0] == "main"  # not on an xdist worker: nothing runs beside it
    assert quiet["quiet-start"][1] >= max(float(t) for what, _, t in events if what.startswith("busy-end"))
    assert len(events) == 10


@pytest.mark.integration  # starts pytest four times
def test_the_runner_fails_when_a_phase_fails_and_when_nothing_ran(tmp_path):
    env = {**runner_env(), "PERFWARDEN_TEST_WORKERS": "1"}
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quiet: judges real timings\n")
    (tmp_path / "test_fails.py").write_text("import pytest\n\n@pytest.mark.quiet\ndef test_quiet():\n    assert False\n")
    failed = subprocess.run(runner_cmd("-q", str(tmp_path / "test_fails.py")), env=env, capture_output=True,
                            text=True, timeout=300)
    assert failed.returncode == 1, failed.stdout[-2000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = subprocess.run(runner_cmd("-q", str(empty)), env=env, capture_output=True, text=True, timeout=300)
    assert nothing.returncode == 5, nothing.stdout[-2000:]


@pytest.mark.slow  # collects every test module
def test_the_runner_finds_every_file_that_holds_a_quiet_test():
    """``scripts/test.sh`` collects phase 2 from the files that name ``mark.quiet`` (grep): a quiet test
    anywhere else would never run."""
    collected = {test.split("::")[0] for test in collect("-m", "quiet")}
    named = {f"tests/{path.name}" for path in tracked_test_files() if "mark.quiet" in path.read_text()}
    assert collected and collected <= named
