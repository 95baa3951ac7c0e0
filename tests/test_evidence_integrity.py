"""Evidence integrity, rule by rule (issue 13 §1-3, §6-7; issue 12 §3; issue 9 rule 8).

The fixtures in proof/fixtures/int-* and the mutation families score these rules end to end; the
tests here pin each rule's edge: its tolerance, what it cites, what it lists as not checked, and that
hostile sizes are decided without allocating anything in proportion to them. Expected outcomes come
from the rules as documented (docs/auditing.md, "How the auditor decides"), not from running the auditor.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import msgspec
import numpy as np
import pytest

from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.gates import reading
from perfwarden.auditor.gates import measurement
from perfwarden.auditor.gates.reading import missing_rep_numbers
from perfwarden.auditor.rederive import RepError, rederive_rep
from perfwarden.auditor.serverlog import PRESENT, parse_server_log
from perfwarden.formats.jsonl import BenchRunLine, LineRef, OutputLine, read_jsonl
from perfwarden.formats.strict_json import JsonTooDeep, check_depth, json_depth, loads
from perfwarden.harness.contention import parse_cpu_max
from perfwarden.harness.loadgen_client import LoadSettings, request_params
from perfwarden.orchestrator.synth import make_rep

from auditor_cases import BASE_TPUT, CAND_TPUT, audit, build, codes, reps

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
REF = LineRef(Path("bench_runs.jsonl"), 1, 0, 0)


def rederive(line: dict, index: int = 0):
    return rederive_rep(msgspec.json.decode(json.dumps(line), type=BenchRunLine), REF, "cand", index)


def problems(line: dict) -> list[tuple[str, str]]:
    with pytest.raises(RepError) as info:
        rederive(line)
    return info.value.problems


# ---------------------------------------------------------------------------- JSON nesting (§7)


def test_json_depth_counts_brackets_outside_strings_only():
    assert json_depth(b'{"a": "[[[[", "b": [1, {"c": []}]}') == 4
    assert json_depth('"\\"[["') == 0 and json_depth(b"7") == 0 and json_depth(b"") == 0
    assert json_depth(b"[" * 3000 + b"]" * 3000) == 3000


@pytest.mark.parametrize("depth", [65, 3000, 200_000])
def test_every_reader_refuses_deep_json_whatever_the_python(tmp_path, depth):
    deep = b"[" * depth + b"]" * depth
    with pytest.raises(JsonTooDeep):
        loads(deep)
    (tmp_path / "o.jsonl").write_bytes(b'{"prompt_id": "p", "text": "t", "token_ids": ' + deep + b"}\n")
    report = read_jsonl(tmp_path / "o.jsonl", OutputLine)
    assert not report.records and report.issues[0].kind == "corrupt"
    # a bench line's raw-JSON field: refused by the reader (msgspec's own limit) or by the explicit one
    claim = build(tmp_path / "run")
    bench = tmp_path / "run" / "legs" / "cand" / "bench_runs.jsonl"
    lines = bench.read_text().splitlines()
    lines[1] = lines[1].replace('"server_info":null', '"server_info":{"x":' + deep.decode() + "}")
    assert deep.decode() in lines[1]
    bench.write_text("\n".join(lines) + "\n")
    v = audit(tmp_path / "run", claim)
    f = next(f for f in v.findings if f.code == "EVIDENCE_CORRUPT")
    assert v.verdict == "FAIL" and f.evidence[0].line == 2


def test_depth_64_is_accepted():
    check_depth(b"[" * 64 + b"]" * 64)


# ---------------------------------------------------------------------------- hostile sizes (§7)


def test_missing_rep_numbers_is_constant_in_the_rep_ids():
    assert missing_rep_numbers([0, 1, 3, 7]) == (4, [2, 4, 5, 6])
    tracemalloc.start()
    count, shown = missing_rep_numbers([0, 10**12])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 10**12 - 1 and shown == list(range(1, 11)) and peak < 100_000


def test_absurd_rep_id_and_issued_are_decided_in_constant_memory():
    tracemalloc.start()
    loader = RunLoader(FIXTURES / "int-rep-absurd-id" / "run")
    cand = loader.leg("cand")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(cand.reps) == 4 and peak < 20_000_000
    assert any(f.code == "EVIDENCE_CORRUPT" and "rep id" in f.message
               for f in reading.check_reading(loader.problems).findings)
    assert problems({**make_rep("cand", 0, throughput=110.0), "issued": 10**15})[0][0] == "missing"


# ------------------------------------------------------------------- a rep is consistent (§2, 12 §3)


def test_a_clean_rep_passes_and_carries_its_digests():
    rep = rederive(make_rep("cand", 0, throughput=110.0))
    assert rep.timing_digest and rep.lens_digest and rep.prompt_digest is None
    other = rederive(make_rep("cand", 1, throughput=110.0))
    assert other.timing_digest != rep.timing_digest and other.lens_digest == rep.lens_digest


def test_milliseconds_for_seconds_is_named():
    line = make_rep("cand", 0, throughput=110.0)
    line["ttfts"] = [t * 1000 for t in line["ttfts"]]
    line["latencies"] = [x * 1000 for x in line["latencies"]]
    line["itls"] = [[g * 1000 for g in gaps] for gaps in line["itls"]]
    messages = " ".join(m for _, m in problems(line))
    assert "TTFT of" in messages and "milliseconds" in messages


def test_latency_must_cover_ttft_plus_gaps_within_the_stated_tolerance():
    line = make_rep("cand", 0, throughput=110.0)
    need = [t + sum(g) for t, g in zip(line["ttfts"], line["itls"])]
    rederive({**line, "latencies": [x - 0.0009 for x in need]})  # under 1 ms short: rounding
    assert "end before their own tokens" in problems({**line, "latencies": [x * 0.9 for x in need]})[0][1]


def test_request_timeline_must_fit_the_duration():
    line = make_rep("cand", 0, throughput=110.0, start_step_s=0.2)  # starts up to 1.4 s, ends ~2.1 s
    end = max(s + x for s, x in zip(line["request_starts"], line["latencies"]))
    rederive({**line, "duration": end * 0.996})  # 0.4% short: inside max(5 ms, 0.5%)
    kinds = problems({**line, "duration": end * 0.9})
    assert any("span" in m for _, m in kinds)


def test_every_broken_rule_is_reported_not_only_the_first():
    line = make_rep("cand", 0, throughput=110.0)
    line = {**line, "completed": 9, "rep": -1, "ttfts": [5000.0] + line["ttfts"][1:]}
    messages = [m for _, m in problems(line)]
    assert any("rep id" in m for m in messages) and any("TTFT of 5000" in m for m in messages)
    assert any("completed=9" in m for m in messages)


def test_outputs_longer_than_their_budget_are_corrupt():
    line = {**make_rep("cand", 0, throughput=110.0), "request_params": {"max_tokens": 16}}
    assert "more than its max_tokens 16" in problems(line)[0][1]
    rederive({**line, "request_params": {"max_tokens": 32}})


def test_an_aggregate_off_by_10x_is_corrupt_but_40_percent_is_a_flag(tmp_path):
    line = make_rep("cand", 0, throughput=110.0)
    assert "output_throughput" in problems({**line, "output_throughput": 1100.0})[0][1]
    assert rederive({**line, "output_throughput": 154.0}).reported["output_throughput"] == 154.0


def test_duplicated_timings_across_legs_are_corrupt_and_cite_both_lines(tmp_path):
    base = reps("base", BASE_TPUT, 0)
    cand = [{**b, "leg": "cand", "started_at": b["started_at"] + 1, "duration": b["duration"] * 0.9} for b in base]
    v = audit(tmp_path, build(tmp_path, base_reps=base, cand_reps=cand))
    dup = [f for f in v.findings if f.code == "EVIDENCE_CORRUPT" and "same per-request timings" in f.message]
    assert len(dup) == 5 and v.verdict == "FAIL"
    assert {e.file for e in dup[0].evidence} == {"legs/base/bench_runs.jsonl", "legs/cand/bench_runs.jsonl"}


def test_a_rep_before_the_run_started_is_corrupt(tmp_path):
    claim = build(tmp_path, base_reps=reps("base", BASE_TPUT, 1_795_341_600.0))
    manifest = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps({**manifest, "started_at": "2026-11-22T12:00:00Z"}))
    v = audit(tmp_path, claim)
    assert "EVIDENCE_CORRUPT" in codes(v, "FAIL")
    assert any("before the run did" in f.message for f in v.findings)


# ---------------------------------------------------------------------------- the server log (§3)


def test_server_log_copies_are_read_from_the_real_formats():
    lines = [
        '2026-11-22T02:27:19.185 INFO perfwarden.embedded: effective_config {"threads": 2, "op_overrides": {}}',
        "2026-11-22T02:27:20.000 INFO perfwarden.embedded: ENGAGED quantization=int8_dynamic "
        "linear_modules_quantized=30",
        "2026-11-22T02:27:21.000 INFO perfwarden.embedded: ENGAGED op_override op='rmsnorm' first call",
        "2026-11-22T02:27:22.000 WARNING perfwarden.embedded: ENGAGED response_cache size=1024: identical requests",
        "[2026-11-22 10:00:01] server_args=ServerArgs(model_path='/m', tp_size=8, mem_fraction_static=0.85, "
        "attention_backend=None, cuda_graph_bs=[1, 2], load_format=LoadFormat.AUTO)",
        "2026-11-22T02:27:23.000 INFO perfwarden.embedded: effective_config {\"threads\": ",
    ]
    copies, notes = parse_server_log(lines)
    by_line = {c.line: (c.source, c.values) for c in copies}
    assert by_line[1] == ("effective_config", {"threads": 2, "op_overrides": {}})
    assert by_line[2] == ("engaged", {"quantization": "int8_dynamic"})
    assert by_line[3] == ("engaged", {"op_overrides.rmsnorm": PRESENT})
    assert by_line[4] == ("engaged", {"response_cache": True})
    assert by_line[5] == ("server_args", {"model_path": "/m", "tp_size": 8, "mem_fraction_static": 0.85,
                                          "attention_backend": None, "cuda_graph_bs": [1, 2]})
    assert len(notes) == 1 and notes[0].startswith("line 6 does not parse")


def test_an_engaged_override_the_server_info_does_not_list_is_a_misreport(tmp_path):
    claim = build(tmp_path, cand_log=["server ready", "INFO x: ENGAGED op_override op='rmsnorm' first call"])
    v = audit(tmp_path, claim)
    f = next(f for f in v.findings if f.code == "CONDITIONS_MISREPORTED")
    assert "op_overrides.rmsnorm" in f.message and f.evidence[0].file == "legs/cand/server.log"


# --------------------------------------------------------------------------- contention (§6)


def test_machine_cores_is_the_smallest_known_budget():
    assert measurement.machine_cores({"ncpu": 16, "ncpu_available": 4, "cpu_quota_cores": 2.5}) == 2.5
    assert measurement.machine_cores({"ncpu": 2}) == 2 and measurement.machine_cores({}) is None
    assert parse_cpu_max("200000 100000\n") == 2.0 and parse_cpu_max("max 100000") is None


@pytest.mark.parametrize("sample, busy", [
    ({"ncpu": 2, "busy": [{"name": "a", "cpu_pct": 20.0}] * 3}, True),     # 60% of a core summed
    ({"ncpu": 2, "busy": [{"name": "a", "cpu_pct": 20.0}] * 2}, False),    # 40%
    ({"ncpu": 16, "busy": [{"name": "a", "cpu_pct": 90.0}] * 3}, True),    # one process past half a core
    ({"ncpu": 16, "busy": [{"name": "a", "cpu_pct": 40.0}] * 9}, False),   # 360% < a quarter of 16 cores
    ({"ncpu": 2, "cpu_busy_pct": 26.0}, True),                             # 0.52 of 2 cores busy while idle
    ({"ncpu": 2, "loadavg": [3.9, 1, 1]}, False), ({"ncpu": 2, "loadavg": [4.0, 1, 1]}, True),
])
def test_contention_is_judged_on_the_whole_machine(sample, busy):
    assert bool(measurement.sample_contention(sample)) is busy


def test_missing_samples_flag_harness_lines_and_note_foreign_ones(tmp_path):
    loader = RunLoader(FIXTURES / "int-contention-missing" / "run")
    result = measurement.check_contention(FIXTURES / "int-contention-missing" / "run", loader.leg("cand"))
    assert [(f.code, f.severity, f.action) for f in result.findings] == [("EVIDENCE_MISSING", "FLAG", "remeasure")]
    loader = RunLoader(FIXTURES / "int-foreign-sglang-pair" / "run")
    result = measurement.check_contention(FIXTURES / "int-foreign-sglang-pair" / "run", loader.leg("cand"))
    assert not result.findings and "foreign bench file" in result.not_checked[0]


def test_an_unreadable_sample_shows_no_quiet_machine_and_a_malformed_one_is_corrupt(tmp_path):
    """A harness line whose samples state an error (no /proc) cannot show a quiet machine: EVIDENCE_MISSING
    (FLAG, remeasure), never a PASS on an unchecked rep; a foreign file's is listed as not checked."""
    err = [make_rep("cand", k, throughput=t, started_at=1001.0 + 2 * k,
                    contention={"start": {"error": "no /proc"}, "end": {"error": "no /proc"}})
           for k, t in enumerate(CAND_TPUT)]
    v = audit(tmp_path, build(tmp_path, cand_reps=err))
    assert v.verdict == "FLAG" and "EVIDENCE_MISSING" in codes(v, "FLAG")
    foreign = [{k: x for k, x in r.items() if k != "schema_version"} for r in err]
    v = audit(tmp_path, build(tmp_path, cand_reps=foreign))
    assert any("states an error" in n for n in v.not_checked) and "EVIDENCE_MISSING" not in codes(v, "FLAG")
    bad = [{**r, "contention": {"busy": [{"name": "x", "cpu_pct": -5}]}} for r in err]
    assert "EVIDENCE_CORRUPT" in codes(audit(tmp_path, build(tmp_path, cand_reps=bad)), "FAIL")


