"""A "new" RMSNorm that is the reference copied verbatim (negative test).

Benchmarking it against the reference compares the reference with itself: any measured "speedup" is
noise. Its function source is the reference's, so its ``impl_sha256`` in ``opbench.jsonl`` equals the
reference's and the auditor reports ``HARNESS_SELF_COMPARE``.
"""

from __future__ import annotations

import torch


def rmsnorm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Optimized RMSNorm (it is not)."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)
