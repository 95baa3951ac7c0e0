"""RMSNorm as one Triton program per row (SmolLM2-135M: hidden 576, one 1024-wide block per row).

Numerics follow ``LlamaRMSNorm``: the sum of squares and the scaling in float32, the normalized row
cast back to the input dtype, then multiplied by the weight. On a GPU this replaces torch eager's
chain of five kernels (cast, pow, mean, rsqrt, two multiplies) with one. On CPU it runs only under
``TRITON_INTERPRET=1`` (checked, never timed).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


# Triton reads a kernel's parameter annotations when it compiles (tl.constexpr, specialization hints):
# the parameters stay unannotated, so the decorated kernel is untyped to mypy.
@triton.jit  # type: ignore[untyped-decorator]
def _rmsnorm_rows(x_ptr, w_ptr, out_ptr, row_stride, n_cols, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * (x / sqrt(mean(x^2) + eps))`` over the last dimension (the override signature)."""
    n_cols = hidden_states.shape[-1]
    x = hidden_states.reshape(-1, n_cols)
    if x.stride(-1) != 1:
        x = x.contiguous()
    out = torch.empty((x.shape[0], n_cols), dtype=hidden_states.dtype, device=hidden_states.device)
    block = triton.next_power_of_2(n_cols)
    _rmsnorm_rows[(x.shape[0],)](x, weight.contiguous(), out, x.stride(0), n_cols, float(eps), BLOCK=block,
                                 num_warps=4 if block <= 2048 else 8)
    return out.reshape(hidden_states.shape)
