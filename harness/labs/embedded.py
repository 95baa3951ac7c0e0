"""The embedded lab: ``ServerLab`` over the embedded target (SmolLM2-135M-Instruct on torch, sandboxed per
leg), every leg's server up at once; the one target with the kernel path (profile, op bench, op overrides).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfwarden.formats import seal
from perfwarden.formats.records import RunDir
from perfwarden.harness.labs.lab import LabError, LabSettings, LegPlan, RepCallback
from perfwarden.harness.labs.server_lab import ServerLab
from perfwarden.harness.opbench import OpBenchError, alternatives_for, run_opbench_for_lab
from perfwarden.harness.opbench.backend import Device
from perfwarden.harness.ops import SUPPORTED_OPS
from perfwarden.harness.profiling import profile_model
from perfwarden.harness.target_config import EmbeddedConfig, TargetConfig
from perfwarden.harness.targets import EmbeddedTarget, ServerTarget, prepare_weights

# The untuned starting point of a run: every knob at the config model's default (one sequence at a
# time, no batching window, no tricks). Every knob is passed explicitly so server_info shows it set.
EMBEDDED_BASE: dict[str, Any] = EmbeddedConfig.defaults()


class EmbeddedLab(ServerLab):
    """Lab protocol over the embedded target (SmolLM2-135M-Instruct on torch, sandboxed per leg)."""

    config_model = EmbeddedConfig
    model_name = "SmolLM2-135M-Instruct"

    @classmethod
    def from_settings(cls, settings: LabSettings, on_rep: RepCallback | None = None) -> "EmbeddedLab":
        return cls(**cls.settings_kwargs(settings), on_rep=on_rep)._built_from(settings)

    def make_target(self, leg_dir: Path, config: TargetConfig) -> ServerTarget:
        return EmbeddedTarget(leg_dir, EmbeddedConfig.of(config).model_dump(), start_timeout_s=self.start_timeout_s)

    def prepare(self, legs: list[LegPlan]) -> None:
        for plan in legs:
            prepare_weights(plan.config.model_dump())

    def overridable_ops(self) -> list[str]:
        return list(SUPPORTED_OPS)

    def alternatives(self, op: str) -> list[str]:
        return alternatives_for(op, device=self._device())

    def profile(self, run: Path, config: TargetConfig) -> Path:
        seal.begin(run)
        try:
            return profile_model(RunDir(run).profile, EmbeddedConfig.of(config), max_tokens=self.load.max_tokens)
        except Exception as exc:  # the target's failure, not ours: recorded by the graph
            raise LabError(f"profiling failed: {type(exc).__name__}: {exc}") from exc

    def opbench(self, run: Path, op: str, candidates: list[str], shapes: list[list[int]]) -> Path:
        seal.begin(run)
        try:
            return run_opbench_for_lab(Path(run), op, candidates, shapes, device=self._device())
        except OpBenchError as exc:
            raise LabError(f"op bench of {op!r} failed: {exc}") from exc

    def quality_config(self, config: TargetConfig) -> EmbeddedConfig:
        """The eval servers batch (max_batch_size 8): scheduling knobs do not change greedy outputs
        (batched == unbatched is tested in tests/test_embedded_server.py), and unbatched the eval would
        cost minutes per leg."""
        own = EmbeddedConfig.of(config)
        return own.model_copy(update={"max_batch_size": max(8, own.max_batch_size), "batch_wait_ms": 5.0})

    def base_config(self) -> EmbeddedConfig:
        return EmbeddedConfig.of(self.base_overrides)

    def _device(self) -> Device:
        """The device the target serves on: the op bench runs there too."""
        return self.base_config().device
