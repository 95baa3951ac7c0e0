"""Error rates of the auditor's rep-level statistics on simulated reps (design §7, second bullet).

Simulation: one rep's value (say output throughput) is ``mu * exp(N(0, s))`` -- lognormal noise whose
coefficient of variation is the given rep CV (``s = sqrt(log(1 + cv^2))``). Reps are independent across
and within legs. A "real win" is what the auditor banks: ``stats.decide(...).significant_better`` (rep
medians differ by more than the noise band AND Welch's one-sided t on log values has p < ALPHA).

The noise band is computed exactly as the auditor computes it, by calling
``gates.measurement.calibrate_band`` on stand-in legs: with no A/A legs it is
``noise_band_pct(pooled_cv_pct([baseline reps]), n_base, n_cand)`` (``baseline_reps`` calibration; the
default band when fewer than 3 baseline reps). The variant ``pooled_cv_pct([base, cand])`` -- what
``sequential_compare`` uses when given no CV -- is reported too.

Reported (Wilson 95% CIs):
- A/A false real-win rate (both legs from the same distribution) of fixed-n ``decide`` at 3, 5, 7 reps
  per leg, and of ``sequential_compare`` (looks 3, 5, 7); target <= 1%;
- power for a true 5% improvement at 2% rep CV with <= 7 reps per leg, fixed-n and sequential (with the
  mean reps used per leg); target >= 90%.

``sequential_compare`` spends ``ALPHA`` over its looks (``SEQUENTIAL_SPEND``, summing to ALPHA, so the
union bound caps the false-win rate without relying on this simulation) and stops an interim look for
futility when the candidate is not better at all; "mean reps/leg" shows how early it stops.

Usage::

    python benchmarks/aa_power.py                 # 20,000 trials per cell
    python benchmarks/aa_power.py --trials 2000   # quick
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from types import SimpleNamespace

import numpy as np

from perfwarden.auditor import stats
from perfwarden.auditor.gates import measurement

METRIC = "output_throughput"  # higher is better
AA_TARGET = 0.01
POWER_TARGET = 0.90


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def sigma_for_cv(cv_pct: float) -> float:
    return math.sqrt(math.log1p((cv_pct / 100.0) ** 2))


def _leg(values: np.ndarray) -> SimpleNamespace:
    """A stand-in LegEvidence: what calibrate_band reads (``leg.reps[i].metrics[metric]``)."""
    return SimpleNamespace(reps=[SimpleNamespace(metrics={METRIC: float(v)}) for v in values])


def auditor_band(base: np.ndarray, cand: np.ndarray) -> float:
    band, _ = measurement.calibrate_band(METRIC, _leg(base), [], len(base), len(cand))
    return band


def pooled_band(base: np.ndarray, cand: np.ndarray) -> float:
    cv = stats.pooled_cv_pct([list(base), list(cand)])
    return stats.noise_band_pct(cv, len(base), len(cand))


def fixed_n(rng: np.random.Generator, n: int, cv_pct: float, effect_pct: float, trials: int,
            band_fn) -> int:
    """Number of trials in which ``decide`` reports a real win at ``n`` reps per leg."""
    s = sigma_for_cv(cv_pct)
    base_all = 1000.0 * np.exp(rng.normal(0.0, s, (trials, n)))
    cand_all = 1000.0 * (1 + effect_pct / 100.0) * np.exp(rng.normal(0.0, s, (trials, n)))
    wins = 0
    for base, cand in zip(base_all, cand_all):
        band = band_fn(base, cand)
        if stats.decide(list(base), list(cand), True, band).significant_better:
            wins += 1
    return wins


def sequential(rng: np.random.Generator, cv_pct: float, effect_pct: float, trials: int,
               looks: tuple[int, ...]) -> tuple[int, float]:
    """(wins, mean reps used per leg) of ``sequential_compare`` over ``trials`` simulated experiments."""
    s = sigma_for_cv(cv_pct)
    factor = 1 + effect_pct / 100.0
    wins, reps = 0, 0
    for _ in range(trials):
        res = stats.sequential_compare(lambda: 1000.0 * math.exp(rng.normal(0.0, s)),
                                       lambda: 1000.0 * factor * math.exp(rng.normal(0.0, s)),
                                       None, True, looks=looks)
        wins += res.outcome == "win"
        reps += res.reps_used
    return wins, reps / trials


def fmt(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k / n:7.3%}  [{lo:6.3%}, {hi:6.3%}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--cvs", type=float, nargs="+", default=[1.0, 2.0, 5.0], help="rep CVs (%%) for A/A")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    T = args.trials
    looks = stats.SEQUENTIAL_LOOKS
    print(f"stats: ALPHA={stats.ALPHA} BAND_Z={stats.BAND_Z} MIN_NOISE_BAND_PCT={stats.MIN_NOISE_BAND_PCT} "
          f"DEFAULT_NOISE_BAND_PCT={stats.DEFAULT_NOISE_BAND_PCT}; sequential looks {stats.SEQUENTIAL_LOOKS} "
          f"spending {stats.SEQUENTIAL_SPEND} of ALPHA; {T} trials per cell; seed {args.seed}")
    missed = []

    print("\nA/A false 'real win' rate (target <= 1%), rate [Wilson 95% CI]")
    print(f"  {'rep CV':>6} {'method':<46} {'rate and CI':<28}")
    for cv in args.cvs:
        for n in (3, 5, 7):
            for label, fn in (("auditor band (baseline reps)", auditor_band), ("band from pooled [base, cand]", pooled_band)):
                k = fixed_n(rng, n, cv, 0.0, T, fn)
                print(f"  {cv:5.1f}% {f'fixed n={n}, decide, {label}':<46} {fmt(k, T)}")
                if wilson(k, T)[0] > AA_TARGET:
                    missed.append(f"A/A fixed n={n} cv={cv}% {label}: {k / T:.3%}")
        k, mean_reps = sequential(rng, cv, 0.0, T, looks)
        print(f"  {cv:5.1f}% {f'sequential_compare looks {looks}':<46} {fmt(k, T)}  mean reps/leg {mean_reps:.2f}")
        if wilson(k, T)[0] > AA_TARGET:
            missed.append(f"A/A sequential cv={cv}%: {k / T:.3%}")

    print("\nPower for a true +5% effect at 2% rep CV (target >= 90% with <= 7 reps per leg)")
    for n in (3, 5, 7):
        k = fixed_n(rng, n, 2.0, 5.0, T, auditor_band)
        print(f"  fixed n={n}, decide, auditor band (baseline reps)     {fmt(k, T)}")
        if n == 7 and wilson(k, T)[1] < POWER_TARGET:
            missed.append(f"power fixed n=7: {k / T:.3%}")
    k, mean_reps = sequential(rng, 2.0, 5.0, T, looks)
    print(f"  sequential_compare looks {looks}                     {fmt(k, T)}  mean reps/leg {mean_reps:.2f}")
    if wilson(k, T)[1] < POWER_TARGET:
        missed.append(f"power sequential: {k / T:.3%}")

    print(f"\n{time.perf_counter() - t0:.0f} s")
    if missed:
        print("TARGETS MISSED:\n  " + "\n  ".join(missed))
    else:
        print("all targets met (no Wilson CI lies wholly on the wrong side of its target)")
    sys.exit(0)


if __name__ == "__main__":
    main()
