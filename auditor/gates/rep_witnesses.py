"""Every number of a rep has a second witness (issue 17 §3). A pure gate over loaded evidence.

A bench line is one writer's account of a rep. Two other writers recorded the same requests: LoadGen
(its detail and summary logs: what it issued, its rate, its longest latency, the tokens the client
reported to it) and the server (its own running totals, sampled just before and just after the rep:
``server_counters``). Where two of them state one quantity they must agree within the tolerance
below, or the rep is EVIDENCE_CORRUPT (FAIL): a line edited after the fact no longer matches the
records its editor did not rewrite. Each relation follows from how the quantities are defined:

- LoadGen's span (samples or tokens over its rate: first issue to last completion) lies inside the
  rep's clock: at most the line's ``duration``, at least the duration after the first request started
  (a request is sent after LoadGen issues it). This decides "LoadGen's rate against the line". Offline
  states samples and tokens per second; Server states completed tokens per second over the same span
  (its completed samples per second runs past the last completion: not read).
- LoadGen's tokens per sample (tokens / samples per second, Offline: the client reports each completed
  request's output tokens) equals the line's output tokens per request when every request succeeded.
- LoadGen's longest latency (issue to completion) is at least the line's longest request (sent after
  its issue) and at most the duration.
- The summary states the detail log's figures, to the digits it prints.
- The server completed at least the line's successful requests and finished at most all of them
  (nothing else used the server during a rep); with every output length the server's own usage count
  and no response-cache hit, it generated exactly the line's output tokens. Counters only grow.
"""

from __future__ import annotations

from pathlib import Path

from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import GateResult, finding
from perfwarden.auditor.gates.witness import EXACT, Stated, Tolerance, compare
from perfwarden.auditor.loadgen_logs import LoadgenRep
from perfwarden.auditor.rederive import RepMetrics

GATE = "witness"
CLOCK = Tolerance(abs=0.01, rel=0.002, why="LoadGen's clock and the client's read a few ms apart (recorded runs "
                  "here: under 1 ms); 6-digit logs")
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


def check_witnesses(run: Path, leg: LegEvidence) -> GateResult:
    """Hold every rep of ``leg`` against LoadGen's logs of it and the server's counters around it."""
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
        if rep.server_counters is not None:
            counted, note = counter_findings(rep, line, leg.name, spill)
            found += counted
            notes += note
        spill = rep.n_errors > 0 or _in_flight(rep)
        if found:
            cited = line_evidence(run, rep.ref)
            findings += [f.model_copy(update={"evidence": [cited, *f.evidence]}) for f in found]
    if no_logs:
        notes.append(f"second witness of leg {leg.name!r}: {no_logs} rep(s) have no LoadGen logs to hold their "
                     "lines against")
    # Reps with no server counters are listed by the audit, which also knows the engine's own witness
    # (``engine_witness``): a rep held against vLLM's /metrics has a second server-side account.
    return GateResult(findings=findings, not_checked=notes[:5])


def _at(line: Stated, source: str, value: float | None) -> Stated:
    return Stated(f"{line.source} ({source})", value, line.evidence)


def loadgen_findings(rep: RepMetrics, line: Stated, logs: LoadgenRep, leg: str) -> list:
    """LoadGen's own figures of one rep against its line (and its summary against its detail log)."""
    where = f"leg {leg!r} rep {rep.rep}: "
    out = []
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
    for name in sorted(set(logs.detail) & set(logs.summary)):
        printed = Tolerance(abs=logs.summary_resolution.get(name, 0.0), rel=1e-5, why="the summary's printed digits")
        out.append(compare(name, logs.summary[name], logs.detail[name], printed, gate=GATE, context=where))
    return [f for f in out + _against_line(rep, line, logs.detail, where) if f is not None]


def _span(rate: Stated | None, count: float, what: str) -> Stated | None:
    """LoadGen's span (s) from a rate: ``count`` over it; None where the rate is not a number."""
    if rate is None or isinstance(rate.value, bool) or not isinstance(rate.value, (int, float)) or rate.value <= 0:
        return None
    return Stated(f"{rate.source}: {count:g} {what} at that rate", count / rate.value, rate.evidence)


