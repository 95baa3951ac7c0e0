"""bench_runs.jsonl producer: sglang-compatible keys and units, idempotent appends, contention parsing."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest

from perfwarden.formats.jsonl import BenchRunLine, read_jsonl
from perfwarden.harness import contention as C
from perfwarden.harness.bench_writer import (
                                             RequestRecord,
                                             accept_length_from_server_info,
                                             aggregate,
                                             append_bench_line,
                                             build_bench_line,
                                             existing_reps,
                                             rep_exists,
                                             reps_to_run,
                                             seal_torn_tail,
                                             )

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "sglang" / "bench_serving_llamacpp_smollm2.jsonl"

# sglang's own output line, minus the arrays: the keys every perfwarden line must carry too.
SGLANG_KEYS = {
    "backend", "dataset_name", "request_rate", "max_concurrency", "server_info", "duration", "completed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
    "total_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
    "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms",
    "median_e2e_latency_ms", "p99_e2e_latency_ms", "accept_length", "input_lens", "output_lens", "ttfts",
    "itls", "generated_texts", "errors",
}


def _ok(i: int, ttft: float = 0.1, itl: float = 0.02, n: int = 5, start: float | None = None) -> RequestRecord:
    start = 0.5 * i if start is None else start
    itls = [itl] * (n - 1)
    return RequestRecord(index=i, sample_index=i, prompt_id=f"v{i:02d}", issued_s=start, start_s=start,
                         ttft_s=ttft, itls_s=itls, latency_s=ttft + sum(itls), output_tokens=n,
                         output_tokens_source="usage", stream_chunks=n, input_tokens=10 + i,
                         input_tokens_source="usage", text=" t" * n, finish_reason="length")


def _failed(i: int, error: str = "HTTP 500 from 'x': b''", chunks: int = 0) -> RequestRecord:
    return RequestRecord(index=i, sample_index=i, prompt_id=f"v{i:02d}", issued_s=0.5 * i, start_s=0.5 * i,
                         ttft_s=0.05 if chunks else None, itls_s=[0.01] * max(0, chunks - 1),
                         latency_s=0.3, output_tokens=chunks, stream_chunks=chunks, input_tokens=7,
                         input_tokens_source="estimate", text=" t" * chunks, error=error)


def _line(records, **kw):
    args = dict(leg="base", rep=0, started_at=1_700_000_000.0, duration_s=4.0, request_rate=2.0,
                max_concurrency=None, backend="openai", dataset_name="perfwarden-varied")
    args.update(kw)
    return build_bench_line(records, **args)


def test_line_has_every_sglang_key_and_decodes_as_bench_run_line():
    line = _line([_ok(0), _ok(1), _failed(2)])
    assert SGLANG_KEYS <= set(line)
    for key in ("schema_version", "leg", "rep", "request_starts", "latencies", "contention", "started_at"):
        assert key in line
    decoded = msgspec.json.decode(json.dumps(line, allow_nan=False), type=BenchRunLine)
    assert decoded.leg == "base" and decoded.rep == 0 and decoded.completed == 2
    assert decoded.errors == ["", "", "HTTP 500 from 'x': b''"]


def test_units_aggregates_in_ms_per_request_in_seconds():
    recs = [_ok(0, ttft=0.100, itl=0.020), _ok(1, ttft=0.300, itl=0.040)]
    line = _line(recs)
    assert line["ttfts"] == [0.100, 0.300]  # seconds
    assert line["itls"][0] == [0.020] * 4
    assert line["mean_ttft_ms"] == pytest.approx(200.0)  # milliseconds
    assert line["median_ttft_ms"] == pytest.approx(200.0)
    assert line["p99_ttft_ms"] == pytest.approx(np.percentile([100.0, 300.0], 99))
    assert line["mean_itl_ms"] == pytest.approx(30.0)
    assert line["mean_tpot_ms"] == pytest.approx(30.0)
    assert line["mean_e2e_latency_ms"] == pytest.approx(1000 * np.mean([0.18, 0.46]))
    assert line["latencies"] == pytest.approx([0.18, 0.46])


def test_sglang_semantics_for_failed_requests():
    recs = [_ok(0, n=5), _failed(1, "disconnect: RemoteProtocolError: peer closed", chunks=3), _ok(2, n=7)]
    line = _line(recs, duration_s=2.0)
    assert line["completed"] == 2
    assert line["output_lens"] == [5, 0, 7], "a failed request has output_len 0, as sglang writes"
    assert line["input_lens"] == [10, 7, 12], "input_lens lists every request"
    assert line["total_input_tokens"] == 22 and line["total_output_tokens"] == 12
    assert line["request_throughput"] == pytest.approx(1.0)
    assert line["output_throughput"] == pytest.approx(6.0)
    assert line["total_throughput"] == pytest.approx(17.0)
    # the failed request keeps its partial evidence
    assert line["ttfts"][1] == 0.05 and line["itls"][1] == [0.01, 0.01] and line["generated_texts"][1] == " t t t"
    # aggregates only over successes: the failed request's 10 ms gaps are not in the ITL stats
    assert line["mean_itl_ms"] == pytest.approx(20.0)


def test_no_success_gives_null_aggregates_never_zero():
    line = _line([_failed(0), _failed(1)])
    assert line["completed"] == 0
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "mean_tpot_ms",
                "mean_e2e_latency_ms"):
        assert line[key] is None, key
    assert line["ttfts"] == [0.0, 0.0], "no first token: 0.0 as sglang writes, error says why"
    json.dumps(line, allow_nan=False)


def test_single_token_outputs_have_no_tpot_or_itl():
    line = _line([_ok(0, n=1), _ok(1, n=1)])
    assert line["mean_tpot_ms"] is None and line["mean_itl_ms"] is None
    assert line["mean_ttft_ms"] == pytest.approx(100.0)


def test_offline_rate_is_inf_string_and_bad_duration_raises():
    assert _line([_ok(0)], request_rate=float("inf"))["request_rate"] == "inf"
    assert _line([_ok(0)], request_rate="inf")["request_rate"] == "inf"
    with pytest.raises(ValueError, match="duration_s"):
        aggregate([_ok(0)], 0.0)
    with pytest.raises(ValueError, match="duration_s"):
        aggregate([_ok(0)], float("nan"))


def test_success_without_timing_is_a_client_bug():
    broken = _ok(0)
    broken.ttft_s = None
    with pytest.raises(ValueError, match="client bug"):
        aggregate([broken], 1.0)


def test_arrays_are_in_issue_order_with_provenance():
    recs = [_ok(1, start=0.9), _ok(0, start=0.1)]
    recs[0].input_tokens_source = "estimate"
    recs[0].issued_s = 0.8
    line = _line(recs)
    assert line["prompt_ids"] == ["v00", "v01"]
    assert line["request_starts"] == [0.1, 0.9]
    assert line["issue_delays"] == pytest.approx([0.0, 0.1])
    assert line["input_lens_source"] == ["usage", "estimate"]
    assert line["output_lens_source"] == ["usage", "usage"]
    assert line["finish_reasons"] == ["length", "length"]


def test_extra_fields_cannot_overwrite_measured_ones():
    with pytest.raises(ValueError, match="overwrite"):
        _line([_ok(0)], extra={"completed": 99})
    assert _line([_ok(0)], extra={"scenario": "Server"})["scenario"] == "Server"


def test_accept_length_only_from_what_the_server_reports():
    assert accept_length_from_server_info(None) is None
    assert accept_length_from_server_info({"tp_size": 1}) is None
    assert accept_length_from_server_info({"internal_states": [{"avg_spec_accept_length": 2.5}]}) == 2.5
    assert accept_length_from_server_info({"accept_length": 1.7}) == 1.7
    assert accept_length_from_server_info({"accept_length": True}) is None
    assert _line([_ok(0)], server_info={"internal_states": [{"avg_spec_accept_length": 3.0}]})["accept_length"] == 3.0
    assert _line([_ok(0)])["accept_length"] is None


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason="needs ../shared/corpus")
@pytest.mark.parametrize("line_no", [0, 1])
def test_aggregates_match_real_sglang_output(line_no):
    """Feed sglang's own per-request arrays through our aggregation: same numbers as sglang wrote."""
    real = json.loads(CORPUS.read_text().splitlines()[line_no])
    recs = []
    for i, err in enumerate(real["errors"]):
        itls = real["itls"][i]
        ttft = real["ttfts"][i]
        recs.append(RequestRecord(index=i, sample_index=i, prompt_id=str(i), issued_s=0.0, start_s=0.0,
                                  ttft_s=ttft, itls_s=itls, latency_s=ttft + sum(itls),
                                  output_tokens=real["output_lens"][i], input_tokens=real["input_lens"][i],
                                  error=err))
    ours = _line(recs, duration_s=real["duration"])
    for key in ("completed", "total_input_tokens", "total_output_tokens"):
        assert ours[key] == real[key], key
    for key in ("request_throughput", "output_throughput", "total_throughput", "mean_ttft_ms",
                "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms"):
        assert ours[key] == pytest.approx(real[key], rel=1e-9), key
    # sglang's e2e clock stops after the stream closes, a little after the last token, and its
    # file has no per-request latency: TPOT and e2e agree only approximately here.
    for key in ("median_tpot_ms", "median_e2e_latency_ms"):
        assert ours[key] == pytest.approx(real[key], rel=0.05), key
    assert ours["output_lens"] == real["output_lens"]


