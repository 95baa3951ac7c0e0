"""The suite's tiers (issue 19): ``pytest -m "not slow"`` is the developer's fast tier; ``integration``
and ``e2e`` tests are in the slow tier by their marker alone; one crash point of the resume test runs
alone by its id."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


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
