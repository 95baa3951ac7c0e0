"""config-tuner: a coordinate-descent search over the target's knobs, with the auditor's verdicts as the
only accepted steps. (The default search is an Optuna study over the same space, agents/search.py;
coordinate descent is its ``coordinate`` sampler and the search over named levers.)

The search space is the target's config model (harness/target_config.py): which knobs are searched by
default, their allowed values, whether they are ordinal, and whether a change is lossless. A step changes
one knob of the **current best banked configuration** (the true baseline plus every change banked so
far). Its A/B runs that configuration on the baseline leg and the configuration plus the step on the
candidate leg, so the auditor judges exactly the step; it is taken only when the patch claim PASSes, and
the next step starts from the new best. The bundle claim at the end compares the final configuration
with the true no-overlay baseline, and its lever decomposition lists every banked step.

Ordinal knobs (batch size, threads, a batching window) move one rung at a time, up first; a value that
a banked step on the same knob replaced is never tried again (it lost). A step refused against one
configuration becomes eligible again once the best configuration changes (that is coordinate descent's
next pass), at most ``max_tries`` times, and the run's budget stops the search wherever it is.

Not in the default space: the response cache and prompt lookup (cheats and class-B levers a producer
might mislabel -- they belong to the red team) and lossy knobs (int8, bfloat16), which are searched only
when named with ``--levers`` and then with their quality eval planned before the claim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from perfwarden.agents.base import BankedChange, FixDecision, Proposal
from perfwarden.agents.own_figures import own_regressions, read_reps, rep_values
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.harness.target_config import ConfigError, TargetConfig

MAX_TRIES = 2
"""Times one (knob, value) may be measured (against different best configurations)."""


class KnobStep(BaseModel):
    """One step of the search: set ``knob`` to ``value`` on top of the current best configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    knob: str
    value: Any
    rationale: str = ""


class Tried(BaseModel):
    """A step already measured: against which best configuration, and whether it was banked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    knob: str
    value: Any
    against: dict[str, Any]
    banked: bool


def parse_levers(model: type[TargetConfig], levers: list[str] | None) -> dict[str, tuple[Any, ...]]:
    """``--levers`` -> knob -> the values to search (``knob`` searches its allowed values,
    ``knob=value`` only that value). ``None``: the model's default search. Bad names raise ConfigError."""
    knobs = model.search_knobs(levers)
    named: dict[str, list[Any]] = {}
    for item in levers or []:
        knob, sep, text = item.partition("=")
        if sep:
            value = getattr(model.validate_knobs({knob: text}), knob)
            named.setdefault(knob, []).append(value)
    space = {}
    for knob in knobs:
        space[knob] = tuple(named[knob]) if knob in named else model.allowed_values(knob)
    return space


def next_step(model: type[TargetConfig], space: dict[str, tuple[Any, ...]], base: dict[str, Any],
              best: dict[str, Any], tried: list[Tried], max_tries: int = MAX_TRIES) -> KnobStep | None:
    """The deterministic brain: the next coordinate-descent step, or None when the search converged."""
    lost = {(t.knob, _key(t.against.get(t.knob, base.get(t.knob)))) for t in tried if t.banked}
    for knob, values in space.items():
        current = best.get(knob, base.get(knob))
        spec = model.spec(knob)
        for value in _candidates(values, current, spec.ordered):
            if (knob, _key(value)) in lost:
                continue
            same = [t for t in tried if t.knob == knob and _key(t.value) == _key(value)]
            if any(t.against == best for t in same) or len(same) >= max_tries:
                continue
            why = spec.why or knob
            return KnobStep(knob=knob, value=value, rationale=f"{knob} {current!r} -> {value!r}: {why}")
    return None


