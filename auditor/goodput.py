"""Goodput re-derived from a rep's per-request arrays at an SLO: requests per second that met it.

The definition is vLLM's (``vllm/benchmarks/serve.py`` ``calculate_metrics``, DistServe's goodput), so a
vLLM result file's own ``request_goodput`` is reproduced exactly when the SLO is the one its benchmark
used: over the successful requests (empty error), a request is good when its TTFT, its TPOT --
``(latency - TTFT) / (output_len - 1)``, taken as 0 for a one-token output -- and its end-to-end latency
are each at most the SLO's limit (ms / 1000, compared in seconds as vLLM compares them); goodput is the
good count over the rep's ``duration``. Pure functions over arrays; the rep's own consistency (times
finite, inside the rep) is ``rederive.py``'s, checked on the same line before this runs.
"""

from __future__ import annotations

import math

import numpy as np

from perfwarden.formats.slo import GoodputSlo

MS_PER_S = 1000.0
"""vLLM's ``MILLISECONDS_TO_SECONDS_CONVERSION``: a limit in ms is divided by it, never the times multiplied,
so the comparison is the one vLLM made (the same float operations, the same ties)."""
REPORTED_TOLERANCE = 1e-9
"""Relative difference allowed between a file's ``request_goodput`` and the re-derived one: the same
division of the same numbers, so only the last bit of a JSON round trip."""


def good_requests(ttfts: np.ndarray, latencies: np.ndarray, output_lens: np.ndarray, slo: GoodputSlo) -> int:
    """How many of these successful requests meet every limit of ``slo`` (arrays in seconds, one entry per
    successful request)."""
    good = np.ones(ttfts.shape, dtype=bool)
    if slo.ttft_ms is not None:
        good &= slo.ttft_ms / MS_PER_S >= ttfts
    if slo.tpot_ms is not None:
        multi = output_lens > 1
        tpot = np.zeros(ttfts.shape, dtype=float)
        tpot[multi] = (latencies[multi] - ttfts[multi]) / (output_lens[multi] - 1)
        good &= slo.tpot_ms / MS_PER_S >= tpot
    if slo.e2el_ms is not None:
        good &= slo.e2el_ms / MS_PER_S >= latencies
    return int(good.sum())


def goodput(good: int, duration_s: float) -> float:
    """Good requests per second of the rep."""
    return good / duration_s


def reproduces(reported: float, good: int, duration_s: float) -> bool:
    """Whether a file's own ``request_goodput`` is ``good`` requests over its duration (to the last bits)."""
    rederived = goodput(good, duration_s)
    return math.isclose(reported, rederived, rel_tol=REPORTED_TOLERANCE, abs_tol=REPORTED_TOLERANCE)
