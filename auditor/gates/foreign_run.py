"""What a foreign benchmark states of its run, held across the legs like a harness run's (pure gates).

``vllm bench serve --save-result --save-detailed`` names the model and tokenizer it measured
(``model_id``, ``tokenizer_id``) and times every request on its process's ``time.perf_counter()``
(``start_times``; with each latency, the rep's window), and stamps the wall time it wrote the result
(``date``). Read by ``bench_extras.stated_run``; judged here:

- **Identities.** One model and one tokenizer across every rep of the compared legs: a difference is
  CONDITIONS_DIFFER (FAIL): the legs measured two models (or tokenized the load two ways), whatever the
  declared change says.
- **Clock.** Reps of two legs must interleave and must not overlap, as the harness's reps must
  (``measurement.check_interleaving``, ``timeline.check_overlap``): NOT_INTERLEAVED / CONTENDED_LEG
  (FLAG, re-measure). ``perf_counter`` is one clock only on one machine since one boot, so the reps'
  windows count only when their wall-clock dates agree with them: every rep's date less its window's end
  (the time its benchmark took to write the result, plus the date's one-second truncation) must agree
  within ``CLOCK_TOLERANCE_S``; otherwise the order cannot be shown (EVIDENCE_MISSING, FLAG, re-measure).
  Start times in some reps and not in others are EVIDENCE_MISSING (FLAG): a leg without them would be
  judged less. Stripping them everywhere buys nothing either: the dates alone (each written just after its
  rep ended, to the second) still order the reps, and only the overlap is then listed as not shown; a rep
  that names vLLM's ``model_id`` without the ``date`` vLLM always writes is EVIDENCE_MISSING (FLAG). A
  foreign file with neither clock (sglang's) is left to the harness-rep gates, which list the check as not
  made.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from perfwarden.auditor.bench_extras import IDENTITIES
from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates import measurement, timeline
from perfwarden.auditor.rederive import RepMetrics
from perfwarden.formats.records import Finding

GATE = "foreign_run"
CLOCK_TOLERANCE_S = 5.0
"""How far two reps' (date - window end) may differ and their ``perf_counter`` windows still count as one
clock: the date is truncated to the second and taken after the benchmark computed and printed its
metrics (well under a second here), while two machines' or boots' monotonic clocks differ by hours."""


def check_identities(run: Path, legs: list[LegEvidence]) -> GateResult[None]:
    """Every rep of ``legs`` that states a model or tokenizer states the same one."""
    out: list[Finding] = []
    for name in IDENTITIES:
        seen: dict[str, tuple[LegEvidence, RepMetrics]] = {}
        for leg in legs:
            for rep in leg.reps:
                if rep.stated is not None:
                    seen.setdefault(rep.stated.identities[name], (leg, rep))
        if len(seen) > 1:
            (va, (la, ra)), (vb, (lb, rb)) = list(seen.items())[:2]
            out.append(finding("CONDITIONS_DIFFER", "FAIL", f"the bench files name different {name} values: "
                               f"{la.name!r} rep {ra.rep} says {va}, {lb.name!r} rep {rb.rep} says {vb}: the legs did "
                               "not measure the same model and tokenizer", measured=sorted(seen)[:10],
                               threshold=f"one {name} in every rep", evidence=[line_evidence(run, ra.ref),
                                                                               line_evidence(run, rb.ref)],
                               action="eject", gate=GATE))
    return GateResult(findings=out)


def check_clock(run: Path, base: LegEvidence, cand: LegEvidence, concurrent: bool) -> GateResult[bool]:
    """Interleaving and overlap of foreign reps from their own clock; the value says whether they were judged
    here (True: the harness-rep gates' notes that foreign files carry no stamps do not apply)."""
    reps = [(leg, rep, rep.stated) for leg in (base, cand) for rep in leg.reps if rep.stated is not None]
    if not reps or len(reps) != len(base.reps) + len(cand.reps):
        return GateResult(value=False)
    undated = [(leg, rep) for leg, rep, stated in reps if stated.wall_end is None]
    if undated and any(stated.identities["model_id"] != "null" for _, _, stated in reps):
        leg, rep = undated[0]
        return GateResult(findings=[_unplaced(run, rep, f"leg {leg.name!r} rep {rep.rep} names its model (vllm bench "
                                              "serve's model_id) but carries no date, which vllm bench serve always "
                                              "writes: its place among the other reps cannot be shown")], value=True)
    timed = [(leg, rep) for leg, rep, stated in reps if stated.window is not None]
    if not timed:
        if undated:
            return GateResult(value=False)  # no clock at all (an sglang file): the harness-rep gates say so
        # Dates alone order the reps (each is its rep's end, to the second) but cannot show an overlap.
        return _judge(run, base, cand, _dated_start, [], ["rep overlap between legs: the files carry no "
                                                            "start_times and their dates are to the second, so "
                                                            "whether reps of the legs overlapped is not shown"])
    if len(timed) < len(reps):
        leg, rep = next((lg, r) for lg, r, _ in reps if (lg, r) not in timed)
        return GateResult(findings=[_unplaced(run, rep, f"leg {leg.name!r} rep {rep.rep} carries no start_times "
                                              "while other reps do: its place among the others cannot be shown")],
                          value=True)
    spread = _date_spread(timed)
    if spread is not None and spread[0] > CLOCK_TOLERANCE_S:
        return GateResult(findings=[_unplaced(run, spread[1], f"the reps' start_times are not one clock: their "
                                              f"dates less their windows' ends differ by {spread[0]:.1f} s (more "
                                              f"than {CLOCK_TOLERANCE_S:g} s), as on two machines or across a "
                                              "reboot, so their order and overlap cannot be shown")], value=True)
    notes = [] if spread is not None else ["foreign rep clock: not every rep carries a date, so that the reps' "
                                           "start_times share one clock is assumed, not witnessed"]
    if concurrent:
        notes.append("rep overlap between legs: the claim declares its legs concurrent (legs.concurrent), so reps "
                     "of different legs may run at once")
        timed = []
    return _judge(run, base, cand, lambda r: _window(r)[0], timed, notes)


def _judge(run: Path, base: LegEvidence, cand: LegEvidence, start: Callable[[RepMetrics], float],
           windows: list[tuple[LegEvidence, RepMetrics]], notes: list[str]) -> GateResult[bool]:
    """The legs' order by ``start``, and overlaps among ``windows`` (reps on one clock)."""
    found: list[Finding] = []
    if min(len(base.reps), len(cand.reps)) >= 2:
        order = measurement.order_finding(run, base, cand, start)
        found += [order] if order is not None else []
    else:
        notes = [*notes, "interleaving: a leg has fewer than 2 reps"]
    found += timeline.overlapping_pairs(run, [(*_window(r), leg.name, r) for leg, r in windows])
    return GateResult(findings=found, not_checked=notes, value=True)


def _dated_start(rep: RepMetrics) -> float:
    """When the rep began by its date: the date is when its result was written, just after it ended."""
    assert rep.stated is not None and rep.stated.wall_end is not None  # only dated reps are asked
    return rep.stated.wall_end - rep.duration_s


def _window(rep: RepMetrics) -> tuple[float, float]:
    assert rep.stated is not None and rep.stated.window is not None  # only timed reps are asked
    return rep.stated.window


def _date_spread(timed: list[tuple[LegEvidence, RepMetrics]]) -> tuple[float, RepMetrics] | None:
    """How far the reps' (date - window end) spread, and the rep furthest from the first; None when a rep
    has no date."""
    offsets = []
    for _, rep in timed:
        assert rep.stated is not None and rep.stated.window is not None
        if rep.stated.wall_end is None:
            return None
        offsets.append((rep.stated.wall_end - rep.stated.window[1], rep))
    low, high = min(o for o, _ in offsets), max(o for o, _ in offsets)
    far = max(offsets, key=lambda o: abs(o[0] - offsets[0][0]))[1]
    return high - low, far


def _unplaced(run: Path, rep: RepMetrics, message: str) -> Finding:
    return finding("EVIDENCE_MISSING", "FLAG", message, evidence=[line_evidence(run, rep.ref)], action="remeasure",
                   gate=GATE)
