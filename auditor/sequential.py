"""The level at which the auditor judges a leg pair that may have been extended sequentially (design §4).

A producer may look at its legs after any rep, stop when they look good and submit: the auditor cannot
tell from the files how often it looked, and a producer's statement of it would vouch for itself. So the
auditor assumes the worst: every rep either leg added was a look. The level of a pair of ``n_base`` and
``n_cand`` reps is the nominal one-sided level of that look in a group-sequential design with a look
after every rep (legs within one rep of each other, as interleaving measures them) and Lan-DeMets
O'Brien-Fleming-type alpha spending over ``HORIZON_REPS`` reps per leg. Whatever looks a producer took,
and however it chose them, its false wins are a subset of "some look of this schedule crossed its
boundary", whose probability under no true difference is ``ALPHA``.

The boundary is computed here by the auditor's own code (Gauss-Legendre quadrature on the score scale,
bisection), independently of the producer's (``agents/sequential.py``: a trapezoid grid on the Z scale,
Brent's method); a test holds the two equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from scipy import special

from perfwarden.auditor import stats

HORIZON_REPS = 12
"""Reps per leg at which all of ``stats.ALPHA`` is spent. A pair past it has no level: no alpha is left."""
MIN_REPS = 2
"""Fewest reps per leg of a look (Welch's t needs two)."""
QUADRATURE_NODES = 160
"""Gauss-Legendre nodes over the continuation interval of each look."""
TAIL_SDS = 10.0
"""The continuation interval starts this many standard deviations below zero (the mass below is < 1e-22)."""


def spent(fraction: float, alpha: float = stats.ALPHA) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending: alpha used by information fraction ``fraction``."""
    if fraction <= 0.0:
        return 0.0
    z = -special.ndtri(alpha / 2.0)
    return float(min(alpha, special.erfc(z / math.sqrt(2.0 * min(fraction, 1.0)))))


def schedule(horizon: int = HORIZON_REPS) -> list[tuple[int, int]]:
    """The looks the auditor assumes: (larger leg, smaller leg) after each rep, from two reps per leg."""
    looks = []
    for n_big in range(MIN_REPS, horizon + 1):
        if n_big > MIN_REPS:
            looks.append((n_big, n_big - 1))
        looks.append((n_big, n_big))
    return looks


def _info(look: tuple[int, int]) -> float:
    """1 / variance of the difference of leg means, in units of 1/sigma^2."""
    return 1.0 / (1.0 / look[0] + 1.0 / look[1])


def _exit_probability(bound: float, nodes: np.ndarray, weights: np.ndarray, step_var: float) -> float:
    """P(score at this look >= bound, not stopped before), from the previous look's weighted sub-density."""
    return float(np.dot(weights, 0.5 * special.erfc((bound - nodes) / math.sqrt(2.0 * step_var))))


def _bisect(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Root of a decreasing function on [lo, hi] to 1e-12."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) > 0.0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


@lru_cache(maxsize=16)
def score_bounds(horizon: int = HORIZON_REPS, alpha: float = stats.ALPHA) -> tuple[float, ...]:
    """Each look's boundary as a standardized statistic (score / sqrt(information)).

    The score (information times the estimated log ratio) is a Brownian motion in information under no
    true difference, whatever the legs' sizes, because each look's reps include the previous look's. Its
    sub-density on the continuation region is carried from look to look by Gauss-Legendre quadrature."""
    looks = schedule(horizon)
    infos = [_info(look) for look in looks]
    used = [spent(i / infos[-1], alpha) for i in infos]
    gl_x, gl_w = np.polynomial.legendre.leggauss(QUADRATURE_NODES)
    sd0 = math.sqrt(infos[0])
    bound = float(-sd0 * special.ndtri(used[0]))  # upper tail of N(0, I_1)
    out = [bound / sd0]
    nodes = weights = np.empty(0)
    for k in range(1, len(looks)):
        # sub-density of the previous look's score on [lower, its bound], as quadrature weights
        lower = -TAIL_SDS * math.sqrt(infos[k - 1])
        half = 0.5 * (bound - lower)
        new_nodes = lower + half * (gl_x + 1.0)
        if k == 1:
            density = np.exp(-0.5 * new_nodes**2 / infos[0]) / math.sqrt(2.0 * math.pi * infos[0])
        else:
            var = infos[k - 1] - infos[k - 2]
            density = np.array([np.dot(weights, np.exp(-0.5 * (y - nodes) ** 2 / var)) for y in new_nodes])
            density /= math.sqrt(2.0 * math.pi * var)
        nodes, weights = new_nodes, density * gl_w * half
        step_var = infos[k] - infos[k - 1]
        target = used[k] - used[k - 1]
        sd = math.sqrt(infos[k])
        bound = _bisect(lambda b: _exit_probability(b, nodes, weights, step_var) - target, -5.0 * sd, 40.0 * sd)
        out.append(bound / sd)
    return tuple(out)


def sequential_level(n_base: int, n_cand: int, horizon: int = HORIZON_REPS, alpha: float = stats.ALPHA) -> float | None:
    """One-sided level a pair of these sizes is judged at; None when no look of the schedule has them
    (fewer than two reps, legs more than one rep apart, or past the horizon): no level, no win."""
    looks = schedule(horizon)
    key = (max(n_base, n_cand), min(n_base, n_cand))
    if key not in looks:
        return None
    return float(0.5 * special.erfc(score_bounds(horizon, alpha)[looks.index(key)] / math.sqrt(2.0)))


def judge(base: list[float], cand: list[float], higher_is_better: bool, band_pct: float,
          horizon: int = HORIZON_REPS) -> stats.Decision:
    """``stats.decide`` with the win judged at the pair's sequential level: the same statistics as the
    fixed-sample judgement, never a looser level. A pair with no level is never significantly better. A
    regression stays judged at the fixed ``ALPHA``: a stricter level there would hide losses."""
    fixed = stats.decide(base, cand, higher_is_better, band_pct)
    level = sequential_level(len(base), len(cand), horizon)
    better = level is not None and fixed.significant_better and fixed.p_value is not None and fixed.p_value < level
    return stats.Decision(fixed.delta_pct, fixed.improvement_pct, fixed.p_value, band_pct, better,
                          fixed.significant_worse)
