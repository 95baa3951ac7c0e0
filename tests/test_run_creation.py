"""A run directory appears whole (settings.json in it) or not at all; resume refuses what is not a run.

Issue 19: a run killed between creating its folder and writing settings.json left a folder that
``run --resume`` refused as "not a run". ``runner.created_run`` builds the folder beside its final
place, locked (``harness/run_lock.py``), and renames it in. A folder that holds anything else but no settings.json is still not a run.
"""

from __future__ import annotations

import os
import signal

import pytest

from perfwarden.orchestrator.crashpoints import ENV
from perfwarden.orchestrator.runner import RunUsageError, create_run, read_settings, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

SETTINGS = RunSettings(target="synthetic", levers=["batch_wait_ms"])


def test_a_new_run_appears_with_its_settings_and_nothing_beside_it(tmp_path):
    run = tmp_path / "runs" / "r1"
    create_run(run, SETTINGS)
    assert read_settings(run) == SETTINGS
    assert sorted(p.name for p in run.parent.iterdir()) == ["r1"]
    assert sorted(p.name for p in run.iterdir()) == ["settings.json", "writer.json", "writer.lock"]


def test_a_kill_while_the_run_is_being_created_leaves_no_run_directory(tmp_path):
    run = tmp_path / "r1"
    pid = os.fork()
    if pid == 0:  # the child dies at the crash point, SIGKILL: no cleanup
        try:
            os.environ[ENV] = "before_settings"
            create_run(run, SETTINGS)
        finally:
            os._exit(70)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert not os.path.lexists(run)  # nothing to refuse: the user starts the run again
    create_run(run, SETTINGS)
    assert read_settings(run) == SETTINGS


def test_an_existing_folder_gets_its_settings_in_place(tmp_path):
    run = tmp_path / "out"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    create_run(run, SETTINGS)
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt", "settings.json", "writer.json", "writer.lock"]


@pytest.mark.parametrize("content", [None, "notes.txt", "legs"])
def test_resume_refuses_a_folder_without_settings(tmp_path, content):
    run = tmp_path / "r1"
    run.mkdir()
    if content == "legs":
        (run / "legs" / "base").mkdir(parents=True)
    elif content:
        (run / content).write_text("not a run")
    with pytest.raises(RunUsageError, match="not a perfwarden run directory") as refused:
        run_graph(run, SETTINGS, SyntheticLab(), resume=True)
    assert ("the folder is empty" in str(refused.value)) == (content is None)
    assert not (run / "settings.json").exists() and not (run / "checkpoints.sqlite").exists()
