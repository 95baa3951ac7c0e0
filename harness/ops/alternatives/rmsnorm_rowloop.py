"""A deliberately slow but correct RMSNorm: one row at a time in a Python loop (negative test for rigs
that must rank it last; per-row math is the reference's)."""

from __future__ import annotations

import torch


def rmsnorm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    input_dtype = hidden_states.dtype
    rows = hidden_states.reshape(-1, hidden_states.shape[-1]).to(torch.float32)
    out = torch.empty_like(rows)
    for i in range(rows.shape[0]):
        row = rows[i]
        out[i] = row * torch.rsqrt(row.pow(2).mean() + eps)
    return weight * out.to(input_dtype).reshape(hidden_states.shape)
