"""The crash cases of ``test_resume_anywhere.py``, named, without importing perfwarden (pytest collects
them; ``resume_driver.py`` runs them).

``STEPS`` is the node order of the synthetic reference run (``resume_driver.SETTINGS``/``LAB``). It is
written out so that every crash point is its own test, collected without running anything; the driver
checks the reference run still takes exactly these steps (a changed graph fails with the new list).
"""

from __future__ import annotations

import random
from collections import Counter

STEPS = ("setup baseline auditor profile auditor pick integrator auditor fix resubmit auditor fix pick integrator "
         "auditor fix pick integrator auditor fix quality_eval resubmit auditor fix pick integrator auditor fix pick "
         "op_benchmarker auditor harness_result integrator auditor fix pick bundle auditor report").split()


def crash_cases(steps: list[str]) -> list[dict]:
    """Every node boundary of the reference run (before each step; after it wrote its files but before
    its checkpoint), the instants between the run's own writes, torn and unsealed rep lines, random
    instants."""
    seen: Counter[str] = Counter()
    cases = [{"crash_at": "before_settings"}, {"crash_at": "settings_written"}, {"crash_at": "checkpointer_opened"},
             {"crash_at": "report_json_written"}, {}]  # {}: never killed; its resume finds a finished run
    for node in steps:
        seen[node] += 1
        cases += [{"crash_at": f"before:{node}#{seen[node]}"}, {"crash_at": f"after:{node}#{seen[node]}"}]
    # rep 16 lands inside a round of a step's second look (its baseline leg one rep ahead of its candidate):
    # the resumed step must replay its first look on the reps that look saw, not on the longer leg.
    cases += [{"crash_at": f"rep_torn#{k}"} for k in (1, 9, 16, 30)]
    cases += [{"crash_at": f"rep_unsealed#{k}"} for k in (1, 9, 16, 30)]
    rng = random.Random(12)  # random instants, reproducible: reps take 10 ms, the run ~1 s
    # (0.013 s and 0.569 s found the two bugs that ``before_settings`` and ``rep_unsealed`` now pin down)
    cases += [{"kill_after": round(rng.uniform(0.0, 1.2), 3), "rep_delay": 0.01} for _ in range(6)]
    return cases


def case_id(case: dict) -> str:
    """A readable, unique test id that ``pytest -k`` accepts: ``before-fix-3`` (crash point ``before:fix#3``),
    ``rep_unsealed-9``, ``kill-after-0.569s``, ``never-killed``."""
    if case.get("crash_at"):
        return case["crash_at"].replace(":", "-").replace("#", "-")
    if "kill_after" in case:
        return f"kill-after-{case['kill_after']}s"
    return "never-killed"


CASES = {case_id(c): c for c in crash_cases(list(STEPS))}
