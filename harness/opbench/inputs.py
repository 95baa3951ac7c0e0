"""Inputs of the benchmarked ops: shapes, seeded tensors, tolerances.

Inputs are drawn on the CPU from a seeded generator and then moved to the device, so a seed means the
same numbers in every process and on every device (the parent's ground truth and a worker's check see
identical inputs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:  # torch loads in the functions that build tensors (the parent imports this module cheaply)
    import torch

OpArgs: TypeAlias = "tuple[torch.Tensor | float, ...]"
"""An op's positional arguments as its signature takes them: tensors, and scalars such as an eps."""

TOLERANCES: dict[str, tuple[float, float]] = {
    # dtype: (atol, rtol), applied as |out - ref| <= max(atol, rtol * |ref|) elementwise.
    # float32: room for reordered reductions (a fused kernel sums in another order), ~100 ulp.
    # bfloat16/float16: rtol about two roundings of the output (torch.testing's 1.6e-2 / 1e-3); atol
    # covers cancellation, where two valid implementations differ by an ulp of the *operands*, not of
    # the result: bf16 rotary on N(0,1) inputs, computed in bf16 (reference) vs in float32 (candidate),
    # differs by up to 0.03 absolute on near-zero outputs (measured at 1x9x128x64).
    "float32": (1e-5, 1e-5),
    "float64": (1e-7, 1e-7),
    "bfloat16": (5e-2, 1.6e-2),
    "float16": (5e-3, 1e-3),
}

SMOLLM2_RMS_EPS = 1e-5
"""``rms_norm_eps`` of SmolLM2-135M (the served model)."""
SMOLLM2_ROPE_THETA = 100_000.0
"""``rope_theta`` of SmolLM2-135M."""


class OpBenchError(ValueError):
    """A bad request to the benchmark (unknown op, malformed spec or shape): the caller's error."""


def stable_seed(*parts: Any) -> int:
    """A stable 63-bit seed from any tuple of simple values (same in every process and Python run)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") >> 1


def _rmsnorm_inputs(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> OpArgs:
    import torch

    x = torch.randn(shape, generator=gen)
    # Per-row scale log-uniform in [1e-3, 10]: real hidden states are not unit-RMS, and eps bugs only
    # show on small-RMS rows.
    scale = 10.0 ** (torch.rand(shape[:-1] + (1,), generator=gen) * 4.0 - 3.0)
    weight = 1.0 + 0.1 * torch.randn(shape[-1:], generator=gen)
    return (x * scale).to(dtype), weight.to(dtype), SMOLLM2_RMS_EPS


def _silu_mul_inputs(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> OpArgs:
    import torch

    gate = 2.0 * torch.randn(shape, generator=gen)
    up = torch.randn(shape, generator=gen)
    return gate.to(dtype), up.to(dtype)


def rotary_kv_heads(heads: int) -> int:
    """SmolLM2 has 9 query heads sharing 3 KV heads (GQA 3:1); keep that ratio where it divides."""
    return heads // 3 if heads % 3 == 0 else heads


def _rotary_inputs(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> OpArgs:
    import torch

    batch, heads, seq, dim = shape
    q = torch.randn(shape, generator=gen)
    k = torch.randn((batch, rotary_kv_heads(heads), seq, dim), generator=gen)
    # Positions as the server sees them: a random start (decode steps sit deep in the context).
    start = torch.randint(0, 8192, (batch, 1), generator=gen)
    positions = (start + torch.arange(seq)).to(torch.float32)
    inv_freq = 1.0 / (SMOLLM2_ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = positions[:, :, None] * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)  # HF LlamaRotaryEmbedding: cos/sin in float32, then cast
    return q.to(dtype), k.to(dtype), emb.cos().to(dtype), emb.sin().to(dtype)


def _check_rank_at_least(n: int) -> Callable[[tuple[int, ...]], str | None]:
    def check(shape: tuple[int, ...]) -> str | None:
        return None if len(shape) >= n else f"needs at least {n} dimension(s)"
    return check


def _check_rotary(shape: tuple[int, ...]) -> str | None:
    if len(shape) != 4:
        return "needs [batch, heads, seq, head_dim]"
    return None if shape[3] % 2 == 0 else "head_dim must be even"


@dataclass(frozen=True)
class OpSpec:
    """How to build inputs for one op (the reference function is ``REFERENCE_MODULE.<name>``)."""

    name: str
    make: Callable[[tuple[int, ...], torch.dtype, torch.Generator], OpArgs]
    check_shape: Callable[[tuple[int, ...]], str | None]
    shape_doc: str
    may_modify: frozenset[int] = frozenset()
    """Positions of the arguments the op may overwrite (the one place this is said): the op bench checks
    every other input is bit for bit unchanged after every checked call."""


OPS: dict[str, OpSpec] = {
    "rmsnorm": OpSpec("rmsnorm", _rmsnorm_inputs, _check_rank_at_least(1),
                      "[..., hidden] of hidden_states (weight is [hidden], eps 1e-5)"),  # hidden_states is the residual
    "silu_mul": OpSpec("silu_mul", _silu_mul_inputs, _check_rank_at_least(1),
                       "[..., intermediate] of gate (up has the same shape)",
                       frozenset({0, 1})),  # gate and up are temporaries of the MLP: in place is fine
    "rotary": OpSpec("rotary", _rotary_inputs, _check_rotary,
                     "[batch, heads, seq, head_dim] of q (k has heads/3 heads; cos/sin [batch, seq, head_dim])"),
}


def make_inputs(op: str, shape: Sequence[int], dtype: str, seed: int, device: str = "cpu") -> OpArgs:
    """The input arguments of ``op`` at ``shape``/``dtype`` for one seed, on ``device`` (the same
    numbers on every device and in every process)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    args = OPS[op].make(tuple(int(s) for s in shape), getattr(torch, dtype), gen)
    if device == "cpu":
        return args
    return tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)