# ----------------------------------------------------------------------------- idempotent appends


def test_append_is_idempotent_per_leg_and_rep(tmp_path):
    path = tmp_path / "legs" / "base" / "bench_runs.jsonl"
    assert not rep_exists(path, "base", 0)
    assert append_bench_line(path, _line([_ok(0)], rep=0))
    assert append_bench_line(path, _line([_ok(0)], rep=1))
    assert not append_bench_line(path, _line([_ok(0)], rep=0)), "a resumed run must not duplicate rep 0"
    assert append_bench_line(path, _line([_ok(0)], leg="cand", rep=0))
    assert existing_reps(path) == {("base", 0), ("base", 1), ("cand", 0)}
    assert reps_to_run(path, "base", range(4)) == [2, 3]
    report = read_jsonl(path, BenchRunLine)
    assert not report.issues and len(report.records) == 3


def test_torn_tail_is_set_aside_not_merged(tmp_path):
    path = tmp_path / "bench_runs.jsonl"
    append_bench_line(path, _line([_ok(0)], rep=0))
    with open(path, "ab") as handle:
        handle.write(b'{"leg":"base","rep":1,"backend":"op')  # crash mid-write of rep 1
    assert not rep_exists(path, "base", 1), "a torn line is not evidence of a rep"
    assert append_bench_line(path, _line([_ok(0)], rep=1))
    report = read_jsonl(path, BenchRunLine)
    assert not report.issues, [i.message for i in report.issues]
    assert [r.rep for _, r in report.records] == [0, 1]
    assert (tmp_path / "bench_runs.jsonl.torn").read_bytes() == b'{"leg":"base","rep":1,"backend":"op\n'
    assert seal_torn_tail(path) == b""


