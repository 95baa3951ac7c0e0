"""The finding-code catalog: one place, stable names (answer keys refer to them; never rename).

Design §3 fixes the starting set; codes added later are marked ``added``. Each entry says what the code
means so that reviewers and the persona prompt read the same definition.
"""

from __future__ import annotations

CATALOG: dict[str, str] = {
    # evidence
    "EVIDENCE_MISSING": "A file or field a gate needs is absent; the check fails closed.",
    "EVIDENCE_CORRUPT": "Raw evidence is torn (last line unfinished: FLAG) or corrupt mid-file (FAIL).",
    "EVIDENCE_TAMPERED": "Sealed evidence was edited, reordered, deleted from or added to after the harness wrote "
                         "it, or its seal chain was broken, cut short or replaced (added).",
    "REPORTED_MISMATCH": "A number the producer (or a file's own aggregate) reports disagrees with the raw.",
    # conditions
    "CONDITIONS_DIFFER": "The legs differ in more than the declared change (a confound).",
    "CONDITIONS_MISREPORTED": "The producer's summary of the conditions misstates what the servers reported.",
    "CONTENDED_LEG": "Another busy process, or a busy machine, shared the CPU during a rep.",
    "CLIENT_LAG": "A rep's client times exceed the engine's own account of them by more than the client's "
                  "transport: its tokens reached the client late (a stalled frontend or client) or its line was "
                  "stretched; the engine's counters cannot tell which, so the rep is re-measured (added).",
    "NOT_INTERLEAVED": "Compared legs were measured in separate blocks, not interleaved: drift can pose as a delta (added).",
    # statistics
    "NOISY_BASELINE": "Baseline rep spread exceeds the noise band; re-measure.",
    "BASELINE_DRIFT": "The re-derived baseline disagrees with a previously provided baseline number.",
    "DELTA_NOT_SIGNIFICANT": "The claimed delta is inside the noise band or not significant at the rep level.",
    "DELTA_REGRESSION": "The headline got worse: the candidate is worse than the baseline outside the noise band and "
                        "significantly at the rep level -- a regression, not an undecided delta (added).",
    "UNREPRESENTATIVE_BASELINE": "The claim's baseline is significantly slower than the other legs of the run measured "
                                 "with its configuration and load: the delta rests on a handicapped baseline, or on a "
                                 "machine slower while the step ran (added).",
    "HIDDEN_LATENCY_REGRESSION": "A throughput headline hides a TTFT/TPOT/ITL/e2e regression.",
    # lever
    "ORTHOGONAL_LEVER": "A class-B serving lever (spec decode, batching, caching, …) is presented as a kernel win.",
    "NOT_ENGAGED": "The declared kernel/override never engaged according to the server log.",
    "UNKNOWN_KNOB": "A changed server knob the lever registry does not know: unclassified, it takes no class or "
                    "losslessness from the producer and needs exact parity or a passing registered quality eval "
                    "(added). Also a server_info key, equal in both legs or not, that the leg's target does not "
                    "report or that no listed target can be attributed (auditor/data/target_keys.json).",
    # do no harm
    "REQUEST_ERRORS": "Requests failed or errored.",
    "SERVER_CRASH": "The server crashed or a leg died.",
    # correctness
    "PARITY_MISMATCH": "Greedy outputs differ from the true baseline beyond what the mechanism allows.",
    "NONCOHERENT_REFERENCE": "The reference outputs are gibberish, so parity against them proves nothing.",
    "QUALITY_EVAL_MISSING": "A lossy mechanism lacks a completed, registered quality eval.",
    "QUALITY_REGRESSION": "A registered quality eval shows the candidate worse than the baseline (added).",
    "CORRECTNESS_UNVERIFIABLE": "A leg served random weights (a performance-only run: the embedded target's "
                                "weights=random, SGLang/vLLM's load_format=dummy): its outputs are noise by "
                                "construction, so no parity, coherence or quality check can show the change keeps "
                                "the model correct; at most FLAG (added).",
    "OUTPUT_LENGTH_SHIFT": "The output length distribution changed (truncation or early EOS).",
    "CACHING_SUSPECTED": "Results are explained by caching: response cache, warm-vs-cold prefix cache, TEST04.",
    # op-bench harness
    "HARNESS_SELF_COMPARE": "The op benchmark compares a backend against itself.",
    "HARNESS_INCORRECT": "The candidate op is incorrect, untested on enough seeds, or timed badly.",
    "HARNESS_DISPATCH_MISMATCH": "The benchmark timed a dispatch path the server does not run.",
    "HARNESS_UNSERVED_SHAPES": "The benchmark timed shapes the server does not serve.",
    "ISOLATED_E2E_GAP": "The isolated speedup is inconsistent with the e2e delta (Amdahl).",
    "IMPLAUSIBLE_SPEEDUP": "A speedup faster than the rig's measured bandwidth allows for the op's bytes (beyond 10x where the rig recorded no roofline), or beyond the Amdahl bound, without extra proof.",
    "UNEXPLAINED_DELTA": "The e2e delta exceeds what the declared change can produce: more than the Amdahl bound of "
                         "removing the changed op's whole profile share (added).",
    # profile
    "PROFILE_MISATTRIBUTION": "The op routed for optimization is not hot once fragments are merged.",
    # prose
    "UNTRACED_CLAIM": "A number in a report traces to no re-derived value, or is presented as measured when it is not.",
    # auditor itself
    "AUDITOR_DEGRADED": "Part of the audit could not run (tool failure); recorded, never turned into PASS (added).",

    # MLPerf LoadGen compliance (auditor/mlperf.py)
    "MLPERF_THRESHOLD": "MLPerf TEST01/TEST05: the compliance score is outside the allowed band (INFO when inside) "
                        "(added).",
    "MLPERF_INVALID_RESULT": "An MLPerf run is INVALID or not a PerformanceOnly run (added).",
    "MLPERF_SAME_RUN": "The MLPerf compliance logs are (a copy of) the reference run (added).",
    "MLPERF_AUDIT_SETTINGS": "The MLPerf compliance run's audit settings do not match its test (added).",
    "MLPERF_LOG_ERRORS": "LoadGen reported errors during an MLPerf run (added).",
    "MLPERF_DUPLICATE_KEY": "A LoadGen key the verdict uses occurs more than once with different values (added).",
    "MLPERF_LOADGEN_VERSION": "The MLPerf runs used different LoadGen builds (INFO) (added).",
}


def known(code: str) -> bool:
    """True for codes in the catalog; unknown codes are a bug in a gate, not a user error."""
    return code in CATALOG
