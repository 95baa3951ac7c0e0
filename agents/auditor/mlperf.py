"""MLPerf LoadGen compliance re-derivation: TEST01, TEST04 and TEST05 performance checks.

The auditor re-derives the verdict of the official ``verify_performance.py`` scripts from the raw
LoadGen logs of a reference run and a compliance run, and goes further where those scripts are blind.
Every rule is a small pure function over the parsed logs (``perfwarden.harness.mlperf_log``) that
returns :class:`~perfwarden.harness.records.Finding` objects carrying the measured value, the
threshold and the raw lines (file, line, sha256) it rests on. :func:`audit` composes them.

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
  so ``qsl_reported_total_count``, the performance sample set, ``sut_name``, ``qsl_name`` and
  MultiStream ``effective_samples_per_query`` should match (FLAG). When the runs are of different
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
  whose settings are another test's, several tests', or none is FAIL. TEST01/TEST04 runs must keep
  the reference's RNG seeds (FLAG otherwise).
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
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from perfwarden.agents.auditor.findings import finding
from perfwarden.harness.jsonl import LineRef, iter_raw_lines
from perfwarden.harness.mlperf_log import (
    DetailLog,
    MlperfLogError,
    SummaryLog,
    find_logs,
    parse_number,
    read_detail,
    read_summary,
)
from perfwarden.harness.records import EvidenceRef, Finding, Record, Severity

AUDITOR_VERSION = "mlperf-1"

# ------------------------------------------------------------------------------------------ codes

EVIDENCE_MISSING = "EVIDENCE_MISSING"
EVIDENCE_CORRUPT = "EVIDENCE_CORRUPT"
REPORTED_MISMATCH = "REPORTED_MISMATCH"
CONDITIONS_DIFFER = "CONDITIONS_DIFFER"
CACHING_SUSPECTED = "CACHING_SUSPECTED"
MLPERF_THRESHOLD = "MLPERF_THRESHOLD"
MLPERF_INVALID_RESULT = "MLPERF_INVALID_RESULT"
MLPERF_SAME_RUN = "MLPERF_SAME_RUN"
MLPERF_AUDIT_SETTINGS = "MLPERF_AUDIT_SETTINGS"
MLPERF_LOG_ERRORS = "MLPERF_LOG_ERRORS"
MLPERF_DUPLICATE_KEY = "MLPERF_DUPLICATE_KEY"
MLPERF_LOADGEN_VERSION = "MLPERF_LOADGEN_VERSION"

CODES = (
    EVIDENCE_MISSING, EVIDENCE_CORRUPT, REPORTED_MISMATCH, CONDITIONS_DIFFER, CACHING_SUSPECTED,
    MLPERF_THRESHOLD, MLPERF_INVALID_RESULT, MLPERF_SAME_RUN, MLPERF_AUDIT_SETTINGS,
    MLPERF_LOG_ERRORS, MLPERF_DUPLICATE_KEY, MLPERF_LOADGEN_VERSION,
)

TestName = Literal["TEST01", "TEST04", "TEST05"]
TESTS: tuple[str, ...] = ("TEST01", "TEST04", "TEST05")
SCENARIOS: tuple[str, ...] = ("Offline", "Server", "SingleStream", "MultiStream")
STREAM_SCENARIOS = ("SingleStream", "MultiStream")

DETAIL_SCORE_KEY = {
    "Offline": "result_samples_per_second",
    "Server": "result_completed_samples_per_sec",
    "SingleStream": "early_stopping_latency_ss",
    "MultiStream": "early_stopping_latency_ms",
}
SUMMARY_SCORE_KEY = {"Offline": "Samples per second", "Server": "Completed samples per second"}
DEFAULT_PERCENTILE = {"SingleStream": 90.0, "MultiStream": 99.0}
# Latency (ns) at or below which run-to-run noise justifies a 0.20 band (official comment: "latencies
# can be very short for high performance systems").
RELAXED_LATENCY_NS = {"SingleStream": 200_000, "MultiStream": 1_600_000}
RELAXED_THRESHOLD = 0.20
BASE_THRESHOLD = {"TEST01": 0.10, "TEST04": 0.10, "TEST05": 0.05}

_EARLY_STOP = re.compile(r"Early stopping (\d+(?:\.\d+)?)th percentile estimate")
_PCT_LATENCY = re.compile(r"(\d+(?:\.\d+)?) percentile latency \(ns\)")
_PCT_TH_LATENCY = re.compile(r"(\d+(?:\.\d+)?)th percentile latency \(ns\)")

# ----------------------------------------------------------------------------------- data carriers


@dataclass
class RunLogs:
    """One run (reference or compliance): its summary and detail logs."""

    label: Literal["reference", "compliance"]
    summary: SummaryLog
    detail: DetailLog


@dataclass(frozen=True)
class Score:
    """A run's headline number for its scenario, in LoadGen's raw unit."""

    scenario: str
    value: float
    kind: Literal["throughput", "latency"]
    """``throughput`` (samples/s, higher is better) or ``latency`` (ns, lower is better)."""
    key: str
    source: Literal["detail", "summary"]
    ref: LineRef
    text: str | None = None
    """The summary's printed text (for precision-aware comparison)."""
    raw: Any = None
    """The detail log's JSON value as decoded (int stays int: its printed precision matters)."""

    @property
    def unit(self) -> str:
        return "samples/s" if self.kind == "throughput" else "ns"

    @property
    def speed(self) -> float:
        """Higher-is-better form: throughput, or 1e9/latency (what TEST04's script compares)."""
        return self.value if self.kind == "throughput" else 1e9 / self.value


