"""The graph's side of the search study (agents/search.py): which sampler a run uses, the proposals a
pick hands out, and telling the study what the auditor decided.

Kept apart from graph.py so the graph only asks "what next" and "this finished"; everything Optuna is
behind these functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from perfwarden.agents import config_tuner, search
from perfwarden.agents.base import Proposal
from perfwarden.harness.target_config import MechanismName, TargetConfig
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.state import RunContext, RunState

if TYPE_CHECKING:  # Ray loads only when a run uses a cluster
    from perfwarden.orchestrator.cluster import Cluster


def sampler_of(settings: RunSettings) -> search.SamplerName:
    """``auto``: the study's TPE sampler over the default space; coordinate descent when levers are named
    (the user asked about those knobs, each measured on its own against the best)."""
    if settings.sampler != "auto":
        return settings.sampler
    return "coordinate" if settings.levers is not None else "tpe"


def batch_size(settings: RunSettings, cluster: Cluster | None) -> int:
    """Steps asked at once: the setting, else one per cluster slot, else one."""
    if settings.study_batch:
        return settings.study_batch
    return max(1, cluster.slots) if cluster is not None else 1


def study_of(ctx: RunContext, run: Path) -> optuna.Study:
    """The run's study, opened once per process (the runtime context caches it)."""
    if ctx.study is None:
        ctx.study = search.open_study(run, higher_is_better=ctx.settings.run_objective().higher_is_better)
    return ctx.study


def trial_proposal(model: type[TargetConfig], asked: search.Asked, best: dict[str, Any], reps: int) -> Proposal:
    """A study trial as a proposal: the knobs it changes against the best, their lever class (B if any
    knob is), losslessness (all must be), and the mechanism a truthy speculative-decoding knob engages."""
    specs = {k: model.spec(k) for k in asked.change}
    mechanism: MechanismName = next((s.mechanism for k, s in specs.items()
                                     if s.mechanism != "baseline" and asked.change[k]), "baseline")
    text = "+".join(f"{k}={v}" for k, v in sorted(asked.change.items()))
    pid = f"cfg-t{asked.number}-{text}"
    if len(pid) > 120:  # leg names are one path component: keep them short
        pid = f"cfg-t{asked.number}-{len(asked.change)}knobs"
    why = "; ".join(f"{k} {best.get(k, '?')!r} -> {v!r}" for k, v in sorted(asked.change.items()))
    return Proposal(id=pid, kind="config", producer="config_tuner", config=dict(asked.change), against=dict(best),
                    believed_class="B" if any(s.lever_class == "B" for s in specs.values()) else "A",
                    mechanism=mechanism, lossless=all(s.lossless for s in specs.values()), reps=reps,
                    trial=asked.number, rationale=f"study trial {asked.number}: {why}"[:200])


def next_proposals(state: RunState, ctx: RunContext, run: Path, base: dict[str, Any], best: dict[str, Any],
                   room: int) -> list[Proposal]:
    """Up to ``batch_size`` new config steps against the current best (at most ``room``), asked of the
    study; empty when the search converged."""
    model = ctx.lab.config_model
    knob_values = config_tuner.parse_levers(model, ctx.settings.levers)
    if ctx.settings.levers is None:
        knob_values = {k: model.allowed_values(k) for k in search.default_knobs(model)}
    space = search.study_space(model, knob_values, base)
    if not space:
        return []
    study = study_of(ctx, run)
    proposals = state.get("proposals", [])
    verdicts = state.get("verdicts", [])
    factor = search.best_factor(state.get("banked", []))
    in_state = {p.trial for p in proposals if p.trial is not None}
    measured = search.measured_against(proposals, verdicts, best, factor)
    current = search.current_values(space, base, best)
    out: list[Proposal] = []
    for _ in range(min(batch_size(ctx.settings, ctx.cluster), room)):
        asked = search.ask(study, model, space, current, factor, in_state, measured, sampler_of(ctx.settings),
                           ctx.settings.seed,
                           n_startup=ctx.settings.study_startup)
        if asked is None:
            break
        in_state.add(asked.number)
        measured[search.change_key(asked.change)] = None
        out.append(trial_proposal(model, asked, best, ctx.settings.reps))
    return out


def tell(ctx: RunContext, run: Path, state: RunState, proposals: list[Proposal] | None = None) -> None:
    """Tell the study every finished trial (idempotent; a run without a study has nothing to tell)."""
    proposals = state.get("proposals", []) if proposals is None else proposals
    if not any(p.trial is not None for p in proposals):
        return
    search.tell_finished(study_of(ctx, run), proposals, state.get("verdicts", []))


def superseded(p: Proposal, best: dict[str, Any]) -> bool:
    """Whether ``p`` was measured against an older best (a batch step another step's banking overtook):
    the step it measured is no longer a step from the best, so it is not banked."""
    return p.against != best
