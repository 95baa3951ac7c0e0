"""The autonomous run as a LangGraph state machine (design §5).

    setup -> baseline -> auditor --(baseline: remeasure)--> baseline
                                  --(ok)--> profile -> auditor -> pick
    pick --(next config step / kernel change)--> [op_benchmarker -> auditor -> harness_result ->]
                                                 integrator -> auditor -> fix
    fix --(remeasure)--> integrator     --(quality eval)--> quality_eval -> resubmit -> auditor
        --(reclassify/disclose)--> resubmit -> auditor            --(banked/dropped)--> pick
    pick --(search converged or budget spent)--> bundle -> auditor -> [red_team -> auditor ...] -> report

What each comparison compares:
- a **step** (patch claim): the current best banked configuration (baseline leg) vs that configuration
  plus one change (candidate leg), so the auditor judges exactly the step; a step is banked only when
  its claim PASSes, and the next step starts from the new best (the config-tuner's study, agents/search.py,
  or its coordinate descent); with ``--cluster`` the study's batch of steps is measured concurrently on
  the cluster's nodes (orchestrator/cluster.py) and audited here one by one;
- the **bundle**: the true no-overlay baseline vs the final configuration, with every banked step as a
  component (the auditor checks each has its own passing verdict) and a TEST04 caching pair.

Producers submit ``Claim`` records into ``pending_claim``; the single ``auditor`` node answers every claim
and the router sends the verdict back to whoever asked, reading finding codes and typed fields only.
Nodes are top-level functions; the lab, settings, brains and LLM come through the runtime context. Every
loop is bounded by a setting; the recursion limit is the backstop. Every side effect is idempotent: reps
are keyed by (leg, rep), claims and verdicts by their sequence number, so ``run --resume`` after a crash
repeats no rep and banks no change twice.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Protocol

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from perfwarden.agents import config_tuner, kernel_extractor, own_figures
from perfwarden.agents import integrator as integrator_agent
from perfwarden.agents import op_benchmarker as op_benchmarker_agent
from perfwarden.agents.base import BankedChange, Proposal, Rejection, apply_overlay
from perfwarden.auditor import acceptance, banking
from perfwarden.auditor.audit import audit_path, load_claim, write_verdict
from perfwarden.auditor.findings import deciding_actions, verdict_label
from perfwarden.auditor.persona import apply_persona
from perfwarden.formats import safe_write, seal
from perfwarden.formats.jsonl import ProfileLine, read_jsonl
from perfwarden.formats.records import Claim, RunDir, RunManifest, append_unsealed_jsonl, write_json_atomic
from perfwarden.formats.safe_read import PROFILE_LINE_BYTES
from perfwarden.formats.seal import find_key_file
from perfwarden.formats.verdict_summary import FindingSummary, VerdictSummary
from perfwarden.harness.labs.lab import LabError, LegPlan
from perfwarden.harness.profile_ops import rank_ops
from perfwarden.harness.target_config import TargetConfig
from perfwarden.orchestrator import stepping, study
from perfwarden.orchestrator.crashpoints import crash_point
from perfwarden.orchestrator.lab_spec import run_base_config
from perfwarden.orchestrator.persona_model import persona_model
from perfwarden.orchestrator.report import SEARCH_STOPS, write_report
from perfwarden.orchestrator.report_record import LLMUsage
from perfwarden.orchestrator.state import STATE_VERSION, FixStep, RunContext, RunState

BASELINE_LEG = "baseline"


class Node(Protocol):
    """A node: reads the state and the runtime's services, returns the channels it changed (LangGraph merges
    them into the state through each channel's reducer). Added to the graph under its ``__name__``."""

    __name__: str

    def __call__(self, state: RunState, runtime: Runtime[RunContext]) -> RunState: ...


# ----------------------------------------------------------------------------------------- helpers


def _run(state: RunState) -> Path:
    return Path(state["run_dir"])


def _in_run(state: RunState, ctx: RunContext) -> RunState:
    """The state a node sees: ``run_dir`` is the folder given on the command line, never the one a revived
    checkpoint names (a copied run, or a crafted one, would otherwise write where it was recorded)."""
    return state if ctx.run_dir is None else {**state, "run_dir": str(ctx.run_dir)}


def _proposal(state: RunState, pid: str | None = None) -> Proposal:
    pid = pid or state["current"]
    return next(p for p in state["proposals"] if p.id == pid).model_copy(deep=True)


def _submit(state: RunState, claim: Claim) -> RunState:
    """Write a claim with the next sequence number; the auditor node answers it."""
    seq = state.get("seq", 0) + 1
    claim = claim.model_copy(update={"seq": seq})
    rel = "claims/" + safe_write.check_name(f"{seq:03d}-{claim.scope}.json", "claim file name")
    write_json_atomic(_run(state) / rel, claim, _run(state))
    return {"seq": seq, "pending_claim": rel}


def _base_config(ctx: RunContext) -> TargetConfig:
    """The run's true baseline as the target's config model (``lab_spec.run_base_config``)."""
    return run_base_config(ctx.lab, ctx.settings)


def _base_knobs(ctx: RunContext) -> dict[str, Any]:
    """The true baseline as knob values, which the producers' knob changes apply to (a leg's plan carries the
    result as the target's model: ``config_model.of``)."""
    return _base_config(ctx).model_dump()


def _best(state: RunState) -> dict[str, Any]:
    """The current best configuration: every banked step, as knob changes over the true baseline."""
    return integrator_agent.final_changes(state.get("banked", []))


