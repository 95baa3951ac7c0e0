"""The simulated target (``perfwarden run --target synthetic``): raw evidence with known effects.

It stands in for a serving target where none can run: the graph's tests (routing, fix loops, bounds,
crash and resume) run in seconds, and a user can watch the orchestrator and the auditor work without a
model. Effects are multiplicative on throughput with seeded lognormal rep noise, so the auditor still
decides from data. The real target is EmbeddedLab, which keeps its own end-to-end test. This lab stays in
the orchestrator, not in harness/labs/: it crashes the run at the orchestrator's crash points and writes
the orchestrator's synthetic evidence (orchestrator/synth.py).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

from perfwarden.formats import safe_write, seal
from perfwarden.formats.records import LegSpec, QualityEval, RunDir, jsonl_text
from perfwarden.formats.strict_json import loads
from perfwarden.harness import node_identity
from perfwarden.harness.bench_writer import append_bench_line, rep_exists
from perfwarden.harness.labs.lab import LabError, LegPlan, check_leg_writes
from perfwarden.harness.quality import load_items
from perfwarden.harness.target_config import EmbeddedConfig, TargetConfig
from perfwarden.orchestrator.crashpoints import armed, kill_now
from perfwarden.orchestrator.synth import COHERENT_TEXTS, make_rep, write_jsonl


class SyntheticLabSpec(BaseModel):
    """The synthetic target by its parameters: what a cluster node rebuilds this lab from."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["synthetic"] = "synthetic"
    effects: dict[str, dict[str, Any]]
    """Knob -> its effects (numbers, tables by knob value, log lines): ``SyntheticLab.effects``."""
    cv: float
    seed: int
    rep_delay_s: float
    contended: bool | str
    fail_first_quality: bool


# It simulates the embedded target, so its true baseline is that target's defaults (one place).
BASE = {**EmbeddedConfig.defaults(), "threads": 2}
MODEL = "SmolLM2-135M-Instruct"


