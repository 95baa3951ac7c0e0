"""Every measurement held against each of its witnesses: the evidence model's engine for measurements.

The model (``auditor/data/evidence_model.json``, ``witnesses``) lists every relation that binds a
measurement to another record's statement of the same quantity; this module applies each one to every
rep, under its id (:data:`APPLIED`), or names where it is applied (:data:`APPLIED_ELSEWHERE`): the test
``tests/test_evidence_model.py`` holds the two lists to the model's. A bench line is one writer's account
of a rep; two other writers recorded the same requests -- LoadGen (its detail and summary logs) and the
server (its running totals before and after the rep) -- and the line itself states its clock twice more
(its start and end stamps, LoadGen's wall time, the contention samples' and the CPU window's clocks).
Where two of them state one quantity they agree within the tolerance below, or the rep is
EVIDENCE_CORRUPT (FAIL): a line edited after the fact, or rescaled with some of its witnesses, no longer
matches the records its editor did not rewrite. Each relation follows from how the quantities are defined:

- LoadGen's span (samples or tokens over its rate: first issue to last completion) lies inside the
  rep's clock: at most the line's ``duration``, at least the duration after the first request started.
  Offline states samples and tokens per second; Server states completed tokens per second over the same
  span (its completed samples per second runs past the last completion: not read).
- LoadGen's tokens per sample (Offline: the client reports each completed request's output tokens)
  equals the line's output tokens per request when every request succeeded.
- LoadGen times each sample from its issue to its completion: its shortest, mean and longest latency
  are the line's issue delays plus latencies (shortest, mean, longest), never less and more by at most the
  client's lag in reporting a completion (``REPORT_LAG``: LoadGen stamps the report, the client its stream's
  end); its longest lies between the line's longest request and the duration; its power window (first
  issue to last reported completion, ms stamps) spans the duration, as long again as that lag at most, and begins when the rep's clock started (LoadGen's stamps are its system
  clock read as UTC: the comparison is modulo the 15 minutes every time zone offset is a multiple of).
- The harness writes the duration as the last request's end, ``ended_at`` as ``started_at`` plus
  LoadGen's wall time, which wraps the requests; the contention samples are taken before and after the
  rep and the CPU window opens before LoadGen starts and closes after it ends: each spans the duration.
- The summary states the detail log's figures, to the digits it prints.
- The server completed at least the line's successful requests and finished at most all of them
  (nothing else used the server during a rep); with every output length the server's own usage count
  and no response-cache hit, it generated exactly the line's output tokens. Counters only grow.

What a real LoadGen writes (its version, its results, its latencies and power window) is required of a
harness rep whose detail log comes from one (it states ``loadgen_version``), and of every harness rep of a
sealed run, whose LoadGen logs the harness sealed as LoadGen wrote them: a missing one was removed. The
clock relations bind the same recordings; an unsealed hand-built line (never banked) is held to what it
states about itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.loadgen_logs import LoadgenRep
from perfwarden.auditor.model.compare import EXACT, Relation, Tolerance, compare
from perfwarden.auditor.model.schema import evidence_model
from perfwarden.auditor.rederive import OPTIONAL_ARRAYS, RepMetrics
from perfwarden.auditor.stated import Stated
from perfwarden.formats.records import Finding

GATE = "witness"
CLOCK = Tolerance(abs=0.01, rel=0.002, why="LoadGen's clock and the client's read a few ms apart (recorded runs "
                  "here: under 1 ms); 6-digit logs")
REPORT_LAG = Tolerance(abs=0.1, why="the client tells LoadGen a sample is complete after the stream "
                       "closes (the usage chunk, then its event loop's turn), so LoadGen's completion stamp is never "
                       "earlier than the client's end and later by that lag (16 ms seen on vLLM's CPU build under load)")
SAME_READS = Tolerance(abs=1e-6, why="one clock read written twice by the harness")
ZONE_S = 900.0
"""Every time zone offset is a multiple of 15 minutes: LoadGen's UTC-read stamps sit that far from the rep's clock."""
POWER_BEGIN_SLACK_S = 0.05
"""How far LoadGen's first issue may lie from the rep's start stamp (two clock reads around LoadGen's start)."""
PER_SAMPLE = Tolerance(rel=2e-4, why="LoadGen writes rates to 6 significant digits")
MONOTONE = ("requests_admitted", "requests_completed", "requests_failed", "requests_cancelled", "tokens_generated",
            "response_cache_hits", "response_cache_misses", "prefill_batches", "decode_steps")
"""Counters of the embedded engine (``EngineCounters``) that only ever grow."""
FINISHED = ("requests_completed", "requests_failed", "requests_cancelled")
NEEDED = ("tokens_per_second", "max_latency_s")
"""What LoadGen always writes at the end of a performance test (the harness reports tokens)."""
NEEDED_BY_SCENARIO = {"Offline": ("samples_per_second",), "Server": ()}
"""What LoadGen writes besides in each scenario the harness runs (results.cc: Offline states its samples per
second; Server's completed rate is not read). A harness rep's log of another scenario, or of none, was edited."""


SCENARIO_KEYS = ("scenario", "loadgen.settings.scenario")
"""Where a bench line states its rep's LoadGen scenario; the detail log's ``effective_scenario`` witnesses it."""


def missing_results(logs: LoadgenRep) -> list[str]:
    """What a harness rep's detail log lacks of what LoadGen always writes there (found by the field explorer: a
    dropped ``result_samples_per_second`` left the summary the rate's only witness)."""
    if logs.scenario not in NEEDED_BY_SCENARIO:
        return [f"a scenario the harness runs (effective_scenario {logs.scenario!r})"]
    return [k for k in (*NEEDED, *NEEDED_BY_SCENARIO[logs.scenario]) if k not in logs.detail]


def check_witnesses(run: Path, leg: LegEvidence, sealed: bool = False) -> GateResult[None]:
    """Hold every rep of ``leg`` against LoadGen's logs of it, its own clock's other records and the server's
    counters around it. ``sealed``: the run's seal chain verified (its LoadGen logs are LoadGen's own)."""
    findings, notes = [], []
    no_logs = 0
    spill = False
    for rep in sorted(leg.reps, key=lambda r: (r.started_at or 0.0, r.rep)):
        # The line's evidence (its bytes hashed: a rep's line can be 100 MB) is cited only when found wrong.
        line = Stated(f"bench line {rep.ref.line}", None, None)
        found = []
        logs = leg.loadgen.get(rep.rep)
        if logs is None:
            no_logs += 1
        else:
            found += loadgen_findings(rep, line, logs, leg.name)
            found += real_loadgen_findings(rep, line, logs, leg.name, sealed)
        if sealed or (logs is not None and logs.version is not None):
            found += clock_findings(rep, line, leg.name)
        if rep.server_counters is not None:
            counted, note = counter_findings(rep, line, leg.name, spill)
            found += counted
            notes += note
        spill = rep.n_errors > 0 or _in_flight(rep)
        if found:
            cited = line_evidence(run, rep.ref)
            findings += [f.model_copy(update={"evidence": [cited, *f.evidence]}) for f in found]
    findings += between_reps_findings(run, leg)
    findings += server_log_findings(run, leg)
    if no_logs:
        notes.append(f"second witness of leg {leg.name!r}: {no_logs} rep(s) have no LoadGen logs to hold their "
                     "lines against")
    # Reps with no server counters are listed by the audit, which also knows the engine's own witness
    # (``engine_witness``): a rep held against vLLM's /metrics has a second server-side account.
    return GateResult(findings=findings, not_checked=notes[:5])


def _at(line: Stated, source: str, value: float | None) -> Stated:
    return Stated(f"{line.source} ({source})", value, line.evidence)


def loadgen_findings(rep: RepMetrics, line: Stated, logs: LoadgenRep, leg: str) -> list[Finding]:
    """LoadGen's own figures of one rep against its line (and its summary against its detail log)."""
    where = f"leg {leg!r} rep {rep.rep}: "
    out: list[Finding | None] = []
    missing = missing_results(logs) if logs.detail_read else []
    if rep.loadgen_dir is not None and rep.schema_version is not None and (not logs.detail_read or missing):
        what = f"states no {', '.join(missing)}" if logs.detail_read else "is absent"
        out.append(finding("EVIDENCE_MISSING", "FAIL", f"{where}LoadGen's detail log of the rep {what}: LoadGen "
                           "writes it, results included, at the end of every test, so it was removed",
                           evidence=[e for e in (line.evidence, logs.issued[1] if logs.issued else None) if e],
                           action="eject", gate=GATE))
    if rep.loadgen_dir is not None and rep.schema_version is not None and logs.detail_read and logs.issued is None:
        out.append(finding("EVIDENCE_MISSING", "FLAG", f"{where}LoadGen's detail log of the rep states no usable "
                           "result_query_count (samples issued), which LoadGen writes at the end of every test: the "
                           "line's request count has no second witness", evidence=[e for e in (line.evidence,) if e],
                           action="remeasure", gate=GATE))
    stated = {v for v in (rep.workload.get(k) for k in SCENARIO_KEYS) if isinstance(v, str)}
    if logs.scenario is not None and stated and stated != {logs.scenario}:
        out.append(finding("EVIDENCE_CORRUPT", "FAIL", f"{where}the bench line states LoadGen scenario "
                           f"{', '.join(map(repr, sorted(stated)))}, LoadGen's detail log of the rep ran "
                           f"{logs.scenario!r}: one of them was edited", action="eject", gate=GATE))
    out += settings_findings(rep, logs, where)
    for name in sorted(set(logs.detail) & set(logs.summary)):
        printed = Tolerance(abs=logs.summary_resolution.get(name, 0.0), rel=1e-5, why="the summary's printed digits")
        out.append(compare(name, logs.summary[name], logs.detail[name], printed, gate=GATE, context=where))
    return [f for f in out + _against_line(rep, line, logs.detail, where) if f is not None]


def settings_findings(rep: RepMetrics, logs: LoadgenRep, where: str) -> list[Finding]:
    """The LoadGen settings the line states against the ones LoadGen's own log says it was given (the evidence
    model's ``loadgen_settings.stated_again``): a copy of the load that disagrees was edited (EVIDENCE_CORRUPT)."""
    wrong = []
    for copy in evidence_model().record("loadgen_settings").stated_again:
        stated = rep.workload.get(f"loadgen.settings.{copy.field}")
        logged = logs.requested.get(copy.key)
        if stated is None or logged is None or (copy.scenario is not None and logs.scenario != copy.scenario):
            continue
        want = stated * copy.factor if isinstance(stated, (int, float)) and not isinstance(stated, bool) else stated
        value, cited = logged
        same = (abs(float(value) - float(want)) <= 1e-6 * max(1.0, abs(float(want)))
                if isinstance(value, (int, float)) and not isinstance(value, bool)
                and isinstance(want, (int, float)) and not isinstance(want, bool) else value == want)
        if not same:
            wrong.append((copy.field, stated, copy.key, value, cited))
    if not wrong:
        return []
    shown = "; ".join(f"loadgen.settings.{f} {s!r} vs {k} {v!r}" for f, s, k, v, _ in wrong[:5])
    return [finding("EVIDENCE_CORRUPT", "FAIL", f"{where}the bench line's LoadGen settings disagree with what LoadGen's "
                    f"own log says it was given: {shown}: one copy of the load was edited",
                    measured={f"loadgen.settings.{f}": s for f, s, _, _, _ in wrong},
                    threshold={k: v for _, _, k, v, _ in wrong}, evidence=[w[4] for w in wrong[:3]], action="eject",
                    gate=GATE)]


def _span(rate: Stated | None, count: float, what: str) -> Stated | None:
    """LoadGen's span (s) from a rate: ``count`` over it; None where the rate is not a number."""
    if rate is None or isinstance(rate.value, bool) or not isinstance(rate.value, (int, float)) or rate.value <= 0:
        return None
    return Stated(f"{rate.source}: {count:g} {what} at that rate", count / rate.value, rate.evidence)


def _bad_rate(rate: Stated | None) -> bool:
    return rate is not None and _span(rate, 1, "") is None


def _rate(stated: Stated | None) -> float | None:
    """A positive finite rate LoadGen states, else None."""
    if stated is None or isinstance(stated.value, bool) or not isinstance(stated.value, (int, float)):
        return None
    return float(stated.value) if stated.value > 0 else None


def _against_line(rep: RepMetrics, line: Stated, stated: dict[str, Stated], where: str) -> list[Finding | None]:
    duration = _at(line, "duration", rep.duration_s)
    after = (_at(line, "duration after the first request started", rep.duration_s - rep.first_start_s)
             if rep.first_start_s is not None else None)
    rate, tokens = stated.get("samples_per_second"), stated.get("tokens_per_second")
    total = rep.metrics.get("total_output_tokens")
    all_ok = rep.n_ok == rep.n_requests > 0 and total is not None
    out: list[Finding | None] = [
        finding("EVIDENCE_CORRUPT", "FAIL", f"{where}{r.source} is {r.value!r} for a rep of {rep.n_requests} "
                "requests: LoadGen completed them, so its rate is a positive number",
                evidence=[e for e in (r.evidence, line.evidence) if e], action="eject", gate=GATE)
        for r in (rate, tokens if all_ok else None) if r is not None and _bad_rate(r)]
    spans = [_span(rate, rep.n_requests, "samples")] + \
        ([_span(tokens, total, "tokens")] if all_ok and total is not None else [])
    for span in filter(None, spans):
        out.append(compare("LoadGen's span (s)", span, duration, REPORT_LAG, relation="at_most", gate=GATE,
                           context=where))
        if after is not None:
            out.append(compare("LoadGen's span (s)", span, after, CLOCK, relation="at_least", gate=GATE,
                               context=where))
    samples_rate, tokens_rate = _rate(rate), _rate(tokens)
    if all_ok and total is not None and tokens is not None and samples_rate and tokens_rate:
        per = Stated(f"{tokens.source} / samples per second", tokens_rate / samples_rate, tokens.evidence)
        out.append(compare("output tokens per request", per, _at(line, "total_output_tokens / requests",
                                                                 total / rep.n_requests),
                           PER_SAMPLE, gate=GATE, context=where))
    latency = stated.get("max_latency_s")
    if latency is not None:
        out.append(compare("longest latency (s)", latency, duration, REPORT_LAG, relation="at_most", gate=GATE,
                           context=where))
        if rep.max_latency_s is not None:
            out.append(compare("longest latency (s)", latency, _at(line, "longest request", rep.max_latency_s),
                               CLOCK, relation="at_least", gate=GATE, context=where))
    return out


def _carries(name: str) -> Callable[[RepMetrics], bool]:
    return lambda rep: name in rep.arrays


REQUIRED_PRESENT: dict[str, Callable[[RepMetrics], bool]] = {
    **{name: _carries(name) for name in OPTIONAL_ARRAYS},
    "scenario": lambda rep: "scenario" in rep.workload,
    "loadgen.settings": lambda rep: any(k.startswith("loadgen.settings.") for k in rep.workload),
    "loadgen.wall_s": lambda rep: rep.loadgen_wall_s is not None,
    "contention": lambda rep: rep.contention is not None,
    "started_at": lambda rep: rep.started_at is not None,
}
"""How to tell a rep's line carries each field the evidence model says the harness always writes."""
REAL_LOADGEN = ("min_latency_s", "mean_latency_s")
"""What a real LoadGen writes besides ``NEEDED`` at the end of every performance test (results.cc)."""


def real_loadgen_findings(rep: RepMetrics, line: Stated, logs: LoadgenRep, leg: str, sealed: bool) -> list[Finding]:
    """A harness rep's line against what a real LoadGen's log of it states: every sample's
    issue-to-completion (shortest, mean, longest) and the test's power window. Required where the detail log
    is a real LoadGen's (it states its version) and wherever the run is sealed."""
    if rep.schema_version is None or rep.loadgen_dir is None or not logs.detail_read:
        return []
    where = f"leg {leg!r} rep {rep.rep}: "
    if logs.version is None and not sealed:
        return []  # a hand-written log (the synthetic fixtures'): held to what it states only
    lacking = ([] if logs.version is not None else ["loadgen_version"]) + \
        [k for k in REAL_LOADGEN if k not in logs.detail] + ([] if logs.power else ["power_begin/power_end"]) + \
        [f"(the line's) {name}" for name in evidence_model().record("bench_line").required
         if not REQUIRED_PRESENT[name](rep)]
    if lacking:
        return [finding("EVIDENCE_MISSING", "FAIL", f"{where}the rep's LoadGen records lack {', '.join(lacking)}: "
                        "LoadGen writes its version, every sample's latencies and its power window in every log, and "
                        "the harness writes each request's issue delay and LoadGen's wall time, so a witness of the "
                        "rep's clock was removed", evidence=[e for e in (line.evidence,) if e], action="eject",
                        gate=GATE)]
    assert rep.loadgen_latency_s is not None and logs.power is not None
    shortest, mean, longest = rep.loadgen_latency_s
    issued = "the line's issue delay + latency"
    out: list[Finding | None] = [
        f for what, key, mine in (("shortest", "min_latency_s", shortest), ("mean", "mean_latency_s", mean),
                                  ("longest", "max_latency_s", longest)) if key in logs.detail
        for f in _completion_stamped(f"{what} issue-to-completion (s)", logs.detail[key],
                                     _at(line, f"{what} {issued}", mine), where)]
    begin, end, cited = logs.power
    window = Stated("LoadGen's power window (power_end - power_begin)", end - begin, cited)
    out += _completion_stamped("the rep's span (s)", window, _at(line, "duration", rep.duration_s), where)
    if rep.started_at is not None:
        off = (begin - rep.started_at) % ZONE_S
        if min(off, ZONE_S - off) > POWER_BEGIN_SLACK_S:
            out.append(finding("EVIDENCE_CORRUPT", "FAIL", f"{where}LoadGen's power_begin is {min(off, ZONE_S - off):.3f} s "
                               f"away from the line's started_at (modulo a time zone): the rep did not start when "
                               "its line says", measured={"power_begin": begin, "started_at": rep.started_at},
                               threshold={"slack_s": POWER_BEGIN_SLACK_S, "modulo_s": ZONE_S},
                               evidence=[cited], action="eject", gate=GATE))
    return [f for f in out if f is not None]


def _completion_stamped(quantity: str, loadgen: Stated, line: Stated, where: str) -> list[Finding | None]:
    """A time LoadGen ends at a sample's reported completion against the client's own: never shorter (within
    the two clocks' reads), longer by at most the client's report lag."""
    return [compare(quantity, loadgen, line, CLOCK, relation="at_least", gate=GATE, context=where),
            compare(quantity, loadgen, line, REPORT_LAG, relation="at_most", gate=GATE, context=where)]


def clock_findings(rep: RepMetrics, line: Stated, leg: str) -> list[Finding]:
    """A harness line's duration against the other records of its clock: the last request's end (the
    harness writes the duration as it, where LoadGen scheduled the rep), LoadGen's wall time, the
    line's own start and end stamps, the contention samples taken before and after it and its CPU window.
    Held where the rep is a recording (a sealed run, or a real LoadGen's log of it): what the harness's
    writer does by construction binds what it wrote, not a hand-built line."""
    if rep.schema_version is None:
        return []
    where = f"leg {leg!r} rep {rep.rep}: "
    duration = _at(line, "duration", rep.duration_s)
    out: list[Finding | None] = []
    if rep.loadgen_dir is not None and rep.last_end_s is not None:
        out.append(compare("the rep's duration (s)", duration, _at(line, "last request's end", rep.last_end_s),
                           SAME_READS, gate=GATE, context=where))
    if rep.loadgen_wall_s is not None:
        wall = _at(line, "loadgen.wall_s", rep.loadgen_wall_s)
        out.append(compare("the rep's duration (s)", duration, wall, CLOCK, relation="at_most", gate=GATE,
                           context=where))
        if rep.ended_at is not None and rep.started_at is not None:
            stamps = _at(line, "ended_at - started_at", rep.ended_at - rep.started_at)
            out.append(compare("LoadGen's wall time (s)", stamps, wall, CLOCK, gate=GATE, context=where))
    for what, span in _contention_spans(rep):
        out.append(compare("the rep's duration (s)", duration, _at(line, what, span), CLOCK, relation="at_most",
                           gate=GATE, context=where))
    return [f for f in out if f is not None]


def _contention_spans(rep: RepMetrics) -> list[tuple[str, float]]:
    """The spans around the rep its contention record states: end sample's time less the start sample's,
    and the CPU window's length (each only where it is a finite number)."""
    con = rep.contention if isinstance(rep.contention, dict) else {}
    start, end, window = con.get("start"), con.get("end"), con.get("window")
    out = []
    first, last = (_finite(s.get("t")) if isinstance(s, dict) else None for s in (start, end))
    if first is not None and last is not None:
        out.append(("contention end.t - start.t", last - first))
    wall = _finite(window.get("wall_s")) if isinstance(window, dict) else None
    if wall is not None:
        out.append(("contention.window.wall_s", wall))
    return out


def _finite(value: object) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


APPLIED = ("loadgen_span_within_duration", "loadgen_span_after_first_start", "loadgen_tokens_per_sample",
           "loadgen_latency_bounds", "loadgen_scenario", "summary_is_detail", "loadgen_max_latency",
           "loadgen_min_latency", "loadgen_mean_latency", "loadgen_power_window", "loadgen_power_begin",
           "duration_is_last_end", "duration_within_loadgen_wall", "clock_is_loadgen_wall",
           "duration_within_samples", "duration_within_cpu_window", "counters_requests", "counters_tokens",
           "counters_monotone", "counters_between_reps", "server_log_requests")
"""The model's witness relations this module applies (``loadgen_findings``, ``real_loadgen_findings``,
``clock_findings``, ``counter_findings``, ``between_reps_findings``, ``server_log_findings``)."""
APPLIED_ELSEWHERE = {
    "timeline_within_duration": "auditor/rederive.py (while the rep is read: an unusable rep)",
    "aggregates_from_arrays": "auditor/rederive.py (counts exactly) and gates/measurement.py check_line_aggregates",
    "loadgen_issued": "auditor/rederive.py (the line's issued) and gates/workload.py (LoadGen's issued count)",
    "engine_counters": "gates/engine_witness.py (vLLM's /metrics around each rep)",
    "opbench_rig_count": "gates/opbench.py check_rig_samples (an op bench's lines against its rig.json)",
    "opbench_rig_time": "gates/opbench.py check_rig_samples (an op bench's lines against its rig.json)",
}
"""The model's witness relations applied where the quantities are read or by their own gate."""


PROCESS_KEYS = ("process.pid", "process.started_at")
"""What names the server process a bench line's server_info copy was read from."""
BETWEEN = ("requests_admitted", "requests_completed", "tokens_generated", "response_cache_hits")


def _after(rep: RepMetrics) -> tuple[tuple[Any, ...], dict[str, float]] | None:
    """The server process a rep's server_info copy names and its running totals after the rep."""
    info = rep.server_info or {}
    states = info.get("internal_states")
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else None
    process = tuple(info.get(k) for k in PROCESS_KEYS)
    if first is None or None in process:
        return None
    totals = {k: float(v) for k, v in first.items()
              if k in (*BETWEEN, "queued", "running_batch") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return process, totals


def between_reps_findings(run: Path, leg: LegEvidence) -> list[Finding]:
    """The server's running totals after each rep against the next rep of the same server process: between
    two reps nothing but the later rep's requests reaches it, so its totals advance by exactly that rep's
    requests and (counted from usage, no response-cache hit) tokens; at least by them where the earlier rep
    left requests in flight."""
    found: list[Finding | None] = []
    ordered = sorted((r for r in leg.reps if r.started_at is not None), key=lambda r: (r.started_at, r.rep))
    for prev, rep in zip(ordered, ordered[1:]):
        a, b = _after(prev), _after(rep)
        if a is None or b is None or a[0] != b[0] or not all(k in a[1] and k in b[1] for k in BETWEEN):
            continue
        delta = {k: b[1][k] - a[1][k] for k in BETWEEN}
        exact = rep.n_ok == rep.n_requests and not (a[1].get("queued", 0) or a[1].get("running_batch", 0))
        relation: Relation = "equal" if exact else "at_least"
        where = f"leg {leg.name!r} rep {rep.rep}: "
        line = Stated(f"bench line {rep.ref.line}", None, line_evidence(run, rep.ref))
        server = f"the server's totals after rep {rep.rep} less after rep {prev.rep}"
        found.append(compare("requests", Stated(f"{server}: requests_admitted", delta["requests_admitted"]),
                             _at(line, "requests", rep.n_requests), EXACT, relation=relation, gate=GATE, context=where))
        total = rep.metrics.get("total_output_tokens")
        if total is not None and rep.usage_counted and delta["response_cache_hits"] == 0:
            found.append(compare("output tokens", Stated(f"{server}: tokens_generated", delta["tokens_generated"]),
                                 _at(line, "total_output_tokens", total), EXACT, relation=relation, gate=GATE,
                                 context=where))
    return [f for f in found if f is not None]


def _in_flight(rep: RepMetrics) -> bool:
    """The server still held requests when the rep's after-sample was read."""
    return rep.server_counters is None or _busy(rep.server_counters[1])  # unknown: not assumed idle


def _busy(totals: dict[str, float]) -> bool:
    """Requests admitted and not finished, or queued, in one sample of the server's totals."""
    finished = sum(totals.get(k, 0.0) for k in FINISHED)
    return totals.get("requests_admitted", finished) > finished or totals.get("queued", 0.0) > 0


def counter_findings(rep: RepMetrics, line: Stated, leg: str, spill: bool = False) -> tuple[list[Finding], list[str]]:
    """The server's counter deltas over the rep against the line's requests and tokens. ``spill``: the
    leg's previous rep left requests behind (failed client-side, or still in the server), which the
    server may finish during this rep: then its totals bound the line only from below."""
    where = f"leg {leg!r} rep {rep.rep}: "
    if rep.server_counters is None:
        return [], []
    before, after = rep.server_counters
    spill = spill or _busy(before)
    delta = {k: after[k] - before[k] for k in before.keys() & after.keys()}
    out: list[Finding | None] = [finding("EVIDENCE_CORRUPT", "FAIL", f"{where}the server's {k} went from {before[k]:g} to {after[k]:g} "
                   "during the rep: a running total never falls", measured={"before": before[k], "after": after[k]},
                   evidence=[], action="eject", gate=GATE)
           for k in MONOTONE if k in delta and delta[k] < 0]
    if not all(k in delta for k in FINISHED + ("tokens_generated",)):
        return [f for f in out if f is not None], [f"second witness of leg {leg!r}: the server's counters do not state requests finished and "
                     "tokens generated (not the embedded engine's), so they are not held against the line"]
    server = "the server's counters (after - before)"
    notes = []
    if spill:
        notes.append(f"second witness of leg {leg!r} rep {rep.rep}: the previous rep left requests behind, so the "
                     "server's totals bound this rep's line from below only")
    else:
        finished = Stated(f"{server}: requests finished", sum(delta[k] for k in FINISHED), line.evidence)
        out.append(compare("requests", finished, _at(line, "requests", rep.n_requests), EXACT, relation="at_most",
                           gate=GATE, context=where))
    completed = Stated(f"{server}: requests_completed", delta["requests_completed"], line.evidence)
    out.append(compare("successful requests", completed, _at(line, "successful requests", rep.n_ok), EXACT,
                       relation="at_least", gate=GATE, context=where))
    total = rep.metrics.get("total_output_tokens")
    if total is not None and rep.usage_counted and delta.get("response_cache_hits", 0) == 0:
        tokens = Stated(f"{server}: tokens_generated", delta["tokens_generated"], line.evidence)
        relation: Relation = "equal" if rep.n_ok == rep.n_requests and not spill else "at_least"
        out.append(compare("output tokens", tokens, _at(line, "total_output_tokens", total), EXACT,
                           relation=relation, gate=GATE, context=where))
    return [f for f in out if f is not None], notes


def server_log_findings(run: Path, leg: LegEvidence) -> list[Finding]:
    """The streamed requests perfwarden's embedded server logged (one line each as it finished one) against the
    leg's reps: the harness streams every bench request and nothing else, so one server process answered at most
    the requests its reps' lines record. Held where the log is the embedded server's (it states its
    ``effective_config``), one process wrote it (a resumed run restarts the server, and a rep interrupted before
    its line was written is run again), the leg did not fail and every bench line is a usable rep. Not a lower
    bound: the server writes its line after a request's last chunk, which a client closing at once may cut off.
    Found by the coherent-forgery explorer: a rep dropped from the lines (the later ones renumbered, sealed afresh)
    left the server's totals as the only record of it, and the first rep has none before it."""
    log = leg.log
    if (log is None or log.starts != 1 or leg.corrupt_reps or leg.torn_tail or not leg.reps
            or (leg.spec is not None and leg.spec.status != "ok")
            or not any(c.source == "effective_config" for c in log.copies)):
        return []
    requests = sum(rep.n_requests for rep in leg.reps)
    reps = ", ".join(str(rep.rep) for rep in sorted(leg.reps, key=lambda r: r.rep))
    served = Stated("the server log's streamed requests ('request done ... stream=True' lines)", log.streamed_done,
                    log.evidence(run, None))
    lines = Stated(f"the bench lines' requests (reps {reps})", requests, None)
    out = compare("requests", served, lines, EXACT, relation="at_most", gate=GATE, context=f"leg {leg.name!r}: ")
    return [] if out is None else [out]
