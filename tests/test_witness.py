"""Every number has a second witness (issue 17 item 3): the comparison framework, LoadGen's logs and the
server's counters against the bench line, per-request arrays against the line's counts.

proof/fixtures/witness-* score the rules end to end (proof/build_witness.py, answers frozen before the
rules ran on them); the tests here pin each relation and its near misses.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import msgspec
import pytest

from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.loadgen_logs import _half_unit
from perfwarden.auditor.model import witnesses as rep_witnesses
from perfwarden.auditor.model.compare import EXACT, Stated, Tolerance, compare
from perfwarden.formats.jsonl import BenchRunLine
from perfwarden.formats.records import EvidenceRef, jsonl_text
from perfwarden.harness.bench_writer import BENCH_LINE_VERSION, RequestRecord, build_bench_line
from perfwarden.orchestrator.synth import BASE_TPUT, CAND_TPUT
from perfwarden.proof.build_integrity import ab, edit_lines, foreign, light
from perfwarden.proof.build_witness import build, counters, legs_v2

from auditor_cases import audit, codes

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
A, B = EvidenceRef(file="a", line=1), EvidenceRef(file="b", line=2)


# ------------------------------------------------------------------------- the framework


def test_compare_holds_a_relation_within_a_tolerance_and_cites_both_sources():
    tol = Tolerance(abs=0.01, rel=0.01)
    assert compare("x", Stated("a", 100.5, A), Stated("b", 100.0, B), tol) is None  # 1% of b
    wrong = compare("x", Stated("a", 102.0, A), Stated("b", 100.0, B), tol, context="rep 3: ")
    assert (wrong.code, wrong.severity, wrong.action) == ("EVIDENCE_CORRUPT", "FAIL", "eject")
    assert wrong.evidence == [A, B] and wrong.message.startswith("rep 3: x: a says 102")
    assert compare("x", Stated("a", 5, A), Stated("b", 9, B), EXACT, relation="at_most") is None
    assert compare("x", Stated("a", 9, A), Stated("b", 5, B), EXACT, relation="at_most") is not None
    assert compare("x", Stated("a", 9, A), Stated("b", 5, B), EXACT, relation="at_least") is None
    assert compare("x", Stated("a", 400, A), Stated("b", 400.0, B), EXACT) is None  # an int written as a float


def test_a_witness_that_is_not_a_finite_number_disagrees():
    for bad in (math.nan, math.inf, None, "8", True, 10 ** 400):
        found = compare("x", Stated("a", bad, A), Stated("b", 1.0, B), Tolerance(rel=1.0))
        assert found is not None and "not a finite number" in found.message, bad


def test_summary_figures_are_held_to_the_digits_they_were_printed_with():
    assert _half_unit("7.39") == 0.005 and _half_unit("40") == 0.5 and math.isclose(_half_unit("1.11139e-07"), 5e-13)


# ------------------------------------------------------------------------- the relations


def _run(tmp_path: Path, **kw) -> tuple[Path, Path]:
    run = tmp_path / "run"
    build(run, *legs_v2(**kw))
    return run, run / "claims" / "001-patch.json"


def _witness(run: Path, leg: str = "cand"):
    return rep_witnesses.check_witnesses(run, RunLoader(run).leg(leg))


def test_the_clean_case_has_every_witness_and_no_finding(tmp_path):
    run, _ = _run(tmp_path)
    result = _witness(run)
    assert not result.findings and not result.not_checked


def test_the_verdict_records_the_witnesses_it_held_each_leg_against(tmp_path):
    run, claim = _run(tmp_path)
    verdict = audit(run, claim)
    by_leg = {w.leg: w for w in verdict.witnesses}
    assert set(by_leg) == {"base", "cand"}
    for w in by_leg.values():
        assert w.reps >= 2 and w.loadgen_logs == w.server_counters == w.reps and w.engine_counters is None
        assert f"LoadGen logs {w.reps}/{w.reps}" in w.held() and f"server counters {w.reps}/{w.reps}" in w.held()
    assert not any("server counters" in n for n in verdict.not_checked), verdict.not_checked


def test_a_line_shorter_than_loadgen_s_span_is_corrupt(tmp_path):
    run, _ = _run(tmp_path)
    edit_lines(run, "cand", lambda line: {**line, "duration": line["duration"] * 0.9,
                                          "ended_at": line["started_at"] + line["duration"] * 0.9})
    found = _witness(run).findings
    assert any("LoadGen's span" in f.message and "at most" in f.message for f in found)
    assert all(f.evidence[0].file == "legs/cand/bench_runs.jsonl" and f.evidence[0].sha256 for f in found)


def test_summary_against_detail(tmp_path):
    run, _ = _run(tmp_path)
    summary = run / "legs" / "cand" / "loadgen" / "rep-0" / "mlperf_log_summary.txt"
    text = summary.read_text()
    line = next(t for t in text.splitlines() if t.startswith("Samples per second"))
    value = float(line.split(":")[1])
    summary.write_text(text.replace(line, f"Samples per second: {value:.2f}"))  # fewer digits: agrees
    assert not _witness(run).findings
    summary.write_text(text.replace(line, f"Samples per second: {value * 1.1:.6g}"))
    assert [f.code for f in _witness(run).findings] == ["EVIDENCE_CORRUPT"]


def test_a_detail_log_removed_from_a_named_folder_is_missing(tmp_path):
    run, _ = _run(tmp_path)
    (run / "legs" / "cand" / "loadgen" / "rep-2" / "mlperf_log_detail.txt").unlink()
    found = _witness(run).findings
    assert [(f.code, f.severity) for f in found] == [("EVIDENCE_MISSING", "FAIL")] and "is absent" in found[0].message


def test_counters_never_fall_and_cover_the_line(tmp_path):
    run, _ = _run(tmp_path)
    edit_lines(run, "cand", lambda line: {**line, "server_counters": {
        "before": {**line["server_counters"]["before"], "decode_steps": 10 ** 6},
        "after": line["server_counters"]["after"]}})
    assert any("never falls" in f.message for f in _witness(run).findings)
    run2 = tmp_path / "r2"
    shutil.copytree(run, run2)
    edit_lines(run2, "cand", lambda line: {**line, "server_counters": counters(line)})
    assert not _witness(run2).findings


def test_response_cache_hits_release_the_token_equality_but_not_the_request_count(tmp_path):
    run, _ = _run(tmp_path)

    def cached(line: dict) -> dict:
        c = counters(line, tokens=0.5)
        c["after"]["response_cache_hits"] = 4  # half the requests answered from the cache: no tokens generated
        return {**line, "server_counters": c}
    edit_lines(run, "cand", cached)
    assert not _witness(run).findings


def test_a_server_reporting_no_counters_writes_null_and_that_is_not_missing(tmp_path):
    run, claim = _run(tmp_path)
    for leg in ("base", "cand"):
        edit_lines(run, leg, lambda line: {**line, "server_counters": None})
    verdict = audit(run, claim)
    assert verdict.verdict == "PASS", verdict.findings
    assert any("carry no server counters" in n for n in verdict.not_checked)


def test_more_gaps_than_tokens_is_held_on_harness_lines_only(tmp_path):
    run, claim = _run(tmp_path)
    pad = lambda line: {**line, "itls": [g + [0.0] for g in line["itls"]]}  # noqa: E731
    edit_lines(run, "cand", pad)
    assert "EVIDENCE_CORRUPT" in codes(audit(run, claim))
    # a foreign file's output lengths may be retokenized counts: a chunk count above them is not proof
    run = tmp_path / "foreign"
    claim = ab(run, base_reps=[foreign(x) for x in light("base", BASE_TPUT, 0)],
               cand_reps=[pad(foreign(x)) for x in light("cand", CAND_TPUT, 1)])
    assert "EVIDENCE_CORRUPT" not in codes(audit(run, claim))


@pytest.mark.slow
def test_every_per_request_array_has_one_entry_per_request(tmp_path):
    for name in ("generated_texts", "issue_delays", "input_lens_source", "output_lens_source", "finish_reasons"):
        run, claim = _run(tmp_path / name)

        def short(line: dict, name=name) -> dict:
            values = line.get(name) or [0.0] * len(line["errors"])
            return {**line, name: values[:-1]}
        edit_lines(run, "cand", short)
        verdict = audit(run, claim)
        assert any(f.code == "EVIDENCE_CORRUPT" and name in f.message for f in verdict.findings), name


def test_a_request_ending_after_its_rep_is_corrupt(tmp_path):
    run, claim = _run(tmp_path)
    edit_lines(run, "cand", lambda line: {**line, "request_starts": [s + line["duration"] for s in line["request_starts"]]})
    assert any("ends after the rep's duration" in f.message for f in audit(run, claim).findings)


# ------------------------------------------------------------------------- the harness writes them


def test_the_harness_writes_version_2_lines_with_the_server_counters():
    record = RequestRecord(index=0, sample_index=0, prompt_id="p0", issued_s=0.0, start_s=0.0, ttft_s=0.1,
                           latency_s=0.2, itls_s=[0.1], input_tokens=4, output_tokens=2, text="hi")
    seen = {"before": {"requests_completed": 1}, "after": {"requests_completed": 2}}
    line = build_bench_line([record], leg="a", rep=0, started_at=100.0, duration_s=0.3, request_rate="inf",
                            max_concurrency=None, backend="openai", dataset_name="d", ended_at=100.4,
                            server_counters=seen)
    assert line["schema_version"] == BENCH_LINE_VERSION == 3 and line["server_counters"] == seen
    decoded = msgspec.json.decode(jsonl_text(line), type=BenchRunLine)
    assert json.loads(bytes(decoded.server_counters)) == seen


@pytest.mark.slow
def test_witness_fixtures_agree_with_their_answer_keys():
    fixtures = sorted(FIXTURES.glob("witness-*"))
    assert len(fixtures) >= 11
    for fixture in fixtures:
        answer = json.loads((fixture / "answer_key.json").read_text())["answers"][0]
        verdict = audit(fixture / "run", fixture / "run" / answer["claim"])
        assert verdict.verdict == answer["verdict"], fixture.name
        assert set(answer["must_include"]) <= codes(verdict), fixture.name
        assert not set(answer["must_exclude"]) & codes(verdict), fixture.name


def test_requests_a_previous_rep_left_in_the_server_are_not_called_edits(tmp_path):
    """Found on real embedded reps under load: two requests of rep 0 timed out client-side and the server
    finished them during rep 1. Its totals then bound rep 1's line from below only."""
    run, _ = _run(tmp_path)

    def leftovers(line: dict) -> dict:
        c = counters(line)
        if line["rep"] == 0:
            c["after"]["requests_admitted"] += 2  # two requests still inside the server when sampled
        elif line["rep"] == 1:
            c["before"]["requests_admitted"] += 2
            c["after"]["requests_admitted"] += 2
            c["after"]["requests_completed"] += 2  # finished during rep 1
            c["after"]["tokens_generated"] += 32
        return {**line, "server_counters": c}
    edit_lines(run, "cand", leftovers)
    result = _witness(run)
    assert not result.findings
    assert any("left requests behind" in n for n in result.not_checked)
