"""integrator: builds overlays, runs interleaved A/B legs, submits baseline, patch and bundle claims.

It states what it believes (lever class, headline kind, mechanism), the conditions it thinks both legs
ran with, and the headline figure it read from its own client's bench lines (``own_figures.py``, or its
LLM brain's statement of it); the auditor checks all of it against the raw. Every claim is a ``formats.records.Claim``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

from perfwarden.agents import sequential
from perfwarden.agents.base import BankedChange, Proposal, StepLook, apply_overlay
from perfwarden.formats.objective import RunObjective
from perfwarden.formats.records import (Claim, Correctness, DeclaredLever, Headline, IsolatedSpeedup, KernelPatch,
                                        LegRefs, Mechanism, Overlay)

INERT_FOR_LEG_NAMES = ("=", " ", "/", ":", ".")


def change_of(proposal: Proposal) -> dict[str, Any]:
    """The proposal's change as knob changes (a kernel is an ``op_overrides`` entry)."""
    if proposal.kind == "kernel":
        return {"op_overrides": {proposal.op: proposal.chosen}}
    return dict(proposal.config)


def overlay(changes: dict[str, Any]) -> Overlay:
    """Knob changes over the target's defaults as a leg's overlay (op overrides as kernel patches)."""
    config = {k: v for k, v in changes.items() if k != "op_overrides"}
    patches = [KernelPatch(op=op, impl=impl) for op, impl in sorted((changes.get("op_overrides") or {}).items())]
    return Overlay(config=config, kernel_patches=patches)


def baseline_config(base: dict[str, Any], proposal: Proposal) -> dict[str, Any]:
    """The A/B's baseline leg: the best banked configuration the step is measured against."""
    return apply_overlay(base, proposal.against)


def candidate_config(base: dict[str, Any], proposal: Proposal) -> dict[str, Any]:
    """The A/B's candidate leg: that configuration plus the step."""
    return apply_overlay(baseline_config(base, proposal), change_of(proposal))


def leg_names(proposal: Proposal, attempt: int) -> tuple[str, str]:
    safe = proposal.id
    for ch in INERT_FOR_LEG_NAMES:
        safe = safe.replace(ch, "-")
    return f"{safe}-a{attempt}-base", f"{safe}-a{attempt}-cand"


def measure_step(measure_to: Callable[[int], tuple[list[float], list[float]]], objective: RunObjective,
                 first_reps: int, max_reps: int, reps_done: int = 0) -> StepLook:
    """Measure a step look by look under the sequential rule (design §4): ``measure_to(n)`` extends both legs to
    ``n`` reps each, interleaved, and returns the producer's reading of the objective per rep (baseline,
    candidate). Ends on a win, a clear loser, a step its noise or budget cannot decide, or ``max_reps``. Reps the
    rule cannot judge (a goodput of 0: no request met the SLO; a leg with no reading) end it without a win."""
    plan = sequential.SequentialPlan(first_reps=first_reps, higher_is_better=objective.higher_is_better)
    seen = (0, 0)

    def measured(n: int) -> tuple[list[float], list[float]]:
        nonlocal seen
        base, cand = measure_to(n)
        seen = (len(base), len(cand))
        return base, cand

    try:
        d = sequential.run_step(measured, plan, max_reps, reps_done)
    except sequential.SequentialError as exc:
        return StepLook(action="no_win", reps=seen, max_reps=max_reps, reason=f"no look can judge these reps: {exc}")
    return StepLook(action=cast(Literal["win", "futile", "no_win"], d.action), reps=(d.n_base, d.n_cand),
                    max_reps=max_reps, improvement_pct=round(d.improvement_pct, 4), p_value=d.p_value,
                    level=d.level, reason=d.reason)


def baseline_claim(leg: str, aa_legs: list[str]) -> Claim:
    """The true no-overlay baseline, with its A/A twin that calibrates this session's noise band."""
    return Claim(scope="baseline", producer="integrator", legs=LegRefs(baseline=leg, aa=aa_legs))


def patch_claim(proposal: Proposal, base_leg: str, cand_leg: str, opbench_rel: str | None,
                aa_legs: list[str] | None = None, objective: RunObjective | None = None) -> Claim:
    """The claim as the producer would write it (its beliefs, not the auditor's). ``aa_legs``: the run's
    same-config legs (baseline and its A/A twin) that calibrate the noise band; ``objective``: what the run
    optimizes, which the headline states (throughput when None)."""
    objective = objective or RunObjective()
    iso = None
    if proposal.kind == "kernel" and proposal.isolated_speedup:
        iso = IsolatedSpeedup(value=proposal.isolated_speedup, op=proposal.kernel_op(), opbench=opbench_rel,
                              baseline_backend="reference", candidate_backend=proposal.chosen)
    return Claim(
        scope="patch", producer=proposal.producer,
        legs=LegRefs(baseline=base_leg, candidate=cand_leg, aa=list(aa_legs or [])),
        lever=DeclaredLever(name=proposal.id, lever_class=proposal.believed_class,
                            config_keys=sorted(proposal.config) if proposal.kind == "config" else [],
                            kernel_ops=[proposal.kernel_op()] if proposal.kind == "kernel" else []),
        headline=Headline(metric=objective.metric, kind=proposal.headline_kind, value=proposal.stated_pct,
                          disclosed_regressions=proposal.disclosed_regressions, slo=objective.slo),
        correctness=Correctness(parity="exact_text", quality_eval_id=proposal.quality_eval_id),
        mechanism=Mechanism(name=proposal.mechanism, variant=proposal.mechanism_variant, support=proposal.support,
                            draft_model_id=proposal.draft_model_id, acceptance_rate=proposal.acceptance_rate),
        isolated_speedup=iso)


