"""What a cluster node is told about the lab: plain data it rebuilds the lab from (design §5, "Scale-out").

A lab on the head holds live things (the terminal's progress callback, a console on a tty, open
clients): none of them can, or should, travel. A node gets a :data:`LabSpec` instead, validated like any
record, and builds its own lab with :func:`build_lab`, its progress callback sending events back to the
head. A lab that cannot be described exactly (a subclass, a response surface given as a function) is
refused with ``LabError``: a node never measures a different lab than the head would have.
"""

from __future__ import annotations

from typing import Annotated, Callable, Union

from pydantic import Field

from perfwarden.orchestrator.lab import Lab, LabError, SyntheticLabSpec, TargetLabSpec
from perfwarden.orchestrator.settings import RunSettings

__all__ = ["LabSpec", "RepCallback", "SyntheticLabSpec", "TargetLabSpec", "build_lab", "describe", "lab_for"]
RepCallback = Callable[[str, int, str], None]
"""``(leg, rep, status)``: a lab's report of one finished rep."""
LabSpec = Annotated[Union[SyntheticLabSpec, TargetLabSpec], Field(discriminator="kind")]


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
    # Each lab module is imported only for its target: torch, httpx and the engines' clients are heavy.
    if settings.target == "synthetic":
        from perfwarden.orchestrator.simlab import SyntheticLab

        return SyntheticLab(on_rep=on_rep)
    if settings.target == "sglang":
        from perfwarden.orchestrator.sglang_lab import SGLangLab

        return SGLangLab.from_settings(settings, python=engine_python, on_rep=on_rep)
    if settings.target == "vllm":
        from perfwarden.orchestrator.vllm_lab import VLLMLab

        return VLLMLab.from_settings(settings, python=engine_python, on_rep=on_rep)
    from perfwarden.orchestrator.embedded_lab import EmbeddedLab

    return EmbeddedLab.from_settings(settings, on_rep=on_rep)


def build_lab(spec: SyntheticLabSpec | TargetLabSpec, on_rep: RepCallback | None = None) -> Lab:
    """The lab a spec describes, reporting its reps to ``on_rep``."""
    if isinstance(spec, SyntheticLabSpec):
        from perfwarden.orchestrator.simlab import SyntheticLab  # as in lab_for

        return SyntheticLab.from_spec(spec, on_rep=on_rep)
    return lab_for(spec.settings, on_rep=on_rep, engine_python=spec.engine_python)
