"""Reps of different legs do not overlap in time. A pure gate.

Two servers measured at once contend for the same cores, memory bandwidth and caches: each leg's reps
then measure the other leg as much as their own change, and a candidate timed while the baseline
idles between its own reps (or the reverse) wins by schedule. The harness stamps every rep with its
start and end (``started_at``, ``ended_at``, unix seconds, one clock); a rep of one leg overlapping a
rep of another by more than ``OVERLAP_SLACK_S`` is ``CONTENDED_LEG`` (FLAG, re-measure): the other leg's
server is precisely "another busy process sharing the CPU during a rep", the code's definition, and
the remedy is the same. Unless the claim declares its legs concurrent (``legs.concurrent``: e.g. legs on
separate machines or GPUs, measured at once on purpose), which the verdict then lists.

A rep's window is never taken shorter than its own clock says: ``[started_at, max(ended_at,
started_at + duration)]`` -- an end stamp edited early cannot hide an overlap. Reps of the *same* leg
may overlap (one server; the interleaving and contention gates judge those). A bench line of version 2
or later without its end stamp never reaches this gate: the loader refuses it (EVIDENCE_MISSING,
``rederive._check_version``). Without an end stamp in a foreign file or a version-1 line (written before
``ended_at`` existed) the check is listed as not made: a start and a duration alone are not a recorded
window (synthetic fixtures space reps closer than their durations).
"""

from __future__ import annotations

from pathlib import Path

from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.rederive import RepMetrics
from perfwarden.formats.records import Finding

GATE = "overlap"
OVERLAP_SLACK_S = 0.001
"""Overlap tolerated between two stamps of one clock (float rounding of JSON numbers, no more):
honest sequential reps do not overlap at all, adjacent ones touch."""


def window(rep: RepMetrics) -> tuple[float, float] | None:
    """The rep's recorded time window, or None without both stamps."""
    if rep.started_at is None or rep.ended_at is None:
        return None
    return rep.started_at, max(rep.ended_at, rep.started_at + rep.duration_s)


def check_overlap(run: Path, legs: list[LegEvidence], concurrent: bool) -> GateResult[None]:
    """Every pair of reps from two different legs of ``legs`` must not overlap in time."""
    if concurrent:
        return GateResult(not_checked=["rep overlap between legs: the claim declares its legs concurrent "
                                       "(legs.concurrent), so reps of different legs may run at once"])
    stamped: list[tuple[float, float, str, RepMetrics]] = []
    unstamped = 0
    for leg in legs:
        for rep in leg.reps:
            span = window(rep)
            if span is None:
                unstamped += 1
            else:
                stamped.append((*span, leg.name, rep))
    result = overlapping_pairs(run, stamped)
    notes = [f"rep overlap between legs: {unstamped} rep(s) carry no start and end stamps (started_at, "
             "ended_at; foreign files and version-1 lines), so whether they ran at the same time as another leg's "
             "reps is not shown"] if unstamped else []
    return GateResult(findings=result, not_checked=notes)


def overlapping_pairs(run: Path, stamped: list[tuple[float, float, str, RepMetrics]]) -> list[Finding]:
    """One finding per pair of legs that overlap (the longest overlap cited), sweeping reps by start; each rep
    given as (start, end, leg, rep) on one clock."""
    stamped.sort(key=lambda x: (x[0], x[1]))
    worst: dict[tuple[str, str], tuple[float, RepMetrics, RepMetrics]] = {}
    active: list[tuple[float, float, str, RepMetrics]] = []
    for start, end, leg, rep in stamped:
        active = [a for a in active if a[1] > start + OVERLAP_SLACK_S]
        for a_start, a_end, a_leg, a_rep in active:
            if a_leg == leg:
                continue
            overlap = min(a_end, end) - start
            first, second = sorted((a_leg, leg))
            pair = (first, second)
            if overlap > OVERLAP_SLACK_S and overlap > (worst[pair][0] if pair in worst else 0.0):
                worst[pair] = (overlap, a_rep, rep)
        active.append((start, end, leg, rep))
    out = []
    for (first, second), (overlap, a, b) in sorted(worst.items()):
        out.append(finding(
            "CONTENDED_LEG", "FLAG", f"reps of legs {first!r} and {second!r} ran at the same time: {a.leg!r} rep "
            f"{a.rep} and {b.leg!r} rep {b.rep} overlap by {overlap:.3f} s, so each server contended with the other; "
            "re-measure the legs one after the other (or declare them concurrent when they share nothing)",
            measured={"overlap_s": round(overlap, 6), "reps": [[a.leg, a.rep], [b.leg, b.rep]]},
            threshold={"overlap_slack_s": OVERLAP_SLACK_S},
            evidence=[line_evidence(run, a.ref), line_evidence(run, b.ref)], action="remeasure", gate=GATE))
    return out