@dataclass(frozen=True)
class ThresholdRule:
    """The pass band for one test and scenario, in the score's raw unit."""

    test: str
    scenario: str
    threshold: float
    """Fraction applied for FAIL (the official one)."""
    intended_threshold: float
    """Fraction the rule was meant to apply (differs from ``threshold`` only for TEST04 streams)."""
    low: float | None
    high: float | None
    low_inclusive: bool
    high_inclusive: bool
    description: str

    def inside(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (value == self.low and not self.low_inclusive)):
            return False
        if self.high is not None and (value > self.high or (value == self.high and not self.high_inclusive)):
            return False
        return True

    def as_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "low_inclusive": self.low_inclusive,
                "high_inclusive": self.high_inclusive}


@dataclass(frozen=True)
class TestDetection:
    """Which compliance test the compliance run's audit settings say it is."""

    test: str | None
    """The single test whose settings are present; None when none or several are."""
    source: Literal["detail", "summary"] | None
    signatures: tuple[str, ...]
    """Every test whose settings were found (several = ambiguous)."""
    signals: tuple[str, ...]
    """What the detection rests on, for humans."""
    evidence: tuple[LineRef, ...]
    keys_present: bool
    """False when the log has none of the audit-setting keys (the check cannot be made)."""


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


# --------------------------------------------------------------------------------------- evidence


def evidence(ref: LineRef | None) -> EvidenceRef | None:
    """Evidence for one raw line: file, 1-based line, sha256 of the line's bytes, an excerpt."""
    if ref is None:
        return None
    try:
        raw = ref.raw()
    except OSError:
        return EvidenceRef(file=str(ref.path), line=ref.line)
    return EvidenceRef(file=str(ref.path), line=ref.line, sha256=hashlib.sha256(raw).hexdigest(),
                       excerpt=raw[:200].decode("utf-8", "replace"))


def file_evidence(path: Path, sha256: str | None) -> EvidenceRef:
    """Evidence for a whole file (line None; sha256 is the file's)."""
    return EvidenceRef(file=str(path), line=None, sha256=sha256)


def _evs(refs: Iterable[LineRef | None]) -> list[EvidenceRef]:
    out = []
    seen = set()
    for ref in refs:
        if ref is None or (str(ref.path), ref.line) in seen:
            continue
        seen.add((str(ref.path), ref.line))
        ev = evidence(ref)
        if ev is not None:
            out.append(ev)
    return out


def _finding(code: str, severity: Severity, gate: str, message: str, *, measured: Any = None,
             threshold: Any = None, refs: Iterable[LineRef | None] = (),
             extra_evidence: Iterable[EvidenceRef] = ()) -> Finding:
    """A finding through the shared constructor (its code must be in ``codes.CATALOG``)."""
    return finding(code, severity, message, measured=measured, threshold=threshold,
                   evidence=[*extra_evidence, *_evs(refs)], gate=gate,
                   action=None if severity == "INFO" else ("flag" if severity == "FLAG" else "eject"))


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


