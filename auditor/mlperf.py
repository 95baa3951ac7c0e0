"""MLPerf LoadGen compliance re-derivation: TEST01, TEST04 and TEST05 performance checks.

The auditor re-derives the verdict of the official ``verify_performance.py`` scripts from the raw
LoadGen logs of a reference run and a compliance run, and goes further where those scripts are blind.
Every rule is a small pure function over the parsed logs (``perfwarden.formats.mlperf_log``) that
returns :class:`~perfwarden.formats.records.Finding` objects carrying the measured value, the
threshold and the raw lines (file, line, sha256) it rests on. :func:`audit` composes them. The rules
live in modules by concern -- ``mlperf_scores`` (scores, pass bands), ``mlperf_checks`` (validity,
summary vs detail, same benchmark, different runs), ``mlperf_audit_settings`` (which test the settings
say), ``mlperf_findings`` (codes, evidence), ``mlperf_settings`` (every other setting) -- and this module
composes them (``audit``) and answers (``report_json``, ``error_json``).

The answer is the same ``Verdict`` record a claim's audit gives (scope ``mlperf``; the scores, test and
pass band in its ``mlperf`` field), decided by the same verdict rule (``findings.decide``, design §3): any
FAIL finding -> FAIL; else any FLAG finding -> FLAG; else PASS. Logs that cannot be read as LoadGen output
(missing file, bad ``:::MLLOG`` line, truncated file, a required line or key absent) are an input error,
:class:`UnreadableLogs` (``audit-mlperf``: ``"verdict": "error"``, exit 3) -- never a score of 0.

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
- **Every other setting equals the reference's** (``mlperf_settings``): apart from the
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
import json
import re
from pathlib import Path
from typing import Any

from perfwarden.auditor.findings import decide, finding
from perfwarden.auditor.mlperf_audit_settings import TestDetection, check_audit_settings, detect_test
from perfwarden.auditor.mlperf_checks import (check_different_runs, check_duplicates, check_log_errors,
                                              check_same_benchmark, check_scenarios, check_summary_detail,
                                              check_validity, check_versions)
from perfwarden.auditor.mlperf_findings import EVIDENCE_CORRUPT, EVIDENCE_MISSING, MLPERF_INVALID_RESULT
from perfwarden.auditor.mlperf_scores import (TESTS, RunLogs, Score, check_threshold, detail_scenario, detail_score,
                                              require_validity, summary_scenario, summary_score)
from perfwarden.auditor.mlperf_settings import check_own_audit_values, check_settings
from perfwarden.formats.jsonl import iter_raw_lines
from perfwarden.formats.mlperf_log import MlperfLogError, find_logs, read_detail, read_summary
from perfwarden.formats.records import EvidenceRef, Finding, MlperfCompliance, Verdict

AUDITOR_VERSION = "mlperf-1"

SCORE_NOTE = "threshold: the runs are of different benchmarks or latency targets, so their scores are not comparable " \
             "(the comparison is shown as INFO)"


class UnreadableLogs(Exception):
    """The logs cannot be read as LoadGen output (a missing file, a bad ``:::MLLOG`` line, a truncated file,
    a required line or key absent): bad input, not a verdict -- ``audit-mlperf`` exits 3 with
    ``"verdict": "error"``, never a score of 0."""

    def __init__(self, findings: list[Finding], inputs: dict[str, str], test: str | None):
        self.findings, self.inputs, self.test = findings, inputs, test
        self.message = "; ".join(f.message for f in findings)
        super().__init__(self.message)


# ----------------------------------------------------------------------------------------- loading


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


def _unreadable(errors: list[MlperfLogError], inputs: dict[str, str], test: str | None) -> UnreadableLogs:
    """The input error for logs that cannot be read, each problem a finding pointing at its line."""
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
    return UnreadableLogs(findings, inputs, test)


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


def read_runs(reference: Path | str, compliance: Path | str) -> tuple[dict[str, RunLogs], dict[str, str],
                                                                    list[MlperfLogError]]:
    """Both runs' logs, the sha256 of every log read, and every reading problem (each run's two logs are
    read even when the other's fail, so one report names them all)."""
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
        for name, path, reader in (("summary", summary_path, read_summary), ("detail", detail_path, read_detail)):
            try:
                parts[name] = reader(path, _root(directory))
                inputs[str(path)] = parts[name].sha256
            except MlperfLogError as e:
                errors.append(MlperfLogError(f"{label}: {e.message}", path=e.path, line=e.line, kind=e.kind))
        if len(parts) == 2:
            runs[label] = RunLogs(label, parts["summary"], parts["detail"])  # type: ignore[arg-type]
    return runs, inputs, errors


