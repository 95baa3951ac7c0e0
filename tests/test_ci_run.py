"""``.ci/run`` runs the README's two commands, in order, on one clone, and fails when either fails.

The README's first code block is the contract: its first command installs and runs the main job (which
writes ``runs/`` into the checkout), its second runs every test. CI that never ran the first before the
second could not see them break each other. Here ``.ci/run`` is run for real in a scratch copy where each
program it starts is a recorder: what it starts, in what order, from where, with which arguments.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI_RUN = ROOT / ".ci" / "run"
MAX_BUDGET_MINUTES = 5
"""CI's 90 minutes hold an install (about 2 min), the suite (about 20) and a run of at most this long."""
CI_ONLY = ["bash scripts/install_vllm.sh"]
"""What CI runs besides the README's commands (before them, so nothing runs between the two)."""


def readme_commands() -> list[str]:
    """The command lines of the README's first code block."""
    block = re.search(r"^```(?:bash|sh)?\n(.*?)^```", (ROOT / "README.md").read_text("utf-8"), flags=re.M | re.S)
    assert block, "README.md has no code block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def expected_calls(budget: str) -> list[str]:
    """Each program the README's commands start, as the recorders log it, the run with CI's budget."""
    first, second = readme_commands()
    install, run = (part.strip() for part in first.split("&&"))
    return [*CI_ONLY, install, f"{run} --budget-minutes {budget}", second]


RECORDER = """#!/usr/bin/env bash
echo "{name} $* @$PWD cache=$(ls -A "$PERFWARDEN_CACHE" | wc -l)" >> "$CI_LOG"
{extra}
exit "${{FAIL_{var}:-0}}"
"""


def scratch_clone(tmp_path: Path) -> Path:
    """A copy of ``.ci/run`` beside recorders for every program it starts; the install's recorder also
    writes the run's recorder at ``.venv/bin/perfwarden``, as the real install writes the real one."""
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    shutil.copy(CI_RUN, clone / ".ci" / "run")
    (clone / "scripts").mkdir()
    perfwarden = RECORDER.format(name=".venv/bin/perfwarden", var="RUN", extra="")
    for script, var in (("install_vllm.sh", "VLLM"), ("install.sh", "INSTALL"), ("test.sh", "TEST")):
        extra = "" if script != "install.sh" else (
            f"mkdir -p .venv/bin && cat > .venv/bin/perfwarden <<'EOF'\n{perfwarden}EOF\n"
            "chmod +x .venv/bin/perfwarden")
        (clone / "scripts" / script).write_text(RECORDER.format(name=f"bash scripts/{script}", var=var, extra=extra))
    return clone


def run_ci(clone: Path, **fail: int) -> tuple[int, list[str]]:
    log = clone.parent / "calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "CI_LOG": str(log), **{f"FAIL_{k}": str(v) for k, v in fail.items()}}
    env.pop("PERFWARDEN_CACHE", None)
    done = subprocess.run(["bash", str(clone / ".ci" / "run")], cwd=clone.parent, env=env, capture_output=True,
                          text=True, timeout=60)
    return done.returncode, log.read_text().splitlines() if log.exists() else []


def test_ci_runs_the_readme_commands_in_order_on_one_clone(tmp_path):
    clone = scratch_clone(tmp_path)
    rc, calls = run_ci(clone)
    assert rc == 0, calls
    where = {call.rsplit(" @", 1)[1].split(" cache=")[0] for call in calls}
    assert where == {str(clone)}, "every command runs in the clone's root, so the run writes into its runs/"
    commands = [call.rsplit(" @", 1)[0].strip() for call in calls]
    budget = shlex.split(commands[-2])[-1]
    assert budget.isdigit() and 1 <= int(budget) <= MAX_BUDGET_MINUTES, commands[-2]
    assert commands == expected_calls(budget)
    run_call = calls[-2]
    assert run_call.endswith(" cache=0"), "the run starts from an empty weights cache: a new user's first run"


@pytest.mark.parametrize("failing, reached", [("INSTALL", 2), ("RUN", 3), ("TEST", 4)])
def test_a_failure_in_either_command_fails_ci(tmp_path, failing, reached):
    rc, calls = run_ci(scratch_clone(tmp_path), **{failing: 7})
    assert rc == 7, (rc, calls)
    assert len(calls) == reached, f"CI went on after the failure: {calls}"


def test_the_readme_block_holds_the_two_commands_this_test_knows():
    first, second = readme_commands()
    assert "&&" in first and "perfwarden run" in first and second.startswith("bash ")


def test_ci_run_names_the_readme_lines_verbatim():
    """The same contract read from the text: the first command with a budget added, then the second."""
    first, second = readme_commands()
    lines = [line.strip() for line in CI_RUN.read_text().splitlines() if line.strip() and not line.startswith("#")]
    run_line = next(i for i, line in enumerate(lines) if line.startswith(first))
    assert re.fullmatch(r" --budget-minutes \d+( \|\| exit)?", lines[run_line][len(first):]), lines[run_line]
    assert lines[run_line + 1:] == [second]