class SyntheticLab:
    config_model = EmbeddedConfig
    model_name = MODEL
    def __init__(self, effects: dict[str, dict[str, Any]] | None = None, cv: float = 0.01, seed: int = 0,
                 crash_after: int | None = None, contended: bool | str = False,
                 on_rep: Callable[[str, int, str], object] | None = None,
                 fail_first_quality: bool = False, surface: Callable[[dict[str, Any]], float] | None = None,
                 handicap: dict[str, float] | None = None):
        self.effects: dict[str, dict[str, Any]] = effects if effects is not None else {
            "max_batch_size": {"tput": {2: 1.35, 4: 1.6, 8: 1.6, 16: 1.6}},
            "response_cache": {"tput": 2.0, "log": "response cache hit for request 3"},
            "prompt_lookup": {"tput": 1.2, "accept_length": 1.8},
            "quantization": {"tput": 1.15, "quality": (0.40, 0.42)},
            "batch_wait_ms": {"tput": 1.1, "ttft": 2.5},
            "op_overrides": {"tput": 1.07},
        }
        self.handicap = dict(handicap or {})
        """Leg-name fragment -> throughput factor for the legs whose name contains it: a leg handicapped by how
        it was measured rather than by its configuration (the auditor's same-config legs must expose it)."""
        self.surface = surface
        """Throughput factor of a whole configuration (knobs that interact), replacing the per-knob product
        (benchmarks/search_quality.py: a surface where one knob at a time stalls)."""
        self.cv = cv
        self.seed = seed
        self.fail_first_quality = fail_first_quality
        """A candidate leg's quality eval fails (a target that died mid-eval) until the auditor has answered
        a patch claim on that leg, so the graph's recovery path (QUALITY_EVAL_MISSING -> quality_eval ->
        resubmit) runs. Decided from the verdicts on disk, not a counter, so a node re-run after a crash
        takes the same path as the uninterrupted run."""
        self.calls: list[tuple[Any, ...]] = []  # (what was called, its arguments...)
        self.reps_written = 0
        self.crash_after = crash_after
        self.contended = contended  # True: every leg; a string: legs whose name contains it
        self.hog = {"loadavg_1m": 2.9, "ncpu": 2, "busy": [{"pid": 4242, "name": "stress-ng", "cpu_pct": 98.0}]}
        self.rep_delay_s = float(os.environ.get("PERFWARDEN_SIM_REP_DELAY", "0"))
        self.on_rep = on_rep or (lambda leg, rep, status: None)

    def describe(self) -> SyntheticLabSpec:
        """This lab as plain data for a cluster node (orchestrator/lab_spec.py); refused when a node could not
        rebuild the same lab: a subclass, a response surface given as a function, an in-process crash hook."""
        if type(self) is not SyntheticLab or self.surface is not None or self.crash_after is not None:
            raise LabError("this synthetic lab (a subclass, a surface function or a crash hook) cannot be "
                           "described to a cluster node")
        return SyntheticLabSpec(effects=self.effects, cv=self.cv, seed=self.seed, rep_delay_s=self.rep_delay_s,
                                contended=self.contended, fail_first_quality=self.fail_first_quality)

    @classmethod
    def from_spec(cls, spec: SyntheticLabSpec, on_rep=None) -> "SyntheticLab":
        lab = cls(effects=spec.effects, cv=spec.cv, seed=spec.seed, contended=spec.contended, on_rep=on_rep,
                  fail_first_quality=spec.fail_first_quality)
        lab.rep_delay_s = spec.rep_delay_s
        return lab

    # --- Lab protocol
    def base_config(self) -> EmbeddedConfig:
        return EmbeddedConfig.of(BASE)

    def overridable_ops(self) -> list[str]:
        return ["rmsnorm", "silu_mul", "rotary"]

    def alternatives(self, op: str) -> list[str]:
        return [f"alt/{op}_wrong.py:impl", f"alt/{op}_fast.py:impl"] if op == "rmsnorm" else []

    def _effect(self, config: dict[str, Any]) -> dict[str, float]:
        """Multiplicative effects of every knob that differs from the baseline. An effect is a number or
        a table by knob value (an ordinal knob helps more at some values than at others)."""
        out = {"tput": 1.0, "ttft": 1.0}
        for key, eff in self.effects.items():
            value = config.get(key)
            if value != BASE.get(key):
                out["tput"] *= _at(eff.get("tput", 1.0), value)
                out["ttft"] *= _at(eff.get("ttft", 1.0), value)
                if "accept_length" in eff:
                    out["accept_length"] = eff["accept_length"]
        if self.surface is not None:
            out["tput"] = self.surface(config)
        return out

    def measure(self, run: Path, legs: list[LegPlan], reps: int) -> dict[str, str]:
        self.calls.append(("measure", [leg.leg for leg in legs], reps))
        check_leg_writes(run, [plan.leg for plan in legs])
        seal.begin(run)  # the synthetic target plays the harness: it seals what it writes, as it writes it
        paths = RunDir(run)
        for plan in legs:
            knobs = plan.config.model_dump()
            safe_write.make_dirs(paths.leg_dir(plan.leg), run)
            info = node_identity.stamp({"model": MODEL, **knobs, "port": 9000 + len(plan.leg),
                                        "weights_digest": "synthetic", "version": "synthetic"})
            seal.write_json(paths.server_info(plan.leg), info)
            seal.write_json(paths.leg_spec(plan.leg), LegSpec(leg=plan.leg, role=plan.role,
                                                              overlay=plan.overlay,
                                                              purpose=plan.purpose, parent_leg=plan.parent))
            log = ["server ready"]
            for op in (knobs.get("op_overrides") or {}):
                log.append(f"override {op} engaged: 30 modules")
            for key, eff in self.effects.items():
                if knobs.get(key) != BASE.get(key) and "log" in eff:
                    log.append(eff["log"])
            seal.write_text(paths.server_log(plan.leg), "\n".join(log) + "\n")
            if not seal.is_current(paths.outputs(plan.leg)):
                write_jsonl(paths.outputs(plan.leg), [{"prompt_id": f"p{i}", "text": t} for i, t in enumerate(COHERENT_TEXTS)])
        for k in range(reps):
            for plan in legs:
                bench = paths.bench_runs(plan.leg)
                if rep_exists(bench, plan.leg, k):
                    continue
                if self.crash_after is not None and self.reps_written >= self.crash_after:
                    raise KeyboardInterrupt("simulated crash during a rep")
                time.sleep(self.rep_delay_s)
                eff = self._effect(plan.config.model_dump())
                # Noise is a function of (seed, leg, rep), not of call order: a resumed run re-draws the
                # same numbers for the reps it still has to measure.
                rng = random.Random(f"{self.seed}:{plan.leg}:{k}")
                slowed = math.prod(f for part, f in self.handicap.items() if part in plan.leg)
                tput = 100.0 * eff["tput"] * slowed * math.exp(rng.gauss(0, self.cv))
                line = make_rep(plan.leg, k, throughput=tput, ttft_ms=BASE_TTFT_MS * eff["ttft"],
                                accept_length=eff.get("accept_length"), n_requests=REQUESTS_PER_REP, output_len=16,
                                start_step_s=0.0,
                                contention=self.hog if self.contended is True or (
                                    isinstance(self.contended, str) and self.contended in plan.leg) else None,
                                started_at=_rep_start(paths, k, legs.index(plan), len(legs)))
                if armed("rep_torn"):  # test hook: die half-way through writing the line
                    _write_torn(bench, line)
                if armed("rep_unsealed"):  # test hook: die after writing the line, before sealing it
                    _write_unsealed(bench, line)
                append_bench_line(bench, line)
                self.reps_written += 1
                self.on_rep(plan.leg, k, "ok")
        return {plan.leg: "ok" for plan in legs}

    def profile(self, run: Path, config: TargetConfig) -> Path:
        self.calls.append(("profile", None))
        seal.begin(run)
        path = RunDir(run).profile
        write_jsonl(path, [
            {"name": "aten::linear", "op": "linear", "self_time_us": 5000.0, "shapes": [[8, 576]]},
            {"name": "rmsnorm", "op": "rmsnorm", "self_time_us": 1500.0, "shapes": [[8, 576]]},
            {"name": "silu_mul", "op": "silu_mul", "self_time_us": 700.0, "shapes": [[8, 1536]]}])
        return path

    def opbench(self, run: Path, op: str, candidates: list[str], shapes: list) -> Path:
        self.calls.append(("opbench", op, list(candidates)))
        seal.begin(run)
        rows = []
        for t, seed in enumerate((0, 1, 2)):
            rows.append(_row(op, "reference", 2.0, True, seed, t, 1e-7))
            for c in candidates:
                wrong = "wrong" in c
                rows.append(_row(op, c, 0.5 if wrong else 1.0, False, seed, t, 0.3 if wrong else 1e-7))
        path = RunDir(run).opbench(op)
        write_jsonl(path, rows)
        seal.write_json(path.parent / "rig.json", synthetic_rig(rows))
        return path

    def quality(self, run: Path, leg: LegPlan, baseline: LegPlan) -> str:
        self.calls.append(("quality", leg.leg))
        seal.begin(run)
        if self.fail_first_quality and leg.role == "candidate" and not _answered_patch_claim(run, leg.leg):
            raise LabError(f"simulated: the target died during the quality eval of {leg.leg!r}")
        score, base = (0.42, 0.42)
        for key, eff in self.effects.items():
            if getattr(leg.config, key, None) != BASE.get(key) and "quality" in eff:
                score, base = eff["quality"]
        # As harness/quality.run_quality_pair records it: one record per leg, on the shipped item set.
        digest = load_items().sha256
        seal.write_json(RunDir(run).quality("pw-qa-exact-v1", baseline.leg), QualityEval(
            eval_id="pw-qa-exact-v1", leg=baseline.leg, n=40, score=base, items_sha256=digest))
        seal.write_json(RunDir(run).quality("pw-qa-exact-v1", leg.leg), QualityEval(
            eval_id="pw-qa-exact-v1", leg=leg.leg, n=40, score=score, baseline_score=base, baseline_leg=baseline.leg,
            items_sha256=digest))
        return "pw-qa-exact-v1"


