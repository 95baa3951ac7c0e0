"""The sequential A/B rule (design §4): the producer's boundary (agents/sequential.py) and the auditor's
(auditor/sequential.py) are two implementations of one design, held equal here; the spending, the looks,
futility, budget bounds, and seeded simulations whose bounds a wrong rule fails."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm

from perfwarden.agents import sequential as producer
from perfwarden.auditor import sequential as auditor
from perfwarden.auditor import stats


def lognormal(rng: np.random.Generator, cv_pct: float, n: int, factor: float = 1.0) -> list[float]:
    s = math.sqrt(math.log1p((cv_pct / 100.0) ** 2))
    return list(1000.0 * factor * np.exp(rng.normal(0.0, s, n)))


# ----------------------------------------------------------------------------------- spending, boundaries
@pytest.mark.parametrize("spend", [producer.obf_spent, auditor.spent])
def test_spending_is_monotone_and_spends_exactly_alpha(spend: Callable[[float, float], float]) -> None:
    fractions = np.linspace(0.0, 1.0, 101)
    used = [spend(float(t), stats.ALPHA) for t in fractions]
    assert used[0] == 0.0 and all(b >= a for a, b in zip(used, used[1:]))
    assert used[-1] == pytest.approx(stats.ALPHA, rel=1e-12)
    assert spend(2.0, stats.ALPHA) == pytest.approx(stats.ALPHA)  # past the horizon nothing more is spent
    assert used[50] < stats.ALPHA / 5  # O'Brien-Fleming: little is spent by half the information


@pytest.mark.parametrize("horizon", [3, 7, 10])
def test_boundaries_fall_and_levels_rise_along_the_looks(horizon: int) -> None:
    bounds = auditor.score_bounds(horizon)
    assert all(b < a for a, b in zip(bounds, bounds[1:]))
    levels = [level for nb, nc in auditor.schedule(horizon)
              if (level := auditor.sequential_level(nb, nc, horizon)) is not None]
    assert len(levels) == len(bounds) and all(b > a for a, b in zip(levels, levels[1:]))
    # the last look is at least as strict as the fixed-sample test at ALPHA, never looser
    assert stats.ALPHA / 2 < levels[-1] < stats.ALPHA


@pytest.mark.parametrize("horizon", [3, 7, 12])
def test_producer_and_auditor_boundaries_agree(horizon: int) -> None:
    assert producer.canonical_looks(horizon) == auditor.schedule(horizon)
    np.testing.assert_allclose(producer.z_boundaries(horizon), auditor.score_bounds(horizon), atol=1e-4)
    for nb in range(0, horizon + 3):
        for nc in range(0, horizon + 3):
            ours, theirs = producer.nominal_level(nb, nc, horizon), auditor.sequential_level(nb, nc, horizon)
            assert (ours is None) == (theirs is None), (nb, nc)
            if ours is not None:
                assert ours == pytest.approx(theirs, rel=2e-3), (nb, nc)


def test_spent_alpha_over_all_looks_sums_to_alpha() -> None:
    """Brownian score paths crossing the boundary at some look of the schedule: the rate is ALPHA (a
    fixed-sample critical value at every look crosses four times as often, so the bound can fail)."""
    looks = auditor.schedule()
    info = np.array([1.0 / (1.0 / nb + 1.0 / nc) for nb, nc in looks])
    rng = np.random.default_rng(11)
    paths = 400_000
    score = np.cumsum(rng.normal(size=(paths, info.size)) * np.sqrt(np.diff(info, prepend=0.0)), axis=1)
    z = score / np.sqrt(info)
    crossed = float((z >= np.array(auditor.score_bounds())).any(axis=1).mean())
    assert abs(crossed - stats.ALPHA) < 6e-4
    naive = float((z >= norm.isf(stats.ALPHA)).any(axis=1).mean())
    assert naive > 3 * stats.ALPHA


def test_no_level_off_the_schedule() -> None:
    """Legs more than one rep apart, a single rep, or past the horizon: no look, so no win, whatever the data."""
    horizon = auditor.HORIZON_REPS
    for sizes in [(7, 3), (3, 7), (5, 3), (1, 1), (2, 1), (horizon + 1, horizon + 1), (horizon + 1, horizon)]:
        assert auditor.sequential_level(*sizes) is None
        assert producer.nominal_level(*sizes) is None
    huge = auditor.judge([100.0, 101.0, 99.0], [300.0] * 5 + [301.0, 299.0], True, 1.0)
    assert not huge.significant_better


# ----------------------------------------------------------------------------------- the auditor tightens
def test_a_three_rep_win_at_the_fixed_level_is_not_a_sequential_win() -> None:
    """Forged: 3 reps per leg, p just under ALPHA and the delta far outside the band -- what the fixed
    test banks. Had the producer looked at every rep, 3 reps is an early look: the auditor refuses."""
    base, cand = [100.0, 102.0, 98.0], [109.0, 111.0, 107.0]
    fixed = stats.decide(base, cand, True, 2.0)
    assert fixed.significant_better and fixed.p_value is not None and fixed.p_value < stats.ALPHA
    assert not auditor.judge(base, cand, True, 2.0).significant_better


def test_the_sequential_judgement_never_passes_what_the_fixed_one_refuses() -> None:
    rng = np.random.default_rng(3)
    for _ in range(400):
        n = int(rng.integers(2, auditor.HORIZON_REPS + 1))
        base = lognormal(rng, 4.0, n)
        cand = lognormal(rng, 4.0, n - int(rng.integers(0, 2)) or 2, factor=float(rng.uniform(0.95, 1.25)))
        band = float(rng.uniform(0.5, 5.0))
        judged = auditor.judge(base, cand, True, band)
        fixed = stats.decide(base, cand, True, band)
        assert not judged.significant_better or fixed.significant_better
        assert judged.significant_worse == fixed.significant_worse  # a loss is judged as before


# ----------------------------------------------------------------------------------- the producer's looks
def test_futility_stops_a_clear_loser_at_the_first_look() -> None:
    rng = np.random.default_rng(5)
    plan = producer.SequentialPlan()
    stopped = [producer.decide_look(lognormal(rng, 3.0, 3), lognormal(rng, 3.0, 3, 0.9), plan, 10).action
               for _ in range(50)]
    assert stopped.count("futile") >= 48


def test_a_latency_loser_stops_for_futility_too() -> None:
    plan = producer.SequentialPlan(higher_is_better=False)
    decision = producer.decide_look([50.0, 51.0, 49.0], [60.0, 61.0, 59.0], plan, 10)
    assert decision.action == "futile" and decision.improvement_pct < -15


def test_a_step_too_noisy_to_decide_stops_at_the_first_look() -> None:
    """At 30% rep CV not even a true +10% could cross by the horizon: more reps would only spend budget.
    At 3% the same observed delta goes on measuring."""
    rng = np.random.default_rng(12)
    plan = producer.SequentialPlan()
    noisy = []
    for _ in range(60):
        base, cand = lognormal(rng, 30.0, 12), lognormal(rng, 30.0, 12, 1.1)
        noisy.append(producer.run_step(lambda n, b=base, c=cand: (b[:n], c[:n]), plan, 12))
    first = [d for d in noisy if d.n_base == 3]
    assert len(first) >= 30 and all(d.action == "futile" for d in first)
    assert sum("would win" in d.reason for d in first) >= 25
    assert np.mean([d.n_base for d in noisy]) < 6  # against 12 without the rule
    quiet = producer.decide_look([100.0, 103.0, 97.0], [104.0, 107.0, 101.0], plan, 12)
    assert quiet.action == "continue"
    short = producer.decide_look([100.0, 103.0, 97.0], [104.0, 107.0, 101.0], plan, 4)  # the budget pays one round
    assert short.action == "futile" and "by 4 reps" in short.reason


def test_run_step_looks_on_the_plan_and_stops_at_the_most_reps_allowed() -> None:
    base = [100.0, 104.0, 96.0, 101.0, 99.0, 103.0, 97.0, 100.0, 102.0, 98.0]
    cand = base[::-1]  # no difference: never a win
    asked: list[int] = []

    def measure_to(n: int) -> tuple[list[float], list[float]]:
        asked.append(n)
        return base[:n], cand[:n]

    plan = producer.SequentialPlan(futility_effect_pct=-90.0, min_conditional_power=0.0)  # never futile here
    decision = producer.run_step(measure_to, plan, max_reps=8)
    assert asked == [3, 5, 7, 8] and decision.action == "no_win" and decision.n_base == 8


def test_run_step_ends_when_a_leg_stops_short() -> None:
    calls = []

    def failing(n: int) -> tuple[list[float], list[float]]:
        calls.append(n)
        return [100.0, 101.0, 99.0], [102.0, 101.0, 103.0]  # the candidate's server died after 3 reps

    decision = producer.run_step(failing, producer.SequentialPlan(futility_effect_pct=-90.0,
                                                                               min_conditional_power=0.0), max_reps=10)
    assert decision.action == "no_win" and calls == [3, 5]


def test_reps_from_the_budget() -> None:
    assert producer.max_reps_for_budget(1200.0, 60.0, reps_done=3, reserve_s=120.0) == 12  # capped at the horizon
    assert producer.max_reps_for_budget(300.0, 60.0, reps_done=3, reserve_s=120.0) == 6
    assert producer.max_reps_for_budget(50.0, 60.0, reps_done=3, reserve_s=120.0) == 3  # nothing left: no more
    with pytest.raises(producer.SequentialError):
        producer.run_step(lambda n: ([1.0] * n, [1.0] * n), producer.SequentialPlan(), max_reps=1)
    for bad in [(math.nan, 60.0), (600.0, 0.0), (math.inf, 60.0)]:
        with pytest.raises(producer.SequentialError):
            producer.max_reps_for_budget(*bad, reps_done=3)


@pytest.mark.parametrize("kwargs", [dict(first_reps=1), dict(first_reps=13), dict(block_reps=0),
                                    dict(futility_level=0.0), dict(futility_level=0.6),
                                    dict(futility_effect_pct=math.nan),
                                    dict(target_effect_pct=0.0), dict(min_conditional_power=1.0)])
def test_a_plan_that_cannot_run_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(producer.SequentialError):
        producer.SequentialPlan(**kwargs)


@pytest.mark.parametrize("bad", [[], [1.0], [1.0, math.nan], [1.0, -1.0], [0.0, 1.0]])
def test_bad_reps_are_an_error_not_a_number(bad: list[float]) -> None:
    with pytest.raises(producer.SequentialError):
        producer.welch_log(bad, [1.0, 2.0])


# ----------------------------------------------------------------------------------- seeded simulations
def steps(rng: np.random.Generator, trials: int, cv_pct: float, factor: float) -> list[tuple[list[float], list[float]]]:
    return [(lognormal(rng, cv_pct, producer.HORIZON_REPS), lognormal(rng, cv_pct, producer.HORIZON_REPS, factor))
            for _ in range(trials)]


def banked(base: list[float], cand: list[float]) -> tuple[bool, int]:
    """The producer's rule, then the auditor's judgement of the legs it stopped on."""
    plan = producer.SequentialPlan()
    decision = producer.run_step(lambda n: (base[:n], cand[:n]), plan, plan.horizon)
    n = decision.n_base
    band = stats.noise_band_pct(stats.pooled_cv_pct([base[:n]]), n, n)
    return decision.action == "win" and auditor.judge(base[:n], cand[:n], True, band).significant_better, n


@pytest.mark.slow
def test_seeded_aa_false_wins_and_power_of_the_rule() -> None:
    """1,000 A/A steps at 5% rep CV bank at most 1.8% (expected <= 1%); 400 steps with a true +10% bank at
    least 90%, with fewer reps than the horizon on average."""
    rng = np.random.default_rng(2026)
    aa = [banked(b, c) for b, c in steps(rng, 1000, 5.0, 1.0)]
    assert sum(won for won, _ in aa) <= 18
    win = [banked(b, c) for b, c in steps(rng, 400, 5.0, 1.10)]
    assert sum(won for won, _ in win) >= 360
    assert np.mean([n for _, n in win]) < producer.HORIZON_REPS - 1


@pytest.mark.slow
def test_a_producer_that_submits_after_every_rep_cannot_buy_false_wins() -> None:
    """Forged: the adversary submits after every rep either leg adds, and keeps the first PASS. Against the
    sequential judgement the A/A rate stays near ALPHA; the fixed-sample judgement at every submission
    banks several times as often (so the bound fails a rule that ignores the looks)."""
    rng = np.random.default_rng(99)
    trials, horizon = 800, auditor.HORIZON_REPS
    seq = fixed = 0
    for _ in range(trials):
        base, cand = lognormal(rng, 5.0, horizon), lognormal(rng, 5.0, horizon)
        hit_seq = hit_fixed = False
        for nb, nc in auditor.schedule(horizon):
            if rng.integers(2):
                nb, nc = nc, nb
            b, c = base[:nb], cand[:nc]
            band = stats.noise_band_pct(stats.pooled_cv_pct([b]), nb, nc) if nb >= 3 else stats.DEFAULT_NOISE_BAND_PCT
            hit_seq = hit_seq or auditor.judge(b, c, True, band, horizon).significant_better
            hit_fixed = hit_fixed or stats.decide(b, c, True, band).significant_better
        seq += hit_seq
        fixed += hit_fixed
    assert seq <= 16 < fixed
