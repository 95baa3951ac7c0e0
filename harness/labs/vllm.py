"""The vLLM lab: ``ServerLab`` over vLLM's OpenAI-compatible server from vLLM's own environment.

What differs from the embedded lab, and why:

- every rep has a second witness: vLLM's own ``/metrics`` counters (requests finished, tokens
  generated and prefilled, TTFT / inter-token / end-to-end histograms) are sampled just before and just
  after the rep and appended, sealed, to ``legs/<leg>/engine_metrics.jsonl`` (``formats/vllm_metrics.py``);
  the auditor holds each bench line against the difference;
- each server answers one streamed request of the reps' own kind (endpoint, sampling, output budget)
  before its first rep, outside every rep's counter window: a server's first request of a kind pays
  one-time work before the engine stamps its arrival (vLLM's own ``bench serve`` sends such a test
  prompt first), which would otherwise land in the first rep's client times and not in the engine's;
- no kernel path: perfwarden has no profiler or op overrides inside vLLM (``--no-kernels``);
- on the CPU build every leg's server is up at once like the embedded target's (each holds a fixed
  1 GiB KV cache); with ``device=cuda`` one server at a time, as SGLang's (each takes most of the GPU).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import httpx

from perfwarden.formats import seal, vllm_metrics
from perfwarden.formats.records import RunDir
from perfwarden.harness.labs.lab import LegPlan
from perfwarden.harness.labs.server_lab import EngineLab
from perfwarden.harness.loadgen_client import auth_headers, completions_url, encode_payload, request_payload
from perfwarden.harness.target_config import VLLMConfig
from perfwarden.harness.targets import ServerTarget
from perfwarden.harness.vllm_target import VllmTarget, sample_metrics

METRICS_TIMEOUT_S = 10.0
"""Bound of one ``/metrics`` read (the server is idle when it is sampled)."""
WARMUP_PROMPT = "Warm-up request before the first measured rep; its answer is read and discarded."
"""Not one of the workload's prompts: a prefix or response cache it fills serves no measured request."""


def witness_path(paths: RunDir, leg: str) -> Path:
    return paths.leg_dir(leg) / vllm_metrics.WITNESS_FILE


class VLLMLab(EngineLab):
    """Lab protocol over vLLM (its CPU build here; its CUDA build on a GPU host)."""

    config_model = VLLMConfig
    engine_name = "vLLM"
    target_type = VllmTarget

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.servers_at_once = self.base_config().device == "cpu"
        self._warmed: weakref.WeakSet[ServerTarget] = weakref.WeakSet()  # a new server process is a new object

    def base_config(self) -> VLLMConfig:
        return VLLMConfig.of(self.base_overrides)

    def _warm_up(self, target: ServerTarget) -> None:
        """One streamed request of the reps' own kind, read to its end, once per server process. Any
        failure is left to the rep: a server that cannot answer fails its rep, which records why."""
        if target in self._warmed:
            return
        self._warmed.add(target)
        body = encode_payload(request_payload(WARMUP_PROMPT, self.load))
        try:
            with httpx.Client(timeout=self.load.request_timeout_s) as client:
                with client.stream("POST", completions_url(target.base_url, self.load.endpoint), content=body,
                                   headers={"content-type": "application/json", **auth_headers(self.load)}) as response:
                    for _ in response.iter_bytes():
                        pass
        except httpx.HTTPError:
            pass

    def _rep(self, paths: RunDir, plan: LegPlan, k: int, target: ServerTarget, pids: list[int]) -> str | None:
        """The rep between two samples of the engine's counters; the record is appended only for a rep
        that completed (a failed rep has no line to witness)."""
        # vLLM's workers busy-poll for 1 s after their last request: the harness waits for every server of
        # the step to idle before each contention sample (harness.contention.wait_until_idle).
        self._warm_up(target)
        try:
            with httpx.Client(timeout=METRICS_TIMEOUT_S) as client:
                before, before_at = sample_metrics(client, target.base_url)
                failure = super()._rep(paths, plan, k, target, pids)
                if failure is not None:
                    return failure
                after, after_at = sample_metrics(client, target.base_url)
        except (httpx.HTTPError, vllm_metrics.MetricsError) as exc:
            why = f"the engine's /metrics could not be sampled around rep {k}: {type(exc).__name__}: {exc}"
            self._fail_leg(paths, plan, why)
            self.on_rep(plan.leg, k, "failed")
            return f"failed: {why}"
        info = target.server_info or {}
        record = vllm_metrics.WitnessRecord(
            schema_version=vllm_metrics.SCHEMA_VERSION, leg=plan.leg, rep=k,
            source=f"vllm {info.get('vllm_version') or 'unknown'} /metrics", before=before, after=after,
            before_at=before_at, after_at=after_at)
        seal.append_jsonl(witness_path(paths, plan.leg), vllm_metrics.record_dict(record), paths.root)
        return None