def _answered_patch_claim(run: Path, leg: str) -> bool:
    """Whether a patch claim whose candidate is ``leg`` already has the auditor's verdict."""
    paths = RunDir(run)
    for claim in sorted((paths.root / "claims").glob("*-patch.json")):
        try:
            candidate = loads(claim.read_bytes(), what="claim").get("legs", {}).get("candidate")
        except (OSError, ValueError, AttributeError):
            continue
        if candidate == leg and (paths.root / "verdicts" / claim.name).is_file():
            return True
    return False


def _rep_start(paths: RunDir, k: int, position: int, n_legs: int) -> float:
    """When simulated rep ``k`` of the leg at ``position`` starts: inside the run's clock (after
    run.json's started_at), interleaved A B A B, a function of the plan only (resume reproduces it)."""
    try:
        stamp = loads(paths.manifest.read_bytes(), what="run.json").get("started_at")
        t0 = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except (OSError, ValueError, TypeError, AttributeError):
        t0 = 1_700_000_000.0
    return t0 + 10.0 + 10.0 * (k * n_legs + position)


BASE_TTFT_MS = 80.0
"""A simulated rep's median TTFT before the knobs' ``ttft`` effects multiply it."""
REQUESTS_PER_REP = 16
"""Requests per simulated rep (their TTFTs spread +-5% around the median: ``synth.make_rep``)."""


