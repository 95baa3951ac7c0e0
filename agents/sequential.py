"""The producer's sequential A/B rule for one interleaved step (design §4): after each look, continue, stop
for a win, or stop for futility, with the false-win rate over every look held at ``ALPHA``.

The rule is group-sequential with Lan-DeMets O'Brien-Fleming-type alpha spending on a *canonical
schedule*: a look after every single rep either leg adds (per-leg reps ``(ceil(s/2), floor(s/2))`` for
``s = 4 .. 2 * HORIZON_REPS`` reps in all), whatever subset of those looks this producer actually takes.
The auditor judges every leg pair on that same schedule because it cannot know which looks were taken
(design §4 gives the argument); a producer that looks less often only leaves alpha unspent. The auditor
computes the same boundary with its own code (``auditor/sequential.py``): a test holds the two equal.

Futility is non-binding: the boundaries are computed as if the producer never stopped for futility, so
stopping early (a clear loser, or a step its noise or budget cannot decide) can only lower the false-win rate.

Everything here is a pure function of the rep values; nothing imports the auditor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import optimize, special
from scipy import stats as sp_stats

ALPHA = 0.01
"""One-sided false-win rate over all looks of a step: the auditor's ``ALPHA``."""
HORIZON_REPS = 12
"""Reps per leg at which the spending function has spent all of ``ALPHA`` (information fraction 1). A
step never measures more; a budget may stop it sooner (``max_reps_for_budget``), leaving alpha unspent."""
MIN_LOOK_REPS = 2
"""Fewest reps per leg of a look: Welch's t needs two per leg."""
BAND_Z = 2.576
"""The auditor's documented noise band (design §4): the delta two same-config legs exceed 1% of the time."""
DEFAULT_BAND_PCT = 2.0
"""The documented band when fewer than 3 baseline reps calibrate one."""
MIN_BAND_PCT = 0.5
"""The documented floor of a calibrated band."""
GRID_POINTS = 1201
"""Points of the trapezoid grid the boundary recursion integrates on (Z scale, from ``GRID_LOW``)."""
GRID_LOW = -9.0
"""Lower end of the integration grid, in standard deviations: the mass below it is under 1e-18."""


class SequentialError(ValueError):
    """Rep values or a plan the rule cannot work with (empty, non-positive, non-finite, bad bounds)."""


def obf_spent(t: float, alpha: float = ALPHA) -> float:
    """Alpha spent by information fraction ``t`` (Lan-DeMets O'Brien-Fleming type: 2 - 2 Phi(z_{a/2}/sqrt t)).

    Almost nothing is spent early and all of ``alpha`` at ``t = 1``, so a step that runs to its horizon
    is judged nearly as a fixed-sample test would be."""
    if not 0.0 < alpha < 1.0:
        raise SequentialError(f"alpha {alpha!r} must lie in (0, 1)")
    if t <= 0.0:
        return 0.0
    z_half = float(sp_stats.norm.isf(alpha / 2.0))
    return float(min(alpha, 2.0 * sp_stats.norm.sf(z_half / math.sqrt(min(t, 1.0)))))


def information(n_base: int, n_cand: int) -> float:
    """Statistical information of a two-leg difference of means, in units of 1/sigma^2: nb nc / (nb + nc)."""
    return n_base * n_cand / (n_base + n_cand)


