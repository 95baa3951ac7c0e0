"""MLPerf LoadGen compliance re-derivation: TEST01, TEST04 and TEST05 performance checks.

The auditor re-derives the verdict of the official ``verify_performance.py`` scripts from the raw
LoadGen logs of a reference run and a compliance run, and goes further where those scripts are blind.
Every rule is a small pure function over the parsed logs (``perfwarden.harness.mlperf_log``) that
returns :class:`~perfwarden.harness.records.Finding` objects carrying the measured value, the
threshold and the raw lines (file, line, sha256) it rests on. :func:`audit` composes them. The rules
live in modules by concern -- ``mlperf_scores`` (scores, pass bands), ``mlperf_checks`` (validity,
summary vs detail, same benchmark, different runs), ``mlperf_audit_settings`` (which test the settings
say), ``mlperf_findings`` (codes, evidence) -- and this module re-exports their names.

Verdict: any FAIL finding -> FAIL; else any FLAG finding -> FLAG; else PASS. Logs that cannot be
read as LoadGen output (missing file, bad ``:::MLLOG`` line, truncated file, a required line or key
absent) give the verdict ``error`` -- never a score of 0.

What is re-derived (``official`` = what the MLCommons scripts do):

- **Score by scenario** (detail log is the primary source, the summary is cross-checked):
  Offline ``result_samples_per_second`` / ``Samples per second``; Server
  ``result_completed_samples_per_sec`` / ``Completed samples per second``; SingleStream
  ``early_stopping_latency_ss`` / ``Early stopping <p>th percentile estimate`` (ns); MultiStream
  ``early_stopping_latency_ms`` / the same summary line at the MultiStream percentile (ns). The
  percentile is ``effective_target_latency_percentile`` (0.9 SingleStream, 0.99 MultiStream).
- **TEST04** (one prompt repeated; the compliance run must not beat the reference): speed is the
  throughput, or 1e9/latency for SingleStream/MultiStream. FAIL (``CACHING_SUSPECTED``) iff
  ``speed_compliance >= speed_reference * (1 + t)`` with the official ``t``: 0.10, or 0.20 when
  the *speed* is <= 200000 (SingleStream) / <= 1600000 (MultiStream) -- i.e. practically always
  0.20 for the stream scenarios, because the official script compares 1e9/latency against cut-offs
  meant for latencies in ns. The intended rule (relax to 0.20 only for reference latencies <= 200 us /
  1.6 ms) is applied as a FLAG band: a compliance run faster than the intended ``t`` but within the
  official one is ``CACHING_SUSPECTED`` at FLAG.
- **TEST01** (accuracy logging on; performance must not move): two-sided on the raw metric,
  ``ref*(1-t) <= comp <= ref*(1+t)``, ``t`` = 0.10, or 0.20 when the reference latency is
  <= 200000 ns (SingleStream) / <= 1600000 ns (MultiStream) (current official script).
- **TEST05** (different RNG seeds; performance must not drop): ``t`` = 0.05 with the same 0.20
  relaxation; Offline/Server PASS iff ``comp > ref*(1-t)``; SingleStream/MultiStream PASS iff
  ``comp_latency < ref_latency*(1+t)`` (the v4.1 script; TEST05 was dropped in v5.0).
- **Validity**: ``result_validity`` (detail) and ``Result is`` (summary) must be ``VALID`` in both
  runs, and both must be ``PerformanceOnly`` runs.
- **Same benchmark and constraints** (official scripts never compare the benchmark, and TEST04's
  target-latency check is dead code): scenario must match (FAIL). LoadGen logs carry no model or
  benchmark key, so the benchmark is identified by the settings mlperf.conf fixes per model
  (``BENCHMARK_SETTINGS``: token-latency mode, LLM TTFT/TPOT constraints, latency percentile) and,
  for Server, ``effective_target_latency_ns`` / ``requested_server_target_latency_ns`` (FAIL on
  mismatch). A dataset size is *not* a fingerprint -- performance runs may legally load a subset --
  so ``qsl_reported_total_count``, ``qsl_reported_performance_count``, ``sut_name`` and ``qsl_name``
  should match (FLAG). When the runs are of different
  benchmarks the score comparison is still computed and shown (INFO), never judged.
- **Summary agrees with detail** in each run: scenario, mode, validity and score (FAIL), and every
  other shared field -- latency statistics, flags, test parameters (FAIL, one finding per run).
  Printed precision is allowed for (half a unit in the last printed digit of either side).
- **Two different runs**: byte-identical detail or summary logs (FAIL), every result statistic
  identical to full precision (FAIL), most of them identical or the same ``test_datetime`` (FLAG).
- **Audit settings / test type**: the compliance run must carry the test's audit settings
  (TEST04: ``performance_issue_same``/``_unique``; TEST01: ``accuracy_log_sampling_target`` or
  ``accuracy_log_probability`` > 0; TEST05: RNG seeds that differ from the reference's, announced
  by LoadGen's ``Test05 flag detected`` warning), the reference none. The test type is detected
  from the compliance detail log (then its summary); ``--test`` overrides, and a compliance run
  whose settings are another test's, several tests', or none is FAIL.
- **Every other setting equals the reference's** (``mlperf_settings``, issue 17 §6): apart from the
  test's own audit settings, a LoadGen setting of the compliance run that differs from the
  reference's is FAIL (``CONDITIONS_DIFFER``, naming it) -- run length shorter, samples per query,
  loaded sample count (FLAG for TEST04, which issues one sample), issue machinery, any unknown key;
  performance hints, Server's target QPS (the load the score measures) and longer runs are INFO.
  Another test's audit setting (e.g. changed seeds in TEST01/TEST04), or one of the test's own missing
  or not at its audit.config's value, is ``MLPERF_AUDIT_SETTINGS`` (FAIL).
- **LoadGen errors** (``num_errors`` / ``is_error`` records / ``N ERROR`` in the summary): FLAG.
  **Conflicting duplicate keys** among those the verdict uses (first occurrence wins, as in the
  official parser): FLAG. A different LoadGen version between the runs: INFO.

Finding codes used here (design §3 codes where they fit, plus MLPerf-specific ones):

- ``EVIDENCE_MISSING`` -- a log file or a required line/key is absent (verdict ``error``).
- ``EVIDENCE_CORRUPT`` -- a log does not decode, is truncated, or holds an impossible value
  (verdict ``error``).
- ``REPORTED_MISMATCH`` -- a run's summary log disagrees with its detail log.
- ``CONDITIONS_DIFFER`` -- reference and compliance differ in scenario, benchmark, latency target,
  SUT, seeds, or the reference is itself an audit run.
- ``CACHING_SUSPECTED`` -- TEST04 compliance run beats the reference beyond the threshold.
- ``MLPERF_THRESHOLD`` -- TEST01/TEST05 score outside the allowed band (INFO when inside).
- ``MLPERF_INVALID_RESULT`` -- a run is INVALID or not a PerformanceOnly run.
- ``MLPERF_SAME_RUN`` -- the compliance logs are (a copy of) the reference run.
- ``MLPERF_AUDIT_SETTINGS`` -- the compliance run's audit settings do not match the test.
- ``MLPERF_LOG_ERRORS`` -- LoadGen reported errors during a run.
- ``MLPERF_DUPLICATE_KEY`` -- a key the verdict uses occurs more than once with different values.
- ``MLPERF_LOADGEN_VERSION`` -- the runs used different LoadGen builds (INFO).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from perfwarden.auditor.findings import finding
from perfwarden.auditor.mlperf_audit_settings import (  # noqa: F401 - re-exported
    _AUDIT_KEYS, _SEEDS, AUDIT_CONFIG_WARNING, TEST05_WARNING, TestDetection, _detail_setting, _signatures,
    _summary_setting, _truthy, check_audit_settings, detect_test)
from perfwarden.auditor.mlperf_checks import (  # noqa: F401 - re-exported
    _FINGERPRINT, _RESULT_FIELDS, _TEST_PARAMS, _VERDICT_KEYS, BENCHMARK_SETTINGS, SAMPLE_SET_SETTINGS, _compare_key,
    _detail_keys_for, _setting, check_different_runs, check_duplicates, check_log_errors, check_same_benchmark,
    check_scenarios, check_summary_detail, check_validity, check_versions, run_fingerprint)
from perfwarden.auditor.mlperf_findings import (  # noqa: F401 - re-exported
    CACHING_SUSPECTED, CODES, CONDITIONS_DIFFER, EVIDENCE_CORRUPT, EVIDENCE_MISSING, MLPERF_AUDIT_SETTINGS,
    MLPERF_DUPLICATE_KEY, MLPERF_INVALID_RESULT, MLPERF_LOADGEN_VERSION, MLPERF_LOG_ERRORS, MLPERF_SAME_RUN,
    MLPERF_THRESHOLD, REPORTED_MISMATCH, _evs, _finding, evidence, file_evidence)
from perfwarden.auditor.mlperf_settings import check_own_audit_values, check_settings
from perfwarden.auditor.mlperf_scores import (  # noqa: F401 - re-exported
    _EARLY_STOP, _PCT_LATENCY, _PCT_TH_LATENCY, BASE_THRESHOLD, DEFAULT_PERCENTILE, DETAIL_SCORE_KEY,
    RELAXED_LATENCY_NS, RELAXED_THRESHOLD, SCENARIOS, STREAM_SCENARIOS, SUMMARY_SCORE_KEY, TESTS, RunLogs, Score,
    TestName, ThresholdRule, _as_number, _decimals, _is_number, check_threshold, detail_scenario, detail_score,
    require_validity, scores_agree, summary_scenario, summary_score, target_percentile, threshold_rule,
    values_agree)
from perfwarden.harness.jsonl import iter_raw_lines
from perfwarden.harness.mlperf_log import MlperfLogError, find_logs, read_detail, read_summary
from perfwarden.harness.records import EvidenceRef, Finding, Record, Seal

AUDITOR_VERSION = "mlperf-1"


class MlperfAudit(Record):
    """Result of one ``audit-mlperf`` run (printed by ``--json``)."""

    verdict: Literal["PASS", "FLAG", "FAIL", "error"]
    """PASS, FLAG, FAIL, or ``error`` when the logs could not be read as LoadGen output."""
    message: str = ""
    """One line for humans: why this verdict."""
    test: str | None = None
    """Compliance test audited (TEST01, TEST04, TEST05), or None when it could not be determined."""
    test_source: Literal["override", "detail", "summary"] | None = None
    """Where ``test`` comes from: ``--test``, or the compliance run's detail/summary log."""
    test_detected: str | None = None
    """Test detected from the compliance logs (even when overridden)."""
    scenario: str | None = None
    """Scenario of the reference run (``effective_scenario``)."""
    compliance_scenario: str | None = None
    """Scenario of the compliance run."""
    score_unit: str | None = None
    """``samples/s`` (Offline/Server) or ``ns`` (SingleStream/MultiStream latency)."""
    score_key: str | None = None
    """MLLOG key the scores come from."""
    reference_score: float | None = None
    """Reference score re-derived from the detail log."""
    compliance_score: float | None = None
    """Compliance score re-derived from the detail log."""
    summary_scores: dict[str, float | None] = Field(default_factory=dict)
    """The same scores as printed in the summary logs (cross-checked)."""
    ratio: float | None = None
    """compliance_score / reference_score in the raw unit."""
    threshold: float | None = None
    """Fraction of the pass band applied for FAIL."""
    intended_threshold: float | None = None
    """Fraction the official rule means to apply (TEST04 streams: FLAG band)."""
    bounds: dict[str, Any] | None = None
    """Pass band in the raw unit: low/high and whether they are inclusive."""
    rule: str | None = None
    """The pass rule applied, in words."""
    findings: list[Finding] = Field(default_factory=list)
    """Every finding, INFO included."""
    not_checked: list[str] = Field(default_factory=list)
    """Checks that could not be made, with the reason (never reported as passed)."""
    inputs: dict[str, str] = Field(default_factory=dict)
    """sha256 of each log file read."""
    auditor_version: str = AUDITOR_VERSION
    """Version of this auditor."""
    seal: Seal = "unsealed"
    """LoadGen's logs are foreign files no perfwarden seal covers: always ``unsealed`` (shown ``PASS
    (unsealed)``; the verdict is judged all the same, issue 17 §8)."""