def detail_scenario(run: RunLogs) -> str:
    """``effective_scenario`` (raises when absent or unknown)."""
    rec = run.detail.record("effective_scenario")
    if rec is None:
        raise MlperfLogError(f"{run.label} detail log {str(run.detail.path)!r} has no "
                             f"{'effective_scenario'!r} line", path=run.detail.path, kind="missing")
    if rec.value not in SCENARIOS:
        raise MlperfLogError(f"{run.label} detail log line {rec.line}: unknown scenario {rec.value!r}",
                             path=run.detail.path, line=rec.line)
    return rec.value


def summary_scenario(run: RunLogs) -> str:
    """``Scenario :`` line of the summary (raises when absent or unknown)."""
    ent = run.summary.entry("Scenario")
    if ent is None:
        raise MlperfLogError(f"{run.label} summary log {str(run.summary.path)!r} has no 'Scenario' "
                             "line", path=run.summary.path, kind="missing")
    if ent.value not in SCENARIOS:
        raise MlperfLogError(f"{run.label} summary log line {ent.line}: unknown scenario "
                             f"{ent.value!r}", path=run.summary.path, line=ent.line)
    return ent.value


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def target_percentile(detail: DetailLog, scenario: str) -> float:
    """Early-stopping percentile for a stream scenario, from ``effective_target_latency_percentile``."""
    v = detail.get("effective_target_latency_percentile")
    if _is_number(v) and 0 < v < 1:
        return round(float(v) * 100, 6)
    return DEFAULT_PERCENTILE[scenario]


def detail_score(run: RunLogs, scenario: str) -> Score:
    """The scenario's score from the detail log (raises when absent or not a number)."""
    key = DETAIL_SCORE_KEY[scenario]
    rec = run.detail.record(key)
    if rec is None:
        raise MlperfLogError(f"{run.label} detail log {str(run.detail.path)!r} has no {key!r} line "
                             f"(the {scenario} score)", path=run.detail.path, kind="missing")
    if not _is_number(rec.value):
        raise MlperfLogError(f"{run.label} detail log line {rec.line}: {key!r} is {rec.value!r}, not a "
                             "finite number", path=run.detail.path, line=rec.line)
    kind = "latency" if scenario in STREAM_SCENARIOS else "throughput"
    return Score(scenario, float(rec.value), kind, key, "detail", rec.ref, raw=rec.value)


def summary_score(run: RunLogs, scenario: str) -> Score:
    """The scenario's score as printed in the summary log (raises when absent or not a number)."""
    s = run.summary
    if scenario in SUMMARY_SCORE_KEY:
        key = SUMMARY_SCORE_KEY[scenario]
        ent = s.entry(key)
    else:
        pct = target_percentile(run.detail, scenario)
        ent = None
        for m, e in s.find(_EARLY_STOP):
            if abs(float(m.group(1)) - pct) < 1e-9:
                ent = e
                break
        key = f"Early stopping {pct:g}th percentile estimate"
    if ent is None:
        raise MlperfLogError(f"{run.label} summary log {str(s.path)!r} has no {key!r} line (the "
                             f"{scenario} score)", path=s.path, kind="missing")
    v = parse_number(ent.value)
    if v is None:
        raise MlperfLogError(f"{run.label} summary log line {ent.line}: {key!r} is {ent.value!r}, not "
                             "a finite number", path=s.path, line=ent.line)
    kind = "latency" if scenario in STREAM_SCENARIOS else "throughput"
    return Score(scenario, float(v), kind, ent.key, "summary", ent.ref, text=ent.value)


def require_validity(run: RunLogs) -> None:
    """Both logs must state a validity (a run without one did not finish)."""
    if run.detail.record("result_validity") is None:
        raise MlperfLogError(f"{run.label} detail log {str(run.detail.path)!r} has no "
                             f"{'result_validity'!r} line: the run did not finish",
                             path=run.detail.path, kind="missing")
    if run.summary.entry("Result is") is None:
        raise MlperfLogError(f"{run.label} summary log {str(run.summary.path)!r} has no 'Result is' "
                             "line", path=run.summary.path, kind="missing")


# ---------------------------------------------------------------------------- number comparisons