def test_corrupt_line_is_not_counted_as_a_rep(tmp_path):
    path = tmp_path / "bench_runs.jsonl"
    path.write_text('{"leg": "base", "rep": 0, oops}\n')
    assert existing_reps(path) == set()
    assert append_bench_line(path, _line([_ok(0)], rep=0))


def test_line_without_key_is_rejected(tmp_path):
    line = _line([_ok(0)])
    line["rep"] = None
    with pytest.raises(ValueError, match="rep"):
        append_bench_line(tmp_path / "x.jsonl", line)


# -------------------------------------------------------------------------------------- contention

PID_STAT = ("4242 (python3 (worker) x) R 1 4242 4242 0 -1 4194304 2000 0 0 0 "
            "150 50 0 0 20 0 4 0 1000 100000 2000 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")


def test_parse_pid_stat_handles_parentheses_and_spaces_in_name():
    stat = C.parse_pid_stat(PID_STAT)
    assert stat.pid == 4242 and stat.name == "python3 (worker) x" and stat.state == "R"
    assert stat.cpu_ticks == 200


def test_parse_loadavg_and_cpu_times():
    load = C.parse_loadavg("1.50 0.75 0.25 3/412 99999\n")
    assert (load.load1, load.load5, load.load15, load.running, load.total) == (1.5, 0.75, 0.25, 3, 412)
    with pytest.raises(ValueError):
        C.parse_loadavg("garbage")
    stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n"
    times = C.parse_cpu_times(stat)
    assert times.total == 1000 and times.idle == 850
    later = C.CpuTimes(total=1200, idle=950)
    assert C.cpu_busy_pct(times, later) == pytest.approx(50.0)
    assert C.cpu_busy_pct(times, times) is None
    with pytest.raises(ValueError):
        C.parse_cpu_times("intr 1 2 3\n")


