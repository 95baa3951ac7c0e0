"""The producers' two interchangeable brains: a deterministic policy and an LLM behind any
OpenAI-compatible endpoint. Both return the same typed objects.

A model's bad output is the model's fault: it is recorded (``notes``, and counted in ``fallbacks``) and
the deterministic policy answers instead, so the run goes on. Our own bugs raise.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, create_model
from pydantic.json_schema import JsonValue

from perfwarden.agents import config_tuner
from perfwarden.agents.base import FixDecision, Proposal
from perfwarden.agents.config_tuner import KnobStep, Tried
from perfwarden.agents.own_figures import LegReading
from perfwarden.formats import safe_write
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.harness.llm_client import LLMClient, LLMOutputError, LLMUnavailable
from perfwarden.harness.target_config import TargetConfig
from perfwarden.skills import fence, render_skill


def bounded(max_length: int | None = None, max_items: int | None = None) -> dict[str, Any]:
    """Schema-only bounds for a free-text field or a list: structured output stops a weak model's loop at
    them (a string that never closes would run to the token limit and be cut, invalid); validation is
    unchanged, so a longer answer from an endpoint without structured output still parses."""
    extra = {"maxLength": max_length} if max_length is not None else {}
    return {"json_schema_extra": extra | ({"maxItems": max_items} if max_items is not None else {})}


class KnobChange(BaseModel):
    knob: str = Field(**bounded(40))
    value: bool | int | float | Annotated[str, Field(max_length=40)]
    """A searched knob's value (every searched knob is a scalar; its model validates it)."""
    lever_class: Literal["A", "B"]
    rationale: str = Field("", **bounded(120))


class ConfigProposals(BaseModel):
    proposals: list[KnobChange] = Field(default_factory=list, **bounded(max_items=2))


def proposals_for(space: dict[str, tuple[Any, ...]]) -> type[ConfigProposals]:
    """``ConfigProposals`` whose schema names the searched knobs and their allowed values (an enum each), so
    that structured output spends a few tokens on a knob instead of a free string a weak model loops in.
    Validation is ``ConfigProposals``'s; ``check_step`` still judges every step."""
    values: list[JsonValue] = [v for allowed in space.values() for v in allowed
                               if isinstance(v, (bool, int, float, str))]
    knobs: list[JsonValue] = list(sorted(space))
    change = create_model("KnobChange", __base__=KnobChange,
                          knob=(str, Field(json_schema_extra={"enum": knobs})),
                          value=(bool | int | float | str, Field(json_schema_extra={"enum": values})))
    return create_model("ConfigProposals", __base__=ConfigProposals,
                        proposals=(list[change], Field(default_factory=list, **bounded(max_items=2))))


class KernelCode(BaseModel):
    code: str = Field(**bounded(4000))
    rationale: str = Field("", **bounded(120))

    ANSWER_TOKENS: ClassVar[int] = 1536
    """Tokens the longest answer needs (the run's ``llm_max_tokens`` is raised to it for this schema): SmolLM2 on
    vLLM wrote the 4,000-character code in 834 to 1,173 tokens, and was cut at 768 (``benchmarks/brain_validity.py``)."""


class StatedFigure(BaseModel):
    delta_pct: float
    """The headline delta the brain states (percent)."""
    rationale: str = Field("", **bounded(120))


MAX_PROMPT_SHAPES = 32
"""Served shapes carried in the kernel-extractor's prompt (the profile records at most 16 per op)."""


def served_shapes(shapes: list) -> list[list[int]]:
    """The profile's served shapes as plain integer lists, distinct, at most ``MAX_PROMPT_SHAPES``."""
    out: list[list[int]] = []
    for shape in shapes:
        dims = list(shape) if isinstance(shape, (list, tuple)) else []
        if dims and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims) and dims not in out:
            out.append(dims)
    return out[:MAX_PROMPT_SHAPES]


def kernel_language(device: str, function: str) -> dict[str, str]:
    """The device-dependent parts of the kernel-extractor's prompt: Triton on CUDA, torch on a CPU."""
    if str(device).startswith("cuda"):
        return {"language": "a Triton kernel", "device": "a CUDA GPU",
                "module_rule": f"- One self-contained Python module: a `@triton.jit` kernel and a wrapper named "
                               f"`{function}` with the reference's signature, which allocates the output with "
                               "torch and launches the kernel. Imports: `torch`, `triton`, `triton.language` only.",
                "speed_rule": "Prefer one launch per call: at decode shapes the kernel is shorter than its launch, "
                              "and the op bench reports call-by-call time (what an eager server pays) beside the "
                              "CUDA-graph time of the kernel.",
                "device_rule": "On the GPU it is timed like any other candidate and goes through the end-to-end "
                               "patch audit."}
    return {"language": "a faster torch implementation", "device": "the CPU",
            "module_rule": f"- One self-contained Python module defining `{function}` with the reference's "
                           "signature, in plain torch (no Triton: on a CPU host a Triton kernel only runs under the "
                           "interpreter and is never timed). Imports: `torch`, `math` only.",
            "speed_rule": "Prefer fewer passes over memory and fewer temporaries (in-place ops, fused torch "
                          "functions): at decode shapes per-op dispatch overhead decides.",
            "device_rule": "On the CPU it is timed call by call with the host clock."}