def required_lines(ref: RunLogs, comp: RunLogs) -> tuple[dict[str, str], dict[str, tuple[Score, Score]]]:
    """Each run's scenario and its (detail, summary) scores; raise :class:`MlperfLogError` when a line
    the verdict needs (scenario, validity, the scenario's score in both logs) is absent."""
    scen: dict[str, str] = {}
    scores: dict[str, tuple[Score, Score]] = {}
    for run in (ref, comp):
        scen[run.label] = detail_scenario(run)
        summary_scenario(run)
        require_validity(run)
    for run in (ref, comp):
        d = detail_score(run, scen[run.label])
        try:
            s = summary_score(run, scen[run.label])
        except MlperfLogError:  # the summary may be of another scenario (checked later): look it up by its own
            s = summary_score(run, summary_scenario(run))
        scores[run.label] = (d, s)
    return scen, scores


def impossible_score(runs: tuple[RunLogs, RunLogs], scores: dict[str, tuple[Score, Score]],
                     valid: bool) -> MlperfLogError | None:
    """A VALID run cannot have a non-positive score (an INVALID one can: then only validity counts)."""
    for run in runs:
        d, _ = scores[run.label]
        if d.value <= 0 and valid:
            return MlperfLogError(f"{run.label} detail log line {d.ref.line}: {d.key!r} is {d.value:g} in a VALID run",
                                  path=d.ref.path, line=d.ref.line)
    return None


def run_checks(ref: RunLogs, comp: RunLogs, scen: dict[str, str],
               scores: dict[str, tuple[Score, Score]]) -> tuple[list[Finding], list[Finding], list[str]]:
    """Each run against itself (summary vs detail, LoadGen errors, duplicate keys) and the two against each
    other (scenario, benchmark, two different runs). Returns (findings, same-benchmark findings, not
    checked)."""
    findings: list[Finding] = []
    for run in (ref, comp):
        d, s = scores[run.label]
        findings += check_summary_detail(run, scen[run.label], d, s if s.scenario == d.scenario else None)
        findings += check_log_errors(run)
        findings += check_duplicates(run)
    findings += check_scenarios(ref, comp, scen["reference"], scen["compliance"])
    same_bench, not_checked = check_same_benchmark(ref, comp, scen["reference"])
    return findings + same_bench + check_different_runs(ref, comp), same_bench, list(not_checked)


def settings_checks(ref: RunLogs, comp: RunLogs, scenario: str, test: str | None,
                    detection: TestDetection) -> tuple[list[Finding], list[str]]:
    """The compliance run's audit settings against its test, every other setting against the
    reference's, and the LoadGen builds."""
    effective = test or detection.test
    findings = check_audit_settings(ref, comp, detection, test)
    not_checked = [] if detection.keys_present else ["audit settings: the compliance logs carry no audit-setting keys"]
    same_build = ref.detail.get("loadgen_version") == comp.detail.get("loadgen_version")
    findings += check_settings(ref.detail, comp.detail, scenario, effective, same_build, (ref.summary, comp.summary))
    own, notes = check_own_audit_values(ref.detail, comp.detail, effective)
    return findings + own + check_versions(ref, comp), not_checked + notes


def threshold_checks(test: str | None, scen: dict[str, str], rd: Score, cd: Score, same_bench: list[Finding],
                     result: MlperfCompliance) -> tuple[list[Finding], list[str]]:
    """The test's pass band on the two detail scores, when they can be compared; the band, ratio and rule
    are set on ``result``. Runs of different benchmarks are shown the comparison as INFO, never judged."""
    if test is None:
        return [], ["threshold: the test type could not be determined from the logs (pass --test)"]
    if scen["reference"] != scen["compliance"]:
        return [], ["threshold: the runs are of different scenarios"]
    if rd.value <= 0 or cd.value <= 0:
        return [], [f"threshold: a score is not positive ({rd.value:g}, {cd.value:g}) in an INVALID run"]
    rule, fs = check_threshold(test, rd, cd)
    not_checked = []
    if any(f.severity == "FAIL" for f in same_bench):
        fs = [f.model_copy(update={"severity": "INFO", "action": None, "message": "not judged (the runs are of "
                                   "different benchmarks or latency targets); it would have read: " + f.message})
              for f in fs]
        not_checked.append(SCORE_NOTE)
    result.ratio = cd.value / rd.value
    result.threshold, result.intended_threshold = rule.threshold, rule.intended_threshold
    result.bounds, result.rule = rule.as_dict(), rule.description
    return fs, not_checked


