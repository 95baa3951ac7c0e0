"""Rotary position embedding for q and k in one Triton launch (SmolLM2-135M: 9 query heads, 3 KV
heads, head dim 64).

One program per (batch, head, position) row of q, then of k, in a single grid: each program rotates
its row's two halves, ``out1 = x1 cos1 - x2 sin1`` and ``out2 = x2 cos2 + x1 sin2`` (HF's
``q * cos + rotate_half(q) * sin``), in float32, rounded once. Strided q/k (HF transposes them to
[batch, heads, seq, head_dim]) are read in place. On CPU it runs only under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


# Triton reads a kernel's parameter annotations when it compiles (tl.constexpr, specialization hints):
# the parameters stay unannotated, so the decorated kernel is untyped to mypy.
@triton.jit  # type: ignore[untyped-decorator]
def _rotary_rows(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr,  # type: ignore[no-untyped-def]
                 n_q_heads, n_k_heads, seq,
                 q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, c_sb, c_ss,
                 HALF: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    q_rows = n_q_heads * seq
    is_q = (pid % (q_rows + n_k_heads * seq)) < q_rows
    r = pid % (q_rows + n_k_heads * seq)
    b = pid // (q_rows + n_k_heads * seq)
    local = tl.where(is_q, r, r - q_rows)
    heads = tl.where(is_q, n_q_heads, n_k_heads)
    h = local // seq
    s = local % seq
    offs = tl.arange(0, BLOCK)
    mask = offs < HALF
    c_base = cos_ptr + b * c_sb + s * c_ss
    s_base = sin_ptr + b * c_sb + s * c_ss
    c1 = tl.load(c_base + offs, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(c_base + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(s_base + offs, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(s_base + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    if is_q:
        src = q_ptr + b * q_sb + h * q_sh + s * q_ss
        dst = qo_ptr + ((b * heads + h) * seq + s) * (2 * HALF)
    else:
        src = k_ptr + b * k_sb + h * k_sh + s * k_ss
        dst = ko_ptr + ((b * heads + h) * seq + s) * (2 * HALF)
    x1 = tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(dst + offs, (x1 * c1 - x2 * s1).to(qo_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF + offs, (x2 * c2 + x1 * s2).to(qo_ptr.dtype.element_ty), mask=mask)


def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``apply_rotary_pos_emb`` for q [batch, heads, seq, dim], k [batch, kv_heads, seq, dim] and
    cos/sin [batch, seq, dim] (the override signature; ``unsqueeze_dim`` 1, HF's layout)."""
    if unsqueeze_dim != 1:
        raise ValueError(f"rotary_triton supports unsqueeze_dim=1 (HF's [batch, heads, seq, dim]); got {unsqueeze_dim}")
    batch, n_q, seq, dim = q.shape
    n_k = k.shape[1]
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    cos = cos.expand(batch, seq, dim) if cos.dim() == 3 else cos.reshape(-1, seq, dim).expand(batch, seq, dim)
    sin = sin.expand(batch, seq, dim) if sin.dim() == 3 else sin.reshape(-1, seq, dim).expand(batch, seq, dim)
    if cos.stride(-1) != 1 or cos.stride() != sin.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    q_out = torch.empty((batch, n_q, seq, dim), dtype=q.dtype, device=q.device)
    k_out = torch.empty((batch, n_k, seq, dim), dtype=k.dtype, device=k.device)
    half = dim // 2
    grid = (batch * (n_q + n_k) * seq,)
    _rotary_rows[grid](q, k, cos, sin, q_out, k_out, n_q, n_k, seq,
                       q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                       cos.stride(0), cos.stride(1), HALF=half, BLOCK=triton.next_power_of_2(half), num_warps=1)
    return q_out, k_out
