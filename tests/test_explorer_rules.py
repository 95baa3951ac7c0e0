"""Rules the field explorer found missing (proof/fixtures/explore-*): each attack is judged FLAG or FAIL, fail
closed, while its honest near miss stays clean. Pure gates over hand-built evidence: fast."""

from __future__ import annotations

import hashlib
from pathlib import Path

from perfwarden.auditor.evidence import LegEvidence
from perfwarden.auditor.gates.measurement import check_contention
from perfwarden.auditor.gates.reading import check_named_folders
from perfwarden.auditor.loadgen_logs import LoadgenRep
from perfwarden.auditor.model.witnesses import loadgen_findings
from perfwarden.auditor.rederive import RepMetrics
from perfwarden.auditor.stated import Stated
from perfwarden.formats.jsonl import LineRef


def _rep(run: Path, leg: str, rep: int, version: int | None = 1, **kw) -> RepMetrics:
    """A rep whose line was read by the loader (so a gate can cite it)."""
    path = run / "legs" / leg / "bench_runs.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = f'{{"leg":"{leg}","rep":{rep}}}'.encode()
    ref = LineRef(path, rep + 1, 0, len(raw), digest=hashlib.sha256(raw).hexdigest(), head=raw)
    return RepMetrics(leg=leg, rep=rep, ref=ref, n_requests=8, n_ok=8, n_errors=0, duration_s=2.0,
                      schema_version=version, **kw)


def _codes(result) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in result.findings]


# 1. A harness contention sample that lost the figure the gate judges is not a quiet machine.

def test_harness_sample_without_its_load_figure_is_evidence_missing(tmp_path):
    leg = LegEvidence("base", reps=[_rep(tmp_path, "base", 0, contention={"ncpu": 2, "busy": []})])
    result = check_contention(tmp_path, leg)
    assert _codes(result) == [("EVIDENCE_MISSING", "FLAG")]
    assert result.findings[0].action == "remeasure"


def test_version2_sample_without_core_count_is_evidence_missing(tmp_path):
    sample = {"t": 1.0, "loadavg": [0.1, 0.1, 0.1], "cpu_busy_pct": 1.0, "busy": [], "error": None}
    leg = LegEvidence("base", reps=[_rep(tmp_path, "base", 0, version=2, contention={"start": sample, "end": sample},
                                         ended_at=3.0)])
    assert ("EVIDENCE_MISSING", "FLAG") in _codes(check_contention(tmp_path, leg))


def test_complete_or_busy_only_harness_samples_stay_quiet(tmp_path):
    reps = [_rep(tmp_path, "base", 0, contention={"loadavg_1m": 0.5, "ncpu": 2, "busy": []}),
            _rep(tmp_path, "base", 1, contention={"busy": [{"name": "sshd", "cpu_pct": 12.0}]})]
    assert _codes(check_contention(tmp_path, LegEvidence("base", reps=reps))) == []


# 2-3. A harness line's LoadGen folder: named where LoadGen scheduled the leg, its own, named once.

def _named(run: Path, leg: str, rep: int, folder: str | None, version: int | None = 1) -> RepMetrics:
    if folder is not None:
        (run / folder).mkdir(parents=True, exist_ok=True)
    workload = {"loadgen.settings.scenario": "Offline"} if folder is not None or version is not None else {}
    return _rep(run, leg, rep, version=version, loadgen_dir=folder, workload=workload)


def test_harness_line_naming_no_loadgen_folder_in_a_loadgen_leg_is_missing(tmp_path):
    reps = [_named(tmp_path, "b", 0, None)] + [_named(tmp_path, "b", k, f"legs/b/loadgen/rep-{k}") for k in (1, 2)]
    result = check_named_folders(tmp_path, [LegEvidence("b", reps=reps)], sealed=True)
    assert _codes(result) == [("EVIDENCE_MISSING", "FLAG")]


def test_lines_without_loadgen_and_foreign_lines_are_not_asked_for_a_folder(tmp_path):
    (tmp_path / "legs" / "a" / "loadgen" / "rep-0").mkdir(parents=True)  # kept by an earlier harness, unnamed
    plain = [_rep(tmp_path, "a", k) for k in range(2)]
    foreign = [_named(tmp_path, "f", 0, None, version=None), _named(tmp_path, "f", 1, "legs/f/loadgen/rep-1", None)]
    legs = [LegEvidence("a", reps=plain), LegEvidence("f", reps=foreign)]
    assert _codes(check_named_folders(tmp_path, legs, sealed=True)) == []


