"""A compliance run's LoadGen settings against its reference run's.

Apart from the test's own audit settings, every setting of the compliance run must equal the
reference run's. The registry below classifies every ``effective_*``/``requested_*`` key LoadGen logs;
a key it does not list is a condition (fails closed). Classes, and why:

- ``audit``: a compliance test's own audit setting (its ``audit.config``): TEST01 the accuracy-log
  keys, TEST04 ``performance_issue_*`` and ``min_query_count`` (set per model, e.g. stable-diffusion-xl
  and wan-2.2), TEST05 the three RNG seeds. Free for the test it belongs to; in another test's run a
  difference from the reference is MLPERF_AUDIT_SETTINGS (FAIL): the run was not started with its
  test's audit.config alone (TEST01/TEST04 keep LoadGen's seeds).
- ``derived``: LoadGen computes it from other settings (``effective_min_sample_count``, the target
  duration, Offline's ``samples_per_query``, a stream scenario's ``target_qps``): the inputs are judged.
- ``hint``: the performance hint a submitter tunes per run (``offline_expected_qps``,
  ``*_expected_latency_ns``, LoadGen's issue threads) only sizes the run; Server's target QPS is the
  load whose completed rate *is* the score, so the pass band judges it. INFO, never a confound:
  MLCommons publishes compliance runs with other targets (e.g. TEST04 Server at 92% of the reference
  QPS, TEST05 Server at 110%) and the official answers are PASS.
- ``longer``: a run-length minimum (``min_duration_ms``, ``min_query_count``): the compliance run may
  be longer (a stronger measurement), never shorter -- FAIL.
- ``cap``: a run-length maximum (``max_duration_ms``, ``max_query_count``; 0 = none): never tighter.
- ``sample_set``: ``performance_sample_count``: FAIL, except TEST04 (FLAG): its run issues one sample
  over and over, so the loaded set does not change the work (a reviewer still looks).
- ``covered``: judged by another rule (scenario, test mode, the benchmark settings, the Server latency
  target); ``unused``: not read in a PerformanceOnly run (accuracy-mode sample count, peak finding).
- ``equal`` (everything else, unknown keys included): a difference is CONDITIONS_DIFFER (FAIL).

A key one run states and the other does not cannot be shown equal: FAIL when both runs name the same
LoadGen build (it prints the same settings in every run of a scenario: a missing line is an edited
log), INFO otherwise (keys come and go between LoadGen versions). The summaries' "Test Parameters
Used" lines are compared too, as a second witness of the same settings.

The test's own audit settings must also be what its audit.config requires, as the evidence model's
``compliance_tests`` says (:func:`check_own_audit_values`): TEST01 ``accuracy_log_rng_seed``
720381539243781796 (every TEST01 audit.config sets it) and at least the smallest sampling target any
model's audit.config sets (50); TEST04 ``performance_issue_same`` on, ``performance_issue_unique`` off,
``performance_issue_same_index`` 3 (every scenario of every round); TEST05 all three seeds changed.
Missing, weakened or other: MLPERF_AUDIT_SETTINGS (FAIL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfwarden.auditor.mlperf_checks import _TEST_PARAMS as TEST_PARAMS
from perfwarden.auditor.mlperf_findings import CONDITIONS_DIFFER, MLPERF_AUDIT_SETTINGS, _finding
from perfwarden.auditor.mlperf_scores import _as_number
from perfwarden.auditor.model.schema import RequiredSetting, SettingRequirement, evidence_model
from perfwarden.formats.jsonl import LineRef
from perfwarden.formats.mlperf_log import DetailLog, SummaryLog, parse_number
from perfwarden.formats.records import Finding, Severity

AUDIT_KEYS: dict[str, tuple[str, ...]] = {
    "TEST01": ("accuracy_log_rng_seed", "accuracy_log_sampling_target", "accuracy_log_probability"),
    "TEST04": ("performance_issue_unique", "performance_issue_same", "performance_issue_same_index",
               "min_query_count"),
    "TEST05": ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"),
}
"""Each test's own audit settings (mlcommons/inference ``compliance/TEST0x/**/audit.config``)."""

_CLASSES: dict[str, str] = {
    # derived from other settings
    "min_sample_count": "derived", "target_duration_ms": "derived",
    # performance hints and LoadGen's issue machinery
    "offline_expected_qps": "hint", "single_stream_expected_latency_ns": "hint",
    "multi_stream_expected_latency_ns": "hint", "server_target_qps": "hint", "server_num_issue_query_threads": "hint",
    # run length
    "min_duration_ms": "longer", "min_query_count": "longer", "max_duration_ms": "cap", "max_query_count": "cap",
    "performance_sample_count": "sample_set", "performance_sample_count_override": "sample_set",
    # judged elsewhere
    "scenario": "covered", "test_mode": "covered", "target_latency_ns": "covered",
    "server_target_latency_ns": "covered", "target_latency_percentile": "covered",
    "single_stream_target_latency_percentile": "covered", "multi_stream_target_latency_percentile": "covered",
    "server_target_latency_percentile": "covered", "use_token_latencies": "covered",
    "server_ttft_latency": "covered", "server_tpot_latency": "covered",
    # not read in a PerformanceOnly run
    "accuracy_sample_count": "unused", "accuracy_sample_count_override": "unused",
    "server_find_peak_qps_decimals_of_precision": "unused", "server_find_peak_qps_boundary_step_size": "unused",
}
_AUDIT_OWNER = {key: test for test, keys in AUDIT_KEYS.items() for key in keys}
_WHY = {
    "longer": "a shorter run than the reference's is a weaker measurement under other conditions",
    "cap": "a tighter cap than the reference's can end the compliance run earlier (0 means none)",
    "sample_set": "a different loaded sample set (fits other caches)",
    "equal": "a LoadGen setting the test does not change",
}


