"""Error rates and reps of the step rules, side by side on the same simulated steps (design §4, §7).

A step is an interleaved A/B: rep ``i`` of the baseline and rep ``i`` of the candidate form round ``i``.
Three rules judge the same steps (common random numbers: every rule sees the same reps):

- ``fixed 3``: the run's first A/B, 3 reps per leg, banked when the auditor's ``stats.decide`` says real
  (Welch one-sided p < ALPHA = 0.01 on log values and the median delta outside the noise band);
- ``3 then 7``: what the graph does today: ``fixed 3``, and when the auditor's significance gate asks for
  a re-measure (the delta would clear the band at 7 reps), the same legs extended to 7 and judged again at
  ALPHA -- two looks, each at the full level;
- ``sequential``: the producer's rule (``agents/sequential.py``: looks at 3, 5, 7, ... reps per leg up to
  its horizon, Lan-DeMets O'Brien-Fleming spending, non-binding futility), and a win is banked only when
  the auditor's ``auditor/sequential.judge`` passes the same legs too;
- ``sequential, first look at 5``: the same rule whose first look waits for 5 reps per leg. At 3 v 3 the
  spending allows a nominal level of 2.6e-7, which real reps almost never reach, so a winning step looks
  twice; each look is one call of the lab's ``measure``, which starts the step's two servers afresh (about
  40 s on a 2-core vLLM host). This rule trades that start for two more reps of every early loser.

The noise band is the auditor's: ``gates.measurement.calibrate_band`` on stand-in legs (baseline reps).

Noise, in two kinds:
- recorded: A/A series of the real embedded target (``benchmarks/record_aa_noise.py`` wrote them to
  ``benchmarks/data/``). A simulated step draws whole rounds -- the two legs' reps measured one after the
  other, under the same load -- with replacement (``rounds``), or consecutive rounds from a random start
  (``blocks``, which keeps the drift between rounds); which recorded leg plays the baseline is drawn per
  step; a true effect multiplies the candidate's reps;
- lognormal: ``mu * exp(N(0, s))`` with ``s = sqrt(log(1 + cv^2))``, independent reps.

Reported per rule: the A/A false-win rate (target <= 1% for the sequential rule), the power for a true
+10% effect (target >= 90%), the mean and maximum reps per leg a step used and its mean looks (server-pair
starts in a real lab), also for a -10% loser (futility). Rates carry Wilson 95% intervals; a target is
missed when its interval lies wholly on the wrong side. Exits 1 when a target of the sequential rule on
recorded noise is missed.

    python benchmarks/aa_power.py [--trials 20000] [--noise benchmarks/data/aa_noise-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import record

from perfwarden.agents import sequential as producer
from perfwarden.auditor import sequential as auditor_sequential
from perfwarden.auditor import stats
from perfwarden.auditor.evidence import LegEvidence
from perfwarden.auditor.gates import measurement

METRIC = "output_throughput"  # higher is better
AA_TARGET = 0.01
POWER_TARGET = 0.90
EFFECT_PCT = 10.0
DATA_DIR = Path(__file__).resolve().parent / "data"

Legs = tuple[np.ndarray, np.ndarray]
"""One simulated step's reps at the most any rule may use: (baseline, candidate), round i at index i."""


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def _leg(values: np.ndarray) -> LegEvidence:
    """A stand-in LegEvidence holding only what calibrate_band reads (``leg.reps[i].metrics[metric]``):
    the band is the auditor's own code, run on simulated reps."""
    return cast(LegEvidence, SimpleNamespace(reps=[SimpleNamespace(metrics={METRIC: float(v)}) for v in values]))


def auditor_band(base: np.ndarray, cand: np.ndarray) -> float:
    band, _ = measurement.calibrate_band(METRIC, _leg(base), [], len(base), len(cand))
    return float(band)


# ---------------------------------------------------------------------------------------------- rules
Outcome = tuple[bool, int, int]
"""(banked, reps per leg the step used, looks: the times the legs were measured up to a look)."""


def fixed_3(base: np.ndarray, cand: np.ndarray) -> Outcome:
    b, c = base[:3], cand[:3]
    return stats.decide(list(b), list(c), True, auditor_band(b, c)).significant_better, 3, 1


def three_then_seven(base: np.ndarray, cand: np.ndarray) -> Outcome:
    """The graph today: a re-measure to ``measurement.MAX_REPS`` when the auditor's gate asks for one."""
    b, c = base[:3], cand[:3]
    band = auditor_band(b, c)
    first = stats.decide(list(b), list(c), True, band)
    if first.significant_better:
        return True, 3, 1
    n_max = measurement.MAX_REPS
    band_at_max = band * math.sqrt((2.0 / n_max) / (1.0 / 3 + 1.0 / 3))
    if first.improvement_pct <= band_at_max:
        return False, 3, 1
    b, c = base[:n_max], cand[:n_max]
    return stats.decide(list(b), list(c), True, auditor_band(b, c)).significant_better, n_max, 2