def _candidates(values: tuple[Any, ...], current: Any, ordered: bool) -> list[Any]:
    """Values to try from ``current``: the neighbouring rungs (up first) for an ordinal knob, every
    other value for a categorical one."""
    others = [v for v in values if _key(v) != _key(current)]
    if not ordered or not all(isinstance(v, (int, float)) for v in others) or not isinstance(current, (int, float)):
        return others
    up = sorted(v for v in others if v > current)
    down = sorted((v for v in others if v < current), reverse=True)
    return up[:1] + down[:1]


def _key(value: Any) -> str:
    return repr(value)


def step_proposal(model: type[TargetConfig], step: KnobStep, best: dict[str, Any], reps: int,
                  attempt: int) -> Proposal:
    """The proposal for one step; ``attempt`` > 1 when the same value is retried against a new best."""
    spec = model.spec(step.knob)
    suffix = f"-t{attempt}" if attempt > 1 else ""
    return Proposal(id=f"cfg-{step.knob}={step.value}{suffix}", kind="config", producer="config_tuner",
                    config={step.knob: step.value}, against=dict(best), believed_class=spec.lever_class,
                    mechanism=spec.mechanism,
                    lossless=spec.lossless, reps=reps, rationale=step.rationale[:200])


def tried_steps(proposals: list[Proposal], banked: list[BankedChange]) -> list[Tried]:
    """Every config step measured so far (or in flight), for ``next_step``."""
    banked_names = {b.name for b in banked}
    out = []
    for p in proposals:
        if p.kind != "config" or len(p.config) != 1:
            continue
        (knob, value), = p.config.items()
        out.append(Tried(knob=knob, value=value, against=p.against, banked=p.id in banked_names))
    return out


def check_step(model: type[TargetConfig], space: dict[str, tuple[Any, ...]],
               step: KnobStep) -> tuple[KnobStep, str | None]:
    """The step with its value in the model's type (``40`` -> ``40.0``), and why it is not allowed
    (None when it is). Used on steps an LLM proposes."""
    if step.knob not in space:
        return step, f"{step.knob!r} is not a knob being searched ({sorted(space)!r})"
    try:
        value = getattr(model.validate_knobs({step.knob: step.value}), step.knob)
    except ConfigError as exc:
        return step, str(exc)
    if not any(_key(value) == _key(v) for v in space[step.knob]):
        return step, f"{step.knob}={step.value!r} is not an allowed value ({list(space[step.knob])!r})"
    return step.model_copy(update={"value": value}), None


# -------------------------------------------------------------------------------- answering verdicts


def reclassify(proposal: Proposal, run: Path) -> Proposal:
    """Accept the auditor's lever class and headline the e2e delta. When the producer's own candidate reps show speculative
    decoding (a non-null ``accept_length``), document the draft method and the acceptance it measured."""
    # The win is the serving lever's, not the op's: an isolated op speedup no longer explains it.
    update = {"believed_class": "B", "headline_kind": "e2e", "isolated_speedup": None}
    return document_spec_decode(proposal.model_copy(update=update), run)


def document_spec_decode(proposal: Proposal, run: Path) -> Proposal:
    """Speculative decoding must document its draft and acceptance: the draft is the knob that enabled
    it, the acceptance the mean ``accept_length`` of the producer's own candidate reps."""
    reps = read_reps(Path(run) / "legs" / proposal.legs[1] / "bench_runs.jsonl") if proposal.legs else []
    accepts = rep_values(reps, "accept_length")
    if not accepts:
        return proposal
    draft = next((k for k in proposal.config if k in ("prompt_lookup", "speculative_algorithm")), None)
    return proposal.model_copy(update={
        "mechanism": "speculative_decoding", "mechanism_variant": draft or proposal.op,
        "draft_model_id": str(proposal.config.get("speculative_draft_model_path") or draft or proposal.op or "unknown"),
        "acceptance_rate": round(sum(accepts) / len(accepts), 4)})