def test_loadgen_folder_of_another_leg_or_rep_is_corrupt(tmp_path):
    base = [_named(tmp_path, "base", k, f"legs/base/loadgen/rep-{k}") for k in range(2)]
    swapped = [_named(tmp_path, "cand", 0, "legs/base/loadgen/rep-0"),
               _named(tmp_path, "cand", 1, "legs/cand/loadgen/../../base/loadgen/rep-1")]
    result = check_named_folders(tmp_path, [LegEvidence("base", reps=base), LegEvidence("cand", reps=swapped)],
                                 sealed=True)
    assert _codes(result) == [("EVIDENCE_CORRUPT", "FAIL")] * 2
    shared = [_named(tmp_path, "c", 0, "legs/c/loadgen/rep-0"), _named(tmp_path, "c", 1, "legs/c/loadgen/rep-0")]
    assert _codes(check_named_folders(tmp_path, [LegEvidence("c", reps=shared)], sealed=True)) == [
        ("EVIDENCE_CORRUPT", "FAIL")]


def test_each_rep_naming_its_own_folder_passes(tmp_path):
    legs = [LegEvidence(n, reps=[_named(tmp_path, n, k, f"legs/{n}/loadgen/rep-{k}") for k in range(3)])
            for n in ("base", "cand")]
    assert _codes(check_named_folders(tmp_path, legs + legs[:1], sealed=True)) == []


# 4. The harness's own LoadGen detail log without the issued count the auditor reads.

def _logs(issued: int | None) -> LoadgenRep:
    ev = None
    detail = {"tokens_per_second": Stated("LoadGen's detail log", 64.0, ev),
              "max_latency_s": Stated("LoadGen's detail log", 0.5, ev)}
    return LoadgenRep(issued=None if issued is None else (issued, ev), detail=detail, detail_read=True)


def _witnessed(tmp_path: Path, logs: LoadgenRep) -> list:
    rep = _rep(tmp_path, "b", 0, loadgen_dir="legs/b/loadgen/rep-0")
    return [f for f in loadgen_findings(rep, Stated("bench line 1", None, None), logs, "b")
            if "result_query_count" in f.message]


def test_harness_detail_log_without_query_count_is_evidence_missing(tmp_path):
    found = _witnessed(tmp_path, _logs(None))
    assert [(f.code, f.severity, f.action) for f in found] == [("EVIDENCE_MISSING", "FLAG", "remeasure")]


def test_detail_log_with_query_count_is_not_flagged(tmp_path):
    assert _witnessed(tmp_path, _logs(8)) == []


def test_a_harness_sample_whose_busy_list_was_dropped_or_nulled_is_evidence_missing(tmp_path):
    """Found by the field explorer (explore-bench_line-contention-drop/retype): a sample without its list of
    busy processes was judged quiet; an empty list says 'nothing busy', no list says 'not looked at'."""
    for sample in ({"loadavg_1m": 0.5, "ncpu": 2}, {"loadavg_1m": 0.5, "ncpu": 2, "busy": None}):
        leg = LegEvidence("base", reps=[_rep(tmp_path, "base", 0, contention=sample)])
        assert ("EVIDENCE_MISSING", "FLAG") in _codes(check_contention(tmp_path, leg))
    leg = LegEvidence("base", reps=[_rep(tmp_path, "base", 0, contention={"loadavg_1m": 0.5, "ncpu": 2, "busy": []})])
    assert _codes(check_contention(tmp_path, leg)) == []


# 5. A start/end sample pair the harness took: both there, every judged figure set (explore-bench_line-contention-*).

FULL_V1 = {"t": 1.0, "interval_s": 0.25, "ncpu": 2, "loadavg": [0.1, 0.1, 0.1], "procs_running": 1, "procs_total": 90,
           "cpu_busy_pct": 2.0, "busy": [], "threshold_pct": 5.0, "self_pid": 10, "excluded_pids": [10], "error": None}
FULL_V2 = {**FULL_V1, "ncpu_available": 2, "cpu_quota_cores": None}


def _pair(tmp_path: Path, contention: dict, version: int = 1):
    leg = LegEvidence("base", reps=[_rep(tmp_path, "base", 0, version=version, contention=contention, ended_at=3.0)])
    return _codes(check_contention(tmp_path, leg))


def test_a_sample_pair_missing_its_end_or_a_judged_figure_is_evidence_missing(tmp_path):
    """Found by the field explorer (explore-bench_line-contention-drop-faf16f6f, -retype-1845b005): a rep whose end
    sample, or its busy share, was dropped or nulled was judged on what was left, and passed as quiet."""
    no_busy = {k: v for k, v in FULL_V1.items() if k != "cpu_busy_pct"}
    for contention in ({"start": FULL_V1}, {"start": FULL_V1, "end": no_busy},
                       {"start": FULL_V1, "end": {**FULL_V1, "cpu_busy_pct": None}},
                       {"start": {**FULL_V1, "loadavg": None}, "end": FULL_V1}):
        assert ("EVIDENCE_MISSING", "FLAG") in _pair(tmp_path, contention), contention


