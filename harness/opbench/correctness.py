"""Correctness of one implementation's outputs against the reference's.

``max_rel_err`` is ``max |out - ref| / max(|ref|, atol / rtol)``, so ``max_rel_err <= rtol`` is exactly
``|out - ref| <= max(atol, rtol * |ref|)`` everywhere -- the row's ``correct``. Non-finite values must
match the reference exactly (same positions, same inf sign, NaN for NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads where outputs are compared
    import torch


@dataclass
class Check:
    """Correctness of one backend on one (shape, seed)."""

    correct: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    raised: str | None = None


def compare(out: list[torch.Tensor], ref: list[torch.Tensor], atol: float, rtol: float) -> Check:
    """Compare an implementation's outputs with the reference's (see the module docstring for the metric)."""
    import torch

    if len(out) != len(ref):
        return Check(False, raised=f"bad output: {len(out)} tensor(s), the reference returns {len(ref)}")
    max_abs = max_rel = 0.0
    finite_ok = True
    for i, (o, r) in enumerate(zip(out, ref)):
        if tuple(o.shape) != tuple(r.shape):
            return Check(False, raised=f"bad output: output {i} has shape {list(o.shape)}, the reference "
                         f"{list(r.shape)}")
        if o.dtype != r.dtype:
            return Check(False, raised=f"bad output: output {i} has dtype {str(o.dtype)!r}, the reference "
                         f"{str(r.dtype)!r}")
        o64, r64 = o.detach().to(torch.float64), r.detach().to(torch.float64)
        of, rf = torch.isfinite(o64), torch.isfinite(r64)
        # Non-finite values must match the reference exactly (same positions, same inf sign, NaN for NaN).
        same_nonfinite = torch.equal(of, rf) and bool(
            ((o64 == r64) | (torch.isnan(o64) & torch.isnan(r64)) | of).all())
        finite_ok &= same_nonfinite
        both = of & rf
        if both.any():
            diff = (o64 - r64).abs()[both]
            denom = r64.abs()[both].clamp_min(atol / rtol)
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / denom).max()))
    if not finite_ok:
        return Check(False, max_abs, max_rel)
    return Check(max_rel <= rtol, max_abs, max_rel)
