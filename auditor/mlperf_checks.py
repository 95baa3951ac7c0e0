"""MLPerf run checks: validity, LoadGen errors, duplicate keys, summary vs detail, same benchmark,
two different runs, LoadGen version.

``mlperf.py`` composes these rules into one audit.
"""

from __future__ import annotations

import re
from typing import Any

from perfwarden.auditor.mlperf_findings import (CONDITIONS_DIFFER, MLPERF_DUPLICATE_KEY,
                                                MLPERF_INVALID_RESULT, MLPERF_LOADGEN_VERSION,
                                                MLPERF_LOG_ERRORS, MLPERF_SAME_RUN, REPORTED_MISMATCH,
                                                _finding, file_evidence)
from perfwarden.auditor.mlperf_scores import (_PCT_LATENCY, _PCT_TH_LATENCY, RunLogs, Score, _as_number,
                                              _is_number, scores_agree, values_agree)
from perfwarden.formats.jsonl import LineRef
from perfwarden.formats.mlperf_log import DetailLog
from perfwarden.formats.records import Finding, Severity

# -------------------------------------------------------------------------------------- validity


def check_validity(run: RunLogs) -> list[Finding]:
    """``result_validity`` and ``Result is`` must be VALID; the run must be PerformanceOnly."""
    out = []
    rec = run.detail.record("result_validity")
    ent = run.summary.entry("Result is")
    bad = [(src, val, ref) for src, val, ref in (
        ("detail result_validity", rec.value if rec else None, rec.ref if rec else None),
        ("summary 'Result is'", ent.value if ent else None, ent.ref if ent else None),
    ) if val is not None and val != "VALID"]
    if bad:
        out.append(_finding(
            MLPERF_INVALID_RESULT, "FAIL", "validity",
            f"{run.label} run is not VALID: " + ", ".join(f"{src} = {val!r}" for src, val, _ in bad),
            measured={src: val for src, val, _ in bad}, threshold="VALID", refs=[r for *_, r in bad]))
    mode = run.detail.record("effective_test_mode")
    if mode is not None and mode.value != "PerformanceOnly":
        out.append(_finding(
            MLPERF_INVALID_RESULT, "FAIL", "validity",
            f"{run.label} run's effective_test_mode is {mode.value!r}, not 'PerformanceOnly'",
            measured=mode.value, threshold="PerformanceOnly", refs=[mode.ref]))
    return out


def check_log_errors(run: RunLogs) -> list[Finding]:
    """LoadGen errors during the run (the official TEST01 script crashes on these)."""
    n_detail = run.detail.num_errors()
    n_summary = run.summary.errors_reported
    if n_detail or n_summary:
        refs: list[LineRef | None] = [r.ref for r in run.detail.errors()[:5]]  # _finding drops a None
        stated = run.detail.record("num_errors")
        if stated is not None:
            refs.append(stated.ref)
        refs.append(run.summary.errors_ref)
        return [_finding(
            MLPERF_LOG_ERRORS, "FLAG", "loadgen_errors",
            f"LoadGen reported errors in the {run.label} run (detail: {n_detail}, summary: "
            f"{n_summary})", measured={"detail": n_detail, "summary": n_summary}, threshold=0,
            refs=refs)]
    return []


# Keys whose value feeds a verdict; a conflicting duplicate of one of them is suspicious.
_VERDICT_KEYS = re.compile(r"^(result_.*|early_stopping_.*|effective_.*|requested_.*|qsl_.*|sut_name|"
                           r"test_datetime|num_errors)$")


def check_duplicates(run: RunLogs) -> list[Finding]:
    """Keys the verdict uses that occur more than once with different values (first wins)."""
    out = []
    for key, recs in run.detail.conflicts().items():
        if not _VERDICT_KEYS.match(key):
            continue
        out.append(_finding(
            MLPERF_DUPLICATE_KEY, "FLAG", "duplicates",
            f"{run.label} detail log has {len(recs)} {key!r} lines with different values "
            f"({', '.join(repr(r.value) for r in recs[:4])}); the first (line {recs[0].line}) is used, "
            "as by the official parser", measured=[r.value for r in recs], threshold="one value",
            refs=[r.ref for r in recs[:5]]))
    return out


