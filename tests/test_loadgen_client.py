"""The LoadGen SUT against a scripted local OpenAI-compatible server (real mlperf_loadgen, no network).

Each LoadGen test here runs for one or two seconds of load; the server streams a few tokens with
millisecond sleeps. Every test that sends requests asserts the payloads the server received.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import msgspec
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import FakeOpenAIServer  # noqa: E402

from perfwarden.auditor.evidence import RunLoader  # noqa: E402
from perfwarden.auditor.model import witnesses as rep_witnesses  # noqa: E402
from perfwarden.formats.jsonl import BenchRunLine, read_jsonl  # noqa: E402
from perfwarden.formats.records import RunDir  # noqa: E402
from perfwarden.harness import loadgen_client  # noqa: E402
from perfwarden.harness.bench_writer import BENCH_LINE_VERSION, build_bench_line  # noqa: E402
from perfwarden.harness.loadgen_client import (  # noqa: E402
                                               ClientBug,
                                               LoadSettings,
                                               SSEDecoder,
                                               StreamResult,
                                               apply_event,
                                               completions_url,
                                               encode_payload,
                                               loadgen_test_settings,
                                               measure_rep,
                                               offline_sample_count,
                                               request_payload,
                                               run_rep,
                                               stream_completion,
                                               to_record,
                                               )
from perfwarden.harness.prompts import Prompt, varied_prompts  # noqa: E402

pytest.importorskip("mlperf_loadgen")

TOKENS = 6
FIRST_DELAY = 0.004
TOKEN_DELAY = 0.003


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(tokens=TOKENS, first_token_delay_s=FIRST_DELAY, token_delay_s=TOKEN_DELAY) as srv:
        yield srv


def _mllog(path: Path) -> list[dict]:
    return [json.loads(line[len(":::MLLOG "):]) for line in path.read_text().splitlines()
            if line.startswith(":::MLLOG ")]


def _expected_payload(text: str, max_tokens: int) -> dict:
    return {"model": "fake-model", "prompt": text, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}


def test_server_scenario_rep_writes_a_decodable_sglang_line_and_loadgen_logs(server, tmp_path):
    prompts = varied_prompts(12, seed=3)
    by_id = {p.id: p for p in prompts}
    settings = LoadSettings(scenario="Server", target_qps=8.0, min_duration_s=1.5, max_duration_s=10.0,
                            max_tokens=5, request_timeout_s=5.0, model="fake-model", seed=11)
    n_before = len(server.requests)
    line = measure_rep(tmp_path, "base", 0, server.base_url, prompts, settings,
                       dataset_name="perfwarden-varied", contention_interval_s=0.05)
    sent = server.requests[n_before:]
    assert line is not None

    # --- the file: exactly one line, decodes as the shared schema
    run = RunDir(tmp_path)
    report = read_jsonl(run.bench_runs("base"), BenchRunLine)
    assert not report.issues and len(report.records) == 1
    rec = report.records[0][1]
    n = len(rec.errors)
    assert n == len(sent) >= 5, "every issued sample is one HTTP request"
    assert rec.leg == "base" and rec.rep == 0 and rec.schema_version == BENCH_LINE_VERSION
    assert rec.request_rate == 8.0 and rec.max_concurrency is None and rec.dataset_name == "perfwarden-varied"
    assert rec.errors == [""] * n and rec.completed == n

    # --- the payloads the server received
    ids = line["prompt_ids"]
    assert sorted(json.dumps(p, sort_keys=True) for p in sent) == sorted(
        json.dumps(_expected_payload(by_id[i].text, 5), sort_keys=True) for i in ids)

    # --- units: per-request seconds, aggregates milliseconds
    assert all(FIRST_DELAY <= t < 1.0 for t in rec.ttfts), rec.ttfts
    assert rec.median_ttft_ms == pytest.approx(1000 * statistics.median(rec.ttfts))
    gaps = [g for per_req in rec.itls for g in per_req]
    # a gap can be ~0 when the client thread was late and read two chunks at once; the mean cannot
    assert len(gaps) == n * 4 and all(0.0 <= g < 0.5 for g in gaps)
    assert rec.mean_itl_ms == pytest.approx(1000 * statistics.fmean(gaps))
    assert 1000 * TOKEN_DELAY * 0.8 < rec.median_itl_ms < 500.0
    assert all(lat >= t for lat, t in zip(rec.latencies, rec.ttfts))
    assert rec.output_lens == [5] * n and set(line["output_lens_source"]) == {"usage"}
    assert rec.input_lens == [len(by_id[i].text.split()) for i in ids]  # the server's usage
    assert set(line["input_lens_source"]) == {"usage"}
    assert rec.generated_texts == [" t0 t1 t2 t3 t4"] * n  # the strict schema holds every field written
    # the rep's window (issue 17 item 4): stamped around the LoadGen test, so it holds the whole timeline
    assert rec.ended_at is not None and rec.ended_at >= rec.started_at + rec.duration - 0.05
    assert rec.total_output_tokens == 5 * n
    assert rec.output_throughput == pytest.approx(5 * n / rec.duration)

    # --- timing of the rep: Poisson arrivals until min_duration, starts inside the rep
    assert rec.duration >= 1.5
    assert all(0.0 <= s <= rec.duration for s in rec.request_starts)
    assert rec.request_starts == sorted(rec.request_starts)
    assert abs(rec.started_at - time.time()) < 60
    assert line["scenario"] == "Server" and line["loadgen"]["dir"] == "legs/base/loadgen/rep-0"

    # --- contention sampled at start and end (a raw-JSON field of the line schema)
    contention = msgspec.json.decode(rec.contention)
    assert set(contention) == {"start", "end", "window"}
    window = contention["window"]  # the rep's CPU: the harness's own process ran LoadGen and the client
    assert window["wall_s"] >= rec.duration * 0.9 and window["harness_cpu_s"] > 0
    assert window["machine_cpu_s"] + 0.1 >= window["server_cpu_s"] + window["harness_cpu_s"]
    assert len(contention["start"]["loadavg"]) == 3 or contention["start"]["error"]
    assert contention["start"].get("error") or contention["start"]["ncpu_available"] >= 1

    # --- what LoadGen issued and what every request asked for (issue 13: workload parity)
    assert rec.issued == n == len(rec.errors)
    assert line["request_params"] == {k: v for k, v in _expected_payload("", settings.max_tokens).items()
                                      if k != "prompt"}

    # --- LoadGen's own logs, and they agree on the sample count
    lg_dir = run.loadgen_rep("base", 0)
    assert (lg_dir / "mlperf_log_summary.txt").is_file()
    assert "Scenario : Server" in (lg_dir / "mlperf_log_summary.txt").read_text()
    log = _mllog(lg_dir / "mlperf_log_detail.txt")
    keys = {e["key"]: e["value"] for e in log}
    assert int(keys["generated_query_count"]) == n
    assert keys["requested_use_token_latencies"] is True or keys["requested_use_token_latencies"] == "True"
    assert not [e for e in log if e["key"] == "error_runtime"], "every sample had a first token and >1 token"
    assert not (lg_dir / "mlperf_log_trace.json").exists() or (lg_dir / "mlperf_log_trace.json").stat().st_size == 0

    # --- the second witnesses (issue 17 §3): the server's own counters around the rep and LoadGen's
    # own figures agree with the line, by the auditor's rules (real LoadGen, Server scenario)
    counters = msgspec.json.decode(rec.server_counters)
    moved = {k: counters["after"][k] - counters["before"][k] for k in counters["after"]}
    assert moved == {"requests_completed": n, "requests_failed": 0, "requests_cancelled": 0, "tokens_generated": 5 * n}
    leg = RunLoader(tmp_path).leg("base")
    # Server's samples per second spans more than the rep (not read); its tokens per second spans the requests
    assert set(leg.loadgen[0].detail) == set(leg.loadgen[0].summary) == {"tokens_per_second", "max_latency_s",
                                                                          "min_latency_s", "mean_latency_s"}
    assert leg.loadgen[0].version and leg.loadgen[0].power  # a real LoadGen: every clock witness is held
    witnessed = rep_witnesses.check_witnesses(tmp_path, leg)
    assert not witnessed.findings and not witnessed.not_checked

    # --- resume: the same (leg, rep) is not measured or written again
    again = measure_rep(tmp_path, "base", 0, server.base_url, prompts, settings, dataset_name="perfwarden-varied")
    assert again is None
    assert len(server.requests) == n_before + n
    assert len(read_jsonl(run.bench_runs("base"), BenchRunLine).records) == 1


ERROR_PROMPTS = {
    "e-status": ("please fail [[status=503]]", "HTTP 503 from "),
    "e-disconnect": ("drop me [[disconnect_after=2]]", "disconnect: "),
    "e-malformed": ("garble [[malformed]]", "malformed SSE data"),
    "e-nodone": ("unterminated [[no_done]]", "incomplete stream: ended without [DONE]"),
    "e-event": ("error event [[error_event]]", "server error event: "),
    "e-stall": ("slow [[stall=3]]", "timeout: "),
    "e-empty": ("say nothing [[empty]]", "empty completion: "),
}


def test_offline_rep_records_every_kind_of_failure_and_stays_bounded(server, tmp_path):
    # the last "good" prompt's server keeps the body open after [DONE]: complete, not a timeout
    good = varied_prompts(2) + [Prompt("g-linger", "done but lingering [[linger=2]]", "varied")]
    bad = [Prompt(pid, text, "varied") for pid, (text, _) in ERROR_PROMPTS.items()]
    prompts = good + bad
    settings = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.1, max_duration_s=5.0,
                            min_query_count=len(prompts), max_tokens=4, request_timeout_s=0.6,
                            model="fake-model")
    assert offline_sample_count(settings) == len(prompts)
    n_before = len(server.requests)
    t = time.perf_counter()
    result = run_rep(server.base_url, prompts, settings, tmp_path / "rep-0")
    wall = time.perf_counter() - t
    sent = server.requests[n_before:]
    assert wall < 3.0, "the stalled request must be cut at request_timeout_s"
    assert sorted(p["prompt"] for p in sent) == sorted(p.text for p in prompts), "each prompt once"
    assert all(p == _expected_payload(p["prompt"], 4) for p in sent)

    errors = {r.prompt_id: r.error for r in result.records}
    for pid, (_, prefix) in ERROR_PROMPTS.items():
        assert errors[pid].startswith(prefix), (pid, errors[pid])
    assert all(errors[p.id] == "" for p in good)
    lingering = next(r for r in result.records if r.prompt_id == "g-linger")
    assert lingering.latency_s < 0.5 and lingering.output_tokens == 4, "clock stops at [DONE]"
    disconnected = next(r for r in result.records if r.prompt_id == "e-disconnect")
    assert disconnected.stream_chunks == 2 and disconnected.ttft_s is not None
    assert len(disconnected.itls_s) == 1 and disconnected.text == " t0 t1"

    line = build_bench_line(result.records, leg="l", rep=0, started_at=result.started_at,
                            duration_s=result.duration_s, request_rate="inf", max_concurrency=None,
                            backend="openai", dataset_name="mixed")
    rec = BenchRunLine(**{k: v for k, v in line.items() if k in BenchRunLine.__struct_fields__})
    assert rec.completed == 3 and rec.request_rate == "inf"
    failed = [i for i, e in enumerate(line["errors"]) if e]
    assert len(failed) == len(ERROR_PROMPTS)
    assert all(line["output_lens"][i] == 0 for i in failed)
    assert all(line["output_lens"][i] == 4 for i in range(len(prompts)) if i not in failed)

    # LoadGen counted every sample as completed; the ones with < 2 tokens are errors in its own log
    log = _mllog(tmp_path / "rep-0" / "mlperf_log_detail.txt")
    runtime_errors = [e for e in log if e["key"] == "error_runtime"]
    assert len(runtime_errors) == 5  # status, malformed (1 chunk), error event (1 chunk), stall, empty
    assert "Scenario : Offline" in (tmp_path / "rep-0" / "mlperf_log_summary.txt").read_text()


def test_max_concurrency_is_respected_and_waiting_is_recorded(server, tmp_path):
    prompts = varied_prompts(10, seed=1)
    settings = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.1, min_query_count=10,
                            max_duration_s=10.0, max_tokens=3, max_concurrency=2, request_timeout_s=5.0)
    server.max_in_flight = 0
    n_before = len(server.requests)
    result = run_rep(server.base_url, prompts, settings, tmp_path / "rep-0")
    assert len(server.requests) - n_before == 10
    assert server.max_in_flight <= 2
    assert all("model" not in p for p in server.requests[n_before:]), "no model set: field omitted"
    delays = sorted(r.start_s - r.issued_s for r in result.records)
    assert delays[-1] > 0.005, "later requests waited for a slot"
    assert all(r.ok for r in result.records)


def test_rep_deadline_fails_requests_that_could_not_be_sent(server, tmp_path):
    prompts = [Prompt(f"s{i}", f"slow {i} [[stall=0.4]]", "varied") for i in range(3)]
    settings = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.2, max_duration_s=0.3,
                            min_query_count=3, max_tokens=2, max_concurrency=1, request_timeout_s=2.0)
    n_before = len(server.requests)
    t = time.perf_counter()
    result = run_rep(server.base_url, prompts, settings, tmp_path / "rep-0")
    assert time.perf_counter() - t < 2.0
    assert len(server.requests) - n_before == 1, "only the first request was sent before the deadline"
    errors = sorted(r.error for r in result.records)
    assert errors[0] == "" and all(e.startswith("not sent: rep deadline") for e in errors[1:])


def test_chat_endpoint_sends_messages_and_reads_deltas(server, tmp_path):
    settings = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.1, min_query_count=2,
                            max_duration_s=5.0, max_tokens=3, request_timeout_s=5.0, endpoint="chat",
                            extra_body={"ignore_eos": True})
    prompts = varied_prompts(2)
    n_before = len(server.requests)
    result = run_rep(server.base_url, prompts, settings, tmp_path / "rep-0")
    sent = server.requests[n_before:]
    assert sorted(json.dumps(p, sort_keys=True) for p in sent) == sorted(json.dumps(
        {"messages": [{"role": "user", "content": p.text}], "max_tokens": 3, "temperature": 0, "stream": True,
         "stream_options": {"include_usage": True}, "ignore_eos": True}, sort_keys=True) for p in prompts)
    assert all(r.ok and r.text == " t0 t1 t2" and r.output_tokens == 3 for r in result.records)


def test_unreachable_server_fails_every_request_without_hanging(tmp_path):
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    prompts = varied_prompts(3)
    settings = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.1, min_query_count=3,
                            max_duration_s=5.0, request_timeout_s=2.0, connect_timeout_s=1.0)
    t = time.perf_counter()
    result = run_rep(f"http://127.0.0.1:{port}", prompts, settings, tmp_path / "rep-0")
    assert time.perf_counter() - t < 3.0
    assert len(result.records) == 3
    assert all(r.error.startswith("network: ConnectError") for r in result.records), result.records[0].error
    assert (tmp_path / "rep-0" / "mlperf_log_summary.txt").is_file()


def test_our_own_bug_raises_after_loadgen_got_every_sample_back(server, tmp_path, monkeypatch):
    real = loadgen_client.to_record

    def flaky(result, **kw):
        if kw["index"] == 1:
            raise RuntimeError("bug in record building")
        return real(result, **kw)

    monkeypatch.setattr(loadgen_client, "to_record", flaky)
    settings = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.1, min_query_count=3,
                            max_duration_s=5.0, max_tokens=3, request_timeout_s=5.0)
    with pytest.raises(ClientBug, match="bug in record building"):
        run_rep(server.base_url, varied_prompts(3), settings, tmp_path / "rep-0")
    assert (tmp_path / "rep-0" / "mlperf_log_summary.txt").is_file(), "LoadGen finished: no hang"


def test_first_token_callback_failure_is_raised_not_recorded_as_a_request_error(server):
    import asyncio

    import httpx

    def boom():
        raise RuntimeError("boom in callback")

    async def go():
        async with httpx.AsyncClient(trust_env=False) as client:
            body = encode_payload(request_payload("hello", LoadSettings(max_tokens=3)))
            return await stream_completion(client, completions_url(server.base_url), body, 5.0, boom)

    n_before = len(server.requests)
    with pytest.raises(RuntimeError, match="boom in callback"):
        asyncio.run(go())
    assert server.requests[n_before:] == [{"prompt": "hello", "max_tokens": 3, "temperature": 0,
                                          "stream": True, "stream_options": {"include_usage": True}}]


# --------------------------------------------------------------------------------------- pure parts


def test_sse_decoder_follows_the_event_stream_rules():
    sse = SSEDecoder()
    fed = [sse.feed(x) for x in [": keep-alive", "event: message", "data: {\"a\":", "data: 1}", "", "data:[DONE]", ""]]
    assert [f for f in fed if f is not None] == ['{"a":\n1}', "[DONE]"]
    assert sse.feed("{not sse}") is None and sse.unexpected == ["{not sse}"]
    sse.feed("data: tail")
    assert sse.flush() == "tail" and sse.flush() is None


def test_apply_event_reads_completions_chat_usage_and_rejects_garbage():
    r = StreamResult(t_send=0.0)
    assert not apply_event(r, '{"choices":[{"text":"He","finish_reason":null}]}', 0.1)
    assert not apply_event(r, '{"choices":[{"delta":{"content":"llo"},"finish_reason":null}]}', 0.15)
    assert not apply_event(r, '{"choices":[{"text":"","finish_reason":"stop"}]}', 0.2)
    assert not apply_event(r, '{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}', 0.21)
    assert apply_event(r, "[DONE]", 0.3)
    assert r.text == "Hello" and r.t_first == 0.1 and r.chunk_times == [0.1, 0.15]
    assert r.finish_reason == "stop" and r.usage == {"prompt_tokens": 3, "completion_tokens": 2} and r.t_end == 0.3
    bad = StreamResult(t_send=0.0)
    assert apply_event(bad, "{nope", 0.1) and bad.error.startswith("malformed SSE data")
    bad = StreamResult(t_send=0.0)
    assert apply_event(bad, "[1, 2]", 0.1) and "not an object" in bad.error
    bad = StreamResult(t_send=0.0)
    assert apply_event(bad, '{"error": {"message": "overloaded"}}', 0.1) and "overloaded" in bad.error


def test_to_record_prefers_usage_and_marks_estimates():
    prompt = Prompt("v00", "one two three four five six seven eight", "varied")
    with_usage = StreamResult(t_send=10.0, t_first=10.2, chunk_times=[10.2, 10.25, 10.35], t_end=10.4,
                              text="abc", usage={"prompt_tokens": 9, "completion_tokens": 4})
    rec = to_record(with_usage, index=0, sample_index=0, prompt=prompt, t0=9.0, t_issued=9.9)
    assert rec.start_s == pytest.approx(1.0) and rec.issued_s == pytest.approx(0.9)
    assert rec.ttft_s == pytest.approx(0.2) and rec.latency_s == pytest.approx(0.4)
    assert rec.itls_s == pytest.approx([0.05, 0.1])
    assert (rec.output_tokens, rec.output_tokens_source) == (4, "usage")
    assert (rec.input_tokens, rec.input_tokens_source) == (9, "usage")
    bare = StreamResult(t_send=10.0, t_first=10.2, chunk_times=[10.2, 10.3], t_end=10.4, text="ab")
    rec = to_record(bare, index=0, sample_index=0, prompt=prompt, t0=9.0, t_issued=10.0)
    assert (rec.output_tokens, rec.output_tokens_source) == (2, "stream_chunks")
    assert rec.input_tokens_source == "estimate" and rec.input_tokens >= 1


def test_settings_validation_and_translation():
    with pytest.raises(ValueError, match="scenario"):
        LoadSettings(scenario="SingleStream")
    with pytest.raises(ValueError, match="target_qps"):
        LoadSettings(target_qps=0)
    with pytest.raises(ValueError, match="extra_body"):
        LoadSettings(extra_body={"stream": False})
    with pytest.raises(ValueError, match="max_query_count"):
        LoadSettings(scenario="Offline", target_qps=1000, min_duration_s=100, max_query_count=50,
                     max_duration_s=200)
    s = LoadSettings(scenario="Server", target_qps=5, min_duration_s=2, max_duration_s=30, seed=4,
                     extra_body={"ignore_eos": True}, include_usage=False)
    ts = loadgen_test_settings(s)
    assert ts.server_target_qps == 5 and ts.min_duration_ms == 2000 and ts.max_duration_ms == 30000
    assert ts.min_query_count == 1 and ts.use_token_latencies and ts.schedule_rng_seed == 4
    assert request_payload("hi", s) == {"prompt": "hi", "max_tokens": 64, "temperature": 0, "stream": True,
                                        "ignore_eos": True}
    assert "api_key" not in s.summary()
    assert completions_url("http://h:1") == completions_url("http://h:1/v1/") == "http://h:1/v1/completions"
    assert completions_url("http://h:1", "chat") == "http://h:1/v1/chat/completions"