def sequential(plan: producer.SequentialPlan) -> Callable[[np.ndarray, np.ndarray], Outcome]:
    def rule(base: np.ndarray, cand: np.ndarray) -> Outcome:
        looks = 0

        def measure_to(n: int) -> tuple[list[float], list[float]]:
            nonlocal looks
            looks += 1
            return list(base[:n]), list(cand[:n])

        decision = producer.run_step(measure_to, plan, plan.horizon)
        n = min(decision.n_base, decision.n_cand)
        if decision.action != "win":
            return False, n, looks
        b, c = base[:n], cand[:n]
        return auditor_sequential.judge(list(b), list(c), True, auditor_band(b, c)).significant_better, n, looks
    return rule


# ---------------------------------------------------------------------------------------------- noise
@dataclass(frozen=True)
class Recorded:
    """A/A rounds of a real target: ``rounds[i] = (leg a's rep i, leg b's rep i)``."""

    rounds: np.ndarray
    label: str


def load_recorded(path: Path) -> Recorded:
    obj = json.loads(path.read_text("utf-8"))
    a, b = (np.asarray(obj["values"][leg], dtype=float) for leg in obj["legs"])
    n = min(a.size, b.size)
    if n < 4 or not (np.all(np.isfinite(a[:n])) and np.all(a[:n] > 0) and np.all(b[:n] > 0)):
        raise SystemExit(f"{path}: need >= 4 positive rounds of two legs")
    def per_rep(key: str) -> list[float]:
        return [float(x) for leg in obj["legs"] for x in obj.get(key, {}).get(leg, []) if x is not None]

    loads, shares, contended = per_rep("load_avg_1m"), per_rep("server_cpu_share"), per_rep("contended")
    rounds = np.stack([a[:n], b[:n]], axis=1)
    logs = np.log(rounds)
    label = (f"{path.name}: {n} rounds over {obj.get('measured_s', math.nan) / 60:.0f} min, {obj['date']}, "
             f"{obj['machine'].get('cores')} cores ({obj['machine'].get('cpu')})"
             + (f", load avg 1m {min(loads):.1f}..{max(loads):.1f}" if loads else "")
             + (f", server CPU share {min(shares):.0%}..{max(shares):.0%}" if shares else "")
             + (f", {sum(contended):.0f} of {len(contended)} reps flagged CONTENDED_LEG by the auditor"
                if contended else "")
             + f"\n    rep CV per leg {np.std(logs[:, 0], ddof=1) * 100:.1f}% / {np.std(logs[:, 1], ddof=1) * 100:.1f}%,"
             f" CV of the within-round log difference {np.std(logs[:, 1] - logs[:, 0], ddof=1) * 100:.1f}%"
             f"\n    recorded by: {obj['command']}" + (f"\n    note: {obj['note']}" if obj.get("note") else ""))
    return Recorded(rounds, label)


def recorded_steps(noise: Recorded, blocks: bool, effect_pct: float, horizon: int,
                   rng: np.random.Generator) -> Iterator[Legs]:
    n = noise.rounds.shape[0]
    while True:
        idx = (rng.integers(n) + np.arange(horizon)) % n if blocks else rng.integers(0, n, horizon)
        flip = int(rng.integers(2))
        rounds = noise.rounds[idx]
        yield rounds[:, flip], rounds[:, 1 - flip] * (1.0 + effect_pct / 100.0)


def lognormal_steps(cv_pct: float, effect_pct: float, *, horizon: int, rng: np.random.Generator) -> Iterator[Legs]:
    s = math.sqrt(math.log1p((cv_pct / 100.0) ** 2))
    while True:
        yield (1000.0 * np.exp(rng.normal(0.0, s, horizon)),
               1000.0 * (1.0 + effect_pct / 100.0) * np.exp(rng.normal(0.0, s, horizon)))


# ---------------------------------------------------------------------------------------------- report
@dataclass
class Tally:
    banked: int = 0
    trials: int = 0
    reps: int = 0
    max_reps: int = 0
    looks: int = 0

    def add(self, outcome: Outcome) -> None:
        self.banked += outcome[0]
        self.trials += 1
        self.reps += outcome[1]
        self.max_reps = max(self.max_reps, outcome[1])
        self.looks += outcome[2]

    def rate(self) -> str:
        lo, hi = wilson(self.banked, self.trials)
        return f"{self.banked / self.trials:7.3%} [{lo:6.3%}, {hi:6.3%}]"

    def reps_text(self) -> str:
        return f"{self.reps / self.trials:5.2f} | {self.max_reps:2d} | {self.looks / self.trials:4.2f}"


def run_cell(steps: Iterator[Legs], rules: dict[str, Callable[[np.ndarray, np.ndarray], Outcome]],
             trials: int) -> dict[str, Tally]:
    tallies = {name: Tally() for name in rules}
    for _, (base, cand) in zip(range(trials), steps):
        for name, rule in rules.items():
            tallies[name].add(rule(base, cand))
    return tallies


