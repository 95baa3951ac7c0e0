"""A subtly wrong RMSNorm (negative test): eps added *outside* the square root.

``x / (sqrt(mean(x^2)) + eps)`` instead of ``x * rsqrt(mean(x^2) + eps)``. For rows whose RMS is near 1
the two agree to ~1e-5 relative, so a rig that only feeds ``randn`` inputs passes it; for small-RMS
rows (real hidden states after some layers) the relative error grows like ``eps / rms**2``.
"""

from __future__ import annotations

import torch


def rmsnorm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    input_dtype = hidden_states.dtype
    h = hidden_states.to(torch.float32)
    rms = h.pow(2).mean(-1, keepdim=True).sqrt()
    h = h / (rms + eps)
    return weight * h.to(input_dtype)