def test_a_version2_sample_missing_any_field_the_harness_writes_is_evidence_missing(tmp_path):
    for field in sorted(FULL_V2):
        if field != "error":
            sample = {k: v for k, v in FULL_V2.items() if k != field}
            assert ("EVIDENCE_MISSING", "FLAG") in _pair(tmp_path, {"start": FULL_V2, "end": sample}, 2), field


def test_complete_sample_pairs_of_each_era_stay_quiet(tmp_path):
    """Near misses: a version-1 pair without the later fields, and a complete version-2 pair."""
    assert _pair(tmp_path, {"start": FULL_V1, "end": FULL_V1}) == []
    assert _pair(tmp_path, {"start": FULL_V2, "end": FULL_V2}, 2) == []


def test_a_sample_stripped_of_every_figure_or_stating_an_error_shows_no_quiet_machine(tmp_path):
    """A sample emptied of every judged figure was skipped as "not a sample" and the rep judged on the other one;
    a sample stating an error (what the harness writes when it cannot read /proc) hid a busy end the same way.
    Neither shows a quiet machine: EVIDENCE_MISSING (FLAG, remeasure), on one sample or both."""
    stripped = {"t": 1.0, "error": None}
    errored = {"t": 1.0, "error": "cannot sample contention from '/proc'", "self_pid": 10, "excluded_pids": [10]}
    for contention in ({"start": FULL_V2, "end": stripped}, {"start": errored, "end": FULL_V2},
                       {"start": errored, "end": errored}):
        assert ("EVIDENCE_MISSING", "FLAG") in _pair(tmp_path, contention, 2), contention


# 6. A harness rep's detail log states what LoadGen writes in its scenario
#    (explore-loadgen_detail-result_samples_per_second-drop-f4d19fe5).

def _scenario_logs(scenario: str | None, *drop: str) -> LoadgenRep:
    logs = _logs(8)
    logs.scenario = scenario
    logs.detail["samples_per_second"] = Stated("LoadGen's detail log", 4.0, None)
    for name in drop:
        logs.detail.pop(name)
    return logs


def _results_missing(tmp_path: Path, logs: LoadgenRep) -> list:
    rep = _rep(tmp_path, "b", 0, loadgen_dir="legs/b/loadgen/rep-0")
    return [f for f in loadgen_findings(rep, Stated("bench line 1", None, None), logs, "b")
            if f.code == "EVIDENCE_MISSING" and "result_query_count" not in f.message]


def test_an_offline_detail_log_without_its_samples_per_second_is_evidence_missing(tmp_path):
    """Found by the field explorer: the dropped rate left the summary its only witness, and the rep passed."""
    found = _results_missing(tmp_path, _scenario_logs("Offline", "samples_per_second"))
    assert [(f.severity, f.action) for f in found] == [("FAIL", "eject")] and "samples_per_second" in found[0].message


def test_a_detail_log_of_no_scenario_the_harness_runs_is_evidence_missing(tmp_path):
    for scenario in (None, "SingleStream", "offline"):
        assert _results_missing(tmp_path, _scenario_logs(scenario)), scenario


def test_server_logs_need_no_samples_per_second_and_complete_offline_logs_pass(tmp_path):
    """Near misses: Server's completed rate is not read (its span is not the rep's), so its absence is honest."""
    assert _results_missing(tmp_path, _scenario_logs("Server", "samples_per_second")) == []
    assert _results_missing(tmp_path, _scenario_logs("Offline")) == []


def test_a_line_whose_scenario_its_detail_log_contradicts_is_corrupt(tmp_path):
    """A number (here a label) with one source is trusted: the line's scenario is held against the scenario LoadGen
    itself logged, so a Server rep relabelled Offline (or back) is caught; the same scenario stays clean."""
    def found(line_scenario: str) -> list:
        rep = _rep(tmp_path, "b", 0, loadgen_dir="legs/b/loadgen/rep-0",
                   workload={"scenario": line_scenario, "loadgen.settings.scenario": line_scenario})
        return [f for f in loadgen_findings(rep, Stated("bench line 1", None, None), _scenario_logs("Server"), "b")
                if f.code == "EVIDENCE_CORRUPT" and "scenario" in f.message]
    assert [(f.severity, f.action) for f in found("Offline")] == [("FAIL", "eject")]
    assert found("Server") == []
