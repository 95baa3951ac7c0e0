"""The records of what the evidence loader takes from a bench line beside its metrics
(``auditor/bench_extras.py`` reads them from the line; ``auditor/rederive.py`` carries them on each rep).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfwarden.formats.slo import GoodputSlo


@dataclass(frozen=True)
class RepGoodput:
    """One rep's goodput evidence."""

    recorded: GoodputSlo | None
    """The SLO the line records (None: it records none)."""
    reported: float | None
    """The line's own ``request_goodput`` (None: its writer computed none)."""
    good: dict[GoodputSlo, int] = field(default_factory=dict)
    """Successful requests that met each SLO in play (empty when the line has no ``latencies``)."""
    derivable: bool = True
    """False when the line lacks the per-request latencies goodput is derived from."""


@dataclass(frozen=True)
class StatedRun:
    """What one foreign line states of the run it measured."""

    identities: dict[str, str]
    """``model_id``/``tokenizer_id`` -> the value as canonical JSON text (``null`` when absent)."""
    window: tuple[float, float] | None
    """First request start to last request end on the benchmark's ``perf_counter`` clock (None: no
    ``start_times``)."""
    wall_end: float | None
    """``date`` as seconds of its own calendar (its time zone unknown: only differences mean anything)."""
