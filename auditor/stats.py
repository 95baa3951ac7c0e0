"""Rep-level statistics as small pure functions (pyperf ``_utils.py`` style).

The rep is the unit of replication: every function here takes one value per rep. Requests inside a rep
are never pooled across reps -- they are not independent (they share the server's state and the load
schedule), and pooling them makes any difference look significant.

Why Welch's t on log values and not Mann-Whitney alone: with 3 reps per leg an exact Mann-Whitney
test cannot go below p = 0.05 one-sided even for perfectly separated legs, so it could never confirm a
real win at a 1% level. A t-test on log values uses the magnitudes, is scale-free (ratios), and its
error rates are checked by simulation in ``benchmarks/aa_power.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sp

ALPHA = 0.01
"""One-sided significance level of a "real win" (A/A false-win target is <= 1%)."""

DEFAULT_NOISE_BAND_PCT = 2.0
"""Noise band used when fewer than 3 same-config reps exist to calibrate one (the verdict says so)."""

MIN_NOISE_BAND_PCT = 0.5
"""Floor of a calibrated band: below this, timer resolution and rounding dominate."""

BAND_Z = 2.576
"""Two-sided 99% normal quantile: the band is the delta an A/A pair would exceed 1% of the time."""

DEFAULT_MAX_BASELINE_SPREAD_PCT = 3.0
"""Max rep spread of a baseline leg when no A/A legs calibrate it (documented default)."""


class StatsError(ValueError):
    """Input that cannot be summarized (empty, non-finite, non-positive where a ratio is needed)."""


def finite_values(values: list[float]) -> np.ndarray:
    """Return values as a float array; raise on empty or non-finite input (never ``x or 0``)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise StatsError("no values")
    if not np.all(np.isfinite(arr)):
        raise StatsError(f"non-finite values: {values!r}")
    return arr


def spread_pct(values: list[float]) -> float:
    """(max - min) / median, percent."""
    arr = finite_values(values)
    med = float(np.median(arr))
    if med == 0:
        raise StatsError("median is zero; spread undefined")
    return float((arr.max() - arr.min()) / abs(med) * 100.0)


def cv_pct(values: list[float]) -> float:
    """Coefficient of variation (sample sd / mean), percent; needs >= 2 values."""
    arr = finite_values(values)
    if arr.size < 2:
        raise StatsError("need >= 2 values for a CV")
    mean = float(arr.mean())
    if mean == 0:
        raise StatsError("mean is zero; CV undefined")
    return float(arr.std(ddof=1) / abs(mean) * 100.0)


