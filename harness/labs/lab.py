"""The lab: what the producers can ask to be measured, behind one interface, and what a lab is built from.

``EmbeddedLab`` (harness/labs/embedded.py) runs the real embedded CPU target with mlcommons-loadgen,
``SGLangLab`` and ``VLLMLab`` the engines' servers (all ``ServerLab``, harness/labs/server_lab.py). A lab
reads only its ``LabSettings``, which the orchestrator builds from a run's settings
(orchestrator/lab_spec.py ``lab_settings``). The graph's unit tests use the synthetic lab
(orchestrator/simlab.py) that writes raw evidence with known effects, so that routing can be tested in
seconds; the real lab keeps its own end-to-end test.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator

from perfwarden.formats import safe_write
from perfwarden.formats.records import LegRole, Overlay, RunDir
from perfwarden.harness.target_config import TargetConfig


class LabError(RuntimeError):
    """The target misbehaved (server did not start, crashed, timed out): the target's fault, recorded
    against the proposal; the run goes on."""


RepCallback = Callable[[str, int, str], None]
"""``(leg, rep, status)``: a lab's report of one finished rep."""

PromptSet = Literal["varied", "repeat", "same_length"]
"""A leg's prompts. varied: the hand-written mixed set; repeat: one prompt repeated (TEST04); same_length:
distinct prompts of that one prompt's length (TEST04's control: only the repetition differs)."""


class LegPlan(BaseModel):
    """A leg to measure: name, role and the full config its server runs with."""

    model_config = ConfigDict(extra="forbid")

    leg: str
    role: LegRole
    config: SerializeAsAny[TargetConfig]
    """Every knob the leg's server runs with, as its target's config model (``config_model.of``): validated
    once, where the leg is planned, and read as attributes by the lab (a dump is the full knob set)."""
    overlay: Overlay = Field(default_factory=Overlay)
    """What the leg changes relative to the target's defaults, as its ``leg.json`` records it."""
    prompts: PromptSet = "varied"
    parent: str | None = None
    purpose: str = ""

    @field_validator("config", mode="before")
    @classmethod
    def _a_target_model(cls, value: object) -> object:
        """A target's own model, never a plain mapping (pydantic would read it as the bare base, with no knob)."""
        if not isinstance(value, TargetConfig) or type(value) is TargetConfig:
            raise ValueError("a leg's config is its target's config model (TargetConfig.of), not "
                             f"{type(value).__name__}")
        return value

    @field_validator("leg", "parent")
    @classmethod
    def _one_component(cls, value: str | None) -> str | None:
        """A leg's name is its folder under legs/: one safe path component, never ``../x`` or ``a/b``."""
        if value is None:
            return None
        try:
            return safe_write.check_name(value, "leg name")
        except OSError as exc:
            raise ValueError(str(exc)) from None

    @classmethod
    def from_data(cls, data: Mapping[str, Any], model: type[TargetConfig]) -> LegPlan:
        """A plan sent as plain data (``model_dump()``: a cluster node's step), its config read as ``model`` (a
        plan without one is refused, never filled with the model's defaults)."""
        return cls.model_validate({**data, "config": model.of(data["config"])} if "config" in data else data)


class LabSettings(BaseModel):
    """What a real target's lab reads of a run's settings, and nothing else (the orchestrator's
    ``RunSettings`` holds the bounds; ``lab_settings`` there copies these fields from it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    target: Literal["embedded", "sglang", "vllm"] = "embedded"
    """Which lab: the embedded target, or an engine's server."""
    model: str | None = None
    """Weights directory every leg serves (sglang and vllm; the embedded target serves SmolLM2)."""
    qps: float = Field(2.0, gt=0)
    """Target QPS of the Server scenario."""
    rep_seconds: float = Field(4.0, gt=0)
    """LoadGen min_duration per rep (Server scenario)."""
    max_tokens: int = Field(16, ge=1)
    """Output tokens per request, and per parity-dump answer."""
    scenario: Literal["server", "offline"] = "offline"
    """LoadGen scenario."""
    offline_samples: int = Field(8, ge=1)
    """Samples in one Offline rep (all issued at once)."""
    seed: int = Field(0, ge=0)
    """Seed of prompt sampling and load schedules."""
    base_config: dict[str, Any] = Field(default_factory=dict)
    """Knobs of the true baseline the run fixed (``--set``); the device the target serves on is one."""


class TargetLabSpec(BaseModel):
    """A real target's lab, by the lab settings it is built from (``from_settings``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["target"] = "target"
    settings: LabSettings
    engine_python: str | None = None
    """The sglang or vllm environment's interpreter the person running perfwarden named; it must be the
    same path on every node."""


def check_leg_writes(run: Path, legs: list[str]) -> None:
    """Before a lab writes any leg: every leg name is one path component and nothing the lab will write
    (run.json, the seal chain, each leg's files and folders) is a link, FIFO or folder where a file
    belongs (``RefusedWrite``, exit 3)."""
    paths = RunDir(run)
    for leg in legs:
        safe_write.check_name(leg, "leg name")
    files = [paths.manifest, paths.evidence]
    for leg in legs:
        files += [paths.leg_spec(leg), paths.server_info(leg), paths.server_log(leg), paths.bench_runs(leg),
                  paths.outputs(leg)]
    safe_write.preflight(run, files=files, dirs=[paths.leg_dir(leg) / "loadgen" for leg in legs])


class Lab(Protocol):
    @property
    def config_model(self) -> type[TargetConfig]:
        """The target's knobs: defaults, allowed values, lever class, losslessness."""
    model_name: str
    """The model served, as run.json records it (a name, or the weights path)."""

    def measure(self, run: Path, legs: list[LegPlan], reps: int) -> dict[str, str]:
        """Measure ``reps`` reps of every leg, interleaved (A B, B A, … in a server lab), skipping reps
        already written. Returns leg -> "ok" | "failed: <why>"."""

    def profile(self, run: Path, config: TargetConfig) -> Path:
        """Profile the target under a short load; write profile/profile.jsonl."""

    def opbench(self, run: Path, op: str, candidates: list[str], shapes: list[list[int]]) -> Path:
        """Benchmark candidates of ``op`` against the reference; write opbench/<op>/opbench.jsonl."""

    def quality(self, run: Path, leg: LegPlan, baseline: LegPlan) -> str:
        """Run the registered quality eval on ``leg`` (and ``baseline``); return the eval id."""

    def overridable_ops(self) -> list[str]:
        """Ops the target can override (the kernel overlay)."""

    def alternatives(self, op: str) -> list[str]:
        """Implementation specs (``path.py:function``) available for ``op``."""

    def base_config(self) -> TargetConfig:
        """The target's true-baseline knobs (its config model's defaults), as that model."""
