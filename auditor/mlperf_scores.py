"""MLPerf scores and pass bands: the scenario's score from each log, printed-precision comparison,
and the official threshold rule of TEST01/TEST04/TEST05.

``mlperf.py`` composes these rules into one audit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, TypeGuard

from perfwarden.auditor.mlperf_findings import CACHING_SUSPECTED, MLPERF_THRESHOLD, _finding
from perfwarden.formats.jsonl import LineRef
from perfwarden.formats.mlperf_log import DetailLog, MlperfLogError, SummaryLog, parse_number
from perfwarden.formats.records import Finding

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


def detail_scenario(run: RunLogs) -> str:
    """``effective_scenario`` (raises when absent or unknown)."""
    rec = run.detail.record("effective_scenario")
    if rec is None:
        raise MlperfLogError(f"{run.label} detail log {str(run.detail.path)!r} has no "
                             f"{'effective_scenario'!r} line", path=run.detail.path, kind="missing")
    if not isinstance(rec.value, str) or rec.value not in SCENARIOS:
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


def _is_number(v: object) -> TypeGuard[int | float]:
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
    kind: Literal["throughput", "latency"] = "latency" if scenario in STREAM_SCENARIOS else "throughput"
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
    kind: Literal["throughput", "latency"] = "latency" if scenario in STREAM_SCENARIOS else "throughput"
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
    tol = 0.5 * 10.0 ** (-_decimals(st)) + 0.5 * 10.0 ** (-_decimals(repr(d))) + 1e-9 * max(abs(s), abs(d))
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
