"""The real labs: a serving target started as one server per leg, measured by mlcommons-loadgen.

``ServerLab`` is the one lab over any ``ServerTarget``: a ``measure`` call writes each leg's spec,
server_info (what the server reported), server log and parity dump, then runs the reps interleaved,
the order alternating each round (A B, B A, …: ``round_order``), so slow drift of the machine cannot
masquerade as a delta nor favour the leg that runs second. Reps already on disk are
skipped (resume never duplicates one). Its instances: ``EmbeddedLab`` (harness/labs/embedded.py:
SmolLM2-135M on torch, every leg's server up at once), and over ``EngineLab`` ``SGLangLab``
(harness/labs/sglang.py: one server on the GPU at a time, started for each rep) and ``VLLMLab``
(harness/labs/vllm.py).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Self

import httpx

from perfwarden.formats import safe_write, seal
from perfwarden.formats.records import LegSpec, RunDir
from perfwarden.harness.bench_writer import rep_exists
from perfwarden.harness.labs.lab import LabError, LabSettings, LegPlan, RepCallback, TargetLabSpec, check_leg_writes
from perfwarden.harness.loadgen_client import LoadSettings, measure_rep, request_params
from perfwarden.harness.prompts import Prompt, parity_prompts, random_word_prompts, varied_prompts
from perfwarden.harness.quality import run_quality_pair
from perfwarden.harness.target_config import TargetConfig
from perfwarden.harness.targets import ServerTarget, TargetError


def round_order(legs: list[LegPlan], k: int) -> list[LegPlan]:
    """The order the legs run in round ``k``: as planned in even rounds, reversed in odd ones (A B, B A, A B,
    ...). With a fixed order the baseline always ran first, right after the other servers' requests, and
    slow drift favoured whichever leg ran second by half a slot; alternating balances both over the rounds."""
    return list(legs) if k % 2 == 0 else list(reversed(legs))


class ServerLab:
    """Lab protocol over a target that serves each leg from its own server process.

    A subclass says which config model it takes, how to start one leg's server (``make_target``) and
    whether several servers may run at once; everything written to the run directory is written here."""

    config_model: ClassVar[type[TargetConfig]]
    model_name: str = ""
    """What run.json records as the model served."""
    servers_at_once: bool = True
    """True: every leg's server is up for the whole measurement (a CPU target, small model). False: one
    server at a time (a GPU holds one SGLang server's memory pool), started for each rep of its leg and
    stopped after it, so the reps stay interleaved and every rep runs on a server started the same way.
    A class's default; a lab whose device is a knob (vLLM) sets it per instance."""
    kernels: ClassVar[bool] = True
    """Whether the target has the kernel path (profile, op bench, op overrides)."""

    def __init__(self, *, qps: float = 2.0, rep_seconds: float = 4.0, max_tokens: int = 16,
                 scenario: str = "Offline", offline_samples: int = 8, seed: int = 0, parity_tokens: int = 16,
                 start_timeout_s: float = 180.0, on_rep: RepCallback | None = None,
                 base_overrides: dict[str, Any] | None = None) -> None:
        self.base_overrides = dict(base_overrides or {})
        """Knobs of the true baseline the run fixed (``--set``): the device the op bench runs on follows them."""
        if scenario == "Offline":  # one query of exactly ``offline_samples`` prompts, issued at once
            self.load = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.1,
                                     min_query_count=offline_samples, max_duration_s=300.0, max_tokens=max_tokens,
                                     seed=seed, extra_body={"ignore_eos": True}, request_timeout_s=240.0,
                                     sample_concatenate_permutation=False)
        else:
            self.load = LoadSettings(scenario="Server", target_qps=qps, min_duration_s=rep_seconds,
                                     max_duration_s=max(60.0, rep_seconds * 10), max_tokens=max_tokens, seed=seed,
                                     extra_body={"ignore_eos": True}, request_timeout_s=60.0)
        self.parity_tokens = parity_tokens
        self.start_timeout_s = start_timeout_s
        self.on_rep: RepCallback = on_rep or (lambda leg, rep, status: None)
        self.spec: TargetLabSpec | None = None
        """The lab settings (and engine interpreter) this lab was built from, when it was (``from_settings``)."""

    def describe(self) -> TargetLabSpec:
        """This lab as plain data for a cluster node (orchestrator/lab_spec.py): only a lab built from its
        settings has one (a lab built from constructor arguments could not be rebuilt the same on a node)."""
        if self.spec is None:
            raise LabError(f"this {type(self).__name__} was not built from a run's settings: it cannot be "
                           "described to a cluster node")
        return self.spec

    def _built_from(self, settings: LabSettings, python: str | None = None) -> Self:
        self.spec = TargetLabSpec(settings=settings, engine_python=python)
        return self

    @staticmethod
    def settings_kwargs(settings: LabSettings) -> dict[str, Any]:
        """The lab's constructor arguments from its settings."""
        return dict(qps=settings.qps, rep_seconds=settings.rep_seconds, max_tokens=settings.max_tokens,
                    scenario="Offline" if settings.scenario == "offline" else "Server",
                    offline_samples=settings.offline_samples, seed=settings.seed, parity_tokens=settings.max_tokens,
                    base_overrides=dict(settings.base_config))

    # ------------------------------------------------------------------ what a target says
    def make_target(self, leg_dir: Path, config: TargetConfig) -> ServerTarget:
        """The (not yet started) server of one leg, started with every knob of ``config``."""
        raise NotImplementedError

    def base_config(self) -> TargetConfig:
        return self.config_model.of(self.base_overrides)

    def overridable_ops(self) -> list[str]:
        return []

    def alternatives(self, op: str) -> list[str]:
        return []

    def profile(self, run: Path, config: TargetConfig) -> Path:
        raise LabError(f"target {self.config_model.target!r} has no profiler in perfwarden (run with --no-kernels)")

    def opbench(self, run: Path, op: str, candidates: list[str], shapes: list[list[int]]) -> Path:
        raise LabError(f"target {self.config_model.target!r} has no op overrides to benchmark (run with --no-kernels)")

    def quality(self, run: Path, leg: LegPlan, baseline: LegPlan) -> str:
        """The registered QA eval on both legs, each on its own server started with the leg's config,
        through the same OpenAI-compatible endpoint the reps use."""
        seal.begin(run)
        try:
            return run_quality_pair(Path(run), leg.leg, self.quality_config(leg.config), baseline.leg,
                                    self.quality_config(baseline.config), concurrency=8,
                                    make_target=self.make_target)
        except Exception as exc:
            raise LabError(f"quality eval failed: {type(exc).__name__}: {exc}") from exc

    def quality_config(self, config: TargetConfig) -> TargetConfig:
        """The config a leg's quality-eval server runs with (the leg's own by default)."""
        return config

    def prepare(self, legs: list[LegPlan]) -> None:
        """One-off work the legs' servers share, done here in the calling thread before any server starts
        (the embedded target converts its weights on a first run: never from several threads at once)."""

    # ------------------------------------------------------------------ measuring
    def measure(self, run: Path, legs: list[LegPlan], reps: int) -> dict[str, str]:
        check_leg_writes(run, [plan.leg for plan in legs])
        seal.begin(run)  # every file below is sealed as it is written (resume continues the chain)
        paths = RunDir(run)
        self.prepare(legs)
        if self.servers_at_once:
            return self._measure_together(paths, legs, reps)
        return self._measure_one_at_a_time(paths, legs, reps)

    def _measure_together(self, paths: RunDir, legs: list[LegPlan], reps: int) -> dict[str, str]:
        targets: dict[str, ServerTarget] = {}
        status: dict[str, str] = {}
        try:
            # Servers load their models concurrently (start-up is mostly I/O and one-off work); the
            # parity dumps then run one server at a time: two servers computing at once on 2 cores
            # oversubscribe the threads and run several times slower than either alone.
            with ThreadPoolExecutor(max_workers=len(legs)) as pool:
                started = list(pool.map(lambda plan: (plan.leg, self._start(paths, plan, targets)), legs))
            status.update(started)
            for plan in legs:
                target = targets.get(plan.leg)
                if target is not None and not seal.is_current(paths.outputs(plan.leg)):
                    self._parity_dump(paths, plan.leg, target.base_url)
            pids = [pid for t in targets.values() for pid in t.pids()]  # every process of each (sandboxed) server
            for k in range(reps):
                for plan in round_order(legs, k):
                    target = targets.get(plan.leg)
                    if target is None or rep_exists(paths.bench_runs(plan.leg), plan.leg, k):
                        continue
                    failure = self._rep(paths, plan, k, target, pids)
                    if failure is not None:
                        status[plan.leg] = failure
                        targets.pop(plan.leg).stop()
        finally:
            for target in targets.values():
                target.stop()
        return status

    def _measure_one_at_a_time(self, paths: RunDir, legs: list[LegPlan], reps: int) -> dict[str, str]:
        """A B, B A, …, each rep on its leg's server started for it and stopped after it: only one server
        holds the device at any time. The parity dump is taken from the leg's first server."""
        status = {plan.leg: "ok" for plan in legs}
        for plan in legs:
            self._write_spec(paths, plan)
        for k in range(reps):
            for plan in round_order(legs, k):
                parity_due = not seal.is_current(paths.outputs(plan.leg))
                if status[plan.leg] != "ok" or (rep_exists(paths.bench_runs(plan.leg), plan.leg, k) and not parity_due):
                    continue
                targets: dict[str, ServerTarget] = {}
                status[plan.leg] = self._launch(paths, plan, targets)
                target = targets.get(plan.leg)
                if target is None:
                    self.on_rep(plan.leg, k, "failed")
                    continue
                try:
                    if parity_due:
                        self._parity_dump(paths, plan.leg, target.base_url)
                    if not rep_exists(paths.bench_runs(plan.leg), plan.leg, k):
                        failure = self._rep(paths, plan, k, target, target.pids())
                        if failure is not None:
                            status[plan.leg] = failure
                finally:
                    target.stop()
        return status

    def _rep(self, paths: RunDir, plan: LegPlan, k: int, target: ServerTarget, pids: list[int]) -> str | None:
        """One timed rep under LoadGen; the leg's failure (recorded in its spec) when the server failed."""
        try:
            target.ensure_running()
            measure_rep(paths, plan.leg, k, target.base_url, self._prompts(plan), self.load,
                        dataset_name=f"perfwarden-{plan.prompts}", exclude_pids=pids)
            target.ensure_running()
            self.on_rep(plan.leg, k, "ok")
            return None
        except TargetError as exc:
            self._fail_leg(paths, plan, str(exc))
            self.on_rep(plan.leg, k, "failed")
            return f"failed: {exc}"

    # ------------------------------------------------------------------ helpers
    def _prompts(self, plan: LegPlan) -> list[Prompt]:
        if plan.prompts == "varied":
            return varied_prompts()
        # TEST04 pair: distinct random-word prompts of one length, and the first of them repeated, so
        # the two legs differ only in repetition (not in prompt lengths, padding or prefill).
        same = random_word_prompts(16, input_len=24, seed=404)
        return same[:1] if plan.prompts == "repeat" else same

    def workload(self, plan: LegPlan) -> dict[str, Any]:
        """The leg's load, under the bench line's key names (recorded in leg.json)."""
        return {"scenario": self.load.scenario, "dataset_name": f"perfwarden-{plan.prompts}",
                "request_params": request_params(self.load), "loadgen": {"settings": self.load.summary()}}

    def _start(self, paths: RunDir, plan: LegPlan, targets: dict[str, ServerTarget]) -> str:
        self._write_spec(paths, plan)
        return self._launch(paths, plan, targets)

    def _write_spec(self, paths: RunDir, plan: LegPlan) -> None:
        safe_write.make_dirs(paths.leg_dir(plan.leg), paths.root)
        spec = LegSpec(leg=plan.leg, role=plan.role, overlay=plan.overlay, purpose=plan.purpose, parent_leg=plan.parent,
                       workload=self.workload(plan))
        seal.write_json(paths.leg_spec(plan.leg), spec, paths.root)

    def _launch(self, paths: RunDir, plan: LegPlan, targets: dict[str, ServerTarget]) -> str:
        target = self.make_target(paths.leg_dir(plan.leg), plan.config)
        try:
            target.start()
        except TargetError as exc:
            self._fail_leg(paths, plan, f"server did not start: {exc}")
            return f"failed: {exc}"
        targets[plan.leg] = target
        return "ok"

    def _fail_leg(self, paths: RunDir, plan: LegPlan, why: str) -> None:
        spec = LegSpec(leg=plan.leg, role=plan.role, overlay=plan.overlay, purpose=plan.purpose, parent_leg=plan.parent,
                       status="failed", failure=why[:500], workload=self.workload(plan))
        # the chain keeps "failed" even if this file is edited
        seal.write_json(paths.leg_spec(plan.leg), spec, paths.root)

    def _parity_dump(self, paths: RunDir, leg: str, base_url: str) -> None:
        """Greedy outputs for the fixed parity prompts (outputs.jsonl), written whole or not at all."""
        def one(prompt: Prompt) -> dict[str, Any]:
            body = {"prompt": prompt.text, "max_tokens": self.parity_tokens, "temperature": 0, "seed": 0}
            try:
                with httpx.Client(timeout=240.0) as client:
                    resp = client.post(f"{base_url}/v1/completions", json=body)
                resp.raise_for_status()
                choice = resp.json()["choices"][0]
                return {"prompt_id": prompt.id, "text": choice.get("text", ""), "token_ids": choice.get("token_ids"),
                        "finish_reason": choice.get("finish_reason"), "seed": 0, "prompt": prompt.text}
            except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                return {"prompt_id": prompt.id, "text": "", "finish_reason": "error", "seed": 0,
                        "error": f"{type(exc).__name__}: {exc}"}

        # Sent concurrently so batching servers batch them; greedy outputs do not depend on batching.
        with ThreadPoolExecutor(max_workers=4) as pool:
            rows = list(pool.map(one, parity_prompts()))
        safe_write.write_text(paths.outputs(leg), "".join(
            json.dumps(row, allow_nan=False, separators=(",", ":")) + "\n" for row in rows), paths.root)
        seal.seal_file(paths.outputs(leg))