# -------------------------------------------------------------------------- order of reps (§6)


def _legs(tmp_path, base_times, cand_times, **kw):
    base = [make_rep("base", k, throughput=t, started_at=s, **kw)
            for k, (t, s) in enumerate(zip(BASE_TPUT, base_times))]
    cand = [make_rep("cand", k, throughput=t, started_at=s, **kw)
            for k, (t, s) in enumerate(zip(CAND_TPUT, cand_times))]
    build(tmp_path, base_reps=base, cand_reps=cand)
    loader = RunLoader(tmp_path)
    return loader.leg("base"), loader.leg("cand")


def test_interleaving_accepts_any_mixed_order_and_flags_blocks(tmp_path):
    base, cand = _legs(tmp_path, [1, 2, 5, 8, 9], [3, 4, 6, 7, 10])
    assert not measurement.check_interleaving(tmp_path, base, cand).findings
    base, cand = _legs(tmp_path, [6, 7, 8, 9, 10], [1, 2, 3, 4, 5])  # the candidate's block first
    f = measurement.check_interleaving(tmp_path, base, cand).findings[0]
    assert f.code == "NOT_INTERLEAVED" and f.measured == "CCCCCBBBBB"


def test_interleaving_without_start_times(tmp_path):
    base, cand = _legs(tmp_path, [1, 3, 5, 7, 9], [2, 4, 6, 8, 10])
    for rep in base.reps + cand.reps:
        rep.started_at = None
    assert measurement.check_interleaving(tmp_path, base, cand).findings[0].code == "EVIDENCE_MISSING"
    for rep in base.reps + cand.reps:
        rep.schema_version = None  # a foreign file: not checked, never passed
    result = measurement.check_interleaving(tmp_path, base, cand)
    assert not result.findings and "not verifiable" in result.not_checked[0]


