"""Alternative SiLU-mul: SiLU computed in place on the gate projection, then multiplied in place.

Saves two temporaries per MLP call; bit-identical to the reference on CPU.
"""

from __future__ import annotations

import torch


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` reusing ``gate``'s storage (the caller never reads ``gate`` again)."""
    return torch.nn.functional.silu(gate, inplace=True).mul_(up)
