"""Is this machine quiet enough for a long real-path test? Asked *before* the test spends its minutes.

The embedded e2e run takes about ten minutes, and on a shared machine its reps come back
``CONTENDED_LEG`` (the auditor then refuses to judge, rightly). So the test first samples the machine
the way the harness samples a rep (``harness.contention``) and judges the samples with the auditor's own
contention rule (the ``contention`` gate's ``sample_contention``): one rule, not a second, looser copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from perfwarden.auditor.gates.measurement import sample_contention as busy_reasons
from perfwarden.harness.contention import sample_contention as take_sample

SAMPLES = 3
"""Samples taken before a long test; one quiet window between two busy ones is not a quiet machine."""
INTERVAL_S = 1.0
"""Length of each sampling window (the harness uses 0.25 s around a rep; a longer window here, since
the decision is about the next ten minutes, not the next rep)."""


def contention_reasons(samples: int = SAMPLES, interval_s: float = INTERVAL_S,
                       take: Callable[..., dict[str, Any]] = take_sample) -> list[str]:
    """Why the machine looks busy now (empty when every sample is quiet), by the auditor's rule."""
    reasons: list[str] = []
    for _ in range(samples):
        # Not the load average: it is the last minute's, e.g. the previous test's server (the runs judge
        # their reps on CPU windows, which leave it out too); what is busy now is what the run would meet.
        reasons += busy_reasons(take(interval_s=interval_s), judge_load=False)
    return list(dict.fromkeys(reasons))


def skip_if_contended(what: str, **kwargs: Any) -> None:
    """Skip the calling test up front when the machine is busy: its verdicts would say CONTENDED_LEG."""
    reasons = contention_reasons(**kwargs)
    if reasons:
        pytest.skip(f"the machine is busy before {what} (its reps would be refused as CONTENDED_LEG): "
                    + "; ".join(reasons))
