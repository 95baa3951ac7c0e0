"""Rotary embedding (HF Llama "rotate_half" convention) as one complex multiplication per pair.

In the Llama convention element ``j`` of the first half pairs with element ``j`` of the second half:
``out1 = x1*cos - x2*sin`` and ``out2 = x2*cos + x1*sin``, i.e. ``(x1 + i*x2) * (cos + i*sin)``. The
cos/sin tensors repeat their first half (``cat((freqs, freqs))``), so only the first half is used.
Computed in float32 (complex bfloat16 does not exist) and cast back to the input dtype.
"""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.to(torch.float32)
    xc = torch.complex(xf[..., :half], xf[..., half:])
    y = xc * rot
    return torch.cat((y.real, y.imag), dim=-1).to(x.dtype)


def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    half = cos.shape[-1] // 2
    rot = torch.complex(cos[..., :half].to(torch.float32), sin[..., :half].to(torch.float32))
    rot = rot.unsqueeze(unsqueeze_dim)
    return _rotate(q, rot), _rotate(k, rot)
