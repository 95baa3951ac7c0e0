"""The graph measures each step under the sequential rule (design §4 "Sequential steps", §5): more reps,
interleaved, for a promising step its first look cannot decide; a clear loser stops at its first look; the
budget sets the most reps a step may reach; and a step the rule did not win is never banked, whatever the
auditor's fixed-level gate says of its final legs. On the synthetic target (orchestrator/simlab.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfwarden.agents.base import Proposal, StepLook
from perfwarden.formats.verdict_summary import FindingSummary, VerdictSummary
from perfwarden.orchestrator import stepping
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab


def bench_lines(run: Path, leg: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "legs" / leg / "bench_runs.jsonl").read_text().splitlines()]


def test_an_undecided_step_gets_more_interleaved_reps_and_a_clear_loser_stops_at_its_first_look(tmp_path):
    """+6% under 2% rep noise cannot be decided at 3 reps per leg (the first look's level is 2.6e-7); the rule
    extends the same legs, interleaved, until it wins. A -20% step is futile at its first look."""
    lab = SyntheticLab(effects={"max_batch_size": {"tput": {2: 1.06}}, "batch_wait_ms": {"tput": 0.8}}, cv=0.02)
    run = tmp_path / "run"
    state = run_graph(run, RunSettings(target="synthetic", kernels=False, levers=["max_batch_size=2", "batch_wait_ms"]),
                      lab)
    steps = {p.id: p for p in state["proposals"]}
    win, loser = steps["cfg-max_batch_size=2"], steps["cfg-batch_wait_ms=5.0"]
    assert win.status == "banked" and win.look is not None and win.look.action == "win"
    base_leg, cand_leg = win.legs
    base, cand = bench_lines(run, base_leg), bench_lines(run, cand_leg)
    assert len(base) == len(cand) == win.look.reps[0] > 3  # more reps than the first look, both legs alike
    assert [line["rep"] for line in base] == list(range(len(base)))
    order = sorted([(line["started_at"], "B") for line in base] + [(line["started_at"], "C") for line in cand])
    rounds = ["".join(tag for _, tag in order[i:i + 2]) for i in range(0, len(order), 2)]
    assert set(rounds) <= {"BC", "CB"}  # interleaved: one rep of each leg per round
    patch = [v for v in state["verdicts"] if v.proposal == win.id and v.scope == "patch"]
    assert len(patch) == 1 and patch[0].verdict == "PASS"  # one claim, on the legs the rule decided
    assert loser.status == "rejected" and loser.look is not None and loser.look.action == "futile"
    assert loser.look.reps == (3, 3) and len(bench_lines(run, loser.legs[0])) == 3
    assert "futile" in next(r.reason for r in state["rejected"] if r.name == loser.id)


@dataclass
class Clock:
    now: float


def context(budget_minutes: float, elapsed_s: float, **kw: Any) -> Any:
    from perfwarden.orchestrator.state import RunContext

    clock = Clock(elapsed_s)
    return RunContext(lab=SyntheticLab(), settings=RunSettings(target="synthetic", budget_minutes=budget_minutes, **kw),
                      clock=lambda: clock.now)


def test_the_budget_left_sets_the_most_reps_a_step_may_reach():
    """Rounds are costed at what a baseline round took (60 s for 3 rounds: 20 s), the bundle keeps twice the
    baseline (120 s): 300 s left pay for 9 rounds; a step never goes below its first look, nor past max_reps."""
    state = {"started_at": 0.0, "baseline_s": 60.0}
    assert stepping.step_cap(state, context(10.0, 300.0), reps_done=0) == 9
    assert stepping.step_cap(state, context(10.0, 0.0), reps_done=0) == 12  # the horizon
    assert stepping.step_cap(state, context(10.0, 0.0, max_reps=7), reps_done=0) == 7
    assert stepping.step_cap(state, context(10.0, 590.0), reps_done=0) == 3  # no budget: the first look only
    assert stepping.step_cap(state, context(10.0, 590.0), reps_done=5) == 5  # ... and no further look


def verdict(label: str, action: str, *codes: str) -> VerdictSummary:
    return VerdictSummary(seq=2, scope="patch", verdict=label, action=action, actions=[action], path="v.json",
                          claim="c.json", findings=[FindingSummary(code=c, severity="FLAG" if label == "FLAG"
                                                                   else "FAIL", message=c) for c in codes],
                          seal="sealed")


def test_a_step_the_rule_did_not_win_is_never_banked():
    """The auditor's gate judges a step's final legs at the fixed 1% level: after the rule's looks at 3, 5,
    ..., 12 reps that is a peek, and banking its PASS would spend more false wins than the rule's 1%."""
    ended = Proposal(id="cfg-x", kind="config", producer="config_tuner", reps=12,
                     look=StepLook(action="no_win", reps=(12, 12), max_reps=12, p_value=0.008, level=0.0068,
                                   reason="12 reps per leg, the most this step may measure"))
    why = stepping.no_sequential_win(ended, verdict("PASS", "pass"), banks=True)
    assert why is not None and "without a win" in why
    won = ended.model_copy(update={"look": ended.look.model_copy(update={"action": "win"})})
    assert stepping.no_sequential_win(won, verdict("PASS", "pass"), banks=True) is None
    # spoiled legs (a neighbour on the CPU) are measured afresh, where the rule decides again
    assert stepping.no_sequential_win(ended, verdict("FLAG", "remeasure", "CONTENDED_LEG"), banks=False) is None
    assert stepping.no_sequential_win(ended, verdict("FAIL", "remeasure", "DELTA_NOT_SIGNIFICANT"), banks=False)