# ----------------------------------------------------------------------------------------- loading


def load_run(directory: Path | str, label: Literal["reference", "compliance"]) -> RunLogs:
    """Read one run's two logs; raise :class:`MlperfLogError` when either is unreadable."""
    summary_path, detail_path = find_logs(directory)
    return RunLogs(label=label, summary=read_summary(summary_path, _root(directory)),
                   detail=read_detail(detail_path, _root(directory)))


def _root(directory: Path | str) -> Path:
    """The directory a run's logs must stay inside (a path to one log file names its folder)."""
    p = Path(directory)
    return p.parent if p.is_file() else p


# --------------------------------------------------------------------------------------- compose


def normalize_test(test: str | None) -> str | None:
    """``TEST04``/``test04``/``04``/``4`` -> ``TEST04``; raise ValueError for anything else."""
    if test is None:
        return None
    t = test.strip().upper()
    m = re.fullmatch(r"(?:TEST)?0?([145])", t)
    if not m:
        raise ValueError(f"unknown compliance test {test!r}: expected one of {', '.join(TESTS)}")
    return f"TEST0{m.group(1)}"


def verdict_of(findings: Iterable[Finding]) -> Literal["PASS", "FLAG", "FAIL"]:
    sev = {f.severity for f in findings}
    return "FAIL" if "FAIL" in sev else ("FLAG" if "FLAG" in sev else "PASS")


