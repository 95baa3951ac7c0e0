"""A run checkpointed by an older run-state version still resumes, and ends as the uninterrupted run does.

tests/data/checkpoint-v2 holds runs checkpointed by state version 2 and stopped by a simulated crash (its
README says how they were made). Each is copied, resumed with the current code against the key store it
sealed with, and compared with the same run made from scratch now.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab
from perfwarden.orchestrator.state import RunState

V2 = Path(__file__).parent / "data" / "checkpoint-v2"

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "noisy-before-fix": ({"levers": ["max_batch_size=4"], "kernels": False}, {"cv": 0.06}),
    "before-harness-result": ({"levers": []}, {}),
}
"""Case folder -> (the run's settings, the synthetic lab's arguments), as its README says it was made."""


def trail(state: RunState) -> list[tuple[int, str, str, str, list[str]]]:
    return [(v.seq, v.scope, v.verdict, v.seal, sorted(v.codes())) for v in state["verdicts"]]


def just_after_the_crash(run: Path) -> Callable[[], float]:
    """A clock that reads as if the run were resumed a second after its crash. The fixture was made long ago:
    by the wall clock its budget is spent, and the resumed run would stop (or give its step fewer reps) where
    the uninterrupted one goes on."""
    started = datetime.fromisoformat(json.loads((run / "run.json").read_text())["started_at"]).timestamp()
    spent = sum(json.loads(line)["duration_s"] for line in (run / "events.jsonl").read_text().splitlines())
    offset = time.time() - (started + spent + 1.0)
    return lambda: time.time() - offset


def resumed(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RunState, Path]:
    copy = tmp_path / case
    shutil.copytree(V2 / case, copy)
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(copy / "keys"))
    knobs, lab = CASES[case]
    state = run_graph(copy / "run", RunSettings(target="synthetic", **knobs), SyntheticLab(**lab), resume=True,
                      capture_logs=False, clock=just_after_the_crash(copy / "run"))
    return state, copy / "run"


def fresh(case: str, tmp_path: Path) -> tuple[RunState, Path]:
    knobs, lab = CASES[case]
    run = tmp_path / f"{case}-fresh"
    return run_graph(run, RunSettings(target="synthetic", **knobs), SyntheticLab(**lab), capture_logs=False), run


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_version_2_checkpoint_resumes_and_ends_as_the_uninterrupted_run(case, tmp_path, monkeypatch):
    old, old_run = resumed(case, tmp_path, monkeypatch)
    new, new_run = fresh(case, tmp_path)
    assert trail(old) == trail(new)
    assert all(v.seal == "sealed" for v in old["verdicts"])  # the copied key store still verifies the chain
    assert [b.name for b in old["banked"]] == [b.name for b in new["banked"]] != []
    assert old["stage"] == "done" and (old_run / "report.md").is_file()
    old_report, new_report = (json.loads((r / "report.json").read_text()) for r in (old_run, new_run))
    assert [b["name"] for b in old_report["banked"]] == [b["name"] for b in new_report["banked"]]
    # the summaries version 2 recorded without a decision get the one the uninterrupted run recorded
    decisions = [[(v["seq"], v["acceptance"]["accepted"], v["acceptance"]["basis"]) for v in r["verdicts"]]
                 for r in (old_report, new_report)]
    assert decisions[0] == decisions[1]
    assert old["state_version"] == 2  # the run keeps the version it started with


@pytest.mark.integration
def test_the_noisy_baselines_of_a_version_2_run_are_decided_from_its_trail(tmp_path, monkeypatch):
    """Version 2 recorded no decision; the trail shows which baselines were measured again (a later one exists)
    and that the last one let the search go on on its noise."""
    state, run = resumed("noisy-before-fix", tmp_path, monkeypatch)
    report = json.loads((run / "report.json").read_text())
    baselines = [(v["seq"], v["acceptance"]["basis"]) for v in report["verdicts"] if v["scope"] == "baseline"]
    assert baselines == [(1, "remeasure"), (2, "remeasure"), (3, "noise_only")]
    assert "the machine is noisier than the documented limit" in (run / "report.md").read_text()
