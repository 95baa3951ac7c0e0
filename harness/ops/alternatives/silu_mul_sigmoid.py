"""SiLU-mul written out as ``gate * sigmoid(gate) * up``, the products accumulated in place.

Same math as ``silu(gate) * up``; the SiLU is not fused, so it is expected to be no faster than the
reference on CPU (an honest "no win" candidate). Does not modify its inputs.
"""

from __future__ import annotations

import torch


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    out = torch.sigmoid(gate)
    out.mul_(gate).mul_(up)
    return out
