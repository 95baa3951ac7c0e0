"""The producers' two interchangeable brains: a deterministic policy and an LLM behind any
OpenAI-compatible endpoint. Both return the same typed objects.

A model's bad output is the model's fault: it is recorded (``notes``) and the deterministic policy
answers instead, so the run goes on. Our own bugs raise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from perfwarden.agents import config_tuner
from perfwarden.agents.auditor.persona import fence, render_prompt
from perfwarden.agents.base import FixDecision, Proposal
from perfwarden.agents.llm import LLMClient, LLMOutputError, LLMUnavailable

# Knob -> allowed values (the LLM may only pick from these; anything else is recorded and dropped).
KNOB_VALUES: dict[str, list[Any]] = {
    "max_batch_size": [1, 2, 4, 8], "batch_wait_ms": [0, 5, 20, 40], "threads": [1, 2],
    "prompt_lookup": [False, True], "quantization": ["none", "int8_dynamic"], "response_cache": [False, True],
    "attn_implementation": ["eager", "sdpa"], "dtype": ["float32", "bfloat16"],
}


def skill(name: str) -> str:
    return resources.files("perfwarden.skills").joinpath(name, "skill.md").read_text("utf-8")


class KnobChange(BaseModel):
    knob: str
    value: Any
    lever_class: Literal["A", "B"]
    rationale: str = ""


class ConfigProposals(BaseModel):
    proposals: list[KnobChange] = Field(default_factory=list)


class KernelCode(BaseModel):
    code: str
    rationale: str = ""


@dataclass
class Brains:
    """Deterministic by default; with ``llm`` set, the LLM answers first and the policy is the fallback."""

    llm: LLMClient | None = None
    notes: list[str] = field(default_factory=list)

    # -- config-tuner
    def propose_config(self, base: dict[str, Any], allowed: list[str] | None, max_proposals: int,
                       reps: int) -> list[Proposal]:
        fallback = config_tuner.propose(base, allowed, max_proposals, reps)
        if self.llm is None:
            return fallback
        knobs = {k: v for k, v in KNOB_VALUES.items() if allowed is None or k in allowed}
        prompt = render_prompt(skill("config_tuner"), knobs=json.dumps(knobs), base_config=json.dumps(base),
                               max_proposals=str(max_proposals))
        try:
            answer = self.llm.complete_json("You are the config-tuner.", prompt, ConfigProposals)
        except (LLMUnavailable, LLMOutputError) as exc:
            self.notes.append(f"config-tuner LLM failed ({exc}); used the deterministic policy")
            return fallback
        out = []
        for change in answer.proposals[:max_proposals]:
            if change.knob not in knobs or change.value not in knobs[change.knob]:
                self.notes.append(f"config-tuner LLM proposed {change.knob}={change.value!r}: not an allowed value, dropped")
                continue
            if base.get(change.knob) == change.value:
                continue
            out.append(Proposal(id=f"cfg-{change.knob}", kind="config", producer="config_tuner",
                                config={change.knob: change.value}, believed_class=change.lever_class,
                                reps=reps, rationale=change.rationale[:200]))
        return out or fallback

    # -- integrator / any producer answering a verdict
    def fix(self, proposal: Proposal, verdict: dict[str, Any], max_reps: int) -> FixDecision:
        fallback = config_tuner.shared_fix(proposal, verdict, max_reps)
        if self.llm is None:
            return fallback
        reasons = "\n".join(f"- {f['severity']} {f['code']}: {f['message']}" for f in verdict.get("findings", [])
                            if f["severity"] != "INFO") or "- (none)"
        prompt = render_prompt(skill("integrator"), change=proposal.id, verdict=verdict["verdict"],
                               action=verdict["action"], reasons=fence(reasons),
                               history=fence("; ".join(proposal.history[-6:])))
        try:
            decision = self.llm.complete_json("You are the integrator.", prompt, FixDecision)
        except (LLMUnavailable, LLMOutputError) as exc:
            self.notes.append(f"integrator LLM failed ({exc}); used the deterministic policy")
            return fallback
        if decision.action == "remeasure" and proposal.reps >= max_reps and fallback.action == "drop":
            return fallback  # the loop bound wins over the model's optimism
        return decision

    # -- kernel-extractor
    def write_kernel(self, run: Path, op: str, share: float, shapes: list, reference_src: str,
                     function: str, index: int) -> str | None:
        """LLM brain only: write a candidate module into RUN/generated/ and return its spec."""
        if self.llm is None:
            return None
        prompt = render_prompt(skill("kernel_extractor"), op=op, share=f"{share:.1%}", shapes=json.dumps(shapes[:4]),
                               reference=reference_src, function=function)
        try:
            answer = self.llm.complete_json("You are the kernel-extractor.", prompt, KernelCode)
        except (LLMUnavailable, LLMOutputError) as exc:
            self.notes.append(f"kernel-extractor LLM failed ({exc})")
            return None
        path = Path(run) / "generated" / f"{op}_llm_{index}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(answer.code, encoding="utf-8")
        return f"{path}:{function}"