def _brain_notes(ctx: RunContext) -> RunState:
    """Move what the brains recorded into the state (so a resumed run's report still has it)."""
    notes, ctx.brains.notes = list(ctx.brains.notes), []
    fallbacks, ctx.brains.fallbacks = dict(ctx.brains.fallbacks), {}
    return {"notes": notes, "llm_fallbacks": fallbacks}


@contextlib.contextmanager
def _captured(ctx: RunContext, run: Path, what: str) -> Iterator[None]:
    """Send everything a lab call prints (torch profiler, weight loading, LoadGen; from C++ on fd 1/2 and
    from Python on sys.stdout/sys.stderr) to RUN/logs/lab.log instead of the user's terminal. The
    terminal display writes to its own copy of the terminal, so it is not redirected."""
    if not ctx.capture_logs:
        yield
        return
    handle = safe_write.open_append(run / "logs" / "lab.log", run, text=True, buffering=1)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with handle:
        handle.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {what}\n")
        handle.flush()
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        try:
            with contextlib.redirect_stdout(handle), contextlib.redirect_stderr(handle):
                yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _measure(ctx: RunContext, run: Path, legs: list[LegPlan], reps: int) -> dict[str, str]:
    ctx.watcher.measuring(legs, reps)
    if ctx.cluster is not None:  # one node measures both legs; its evidence streams here and is sealed here
        return ctx.cluster.measure(legs, reps)
    with _captured(ctx, run, f"measure {[p.leg for p in legs]} x{reps}"):
        return ctx.lab.measure(run, legs, reps)


def _event(run: Path, node: str, state: RunState, started: float, error: str | None = None) -> None:
    digest = hashlib.sha256(json.dumps({k: state.get(k) for k in ("seq", "current", "pending_claim", "stage")},
                                       sort_keys=True, default=str).encode()).hexdigest()[:16]
    append_unsealed_jsonl(run / "events.jsonl", {"node": node, "inputs_digest": digest,
                                                 "duration_s": round(time.time() - started, 3), "error": error}, run)