# ------------------------------------------------------------------------ summary vs detail agreement


_TEST_PARAMS = {
    "samples_per_query": "effective_samples_per_query",
    "target_qps": "effective_target_qps",
    "target_latency (ns)": "effective_target_latency_ns",
    "max_async_queries": "effective_max_async_queries",
    "min_duration (ms)": "effective_min_duration_ms",
    "max_duration (ms)": "effective_max_duration_ms",
    "min_query_count": "effective_min_query_count",
    "max_query_count": "effective_max_query_count",
    "qsl_rng_seed": "effective_qsl_rng_seed",
    "sample_index_rng_seed": "effective_sample_index_rng_seed",
    "schedule_rng_seed": "effective_schedule_rng_seed",
    "accuracy_log_rng_seed": "effective_accuracy_log_rng_seed",
    "accuracy_log_probability": "effective_accuracy_log_probability",
    "accuracy_log_sampling_target": "effective_accuracy_log_sampling_target",
    "print_timestamps": "effective_print_timestamps",
    "performance_issue_unique": "effective_performance_issue_unique",
    "performance_issue_same": "effective_performance_issue_same",
    "performance_issue_same_index": "effective_performance_issue_same_index",
    "performance_sample_count": "effective_performance_sample_count",
}
_RESULT_FIELDS = {
    "SUT name": "sut_name",
    "Mode": "effective_test_mode",
    "Min duration satisfied": "result_min_duration_met",
    "Min queries satisfied": "result_min_queries_met",
    "Early stopping satisfied": "early_stopping_met",
    "Performance constraints satisfied": "result_perf_constraints_met",
    "Samples per second": "result_samples_per_second",
    "Completed samples per second": "result_completed_samples_per_sec",
    "Scheduled samples per second": "result_scheduled_samples_per_sec",
    "Tokens per second": "result_tokens_per_second",
    "QPS w/ loadgen overhead": "result_qps_with_loadgen_overhead",
    "QPS w/o loadgen overhead": "result_qps_without_loadgen_overhead",
}


def _detail_keys_for(summary_key: str, scenario: str) -> list[str]:
    """Detail keys a summary key is printed from, most specific first."""
    if summary_key in _RESULT_FIELDS:
        return [_RESULT_FIELDS[summary_key]]
    if summary_key in _TEST_PARAMS:
        return [_TEST_PARAMS[summary_key]]
    per_query = scenario == "MultiStream"
    for stat in ("min", "max", "mean"):
        if summary_key == f"{stat.capitalize()} latency (ns)":
            return ([f"result_{stat}_query_latency_ns"] if per_query else []) + [f"result_{stat}_latency_ns"]
    m = _PCT_LATENCY.fullmatch(summary_key) or _PCT_TH_LATENCY.fullmatch(summary_key)
    if m:
        p = f"{float(m.group(1)):.2f}"
        return ([f"result_{p}_percentile_per_query_latency_ns"] if per_query else []) + \
            [f"result_{p}_percentile_latency_ns"]
    return []