# ------------------------------------------------------------------- a torn tail is not a crash (9.8)


def test_torn_last_rep_is_not_a_crash_but_a_failed_leg_is(tmp_path):
    run = FIXTURES / "int-torn-missing-rep" / "run"
    v = audit(run, run / "claims" / "001-patch.json")
    assert v.verdict == "FLAG" and "SERVER_CRASH" not in codes(v)
    claim = build(tmp_path, cand_reps=reps("cand", CAND_TPUT[:4], 1), cand_status="failed")
    assert "SERVER_CRASH" in codes(audit(tmp_path, claim), "FAIL")


# ------------------------------------------------------------------------------ workload (§1)


def test_a_declared_workload_change_is_not_a_confound(tmp_path):
    cand = reps("cand", CAND_TPUT, 1, max_concurrency=32)
    claim = build(tmp_path, cand_reps=cand, claim={"lever": {"name": "max_concurrency=32", "lever_class": "B",
                                                             "config_keys": ["max_batch_size", "max_concurrency"]}})
    v = audit(tmp_path, claim)
    assert not [f for f in v.findings if f.gate == "workload"], [f.message for f in v.findings]


def test_workload_differences_cite_a_line_of_each_leg(tmp_path):
    v = audit(tmp_path, build(tmp_path, cand_reps=reps("cand", CAND_TPUT, 1, max_concurrency=32)))
    f = next(f for f in v.findings if f.gate == "workload")
    assert f.code == "CONDITIONS_DIFFER" and f.measured == [16, 32]
    assert [e.file for e in f.evidence] == ["legs/base/bench_runs.jsonl", "legs/cand/bench_runs.jsonl"]


