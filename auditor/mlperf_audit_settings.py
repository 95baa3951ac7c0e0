"""MLPerf audit settings: which compliance test the compliance run's settings say it is, and whether
the runs carry the right ones.

``mlperf.py`` composes these rules into one audit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from perfwarden.auditor.mlperf_findings import CONDITIONS_DIFFER, MLPERF_AUDIT_SETTINGS, _finding
from perfwarden.auditor.mlperf_scores import RunLogs, _as_number
from perfwarden.formats.jsonl import LineRef
from perfwarden.formats.mlperf_log import DetailLog, SummaryLog
from perfwarden.formats.records import Finding

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


SettingReader = Callable[[str], tuple[Any, LineRef | None]]
"""One run's setting by name: its logged JSON value (None when not stated) and the line stating it."""


def _signatures(get: SettingReader, ref_get: SettingReader, warnings: list[tuple[str, LineRef]] | None
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
    out: list[Finding] = []
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