def final_changes(banked: list[BankedChange]) -> dict[str, Any]:
    """The best configuration: every banked step applied in order (knob changes over the true baseline).
    A knob a later step set back to its baseline value is still listed here; ``net_changes`` drops it."""
    out: dict[str, Any] = {}
    for b in banked:
        out = apply_overlay(out, b.overlay())
    return out


def net_changes(banked: list[BankedChange], base: dict[str, Any]) -> dict[str, Any]:
    """The final configuration's difference from the true baseline ``base``: every banked step applied in
    order, less each knob (and op override) whose final value is its baseline value -- a knob a later step
    turned back is no change, and a bundle that declared it would declare a difference its legs cannot show."""
    out: dict[str, Any] = {}
    for key, value in final_changes(banked).items():
        if key == "op_overrides":
            base_ops = base.get("op_overrides") or {}
            ops = {op: impl for op, impl in (value or {}).items() if base_ops.get(op) != impl}
            if ops:
                out[key] = ops
        elif key not in base or repr(base[key]) != repr(value):
            out[key] = value
    return out


def _survives(change: BankedChange, net: dict[str, Any]) -> bool:
    """Whether some knob (or op override) ``change`` set still holds its value in the net change."""
    if change.kind == "kernel":
        return (net.get("op_overrides") or {}).get(change.op) == change.impl
    return any(key in net and repr(net[key]) == repr(value) for key, value in change.config.items())


def superseded_by(banked: list[BankedChange], base: dict[str, Any]) -> dict[str, str | None]:
    """Banked step -> the last later step that overwrote what it set, when nothing it set survives in the
    net change (None: it is part of the final configuration, or no later step touched it)."""
    net = net_changes(banked, base)
    out: dict[str, str | None] = {}
    for i, change in enumerate(banked):
        later = [b for b in banked[i + 1:] if set(b.overlay()) & set(change.overlay())
                 and (change.kind != "kernel" or change.op in (b.overlay().get("op_overrides") or {}))]
        out[change.name] = later[-1].name if later and not _survives(change, net) else None
    return out


def components(banked: list[BankedChange], base: dict[str, Any]) -> list[BankedChange]:
    """The banked steps that survive in the net change, in order: the bundle's components."""
    net = net_changes(banked, base)
    return [b for b in banked if _survives(b, net)]


def _engaged_mechanism(kept: list[BankedChange], net: dict[str, Any]) -> Mechanism | None:
    """The speculative decoding a surviving step engaged, when the knob that engages it (the mechanism's
    variant) still holds that step's value in the net change; None when the final configuration engages none."""
    for b in kept:
        m = b.mechanism
        if m.name != "speculative_decoding":
            continue
        knob = m.variant if m.variant in b.config else None
        if knob is None or (knob in net and repr(net[knob]) == repr(b.config[knob])):
            return m
    return None


def bundle_claim(banked: list[BankedChange], base: dict[str, Any], base_leg: str, bundle_leg: str,
                 caching_leg: str, disclosed: dict[str, float], quality_eval_id: str | None,
                 stated_pct: float | None = None, objective: RunObjective | None = None) -> Claim:
    """The net change (``net_changes``) against the true no-overlay baseline ``base``: the components are
    the banked steps that survive in it (each has its own passing patch verdict), the config keys the knobs
    that differ from the baseline, the mechanism one the final configuration engages.
    ``stated_pct``: the bundle's delta from the producer's own reading of the two legs."""
    changes = net_changes(banked, base)
    kept = components(banked, base)
    objective = objective or RunObjective()
    return Claim(
        scope="bundle", producer="integrator",
        legs=LegRefs(baseline=base_leg, candidate=bundle_leg, validation=bundle_leg, caching_audit=caching_leg,
                     caching_control=f"{caching_leg}-control"),
        lever=DeclaredLever(name="bundle", lever_class="B" if any(b.lever_class == "B" for b in kept) else "A",
                            config_keys=sorted(k for k in changes if k != "op_overrides"),
                            kernel_ops=sorted(changes.get("op_overrides") or {}),
                            components=[b.name for b in kept]),
        headline=Headline(metric=objective.metric, kind="e2e", value=stated_pct, disclosed_regressions=disclosed,
                          slo=objective.slo),
        correctness=Correctness(parity="exact_text", quality_eval_id=quality_eval_id),
        mechanism=_engaged_mechanism(kept, changes) or Mechanism())
