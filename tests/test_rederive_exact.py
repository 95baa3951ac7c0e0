"""Re-derivation's fast paths give what the plain computation gives, bit for bit, and refuse the same lines."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from perfwarden.auditor.rederive import (COUNTING_SORT_MAX, MAX_SECONDS, RepError, _quantiles, check_concurrency,
                                         rederive_rep, sorted_lengths)
from perfwarden.formats.jsonl import BenchRunLine, LineRef

REF = LineRef(Path("bench_runs.jsonl"), 1, 0, 0)


@pytest.mark.parametrize("case", ["token_lengths", "with_zeros", "one_value", "fractions", "negative_zero",
                                  "past_the_count_table", "empty"])
def test_sorted_lengths_is_np_sort_bit_for_bit(case: str) -> None:
    rng = np.random.default_rng(3)
    values = {
        "token_lengths": lambda: rng.integers(64, 512, 100_000).astype(float),
        "with_zeros": lambda: rng.integers(0, 3, 5000).astype(float),
        "one_value": lambda: np.full(7, 128.0),
        "fractions": lambda: rng.integers(0, 50, 1000) + np.where(rng.random(1000) < 0.01, 0.5, 0.0),
        "negative_zero": lambda: np.array([3.0, -0.0, 0.0, 1.0, -0.0]),
        "past_the_count_table": lambda: np.array([5.0, float(COUNTING_SORT_MAX), 2.0]),
        "empty": lambda: np.zeros(0),
    }[case]()
    assert sorted_lengths(values).tobytes() == np.sort(values).tobytes()


def test_output_length_quantiles_equal_numpy_on_tied_whole_numbers() -> None:
    """Output lengths are whole numbers with many ties: the bracketed selection must still be numpy's."""
    rng = np.random.default_rng(5)
    for values in (rng.poisson(30, 100_003).astype(float), np.repeat(np.arange(40.0), 2500),
                   np.concatenate([np.ones(99_000), np.full(1001, 4096.0)])):
        want = np.percentile(values, [10, 50, 90])
        assert _quantiles(values, (0.1, 0.5, 0.9)) == [float(w) for w in want]


def _peak_by_sweep(starts: list[float], latencies: list[float], slack: float) -> int:
    """Requests in flight at once, by a plain event sweep: at one instant an end frees its slot first."""
    events = sorted([(s + lat - slack, -1) for s, lat in zip(starts, latencies)] + [(s, 1) for s in starts])
    peak = running = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


@pytest.mark.parametrize("seed", range(6))
def test_concurrency_peak_is_the_plain_event_sweep(seed: int) -> None:
    from perfwarden.auditor.rederive import CONCURRENCY_SLACK_S

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    # Coarse times on a 1 ms grid: ends that meet starts exactly, zero latencies, unordered starts.
    starts = (rng.integers(0, 200, n) * 0.001).tolist()
    latencies = (rng.integers(0, 30, n) * 0.001).tolist()
    peak = _peak_by_sweep(starts, latencies, CONCURRENCY_SLACK_S)
    line = BenchRunLine(max_concurrency=max(1, peak - 1))
    problems = check_concurrency(line, REF, np.array(starts), np.array(latencies))
    assert problems and f"{peak} requests were in flight at once" in problems[0][1]
    assert not check_concurrency(BenchRunLine(max_concurrency=peak), REF, np.array(starts), np.array(latencies))


def _line(itls: list[list[float]], errors: list[str] | None = None, duration: float = 10.0) -> BenchRunLine:
    n = len(itls)
    return BenchRunLine(duration=duration, output_lens=[len(g) + 1 for g in itls], ttfts=[0.1] * n,
                        itls=itls, errors=errors if errors is not None else [""] * n)


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf, -math.inf])
def test_a_negative_or_non_finite_gap_makes_the_rep_corrupt(bad: float) -> None:
    itls = [[0.01, 0.02]] * 40 + [[0.01, bad, 0.02]] + [[0.03]] * 40
    with pytest.raises(RepError, match="'itls' holds negative or non-finite gaps") as caught:
        rederive_rep(_line(itls), REF, "base", 0)
    assert caught.value.kind == "corrupt"


def test_a_gap_past_the_time_bound_is_named_with_its_value() -> None:
    itls = [[0.01, 0.02]] * 20 + [[MAX_SECONDS * 2.5]]
    with pytest.raises(RepError, match=r"an inter-token gap of 2500000\.0 s is not a time"):
        rederive_rep(_line(itls, duration=MAX_SECONDS / 2), REF, "base", 0)


