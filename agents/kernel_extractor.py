"""kernel-extractor: turns the audited profile's hot ops into kernel proposals.

Deterministic brain: a library of alternative implementations shipped with the harness
(``harness/ops/alternatives``); on a CUDA target every proposal carries the hand-written Triton kernels
(rmsnorm, silu_mul, rotary), which the op bench times on the GPU. On a CPU target they are not proposed:
there they can only be checked under ``TRITON_INTERPRET=1`` and are recorded as not timed. LLM brain
(agents/brains.py): writes a new Triton kernel (CUDA) or torch code (CPU) for the op with its served
shapes, which runs only inside the sandbox.
"""

from __future__ import annotations

from perfwarden.agents.base import Proposal
from perfwarden.formats.records import Claim
from perfwarden.harness.ops.alternatives import for_op


def profile_claim(op: str | None) -> Claim:
    """The op the profile routes for optimization (the profile audit checks it is really hot)."""
    return Claim(scope="profile", producer="kernel_extractor", op=op)


HOT_SHARE = 0.05
"""An op is worth a kernel only when it takes at least this share of the profiled time..."""
HOT_RANK = 5
"""...and ranks among this many hottest ops (design §3, profile scope: the routed op must be hot). Below
either, a faster kernel moves the end-to-end figure by less than the noise band, and the route would be
refused as PROFILE_MISATTRIBUTION."""


def hottest_overridable(ranking: list[tuple[str, float]], overridable: list[str]) -> tuple[int, str, float] | None:
    """(rank, op, share) of the hottest op the target can override; None when it can override none."""
    return next(((rank, op, share) for rank, (op, share) in enumerate(ranking, 1) if op in overridable), None)


def routed_op(ranking: list[tuple[str, float]], overridable: list[str]) -> str | None:
    """The hottest op the target can override, when it is hot; None when none is (then no kernel path)."""
    best = hottest_overridable(ranking, overridable)
    if best is None:
        return None
    rank, op, share = best
    return op if share >= HOT_SHARE and rank <= HOT_RANK else None


NO_KERNEL_PATH = "no kernel path"
"""How the note of a profile that routes no op ends (the terminal finds it by this)."""


def no_route_note(ranking: list[tuple[str, float]], overridable: list[str]) -> str:
    """Why the profile routes no op (the run's notes, the report and the terminal say it)."""
    best = hottest_overridable(ranking, overridable)
    if best is None:
        return f"profile: the target can override none of the profiled ops; {NO_KERNEL_PATH}"
    rank, op, share = best
    return (f"profile: the hottest op the target can override, {op!r}, takes {share:.1%} of profiled time (rank "
            f"{rank}); a kernel needs at least {HOT_SHARE:.0%} and a rank within {HOT_RANK}: {NO_KERNEL_PATH}")


def triton_candidates(op: str) -> list[str]:
    """The hand-written Triton kernels for ``op`` (``harness/ops/alternatives/*_triton.py``) as specs."""
    return [a.spec for a in for_op(op, ("triton",))]


def candidates_for(op: str, alternatives: list[str], device: str) -> list[str]:
    """What the deterministic brain proposes for ``op``: the lab's alternatives, plus on a CUDA target
    the hand-written Triton kernels the lab did not already offer."""
    out = list(alternatives)
    if str(device).startswith("cuda"):
        out += [spec for spec in triton_candidates(op) if spec not in out]
    return out


def propose(ranking: list[tuple[str, float]], overridable: list[str], alternatives: dict[str, list[str]],
            against: dict, max_ops: int = 2, reps: int = 3, device: str = "cpu") -> list[Proposal]:
    """One proposal per hot, overridable op that has candidates, hottest first."""
    out = []
    for op, share in ranking:
        candidates = candidates_for(op, alternatives.get(op, []), device) if op in overridable else []
        if not candidates:
            continue
        out.append(Proposal(id=f"krn-{op}", kind="kernel", producer="kernel_extractor", op=op,
                            candidates=candidates, against=dict(against), believed_class="A",
                            headline_kind="e2e",
                            reps=reps, rationale=f"{op} takes {share:.1%} of profiled time (target device {device})"))
        if len(out) >= max_ops:
            break
    return out