def test_what_no_leg_records_is_listed_not_passed(tmp_path):
    v = audit(tmp_path, build(tmp_path))
    notes = " | ".join(v.not_checked)
    assert "request_params" in notes and "requests issued per rep" in notes and v.verdict == "PASS"


def test_reps_of_one_leg_with_different_loads(tmp_path):
    cand = reps("cand", CAND_TPUT, 1)
    cand[3]["max_concurrency"] = 64
    v = audit(tmp_path, build(tmp_path, cand_reps=cand))
    assert any("are not replicates" in f.message for f in v.findings)


def test_an_unreadable_loadgen_log_is_not_checked(tmp_path):
    claim = build(tmp_path)
    folder = tmp_path / "legs" / "cand" / "loadgen" / "rep-0"
    folder.mkdir(parents=True)
    (folder / "mlperf_log_detail.txt").write_text("not a LoadGen log\n")
    v = audit(tmp_path, claim)
    assert v.verdict == "PASS" and any("LoadGen log not read" in n for n in v.not_checked)


# ------------------------------------------------------------------------- the harness records


def test_request_params_are_the_body_without_the_prompt():
    settings = LoadSettings(max_tokens=7, extra_body={"ignore_eos": True, "top_p": 0.9})
    assert request_params(settings) == {"max_tokens": 7, "temperature": 0, "stream": True,
                                        "stream_options": {"include_usage": True}, "ignore_eos": True, "top_p": 0.9}