class EngineLab(ServerLab):
    """A ``ServerLab`` over an engine run from its own environment (SGLang, vLLM): one weights directory
    every leg serves and that environment's interpreter (checked by the target's ``find_*_python`` before
    the lab exists). Engines have no kernel path in perfwarden."""

    kernels = False
    engine_name: ClassVar[str]
    """How messages name the engine (``SGLang``, ``vLLM``)."""
    target_type: ClassVar[type[ServerTarget]]
    """The ``ServerTarget`` that starts one of the engine's servers from its environment."""

    def __init__(self, *, model_path: str, python: str, start_timeout_s: float = 900.0, **kwargs: Any) -> None:
        super().__init__(start_timeout_s=start_timeout_s, **kwargs)
        self.model_path = model_path
        """Weights directory every leg serves."""
        self.python = python
        """The engine environment's interpreter."""
        self.model_name = model_path

    @classmethod
    def from_settings(cls, settings: LabSettings, python: str | None = None,
                      on_rep: RepCallback | None = None) -> Self:
        """``python``: the interpreter the person running perfwarden named (a run's settings never name one)."""
        if not settings.model or not python:
            raise ValueError(f"a run on {cls.engine_name} needs settings.model and {cls.engine_name}'s interpreter")
        return cls(model_path=settings.model, python=python, **cls.settings_kwargs(settings),
                   on_rep=on_rep)._built_from(settings, python)

    def make_target(self, leg_dir: Path, config: TargetConfig) -> ServerTarget:
        return self.target_type(leg_dir, {**config.model_dump(), "model_path": self.model_path}, python=self.python,
                                start_timeout_s=self.start_timeout_s)