def check_summary_detail(run: RunLogs, scenario_detail: str, score_detail: Score | None,
                         score_summary: Score | None) -> list[Finding]:
    """A run's summary must say what its detail log says (LoadGen writes both from one run)."""
    out = []
    s, d = run.summary, run.detail
    gate = "summary_vs_detail"
    # Scenario.
    sc = s.entry("Scenario")
    dsc = d.record("effective_scenario")
    if sc is not None and dsc is not None and sc.value != dsc.value:
        out.append(_finding(REPORTED_MISMATCH, "FAIL", gate,
                            f"{run.label} summary says scenario {sc.value!r}, its detail log "
                            f"{dsc.value!r}", measured={"summary": sc.value, "detail": dsc.value},
                            threshold="equal", refs=[sc.ref, dsc.ref]))
    # Validity.
    sv = s.entry("Result is")
    dv = d.record("result_validity")
    if sv is not None and dv is not None and sv.value != dv.value:
        out.append(_finding(REPORTED_MISMATCH, "FAIL", gate,
                            f"{run.label} summary says {sv.value!r}, its detail log result_validity "
                            f"{dv.value!r}", measured={"summary": sv.value, "detail": dv.value},
                            threshold="equal", refs=[sv.ref, dv.ref]))
    # Score.
    if score_detail is not None and score_summary is not None and not scores_agree(score_summary,
                                                                                  score_detail):
        out.append(_finding(REPORTED_MISMATCH, "FAIL", gate,
                            f"{run.label} summary score {score_summary.key!r} = {score_summary.text} but "
                            f"the detail log's {score_detail.key!r} = {score_detail.value:g}: the two "
                            "logs are not from the same run",
                            measured={"summary": score_summary.value, "detail": score_detail.value},
                            threshold="equal to printed precision",
                            refs=[score_summary.ref, score_detail.ref]))
    # Everything else both logs state.
    skip = {"Scenario", "Result is"}
    if score_summary is not None:
        skip.add(score_summary.key)
    mismatches: list[tuple[str, str, str, Any, LineRef, LineRef]] = []
    for key, ent in s.first.items():
        if key in skip:
            continue
        for dkey in _detail_keys_for(key, scenario_detail):
            rec = d.record(dkey)
            if rec is None:
                continue
            if not values_agree(ent.value, rec.value):
                mismatches.append((key, ent.value, dkey, rec.value, ent.ref, rec.ref))
            break
    if mismatches:
        shown = "; ".join(f"{k!r}: summary {sv_!r} vs {dk!r} {dv_!r}"
                          for k, sv_, dk, dv_, _, _ in mismatches[:6])
        more = f" (+{len(mismatches) - 6} more)" if len(mismatches) > 6 else ""
        out.append(_finding(
            REPORTED_MISMATCH, "FAIL", gate,
            f"{run.label} summary disagrees with its detail log on {len(mismatches)} field(s): "
            f"{shown}{more}",
            measured={k: {"summary": sv_, "detail": dv_} for k, sv_, _, dv_, _, _ in mismatches},
            threshold="equal to printed precision",
            refs=[r for *_, a, b in mismatches[:10] for r in (a, b)]))
    return out


# ------------------------------------------------------------------------- same benchmark, same run


def check_scenarios(ref: RunLogs, comp: RunLogs, ref_scenario: str, comp_scenario: str) -> list[Finding]:
    """Reference and compliance must be the same scenario (official: exit 1 / TEST FAIL)."""
    if ref_scenario == comp_scenario:
        return []
    return [_finding(CONDITIONS_DIFFER, "FAIL", "scenario",
                     f"scenarios differ: reference {ref_scenario!r}, compliance {comp_scenario!r}",
                     measured={"reference": ref_scenario, "compliance": comp_scenario},
                     threshold="equal", refs=_line_refs(ref, "effective_scenario") + _line_refs(comp, "effective_scenario"))]


def _line_refs(run: RunLogs, key: str) -> list[LineRef]:
    """Where the detail log states ``key``: its first line, or none when the log has no such line."""
    rec = run.detail.record(key)
    return [rec.ref] if rec is not None else []


def _compare_key(ref: RunLogs, comp: RunLogs, key: str, severity: Severity, why: str,
                 gate: str = "same_benchmark") -> Finding | None:
    r, c = ref.detail.record(key), comp.detail.record(key)
    if r is None or c is None or r.value == c.value:
        return None
    return _finding(CONDITIONS_DIFFER, severity, gate,
                    f"{key} differs: reference {r.value!r}, compliance {c.value!r} ({why})",
                    measured={"reference": r.value, "compliance": c.value}, threshold="equal",
                    refs=[r.ref, c.ref])


