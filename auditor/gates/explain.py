"""Unexplained deltas FAIL.

A kernel change can only speed up the time its op takes. Removing the op entirely is the most it can
do: with share ``f`` of the run's own profile, time falls by at most ``f`` (throughput rises by at most
``1/(1-f) - 1``). An e2e improvement beyond that bound, outside the noise band, is not the declared
change's doing -- FAIL, whether or not the claim cites an isolated speedup. (A claim that cites one gets
the tighter bound of that speedup as well: ``IMPLAUSIBLE_SPEEDUP`` in ``audit._isolated_vs_e2e``.)
"""

from __future__ import annotations

from perfwarden.auditor import stats
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates.opbench import op_fraction
from perfwarden.formats.jsonl import LineRef, ProfileLine
from perfwarden.formats.records import Claim, Comparison

KERNEL_KEYS = ("op_overrides", "kernel_patches")


def share_bound_pct(fraction: float, higher_is_better: bool) -> float:
    """Largest improvement (percent) removing an op of ``fraction`` of the time can give."""
    if higher_is_better:
        return float("inf") if fraction >= 1.0 else (1.0 / (1.0 - fraction) - 1.0) * 100.0
    return fraction * 100.0


def kernel_only(claim: Claim) -> bool:
    """The declared change is a kernel overlay and nothing else (a config knob could explain more)."""
    lever = claim.lever
    if lever is None or not lever.kernel_ops:
        return False
    return all(k.split(".", 1)[0] in KERNEL_KEYS for k in lever.config_keys)


def check_unexplained_delta(claim: Claim, head: Comparison | None,
                            profile_rows: list[tuple[LineRef, ProfileLine]] | None) -> GateResult[float]:
    """FAIL a real e2e improvement larger than the changed ops' whole profile share could give."""
    lever = claim.lever  # never None past kernel_only; named here so that the type says so too
    if lever is None or not kernel_only(claim) or head is None or not head.significant:
        return GateResult()
    if not profile_rows:
        return GateResult(not_checked=["unexplained delta: no profile in the run, so the changed op's share (the "
                                       "Amdahl bound) is unknown"])
    ops = sorted({op.lower() for op in lever.kernel_ops})
    fraction = sum(op_fraction(profile_rows, op) or 0.0 for op in ops)
    bound = share_bound_pct(fraction, head.higher_is_better)
    improvement = stats.improvement_pct(head.delta_pct, head.higher_is_better)
    if improvement <= bound + head.noise_band_pct:
        return GateResult(value=bound)
    return GateResult(findings=[finding(
        "UNEXPLAINED_DELTA", "FAIL", f"{head.metric} improves {improvement:.1f}%, but {ops!r} take {fraction:.1%} of "
        f"the run's profile: even removing them entirely gives at most {bound:.1f}% (+{head.noise_band_pct:.1f}% "
        "noise band). The delta is not the declared change's doing", measured=round(improvement, 3),
        threshold={"amdahl_bound_pct": round(bound, 3), "op_share": round(fraction, 4),
                   "noise_band_pct": round(head.noise_band_pct, 3)}, action="eject", gate="explain")], value=bound)
