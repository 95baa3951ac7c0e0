"""Caching confounds: a response cache, warm-vs-cold prefix caches, and a TEST04-style leg.

MLPerf's TEST04 runs the same sample repeatedly: a system that caches results beats its own reference
run. Here the ``caching_audit`` leg repeats one prompt with the candidate's config; it must not beat the
candidate's varied-prompt run beyond what prefix caching explains.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from perfwarden.auditor import registry
from perfwarden.auditor.evidence import LegEvidence, line_evidence
from perfwarden.auditor.findings import Findings, GateResult, finding
from perfwarden.auditor.gates.conditions import flatten, key_evidence
from perfwarden.auditor.gates.correctness import server_flag
from perfwarden.auditor.gates.lever import raw_signals
from perfwarden.formats.records import Finding

PREFIX_HIT_RATE_MAX_GAP = 0.10
"""Prefix-cache hit rates of two legs may differ by this much (absolute) before warm-vs-cold confounds."""
TEST04_THRESHOLD_PCT = 10.0
"""TEST04's own threshold: the repeated-sample run may not beat the reference by more than 10%."""


def check_response_cache(run: Path, legs: list[LegEvidence]) -> GateResult[None]:
    """A response cache returns stored answers: it measures the cache, not the server. Read from
    server_info (the knob) and from the raw (the log's engagement and hit lines, hit counters)."""
    out: list[Finding] = []
    for leg in legs:
        info = flatten(leg.server_info or {})
        for key in info:
            if registry.is_response_cache_key(key) and server_flag(leg.server_info, key):
                out.append(finding("CACHING_SUSPECTED", "FAIL", f"leg {leg.name!r} ran with {key}={info[key]!r}: "
                                   "responses may come from a cache, not from the model", measured=info[key],
                                   threshold="off", evidence=key_evidence(run, leg, key), action="eject",
                                   gate="caching"))
        signals = [s for s in raw_signals(leg) if s.family == "response_cache"]
        if signals:
            hits = [s for s in signals if s.hit]
            log = leg.log
            # The log counts every line, not only those held. A leg whose log is gone can still show the cache
            # through its own counters: those signals are counted and the finding stands without a log line.
            n_hits = log.signal_count("response_cache", hit=True) if log is not None else len(hits)
            n_signals = log.signal_count("response_cache") if log is not None else len(signals)
            what = f"{n_hits} response-cache hit(s)" if hits else "a response cache engaged"
            source = "server log" if log is not None else "raw"
            out.append(finding("CACHING_SUSPECTED", "FAIL", f"{source} of {leg.name!r} shows {what} "
                               f"({signals[0].text[:100]!r})", measured=n_hits or n_signals, threshold=0,
                               evidence=[log.evidence(run, (hits or signals)[0].line)] if log is not None else [],
                               action="eject", gate="caching"))
    return GateResult(findings=out)


def check_prefix_warmth(run: Path, base: LegEvidence, cand: LegEvidence) -> GateResult[None]:
    """Prefix-cache hit rates must match across legs, or one leg ran warm and the other cold."""
    findings = Findings()
    not_checked: list[str] = []
    b = [r.cache_hit_rate for r in base.reps if r.cache_hit_rate is not None]
    c = [r.cache_hit_rate for r in cand.reps if r.cache_hit_rate is not None]
    if not b or not c:
        not_checked.append("prefix-cache warmth: the bench files carry no per-request cache_hits")
        return GateResult(findings.items, not_checked)
    gap = float(np.median(c) - np.median(b))
    if abs(gap) > PREFIX_HIT_RATE_MAX_GAP:
        findings.add("CACHING_SUSPECTED", "FAIL", f"prefix-cache hit rate {np.median(b):.2f} (baseline) vs "
                     f"{np.median(c):.2f} (candidate): warm-vs-cold confound", measured=round(gap, 4),
                     threshold=PREFIX_HIT_RATE_MAX_GAP, evidence=[line_evidence(run, cand.reps[0].ref)],
                     action="remeasure", gate="caching")
    return GateResult(findings.items, not_checked)


def _beat_pct(reference: LegEvidence, other: LegEvidence, metric: str, higher_is_better: bool) -> float | None:
    """How much ``other`` beats ``reference`` on ``metric`` (percent, positive = better); None if absent."""
    ref_v = [r.metrics[metric] for r in reference.reps if metric in r.metrics]
    oth_v = [r.metrics[metric] for r in other.reps if metric in r.metrics]
    if not ref_v or not oth_v:
        return None
    mr, mo = float(np.median(ref_v)), float(np.median(oth_v))
    if mr <= 0 or mo <= 0:
        return None
    return (mo / mr - 1.0) * 100.0 if higher_is_better else (mr / mo - 1.0) * 100.0


def check_test04_leg(run: Path, reference: LegEvidence, caching: LegEvidence) -> GateResult[None]:
    """The one-prompt-repeated leg must not beat the varied-prompt leg beyond what prefix caching (or a
    shorter prompt) explains. Both only shorten prefill, i.e. TTFT; decode time per token cannot be
    cached legitimately. So: a TPOT beat is caching; a throughput beat that TTFT does not explain is
    caching; a throughput beat that comes with a faster first token is prefill and is fine."""
    findings = Findings()
    tpot = _beat_pct(reference, caching, "median_tpot_ms", higher_is_better=False)
    tput = _beat_pct(reference, caching, "output_throughput", higher_is_better=True)
    ttft = _beat_pct(reference, caching, "median_ttft_ms", higher_is_better=False)
    if tput is None and tpot is None:
        findings.add("EVIDENCE_MISSING", "FAIL", "caching-audit comparison needs throughput or TPOT in both legs",
                     gate="caching")
        return GateResult(findings.items, [])
    evidence = [line_evidence(run, caching.reps[0].ref)]
    if tpot is not None and tpot > TEST04_THRESHOLD_PCT:
        findings.add("CACHING_SUSPECTED", "FAIL", f"the repeated-prompt leg {caching.name!r} decodes {tpot:.1f}% "
                     f"faster per token than {reference.name!r}: decode cannot be explained by prefix caching",
                     measured={"tpot_beat_pct": round(tpot, 3)}, threshold=TEST04_THRESHOLD_PCT, evidence=evidence,
                     action="eject", gate="caching")
    elif tput is not None and tput > TEST04_THRESHOLD_PCT and (ttft is None or ttft < TEST04_THRESHOLD_PCT):
        # Throughput also moves with scheduling (arrival pattern, batch composition), which repetition
        # may change legitimately; decode time per token cannot. So this is a question, not a verdict.
        findings.add("CACHING_SUSPECTED", "FLAG", f"the repeated-prompt leg {caching.name!r} beats "
                     f"{reference.name!r} by {tput:.1f}% on output_throughput with no faster first token and no faster "
                     "decode to explain it: unexplained, look before banking", measured={
                         "throughput_beat_pct": round(tput, 3), "ttft_beat_pct": ttft, "tpot_beat_pct": tpot},
                     threshold=TEST04_THRESHOLD_PCT, evidence=evidence, action="flag", gate="caching")
    return GateResult(findings.items, [])
