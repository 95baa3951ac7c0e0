"""A run killed at any instant resumes to the uninterrupted run's result, or says why it cannot (§5).

The run is SIGKILLed (no cleanup, as with a power cut or the OOM killer) at every node boundary --
just before each step of the graph, and just after each step wrote its files but before its checkpoint
was saved -- at the instants between the run's own writes (the run being created, settings written,
checkpoint file created, report.json written but not report.md), half-way through writing a rep's line,
after writing a rep's line but before sealing it, and at random instants while reps are being measured.
Each killed run is resumed (``run --resume``) and must end with the same banked changes, verdict trail,
proposals and reps (none duplicated, none torn) as the run that was never interrupted.

One test per crash case (ids from ``resume_cases.py``: ``-k rep_unsealed-9`` re-runs one alone). The
cases themselves run in one ``tests/resume_driver.py`` process, started once for every case pytest
selected (a forked child per run: a case costs a run, not an interpreter start).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from resume_cases import CASES, STEPS

pytestmark = pytest.mark.integration  # a reference run and one run per crash case: minutes, not the fast tier

DRIVER = Path(__file__).parent / "resume_driver.py"
NODE = "test_a_run_killed_here_resumes_to_the_same_result"


@pytest.fixture(scope="module")
def driven(request, tmp_path_factory) -> dict:
    """Run the driver once over every case of this module that pytest selected."""
    wanted = [item.callspec.id for item in request.session.items
              if item.originalname == NODE and item.module is request.module]
    done = subprocess.run([sys.executable, str(DRIVER), str(tmp_path_factory.mktemp("resume")), "--cases", *wanted],
                          capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stderr[-3000:]
    head, *results = [json.loads(line) for line in done.stdout.splitlines()]
    return {"reference": head["reference"], "steps": head["steps"], "results": {r["id"]: r for r in results}}


@pytest.mark.timeout(600)
def test_the_reference_run_takes_the_steps_the_cases_name(driven):
    assert driven["reference"]["report"]
    assert driven["steps"] == STEPS, f"the graph changed: set resume_cases.STEPS to {driven['steps']}"
    assert {"quality_eval", "resubmit", "bundle", "report"} <= set(STEPS)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case_id", list(CASES))
def test_a_run_killed_here_resumes_to_the_same_result(driven, case_id):
    r, expected = driven["results"][case_id], driven["reference"]
    if r.get("crash_at"):
        assert r["crashed"] == "signal 9", "the crash point was never reached"
    assert r["resumed"] == "exit 0", f"resume ended {r['resumed']}: {r['message']}"
    diff = {k: (v, r["summary"].get(k)) for k, v in expected.items() if r["summary"].get(k) != v}
    assert not diff, f"resumed to a different result (expected, got): {diff}"
    for leg, reps in r["summary"]["reps"].items():
        assert len(reps) == len(set(reps)), f"duplicate or corrupt rep lines in {leg!r}: {reps}"