def _error_result(errors: list[MlperfLogError], inputs: dict[str, str], test: str | None) -> MlperfAudit:
    findings = []
    for e in errors:
        ev = []
        if e.path is not None:
            if e.line is not None and e.path.is_file():
                ev.append(_line_evidence(e.path, e.line))
            else:
                ev.append(EvidenceRef(file=str(e.path), line=None))
        findings.append(finding(EVIDENCE_MISSING if e.kind == "missing" else EVIDENCE_CORRUPT, "FAIL", e.message,
                                evidence=ev, action="remeasure", gate="read_logs"))
    return MlperfAudit(verdict="error", message="; ".join(e.message for e in errors), test=test,
                       test_source="override" if test else None, findings=findings, inputs=inputs)


def _line_evidence(path: Path, line: int) -> EvidenceRef:
    """Evidence for line ``line`` of ``path`` found by scanning (used for error reports only). Read
    the safe way (a FIFO or a line over its size bound is never read); any problem: no excerpt."""
    try:
        for ref, raw in iter_raw_lines(path, []):
            if ref.line == line:
                return EvidenceRef(file=str(path), line=line, sha256=hashlib.sha256(raw).hexdigest(),
                                   excerpt=raw[:200].decode("utf-8", "replace"))
            if ref.line > line:
                break
    except OSError:
        pass
    return EvidenceRef(file=str(path), line=line)


