"""The second witness on a real engine: a leg recorded from vLLM 0.32.0 (CPU) by ``perfwarden measure
--target vllm`` (``tests/data/vllm-run``: its bench lines, vLLM's /metrics samples around each rep,
server_info), audited as recorded and after edits a producer could make to its bench lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfwarden.auditor.audit import audit_path
from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.gates import engine_witness
from perfwarden.formats import vllm_metrics

DATA = Path(__file__).parent / "data" / "vllm-run"


@pytest.fixture
def run(tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(DATA, out)
    (out / "claims").mkdir()
    (out / "claims" / "base.json").write_text(json.dumps(
        {"legs": {"baseline": "base"}, "producer": "integrator", "scope": "baseline", "seq": 1}))
    return out


def gate(run: Path, leg: str = "base"):
    loader = RunLoader(run)
    leg_ev = loader.leg(leg)
    return engine_witness.check_engine_witness(run, engine_witness.load_engine_witness(loader, leg_ev), leg_ev)


def edit_lines(run: Path, name: str, fn) -> None:
    path = run / "legs" / "base" / name
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(fn(i, row)) + "\n" for i, row in enumerate(rows)))


def codes(result) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in result.findings]


def test_the_recorded_leg_agrees_with_the_engines_counters(run):
    result = gate(run)
    assert result.findings == [] and result.not_checked == []
    verdict = audit_path(run, run / "claims" / "base.json")
    assert not [f for f in verdict.findings if f.gate == engine_witness.GATE]


def test_shrunk_ttfts_disagree_with_the_engine(run):
    """A faster-looking line: every TTFT halved (still inside its latency, so the line is self-consistent)."""
    edit_lines(run, "bench_runs.jsonl", lambda i, row: {**row, "ttfts": [t / 2 for t in row["ttfts"]]})
    result = gate(run)
    assert codes(result) == [("EVIDENCE_CORRUPT", "FAIL")] * 2
    assert "TTFT sum" in result.findings[0].message
    verdict = audit_path(run, run / "claims" / "base.json")
    assert verdict.verdict == "FAIL"


def test_a_stretched_baseline_disagrees_with_the_engine(run):
    """A handicapped baseline: latencies and TTFTs stretched by half again, and its span with them (which
    leaves the engine's sample window: a FAIL)."""
    edit_lines(run, "bench_runs.jsonl", lambda i, row: {
        **row, "ttfts": [t * 1.5 for t in row["ttfts"]], "latencies": [t * 1.5 for t in row["latencies"]],
        "duration": row["duration"] * 1.5, "ended_at": row["started_at"] + (row["ended_at"] - row["started_at"]) * 1.5})
    assert ("EVIDENCE_CORRUPT", "FAIL") in codes(gate(run))


def test_a_baseline_stretched_inside_its_span_is_never_banked_on(run):
    """The coherent variant: each request's TTFT and latency pushed later by what its rep's span leaves it
    (its token gaps, counts, start, the rep's duration and window untouched: the line stays self-consistent).
    The engine's counters cannot tell it from a late delivery (the next test), so the rep is re-measured: a
    FLAG that no acceptance rule takes."""
    def stretch(i, row):
        span = min(row["ended_at"] - row["started_at"], row["duration"]) - 0.01
        push = [max(span - s - lat, 0.0) for s, lat in zip(row["request_starts"], row["latencies"])]
        return {**row, "ttfts": [t + d for t, d in zip(row["ttfts"], push)],
                "latencies": [t + d for t, d in zip(row["latencies"], push)]}
    edit_lines(run, "bench_runs.jsonl", stretch)
    result = gate(run)
    assert codes(result) == [("CLIENT_LAG", "FLAG")] * 2
    assert all(f.action == "remeasure" for f in result.findings)
    verdict = audit_path(run, run / "claims" / "base.json")
    assert verdict.verdict != "PASS" and "remeasure" in verdict.actions


LAG = Path(__file__).parent / "data" / "vllm-lag"
"""Two legs of a real vLLM run (the suite's vLLM test in CI, 2-core machine, 2026-11-28), copied as
recorded: rep 0 of ``bundle`` delivered the first text of three requests with their last (TTFT 1.994 s
= latency), 0.85 s after the engine counted their first token; rep 1 of ``bundle-test04`` delivered
everything about 0.5 s late. The engine's counts agree exactly; only the client's times are longer."""


@pytest.mark.parametrize("leg, rep, what", [("bundle", 0, ["TTFT sum"]),
                                            ("bundle-test04", 1, ["TTFT sum", "end-to-end latency sum"])])
def test_a_real_late_delivery_is_re_measured_not_called_corrupt(leg, rep, what):
    loader = RunLoader(LAG)
    leg_ev = loader.leg(leg)
    result = engine_witness.check_engine_witness(LAG, engine_witness.load_engine_witness(loader, leg_ev), leg_ev)
    assert [(f.code, f.severity, f.action) for f in result.findings] == [("CLIENT_LAG", "FLAG", "remeasure")]
    assert f"rep {rep} " in result.findings[0].message
    assert [w.split(":")[0] for w in result.findings[0].measured["lags"]] == [f"{w} (s)" for w in what]
    assert result.value == len(leg_ev.reps) == 3


def test_swapped_witness_records_do_not_witness_their_reps(run):
    edit_lines(run, vllm_metrics.WITNESS_FILE, lambda i, row: {**row, "rep": 1 - row["rep"]})
    result = gate(run)
    corrupt = [f for f in result.findings if f.code == "EVIDENCE_CORRUPT"]
    assert [f.severity for f in corrupt] == ["FAIL"] * 2
    assert all("outside the samples' window" in f.message for f in corrupt)


def test_a_missing_record_a_malformed_one_and_a_second_one(run):
    path = run / "legs" / "base" / vllm_metrics.WITNESS_FILE
    first, second = path.read_text().splitlines()
    path.write_text(first + "\n")
    assert codes(gate(run)) == [("EVIDENCE_MISSING", "FLAG")]
    path.write_text(first + "\n" + json.dumps({**json.loads(second), "note": "x"}) + "\n")
    assert codes(gate(run)) == [("EVIDENCE_CORRUPT", "FAIL"), ("EVIDENCE_MISSING", "FLAG")]
    path.write_text(first + "\n" + second + "\n" + second + "\n")
    assert codes(gate(run)) == [("EVIDENCE_CORRUPT", "FAIL")]
    path.write_text(first + "\n" + second.replace('"rep":1,', '"rep":1,"rep":1,') + "\n")
    assert codes(gate(run))[0] == ("EVIDENCE_CORRUPT", "FAIL")


def test_a_removed_witness_file_fails_the_audit_closed(run):
    (run / "legs" / "base" / vllm_metrics.WITNESS_FILE).unlink()
    assert codes(gate(run)) == [("EVIDENCE_MISSING", "FLAG")] * 2
    assert audit_path(run, run / "claims" / "base.json").verdict != "PASS"


def test_a_foreign_file_and_another_engine_are_not_held_to_it(run):
    edit_lines(run, "bench_runs.jsonl", lambda i, row: {k: v for k, v in row.items() if k != "schema_version"})
    assert gate(run).findings == [] and "foreign file" in gate(run).not_checked[0]
    info = json.loads((run / "legs" / "base" / "server_info.json").read_text())
    info.pop("vllm_version")
    (run / "legs" / "base" / "server_info.json").write_text(json.dumps(info))
    assert gate(run).findings == [] and gate(run).not_checked == []


def test_output_tokens_count_exactly():
    record = vllm_metrics.WitnessRecord(
        schema_version=1, leg="b", rep=0, source="t", before={"vllm:generation_tokens_total": 10.0},
        after={"vllm:generation_tokens_total": 202.0}, before_at=0.0, after_at=1.0)

    class Rep:
        n_ok = 8
        metrics = {"total_output_tokens": 192.0}
        sums: dict = {}

    found = engine_witness.disagreements(Rep, record)
    assert ("output tokens", 192.0, 192.0) not in found
    Rep.metrics = {"total_output_tokens": 193.0}
    assert ("output tokens", 192.0, 193.0) in engine_witness.disagreements(Rep, record)


def test_vllms_logged_arguments_are_a_copy_of_the_conditions(run):
    """vLLM's ``non-default args: {...}`` line is held against server_info.json: a server_info (and the
    bench lines' copies of it) edited to say another batch width than the engine was launched with is
    caught by the log alone."""
    verdict = audit_path(run, run / "claims" / "base.json")
    assert "CONDITIONS_MISREPORTED" not in {f.code for f in verdict.findings}
    info_path = run / "legs" / "base" / "server_info.json"
    info = json.loads(info_path.read_text())
    assert info["max_num_seqs"] == 4
    info_path.write_text(json.dumps({**info, "max_num_seqs": 8}))
    edit_lines(run, "bench_runs.jsonl", lambda i, row: {**row, "server_info": {**row["server_info"], "max_num_seqs": 8}})
    verdict = audit_path(run, run / "claims" / "base.json")
    misreported = [f for f in verdict.findings if f.code == "CONDITIONS_MISREPORTED"]
    assert misreported and "max_num_seqs" in misreported[0].message and verdict.verdict == "FAIL"
    assert any("server.log" in (e.file or "") for f in misreported for e in f.evidence)


def test_the_verdict_says_the_engines_counters_witnessed_every_rep(run):
    """What was checked is typed data on the verdict; a rep held against vLLM's /metrics is not listed as
    one that 'carries no server counters' (it has the engine's own account instead)."""
    verdict = audit_path(run, run / "claims" / "base.json")
    (held,) = verdict.witnesses
    assert (held.leg, held.engine_counters, held.server_counters) == ("base", held.reps, 0) and held.reps >= 2
    assert f"engine /metrics {held.reps}/{held.reps}" in held.held()
    assert not any("server counters" in n for n in verdict.not_checked), verdict.not_checked
    # Without the witness file, every harness rep is unwitnessed, and the verdict says so.
    (run / "legs" / "base" / vllm_metrics.WITNESS_FILE).unlink()
    verdict = audit_path(run, run / "claims" / "base.json")
    assert verdict.witnesses[0].engine_counters == 0
    assert any("no engine /metrics record" in n for n in verdict.not_checked), verdict.not_checked