def _bad_rate(rate: Stated | None) -> bool:
    return rate is not None and _span(rate, 1, "") is None


def _against_line(rep: RepMetrics, line: Stated, stated: dict[str, Stated], where: str) -> list:
    duration = _at(line, "duration", rep.duration_s)
    after = (_at(line, "duration after the first request started", rep.duration_s - rep.first_start_s)
             if rep.first_start_s is not None else None)
    rate, tokens = stated.get("samples_per_second"), stated.get("tokens_per_second")
    total = rep.metrics.get("total_output_tokens")
    all_ok = rep.n_ok == rep.n_requests > 0 and total is not None
    out = [finding("EVIDENCE_CORRUPT", "FAIL", f"{where}{r.source} is {r.value!r} for a rep of {rep.n_requests} "
                   "requests: LoadGen completed them, so its rate is a positive number",
                   evidence=[e for e in (r.evidence, line.evidence) if e], action="eject", gate=GATE)
           for r in (rate, tokens if all_ok else None) if _bad_rate(r)]
    spans = [_span(rate, rep.n_requests, "samples")] + ([_span(tokens, total, "tokens")] if all_ok else [])
    for span in filter(None, spans):
        out.append(compare("LoadGen's span (s)", span, duration, CLOCK, relation="at_most", gate=GATE, context=where))
        if after is not None:
            out.append(compare("LoadGen's span (s)", span, after, CLOCK, relation="at_least", gate=GATE,
                               context=where))
    if all_ok and _span(rate, 1, "") and _span(tokens, 1, ""):
        per = Stated(f"{tokens.source} / samples per second", tokens.value / rate.value, tokens.evidence)
        out.append(compare("output tokens per request", per, _at(line, "total_output_tokens / requests",
                                                                 total / rep.n_requests),
                           PER_SAMPLE, gate=GATE, context=where))
    latency = stated.get("max_latency_s")
    if latency is not None:
        out.append(compare("longest latency (s)", latency, duration, CLOCK, relation="at_most", gate=GATE,
                           context=where))
        if rep.max_latency_s is not None:
            out.append(compare("longest latency (s)", latency, _at(line, "longest request", rep.max_latency_s),
                               CLOCK, relation="at_least", gate=GATE, context=where))
    return out


def _in_flight(rep: RepMetrics) -> bool:
    """The server still held requests when the rep's after-sample was read."""
    return rep.server_counters is None or _busy(rep.server_counters[1])  # unknown: not assumed idle


def _busy(totals: dict[str, float]) -> bool:
    """Requests admitted and not finished, or queued, in one sample of the server's totals."""
    finished = sum(totals.get(k, 0.0) for k in FINISHED)
    return totals.get("requests_admitted", finished) > finished or totals.get("queued", 0.0) > 0


def counter_findings(rep: RepMetrics, line: Stated, leg: str, spill: bool = False) -> tuple[list, list[str]]:
    """The server's counter deltas over the rep against the line's requests and tokens. ``spill``: the
    leg's previous rep left requests behind (failed client-side, or still in the server), which the
    server may finish during this rep: then its totals bound the line only from below."""
    where = f"leg {leg!r} rep {rep.rep}: "
    before, after = rep.server_counters
    spill = spill or _busy(before)
    delta = {k: after[k] - before[k] for k in before.keys() & after.keys()}
    out = [finding("EVIDENCE_CORRUPT", "FAIL", f"{where}the server's {k} went from {before[k]:g} to {after[k]:g} "
                   "during the rep: a running total never falls", measured={"before": before[k], "after": after[k]},
                   evidence=[], action="eject", gate=GATE)
           for k in MONOTONE if k in delta and delta[k] < 0]
    if not all(k in delta for k in FINISHED + ("tokens_generated",)):
        return out, [f"second witness of leg {leg!r}: the server's counters do not state requests finished and "
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
        relation = "equal" if rep.n_ok == rep.n_requests and not spill else "at_least"
        out.append(compare("output tokens", tokens, _at(line, "total_output_tokens", total), EXACT,
                           relation=relation, gate=GATE, context=where))
    return [f for f in out if f is not None], notes
