"""What the evidence loader takes from a bench line beside its re-derived metrics, in the same pass.

- **Goodput** (``RepGoodput``, ``auditor/bench_records.py``): the SLO the line records (a foreign line's ``goodput`` field, which
  ``vllm bench serve --metadata goodput=...`` writes), the line's own ``request_goodput``, and how many of
  its successful requests met each SLO in play (the recorded one and the claim's) -- counted while the
  per-request arrays are decoded, so the gates never need the arrays again (memory stays one rep).
- **What a foreign benchmark states of its run** (``StatedRun``): the model and tokenizer it names
  (``model_id``, ``tokenizer_id``), and its clock: the rep's requests' window on the benchmark
  process's ``time.perf_counter()`` (``start_times`` plus each latency) and the wall time it wrote its
  result (``date``), which together let reps of two files be placed on one timeline.

A field that is there but cannot be what it says (a start list of another length, a negative start,
requests spanning more than the rep's duration, an SLO that does not parse) raises ``RepError`` like any
other inconsistency of the line: the rep is not used. Pure functions over one decoded line.
"""

from __future__ import annotations

import calendar
import json
import math
import time
import numpy as np

from perfwarden.auditor import goodput
from perfwarden.auditor.bench_records import RepGoodput, StatedRun
from perfwarden.auditor.rederive import TIMELINE_SLACK_REL, TIMELINE_SLACK_S, RepError, raw_json
from perfwarden.formats.jsonl import BenchRunLine, ForeignBenchRunLine, LineRef
from perfwarden.formats.slo import GoodputSlo, SloError, parse_slo

MAX_CLOCK_S = 1e10
"""A ``perf_counter`` reading (seconds since boot on Linux) beyond ~317 years is not a clock reading."""
DATE_FORMAT = "%Y%m%d-%H%M%S"
"""``vllm bench serve``'s ``date``: local wall time, to the second, taken after the benchmark ended."""
IDENTITIES = ("model_id", "tokenizer_id")
"""What a foreign line names of the run that both legs must share."""


def rep_goodput(line: BenchRunLine, ref: LineRef, claim_slo: GoodputSlo | None) -> RepGoodput | None:
    """The rep's goodput evidence, or None when no SLO is in play (the line records none, reports no
    goodput, and the claim states none)."""
    recorded = recorded_slo(line, ref)
    reported = line.request_goodput if isinstance(line, ForeignBenchRunLine) else None
    slos = [s for s in (recorded, claim_slo) if s is not None]
    if not slos and reported is None:
        return None
    if line.latencies is None or line.ttfts is None or line.output_lens is None or line.errors is None:
        return RepGoodput(recorded, reported, derivable=False)
    ok = np.fromiter((not e for e in line.errors), dtype=bool, count=len(line.errors))
    ttfts = np.asarray(line.ttfts, dtype=float)[ok]
    latencies = np.asarray(line.latencies, dtype=float)[ok]
    lens = np.asarray(line.output_lens, dtype=float)[ok]
    good = {slo: goodput.good_requests(ttfts, latencies, lens, slo) for slo in dict.fromkeys(slos)}
    return RepGoodput(recorded, reported, good)


def recorded_slo(line: BenchRunLine, ref: LineRef) -> GoodputSlo | None:
    """The SLO a foreign line records in its ``goodput`` field (``RepError`` when it is not one)."""
    text = line.goodput if isinstance(line, ForeignBenchRunLine) else None
    if text is None:
        return None
    try:
        return parse_slo(text)
    except SloError as exc:
        raise RepError("corrupt", f"line {ref.line}: its 'goodput' field is not a goodput SLO: {exc}") from None


def stated_run(line: BenchRunLine, ref: LineRef) -> StatedRun | None:
    """What a foreign line states of its run (None for a line perfwarden's harness wrote)."""
    if line.schema_version is not None or not isinstance(line, ForeignBenchRunLine):
        return None
    identities = {name: json.dumps(raw_json(getattr(line, name), name, ref), sort_keys=True) for name in IDENTITIES}
    return StatedRun(identities, _window(line, ref), _wall_seconds(line.date))


def _window(line: ForeignBenchRunLine, ref: LineRef) -> tuple[float, float] | None:
    """The requests' span on the benchmark's clock, held inside the rep's duration like a harness rep's
    request timeline (``rederive._check_timeline``'s slack)."""
    if line.start_times is None:
        return None
    n = len(line.errors or [])
    if len(line.start_times) != n or line.latencies is None or len(line.latencies) != n:
        raise RepError("corrupt", f"line {ref.line}: 'start_times' has {len(line.start_times)} entries and "
                       f"'latencies' {len(line.latencies or [])}, expected {n} (one per request)")
    if n == 0:
        return None
    starts = np.asarray(line.start_times, dtype=float)
    if not np.all(np.isfinite(starts)) or float(starts.min()) < 0 or float(starts.max()) > MAX_CLOCK_S:
        raise RepError("corrupt", f"line {ref.line}: 'start_times' holds a value that is not a clock reading")
    first, last = float(starts.min()), float((starts + np.asarray(line.latencies, dtype=float)).max())
    duration = float(line.duration or 0.0)
    if last - first > duration + max(TIMELINE_SLACK_S, TIMELINE_SLACK_REL * duration):
        raise RepError("corrupt", f"line {ref.line}: its requests span {last - first:.6g} s (first start to last "
                       f"end, from 'start_times') but the rep's duration is {duration:.6g} s")
    return first, last


def _wall_seconds(date: str | None) -> float | None:
    """``date`` read as seconds (as if UTC: its zone is unknown, only differences between reps are used)."""
    if date is None or len(date) != 15:
        return None
    try:
        value = float(calendar.timegm(time.strptime(date, DATE_FORMAT)))
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None