def test_embedded_lab_writes_the_leg_workload_in_bench_line_terms():
    from perfwarden.harness.labs.embedded import EmbeddedLab
    from perfwarden.harness.labs.lab import LegPlan

    lab = EmbeddedLab(max_tokens=16)
    wl = lab.workload(LegPlan(leg="base", role="baseline", config=lab.base_config()))
    assert wl["scenario"] == "Offline" and wl["request_params"]["max_tokens"] == 16
    assert wl["loadgen"]["settings"]["min_query_count"] == 8 and wl["dataset_name"].startswith("perfwarden-")


# ------------------------------------------------------------------------------ speed, exactly


@pytest.mark.parametrize("kind", ["lognormal", "ties", "sorted", "half_zero", "blocks"])
def test_bracketed_quantiles_equal_numpy_bit_for_bit(kind):
    from perfwarden.auditor.rederive import _median_p99

    rng = np.random.default_rng(7)
    n = 200_001
    values = {"lognormal": lambda: rng.lognormal(-4, 0.3, n), "ties": lambda: rng.integers(0, 5, n).astype(float),
              "sorted": lambda: np.sort(rng.random(n)),
              "half_zero": lambda: np.concatenate([np.zeros(n // 2), rng.random(n - n // 2)]),
              "blocks": lambda: np.repeat(rng.random(n // 1000 + 1), 1000)[:n]}[kind]()
    want = np.percentile(values, [50, 99])
    assert _median_p99(values) == (float(want[0]), float(want[1]))


def test_same_prompt_ids_over_other_prompts_is_a_workload_difference(tmp_path):
    ids = {"prompt_ids": [f"p{i}" for i in range(8)]}
    base = [{**r, **ids} for r in reps("base", BASE_TPUT, 0)]
    cand = [{**r, **ids, "input_lens": [64] * 8, "total_input_tokens": 512} for r in reps("cand", CAND_TPUT, 1)]
    v = audit(tmp_path, build(tmp_path, base_reps=base, cand_reps=cand))
    f = next(f for f in v.findings if f.gate == "workload")
    assert f.code == "CONDITIONS_DIFFER" and "input lengths" in f.message


def test_a_load_field_only_one_leg_records_is_missing_evidence_not_a_pass(tmp_path):
    params = {"request_params": {"max_tokens": 32, "temperature": 0}}
    v = audit(tmp_path, build(tmp_path, base_reps=[{**r, **params} for r in reps("base", BASE_TPUT, 0)]))
    f = next(f for f in v.findings if f.gate == "workload")
    assert (f.code, f.severity, f.action) == ("EVIDENCE_MISSING", "FLAG", "remeasure") and v.verdict == "FLAG"
    assert "'request_params'" in f.message and f.evidence[0].file == "legs/cand/bench_runs.jsonl"
