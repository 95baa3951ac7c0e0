"""Caching confounds: a response cache, warm-vs-cold prefix caches, and a TEST04-style leg.

MLPerf's TEST04 runs the same sample repeatedly: a system that caches results beats its own reference
run. Here the ``caching_audit`` leg repeats one prompt with the candidate's config; it must not beat the
candidate's varied-prompt run beyond what prefix caching explains.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from perfwarden.agents.auditor import registry
from perfwarden.agents.auditor.evidence import LegEvidence, line_evidence
from perfwarden.agents.auditor.findings import Findings
from perfwarden.agents.auditor.gates.conditions import flatten, key_evidence
from perfwarden.agents.auditor.gates.correctness import server_flag
from perfwarden.agents.auditor.gates.lever import RESPONSE_CACHE_HIT

PREFIX_HIT_RATE_MAX_GAP = 0.10
"""Prefix-cache hit rates of two legs may differ by this much (absolute) before warm-vs-cold confounds."""
TEST04_THRESHOLD_PCT = 10.0
"""TEST04's own threshold: the repeated-sample run may not beat the reference by more than 10%."""


def check_response_cache(run: Path, legs: list[LegEvidence], findings: Findings) -> None:
    """A response cache returns stored answers: it measures the cache, not the server."""
    for leg in legs:
        info = flatten(leg.server_info or {})
        for key in info:
            if registry.is_response_cache_key(key) and server_flag(leg.server_info, key):
                findings.add("CACHING_SUSPECTED", "FAIL", f"leg {leg.name!r} ran with {key}={info[key]!r}: "
                             "responses may come from a cache, not from the model", measured=info[key],
                             threshold="off", evidence=key_evidence(run, leg, key), action="eject", gate="caching")
        if leg.log is not None:
            hits = [i for i, t in enumerate(leg.log.lines, 1) if RESPONSE_CACHE_HIT.search(t)]
            if hits:
                findings.add("CACHING_SUSPECTED", "FAIL", f"server log of {leg.name!r} shows {len(hits)} response-"
                             "cache hit(s)", measured=len(hits), threshold=0,
                             evidence=[leg.log.evidence(run, hits[0])], action="eject", gate="caching")


def check_prefix_warmth(run: Path, base: LegEvidence, cand: LegEvidence, findings: Findings,
                        not_checked: list[str]) -> None:
    """Prefix-cache hit rates must match across legs, or one leg ran warm and the other cold."""
    b = [r.cache_hit_rate for r in base.reps if r.cache_hit_rate is not None]
    c = [r.cache_hit_rate for r in cand.reps if r.cache_hit_rate is not None]
    if not b or not c:
        not_checked.append("prefix-cache warmth: the bench files carry no per-request cache_hits")
        return
    gap = float(np.median(c) - np.median(b))
    if abs(gap) > PREFIX_HIT_RATE_MAX_GAP:
        findings.add("CACHING_SUSPECTED", "FAIL", f"prefix-cache hit rate {np.median(b):.2f} (baseline) vs "
                     f"{np.median(c):.2f} (candidate): warm-vs-cold confound", measured=round(gap, 4),
                     threshold=PREFIX_HIT_RATE_MAX_GAP, evidence=[line_evidence(run, cand.reps[0].ref)],
                     action="remeasure", gate="caching")


def check_test04_leg(run: Path, reference: LegEvidence, caching: LegEvidence, findings: Findings) -> None:
    """The one-prompt-repeated leg must not beat the varied-prompt leg beyond prefix caching."""
    prefix_on = server_flag(caching.server_info, "enable_prefix_caching") or server_flag(
        caching.server_info, "prefix_cache") or (
        caching.server_info is not None and "disable_radix_cache" in caching.server_info
        and not server_flag(caching.server_info, "disable_radix_cache"))
    # With a prefix cache, repeated prompts legitimately skip prefill: judge decode time only.
    metric, higher = ("median_tpot_ms", False) if prefix_on else ("output_throughput", True)
    ref_v = [r.metrics[metric] for r in reference.reps if metric in r.metrics]
    cache_v = [r.metrics[metric] for r in caching.reps if metric in r.metrics]
    if not ref_v or not cache_v:
        findings.add("EVIDENCE_MISSING", "FAIL", f"caching-audit comparison needs {metric!r} in both legs",
                     gate="caching")
        return
    mr, mc = float(np.median(ref_v)), float(np.median(cache_v))
    better = (mc / mr - 1.0) * 100.0 if higher else (mr / mc - 1.0) * 100.0
    if better > TEST04_THRESHOLD_PCT:
        findings.add("CACHING_SUSPECTED", "FAIL", f"the repeated-prompt leg {caching.name!r} beats {reference.name!r} "
                     f"by {better:.1f}% on {metric}" + (" (decode only; prefix caching cannot explain it)"
                                                         if prefix_on else ""),
                     measured=round(better, 3), threshold=TEST04_THRESHOLD_PCT,
                     evidence=[line_evidence(run, caching.reps[0].ref)], action="eject", gate="caching")