@dataclass
class Brains:
    """Deterministic by default; with ``llm`` set, the LLM answers first and the policy is the fallback."""

    llm: LLMClient | None = None
    notes: list[str] = field(default_factory=list)
    fallbacks: dict[str, int] = field(default_factory=dict)
    """Producer -> times the LLM's answer was unusable and the deterministic policy answered."""

    def _fell_back(self, producer: str, why: str) -> None:
        self.fallbacks[producer] = self.fallbacks.get(producer, 0) + 1
        self.notes.append(why)

    # -- config-tuner
    def next_config_step(self, model: type[TargetConfig], space: dict[str, tuple[Any, ...]], base: dict[str, Any],
                         best: dict[str, Any], tried: list[Tried]) -> KnobStep | None:
        """The next step of the search (None: converged). The LLM may only pick an allowed value it has
        not measured against this configuration; anything else is recorded and the policy answers."""
        fallback = config_tuner.next_step(model, space, base, best, tried)
        if self.llm is None or fallback is None:
            return fallback  # the policy decides when the search is over: the LLM cannot extend the budget
        knobs = {k: {"allowed": list(v), "lever_class": model.spec(k).lever_class, "lossless": model.spec(k).lossless,
                     "what": model.spec(k).why} for k, v in space.items()}
        path = [{"knob": t.knob, "value": t.value, "against": t.against, "banked": t.banked} for t in tried]
        prompt = render_skill("config_tuner", knobs=json.dumps(knobs, default=str), base_config=json.dumps(base, default=str),
                              best=json.dumps(best, default=str), path=fence(json.dumps(path, default=str)))
        try:
            answer = self.llm.complete_json("You are the config-tuner.", prompt, proposals_for(space))
        except (LLMUnavailable, LLMOutputError) as exc:
            self._fell_back("config_tuner", f"config-tuner LLM failed ({exc}); used the deterministic policy")
            return fallback
        for change in answer.proposals:
            step, problem = config_tuner.check_step(
                model, space, KnobStep(knob=change.knob, value=change.value, rationale=change.rationale[:200]))
            if problem is None and any(t.knob == step.knob and repr(t.value) == repr(step.value) and t.against == best
                                       for t in tried):
                problem = "already measured against this configuration"
            if problem is None and repr(best.get(step.knob, base.get(step.knob))) == repr(step.value):
                problem = "that is the current value"
            if problem:
                self.notes.append(f"config-tuner LLM proposed {change.knob}={change.value!r}: {problem}; dropped")
                continue
            return step
        self._fell_back("config_tuner", "config-tuner LLM proposed no usable step; used the deterministic policy")
        return fallback

    # -- integrator / any producer answering a verdict
    def fix(self, proposal: Proposal, verdict: VerdictSummary, max_reps: int) -> FixDecision:
        fallback = config_tuner.fix(proposal, verdict, max_reps)
        if self.llm is None:
            return fallback
        reasons = "\n".join(f"- {f.severity} {f.code}: {f.message}" for f in verdict.findings
                            if f.severity != "INFO") or "- (none)"
        prompt = render_skill("integrator", change=proposal.id, verdict=verdict.verdict, action=verdict.action,
                              reasons=fence(reasons), history=fence("; ".join(proposal.history[-6:])))
        try:
            decision = self.llm.complete_json("You are the integrator.", prompt, FixDecision)
        except (LLMUnavailable, LLMOutputError) as exc:
            self._fell_back("integrator", f"integrator LLM failed ({exc}); used the deterministic policy")
            return fallback
        if decision.action == "remeasure" and proposal.reps >= max_reps and fallback.action == "drop":
            return fallback  # the loop bound wins over the model's optimism
        return decision

    # -- integrator: the claim's headline figure
    def state_figure(self, proposal: Proposal, reading: LegReading) -> tuple[float, Literal["code", "llm"]]:
        """The headline delta the claim states, and who stated it. The deterministic brain states the
        producer's own reading; the LLM brain states what it reads from the same per-rep numbers (checked
        by the auditor like any figure: REPORTED_MISMATCH when it is off)."""
        if self.llm is None or proposal.figure_by == "code":
            return reading.delta_pct, "code"
        readings = json.dumps({"baseline": reading.baseline, "candidate": reading.candidate})
        prompt = render_skill("claim_figure", change=proposal.id, metric=reading.metric, readings=fence(readings))
        try:
            answer = self.llm.complete_json("You state the headline figure of your claim.", prompt, StatedFigure)
        except (LLMUnavailable, LLMOutputError) as exc:
            self._fell_back("integrator", f"integrator LLM gave no figure ({exc}); stated the producer's own reading")
            return reading.delta_pct, "code"
        if not math.isfinite(answer.delta_pct):
            self._fell_back("integrator", "integrator LLM stated a non-finite figure; stated the producer's own reading")
            return reading.delta_pct, "code"
        return round(answer.delta_pct, 2), "llm"

    # -- kernel-extractor
    def write_kernel(self, run: Path, op: str, share: float, shapes: list, reference_src: str,
                     function: str, index: int, device: str = "cpu", dtype: str = "float32") -> str | None:
        """LLM brain only: write a candidate module into RUN/generated/ and return its spec. On a CUDA
        target it asks for a Triton kernel; on a CPU target for torch code (a Triton kernel could only be
        checked under the interpreter there, never timed, so never banked)."""
        if self.llm is None:
            return None
        prompt = render_skill("kernel_extractor", op=op, share=f"{share:.1%}", shapes=json.dumps(served_shapes(shapes)),
                              reference=reference_src, function=function, dtype=dtype,
                              **kernel_language(device, function))
        try:
            answer = self.llm.complete_json("You are the kernel-extractor.", prompt, KernelCode)
        except (LLMUnavailable, LLMOutputError) as exc:
            self._fell_back("kernel_extractor", f"kernel-extractor LLM failed ({exc})")
            return None
        path = Path(run) / "generated" / f"{safe_write.check_name(op, 'op')}_llm_{index}.py"
        safe_write.write_text(path, answer.code, run)
        return f"{path}:{function}"