def _decimals(text: str) -> int:
    try:
        exp = Decimal(text.strip()).as_tuple().exponent
    except InvalidOperation:
        return 0
    return -exp if isinstance(exp, int) else 0


def _as_number(v: Any) -> float | int | None:
    if isinstance(v, bool):
        return int(v)
    if _is_number(v):
        return v
    if isinstance(v, str):
        return parse_number(v)
    return None


def values_agree(summary_text: str, detail_value: Any) -> bool:
    """True when a summary's printed value and a detail value are the same number (or string),
    allowing half a unit in the last printed digit of either side."""
    st = summary_text.strip()
    if isinstance(detail_value, str) and parse_number(detail_value) is None:
        return st == detail_value.strip()
    s = _as_number(st)
    d = _as_number(detail_value)
    if st.lower() in ("yes", "no", "true", "false") and isinstance(detail_value, bool):
        return (st.lower() in ("yes", "true")) == detail_value
    if s is None or d is None:
        return st == str(detail_value).strip()
    if isinstance(s, int) and isinstance(d, int):
        return s == d
    tol = 0.5 * 10 ** (-_decimals(st)) + 0.5 * 10 ** (-_decimals(repr(d))) + 1e-9 * max(abs(s), abs(d))
    return abs(float(s) - float(d)) <= tol


def scores_agree(summary: Score, detail: Score) -> bool:
    return values_agree(summary.text if summary.text is not None else repr(summary.value),
                        detail.raw if detail.raw is not None else detail.value)


# ----------------------------------------------------------------------------------- threshold rule


def threshold_rule(test: str, scenario: str, reference: Score) -> ThresholdRule:
    """The official pass band for ``test`` in ``scenario`` given the reference score (raw unit)."""
    ref = reference.value
    stream = scenario in STREAM_SCENARIOS
    relaxed_by_latency = stream and ref <= RELAXED_LATENCY_NS[scenario]
    if test == "TEST04":
        # Official: speed_c < speed_r * (1 + t); t relaxed when the *speed* is under the cut-off.
        official = RELAXED_THRESHOLD if stream and reference.speed <= RELAXED_LATENCY_NS[scenario] \
            else BASE_THRESHOLD[test]
        intended = RELAXED_THRESHOLD if relaxed_by_latency else BASE_THRESHOLD[test]
        if stream:
            # speed_c < speed_r (1+t)  <=>  latency_c > latency_r / (1+t)
            return ThresholdRule(test, scenario, official, intended, ref / (1 + official), None, False,
                                 True, f"compliance latency > reference latency / (1 + {official:g}) "
                                 "(equivalently 1e9/latency below the reference's by the margin; "
                                 "one-sided: the repeated-sample run must not be faster)")
        return ThresholdRule(test, scenario, official, intended, None, ref * (1 + official), True, False,
                             f"compliance score < reference score * (1 + {official:g}) (one-sided: "
                             "the repeated-sample run must not be faster)")
    t = RELAXED_THRESHOLD if relaxed_by_latency else BASE_THRESHOLD[test]
    if test == "TEST01":
        return ThresholdRule(test, scenario, t, t, ref * (1 - t), ref * (1 + t), True, True,
                             f"reference * (1 - {t:g}) <= compliance <= reference * (1 + {t:g}) "
                             "(two-sided)")
    if test == "TEST05":
        if stream:
            return ThresholdRule(test, scenario, t, t, None, ref * (1 + t), True, False,
                                 f"compliance latency < reference latency * (1 + {t:g}) (one-sided: "
                                 "other seeds must not be slower)")
        return ThresholdRule(test, scenario, t, t, ref * (1 - t), None, False, True,
                             f"compliance score > reference score * (1 - {t:g}) (one-sided: other "
                             "seeds must not be slower)")
    raise ValueError(f"unknown compliance test {test!r}")