def check_seed(seed: int, shape: Sequence[int]) -> int:
    """Generator seed of the correctness inputs of ``(seed, shape)``."""
    return stable_seed("check", seed, tuple(shape))


def timing_seed(seed: int, shape: Sequence[int], trial: int, index: int) -> int:
    """Generator seed of input set ``index`` of a timed trial (distinct from every other set)."""
    return stable_seed("time", seed, tuple(shape), trial, index)


def clone_args(args: OpArgs) -> OpArgs:
    return tuple(a.clone() if hasattr(a, "clone") else a for a in args)


def as_tensors(out: Any) -> list[torch.Tensor]:
    """An op's output as a list of tensors; anything else breaks the override contract."""
    import torch

    items = list(out) if isinstance(out, (tuple, list)) else [out]
    for item in items:
        if not isinstance(item, torch.Tensor):
            raise TypeError(f"implementation returned {type(out).__name__!r}, expected a tensor or a tuple "
                            "of tensors")
        if type(item) is not torch.Tensor:  # a subclass can compute when it is read (lazy evaluation)
            raise TypeError(f"implementation returned a tensor subclass {type(item).__name__!r}, expected a "
                            "plain tensor")
    return items


def normalize_shapes(op: str, shapes: Sequence[Sequence[int] | str]) -> list[tuple[int, ...]]:
    """Validated, de-duplicated shapes (``"16x576"`` or ``[16, 576]``) for ``op``."""
    out: list[tuple[int, ...]] = []
    for shape in shapes:
        if isinstance(shape, str):
            try:
                shape = [int(s) for s in shape.lower().split("x")]
            except ValueError:
                raise OpBenchError(f"shape {shape!r} is not like '16x576'") from None
        tup = tuple(int(s) for s in shape)
        if any(s <= 0 for s in tup):
            raise OpBenchError(f"shape {list(tup)!r} has a non-positive dimension")
        why = OPS[op].check_shape(tup)
        if why:
            raise OpBenchError(f"shape {list(tup)!r} for op {op!r}: {why} ({OPS[op].shape_doc})")
        if tup not in out:
            out.append(tup)
    if not out:
        raise OpBenchError("no shapes to benchmark")
    return out
