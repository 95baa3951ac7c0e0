"""The autonomous run as a LangGraph state machine (design §5).

    setup -> baseline -> auditor --(baseline: remeasure)--> baseline
                                  --(ok)--> profile -> auditor -> strategize -> pick
    pick --(kernel, not benchmarked)--> op_benchmarker -> auditor --(FAIL: redo)--> op_benchmarker
                                                                  --(PASS)--> integrator
    pick --(next change)--> integrator -> auditor -> fix --(remeasure/resubmit)--> integrator
                                                         --(quality eval)--> quality_eval -> integrator
                                                         --(banked/dropped)--> pick
    pick --(no more changes)--> bundle -> auditor -> report -> END

Producers submit claims into ``pending_claim``; the single ``auditor`` node answers every claim and the
router sends the verdict back to whoever asked. Every loop is bounded by a setting; the recursion limit
is the backstop. State is plain JSON (checkpointed in SQLite), and every side effect is idempotent:
reps are keyed by (leg, rep), claims and verdicts by their sequence number, so ``run --resume`` after a
crash repeats no rep and banks no change twice.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypedDict

from langgraph.graph import END, START, StateGraph

from perfwarden.agents import config_tuner, integrator, kernel_extractor, op_benchmarker
from perfwarden.agents.auditor.audit import audit_path, write_verdict
from perfwarden.agents.auditor.gates.profile import rank_ops
from perfwarden.agents.auditor.persona import apply_persona
from perfwarden.agents.base import Proposal
from perfwarden.agents.llm import LLMClient
from perfwarden.harness.jsonl import ProfileLine, read_jsonl
from perfwarden.harness.records import RunDir, RunManifest, append_jsonl, write_json_atomic
from perfwarden.harness.seal import find_key_file
from perfwarden.orchestrator.lab import Lab, LabError, LegPlan
from perfwarden.orchestrator.settings import RunSettings

BASELINE_LEG = "baseline"


class RunState(TypedDict, total=False):
    run_dir: str
    settings: dict
    started_at: float
    seq: int
    stage: str
    baseline_attempts: int
    baseline_ok: bool
    hot_ops: list
    served_shapes: dict
    proposals: list
    current: str | None
    pending_claim: str | None
    last_verdict: dict | None
    verdicts: list
    banked: list
    rejected: list
    bundle_done: bool
    notes: list
    fix_action: str | None
    durations: list
    picked_at: float
    aa_legs: list


@dataclass
class Services:
    """What nodes need besides the state: the lab, the clock and the optional LLM."""

    lab: Lab
    settings: RunSettings
    llm: LLMClient | None = None
    brains: Any = None
    clock: Callable[[], float] = time.time
    on_event: Callable[[str, str], None] = field(default=lambda node, msg: None)


# ----------------------------------------------------------------------------------------- helpers


def _run(state: RunState) -> Path:
    return Path(state["run_dir"])


def _proposal(state: RunState, pid: str | None = None) -> Proposal:
    pid = pid or state["current"]
    return Proposal.model_validate(next(p for p in state["proposals"] if p["id"] == pid))


def _replace(state: RunState, proposal: Proposal) -> list:
    return [proposal.model_dump() if p["id"] == proposal.id else p for p in state["proposals"]]


def _submit(state: RunState, claim: dict[str, Any]) -> tuple[int, str]:
    """Write a claim with the next sequence number; the auditor node answers it."""
    seq = state.get("seq", 0) + 1
    claim = {**claim, "seq": seq}
    rel = f"claims/{seq:03d}-{claim['scope']}.json"
    write_json_atomic(_run(state) / rel, claim)
    return seq, rel


def _over_budget(state: RunState, services: Services) -> bool:
    return services.clock() - state["started_at"] > services.settings.budget_minutes * 60.0


def _event(run: Path, node: str, state: RunState, started: float, error: str | None = None, **extra: Any) -> None:
    digest = hashlib.sha256(json.dumps({k: state.get(k) for k in ("seq", "current", "pending_claim", "stage")},
                                       sort_keys=True, default=str).encode()).hexdigest()[:16]
    append_jsonl(run / "events.jsonl", {"node": node, "inputs_digest": digest, "duration_s": round(time.time() - started, 3),
                                        "error": error, **extra})


def _node(name: str, services: Services):
    """Wrap a node: record an event per step (node, inputs digest, duration, error)."""
    def decorate(fn):
        def wrapper(state: RunState) -> dict:
            started = time.time()
            services.on_event(name, state.get("current") or "")
            try:
                update = fn(state) or {}
            except Exception as exc:
                _event(_run(state), name, state, started, error=f"{type(exc).__name__}: {exc}")
                raise
            _event(_run(state), name, state, started)
            return update
        return wrapper
    return decorate


# ------------------------------------------------------------------------------------------- nodes


def build_graph(services: Services):
    settings = services.settings
    lab = services.lab
    if services.brains is None:
        from perfwarden.agents.brains import Brains

        services.brains = Brains(llm=services.llm)
    brains = services.brains
    g = StateGraph(RunState)

    @_node("setup", services)
    def setup(state: RunState) -> dict:
        run = _run(state)
        run.mkdir(parents=True, exist_ok=True)
        if not (run / "run.json").is_file():
            write_json_atomic(run / "run.json", RunManifest(id=run.name, target=settings.target,
                                                            model="SmolLM2-135M-Instruct", seed=settings.seed,
                                                            versions=_versions(), started_at=_iso(state["started_at"])))
        return {"stage": "baseline", "baseline_attempts": 0}

    def base_config() -> dict[str, Any]:
        return {**lab.base_config(), **settings.base_config}

    @_node("baseline", services)
    def baseline(state: RunState) -> dict:
        attempt = state.get("baseline_attempts", 0)
        leg = BASELINE_LEG if attempt == 0 else f"{BASELINE_LEG}-r{attempt}"
        # An A/A leg (the same config, interleaved) calibrates this session's noise band: the auditor
        # judges the baseline's spread against it instead of against a fixed constant.
        lab.measure(_run(state), [LegPlan(leg=leg, role="baseline", config=base_config(),
                                          purpose="true no-overlay baseline"),
                                  LegPlan(leg=f"{leg}-aa", role="aa", config=base_config(),
                                          purpose="A/A: the baseline config again, to calibrate noise")],
                    settings.reps)
        seq, rel = _submit(state, {"scope": "baseline", "producer": "integrator",
                                   "legs": {"baseline": leg, "aa": [f"{leg}-aa"]}})
        return {"seq": seq, "pending_claim": rel, "stage": "baseline", "baseline_attempts": attempt + 1,
                "aa_legs": [leg, f"{leg}-aa"], "notes": state.get("notes", []) + [f"baseline leg {leg!r} (+ A/A)"]}

    @_node("auditor", services)
    def auditor(state: RunState) -> dict:
        run = _run(state)
        rel = state["pending_claim"]
        # The harness holds the run's seal key outside the run directory; only the auditor gets it.
        verdict = audit_path(run, run / rel, key=find_key_file(run))
        verdict = apply_persona(run, (run / rel).read_text("utf-8"), verdict, services.llm)
        path = write_verdict(run, verdict)
        summary = {"seq": verdict.claim_seq, "scope": verdict.scope, "verdict": verdict.verdict,
                   "action": verdict.action, "path": str(path.relative_to(run)), "claim": rel,
                   "proposal": state.get("current") if verdict.scope in ("harness", "patch") else None,
                   "findings": [{"code": f.code, "severity": f.severity, "message": f.message, "measured": f.measured}
                                for f in verdict.findings],
                   "headline_rederived": verdict.headline_rederived, "lever_detected": verdict.lever_detected,
                   "degraded": verdict.degraded}
        return {"last_verdict": summary, "verdicts": state.get("verdicts", []) + [summary], "pending_claim": None}

    def after_audit(state: RunState) -> str:
        v = state["last_verdict"]
        scope = v["scope"]
        if scope == "baseline":
            if v["verdict"] == "PASS":
                return "profile" if settings.kernels else "strategize"
            if state.get("baseline_attempts", 0) <= settings.max_baseline_remeasures and not _over_budget(state, services):
                return "baseline"
            return "report"
        if scope == "profile":
            return "strategize"
        if scope == "harness":
            return "harness_result"
        if scope == "patch":
            return "fix"
        return "report"

    @_node("profile", services)
    def profile(state: RunState) -> dict:
        run = _run(state)
        try:
            lab.profile(run, base_config())
        except LabError as exc:
            return {"hot_ops": [], "notes": state.get("notes", []) + [f"profile failed: {exc}"],
                    "last_verdict": None, "pending_claim": None}
        report = read_jsonl(RunDir(run).profile, ProfileLine)
        ranking = rank_ops(report.records)
        overridable = lab.overridable_ops()
        routed = next((op for op, _ in ranking if op in overridable), ranking[0][0] if ranking else None)
        shapes: dict[str, list] = {}
        for _, row in report.records:
            key = (row.op or row.name).lower()
            shapes.setdefault(key, [])
            for s in row.shapes or []:
                if s not in shapes[key]:
                    shapes[key].append(s)
        seq, rel = _submit(state, {"scope": "profile", "producer": "kernel_extractor", "op": routed})
        return {"seq": seq, "pending_claim": rel, "hot_ops": [[op, share] for op, share in ranking],
                "served_shapes": shapes, "stage": "profile"}

    def route_profile(state: RunState) -> str:
        return "auditor" if state.get("pending_claim") else "strategize"

    @_node("strategize", services)
    def strategize(state: RunState) -> dict:
        proposals = brains.propose_config(base_config(), settings.levers, settings.max_proposals, settings.reps)
        profile_ok = any(v["scope"] == "profile" and v["verdict"] == "PASS" for v in state.get("verdicts", []))
        if settings.kernels and profile_ok:
            hot = [(op, share) for op, share in state.get("hot_ops", [])]
            alts = {op: lab.alternatives(op) for op in lab.overridable_ops()}
            kernels = kernel_extractor.propose(hot, lab.overridable_ops(), alts, reps=settings.reps)
            for i, k in enumerate(kernels):  # the LLM brain writes one more candidate per op (sandboxed later)
                written = brains.write_kernel(_run(state), k.op, dict(hot).get(k.op, 0.0),
                                              state.get("served_shapes", {}).get(k.op, []), _reference_source(k.op),
                                              k.op, i)
                if written:
                    k.candidates.insert(0, written)
            proposals += kernels
        proposals = proposals[: settings.max_proposals]
        return {"proposals": [p.model_dump() for p in proposals], "stage": "search", "current": None}

    @_node("pick", services)
    def pick(state: RunState) -> dict:
        now = services.clock()
        durations = list(state.get("durations", []))
        pending = [p for p in state["proposals"] if p["status"] in ("pending", "benchmarked", "measuring")]
        if state.get("current") and (not pending or pending[0]["id"] != state["current"]):
            durations.append(now - state.get("picked_at", now))  # the previous proposal just finished
        update: dict[str, Any] = {"durations": durations, "picked_at": now}
        if pending and pending[0]["id"] == state.get("current"):
            update["picked_at"] = state.get("picked_at", now)  # still working on the same proposal
        remaining = settings.budget_minutes * 60.0 - (now - state["started_at"])
        typical = sorted(durations)[len(durations) // 2] if durations else 0.0
        # Stop starting new work when one more typical proposal plus the bundle would overrun the budget.
        out_of_time = remaining < 2.5 * typical or remaining <= 0
        if not pending or (out_of_time and (not pending or pending[0]["id"] != state.get("current"))):
            skipped = [dict(p, status="skipped") if p["status"] in ("pending", "benchmarked", "measuring") else p
                       for p in state["proposals"]]
            notes = state.get("notes", [])
            if pending:
                notes = notes + [f"budget: {remaining:.0f}s left, a change takes ~{typical:.0f}s; skipped "
                                 f"{[p['id'] for p in pending]}"]
            return {**update, "current": None, "proposals": skipped, "notes": notes}
        return {**update, "current": pending[0]["id"]}

    def route_pick(state: RunState) -> str:
        if state.get("current") is None:
            return "bundle" if state.get("banked") and not state.get("bundle_done") else "report"
        p = _proposal(state)
        if p.kind == "kernel" and p.status == "pending":
            return "op_benchmarker"
        return "integrator"

    @_node("op_benchmarker", services)
    def bench(state: RunState) -> dict:
        p = _proposal(state)
        run = _run(state)
        shapes = state.get("served_shapes", {}).get(p.op, [])
        try:
            path = lab.opbench(run, p.op, p.candidates, shapes)
        except LabError as exc:
            p.status, p.history = "rejected", p.history + [f"op bench failed: {exc}"]
            return {"proposals": _replace(state, p), "pending_claim": None, "last_verdict": None}
        winner, speedup, ref = op_benchmarker.pick_winner(path)
        if winner is None:
            p.status, p.history = "rejected", p.history + ["no correct candidate beat the reference"]
            return {"proposals": _replace(state, p), "pending_claim": None, "last_verdict": None}
        p.chosen, p.isolated_speedup = winner, speedup
        p.harness_attempts += 1
        rel_bench = str(path.relative_to(run))
        seq, rel = _submit(state, op_benchmarker.harness_claim(p, rel_bench, 0, winner, speedup, ref, _base_leg(state)))
        p.history.append(f"op bench: {winner!r} {speedup:.2f}x vs {ref!r} (claim {rel})")
        return {"seq": seq, "pending_claim": rel, "proposals": _replace(state, p)}

    def route_bench(state: RunState) -> str:
        return "auditor" if state.get("pending_claim") else "pick"

    @_node("harness_result", services)
    def harness_result(state: RunState) -> dict:
        p = _proposal(state)
        v = state["last_verdict"]
        if v["verdict"] == "PASS" or v["action"] == "flag":
            p.status = "benchmarked"
            p.history.append(f"harness audit {v['verdict']}: {p.chosen!r} goes to A/B")
        else:
            p.candidates = [c for c in p.candidates if c != p.chosen]
            p.history.append(f"harness audit {v['verdict']} ({v['action']}): dropped {p.chosen!r}")
            p.chosen = None
            if p.harness_attempts > settings.max_harness_redos or not p.candidates:
                p.status = "rejected"
        return {"proposals": _replace(state, p)}

    def route_harness(state: RunState) -> str:
        p = _proposal(state)
        if p.status == "benchmarked":
            return "integrator"
        return "op_benchmarker" if p.status == "pending" else "pick"

    @_node("integrator", services)
    def integrate(state: RunState) -> dict:
        p = _proposal(state)
        run = _run(state)
        if not p.legs:
            p.legs = list(integrator.leg_names(p, p.attempts))
        base_leg, cand_leg = p.legs
        legs = [LegPlan(leg=base_leg, role="baseline", config=base_config(), purpose=f"baseline for {p.id}"),
                LegPlan(leg=cand_leg, role="candidate", config=integrator.candidate_config(base_config(), p),
                        overlay=integrator.overlay_of(p), parent=base_leg, purpose=p.rationale)]
        try:
            status = lab.measure(run, legs, p.reps)
        except LabError as exc:
            status = {cand_leg: f"failed: {exc}"}
        p.status = "measuring"
        return submit_patch(state, p, f"A/B {base_leg} vs {cand_leg} x{p.reps} reps ({status.get(cand_leg, 'ok')})")

    def submit_patch(state: RunState, p: Proposal, what: str) -> dict:
        """Write the proposal's patch claim over its current legs; the auditor node answers it."""
        base_leg, cand_leg = p.legs
        p.attempts += 1
        opbench_rel = f"opbench/{p.op}/opbench.jsonl" if p.kind == "kernel" else None
        seq, rel = _submit(state, integrator.patch_claim(p, 0, base_leg, cand_leg, opbench_rel, state.get("aa_legs")))
        p.history.append(f"{what}; claim {rel}")
        return {"seq": seq, "pending_claim": rel, "proposals": _replace(state, p)}

    @_node("fix", services)
    def fix(state: RunState) -> dict:
        p = _proposal(state)
        v = state["last_verdict"]
        if v["verdict"] == "PASS":
            p.status = "banked"
            p.history.append(f"patch audit PASS: banked as class {v['lever_detected'] or p.believed_class}")
            claim = json.loads((_run(state) / v["claim"]).read_text())
            banked = state.get("banked", []) + [{
                "name": p.id, "proposal": p.id, "kind": p.kind, "lever_class": v["lever_detected"] or p.believed_class,
                "config": p.config, "config_keys": sorted(p.config), "op": p.op, "impl": p.chosen,
                "verdict": v["path"], "claim": v["claim"], "headline_rederived_pct": v["headline_rederived"],
                "quality_eval_id": p.quality_eval_id, "legs": claim["legs"], "mechanism": claim.get("mechanism"),
                "disclosed_regressions": p.disclosed_regressions}]
            return {"proposals": _replace(state, p), "banked": banked, "fix_action": "done"}
        decision = brains.fix(p, v, settings.max_reps)
        p.history.append(f"patch audit {v['verdict']} ({v['action']}): {decision.action} -- {decision.reason}")
        action = decision.action
        if p.attempts > settings.max_fix_attempts + 1 and action != "drop":
            action = "drop"
            p.history.append(f"gave up after {p.attempts} audits (max_fix_attempts={settings.max_fix_attempts})")
        if action == "drop":
            p.status = "rejected"
            rejected = state.get("rejected", []) + [{"name": p.id, "verdict": v["path"], "reason": decision.reason}]
            return {"proposals": _replace(state, p), "rejected": rejected, "fix_action": "done"}
        if action == "remeasure":
            only_power = {f["code"] for f in v["findings"] if f["severity"] != "INFO"} == {"DELTA_NOT_SIGNIFICANT"}
            if not only_power:
                p.legs = None  # contention or conditions: measure fresh legs
            p.reps = settings.max_reps
        elif action == "reclassify":
            p = config_tuner.reclassify(p, v, _run(state))
        elif action == "disclose":
            p = config_tuner.disclose(p, v, _run(state))
        elif action == "run_quality_eval":
            pass
        return {"proposals": _replace(state, p), "fix_action": action}

    def route_fix(state: RunState) -> str:
        action = state.get("fix_action")
        if action == "done":
            return "pick"
        if action == "run_quality_eval":
            return "quality_eval"
        if action in ("reclassify", "disclose"):
            return "resubmit"
        return "integrator"

    @_node("quality_eval", services)
    def quality_eval(state: RunState) -> dict:
        p = _proposal(state)
        base_leg, cand_leg = p.legs
        base_cfg = base_config()
        try:
            eval_id = lab.quality(_run(state), LegPlan(leg=cand_leg, role="candidate",
                                                       config=integrator.candidate_config(base_cfg, p)),
                                  LegPlan(leg=base_leg, role="baseline", config=base_cfg))
            p.quality_eval_id = eval_id
            p.history.append(f"quality eval {eval_id!r} completed on {cand_leg!r}")
        except LabError as exc:
            p.history.append(f"quality eval failed: {exc}")
            p.status = "rejected"
        return {"proposals": _replace(state, p)}

    def route_quality(state: RunState) -> str:
        return "pick" if _proposal(state).status == "rejected" else "resubmit"

    @_node("resubmit", services)
    def resubmit(state: RunState) -> dict:
        """Same legs, corrected claim (reclassified headline or a quality eval added): no re-measure."""
        return submit_patch(state, _proposal(state), "resubmitted on the same legs")

    @_node("bundle", services)
    def bundle(state: RunState) -> dict:
        run = _run(state)
        banked = state["banked"]
        config = base_config()
        overlay: dict[str, Any] = {"config": {}, "kernel_patches": []}
        for b in banked:
            if b["kind"] == "kernel":
                config["op_overrides"] = {**(config.get("op_overrides") or {}), b["op"]: b["impl"]}
                overlay["kernel_patches"].append({"op": b["op"], "impl": b["impl"]})
            else:
                config.update(b["config"])
                overlay["config"].update(b["config"])
        legs = [LegPlan(leg="bundle-base", role="baseline", config=base_config(), purpose="true no-overlay baseline"),
                LegPlan(leg="bundle", role="validation", config=config, overlay=overlay, parent="bundle-base",
                        purpose="every banked change together"),
                LegPlan(leg="bundle-test04", role="caching_audit", config=config, prompts="repeat",
                        purpose="TEST04-style: one prompt repeated"),
                LegPlan(leg="bundle-test04-control", role="candidate", config=config, prompts="same_length",
                        purpose="TEST04 control: distinct prompts of the repeated prompt's length")]
        try:
            lab.measure(run, legs, settings.reps)
        except LabError as exc:
            return {"bundle_done": True, "notes": state.get("notes", []) + [f"bundle failed: {exc}"],
                    "pending_claim": None}
        claim = integrator.bundle_claim(banked, 0, "bundle-base", "bundle", "bundle-test04")
        traded = sorted({m for b in banked for m in (b.get("disclosed_regressions") or {})})
        if traded:  # restate each trade-off at the size the bundle legs show (the producer's own reading)
            proxy = Proposal(id="bundle", kind="config", producer="integrator", legs=["bundle-base", "bundle"])
            findings = [{"code": "HIDDEN_LATENCY_REGRESSION", "measured": {"metric": m}} for m in traded]
            claim["headline"]["disclosed_regressions"] = config_tuner.disclose(
                proxy, {"findings": findings}, run).disclosed_regressions
        lossy = [b for b in banked if b.get("quality_eval_id")]
        if lossy:
            try:
                claim["correctness"]["quality_eval_id"] = lab.quality(run, legs[1], legs[0])
            except LabError as exc:
                state.setdefault("notes", []).append(f"bundle quality eval failed: {exc}")
        seq, rel = _submit(state, claim)
        return {"seq": seq, "pending_claim": rel, "bundle_done": True, "current": None}

    def route_bundle(state: RunState) -> str:
        return "auditor" if state.get("pending_claim") else "report"

    @_node("report", services)
    def report(state: RunState) -> dict:
        from perfwarden.orchestrator.report import write_report

        notes = state.get("notes", []) + list(brains.notes)
        if services.llm is not None:
            u = services.llm.usage
            notes.append(f"LLM {services.llm.model!r}: {u.calls} calls, {u.prompt_tokens} prompt + "
                         f"{u.completion_tokens} completion tokens, {u.failures} invalid outputs")
        write_report(_run(state), {**state, "notes": notes})
        return {"stage": "done"}

    for name, fn in [("setup", setup), ("baseline", baseline), ("auditor", auditor), ("profile", profile),
                     ("strategize", strategize), ("pick", pick), ("op_benchmarker", bench),
                     ("harness_result", harness_result), ("integrator", integrate), ("fix", fix),
                     ("quality_eval", quality_eval), ("resubmit", resubmit), ("bundle", bundle), ("report", report)]:
        g.add_node(name, fn)
    g.add_edge(START, "setup")
    g.add_edge("setup", "baseline")
    g.add_edge("baseline", "auditor")
    g.add_conditional_edges("auditor", after_audit, ["baseline", "profile", "strategize", "harness_result", "fix",
                                                     "report"])
    g.add_conditional_edges("profile", route_profile, ["auditor", "strategize"])
    g.add_edge("strategize", "pick")
    g.add_conditional_edges("pick", route_pick, ["op_benchmarker", "integrator", "bundle", "report"])
    g.add_conditional_edges("op_benchmarker", route_bench, ["auditor", "pick"])
    g.add_conditional_edges("harness_result", route_harness, ["integrator", "op_benchmarker", "pick"])
    g.add_edge("integrator", "auditor")
    g.add_conditional_edges("fix", route_fix, ["pick", "quality_eval", "resubmit", "integrator"])
    g.add_conditional_edges("quality_eval", route_quality, ["pick", "resubmit"])
    g.add_edge("resubmit", "auditor")
    g.add_conditional_edges("bundle", route_bundle, ["auditor", "report"])
    g.add_edge("report", END)
    return g


def _reference_source(op: str) -> str:
    """Source of the reference implementation an LLM-written kernel must match."""
    import inspect

    from perfwarden.harness.ops import reference

    fn = getattr(reference, op, None)
    return inspect.getsource(fn) if fn is not None else f"# no reference implementation for {op!r}"


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