def step(fn: Node) -> Node:
    """A node, named by its function (``build_graph`` adds it under ``fn.__name__``, so the name in
    events, crash points and the checkpoint is the function's): record one event per step (node, inputs
    digest, duration, error) and tell the watcher."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(state: RunState, runtime: Runtime[RunContext]) -> RunState:
        state = _in_run(state, runtime.context)
        if runtime.context.llm is not None:  # every LLM ask of this step ends by the run's budget
            runtime.context.llm.time_left = functools.partial(runtime.context.remaining_s, state)
        crash_point(f"before:{name}")
        started = time.time()
        runtime.context.watcher.node(name, state.get("current") or "", runtime.context.remaining_s(state))
        try:
            update = fn(state, runtime) or {}
        except Exception as exc:
            _event(_run(state), name, state, started, error=f"{type(exc).__name__}: {exc}")
            raise
        _event(_run(state), name, state, started)
        crash_point(f"after:{name}")
        return update
    return wrapper


# ------------------------------------------------------------------------------------------- nodes


@step
def setup(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    run = _run(state)
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "run.json").is_file():
        write_json_atomic(run / "run.json", RunManifest(id=run.name, target=ctx.settings.target,
                                                        model=ctx.lab.model_name, seed=ctx.settings.seed,
                                                        versions=_versions(), started_at=_iso(state["started_at"])),
                          run)
    _record_objective(run, ctx)
    return {"stage": "baseline", "baseline_attempts": 0}


def _record_objective(run: Path, ctx: RunContext) -> None:
    """Seal what the run optimizes before its first leg (``objective.json``): the auditor judges every goodput
    figure of the run at this SLO. Written once; a run re-entering setup after a crash finds it sealed."""
    path = RunDir(run).objective
    if seal.begin(run) is not None and seal.is_current(path):
        return
    seal.write_json(path, ctx.settings.run_objective())


@step
def baseline(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    attempt = state.get("baseline_attempts", 0)
    leg = BASELINE_LEG if attempt == 0 else f"{BASELINE_LEG}-r{attempt}"
    # An A/A leg (the same config, interleaved) calibrates this session's noise band: the auditor
    # judges the baseline's spread against it instead of against a fixed constant.
    config = _base_config(ctx)
    started = ctx.clock()
    _measure(ctx, _run(state), [LegPlan(leg=leg, role="baseline", config=config, purpose="true no-overlay baseline"),
                                LegPlan(leg=f"{leg}-aa", role="aa", config=config,
                                        purpose="A/A: the baseline config again, to calibrate noise")], ctx.settings.reps)
    # A step measures two legs like the baseline did: until a step has finished, this is what one costs.
    return {**_submit(state, integrator_agent.baseline_claim(leg, [f"{leg}-aa"])), "stage": "baseline",
            "baseline_s": ctx.clock() - started,
            "baseline_attempts": attempt + 1, "aa_legs": [leg, f"{leg}-aa"],
            "notes": [f"baseline leg {leg!r} (+ A/A)"]}


@step
def auditor(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    run = _run(state)
    rel = _pending_claim(state)
    claim, _ = load_claim(run / rel)
    # The harness holds the run's seal key outside the run directory; only the auditor gets it. With a
    # cluster, other steps' evidence streams in meanwhile: the audit holds the chain's writers off.
    with seal.held(run) if ctx.cluster is not None else contextlib.nullcontext():
        verdict = audit_path(run, run / rel, claim_root=run, key=find_key_file(run))
    verdict = apply_persona(run, (run / rel).read_text("utf-8"), verdict, persona_model(ctx.llm))
    path = write_verdict(run, verdict)
    proposal = state.get("current") if verdict.scope in ("harness", "patch") else None
    summary = VerdictSummary.of(verdict, claim, str(path.relative_to(run)), proposal)
    decision = acceptance.decide(summary, remeasure_left=summary.scope == "baseline" and _baseline_fits(state, ctx))
    summary = summary.model_copy(update={"acceptance": decision})
    ctx.watcher.verdict(summary, claim, ctx.remaining_s(state))
    return {"last_verdict": summary, "verdicts": [summary], "pending_claim": None}


def _baseline_fits(state: RunState, ctx: RunContext) -> bool:
    """Whether the baseline would be measured again: a re-measure is allowed, and another baseline fits in
    the budget (it costs what this one cost)."""
    allowed = state.get("baseline_attempts", 0) <= ctx.settings.max_baseline_remeasures
    return allowed and ctx.remaining_s(state) > state.get("baseline_s", 0.0)


def _pending_claim(state: RunState) -> str:
    """The claim the auditor node answers: a producer node submitted it (``_submit``) and routed here."""
    rel = state.get("pending_claim")
    if rel is None:
        raise RuntimeError("no claim to audit: no producer node submitted one")
    return rel


def _answered(state: RunState) -> VerdictSummary:
    """The verdict the auditor node last recorded: what the router after it and the nodes it routes to read."""
    v = state.get("last_verdict")
    if v is None:
        raise RuntimeError("no verdict to read: the auditor node has not answered a claim")
    return v


def after_audit(state: RunState, runtime: Runtime[RunContext]) -> str:
    """Send the verdict back to whoever asked, by the decision the auditor node recorded with it."""
    v = _answered(state)
    if v.producer == "red_team":
        return "red_team"
    if v.scope == "baseline":
        decision = acceptance.recorded(v)
        if decision.accepted:
            return "profile" if runtime.context.settings.kernels else "pick"
        return "baseline" if decision.basis == "remeasure" else "report"
    if v.scope == "bundle":
        return _red_team_or_report(state, runtime)
    return {"profile": "pick", "harness": "harness_result", "patch": "fix"}[v.scope]


@step
def profile(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    run = _run(state)
    try:
        with _captured(ctx, run, "profile"):
            ctx.lab.profile(run, _base_config(ctx))
    except LabError as exc:
        return {"hot_ops": [], "notes": [f"profile failed: {exc}"], "last_verdict": None, "pending_claim": None}
    report = read_jsonl(RunDir(run).profile, ProfileLine, max_line=PROFILE_LINE_BYTES)
    ranking = rank_ops(report.records)
    shapes: dict[str, list[list[int]]] = {}
    for _, row in report.records:
        key = (row.op or row.name).lower()
        shapes.setdefault(key, [])
        for s in row.shapes or []:
            if s not in shapes[key]:
                shapes[key].append(s)
    overridable = ctx.lab.overridable_ops()
    routed = kernel_extractor.routed_op(ranking, overridable)
    found: RunState = {"hot_ops": [(op, share) for op, share in ranking], "served_shapes": shapes,
                       "stage": "profile"}
    if routed is None:  # nothing worth a kernel: no claim to audit, and the search goes on without one
        return {**found, "notes": [kernel_extractor.no_route_note(ranking, overridable)], "last_verdict": None,
                "pending_claim": None}
    return {**_submit(state, kernel_extractor.profile_claim(routed)), **found}


def route_profile(state: RunState) -> str:
    return "auditor" if state.get("pending_claim") else "pick"


def _next_config_proposal(state: RunState, ctx: RunContext) -> Proposal | None:
    """Ask the config-tuner for the next coordinate-descent step from the current best configuration."""
    model = ctx.lab.config_model
    space = config_tuner.parse_levers(model, ctx.settings.levers)
    proposals = state.get("proposals", [])
    tried = config_tuner.tried_steps(proposals, state.get("banked", []))
    step_ = ctx.brains.next_config_step(model, space, _base_knobs(ctx), _best(state), tried)
    if step_ is None:
        return None
    attempt = 1 + sum(1 for t in tried if t.knob == step_.knob and repr(t.value) == repr(step_.value))
    return config_tuner.step_proposal(model, step_, _best(state), ctx.settings.reps, attempt)


def _target_device(ctx: RunContext) -> str:
    """Where the target serves, ``cpu`` or ``cuda``: its config's ``device`` knob; a target whose config
    has none (SGLang) serves on a GPU."""
    device = getattr(_base_config(ctx), "device", None)
    if device is not None:
        return "cuda" if str(device).startswith("cuda") else "cpu"
    return "cuda" if getattr(ctx.lab.config_model, "target", "") == "sglang" else "cpu"


def _target_dtype(ctx: RunContext) -> str:
    """The dtype the target computes in: its config's ``dtype`` knob (every target's config model has one)."""
    dtype = getattr(_base_config(ctx), "dtype", None)
    if dtype is None:
        raise AttributeError(f"{type(_base_config(ctx)).__name__} has no dtype knob")
    return str(dtype)


def _kernel_proposals(state: RunState, ctx: RunContext) -> list[Proposal]:
    """The kernel-extractor's changes for the audited profile's hot ops (LLM candidates first)."""
    accepted = any(v.scope == "profile" and acceptance.recorded(v).accepted for v in state["verdicts"])
    if not ctx.settings.kernels or not accepted:
        return []
    lab = ctx.lab
    hot = list(state.get("hot_ops", []))
    alts = {op: lab.alternatives(op) for op in lab.overridable_ops()}
    device, dtype = _target_device(ctx), _target_dtype(ctx)
    kernels = kernel_extractor.propose(hot, lab.overridable_ops(), alts, _best(state), reps=ctx.settings.reps,
                                       device=device)
    for i, k in enumerate(kernels):  # the LLM brain writes one more candidate per op (sandboxed later)
        op = k.kernel_op()
        written = ctx.brains.write_kernel(_run(state), op, dict(hot).get(op, 0.0),
                                          state.get("served_shapes", {}).get(op, []), _reference_source(op), op, i,
                                          device=device, dtype=dtype)
        if written:
            k.candidates.insert(0, written)
    return kernels


ACTIVE = ("pending", "benchmarked", "measuring")
NEXT_CHANGE_NEEDS = 2.5
"""A new change starts only with this many typical changes' time left: the change itself and the bundle after
it, which replicates what was banked against the true baseline and measures more legs than one change."""


def _typical_change_s(state: RunState) -> float:
    """What one change costs: the median of those finished, else what the baseline's two legs cost."""
    durations = sorted(state.get("durations", []))
    return durations[len(durations) // 2] if durations else state.get("baseline_s", 0.0)


@step
def pick(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    """Continue the current change, or start the next one (config step first, then kernels), unless one
    more typical change plus the bundle would overrun the budget."""
    ctx = runtime.context
    now = ctx.clock()
    durations = list(state.get("durations", []))
    current = state.get("current")
    active = [p for p in state.get("proposals", []) if p.status in ACTIVE]
    if current and any(p.id == current for p in active):
        return {"picked_at": state.get("picked_at", now)}  # still working on the same change
    if current:
        durations.append(now - state.get("picked_at", now))  # the previous change just finished
    update: RunState = {"durations": durations, "picked_at": now, "current": None}
    study.tell(ctx, _run(state), state)
    remaining = ctx.remaining_s(state)
    typical = _typical_change_s({**state, "durations": durations})
    if remaining <= 0 or remaining < NEXT_CHANGE_NEEDS * typical:
        skipped = [p.model_copy(update={"status": "skipped"}) for p in active]
        note = (f"budget: {remaining:.0f}s left; one more change (~{typical:.0f}s) and the bundle after it need "
                f"about {NEXT_CHANGE_NEEDS * typical:.0f}s; {SEARCH_STOPS}")
        return {**update, "proposals": skipped, "notes": [note + (f" (skipped {[p.id for p in active]})" if active else "")],
                "stage": "search stopped on budget"}
    new: list[Proposal] = []
    nxt = next(iter(active), None)
    if nxt is None and len(state.get("proposals", [])) >= ctx.settings.max_proposals:
        update["notes"] = [f"max_proposals={ctx.settings.max_proposals} changes tried: {SEARCH_STOPS}"]
    elif nxt is None and study.sampler_of(ctx.settings) != "coordinate":  # a study sampler asks the study
        room = ctx.settings.max_proposals - len(state.get("proposals", []))
        new = study.next_proposals(state, ctx, _run(state), _base_knobs(ctx), _best(state), room)
        nxt = new[0] if new else None
    elif nxt is None:
        nxt = _next_config_proposal(state, ctx)
        if nxt is not None:
            new.append(nxt)
    if nxt is None and not state.get("kernels_proposed"):
        new = _kernel_proposals(state, ctx)
        update["kernels_proposed"] = True
        nxt = new[0] if new else None
    drained = _brain_notes(ctx)
    update["notes"] = update.get("notes", []) + drained["notes"]
    update["llm_fallbacks"] = drained["llm_fallbacks"]
    if nxt is None:
        return {**update, "stage": "search converged", "proposals": new}
    if nxt.legs is None and nxt.status == "pending" and nxt.trial is None:  # against the best as it is now
        nxt = nxt.model_copy(update={"against": _best(state)})
        new = [nxt if p.id == nxt.id else p for p in new] or [nxt]
    return {**update, "current": nxt.id, "proposals": new, "stage": f"search: {nxt.id}"}


def route_pick(state: RunState, runtime: Runtime[RunContext]) -> str:
    if state.get("current") is None:
        if state.get("banked") and not state.get("bundle_done"):
            return "bundle"
        return _red_team_or_report(state, runtime)
    p = _proposal(state)
    return "op_benchmarker" if p.kind == "kernel" and p.status == "pending" else "integrator"


@step
def op_benchmarker(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    p = _proposal(state)
    run = _run(state)
    op = p.kernel_op()
    shapes = state.get("served_shapes", {}).get(op, [])
    try:
        with _captured(ctx, run, f"op bench {op}"):
            path = ctx.lab.opbench(run, op, p.candidates, shapes)
    except LabError as exc:
        p.status, p.history = "rejected", p.history + [f"op bench failed: {exc}"]
        return {"proposals": [p], "pending_claim": None, "last_verdict": None,
                "rejected": [Rejection(name=p.id, reason=f"op bench failed: {exc}")]}
    winner, speedup, ref = op_benchmarker_agent.pick_winner(path)
    if winner is None or speedup is None or ref is None:  # a winner comes with its speedup and reference
        p.status, p.history = "rejected", p.history + ["no correct candidate beat the reference"]
        return {"proposals": [p], "pending_claim": None, "last_verdict": None,
                "rejected": [Rejection(name=p.id, reason="no correct candidate beat the reference")]}
    p.chosen, p.isolated_speedup = winner, speedup
    p.harness_attempts += 1
    rel_bench = str(path.relative_to(run))
    submitted = _submit(state, op_benchmarker_agent.harness_claim(p, rel_bench, winner, speedup, ref, _base_leg(state)))
    p.history.append(f"op bench: {winner!r} {speedup:.2f}x vs {ref!r} (claim {submitted['pending_claim']})")
    return {**submitted, "proposals": [p]}


def route_op_benchmarker(state: RunState) -> str:
    return "auditor" if state.get("pending_claim") else "pick"


@step
def harness_result(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    p = _proposal(state)
    v = _answered(state)
    if acceptance.recorded(v).accepted:
        p.status = "benchmarked"
        p.history.append(f"harness audit {v.shown}: {p.chosen!r} goes to A/B")
        return {"proposals": [p]}
    p.candidates = [c for c in p.candidates if c != p.chosen]
    p.history.append(f"harness audit {v.shown} ({v.action}): dropped {p.chosen!r}")
    p.chosen = None
    if p.harness_attempts > runtime.context.settings.max_harness_redos or not p.candidates:
        p.status = "rejected"
        return {"proposals": [p], "rejected": [Rejection(name=p.id, verdict=v.path,
                                                         reason=f"harness audit {v.shown}: {sorted(v.codes())}")]}
    return {"proposals": [p]}


def route_harness(state: RunState) -> str:
    p = _proposal(state)
    if p.status == "benchmarked":
        return "integrator"
    return "op_benchmarker" if p.status == "pending" else "pick"


@step
def integrator(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    """Measure the step's A/B (best configuration vs best + change), plan the quality eval of a change
    the config model says is lossy, and submit the patch claim."""
    ctx = runtime.context
    p = _proposal(state)
    run = _run(state)
    if not p.legs:
        p.legs = list(integrator_agent.leg_names(p, p.attempts))
    base_leg, cand_leg = p.legs
    legs = _ab_plans(ctx, p, p.legs)
    if ctx.cluster is not None:  # this step first, then the batch's others on free nodes; audited in turn
        ctx.cluster.submit(legs, max(p.reps, ctx.settings.reps))
        for other in state.get("proposals", []):
            if other.trial is not None and other.status == "pending" and other.id != p.id and other.legs is None:
                ctx.cluster.submit(_ab_plans(ctx, other, integrator_agent.leg_names(other, other.attempts)),
                                   max(other.reps, ctx.settings.reps))
    look, status = stepping.measure_sequentially(state, ctx, run, p, lambda n: _measure(ctx, run, legs, n))
    p.look, p.reps = look, min(look.reps)
    p.history.append(f"sequential: {look.action} at {look.reps[0]}+{look.reps[1]} reps (at most "
                     f"{look.max_reps} per leg): {look.reason}")
    p.status = "measuring"
    if p.mechanism == "speculative_decoding":
        p = config_tuner.document_spec_decode(p, run)
    notes = []
    if not p.lossless and p.quality_eval_id is None and look.action == "win" and status.get(cand_leg, "ok") == "ok":
        p, note = _run_quality_eval(ctx, run, p, legs[0], legs[1])
        notes.append(note)
    what = f"A/B {base_leg} vs {cand_leg} x{p.reps} reps, sequential {look.action} ({status.get(cand_leg, 'ok')})"
    submitted = _submit_patch(state, ctx, p, what)
    return {**submitted, "notes": notes + submitted.get("notes", [])}


def _ab_plans(ctx: RunContext, p: Proposal, names: list[str] | tuple[str, str]) -> list[LegPlan]:
    """A step's two legs: the best configuration it is measured against, and that plus the step."""
    base_leg, cand_leg = names
    base, model = _base_knobs(ctx), ctx.lab.config_model
    return [LegPlan(leg=base_leg, role="baseline", config=model.of(integrator_agent.baseline_config(base, p)),
                    overlay=integrator_agent.overlay(p.against), purpose=f"best configuration before {p.id}"),
            LegPlan(leg=cand_leg, role="candidate", config=model.of(integrator_agent.candidate_config(base, p)),
                    overlay=integrator_agent.overlay(integrator_agent.candidate_config({}, p)),
                    parent=base_leg, purpose=p.rationale)]


def _run_quality_eval(ctx: RunContext, run: Path, p: Proposal, base: LegPlan, cand: LegPlan) -> tuple[Proposal, str]:
    try:
        with _captured(ctx, run, f"quality eval {cand.leg}"):
            eval_id = ctx.lab.quality(run, cand, base)
        p.quality_eval_id = eval_id
        p.history.append(f"quality eval {eval_id!r} completed on {cand.leg!r} against {base.leg!r}")
        return p, f"{p.id}: quality eval {eval_id!r} run before claiming (a lossy change)"
    except LabError as exc:
        p.history.append(f"quality eval failed: {exc}")
        return p, f"{p.id}: quality eval failed: {exc}"


def _aa_for(state: RunState, ctx: RunContext, p: Proposal) -> list[str]:
    """The run's A/A legs ran the true baseline: A/A evidence for a step measured against it, none for a step
    measured against a banked configuration (declared there, they would be another configuration's noise,
    and its 'handicapped baseline' check would compare the step's baseline with a different server)."""
    base = _base_knobs(ctx)
    return list(state.get("aa_legs") or []) if integrator_agent.baseline_config(base, p) == base else []


def _submit_patch(state: RunState, ctx: RunContext, p: Proposal, what: str) -> RunState:
    """Write the proposal's patch claim over its current legs, stating the headline figure the producer
    read from its own legs (or its LLM brain stated from them); the auditor node answers it."""
    legs = p.ab_legs()
    base_leg, cand_leg = legs
    p.attempts += 1
    objective = ctx.settings.run_objective()
    reading = own_figures.read_ab(_run(state), legs, objective.metric, objective.slo)
    p.stated_pct, p.stated_by = ctx.brains.state_figure(p, reading) if reading is not None else (None, None)
    opbench_rel = f"opbench/{p.op}/opbench.jsonl" if p.kind == "kernel" else None
    submitted = _submit(state, integrator_agent.patch_claim(p, base_leg, cand_leg, opbench_rel, _aa_for(state, ctx, p),
                                                            objective))
    stated = f"states {p.stated_pct:+.2f}% ({p.stated_by})" if p.stated_pct is not None else "states no figure"
    p.history.append(f"{what}; claim {submitted['pending_claim']} {stated}")
    return {**submitted, "proposals": [p], **_brain_notes(ctx)}


@step
def fix(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    settings = ctx.settings
    p = _proposal(state)
    v = _answered(state)
    run = _run(state)
    ruling = acceptance.recorded(v)
    if ruling.basis in acceptance.FINAL_REFUSALS:  # e.g. unsealed: the harness seals every run it records
        return _refuse(p, v, f"refused -- {ruling.reason}", ruling.reason)
    no_win = stepping.no_sequential_win(p, v, ruling.accepted)
    if no_win is not None:
        return _refuse(p, v, no_win, no_win)
    if ruling.accepted and p.trial is not None and study.superseded(p, _best(state)):
        why = "superseded: another step was banked while this one was measured against the older best"
        return _refuse(p, v, f"against an older best: {why}", why)
    if ruling.accepted:  # the auditor's one banking rule: its class and re-derived headline, never ours
        p.status = "banked"
        cls = v.lever_detected or p.believed_class
        banked_as = "as_claimed" if ruling.basis == "pass" else ruling.basis
        p.history.append(f"patch audit {v.shown} ({v.action}): banked as class {cls} ({banked_as})")
        claim, _ = load_claim(run / v.claim)
        banked = BankedChange(name=p.id, kind=p.kind, lever_class=cls, config=p.config, against=p.against,
                              op=p.op, impl=p.chosen, verdict=v.path, claim=v.claim,
                              headline_rederived_pct=v.headline_rederived, quality_eval_id=p.quality_eval_id,
                              mechanism=claim.mechanism, disclosed_regressions=p.disclosed_regressions)
        return {"proposals": [p], "banked": [banked], "fix_action": "done"}
    decision = ctx.brains.fix(p, v, settings.max_reps)
    p.history.append(f"patch audit {v.shown} ({v.action}): {decision.action} -- {decision.reason}")
    action = decision.action
    if action in config_tuner.CLAIM_FIXES and not _resubmission_can_bank(v):
        action = "remeasure" if v.action == "remeasure" and p.reps < settings.max_reps else "drop"
        raw = sorted({f.code for f in _not_claim_fixable(v)})
        decision = decision.model_copy(update={"reason": f"{raw}: a resubmission on the same legs cannot change "
                                                         "the verdict"})
        p.history.append(f"{action} instead -- {decision.reason}")
    if p.attempts > settings.max_fix_attempts and action != "drop":
        action = "drop"
        p.history.append(f"gave up after {p.attempts} audits (max_fix_attempts={settings.max_fix_attempts})")
    fresh = bool(v.codes() - {"DELTA_NOT_SIGNIFICANT"})  # contention or conditions: the legs themselves are spoiled
    stop = stepping.remeasure_stop(state, ctx, p, fresh, _typical_change_s(state)) if action == "remeasure" else None
    if stop is not None:
        action = "drop"
        decision = decision.model_copy(update={"reason": stop})
        p.history.append(stop)
    update: RunState = {"fix_action": action, **_brain_notes(ctx)}
    if action == "drop":
        p.status = "rejected"
        return {**update, "proposals": [p], "fix_action": "done",
                "rejected": [Rejection(name=p.id, verdict=v.path, reason=decision.reason)]}
    if action == "remeasure" and fresh:
        p.legs, p.look, p.reps = None, None, settings.reps  # a new step on fresh legs
    elif action == "reclassify":
        p = config_tuner.reclassify(p, run)
    elif action == "disclose":
        p = config_tuner.disclose(p, v, run)
    elif action == "resubmit" and "REPORTED_MISMATCH" in v.codes():
        p.figure_by = "code"  # the brain's figure was refused: the producer's own reading states the next one
    return {**update, "proposals": [p]}


def _refuse(p: Proposal, v: VerdictSummary, history: str, reason: str) -> RunState:
    """The step is given up: rejected with ``reason``, its history saying why after the verdict."""
    p.status = "rejected"
    p.history.append(f"patch audit {v.shown} ({v.action}): {history}")
    return {"proposals": [p], "fix_action": "done", "rejected": [Rejection(name=p.id, verdict=v.path, reason=reason)]}


def _resubmission_can_bank(v: VerdictSummary) -> bool:
    """Whether a claim resubmitted on the same legs could bank: once every finding a resubmission can
    answer (``config_tuner.CLAIM_FIXABLE``) is gone, what is left must bank by the one banking rule. A
    refused claim is not resubmitted only to disclose a trade-off of a change the raw already refused."""
    left = _not_claim_fixable(v)
    label = verdict_label(left)
    return banking.kept_as(label, deciding_actions(left, label)) is not None


def _not_claim_fixable(v: VerdictSummary) -> list[FindingSummary]:
    """The findings that count and that no resubmission on the same legs can answer."""
    return [f for f in v.findings if f.severity != "INFO" and not config_tuner.claim_fixable(f.code, f.gate)]


FIX_ROUTES: dict[FixStep, str] = {"done": "pick", "drop": "pick", "run_quality_eval": "quality_eval",
                                  "reclassify": "resubmit", "disclose": "resubmit", "resubmit": "resubmit",
                                  "remeasure": "integrator"}
"""Where each ``FixStep`` goes next: every value of the type, and nothing else (tests/test_graph_types.py)."""


def route_fix(state: RunState) -> str:
    action = state.get("fix_action")
    if action is None:
        raise RuntimeError("no fix step to route: the fix node has not decided one")
    return FIX_ROUTES[action]


@step
def quality_eval(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    """The auditor found the change lossy although the producer did not plan an eval: run it now."""
    ctx = runtime.context
    p = _proposal(state)
    base, cand = _ab_plans(ctx, p, p.ab_legs())  # the step's own legs, planned as they were measured
    p, note = _run_quality_eval(ctx, _run(state), p, base, cand)
    if p.quality_eval_id is None:
        p.status = "rejected"
        return {"proposals": [p], "notes": [note], "rejected": [Rejection(name=p.id, reason=note)]}
    return {"proposals": [p], "notes": [note]}


def route_quality(state: RunState) -> str:
    return "pick" if _proposal(state).status == "rejected" else "resubmit"


@step
def resubmit(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    """Same legs, corrected claim (reclassified headline, a disclosed trade-off or a quality eval
    added): no re-measure."""
    return _submit_patch(state, runtime.context, _proposal(state), "resubmitted on the same legs")


@step
def bundle(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    """The net change (the final configuration's difference from the true baseline) against the true
    no-overlay baseline, with a TEST04 caching pair; its components are the banked steps that survive in it."""
    ctx = runtime.context
    run = _run(state)
    base = _base_knobs(ctx)
    changes = integrator_agent.net_changes(state["banked"], base)
    if not changes:  # later steps set every banked knob back to its baseline value: there is nothing to bundle
        return {"bundle_done": True, "pending_claim": None,
                "notes": ["bundle: the banked steps end at the true baseline configuration; nothing to measure"]}
    banked = integrator_agent.components(state["banked"], base)
    final = ctx.lab.config_model.of(apply_overlay(base, changes))
    legs = [LegPlan(leg="bundle-base", role="baseline", config=_base_config(ctx), purpose="true no-overlay baseline"),
            LegPlan(leg="bundle", role="validation", config=final, overlay=integrator_agent.overlay(changes),
                    parent="bundle-base", purpose="every banked change together"),
            LegPlan(leg="bundle-test04", role="caching_audit", config=final, prompts="repeat",
                    purpose="TEST04-style: one prompt repeated"),
            LegPlan(leg="bundle-test04-control", role="candidate", config=final, prompts="same_length",
                    purpose="TEST04 control: distinct prompts of the repeated prompt's length")]
    try:
        # Two servers up at a time, as in every other step: the bundle's A/B first, then the TEST04 pair
        # (compared with each other only). Four servers up at once slowed every leg of a vLLM bundle step
        # against its same-config legs (benchmarks/baseline_handicap.py --crowd: 0.967, the idle servers
        # burning 0.40 CPU s per rep against 0.12 beside one partner).
        _measure(ctx, run, legs[:2], ctx.settings.reps)
        _measure(ctx, run, legs[2:], ctx.settings.reps)
    except LabError as exc:
        return {"bundle_done": True, "notes": [f"bundle failed: {exc}"], "pending_claim": None}
    notes = []
    traded = sorted({m for b in banked for m in b.disclosed_regressions})
    # Restate each trade-off at the size the bundle legs show (the producer's own reading).
    disclosed = own_figures.own_regressions(run, ["bundle-base", "bundle"], traded) if traded else {}
    objective = ctx.settings.run_objective()
    reading = own_figures.read_ab(run, ["bundle-base", "bundle"], objective.metric, objective.slo)
    eval_id = None
    if any(b.quality_eval_id for b in banked):
        try:
            with _captured(ctx, run, "bundle quality eval"):
                eval_id = ctx.lab.quality(run, legs[1], legs[0])
        except LabError as exc:
            notes.append(f"bundle quality eval failed: {exc}")
    claim = integrator_agent.bundle_claim(state["banked"], base, "bundle-base", "bundle", "bundle-test04", disclosed,
                                          eval_id, reading.delta_pct if reading is not None else None, objective)
    return {**_submit(state, claim), "bundle_done": True, "current": None, "notes": notes, "stage": "bundle"}


def route_bundle(state: RunState, runtime: Runtime[RunContext]) -> str:
    return "auditor" if state.get("pending_claim") else _red_team_or_report(state, runtime)


def _red_team_or_report(state: RunState, runtime: Runtime[RunContext]) -> str:
    return "red_team" if runtime.context.attacker is not None and not state.get("red_team_done") else "report"


@step
def red_team(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    """``--red-team``: the attack producer submits claims to the same auditor node; every one must be
    refused (the report lists them, and any that passed)."""
    ctx = runtime.context
    attacks = sum(1 for v in state.get("verdicts", []) if v.producer == "red_team")
    if ctx.attacker is None or attacks >= ctx.settings.max_red_team_attacks or ctx.remaining_s(state) <= 0:
        return {"red_team_done": True}
    claim = ctx.attacker.next_attack(_run(state), state.get("banked", []), state.get("verdicts", []))
    if claim is None:
        return {"red_team_done": True}
    return _submit(state, claim.model_copy(update={"producer": "red_team"}))


def route_red_team(state: RunState) -> str:
    return "auditor" if state.get("pending_claim") else "report"


@step
def report(state: RunState, runtime: Runtime[RunContext]) -> RunState:
    ctx = runtime.context
    study.tell(ctx, _run(state), state)  # steps the budget skipped are told too
    drained = _brain_notes(ctx)
    notes = list(state.get("notes", [])) + drained["notes"]
    fallbacks = dict(state.get("llm_fallbacks", {}))
    for k, n in drained["llm_fallbacks"].items():
        fallbacks[k] = fallbacks.get(k, 0) + n
    llm_usage = None
    if ctx.llm is not None:
        u = ctx.llm.usage
        llm_usage = LLMUsage(model=ctx.llm.model, calls=u.calls, prompt_tokens=u.prompt_tokens,
                             completion_tokens=u.completion_tokens, invalid_outputs=u.failures,
                             unavailable=u.unavailable, fallbacks=fallbacks)
        notes.append(f"LLM {ctx.llm.model!r}: {u.calls} calls, {u.prompt_tokens} prompt + {u.completion_tokens} "
                     f"completion tokens, {u.failures} invalid outputs, {u.unavailable} unanswered asks; "
                     f"deterministic fallbacks: {fallbacks or 'none'}")
    baselines = [v for v in state.get("verdicts", []) if v.scope == "baseline"]
    stopped = bool(baselines) and not acceptance.recorded(baselines[-1]).accepted
    if stopped and len(baselines) <= ctx.settings.max_baseline_remeasures:
        notes.append(f"no further baseline was measured: one takes ~{state.get('baseline_s', 0.0):.0f}s and "
                     f"{max(ctx.remaining_s(state), 0.0):.0f}s of the budget were left")
    write_report(_run(state), {**state, "notes": notes, "llm_fallbacks": fallbacks}, _base_config(ctx), llm_usage,
                 ctx.settings.run_objective())
    done: RunState = {"stage": "done"}
    if drained.get("notes"):
        done["notes"] = drained["notes"]
    if drained.get("llm_fallbacks"):
        done["llm_fallbacks"] = drained["llm_fallbacks"]
    return done


NODES: tuple[Node, ...] = (setup, baseline, auditor, profile, pick, op_benchmarker, harness_result, integrator, fix,
                           quality_eval, resubmit, bundle, red_team, report)
"""Every node; each is added under its function's name."""


def build_graph() -> StateGraph[RunState, RunContext, RunState, RunState]:
    g = StateGraph(RunState, context_schema=RunContext)
    for fn in NODES:
        g.add_node(fn.__name__, fn)
    g.add_edge(START, "setup")
    g.add_edge("setup", "baseline")
    g.add_edge("baseline", "auditor")
    g.add_conditional_edges("auditor", after_audit, ["baseline", "profile", "pick", "harness_result", "fix",
                                                     "red_team", "report"])
    g.add_conditional_edges("profile", route_profile, ["auditor", "pick"])
    g.add_conditional_edges("pick", route_pick, ["op_benchmarker", "integrator", "bundle", "red_team", "report"])
    g.add_conditional_edges("op_benchmarker", route_op_benchmarker, ["auditor", "pick"])
    g.add_conditional_edges("harness_result", route_harness, ["integrator", "op_benchmarker", "pick"])
    g.add_edge("integrator", "auditor")
    g.add_conditional_edges("fix", route_fix, ["pick", "quality_eval", "resubmit", "integrator"])
    g.add_conditional_edges("quality_eval", route_quality, ["pick", "resubmit"])
    g.add_edge("resubmit", "auditor")
    g.add_conditional_edges("bundle", route_bundle, ["auditor", "red_team", "report"])
    g.add_conditional_edges("red_team", route_red_team, ["auditor", "report"])
    g.add_edge("report", END)
    return g


def initial_state(run: Path, started_at: float) -> RunState:
    return {"state_version": STATE_VERSION, "run_dir": str(run), "started_at": started_at, "seq": 0,
            "current": None, "pending_claim": None, "bundle_done": False, "kernels_proposed": False,
            "red_team_done": False, "proposals": [], "verdicts": [], "banked": [], "rejected": [], "notes": [],
            "llm_fallbacks": {}}


def _reference_source(op: str) -> str:
    """Source of the reference implementation an LLM-written kernel must match. Read as text (the
    module imports torch, which strategizing does not need: the synthetic lab runs without it)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("perfwarden.harness.ops.reference")
    text = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == op:
            return ast.get_source_segment(text, node) or ""
    return f"# no reference implementation for {op!r}"


def _base_leg(state: RunState) -> str:
    n = state.get("baseline_attempts", 1)
    return BASELINE_LEG if n <= 1 else f"{BASELINE_LEG}-r{n - 1}"


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for pkg in ("perfwarden", "torch", "transformers", "mlcommons-loadgen", "langgraph"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def _iso(ts: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, timezone.utc).isoformat()
