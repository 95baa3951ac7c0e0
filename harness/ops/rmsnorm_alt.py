"""Alternative RMSNorm: ``torch.nn.functional.rms_norm`` (one fused ATen op instead of five).

Numerically close to the reference, not bit-identical (the reduction order differs), so parity checks
should expect rare greedy divergences, not exact equality.
"""

from __future__ import annotations

import torch


def rmsnorm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm through the fused ATen kernel, computed in float32 like the reference."""
    input_dtype = hidden_states.dtype
    normed = torch.nn.functional.rms_norm(hidden_states.to(torch.float32), (hidden_states.shape[-1],), eps=eps)
    return weight * normed.to(input_dtype)
