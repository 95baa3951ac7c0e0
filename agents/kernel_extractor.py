"""kernel-extractor: turns the audited profile's hot ops into kernel proposals.

Deterministic brain: a library of alternative implementations shipped with the harness
(``harness/ops/alternatives``). LLM brain (agents/brains.py): writes new torch or Triton code for the
op, which runs only inside the sandbox.
"""

from __future__ import annotations

from perfwarden.agents.base import Proposal
from perfwarden.harness.records import Claim


def profile_claim(op: str | None) -> Claim:
    """The op the profile routes for optimization (the profile audit checks it is really hot)."""
    return Claim(scope="profile", producer="kernel_extractor", op=op)


def routed_op(ranking: list[tuple[str, float]], overridable: list[str]) -> str | None:
    """The hottest op the target can override (else the hottest op)."""
    return next((op for op, _ in ranking if op in overridable), ranking[0][0] if ranking else None)


def propose(ranking: list[tuple[str, float]], overridable: list[str], alternatives: dict[str, list[str]],
            against: dict, max_ops: int = 2, reps: int = 3) -> list[Proposal]:
    """One proposal per hot, overridable op that has alternatives, hottest first."""
    out = []
    for op, share in ranking:
        if op not in overridable or not alternatives.get(op):
            continue
        out.append(Proposal(id=f"krn-{op}", kind="kernel", producer="kernel_extractor", op=op,
                            candidates=list(alternatives[op]), against=dict(against), believed_class="A",
                            headline_kind="e2e",
                            reps=reps, rationale=f"{op} takes {share:.1%} of profiled time"))
        if len(out) >= max_ops:
            break
    return out