def disclose(proposal: Proposal, verdict: VerdictSummary, run: Path) -> Proposal:
    """State the latency regressions the auditor saw, sized from the producer's own reading of its
    legs (the harness's per-rep aggregates), never copied from the auditor's numbers."""
    metrics = sorted({f.measured["metric"] for f in verdict.findings
                      if f.code == "HIDDEN_LATENCY_REGRESSION" and isinstance(f.measured, dict)
                      and isinstance(f.measured.get("metric"), str)})
    return proposal.model_copy(update={"disclosed_regressions": own_regressions(run, proposal.legs or [], metrics)})


CLAIM_FIXES: dict[str, frozenset[tuple[str, str | None]]] = {
    "disclose": frozenset({("HIDDEN_LATENCY_REGRESSION", None)}),
    "reclassify": frozenset({("ORTHOGONAL_LEVER", None), ("ISOLATED_E2E_GAP", None), ("IMPLAUSIBLE_SPEEDUP", None),
                             ("CONDITIONS_DIFFER", "lever")}),
    "resubmit": frozenset({("REPORTED_MISMATCH", None)}),
    "run_quality_eval": frozenset({("QUALITY_EVAL_MISSING", None)}),
}
"""The fixes that change the claim, not its legs, and the findings each can answer, as (code, gate; None:
any gate): a disclosure, a class-B headline without the isolated figure that documents the mechanism the
raw shows (the lever gate's undeclared-mechanism confound), a restated figure, a completed quality eval.
Every other finding is about the raw evidence, which a resubmission on the same legs leaves as it was."""
CLAIM_FIXABLE = frozenset().union(*CLAIM_FIXES.values())
"""Every finding some resubmission on the same legs can answer."""


def claim_fixable(code: str, gate: str) -> bool:
    """Whether some resubmission on the same legs can answer a finding of ``code`` raised by ``gate``."""
    return (code, None) in CLAIM_FIXABLE or (code, gate) in CLAIM_FIXABLE


DROP_CODES = {
    "CACHING_SUSPECTED": "the change is a cache, not a speedup",
    "SERVER_CRASH": "the change crashed the server",
    "PARITY_MISMATCH": "the change alters outputs",
    "QUALITY_REGRESSION": "the change lowers quality",
    "OUTPUT_LENGTH_SHIFT": "the change alters output lengths",
    "NOT_ENGAGED": "the change never engaged",
    "NONCOHERENT_REFERENCE": "the reference is gibberish",
}


def fix(proposal: Proposal, verdict: VerdictSummary, max_reps: int) -> FixDecision:
    """The deterministic answer to a FLAG/FAIL, from the finding codes (config and kernel producers)."""
    codes = verdict.codes()
    for code, why in DROP_CODES.items():
        if code in codes:
            return FixDecision(action="drop", reason=f"{code}: {why}")
    if "QUALITY_EVAL_MISSING" in codes and proposal.quality_eval_id is None:
        return FixDecision(action="run_quality_eval", reason="lossy change: run the registered quality eval")
    if "REPORTED_MISMATCH" in codes and proposal.stated_by == "llm":
        return FixDecision(action="resubmit", reason="the stated figure disagrees with the raw: restate it from "
                                                     "the producer's own reading of its legs")
    if "HIDDEN_LATENCY_REGRESSION" in codes and not proposal.disclosed_regressions:
        return FixDecision(action="disclose", reason="a latency trade-off: state it in the claim, with its size")
    if "ORTHOGONAL_LEVER" in codes:
        return FixDecision(action="reclassify", reason="the auditor detected a class-B lever; headline it as one",
                           believed_class="B", headline_kind="e2e")
    if verdict.action == "remeasure" and proposal.reps < max_reps:
        return FixDecision(action="remeasure", reason=f"{sorted(codes)}: re-measure with {max_reps} reps")
    if "CONDITIONS_DIFFER" in codes and proposal.attempts <= 1:
        return FixDecision(action="remeasure", reason="restore conditions: re-measure both legs fresh")
    return FixDecision(action="drop", reason=f"{sorted(codes) or verdict.verdict}: cannot be fixed")