@dataclass(frozen=True)
class SettingDiff:
    """One setting whose value differs between the runs (or that one run alone states)."""

    key: str
    reference: Any
    compliance: Any
    klass: str
    owner: str | None


def setting_name(key: str) -> str | None:
    """``effective_x``/``requested_x`` -> ``x``; None for keys that are not settings."""
    for prefix in ("effective_", "requested_"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return None


def classify(key: str, scenario: str, test: str | None) -> tuple[str, str | None]:
    """(class, owning test) of one logged setting key, for runs of ``scenario`` audited as ``test``."""
    name = setting_name(key) or key
    owner = _AUDIT_OWNER.get(name)
    if name == "min_query_count" and test != "TEST04":
        owner = None  # TEST04's own; for the other tests a run-length minimum
    if owner is not None:
        return "audit", owner
    if name == "target_qps":
        return ("hint" if scenario == "Server" else "derived"), None
    if name == "samples_per_query" and scenario == "Offline":
        return "derived", None  # Offline: one query sized from the expected QPS and the duration
    return _CLASSES.get(name, "equal"), None


def setting_diffs(ref: DetailLog, comp: DetailLog, scenario: str, test: str | None,
                  summaries: tuple[SummaryLog, SummaryLog] | None = None) -> list[SettingDiff]:
    """Every setting whose first value differs between the runs, classified (pure). The detail log's
    keys first; then the summaries' "Test Parameters Used" lines (a second witness: a setting edited in
    one log and deleted from the other still differs), under the detail key they are printed from."""
    out = []
    keys = {k for log in (ref, comp) for k in log.first if setting_name(k) is not None}
    for key in sorted(keys):
        rv, cv = ref.get(key), comp.get(key)
        if _same(rv, cv):
            continue
        klass, owner = classify(key, scenario, test)
        out.append(SettingDiff(key, rv, cv, klass, owner))
    seen = {d.key for d in out if d.reference is not None and d.compliance is not None}
    for label, key in TEST_PARAMS.items():
        if summaries is None or key in seen:
            continue
        rv, cv = (summary.get(label) for summary in summaries)
        if rv is None or cv is None or _same(parse_number(rv) if parse_number(rv) is not None else rv,
                                             parse_number(cv) if parse_number(cv) is not None else cv):
            continue
        klass, owner = classify(key, scenario, test)
        out.append(SettingDiff(f"summary {label!r}", rv, cv, klass, owner))
    return out


def _same(a: Any, b: Any) -> bool:
    na, nb = _as_number(a), _as_number(b)
    if a is not None and b is not None and na is not None and nb is not None:
        return na == nb
    return bool(a == b)


def _allowed(d: SettingDiff) -> bool:
    """A run-length difference in the stronger direction."""
    r, c = _as_number(d.reference), _as_number(d.compliance)
    if r is None or c is None:
        return False
    if d.klass == "longer":
        return c >= r
    return c == 0 or (r != 0 and c >= r)  # cap: none, or no tighter than the reference's


def check_settings(ref: DetailLog, comp: DetailLog, scenario: str, test: str | None, same_build: bool,
                   summaries: tuple[SummaryLog, SummaryLog] | None = None) -> list[Finding]:
    """Findings for every setting of the compliance run that differs from the reference's."""
    diffs = setting_diffs(ref, comp, scenario, test, summaries)
    gate = "settings"
    fail: list[SettingDiff] = []
    flag: list[SettingDiff] = []
    one_sided: list[SettingDiff] = []
    foreign: list[SettingDiff] = []
    info: list[SettingDiff] = []
    for d in diffs:
        if d.klass in ("derived", "covered", "unused") or (d.klass == "audit" and (d.owner == test or test is None)):
            continue
        if d.reference is None or d.compliance is None:
            one_sided.append(d)
        elif d.klass == "audit":
            foreign.append(d)
        elif d.klass == "hint" or (d.klass in ("longer", "cap") and _allowed(d)):
            info.append(d)
        elif d.klass == "sample_set" and test == "TEST04":
            flag.append(d)
        else:
            fail.append(d)
    out: list[Finding] = []

    def refs(ds: list[SettingDiff]) -> list[LineRef | None]:
        return [r for d in ds for r in (_ref(ref, d.key), _ref(comp, d.key))]

    def show(ds: list[SettingDiff]) -> str:
        return "; ".join(f"{d.key} {d.reference!r} vs {d.compliance!r}" for d in ds[:6])

    def measured(ds: list[SettingDiff]) -> dict[str, dict[str, Any]]:
        return {d.key: {"reference": d.reference, "compliance": d.compliance} for d in ds}

    if foreign:
        # An audit setting always names the test that owns it (``classify``); the filter only says so.
        owners = sorted({d.owner for d in foreign if d.owner is not None})
        out.append(_finding(MLPERF_AUDIT_SETTINGS, "FAIL", gate,
                            f"the {test} compliance run carries audit settings of {', '.join(owners)} "
                            f"({show(foreign)}): it was not started with {test}'s audit.config alone",
                            measured=measured(foreign), threshold="the reference's value", refs=refs(foreign)))
    graded: tuple[tuple[list[SettingDiff], Severity], ...] = ((fail, "FAIL"), (flag, "FLAG"))
    for ds, sev in graded:
        if ds:
            why = "; ".join(sorted({_WHY.get(d.klass, _WHY["equal"]) for d in ds}))
            out.append(_finding(CONDITIONS_DIFFER, sev, gate,
                                f"the compliance run's settings differ from the reference's beyond "
                                f"{test + chr(39) + 's' if test else 'the test' + chr(39) + 's'} own audit settings: "
                                f"{show(ds)} ({why})",
                                measured=measured(ds), threshold="equal to the reference", refs=refs(ds)))
    if one_sided:
        out.append(_finding(CONDITIONS_DIFFER, "FAIL" if same_build else "INFO", gate,
                            f"setting(s) stated by one run only: {show(one_sided)}"
                            + (": one LoadGen build prints the same settings in every run of a scenario, so a "
                               "missing line is an edited log and the runs cannot be shown to share the setting"
                               if same_build else " (the runs used different LoadGen builds: not compared)"),
                            measured=measured(one_sided), threshold="stated by both runs", refs=refs(one_sided)))
    if info:
        out.append(_finding(CONDITIONS_DIFFER, "INFO", gate,
                            f"performance hints, load targets or longer run lengths differ: {show(info)} (a hint only "
                            "sizes the run; a Server target is the load the score measures, judged by the pass band; "
                            "a longer run is a stronger measurement)", measured=measured(info),
                            threshold="hints and longer runs may differ", refs=refs(info)))
    return out


def _ref(log: DetailLog, key: str) -> LineRef | None:
    rec = log.record(key)
    return rec.ref if rec is not None else None


def _value(log: DetailLog, name: str) -> tuple[Any, Any]:
    for key in (f"effective_{name}", f"requested_{name}"):
        rec = log.record(key)
        if rec is not None:
            return rec.value, rec.ref
    return None, None


def _meets(req: SettingRequirement, comp: DetailLog, ref: DetailLog) -> bool | None:
    """Whether the compliance run's setting meets one way of its requirement (None: the log does not print it)."""
    value = _value(comp, req.name)[0]
    if value is None:
        return None
    number = _as_number(value)
    if req.differs_from_reference:
        return not _same(value, _value(ref, req.name)[0])
    if req.equals is not None:
        return number is not None and number == _as_number(req.equals)
    if req.at_least is not None:
        return number is not None and number >= req.at_least
    if req.above is not None:
        return number is not None and number > req.above
    return False


def check_own_audit_values(ref: DetailLog, comp: DetailLog, test: str | None) -> tuple[list[Finding], list[str]]:
    """The test's own audit settings are what its audit.config requires, as the evidence model's
    ``compliance_tests`` says each test does (a value, a minimum, or other than the reference's); a setting the
    log does not print is listed as not checked."""
    spec = evidence_model().compliance_tests.get(test or "")
    if spec is None:
        return [], []
    problems, refs, notes = [], [], []
    for required in spec.settings:
        met = [_meets(req, comp, ref) for req in required.any_of]
        if any(m for m in met):
            continue
        if all(m is None for m in met):
            notes.append(f"audit settings: the compliance detail log does not print "
                         f"{' or '.join(r.name for r in required.any_of)}")
            continue
        stated = [(r.name, _value(comp, r.name)) for r in required.any_of if _value(comp, r.name)[0] is not None]
        problems.append(" and ".join(f"{name} is {value!r}" for name, (value, _) in stated)
                        + f" ({test}'s audit.config: {_wanted(required)})")
        refs += [r for _, (_, r) in stated]
    if not problems:
        return [], notes
    return [_finding(MLPERF_AUDIT_SETTINGS, "FAIL", "audit_settings",
                     f"the {test} compliance run's own audit settings are missing, weakened or not the test's: "
                     + "; ".join(problems), measured=problems, threshold=f"{test}'s audit.config ({spec.why})",
                     refs=refs)], notes


def _wanted(required: RequiredSetting) -> str:
    out = []
    for req in required.any_of:
        want = ("other than the reference's" if req.differs_from_reference else f"= {req.equals!r}"
                if req.equals is not None else f">= {req.at_least:g}" if req.at_least is not None
                else f"> {req.above:g}")
        out.append(f"{req.name} {want}")
    return " or ".join(out)