def test_busy_processes_thresholds_excludes_and_ignores_new_pids():
    before = {1: C.PidStat(1, "idle", "S", 100), 2: C.PidStat(2, "burner", "R", 100),
              3: C.PidStat(3, "me", "R", 0), 5: C.PidStat(5, "old", "R", 0)}
    after = {1: C.PidStat(1, "idle", "S", 101), 2: C.PidStat(2, "burner", "R", 150),
             3: C.PidStat(3, "me", "R", 50), 4: C.PidStat(4, "newborn", "R", 500),
             5: C.PidStat(5, "reused", "R", 50)}
    busy = C.busy_processes(before, after, interval_s=0.5, clk_tck=100, threshold_pct=5.0, exclude=[3])
    assert busy == [{"pid": 2, "name": "burner", "cpu_pct": 100.0}]
    with pytest.raises(ValueError):
        C.busy_processes(before, after, interval_s=0.0, clk_tck=100, threshold_pct=5.0)


def test_sample_contention_reads_proc_or_says_why_not(tmp_path):
    sample = C.sample_contention(interval_s=0.05)
    if Path("/proc/loadavg").exists():
        assert sample["error"] is None
        assert len(sample["loadavg"]) == 3 and sample["ncpu"] >= 1
        assert sample["self_pid"] in sample["excluded_pids"]
        assert all(p["pid"] not in sample["excluded_pids"] for p in sample["busy"])
        assert 0.0 <= sample["cpu_busy_pct"] <= 100.0
    missing = C.sample_contention(interval_s=0.01, proc=tmp_path / "no-proc")
    assert missing["error"] and "cannot sample" in missing["error"]
    json.dumps(sample, allow_nan=False)
    assert not any(isinstance(v, float) and math.isnan(v) for v in sample.values())


def test_processes_cpu_pct_sums_only_the_named_processes_seen_twice():
    before = {2: C.PidStat(2, "engine", "R", 100), 3: C.PidStat(3, "worker", "R", 0), 7: C.PidStat(7, "other", "R", 0)}
    after = {2: C.PidStat(2, "engine", "R", 125), 3: C.PidStat(3, "worker", "R", 50),
             7: C.PidStat(7, "other", "R", 90), 8: C.PidStat(8, "newborn", "R", 900)}
    assert C.processes_cpu_pct(before, after, [2, 3, 8], interval_s=0.5, clk_tck=100) == pytest.approx(150.0)
    with pytest.raises(ValueError):
        C.processes_cpu_pct(before, after, [2], interval_s=0.0, clk_tck=100)


def _scripted_reads(ticks_per_window: list[int]):
    """A /proc reader whose server process (pid 9) burns the given ticks in each successive window."""
    state = {"ticks": 0, "reads": 0}

    def read():
        if state["reads"] % 2 == 1:  # the second reading of a window
            state["ticks"] += ticks_per_window[min(state["reads"] // 2, len(ticks_per_window) - 1)]
        state["reads"] += 1
        return {9: C.PidStat(9, "VLLM::Worker", "R", state["ticks"])}
    return read


def test_wait_until_idle_waits_out_a_servers_busy_tail_and_gives_up_at_its_bound():
    """vLLM's worker spins for ~1 s after a request: a contention sample taken in that second charges the
    server's own tail to the machine ("busy while the server idled"), and every rep of the run comes back
    CONTENDED_LEG. The harness waits until the server's own processes idle -- and not forever."""
    clock = {"t": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    spin = int(tick * 0.25)  # a full core over a 0.25 s window
    waited = C.wait_until_idle([9], read=_scripted_reads([spin, spin, spin, spin, 0]),
                               clock=lambda: clock["t"], sleep=lambda s: clock.__setitem__("t", clock["t"] + s))
    assert waited == pytest.approx(1.25)  # four busy windows, then the idle one
    clock["t"] = 0.0
    waited = C.wait_until_idle([9], max_s=1.0, read=_scripted_reads([spin]),
                               clock=lambda: clock["t"], sleep=lambda s: clock.__setitem__("t", clock["t"] + s))
    assert waited == pytest.approx(1.0)  # a server that never idles is sampled after the bound
    assert C.wait_until_idle([]) == 0.0


@pytest.mark.slow
def test_wait_until_idle_on_a_real_spinning_child():
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.2: pass"])
    try:
        time.sleep(0.2)
        waited = C.wait_until_idle([spinner.pid], max_s=5.0)
        assert 0.5 <= waited < 5.0  # it waited for the spin to end, not for the bound
    finally:
        spinner.wait(5)