def report_noise(label: str, make_steps: Callable[[float], Iterator[Legs]],
                 rules: dict[str, Callable[[np.ndarray, np.ndarray], Outcome]], trials: int) -> dict[str, dict[float, Tally]]:
    print(f"\n{label}")
    print(f"  {'rule':<34} {'A/A false win [95% CI]':<26} {f'power +{EFFECT_PCT:g}% [95% CI]':<26} "
          f"{'reps/leg mean|max|looks: A/A':>29} {f'+{EFFECT_PCT:g}%':>19} {f'-{EFFECT_PCT:g}%':>19}")
    cells = {effect: run_cell(make_steps(effect), rules, trials) for effect in (0.0, EFFECT_PCT, -EFFECT_PCT)}
    for name in rules:
        aa, win, lose = (cells[e][name] for e in (0.0, EFFECT_PCT, -EFFECT_PCT))
        print(f"  {name:<34} {aa.rate():<26} {win.rate():<26} {aa.reps_text():>29} {win.reps_text():>19} "
              f"{lose.reps_text():>19}")
    return {name: {e: cells[e][name] for e in cells} for name in rules}


def figures(cells: dict[str, dict[float, Tally]], noise: str, trials: int) -> list[record.Figure]:
    """One figure per rule on recorded noise (whole rounds resampled), for ``--record``."""
    def reps(t: Tally) -> str:
        return f"{t.reps / t.trials:.2f} mean, {t.max_reps} max, {t.looks / t.trials:.2f} looks"

    out = []
    for name, by_effect in cells.items():
        aa, win, lose = (by_effect[e] for e in (0.0, EFFECT_PCT, -EFFECT_PCT))
        out.append(record.Figure(
            f"rule '{name}': A/A false-win rate, power at +{EFFECT_PCT:g}% and reps per leg, on recorded A/A noise "
            f"({noise}, whole rounds resampled)",
            f"A/A false win {' '.join(aa.rate().split())}; power {' '.join(win.rate().split())} (95% CIs); reps per "
            f"leg: A/A {reps(aa)}, +{EFFECT_PCT:g}% {reps(win)}, -{EFFECT_PCT:g}% {reps(lose)}; {trials:,} steps "
            "per cell"))
    return out


def newest_noise() -> Path | None:
    files = sorted(DATA_DIR.glob("aa_noise-*.json"))
    return files[-1] if files else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20_000, help="simulated steps per cell")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--noise", type=Path, default=None, help="recorded A/A series (default: newest in benchmarks/data)")
    parser.add_argument("--cvs", type=float, nargs="*", default=[2.0, 5.0], help="lognormal rep CVs (%%) to add")
    record.add_flag(parser)
    args = parser.parse_args()
    noise_path = args.noise or newest_noise()
    if noise_path is None:
        raise SystemExit("no recorded A/A series: run benchmarks/record_aa_noise.py first")
    noise = load_recorded(noise_path)
    plan = producer.SequentialPlan()
    rules = {"fixed 3 reps (first A/B)": fixed_3, f"3, re-measure to {measurement.MAX_REPS} (graph today)":
             three_then_seven, f"sequential (horizon {plan.horizon})": sequential(plan),
             "sequential, first look at 5": sequential(replace(plan, first_reps=5))}
    horizon = max(plan.horizon, measurement.MAX_REPS)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"ALPHA={stats.ALPHA}; sequential: first look {plan.first_reps} reps, then every {plan.block_reps} rounds, "
          f"horizon {plan.horizon} reps/leg (auditor's {auditor_sequential.HORIZON_REPS}), futility when +"
          f"{plan.futility_effect_pct:g}% is rejected at {plan.futility_level:g} or a true +{plan.target_effect_pct:g}% "
          f"would win with under {plan.min_conditional_power:g}; {args.trials} steps per cell; seed {args.seed}")
    main_cells = report_noise(f"recorded noise, whole rounds resampled -- {noise.label}",
                              lambda e: recorded_steps(noise, False, e, horizon, rng), rules, args.trials)
    report_noise("recorded noise, consecutive rounds from a random start (keeps drift)",
                 lambda e: recorded_steps(noise, True, e, horizon, rng), rules, args.trials)
    for cv in args.cvs:
        report_noise(f"lognormal noise, rep CV {cv:g}%", partial(lognormal_steps, cv, horizon=horizon, rng=rng),
                     rules, args.trials)
    seq = main_cells[f"sequential (horizon {plan.horizon})"]
    missed = []
    if wilson(seq[0.0].banked, seq[0.0].trials)[0] > AA_TARGET:
        missed.append(f"A/A false-win rate {seq[0.0].banked / seq[0.0].trials:.3%} > {AA_TARGET:.0%}")
    if wilson(seq[EFFECT_PCT].banked, seq[EFFECT_PCT].trials)[1] < POWER_TARGET:
        missed.append(f"power {seq[EFFECT_PCT].banked / seq[EFFECT_PCT].trials:.3%} < {POWER_TARGET:.0%}")
    print(f"\n{time.perf_counter() - started:.0f} s")
    record.record("aa_power.py", figures(main_cells, noise_path.name, args.trials), args.record)
    if missed:
        print("TARGETS MISSED (sequential rule, recorded noise, whole rounds):\n  " + "\n  ".join(missed))
        sys.exit(1)
    print("targets met: sequential rule on recorded noise, A/A false-win <= 1% and power >= 90% (Wilson CIs)")


if __name__ == "__main__":
    main()