def _at(effect: float | dict, value: Any) -> float:
    return effect.get(value, 1.0) if isinstance(effect, dict) else effect


SYNTHETIC_RIG = {"dtype": "float32", "device": {"device": "synthetic"},
                 "roofline": {"8x576": {"bytes_moved": 1_000_000, "bandwidth_gb_s": 10.0, "floor_ms": 0.1}}}
"""The simulated rig's memory roofline: 1 MB per call at 10 GB/s, a 0.1 ms floor (the fastest simulated call
is 0.5 ms), as the op bench's ``rig.json`` states it."""

SYNTHETIC_ITERS, SYNTHETIC_WARMUP = 30, 3
"""Calls per simulated trial (as many as the lab's real op bench times) and calls discarded before them."""


def synthetic_rig(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``rig.json`` as the harness writes it for ``rows``: one figure a trial by the parent's clock, each the
    per-call time of ``SYNTHETIC_ITERS`` calls, and a ``duration_s`` that is the time of the calls the rows
    stand for (warm-up and timed, rounded up to the millisecond), nothing added: the auditor holds the rows'
    calls to it."""
    calls_ms = sum(t * (SYNTHETIC_ITERS + SYNTHETIC_WARMUP) for r in rows for t in r["times_ms"])
    return {**SYNTHETIC_RIG, "trials": len({r["trial"] for r in rows}), "seeds": sorted({r["seed"] for r in rows}),
            "iters": SYNTHETIC_ITERS, "warmup": SYNTHETIC_WARMUP, "timing_method": "parent_clock",
            "timing": {"clock": "parent"}, "duration_s": math.ceil(calls_ms) / 1e3}


def _row(op: str, backend: str, ms: float, ref: bool, seed: int, trial: int, err: float) -> dict[str, Any]:
    return {"op": op, "backend": backend, "shape": [8, 576], "trial": trial, "dtype": "float32",
            "times_ms": [ms * (1.0, 1.01, 0.99)[trial % 3]], "warmup_discarded": SYNTHETIC_WARMUP,
            "fresh_inputs": True, "correct": err < 1e-4, "max_abs_err": err, "max_rel_err": err, "dispatch": "eager",
            "seed": seed, "is_reference": ref, "impl_sha256": backend, "measured": True}


def _write_torn(path: Path, line: dict[str, Any]) -> None:
    """Write the first half of ``line`` (no newline) and SIGKILL: a rep torn mid-write."""
    data = json.dumps(line).encode()
    _write_and_die(path, data[: len(data) // 2])


def _write_unsealed(path: Path, line: dict[str, Any]) -> None:
    """Write all of ``line`` and SIGKILL before its seal entry: the seal chain appends the line, then
    the entry, so a kill in between leaves a complete line nobody sealed."""
    _write_and_die(path, jsonl_text(line).encode())


def _write_and_die(path: Path, data: bytes) -> None:
    with safe_write.open_append(path) as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    kill_now()


class FailingLab(SyntheticLab):
    def measure(self, run, legs, reps):
        raise LabError("server did not come up: port in use")
