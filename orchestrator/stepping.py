"""The graph's side of a step's sequential measurement (design §4 "Sequential steps", §5): how many reps the
run's budget pays a step, measuring its legs look by look, and which verdicts the step may still act on.

The rule itself is the producer's (``agents/sequential.py``, run by ``agents/integrator.measure_step``); what
is here is what only the run knows: its budget, its lab, its objective, and its verdicts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from perfwarden.agents import integrator as integrator_agent
from perfwarden.agents import own_figures, sequential
from perfwarden.agents.base import Proposal, StepLook
from perfwarden.formats.jsonl import BenchRunLine
from perfwarden.formats.records import RunDir
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.harness.labs.lab import LabError
from perfwarden.orchestrator.state import RunContext, RunState

BUNDLE_LEGS_PER_BASELINE = 2.0
"""The bundle measures four legs where the baseline measured two: what a step must leave of the budget."""
FRESH_STEP_AND_BUNDLE = 2.5
"""A step on fresh legs needs its own cost and the bundle's (about 1.5 steps) left, as ``pick`` asks of a new one."""


def step_cap(state: RunState, ctx: RunContext, reps_done: int) -> int:
    """The most reps per leg this step may reach: what the budget left pays for in rounds (one rep of each leg,
    costed at what a baseline round took), keeping the bundle's share, within ``max_reps``; never below the
    first look (``pick`` started the step only because one fits)."""
    settings = ctx.settings
    baseline_s = state.get("baseline_s", 0.0)
    first = min(settings.reps, settings.max_reps)
    if baseline_s <= 0:
        return settings.max_reps
    affordable = sequential.max_reps_for_budget(ctx.remaining_s(state), baseline_s / settings.reps, reps_done,
                                                reserve_s=BUNDLE_LEGS_PER_BASELINE * baseline_s)
    return max(first, min(affordable, settings.max_reps))


def measure_sequentially(state: RunState, ctx: RunContext, run: Path, p: Proposal,
                         measure: Callable[[int], dict[str, str]]) -> tuple[StepLook, dict[str, str]]:
    """Measure the step's legs (``p.legs``) look by look until the sequential rule stops it; ``measure(n)``
    extends both legs to ``n`` reps each (reps already written are kept). Legs that held a look already go on
    from it. Returns how the rule ended the step and each leg's status (a failed candidate is measured no more:
    its leg stops short and the rule ends the step there)."""
    assert p.legs is not None
    cand_leg = p.legs[1]
    objective = ctx.settings.run_objective()
    status: dict[str, str] = {}

    def measure_to(n: int) -> tuple[list[float], list[float]]:
        if status.get(cand_leg, "ok") == "ok":
            try:
                status.update(measure(n))
            except LabError as exc:
                status[cand_leg] = f"failed: {exc}"
        base, cand = (own_figures.rep_values(_first_reps(RunDir(run).bench_runs(leg), n), objective.metric,
                                             objective.slo) for leg in p.legs or [])
        return base, cand

    reps_done = p.reps if p.look is not None else 0
    look = integrator_agent.measure_step(measure_to, objective, ctx.settings.reps, step_cap(state, ctx, reps_done),
                                         reps_done)
    return look, status


def _first_reps(bench: Path, n: int) -> list[BenchRunLine]:
    """The leg's reps 0..n-1: what the look at ``n`` judges. A run killed mid-look and resumed replays its
    looks from the first, and a leg may already hold reps of a later look (one leg of a round was written,
    the other not): each replayed look must see only what it saw the first time, or the resumed run decides
    on unequal legs and ends elsewhere than the run that was never interrupted."""
    return [r for r in own_figures.read_reps(bench) if r.rep is not None and 0 <= r.rep < n]


def no_sequential_win(p: Proposal, v: VerdictSummary, banks: bool) -> str | None:
    """Why a step its sequential rule ended without a win is given up, whatever the verdict (None: it was a win,
    or the verdict asks for fresh legs, whose new step decides afresh). The auditor's significance gate judges
    the final legs at the fixed level, which after the rule's looks is a peek (design §4, "Where it stands"):
    banking such a PASS would spend more false wins than the rule's 1%."""
    if p.look is None or p.look.action == "win":
        return None
    if not banks and v.action == "remeasure" and v.codes() - {"DELTA_NOT_SIGNIFICANT"}:
        return None
    verdict = f"{v.shown} {sorted(v.codes())}" if v.codes() else v.shown
    return f"the sequential rule ended the step without a win ({p.look.action}: {p.look.reason}); verdict {verdict}"


def remeasure_stop(state: RunState, ctx: RunContext, p: Proposal, fresh: bool, typical_s: float) -> str | None:
    """Why a re-measure asked for cannot happen (None: it can). Fresh legs are a new step: it and the bundle
    must fit the budget (``typical_s``: what a step costs). The same legs go on from their last look only while
    the budget and ``max_reps`` allow another."""
    if not fresh:
        cap = step_cap(state, ctx, p.reps)
        return None if p.reps < cap else f"the step holds {p.reps} reps per leg, the most it may reach ({cap})"
    remaining = ctx.remaining_s(state)
    if remaining < FRESH_STEP_AND_BUNDLE * typical_s:
        return (f"budget: a re-measure (~{typical_s:.0f}s) and the bundle do not fit in the "
                f"{max(remaining, 0):.0f}s left")
    return None
