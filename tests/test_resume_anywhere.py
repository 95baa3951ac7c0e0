"""A run killed at any instant resumes to the uninterrupted run's result, or says why it cannot (§5).

The run is SIGKILLed (no cleanup, as with a power cut or the OOM killer) at every node boundary --
just before each step of the graph, and just after each step wrote its files but before its checkpoint
was saved -- at the instants between the run's own writes (settings written, checkpoint file created,
report.json written but not report.md), half-way through writing a rep's line, and at random instants
while reps are being measured. Each killed run is resumed (``run --resume``) and must end with the
same banked changes, verdict trail, proposals and reps (none duplicated, none torn) as the run that
was never interrupted. ``tests/resume_driver.py`` does the killing in forked children.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).parent / "resume_driver.py"


@pytest.mark.timeout(600)
def test_a_run_killed_at_any_instant_resumes_to_the_same_result(tmp_path):
    done = subprocess.run([sys.executable, str(DRIVER), str(tmp_path / "work")], capture_output=True, text=True,
                          timeout=580)
    assert done.returncode == 0, done.stderr[-3000:]
    head, *results = [json.loads(line) for line in done.stdout.splitlines()]
    expected, steps = head["reference"], head["steps"]
    assert expected["report"] and len(steps) >= 20 and {"quality_eval", "resubmit", "bundle", "report"} <= set(steps)
    assert len(results) >= 2 * len(steps) + 10
    problems = []
    for r in results:
        where = r.get("crash_at") or (f"kill after {r['kill_after']} s" if "kill_after" in r else "no crash")
        if r.get("crash_at") and r["crashed"] != "signal 9":
            problems.append(f"{where}: the crash point was never reached ({r['crashed']})")
        if r["resumed"] != "exit 0":
            problems.append(f"{where}: resume ended {r['resumed']}: {r['message']}")
        elif r["summary"] != expected:
            diff = {k: (v, r["summary"].get(k)) for k, v in expected.items() if r["summary"].get(k) != v}
            problems.append(f"{where}: resumed to a different result: {diff}")
        for leg, reps in r["summary"]["reps"].items():
            if len(reps) != len(set(reps)):
                problems.append(f"{where}: duplicate or corrupt rep lines in {leg!r}: {reps}")
    assert not problems, "\n".join(problems)
    print(f"{len(results)} kills, each resumed to the uninterrupted result; "
          f"{sum(r['seconds'] for r in results):.1f} s in all")