def test_a_failed_requests_gap_is_bounded_by_the_rep() -> None:
    itls = [[0.01, 0.02]] * 30 + [[0.01, 12.5, 0.02], [0.02]]
    errors = [""] * 30 + ["HTTP 503", ""]
    with pytest.raises(RepError, match=r"a failed request's gap of 12\.5 s exceeds the rep's duration"):
        rederive_rep(_line(itls, errors), REF, "base", 0)


def test_gaps_of_successful_requests_only_feed_the_metrics() -> None:
    """The failed requests' gaps are left out of the ITL quantiles, in request order."""
    itls = [[0.010, 0.030]] * 5 + [[5.0, 5.0]] + [[0.020]] * 5
    errors = [""] * 5 + ["HTTP 500"] + [""] * 5
    rep = rederive_rep(_line(itls, errors), REF, "base", 0)
    want = np.percentile([0.010, 0.030] * 5 + [0.020] * 5, [50, 99]) * 1000.0
    assert (rep.metrics["median_itl_ms"], rep.metrics["p99_itl_ms"]) == (float(want[0]), float(want[1]))
    assert rep.n_ok == 10


def test_a_null_or_empty_error_is_a_success_and_any_text_a_failure() -> None:
    """``errors`` as sglang and foreign files write it: an empty string or null is a success, any text a
    failure, and the failed requests' gaps stay out of the ITL quantiles."""
    itls = [[0.010], [7.0], [0.020], [6.0], [0.030], [0.040]]
    errors: list[str | None] = ["", "HTTP 500", None, " ", None, ""]
    line = _line(itls)
    line.errors = errors
    rep = rederive_rep(line, REF, "base", 0)
    assert (rep.n_ok, rep.n_errors, rep.error_samples) == (4, 2, ["HTTP 500", " "])
    want = np.percentile([0.010, 0.020, 0.030, 0.040], [50, 99]) * 1000.0
    assert (rep.metrics["median_itl_ms"], rep.metrics["p99_itl_ms"]) == (float(want[0]), float(want[1]))


@pytest.mark.parametrize("failed", [[], [0], [7], [199], [3, 4, 5, 150], list(range(0, 200, 3)), list(range(200))])
def test_successful_requests_gaps_are_kept_in_order(failed: list[int]) -> None:
    """Few failures take the slices, many the compress: both keep exactly the successful requests' lists."""
    from perfwarden.auditor.rederive import _kept

    items = [[float(i)] for i in range(200)]
    ok = np.ones(200, dtype=bool)
    ok[failed] = False
    assert _kept(items, ok, failed) == [items[i] for i in range(200) if ok[i]]


@pytest.mark.parametrize(("bad", "message"), [(-0.25, "holds negative values"), (math.nan, "holds non-finite values"),
                                              (math.inf, "holds non-finite values"),
                                              (-math.inf, "holds non-finite values")])
def test_a_per_request_time_that_is_not_a_time_is_named(bad: float, message: str) -> None:
    itls = [[0.01]] * 50
    line = _line(itls)
    line.ttfts[17] = bad
    with pytest.raises(RepError, match=f"'ttfts' {message}"):
        rederive_rep(line, REF, "base", 0)


@pytest.mark.parametrize("extra", [-1, 0, 1])
@pytest.mark.parametrize("kind", ["ties_at_the_brackets", "nan", "descending"])
def test_quantiles_compared_a_block_at_a_time_equal_numpy(kind: str, extra: int) -> None:
    """The bracketing pass reads the array in blocks: a last block of one value, ties that straddle a
    block's edge, and a NaN (numpy's own percentile then) give numpy's answer bit for bit."""
    from perfwarden.auditor.rederive import SELECT_BLOCK

    rng = np.random.default_rng(11)
    n = 3 * SELECT_BLOCK + extra
    values = {"ties_at_the_brackets": lambda: rng.integers(0, 7, n).astype(float),
              "nan": lambda: np.where(np.arange(n) == 2 * SELECT_BLOCK, math.nan, rng.random(n)),
              "descending": lambda: np.sort(rng.lognormal(-4, 0.3, n))[::-1].copy()}[kind]()
    want = np.percentile(values, [50, 99])
    got = _quantiles(values, (0.5, 0.99))
    assert np.array([got]).tobytes() == np.array([want]).tobytes()
