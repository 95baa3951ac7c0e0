"""A run's lab from its settings, and what a cluster node is told about it (design §5, "Scale-out").

The labs (harness/labs/) read a ``LabSettings``, never the run's ``RunSettings``: ``lab_settings`` is the one
place that copies what a lab reads out of a run's settings. This module stays in the orchestrator because it
reads ``RunSettings`` and builds the simulated lab (orchestrator/simlab.py).

A lab on the head holds live things (the terminal's progress callback, a console on a tty, open
clients): none of them can, or should, travel. A node gets a :data:`LabSpec` instead, validated like any
record, and builds its own lab with :func:`build_lab`, its progress callback sending events back to the
head. A lab that cannot be described exactly (a subclass, a response surface given as a function) is
refused with ``LabError``: a node never measures a different lab than the head would have.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from perfwarden.harness.labs.lab import Lab, LabError, LabSettings, RepCallback, TargetLabSpec
from perfwarden.harness.target_config import TargetConfig
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab, SyntheticLabSpec

LabSpec = Annotated[Union[SyntheticLabSpec, TargetLabSpec], Field(discriminator="kind")]


def lab_settings(settings: RunSettings) -> LabSettings:
    """What a real target's lab reads of a run's settings (``settings.target`` is not ``synthetic``)."""
    if settings.target == "synthetic":
        raise ValueError("the synthetic target's lab is built from its own parameters, not lab settings")
    return LabSettings(target=settings.target, model=settings.model, qps=settings.qps,
                       rep_seconds=settings.rep_seconds, max_tokens=settings.max_tokens, scenario=settings.scenario,
                       offline_samples=settings.offline_samples, seed=settings.seed,
                       base_config=dict(settings.base_config))


def describe(lab: Lab) -> SyntheticLabSpec | TargetLabSpec:
    """The lab's spec, or ``LabError`` when it has none (it was not built from data alone)."""
    spec = getattr(lab, "describe", None)
    if spec is None:
        raise LabError(f"a {type(lab).__name__} cannot be described to a cluster node")
    out = spec()
    if not isinstance(out, (SyntheticLabSpec, TargetLabSpec)):
        raise LabError(f"{type(lab).__name__}.describe returned {type(out).__name__}, not a lab spec")
    return out


def lab_for(settings: RunSettings, on_rep: RepCallback | None = None, engine_python: str | None = None) -> Lab:
    """The target's lab from a run's settings; ``engine_python``: the interpreter of the sglang or vllm
    target's own environment (checked by the CLI, never taken from the run)."""
    if settings.target == "synthetic":
        return SyntheticLab(on_rep=on_rep)
    return target_lab(lab_settings(settings), on_rep=on_rep, engine_python=engine_python)


def target_lab(settings: LabSettings, on_rep: RepCallback | None = None, engine_python: str | None = None) -> Lab:
    """A real target's lab from its lab settings."""
    # Each lab module is imported only for its target: torch, httpx and the engines' clients are heavy.
    if settings.target == "sglang":
        from perfwarden.harness.labs.sglang import SGLangLab

        return SGLangLab.from_settings(settings, python=engine_python, on_rep=on_rep)
    if settings.target == "vllm":
        from perfwarden.harness.labs.vllm import VLLMLab

        return VLLMLab.from_settings(settings, python=engine_python, on_rep=on_rep)
    from perfwarden.harness.labs.embedded import EmbeddedLab

    return EmbeddedLab.from_settings(settings, on_rep=on_rep)


def build_lab(spec: SyntheticLabSpec | TargetLabSpec, on_rep: RepCallback | None = None) -> Lab:
    """The lab a spec describes, reporting its reps to ``on_rep``."""
    if isinstance(spec, SyntheticLabSpec):
        return SyntheticLab.from_spec(spec, on_rep=on_rep)
    return target_lab(spec.settings, on_rep=on_rep, engine_python=spec.engine_python)


def run_base_config(lab: Lab, settings: RunSettings) -> TargetConfig:
    """The true baseline a run starts from: the lab's, with the knobs the run fixed (``--set``, kept in
    its ``RunSettings.base_config``) over it, as the target's config model. One place for the graph and
    the report a resume rewrites."""
    return lab.config_model.of({**lab.base_config().model_dump(), **settings.base_config})