# Benchmark settings mlperf.conf fixes per model and scenario (a submitter's user.conf cannot change
# them): two runs that differ in one are runs of different benchmarks. Key -> (value when the log does
# not print it -- older LoadGen builds omit the LLM keys, whose default is off --, why).
BENCHMARK_SETTINGS: dict[str, tuple[Any, str]] = {
    "use_token_latencies": (False, "token-latency (LLM) mode"),
    "server_ttft_latency": (None, "LLM Server TTFT constraint"),
    "server_tpot_latency": (None, "LLM Server TPOT constraint"),
    "target_latency_percentile": (None, "latency percentile"),
}
# Settings that identify the sample set or implementation: a difference is worth a reviewer's look,
# not proof of another benchmark (performance runs may legally load a subset of the dataset).
SAMPLE_SET_SETTINGS: dict[str, str] = {
    "qsl_reported_total_count": "a different dataset size (performance runs may legally load a subset)",
    "qsl_reported_performance_count": "a different performance sample set",
    "sut_name": "a different SUT implementation",
    "qsl_name": "a different QSL implementation",
}


def _setting(detail: DetailLog, name: str, default: Any) -> tuple[Any, LineRef | None]:
    for key in (f"effective_{name}", f"requested_{name}"):
        rec = detail.record(key)
        if rec is not None:
            return rec.value, rec.ref
    return default, None


def check_same_benchmark(ref: RunLogs, comp: RunLogs, scenario: str) -> tuple[list[Finding], list[str]]:
    """Both runs must measure the same benchmark under the same constraints.

    LoadGen logs carry no model or benchmark name, so the benchmark is identified by the settings
    mlperf.conf fixes per model: token-latency (LLM) mode, the LLM Server TTFT/TPOT constraints, the
    Server latency target and the stream scenarios' latency percentile (FAIL when they differ). The
    dataset size is *not* a fingerprint: a performance run may load a subset (the submission checker
    only bounds the performance sample count from below), so a different ``qsl_reported_total_count``,
    performance sample set, SUT or QSL name is a FLAG for a reviewer, not a different benchmark.
    """
    out: list[Finding] = []
    not_checked: list[str] = []
    for name, (default, why) in BENCHMARK_SETTINGS.items():
        (rv, rr), (cv, cr) = _setting(ref.detail, name, default), _setting(comp.detail, name, default)
        if _as_number(rv) != _as_number(cv) if _is_number(rv) or _is_number(cv) else rv != cv:
            out.append(_finding(CONDITIONS_DIFFER, "FAIL", "same_benchmark",
                                f"{name} differs: reference {rv!r}, compliance {cv!r} ({why} is fixed per benchmark "
                                "by mlperf.conf: the runs are of different benchmarks)",
                                measured={"reference": rv, "compliance": cv}, threshold="equal",
                                refs=[r for r in (rr, cr) if r is not None]))
    if scenario == "Server":
        checked = False
        for key in ("effective_target_latency_ns", "requested_server_target_latency_ns"):
            if ref.detail.record(key) is not None and comp.detail.record(key) is not None:
                checked = True
            f = _compare_key(ref, comp, key, "FAIL", "Server results under different latency "
                             "targets are not comparable")
            if f:
                out.append(f)
        if not checked:
            not_checked.append("Server target latency: effective_target_latency_ns is absent")
    # LoadGen settings (samples per query, the loaded sample count, concatenation): mlperf_settings.
    for key, why in SAMPLE_SET_SETTINGS.items():
        f = _compare_key(ref, comp, key, "FLAG", why)
        if f:
            out.append(f)
    if ref.detail.record("qsl_reported_total_count") is None or comp.detail.record("qsl_reported_total_count") is None:
        not_checked.append("dataset size: qsl_reported_total_count is absent from a detail log")
    if not any(x.severity != "INFO" for x in out):
        measured = {k: _setting(ref.detail, k, d)[0] for k, (d, _) in BENCHMARK_SETTINGS.items()}
        if scenario == "Server":
            measured["effective_target_latency_ns"] = ref.detail.get("effective_target_latency_ns")
        out.append(_finding(CONDITIONS_DIFFER, "INFO", "same_benchmark",
                            "reference and compliance runs agree on the benchmark settings (token-latency mode, "
                            "LLM constraints, latency percentile" + (", latency target" if scenario == "Server"
                                                                      else "") + ") and on the sample set",
                            measured=measured, threshold="equal"))
    return out, not_checked


