"""Every measurement against each of its witnesses (issue 27 §1-2): the relations the evidence model lists
are the ones the engine applies, and each one decides on a real recording (``seal-rec-clean``, LoadGen
Offline on the embedded target): moving one witness of a rep's clock, and nothing else, is caught."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.model import witnesses
from perfwarden.auditor.model.schema import evidence_model

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "proof" / "fixtures" / "seal-rec-clean" / "run"


def test_the_engine_applies_exactly_the_relations_the_model_lists():
    listed = {w.id for w in evidence_model().witnesses}
    assert set(witnesses.APPLIED) | set(witnesses.APPLIED_ELSEWHERE) == listed
    assert not set(witnesses.APPLIED) & set(witnesses.APPLIED_ELSEWHERE)


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    return run


def _judged(run: Path, sealed: bool = False) -> list:
    leg = RunLoader(run).leg("base")
    return [f for f in witnesses.check_witnesses(run, leg, sealed).findings if f.severity != "INFO"]


def _edit_line(run: Path, fn) -> None:
    path = run / "legs" / "base" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    fn(lines[0])
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _edit_detail(run: Path, key: str, fn) -> None:
    path = run / "legs" / "base" / "loadgen" / "rep-0" / "mlperf_log_detail.txt"
    out = []
    for raw in path.read_text().splitlines(keepends=True):
        if raw.startswith(":::MLLOG "):
            rec = json.loads(raw[9:])
            if rec["key"] == key:
                value = fn(rec["value"])
                if value is None:
                    continue
                rec["value"] = value
            raw = ":::MLLOG " + json.dumps(rec) + "\n"
        out.append(raw)
    path.write_text("".join(out))


def test_a_recording_agrees_with_every_witness(tmp_path):
    assert _judged(_copy(tmp_path)) == []


@pytest.mark.parametrize("edit,witness", [
    (lambda run: _edit_detail(run, "power_end", lambda v: v[:-3] + "999"), "power window"),
    (lambda run: _edit_detail(run, "result_mean_latency_ns", lambda v: int(v * 0.9)), "mean issue-to-completion"),
    (lambda run: _edit_detail(run, "result_min_latency_ns", lambda v: int(v * 1.2)), "shortest issue-to-completion"),
    (lambda run: _edit_line(run, lambda line: line["loadgen"].update(wall_s=line["duration"] - 0.5)), "loadgen.wall_s"),
    (lambda run: _edit_line(run, lambda line: line["contention"]["end"].update(t=line["contention"]["end"]["t"] - 1)),
     "contention end.t - start.t"),
    (lambda run: _edit_line(run, lambda line: line.update(started_at=line["started_at"] + 2.0)), "power_begin"),
    (lambda run: _edit_line(run, lambda line: line.update(duration=line["duration"] + 0.001)), "last request's end"),
])
def test_one_witness_moved_alone_is_caught(tmp_path, edit, witness):
    run = _copy(tmp_path)
    edit(run)
    found = _judged(run)
    assert found and all(f.code == "EVIDENCE_CORRUPT" for f in found)
    assert any(witness in f.message for f in found), [f.message for f in found]


def test_loadgen_stamps_a_completion_when_the_client_reports_it_later_by_the_lag_only(tmp_path):
    """LoadGen's stamp is the client's report, which follows the stream's end (16 ms on a real vLLM run under
    load, where the old equality refused an honest rep); far later, or any earlier, was edited."""
    from datetime import datetime, timedelta

    def later(ms: int):
        form = "%m-%d-%Y %H:%M:%S.%f"
        return lambda v: (datetime.strptime(v, form) + timedelta(milliseconds=ms)).strftime(form)[:-3]

    run = _copy(tmp_path)
    _edit_detail(run, "power_end", later(40))  # the last completion reported 40 ms after the stream ended
    assert _judged(run) == []
    _edit_detail(run, "power_end", later(200))
    assert any("power window" in f.message for f in _judged(run))


@pytest.mark.parametrize("key", ["power_begin", "result_mean_latency_ns", "result_min_latency_ns"])
def test_a_real_loadgen_log_without_a_figure_it_always_writes_lost_a_witness(tmp_path, key):
    run = _copy(tmp_path)
    _edit_detail(run, key, lambda v: None)
    found = _judged(run)
    assert [(f.code, f.severity) for f in found] == [("EVIDENCE_MISSING", "FAIL")]


def test_a_sealed_runs_log_without_its_version_is_held_as_a_real_one(tmp_path):
    run = _copy(tmp_path)
    _edit_detail(run, "loadgen_version", lambda v: None)
    assert _judged(run, sealed=False) == []  # unsealed and hand-written-looking: held to what it states
    found = _judged(run, sealed=True)
    assert [(f.code, f.severity) for f in found] == [("EVIDENCE_MISSING", "FAIL")]
    assert "loadgen_version" in found[0].message


def test_every_field_the_model_says_the_harness_always_writes_has_a_presence_test():
    assert set(evidence_model().record("bench_line").required) <= set(witnesses.REQUIRED_PRESENT)


@pytest.mark.parametrize("field", ["prompt_ids", "issue_delays", "finish_reasons", "contention"])
def test_a_real_loadgen_reps_line_without_a_field_the_harness_always_writes_lost_it(tmp_path, field):
    run = _copy(tmp_path)
    _edit_line(run, lambda line: line.pop(field))
    found = _judged(run)
    assert ("EVIDENCE_MISSING", "FAIL") in [(f.code, f.severity) for f in found]
    assert any(field in f.message for f in found)


def test_the_servers_totals_after_each_rep_advance_by_the_next_reps_requests_and_tokens(tmp_path):
    run = _copy(tmp_path)
    path = run / "legs" / "base" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[1]["server_info"]["internal_states"][0]["tokens_generated"] += 5
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    found = _judged(run)
    assert [f.code for f in found] == ["EVIDENCE_CORRUPT", "EVIDENCE_CORRUPT"]  # rep 1 over, rep 2 under
    assert all("tokens_generated" in f.message for f in found)
    lines[2]["server_info"]["process"]["pid"] = 1  # another server process: its totals start over
    lines[1]["server_info"]["process"]["pid"] = 2
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert _judged(run) == []


def test_the_lines_loadgen_settings_are_held_against_what_loadgen_says_it_was_given(tmp_path):
    run = _copy(tmp_path)
    _edit_line(run, lambda line: line["loadgen"]["settings"].update(min_query_count=9))
    found = _judged(run)
    assert [(f.code, f.severity) for f in found] == [("EVIDENCE_CORRUPT", "FAIL")]
    assert "requested_min_query_count" in found[0].message
    _edit_detail(run, "requested_min_query_count", lambda v: 9)  # LoadGen's copy moved too: agreed
    assert _judged(run) == []


def test_the_server_log_counts_its_streamed_requests_and_its_starts():
    from perfwarden.auditor.serverlog import scan_server_log

    text = ("=== perfwarden EmbeddedTarget start 2026-01-01T00:00:00Z cmd=['x']\n"
            "t INFO perfwarden.embedded: request done rid=a endpoint=chat stream=True finish=stop prompt_tokens=3\n"
            "t INFO perfwarden.embedded: request done rid=b endpoint=chat stream=False finish=stop prompt_tokens=3\n"
            "t INFO perfwarden.embedded: request done rid=c endpoint=completions stream=True finish=length\n"
            "a client says: === perfwarden X start (not at a line's start)\n")
    log = scan_server_log([text.encode()], "server.log")
    assert (log.streamed_done, log.starts) == (2, 1)


def test_a_rep_dropped_from_the_lines_is_caught_by_the_requests_the_server_log_counts(tmp_path):
    """The coherent-forgery explorer's success (proof/fixtures/forge-records-records-2e53874a): the first rep's
    line dropped, the later ones renumbered. The server's totals after each rep agree with the next rep's, and the
    first rep has none before it; the log still counts the dropped rep's streamed requests."""
    run = _copy(tmp_path)
    log = (run / "legs" / "base" / "server.log").read_text()
    recorded = [len(json.loads(x)["errors"]) for x in (run / "legs" / "base" / "bench_runs.jsonl").read_text().splitlines()]
    assert log.count("stream=True") == sum(recorded) == 24  # 3 reps of 8 requests
    assert _judged(run) == []
    path = run / "legs" / "base" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()][1:]
    for k, line in enumerate(lines):
        line["rep"] = k
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    found = _judged(run)
    assert any("streamed requests" in f.message and f.code == "EVIDENCE_CORRUPT" for f in found), found
    (run / "legs" / "base" / "server.log").write_text(log + "=== perfwarden EmbeddedTarget start (a resume)\n")
    assert not any("streamed requests" in f.message for f in _judged(run))  # two processes: not held