def audit(reference: Path | str, compliance: Path | str, test: str | None = None) -> MlperfAudit:
    """Re-derive the compliance verdict for one (reference, compliance) pair of run directories.

    ``test`` overrides the detected test type. Unreadable or malformed logs give ``verdict="error"``.
    """
    test = normalize_test(test)
    runs: dict[str, RunLogs] = {}
    errors: list[MlperfLogError] = []
    inputs: dict[str, str] = {}
    for label, directory in (("reference", reference), ("compliance", compliance)):
        try:
            summary_path, detail_path = find_logs(directory)
        except MlperfLogError as e:
            errors.append(MlperfLogError(f"{label}: {e.message}", path=e.path, line=e.line, kind=e.kind))
            continue
        parts = {}
        for name, path, reader in (("summary", summary_path, read_summary),
                                   ("detail", detail_path, read_detail)):
            try:
                parts[name] = reader(path, _root(directory))
                inputs[str(path)] = parts[name].sha256
            except MlperfLogError as e:
                errors.append(MlperfLogError(f"{label}: {e.message}", path=e.path, line=e.line,
                                             kind=e.kind))
        if len(parts) == 2:
            runs[label] = RunLogs(label, parts["summary"], parts["detail"])  # type: ignore[arg-type]
    if errors:
        return _error_result(errors, inputs, test)
    ref, comp = runs["reference"], runs["compliance"]

    # Required lines: scenario, validity, and the scenario's score in both logs of both runs.
    try:
        scen = {}
        scores: dict[str, tuple[Score, Score]] = {}
        for run in (ref, comp):
            scen[run.label] = detail_scenario(run)
            summary_scenario(run)
            require_validity(run)
        for run in (ref, comp):
            sc = scen[run.label]
            d = detail_score(run, sc)
            try:
                s = summary_score(run, sc)
            except MlperfLogError:
                # The summary may be of another scenario (checked below); look it up by its own.
                s = summary_score(run, summary_scenario(run))
            scores[run.label] = (d, s)
    except MlperfLogError as e:
        return _error_result([e], inputs, test)

    findings: list[Finding] = []
    not_checked: list[str] = []
    for run in (ref, comp):
        findings += check_validity(run)
    valid = not any(f.code == MLPERF_INVALID_RESULT for f in findings)
    # A VALID run cannot have a non-positive score; an INVALID one can (then only validity counts).
    for run in (ref, comp):
        d, _ = scores[run.label]
        if d.value <= 0 and valid:
            return _error_result([MlperfLogError(
                f"{run.label} detail log line {d.ref.line}: {d.key!r} is {d.value:g} in a VALID run",
                path=d.ref.path, line=d.ref.line)], inputs, test)
    for run in (ref, comp):
        d, s = scores[run.label]
        findings += check_summary_detail(run, scen[run.label], d, s if s.scenario == d.scenario else None)
        findings += check_log_errors(run)
        findings += check_duplicates(run)
    findings += check_scenarios(ref, comp, scen["reference"], scen["compliance"])
    same_bench, nc = check_same_benchmark(ref, comp, scen["reference"])
    findings += same_bench
    not_checked += nc
    findings += check_different_runs(ref, comp)

    detection = detect_test(ref, comp)
    effective_test = test or detection.test
    findings += check_audit_settings(ref, comp, detection, test)
    if not detection.keys_present:
        not_checked.append("audit settings: the compliance logs carry no audit-setting keys")
    same_build = ref.detail.get("loadgen_version") == comp.detail.get("loadgen_version")
    findings += check_settings(ref.detail, comp.detail, scen["reference"], effective_test, same_build,
                               (ref.summary, comp.summary))
    own, notes = check_own_audit_values(ref.detail, comp.detail, effective_test)
    findings += own
    not_checked += notes
    findings += check_versions(ref, comp)

    result = MlperfAudit(verdict="PASS", test=effective_test,
                         test_source="override" if test else detection.source,
                         test_detected=detection.test, scenario=scen["reference"],
                         compliance_scenario=scen["compliance"], inputs=inputs)
    rd, rs = scores["reference"]
    cd, cs = scores["compliance"]
    result.score_unit, result.score_key = rd.unit, rd.key
    result.reference_score, result.compliance_score = rd.value, cd.value
    result.summary_scores = {"reference": rs.value, "compliance": cs.value}
    if effective_test is None:
        not_checked.append("threshold: the test type could not be determined from the logs "
                           "(pass --test)")
    elif scen["reference"] != scen["compliance"]:
        not_checked.append("threshold: the runs are of different scenarios")
    elif rd.value <= 0 or cd.value <= 0:
        not_checked.append(f"threshold: a score is not positive ({rd.value:g}, {cd.value:g}) in an "
                           "INVALID run")
    else:
        rule, fs = check_threshold(effective_test, rd, cd)
        if any(f.severity == "FAIL" for f in same_bench):
            # The scores are not comparable, but the reviewer still sees the comparison it would have made.
            fs = [f.model_copy(update={"severity": "INFO", "action": None,
                                       "message": "not judged (the runs are of different benchmarks or latency "
                                                  "targets); it would have read: " + f.message}) for f in fs]
            not_checked.append("threshold: the runs are of different benchmarks or latency targets, so their "
                               "scores are not comparable (the comparison is shown as INFO)")
        findings += fs
        result.ratio = cd.value / rd.value
        result.threshold, result.intended_threshold = rule.threshold, rule.intended_threshold
        result.bounds, result.rule = rule.as_dict(), rule.description
    result.findings = findings
    result.not_checked = not_checked
    result.verdict = verdict_of(findings)
    worst = [f for f in findings if f.severity == result.verdict]
    if result.verdict == "PASS":
        result.message = (f"{effective_test} {scen['reference']}: compliance {cd.value:g} vs reference "
                          f"{rd.value:g} {rd.unit}, inside the band")
    else:
        result.message = "; ".join(f"{f.code}: {f.message}" for f in worst[:3])
    return result