_FINGERPRINT = re.compile(r"^(result_.*(latency_ns|per_sec|per_second|overhead)|early_stopping_latency_.*)$")


def run_fingerprint(detail: DetailLog) -> dict[str, float]:
    """Result statistics that two different runs essentially never share to full precision."""
    return {k: r.value for k, r in detail.first.items()
            if _FINGERPRINT.match(k) and _is_number(r.value) and r.value != 0}


def check_different_runs(ref: RunLogs, comp: RunLogs) -> list[Finding]:
    """The compliance logs must come from a different run than the reference logs."""
    out = []
    gate = "different_runs"
    if ref.detail.sha256 == comp.detail.sha256:
        out.append(_finding(
            MLPERF_SAME_RUN, "FAIL", gate,
            "the compliance detail log is byte-identical to the reference detail log: the compliance "
            "test was not run (a copy of the reference passes any threshold trivially)",
            measured={"sha256": comp.detail.sha256}, threshold="different files",
            extra_evidence=[file_evidence(ref.detail.path, ref.detail.sha256),
                            file_evidence(comp.detail.path, comp.detail.sha256)]))
    if ref.summary.sha256 == comp.summary.sha256:
        out.append(_finding(
            MLPERF_SAME_RUN, "FAIL", gate,
            "the compliance summary log is byte-identical to the reference summary log",
            measured={"sha256": comp.summary.sha256}, threshold="different files",
            extra_evidence=[file_evidence(ref.summary.path, ref.summary.sha256),
                            file_evidence(comp.summary.path, comp.summary.sha256)]))
    if ref.detail.sha256 != comp.detail.sha256:
        fr, fc = run_fingerprint(ref.detail), run_fingerprint(comp.detail)
        shared = sorted(set(fr) & set(fc))
        same = [k for k in shared if fr[k] == fc[k]]
        if len(shared) >= 3 and len(same) == len(shared):
            out.append(_finding(
                MLPERF_SAME_RUN, "FAIL", gate,
                f"all {len(shared)} result statistics of the compliance run equal the reference's to "
                "full precision: the compliance results are a copy of the reference run",
                measured={"identical": len(same), "compared": len(shared)}, threshold="not all equal",
                refs=[comp.detail.first[k].ref for k in same[:5]]))
        elif len(shared) >= 4 and 2 * len(same) >= len(shared):
            out.append(_finding(
                MLPERF_SAME_RUN, "FLAG", gate,
                f"{len(same)} of {len(shared)} result statistics are identical to full precision in "
                f"both runs ({', '.join(same[:4])}...): possibly the same run",
                measured={"identical": same, "compared": len(shared)}, threshold="< half identical",
                refs=[comp.detail.first[k].ref for k in same[:5]]))
        for key in ("test_datetime", "power_begin"):
            r, c = ref.detail.record(key), comp.detail.record(key)
            if r is not None and c is not None and r.value == c.value:
                out.append(_finding(
                    MLPERF_SAME_RUN, "FLAG", gate,
                    f"both runs have the same {key} {r.value!r}: two runs of one system do not start "
                    "at the same moment", measured=r.value, threshold="different", refs=[r.ref, c.ref]))
                break
    if not out:
        out.append(_finding(MLPERF_SAME_RUN, "INFO", gate,
                            "reference and compliance logs are from different runs (files, start "
                            "times and result statistics differ)",
                            measured={"reference_datetime": ref.detail.get("test_datetime"),
                                      "compliance_datetime": comp.detail.get("test_datetime")},
                            threshold="different"))
    return out


def check_versions(ref: RunLogs, comp: RunLogs) -> list[Finding]:
    r, c = ref.detail.record("loadgen_version"), comp.detail.record("loadgen_version")
    if r is None or c is None or r.value == c.value:
        return []
    return [_finding(MLPERF_LOADGEN_VERSION, "INFO", "loadgen_version",
                     f"the runs used different LoadGen builds: {r.value!r} vs {c.value!r}",
                     measured={"reference": r.value, "compliance": c.value}, threshold="equal",
                     refs=[r.ref, c.ref])]