def summary_message(label: str, findings: list[Finding], result: MlperfCompliance) -> str:
    """One line: the band that held, or the first three findings that decided the verdict."""
    if label == "PASS":
        return (f"{result.test} {result.scenario}: compliance {result.compliance_score:g} vs reference "
                f"{result.reference_score:g} {result.score_unit}, inside the band")
    return "; ".join(f"{f.code}: {f.message}" for f in [f for f in findings if f.severity == label][:3])


def pair_name(reference: Path | str, compliance: Path | str, test: str | None) -> str:
    """What a ``mlperf`` verdict answers, as given: the pair audited (and the declared test)."""
    return f"reference={reference} compliance={compliance}" + (f" test={test}" if test else "")


def audit(reference: Path | str, compliance: Path | str, test: str | None = None) -> Verdict:
    """Re-derive the compliance verdict for one (reference, compliance) pair of run directories: the same
    ``Verdict`` record, through the same verdict rule (``findings.decide``), as a claim's audit.

    ``test`` overrides the detected test type. Raise :class:`UnreadableLogs` when the logs cannot be read
    as LoadGen output.
    """
    test = normalize_test(test)
    runs, inputs, errors = read_runs(reference, compliance)
    if errors:
        raise _unreadable(errors, inputs, test)
    ref, comp = runs["reference"], runs["compliance"]
    try:
        scen, scores = required_lines(ref, comp)
    except MlperfLogError as e:
        raise _unreadable([e], inputs, test) from None
    findings = check_validity(ref) + check_validity(comp)
    impossible = impossible_score((ref, comp), scores, not any(f.code == MLPERF_INVALID_RESULT for f in findings))
    if impossible is not None:
        raise _unreadable([impossible], inputs, test)
    checked, same_bench, not_checked = run_checks(ref, comp, scen, scores)
    detection = detect_test(ref, comp)
    settings, notes = settings_checks(ref, comp, scen["reference"], test, detection)
    (rd, rs), (cd, cs) = scores["reference"], scores["compliance"]
    result = MlperfCompliance(test=test or detection.test, test_source="override" if test else detection.source,
                              test_detected=detection.test, scenario=scen["reference"],
                              compliance_scenario=scen["compliance"], score_unit=rd.unit, score_key=rd.key,
                              reference_score=rd.value, compliance_score=cd.value,
                              summary_scores={"reference": rs.value, "compliance": cs.value})
    band, band_notes = threshold_checks(result.test, scen, rd, cd, same_bench, result)
    findings += checked + settings + band
    label, action = decide(findings)
    result.message = summary_message(label, findings, result)
    claim = pair_name(reference, compliance, test)
    digest_src = json.dumps({"claim": claim, "inputs": inputs, "auditor": AUDITOR_VERSION}, sort_keys=True)
    return Verdict(scope="mlperf", claim=claim, verdict=label, action=action, findings=findings,
                   not_checked=not_checked + notes + band_notes, seal="unsealed", auditor_version=AUDITOR_VERSION,
                   input_digests=inputs, digest=hashlib.sha256(digest_src.encode()).hexdigest(), mlperf=result)


# ------------------------------------------------------------------------------------ --json shape


def report_json(verdict: Verdict) -> dict[str, Any]:
    """``audit-mlperf --json``: the verdict, the re-derived numbers flat beside it, findings, what was not
    checked, the inputs' digests. LoadGen's logs are foreign files no perfwarden seal covers: always
    ``unsealed`` (shown ``PASS (unsealed)``; judged all the same)."""
    numbers = (verdict.mlperf or MlperfCompliance()).model_dump(mode="json")
    return {"verdict": verdict.verdict, **numbers, **_tail(verdict.findings, verdict.not_checked,
                                                          verdict.input_digests, verdict.seal)}


def error_json(error: UnreadableLogs) -> dict[str, Any]:
    """``audit-mlperf --json`` for logs that cannot be read: ``"verdict": "error"`` and why."""
    numbers = MlperfCompliance(message=error.message, test=error.test,
                               test_source="override" if error.test else None).model_dump(mode="json")
    return {"verdict": "error", **numbers, **_tail(error.findings, [], error.inputs, "unsealed")}


def _tail(findings: list[Finding], not_checked: list[str], inputs: dict[str, str], seal: str) -> dict[str, Any]:
    return {"findings": [f.model_dump(mode="json") for f in findings], "not_checked": not_checked,
            "inputs": inputs, "auditor_version": AUDITOR_VERSION, "seal": seal}