def median_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free CI of the median from order statistics (binomial); None below 3 values.

    With few reps the interval is just [min, max], which is what a reader should see.
    """
    arr = np.sort(finite_values(values))
    n = arr.size
    if n < 3:
        return None
    lo_idx = int(_sp.binom.ppf((1 - confidence) / 2, n, 0.5))
    hi_idx = n - 1 - lo_idx
    lo_idx = max(0, min(lo_idx, n - 1))
    hi_idx = max(lo_idx, min(hi_idx, n - 1))
    if lo_idx > 0 and _sp.binom.cdf(lo_idx - 1, n, 0.5) * 2 > 1 - confidence:
        lo_idx -= 1
        hi_idx = n - 1 - lo_idx
    return float(arr[lo_idx]), float(arr[hi_idx])


def pooled_cv_pct(groups: list[list[float]]) -> float:
    """Pooled within-group CV of log values (percent) over groups of same-config reps."""
    sq, dof = 0.0, 0
    for group in groups:
        arr = finite_values(group)
        if arr.size < 2:
            continue
        if np.any(arr <= 0):
            raise StatsError("CV of log values needs positive values")
        logs = np.log(arr)
        sq += float(((logs - logs.mean()) ** 2).sum())
        dof += arr.size - 1
    if dof == 0:
        raise StatsError("need a group with >= 2 reps")
    return math.sqrt(sq / dof) * 100.0


def noise_band_pct(cv: float, n_base: int, n_cand: int) -> float:
    """Delta (percent) that two same-config legs of these sizes exceed only 1% of the time."""
    if n_base < 1 or n_cand < 1:
        raise StatsError("legs need reps")
    return max(MIN_NOISE_BAND_PCT, BAND_Z * cv * math.sqrt(1.0 / n_base + 1.0 / n_cand))


def welch_one_sided_p(base: list[float], cand: list[float], higher_is_better: bool) -> float:
    """p-value that the candidate is better than the baseline, Welch's t on log values.

    Identical, zero-variance legs give p = 0.5 (no evidence); zero-variance but different legs give
    p = 0 or 1 (the data cannot be explained by noise at all).
    """
    b, c = finite_values(base), finite_values(cand)
    if b.size < 2 or c.size < 2:
        raise StatsError("need >= 2 reps per leg for a test")
    if np.any(b <= 0) or np.any(c <= 0):
        raise StatsError("log test needs positive values")
    lb, lc = np.log(b), np.log(c)
    diff = lc.mean() - lb.mean()
    if not higher_is_better:
        diff = -diff
    vb, vc = lb.var(ddof=1) / lb.size, lc.var(ddof=1) / lc.size
    se2 = vb + vc
    if se2 == 0:
        return 0.5 if diff == 0 else (0.0 if diff > 0 else 1.0)
    t = diff / math.sqrt(se2)
    dof = se2**2 / ((vb**2 / (lb.size - 1) if vb else 0.0) + (vc**2 / (lc.size - 1) if vc else 0.0))
    return float(_sp.t.sf(t, dof))


def bootstrap_ratio_ci(base: list[float], cand: list[float], n_boot: int = 2000, seed: int = 0,
                       confidence: float = 0.95) -> tuple[float, float]:
    """Bootstrap CI of median(cand)/median(base), resampling reps within each leg (seeded: the same
    inputs always give the same interval, so verdicts are reproducible)."""
    b, c = finite_values(base), finite_values(cand)
    rng = np.random.default_rng(seed)
    bi = rng.integers(0, b.size, size=(n_boot, b.size))
    ci = rng.integers(0, c.size, size=(n_boot, c.size))
    bm = np.median(b[bi], axis=1)
    if np.any(bm == 0):
        raise StatsError("baseline median zero in a resample")
    ratios = np.median(c[ci], axis=1) / bm
    lo, hi = np.quantile(ratios, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
    return float(lo), float(hi)


def relative_delta_pct(base_median: float, cand_median: float) -> float:
    """(cand / base - 1) * 100; raises on a zero baseline instead of inventing a number."""
    if base_median == 0 or not math.isfinite(base_median) or not math.isfinite(cand_median):
        raise StatsError(f"cannot take a ratio over baseline {base_median!r}")
    return (cand_median / base_median - 1.0) * 100.0


def improvement_pct(delta_pct: float, higher_is_better: bool) -> float:
    """Signed improvement: positive means the candidate is better."""
    return delta_pct if higher_is_better else -delta_pct


def worst_vs_best_pct(base: list[float], cand: list[float], higher_is_better: bool) -> float:
    """Worst candidate rep against best baseline rep, as an improvement percent (>0: no overlap)."""
    b, c = finite_values(base), finite_values(cand)
    if higher_is_better:
        return relative_delta_pct(float(b.max()), float(c.min()))
    return -relative_delta_pct(float(b.min()), float(c.max()))


@dataclass(frozen=True)
class Decision:
    """Outcome of comparing two legs on one metric."""

    delta_pct: float
    improvement_pct: float
    p_value: float | None
    band_pct: float
    significant_better: bool
    significant_worse: bool
    p_worse: float | None = None
    """One-sided p-value of the candidate being worse (``p_value`` is that of it being better)."""

    def described(self, alpha: float = ALPHA) -> str:
        """This comparison in words that are true of it (``describe_change``)."""
        return describe_change(self.improvement_pct, self.band_pct, self.p_value, self.p_worse, alpha)


def describe_change(improvement: float, band_pct: float, p_better: float | None, p_worse: float | None,
                    alpha: float = ALPHA) -> str:
    """A change stated as it is: its direction and size, whether it is inside the noise band, and, outside
    it, whether it is significant in its direction. A message never calls a change "within the noise" that
    the band does not hold, nor "not significant" a change that is significant the other way."""
    direction = "better" if improvement > 0 else "worse" if improvement < 0 else "unchanged"
    size = f"{abs(improvement):.2f}% {direction}"
    if abs(improvement) <= band_pct:
        return f"{size}, inside the ±{band_pct:.2f}% noise band"
    p = p_better if improvement > 0 else p_worse
    if p is None:
        return f"{size}, outside the ±{band_pct:.2f}% noise band, untested at the rep level (under 2 reps a side)"
    verdict = f"significant (p={p:.3g} < {alpha})" if p < alpha else f"not significant at the rep level (p={p:.3g})"
    return f"{size}, outside the ±{band_pct:.2f}% noise band and {verdict}"


def decide(base: list[float], cand: list[float], higher_is_better: bool, band_pct: float,
           alpha: float = ALPHA) -> Decision:
    """A real change = outside the noise band AND significant at the rep level, in that direction."""
    b, c = finite_values(base), finite_values(cand)
    delta = relative_delta_pct(float(np.median(b)), float(np.median(c)))
    imp = improvement_pct(delta, higher_is_better)
    p_better = p_worse = None
    if b.size >= 2 and c.size >= 2:
        p_better = welch_one_sided_p(list(b), list(c), higher_is_better)
        p_worse = welch_one_sided_p(list(b), list(c), not higher_is_better)
    better = p_better is not None and p_better < alpha and imp > band_pct
    worse = p_worse is not None and p_worse < alpha and -imp > band_pct
    return Decision(delta, imp, p_better, band_pct, better, worse, p_worse)
