"""SiLU(gate) * up as one Triton elementwise kernel (SmolLM2-135M: intermediate 1536).

Computed in float32 and rounded once to the input dtype (torch eager rounds after the SiLU and again
after the product). On a GPU it fuses torch's two kernels into one; at decode shapes the kernel is so
short that launch overhead decides, which is why the op bench records call-by-call and graph figures
separately. On CPU it runs only under ``TRITON_INTERPRET=1`` (checked, never timed).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


# Triton reads a kernel's parameter annotations when it compiles (tl.constexpr, specialization hints):
# the parameters stay unannotated, so the decorated kernel is untyped to mypy.
@triton.jit  # type: ignore[untyped-decorator]
def _silu_mul(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` elementwise (the override signature)."""
    gate_c, up_c = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate_c)
    n = gate_c.numel()
    block = 1024
    _silu_mul[(triton.cdiv(n, block),)](gate_c, up_c, out, n, BLOCK=block, num_warps=4)
    return out