def canonical_looks(horizon: int = HORIZON_REPS) -> list[tuple[int, int]]:
    """Every look the schedule allows: per-leg reps after each rep either leg adds, legs within one rep."""
    if horizon < MIN_LOOK_REPS:
        raise SequentialError(f"horizon {horizon!r} must be at least {MIN_LOOK_REPS} reps per leg")
    return [((s + 1) // 2, s // 2) for s in range(2 * MIN_LOOK_REPS, 2 * horizon + 1)]


def _trapezoid_weights(grid: np.ndarray) -> np.ndarray:
    step = float(grid[1] - grid[0])
    weights = np.full(grid.size, step)
    weights[0] = weights[-1] = step / 2.0
    return weights


def _crossing(c: float, grid: np.ndarray, density: np.ndarray, info_prev: float, info: float) -> float:
    """P(not stopped before, Z at this look >= c) from the sub-density of Z at the previous look."""
    delta = info - info_prev
    shift = (c * math.sqrt(info) - grid * math.sqrt(info_prev)) / math.sqrt(delta)
    return float(np.sum(_trapezoid_weights(grid) * density * special.ndtr(-shift)))


def _next_density(grid: np.ndarray, density: np.ndarray, info_prev: float, info: float,
                  new_grid: np.ndarray) -> np.ndarray:
    """Sub-density of Z at this look over ``new_grid``, given the previous look's on ``grid``."""
    delta = info - info_prev
    kernel = np.exp(-0.5 * ((new_grid[:, None] * math.sqrt(info) - grid[None, :] * math.sqrt(info_prev)) ** 2)
                    / delta) * math.sqrt(info / (2.0 * math.pi * delta))
    return np.asarray(kernel @ (_trapezoid_weights(grid) * density), dtype=np.float64)


@lru_cache(maxsize=16)
def z_boundaries(horizon: int = HORIZON_REPS, alpha: float = ALPHA) -> tuple[float, ...]:
    """Upper Z boundary of each look of ``canonical_looks(horizon)``: the first look at which Z reaches its
    boundary wins, and under no true difference that happens by the last look with probability ``alpha``,
    each look taking ``obf_spent`` of it (Armitage-McPherson-Rowe recursion, trapezoid rule on a Z grid)."""
    looks = canonical_looks(horizon)
    infos = [information(nb, nc) for nb, nc in looks]
    fractions = [i / infos[-1] for i in infos]
    bounds = [float(sp_stats.norm.isf(obf_spent(fractions[0], alpha)))]
    grid = np.linspace(GRID_LOW, bounds[0], GRID_POINTS)
    density = sp_stats.norm.pdf(grid)
    for k in range(1, len(looks)):
        target = obf_spent(fractions[k], alpha) - obf_spent(fractions[k - 1], alpha)
        info_prev, info = infos[k - 1], infos[k]
        c = float(optimize.brentq(lambda x: _crossing(x, grid, density, info_prev, info) - target,
                                  -2.0, 40.0, xtol=1e-12, rtol=1e-12))
        bounds.append(c)
        new_grid = np.linspace(GRID_LOW, c, GRID_POINTS)
        density = _next_density(grid, density, info_prev, info, new_grid)
        grid = new_grid
    return tuple(bounds)


@lru_cache(maxsize=16)
def _levels(horizon: int, alpha: float) -> dict[tuple[int, int], float]:
    """Each look's nominal one-sided level, keyed by (larger leg, smaller leg)."""
    return {look: float(special.ndtr(-c)) for look, c in zip(canonical_looks(horizon), z_boundaries(horizon, alpha))}


def nominal_level(n_base: int, n_cand: int, horizon: int = HORIZON_REPS, alpha: float = ALPHA) -> float | None:
    """One-sided p-value a look at these leg sizes must beat; None where the schedule has no such look
    (legs more than one rep apart, fewer than two reps, or past the horizon: no alpha left)."""
    return _levels(horizon, alpha).get((max(n_base, n_cand), min(n_base, n_cand)))


def _logs(values: list[float], what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.size < 1 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise SequentialError(f"{what} reps must be positive finite values, got {values!r}")
    logs: np.ndarray = np.log(arr)
    return logs


@dataclass(frozen=True)
class WelchLog:
    """Welch's two-sample t on log values: the log ratio of means, its standard error and degrees of freedom."""

    diff: float
    se: float
    dof: float

    def p_above(self, shift: float) -> float:
        """One-sided p that the true log ratio exceeds ``shift`` (small: the data say it does)."""
        if self.se == 0.0:
            return 0.5 if self.diff == shift else (0.0 if self.diff > shift else 1.0)
        return float(special.stdtr(self.dof, -(self.diff - shift) / self.se))


def welch_log(base: list[float], cand: list[float]) -> WelchLog:
    """Welch's t of candidate over baseline on log values (positive diff: the candidate is higher)."""
    lb, lc = _logs(base, "baseline"), _logs(cand, "candidate")
    if lb.size < 2 or lc.size < 2:
        raise SequentialError("Welch's t needs at least two reps per leg")
    vb, vc = float(lb.var(ddof=1)) / lb.size, float(lc.var(ddof=1)) / lc.size
    se2 = vb + vc
    denom = (vb**2 / (lb.size - 1)) + (vc**2 / (lc.size - 1))
    dof = se2**2 / denom if denom > 0 else float(lb.size + lc.size - 2)
    return WelchLog(diff=float(lc.mean() - lb.mean()), se=math.sqrt(se2), dof=dof)


def band_pct(base: list[float], n_base: int, n_cand: int) -> float:
    """The documented noise band of a step with no A/A legs: the baseline reps' log CV scaled to these sizes."""
    if len(base) < 3:
        return DEFAULT_BAND_PCT
    cv = float(np.std(_logs(base, "baseline"), ddof=1)) * 100.0
    return max(MIN_BAND_PCT, BAND_Z * cv * math.sqrt(1.0 / n_base + 1.0 / n_cand))


@dataclass(frozen=True)
class SequentialPlan:
    """How one step measures: when it first looks, how many rounds between looks, when it gives up.

    Two futility rules, both non-binding: a look stops when the data reject "at least
    ``futility_effect_pct`` better" at ``futility_level`` (one-sided: a clear loser), or when even a true
    ``target_effect_pct`` would cross by the last look the step may reach with probability under
    ``min_conditional_power`` (too noisy, or too little budget, to decide). The trade-off of the defaults
    (reps saved against wins lost) is measured by ``benchmarks/aa_power.py``."""

    first_reps: int = 3
    """Reps per leg of the first look (the run's ``reps``)."""
    block_reps: int = 2
    """Rounds (one rep of each leg) measured between later looks."""
    horizon: int = HORIZON_REPS
    """Reps per leg at which all of ``alpha`` is spent (the auditor's horizon)."""
    futility_effect_pct: float = 5.0
    """Smallest improvement, percent, that is worth more reps."""
    futility_level: float = 0.05
    """One-sided level at which the data must reject ``futility_effect_pct`` to stop for futility."""
    target_effect_pct: float = 10.0
    """The improvement the rule is powered for: a look stops for futility when even this true effect would
    cross the boundary by the most reps the step may reach with probability under ``min_conditional_power``
    (the noise is too high, or the budget too short, for the step to be decided)."""
    min_conditional_power: float = 0.05
    """Conditional power under ``target_effect_pct`` below which more reps are not worth their time."""
    alpha: float = ALPHA
    """False-win rate over all looks."""
    higher_is_better: bool = True
    """Direction of the metric (throughput: higher; a latency: lower)."""

    def __post_init__(self) -> None:
        if not MIN_LOOK_REPS <= self.first_reps <= self.horizon or self.block_reps < 1:
            raise SequentialError(f"a first look at {self.first_reps!r} reps and blocks of {self.block_reps!r} "
                                  f"rounds must fit {MIN_LOOK_REPS}..{self.horizon} reps per leg")
        if not 0.0 <= self.min_conditional_power < 1.0 or not self.target_effect_pct > 0.0:
            raise SequentialError(f"conditional power floor {self.min_conditional_power!r} must lie in [0, 1) and "
                                  f"the target effect {self.target_effect_pct!r} be positive")
        if not 0.0 < self.futility_level < 0.5 or not math.isfinite(self.futility_effect_pct):
            raise SequentialError(f"futility level {self.futility_level!r} must lie in (0, 0.5) and its effect "
                                  f"{self.futility_effect_pct!r} be finite")

    def reps_at_next_look(self, reps_done: int, max_reps: int) -> int:
        """Reps per leg the next look needs, never past ``max_reps`` nor the horizon."""
        cap = min(max_reps, self.horizon)
        if reps_done < self.first_reps:
            return min(self.first_reps, cap)
        return min(reps_done + self.block_reps, cap)


Action = Literal["continue", "win", "futile", "no_win"]


@dataclass(frozen=True)
class LookDecision:
    """What one look decided, with the figures it decided on."""

    action: Action
    n_base: int
    n_cand: int
    improvement_pct: float
    p_value: float
    level: float | None
    band_pct: float
    reason: str


def decide_look(base: list[float], cand: list[float], plan: SequentialPlan, max_reps: int) -> LookDecision:
    """One look at an interleaved step: a win needs the Welch p under this look's spent-alpha level and the
    improvement outside the noise band; futility and exhaustion stop without one; otherwise measure more."""
    stat = welch_log(base, cand) if plan.higher_is_better else welch_log(cand, base)
    improvement = math.expm1(stat.diff) * 100.0
    nb, nc = len(base), len(cand)
    level = nominal_level(nb, nc, plan.horizon, plan.alpha)
    band = band_pct(base if plan.higher_is_better else cand, nb, nc)
    p = stat.p_above(0.0)

    def look(action: Action, reason: str) -> LookDecision:
        return LookDecision(action, nb, nc, improvement, p, level, band, reason)

    if level is None:
        return look("no_win", f"legs of {nb} and {nc} reps are not a look of the schedule")
    if p < level and improvement > band:
        return look("win", f"p={p:.3g} < {level:.3g} and {improvement:+.2f}% > band {band:.2f}%")
    if min(nb, nc) >= min(max_reps, plan.horizon):
        return look("no_win", f"{min(nb, nc)} reps per leg, the most this step may measure")
    # One-sided test of "at least futility_effect_pct better": a small p rejects it.
    p_enough = 1.0 - stat.p_above(math.log1p(plan.futility_effect_pct / 100.0))
    if p_enough < plan.futility_level:
        return look("futile", f"{improvement:+.2f}%: +{plan.futility_effect_pct:g}% is rejected at "
                              f"p={p_enough:.3g} < {plan.futility_level:g}")
    reach = min(max_reps, plan.horizon)
    power = conditional_power(stat, nb, nc, math.log1p(plan.target_effect_pct / 100.0), reach, plan)
    if power < plan.min_conditional_power:
        return look("futile", f"even a true +{plan.target_effect_pct:g}% would win by {reach} reps per leg with "
                              f"probability {power:.2g} < {plan.min_conditional_power:g} at this noise")
    return look("continue", f"p={p:.3g} not under {level:.3g} yet")


def conditional_power(stat: WelchLog, n_base: int, n_cand: int, effect_log: float, reach: int,
                      plan: SequentialPlan) -> float:
    """Chance that the look at ``reach`` reps per leg crosses its boundary if the true log ratio is
    ``effect_log``, given this look's statistic, the noise estimated from its reps, and no look between
    (which only adds chances: the figure is a lower bound). 1 when the reps show no spread to project."""
    if stat.se == 0.0:
        return 1.0
    info_now, info_end = information(n_base, n_cand), information(reach, reach)
    if info_end <= info_now:
        return 0.0
    sigma = stat.se * math.sqrt(info_now)  # per-rep log sd, the legs pooled by Welch's weights
    level = nominal_level(reach, reach, plan.horizon, plan.alpha)
    if level is None:
        return 0.0
    bound = -float(special.ndtri(level))
    score_now = stat.diff / sigma * info_now
    drift = effect_log / sigma * (info_end - info_now)
    return float(special.ndtr((score_now + drift - bound * math.sqrt(info_end)) / math.sqrt(info_end - info_now)))


def max_reps_for_budget(remaining_s: float, round_s: float, reps_done: int, reserve_s: float = 0.0,
                        horizon: int = HORIZON_REPS) -> int:
    """Most reps per leg a step may reach with ``remaining_s`` left: each further round (one rep of each
    leg) costs ``round_s``, and ``reserve_s`` stays for what must follow (the bundle); capped at the horizon."""
    if not (math.isfinite(remaining_s) and math.isfinite(round_s) and math.isfinite(reserve_s)) or round_s <= 0:
        raise SequentialError(f"budget figures must be finite with a positive round time, got "
                              f"{remaining_s!r}, {round_s!r}, {reserve_s!r}")
    affordable = int(max(0.0, remaining_s - reserve_s) // round_s)
    return max(reps_done, min(horizon, reps_done + affordable))


def run_step(measure_to: Callable[[int], tuple[list[float], list[float]]], plan: SequentialPlan,
             max_reps: int, reps_done: int = 0) -> LookDecision:
    """Measure a step look by look until a look stops it: ``measure_to(n)`` extends both legs, interleaved,
    to ``n`` reps each and returns every rep of each leg so far (baseline, candidate). ``reps_done``: reps per
    leg the legs already hold from an earlier look (the step goes on from there)."""
    if max_reps < MIN_LOOK_REPS:
        raise SequentialError(f"a step needs at least {MIN_LOOK_REPS} reps per leg to look at all, not {max_reps!r}")
    n = plan.reps_at_next_look(reps_done, max_reps)
    while True:
        base, cand = measure_to(n)
        decision = decide_look(base, cand, plan, max_reps)
        if decision.action != "continue":
            return decision
        if min(len(base), len(cand)) < n:  # a leg stopped short (a failed server): no further look
            return replace(decision, action="no_win", reason=f"a leg stopped short of {n} reps")
        n = plan.reps_at_next_look(min(len(base), len(cand)), max_reps)