def check_threshold(test: str, reference: Score, compliance: Score) -> tuple[ThresholdRule, list[Finding]]:
    """Apply the test's pass band to the re-derived scores."""
    rule = threshold_rule(test, reference.scenario, reference)
    ratio = compliance.value / reference.value
    refs = (reference.ref, compliance.ref)
    gate = f"{test.lower()}_threshold"
    measured = {"reference": reference.value, "compliance": compliance.value, "ratio": ratio,
                "unit": reference.unit}
    band = rule.as_dict() | {"fraction": rule.threshold}
    inside = rule.inside(compliance.value)
    if test == "TEST04":
        speed_ratio = compliance.speed / reference.speed
        measured["speed_ratio"] = speed_ratio
        if not inside:
            return rule, [_finding(
                CACHING_SUSPECTED, "FAIL", gate,
                f"TEST04: the repeated-sample compliance run is {100 * (speed_ratio - 1):.1f}% faster "
                f"than the reference (allowed < {100 * rule.threshold:g}%): results may come from a "
                "cache", measured=measured, threshold=band, refs=refs)]
        if speed_ratio >= 1 + rule.intended_threshold:
            return rule, [_finding(
                CACHING_SUSPECTED, "FLAG", gate,
                f"TEST04: compliance run is {100 * (speed_ratio - 1):.1f}% faster than the reference: "
                f"within the official {100 * rule.threshold:g}% only because the official script "
                f"compares 1e9/latency with latency cut-offs (intended band "
                f"{100 * rule.intended_threshold:g}%)",
                measured=measured, threshold=band | {"intended_fraction": rule.intended_threshold},
                refs=refs)]
        return rule, [_finding(
            CACHING_SUSPECTED, "INFO", gate,
            f"TEST04: compliance speed is {100 * (speed_ratio - 1):+.1f}% vs the reference (allowed < "
            f"+{100 * rule.threshold:g}%)", measured=measured, threshold=band, refs=refs)]
    if not inside:
        return rule, [_finding(
            MLPERF_THRESHOLD, "FAIL", gate,
            f"{test}: compliance {compliance.value:g} {compliance.unit} is {100 * (ratio - 1):+.1f}% vs "
            f"the reference {reference.value:g} {reference.unit}, outside the allowed band "
            f"({rule.description})",
            measured=measured, threshold=band, refs=refs)]
    return rule, [_finding(
        MLPERF_THRESHOLD, "INFO", gate,
        f"{test}: compliance {compliance.value:g} vs reference {reference.value:g} "
        f"({100 * (ratio - 1):+.1f}%) is inside the band ({rule.description})",
        measured=measured, threshold=band, refs=refs)]


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
        refs = [r.ref for r in run.detail.errors()[:5]]
        if run.detail.record("num_errors") is not None:
            refs.append(run.detail.record("num_errors").ref)
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
                     threshold="equal", refs=[ref.detail.record("effective_scenario").ref,
                                              comp.detail.record("effective_scenario").ref])]


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
    "effective_performance_sample_count": "a different performance sample set",
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
    """Both runs must measure the same benchmark under the same constraints (issue 9 rule 9).

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
    if scenario == "MultiStream" and comp.detail.get("effective_scenario") == "MultiStream":
        f = _compare_key(ref, comp, "effective_samples_per_query", "FLAG",
                         "MultiStream queries of a different size")
        if f:
            out.append(f)
    for key, why in (*SAMPLE_SET_SETTINGS.items(), ("requested_sample_concatenate_permutation",
                                                     "sample concatenation differs (set per model by mlperf.conf)")):
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
                refs=[comp.detail.record(k).ref for k in same[:5]]))
        elif len(shared) >= 4 and 2 * len(same) >= len(shared):
            out.append(_finding(
                MLPERF_SAME_RUN, "FLAG", gate,
                f"{len(same)} of {len(shared)} result statistics are identical to full precision in "
                f"both runs ({', '.join(same[:4])}...): possibly the same run",
                measured={"identical": same, "compared": len(shared)}, threshold="< half identical",
                refs=[comp.detail.record(k).ref for k in same[:5]]))
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


# -------------------------------------------------------------------------------- audit settings

_SEEDS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
_AUDIT_KEYS = ("performance_issue_same", "performance_issue_unique", "accuracy_log_sampling_target",
               "accuracy_log_probability") + _SEEDS
AUDIT_CONFIG_WARNING = "Found Audit Config file"
TEST05_WARNING = "Test05 flag detected"


def _truthy(v: Any) -> bool:
    n = _as_number(v)
    return bool(n) if n is not None else False


def _detail_setting(detail: DetailLog, name: str) -> tuple[Any, LineRef | None]:
    for key in (f"effective_{name}", f"requested_{name}"):
        rec = detail.record(key)
        if rec is not None:
            return rec.value, rec.ref
    return None, None


def _summary_setting(summary: SummaryLog, name: str) -> tuple[Any, LineRef | None]:
    ent = summary.entry(name)
    return (ent.value, ent.ref) if ent is not None else (None, None)


def _signatures(get, ref_get, warnings: list[tuple[str, LineRef]] | None
                ) -> tuple[list[str], list[str], list[LineRef], bool]:
    sigs: list[str] = []
    signals: list[str] = []
    refs: list[LineRef] = []
    present = False
    same, same_ref = get("performance_issue_same")
    uniq, uniq_ref = get("performance_issue_unique")
    present |= same is not None or uniq is not None
    if _truthy(same) or _truthy(uniq):
        sigs.append("TEST04")
        signals.append(f"performance_issue_same={same!r}, performance_issue_unique={uniq!r}")
        refs += [r for r in (same_ref, uniq_ref) if r is not None]
    tgt, tgt_ref = get("accuracy_log_sampling_target")
    prob, prob_ref = get("accuracy_log_probability")
    present |= tgt is not None or prob is not None
    if _truthy(tgt) or _truthy(prob):
        sigs.append("TEST01")
        signals.append(f"accuracy_log_sampling_target={tgt!r}, accuracy_log_probability={prob!r}")
        refs += [r for r in (tgt_ref, prob_ref) if r is not None]
    t05_warn = [(m, r) for m, r in (warnings or []) if TEST05_WARNING in m]
    differing = []
    for seed in _SEEDS:
        v, r = get(seed)
        rv, _ = ref_get(seed)
        present |= v is not None
        if v is not None and rv is not None and _as_number(v) != _as_number(rv):
            differing.append((seed, v, rv, r))
    if t05_warn or (differing and not sigs):
        sigs.append("TEST05")
        if t05_warn:
            signals.append(f"LoadGen warning {t05_warn[0][0]!r}")
            refs.append(t05_warn[0][1])
        if differing:
            signals.append("RNG seeds differ from the reference's: " + ", ".join(s for s, *_ in differing))
            refs += [r for *_, r in differing if r is not None]
    return sigs, signals, refs, present


def detect_test(ref: RunLogs, comp: RunLogs) -> TestDetection:
    """Detect the compliance test from the compliance run's audit settings.

    TEST04: ``performance_issue_same`` or ``performance_issue_unique`` set. TEST01: accuracy logging
    in a performance run (``accuracy_log_sampling_target`` or ``accuracy_log_probability`` > 0).
    TEST05: LoadGen's ``Test05 flag detected`` warning, or RNG seeds that differ from the reference's
    with no other test's settings. The detail log (``effective_*``, else ``requested_*``) is read
    first; if it shows no test, the summary's "Test Parameters Used" is.
    """
    warnings = [(r.value, r.ref) for r in comp.detail.occurrences.get("warning_generic_message", [])
                if isinstance(r.value, str)]
    sigs, signals, refs, present = _signatures(lambda k: _detail_setting(comp.detail, k),
                                               lambda k: _detail_setting(ref.detail, k), warnings)
    if sigs:
        return TestDetection(sigs[0] if len(sigs) == 1 else None, "detail", tuple(sigs), tuple(signals),
                             tuple(refs), True)
    s_sigs, s_signals, s_refs, s_present = _signatures(lambda k: _summary_setting(comp.summary, k),
                                                       lambda k: _summary_setting(ref.summary, k), None)
    if s_sigs:
        return TestDetection(s_sigs[0] if len(s_sigs) == 1 else None, "summary", tuple(s_sigs),
                             tuple(s_signals), tuple(s_refs), True)
    return TestDetection(None, None, (), (), (), present or s_present)


def check_audit_settings(ref: RunLogs, comp: RunLogs, detection: TestDetection,
                         test: str | None) -> list[Finding]:
    """The compliance run must carry the (declared or detected) test's audit settings, and only
    those; the reference must carry none."""
    out = []
    gate = "audit_settings"
    ev = list(detection.evidence)
    if not detection.keys_present:
        return out  # reported as not checked by the caller
    if not detection.signatures:
        out.append(_finding(
            MLPERF_AUDIT_SETTINGS, "FAIL", gate,
            "the compliance run has no audit settings (no performance_issue_*, no accuracy logging, "
            "the reference's RNG seeds): it is a plain performance run, not a compliance test",
            measured={k: _detail_setting(comp.detail, k)[0] for k in _AUDIT_KEYS},
            threshold=test or "TEST01|TEST04|TEST05 settings",
            refs=[_detail_setting(comp.detail, k)[1] for k in _AUDIT_KEYS[:4]]))
    elif len(detection.signatures) > 1:
        out.append(_finding(
            MLPERF_AUDIT_SETTINGS, "FAIL", gate,
            f"the compliance run carries the audit settings of several tests "
            f"({', '.join(detection.signatures)}): {'; '.join(detection.signals)}",
            measured=list(detection.signatures), threshold="exactly one test", refs=ev))
    elif test is not None and detection.test != test:
        out.append(_finding(
            MLPERF_AUDIT_SETTINGS, "FAIL", gate,
            f"--test {test} was given but the compliance run carries {detection.test} settings "
            f"({'; '.join(detection.signals)})", measured=detection.test, threshold=test, refs=ev))
    else:
        out.append(_finding(
            MLPERF_AUDIT_SETTINGS, "INFO", gate,
            f"compliance run carries {detection.test} audit settings (from its {detection.source} log: "
            f"{'; '.join(detection.signals)})", measured=detection.test, threshold=test or detection.test,
            refs=ev))
    # The reference must be a plain performance run.
    ref_sigs, ref_signals, ref_refs, _ = _signatures(lambda k: _detail_setting(ref.detail, k),
                                                     lambda k: (None, None), None)
    ref_sigs = [s for s in ref_sigs if s != "TEST05"]
    if ref_sigs:
        out.append(_finding(
            CONDITIONS_DIFFER, "FAIL", gate,
            f"the reference run itself carries audit settings ({'; '.join(ref_signals)}): it is not "
            "a submission performance run", measured=ref_sigs, threshold="none", refs=ref_refs))
    ref_audit = [(r.value, r.ref) for r in ref.detail.occurrences.get("warning_generic_message", [])
                 if isinstance(r.value, str) and (AUDIT_CONFIG_WARNING in r.value
                                                 or TEST05_WARNING in r.value)]
    if ref_audit:
        out.append(_finding(
            CONDITIONS_DIFFER, "FAIL", gate,
            f"the reference run was started with an audit config ({ref_audit[0][0]!r}): it is not a "
            "submission performance run", measured=ref_audit[0][0], threshold="no audit.config",
            refs=[ref_audit[0][1]]))
    return out


def check_seeds(ref: RunLogs, comp: RunLogs, test: str | None) -> list[Finding]:
    """TEST01/TEST04 change no RNG seed: the compliance run must use the reference's."""
    if test not in ("TEST01", "TEST04"):
        return []
    diffs = []
    for seed in _SEEDS:
        rv, rr = _detail_setting(ref.detail, seed)
        cv, cr = _detail_setting(comp.detail, seed)
        if rv is not None and cv is not None and _as_number(rv) != _as_number(cv):
            diffs.append((seed, rv, cv, rr, cr))
    if not diffs:
        return []
    return [_finding(
        CONDITIONS_DIFFER, "FLAG", "seeds",
        f"{test} keeps LoadGen's RNG seeds, but the compliance run's differ from the reference's: "
        + ", ".join(f"{s} {rv} vs {cv}" for s, rv, cv, _, _ in diffs)
        + " (different mlperf.conf / round?)",
        measured={s: {"reference": rv, "compliance": cv} for s, rv, cv, _, _ in diffs},
        threshold="equal", refs=[r for *_, rr, cr in diffs for r in (rr, cr)])]


def check_versions(ref: RunLogs, comp: RunLogs) -> list[Finding]:
    r, c = ref.detail.record("loadgen_version"), comp.detail.record("loadgen_version")
    if r is None or c is None or r.value == c.value:
        return []
    return [_finding(MLPERF_LOADGEN_VERSION, "INFO", "loadgen_version",
                     f"the runs used different LoadGen builds: {r.value!r} vs {c.value!r}",
                     measured={"reference": r.value, "compliance": c.value}, threshold="equal",
                     refs=[r.ref, c.ref])]


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
    findings += check_seeds(ref, comp, effective_test)
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
