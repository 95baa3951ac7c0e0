"""The embedded target: knobs, the batching engine, the HTTP server and its launcher, end to end.

Servers run the real SmolLM2 weights with 2 pinned threads and tiny ``max_tokens``; every request a test
sends is asserted on its payload and on what the server logged about it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("torch")  # the embedded engine runs the model on torch (3.11 only here)

from perfwarden.harness import embedded_requests as R  # noqa: E402
from perfwarden.harness import embedded_server as S  # noqa: E402
from perfwarden.harness.embedded_engine import (  # noqa: E402
    GenParams,
    prompt_lookup_draft,
    verify_draft,
)
from perfwarden.harness.targets import (  # noqa: E402
    EmbeddedTarget,
    TargetCrashed,
    TargetStartError,
    knob_args,
    start_failure_line,
)

REPO = Path(__file__).resolve().parents[1]
RMSNORM_CALLS_PER_FORWARD = 61  # 30 layers x 2 norms + the final norm


# ------------------------------------------------------------------------------------------ knobs


def test_knobs_parse_and_validate():
    raw = S.parse_set_args(["threads=2", "torch_compile=true", "batch_wait_ms=2.5",
                            "op_overrides.rmsnorm=harness/ops/rmsnorm_alt.py:rmsnorm"])
    cfg = S.build_config(raw)
    assert (cfg.threads, cfg.torch_compile, cfg.batch_wait_ms) == (2, True, 2.5)
    assert cfg.op_overrides == {"rmsnorm": "harness/ops/rmsnorm_alt.py:rmsnorm"}
    assert S.build_config({"op_overrides": "rmsnorm=a.py:f,rotary=m.mod:g"}).op_overrides == {
        "rmsnorm": "a.py:f", "rotary": "m.mod:g"}
    assert S.build_config({"op_overrides": '{"silu_mul": "x.py:f"}'}).op_overrides == {"silu_mul": "x.py:f"}


@pytest.mark.parametrize(
    "sets,needle",
    [
        (["threads=0"], "'threads'"),
        (["threads=two"], "'threads'='two'"),
        (["dtype=float64"], "'dtype'='float64'"),
        (["dtype=half"], "'dtype'='half'"),
        (["device=gpu"], "'device'='gpu'"),
        (["device=cuda:1"], "'device'='cuda:1'"),
        (["weights=zeros"], "'weights'='zeros'"),
        (["quantization=int8_dynamic", "dtype=float16"], "needs dtype 'float32'"),
        (["quantization=int8_dynamic", "device=cuda"], "runs on device 'cpu' only"),
        (["attn_implementation=flash"], "'attn_implementation'"),
        (["quantization=int4"], "'quantization'"),
        (["max_batch_size=-1"], "'max_batch_size'"),
        (["torch_compile=maybe"], "'torch_compile'"),
        (["fast=1"], "unknown knob 'fast'"),
        (["threads=2", "threads=3"], "set twice"),
        (["quantization=int8_dynamic", "dtype=bfloat16"], "needs dtype 'float32'"),
        (["op_overrides=softmax=a.py:f"], "'softmax' cannot be overridden"),
        (["op_overrides.rmsnorm=nofunction"], "must look like"),
        (["threads"], "key=value"),
    ],
)
def test_bad_knobs_are_refused_with_the_knob_named(sets, needle):
    with pytest.raises(S.ConfigError, match=None) as info:
        S.build_config(S.parse_set_args(sets))
    assert needle in str(info.value)


def test_float16_bfloat16_cuda_and_random_weights_are_valid_knobs():
    """Valid knobs whatever the host: whether this host can serve ``device=cuda`` is the start's business
    (a clear start failure), not the config's."""
    for dtype in ("float16", "bfloat16", "float32"):
        for device in ("cpu", "cuda"):
            cfg = S.build_config(S.parse_set_args([f"dtype={dtype}", f"device={device}", "weights=random"]))
            assert (cfg.dtype, cfg.device, cfg.weights) == (dtype, device, "random")
    defaults = S.build_config({})
    assert (defaults.device, defaults.weights, defaults.dtype) == ("cpu", "pretrained", "float32")


def test_knob_args_round_trip_through_the_server_parser():
    config = {"threads": 2, "prompt_lookup": True, "op_overrides": {"rmsnorm": "a.py:f"}, "batch_wait_ms": 1.5}
    args = knob_args(config)
    sets = [args[i + 1] for i in range(0, len(args), 2)]
    assert S.build_config(S.parse_set_args(sets)).model_dump(include=set(config)) == config


def test_request_validation_refuses_what_it_cannot_honour():
    cfg = S.build_config({"threads": 1, "max_seq_len": 64, "default_max_tokens": 16})
    params, stream, usage = R.parse_common({"max_tokens": 4, "temperature": 0, "seed": 3, "ignore_eos": True,
                                            "stream": True, "stream_options": {"include_usage": True}}, cfg, 10)
    assert (params.max_tokens, params.temperature, params.seed, params.ignore_eos, stream, usage) == (
        4, 0.0, 3, True, True, True)
    assert R.parse_common({}, cfg, 10)[0].max_tokens == 16
    for body, needle in [({"n": 2}, "'n'"), ({"stop": ["\n"]}, "'stop'"), ({"max_tokens": 60}, "'max_tokens'"),
                         ({"temperature": "hot"}, "'temperature'"), ({"logprobs": 3}, "'logprobs'"),
                         ({"seed": 1.5}, "'seed'")]:
        with pytest.raises(R.RequestError, match=needle):
            R.parse_common(body, cfg, 10)
    with pytest.raises(R.RequestError, match="max_seq_len"):
        R.parse_common({}, cfg, 64)


# ------------------------------------------------------------------------------- pure decoding parts


def test_prompt_lookup_drafts_from_the_latest_ngram_match():
    tokens = [5, 6, 7, 8, 9, 1, 5, 6, 7]
    assert prompt_lookup_draft(tokens, num_draft=3, max_ngram=3) == [8, 9, 1]
    assert prompt_lookup_draft([1, 2, 3, 4], num_draft=3, max_ngram=3) == []
    assert prompt_lookup_draft([1, 2, 9, 1, 3, 1], num_draft=2, max_ngram=2) == [3, 1]  # most recent "1"
    assert prompt_lookup_draft(tokens, num_draft=0, max_ngram=3) == []


def test_verify_draft_greedy_accepts_the_agreeing_prefix():
    import torch

    logits = torch.full((4, 10), -5.0)
    for row, best in enumerate([3, 4, 7, 2]):
        logits[row, best] = 5.0
    greedy = GenParams(max_tokens=8)
    assert verify_draft(logits, [3, 4, 5], greedy, None) == (2, 7)  # 3, 4 kept; model says 7, not 5
    assert verify_draft(logits, [3, 4, 7], greedy, None) == (3, 2)  # all kept, bonus token from row 3
    assert verify_draft(logits, [], greedy, None) == (0, 3)


def test_verify_draft_sampling_keeps_certain_drafts_and_is_seeded():
    import torch

    logits = torch.full((3, 6), -30.0)
    logits[0, 1] = logits[1, 2] = 30.0
    logits[2] = 0.0
    params = GenParams(max_tokens=8, temperature=1.0, seed=5)
    a = verify_draft(logits, [1, 2], params, torch.Generator().manual_seed(5))
    b = verify_draft(logits, [1, 2], params, torch.Generator().manual_seed(5))
    assert a == b and a[0] == 2


@pytest.mark.slow
def test_incremental_detokenizer_streams_exactly_the_full_text():
    from perfwarden.harness import model as M

    tok = M.load_tokenizer()
    text = "Caf\u00e9 au lait \U0001f600 costs 3\u20ac \u2014 na\u00efve r\u00e9sum\u00e9."
    ids = tok.encode(text, add_special_tokens=False)
    detok = R.IncrementalDetokenizer(tok)
    pieces = [detok.add([i]) for i in ids] + [detok.flush()]
    assert "".join(pieces) == tok.decode(ids) == text
    assert all("\ufffd" not in p for p in pieces)  # partial characters are held back, never streamed


@pytest.mark.slow
def test_engine_batched_and_merged_greedy_equals_unbatched_generate():
    import torch

    from perfwarden.harness import model as M
    from perfwarden.harness.embedded_engine import DoneEvent, Engine, EngineOptions, GenRequest, TokenEvent

    torch.set_num_threads(2)
    model, tok = M.load_model()
    texts = ["Why is the sky blue?", "Name a large animal.", "Write one word about the sea."]
    prompts = [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                       tokenize=True, return_dict=True)["input_ids"] for t in texts]
    n = 6
    expected = []
    with torch.inference_mode():
        for ids in prompts:
            out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)[0, len(ids):].tolist()
            expected.append(out[: out.index(2)] if 2 in out else out)
    engine = Engine(model, EngineOptions(max_batch_size=4, batch_wait_ms=0.0))
    engine.start()
    results: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
    done = threading.Semaphore(0)

    def sink(i: int):
        def emit(event: Any) -> None:
            if isinstance(event, TokenEvent):
                results[i].extend(event.token_ids)
            elif isinstance(event, DoneEvent):
                done.release()
            else:
                raise AssertionError(event)
        return emit

    for i, ids in enumerate(prompts):  # staggered: later requests join (merge into) a running batch
        engine.submit(GenRequest(rid=f"r{i}", prompt_ids=ids, params=GenParams(max_tokens=n), emit=sink(i)))
        time.sleep(0.1)
    for _ in prompts:
        assert done.acquire(timeout=60)
    engine.stop()
    assert [results[i] for i in range(len(prompts))] == expected
    assert engine.counters.prefill_batches >= 2 and engine.counters.max_running_batch >= 2


# ------------------------------------------------------------------------------------ op overrides


def _tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


@pytest.mark.slow
def test_reference_ops_match_transformers_and_alternatives_are_close():
    import torch
    from transformers.models.llama import modeling_llama as ml

    from perfwarden.harness.ops import reference, rmsnorm_alt, rotary_alt, silu_mul_alt

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 32, generator=g)
    norm = ml.LlamaRMSNorm(32, eps=1e-5)
    norm.weight.data = torch.randn(32, generator=g)
    assert torch.equal(reference.rmsnorm(x, norm.weight, 1e-5), norm(x))
    torch.testing.assert_close(rmsnorm_alt.rmsnorm(x, norm.weight, 1e-5), norm(x), rtol=1e-5, atol=1e-5)

    gate, up = torch.randn(3, 64, generator=g), torch.randn(3, 64, generator=g)
    expected = torch.nn.functional.silu(gate) * up
    assert torch.equal(reference.silu_mul(gate, up), expected)
    assert torch.equal(silu_mul_alt.silu_mul(gate.clone(), up), expected)

    q, k = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    cos, sin = torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 8, generator=g)
    for got, want in zip(reference.rotary(q, k, cos, sin), ml.apply_rotary_pos_emb(q, k, cos, sin), strict=True):
        assert torch.equal(got, want)
    for got, want in zip(rotary_alt.rotary(q, k, cos, sin), ml.apply_rotary_pos_emb(q, k, cos, sin), strict=True):
        torch.testing.assert_close(got, want)


def test_installed_overrides_route_every_call_count_it_and_restore():
    import torch

    from perfwarden.harness.ops import OverrideError, install_override

    model = _tiny_llama()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        before = model(ids).logits
    firsts: list[str] = []
    installed = [
        install_override(model, "rmsnorm", "perfwarden.harness.ops.reference:rmsnorm", on_first_call=firsts.append),
        install_override(model, "silu_mul", str(REPO / "harness/ops/reference.py") + ":silu_mul"),
        install_override(model, "rotary", "perfwarden.harness.ops.reference:rotary"),
    ]
    assert [o.modules_patched for o in installed] == [5, 2, 2]  # 2 layers x 2 norms + final norm
    with torch.inference_mode():
        after = model(ids).logits
    assert torch.equal(before, after)  # the reference overrides are the model's own math
    assert [o.counter.calls for o in installed] == [5, 2, 2] and firsts == ["rmsnorm"]
    for o in installed:
        o.restore()
    with torch.inference_mode():
        model(ids)
    assert [o.counter.calls for o in installed] == [5, 2, 2]  # restored: no longer routed
    with pytest.raises(OverrideError, match="'softmax'"):
        install_override(model, "softmax", "perfwarden.harness.ops.reference:rmsnorm")
    with pytest.raises(OverrideError, match="no callable 'missing'"):
        install_override(model, "rmsnorm", "perfwarden.harness.ops.reference:missing")
    with pytest.raises(OverrideError, match="does not exist"):
        install_override(model, "rmsnorm", "no/such/file.py:rmsnorm")


# -------------------------------------------------------------------------------- HTTP helpers


def _stream(url: str, payload: dict[str, Any], timeout: float = 120.0) -> list[Any]:
    """POST with stream=true; returns the decoded SSE data items (``'[DONE]'`` kept as a string)."""
    items: list[Any] = []
    with httpx.Client(timeout=timeout) as client, client.stream("POST", url, json=payload) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                items.append(data if data == "[DONE]" else json.loads(data))
    return items


def _post(url: str, payload: dict[str, Any], timeout: float = 120.0) -> httpx.Response:
    with httpx.Client(timeout=timeout) as client:
        return client.post(url, json=payload)


def _wait_for_log(target: EmbeddedTarget, needle: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = target.log_text()
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} not in server.log:\n{target.log_tail()}")


BASE_KNOBS = {"threads": 2, "max_batch_size": 4, "batch_wait_ms": 50}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    target = EmbeddedTarget(tmp_path_factory.mktemp("legs") / "baseline", BASE_KNOBS, cwd=REPO)
    target.start()
    yield target
    target.stop()


# ----------------------------------------------------------------------------------- real server


@pytest.mark.slow
def test_server_reports_its_full_launch_config(baseline):
    info = json.loads(baseline.server_info_path.read_text())
    for knob in S.ServerConfig.model_fields:
        assert knob in info, knob
    assert info["threads"] == 2 and info["torch_num_threads"] == 2 and info["max_batch_size"] == 4
    assert info["model"] == "SmolLM2-135M-Instruct" and info["weights_digest"].startswith("sha256:")
    assert info["dtype"] == "float32" and info["torch_version"].startswith("2.")
    assert info["explicit_knobs"] == sorted(BASE_KNOBS)
    assert info["internal_states"][0]["avg_spec_accept_length"] is None  # no speculative decoding
    models = httpx.get(f"{baseline.base_url}/v1/models").json()
    assert models["data"][0]["id"] == "SmolLM2-135M-Instruct"


@pytest.mark.slow
def test_streamed_completion_then_non_streamed_chat(baseline):
    payload = {"model": "SmolLM2-135M-Instruct", "prompt": "The capital of France is", "max_tokens": 6,
               "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    items = _stream(f"{baseline.base_url}/v1/completions", payload)
    assert items[-1] == "[DONE]"
    chunks = [i for i in items[:-1] if i["choices"]]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    token_ids = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] in ("length", "stop")
    assert final["usage"]["completion_tokens"] == len(token_ids) <= 6 and final["usage"]["prompt_tokens"] == 5
    assert items[-2]["choices"] == [] and items[-2]["usage"] == final["usage"]  # include_usage chunk
    assert "Paris" in text

    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 8,
            "temperature": 0}
    response = _post(f"{baseline.base_url}/v1/chat/completions", body)
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "chat.completion" and "Paris" in data["choices"][0]["message"]["content"]
    assert data["usage"]["completion_tokens"] == len(data["choices"][0]["token_ids"])
    log = _wait_for_log(baseline, f"request done rid={data['id']}")
    assert "endpoint=chat stream=False" in log


@pytest.mark.slow
def test_concurrent_requests_share_a_batch(baseline):
    payload = {"prompt": "List some colors:", "max_tokens": 5, "temperature": 0, "ignore_eos": True, "stream": True}
    results: list[list[Any]] = []
    threads = [threading.Thread(target=lambda: results.append(_stream(f"{baseline.base_url}/v1/completions", payload)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    usages = [r[-2]["usage"]["completion_tokens"] for r in results]
    assert usages == [5, 5, 5]  # ignore_eos: exactly max_tokens each
    state = httpx.get(f"{baseline.base_url}/server_info").json()["internal_states"][0]
    assert state["max_running_batch"] >= 2


@pytest.mark.slow
def test_bad_request_is_a_400_not_a_crash(baseline):
    response = _post(f"{baseline.base_url}/v1/completions", {"prompt": "hi", "n": 3})
    assert response.status_code == 400 and "'n'" in response.json()["error"]["message"]
    baseline.ensure_running()


@pytest.mark.slow
def test_clean_stop(baseline):
    """Runs after the other baseline tests (file order): SIGTERM ends the server with exit code 0."""
    assert baseline.is_running()
    assert baseline.stop() == 0
    assert "shutdown complete" in baseline.log_text()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{baseline.base_url}/health", timeout=2)


def test_a_bad_knob_fails_the_start_with_a_clear_record(tmp_path):
    target = EmbeddedTarget(tmp_path / "leg", {"threads": "zero", "max_batch_size": 4}, cwd=REPO)
    started = time.monotonic()
    with pytest.raises(TargetStartError) as info:
        target.start()
    assert time.monotonic() - started < 30  # validated before the model is loaded
    assert info.value.kind == "start_failure" and info.value.returncode == S.EXIT_BAD_CONFIG
    assert "'threads'='zero'" in str(info.value)
    assert start_failure_line(target.log_text()).startswith("invalid knob 'threads'")
    assert not target.server_info_path.exists()


def test_a_port_in_use_fails_the_start_clearly(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        target = EmbeddedTarget(tmp_path / "leg", {"threads": 1}, port=port, cwd=REPO)
        with pytest.raises(TargetStartError) as info:
            target.start()
    assert info.value.returncode == S.EXIT_PORT
    assert f"port {port}" in str(info.value)


def test_a_missing_override_file_fails_the_start_before_the_model_loads(tmp_path):
    target = EmbeddedTarget(tmp_path / "leg", {"threads": 1, "op_overrides": {"rotary": "nowhere/rot.py:rotary"}},
                            cwd=REPO)
    with pytest.raises(TargetStartError) as info:
        target.start()
    assert info.value.returncode == S.EXIT_BAD_CONFIG
    assert "'rotary'" in str(info.value) and "nowhere/rot.py" in str(info.value) and "does not exist" in str(info.value)
    assert "model loaded" not in target.log_text()


def test_port_zero_is_refused(tmp_path):
    assert S.main(["--port", "0"]) == S.EXIT_BAD_CONFIG


# --------------------------------------------------------------------------------- overrides, cheats


FAULTY = '''
import torch
CALLS = 0

def rmsnorm(hidden_states, weight, eps):
    global CALLS
    CALLS += 1
    if CALLS > {limit}:
        raise RuntimeError("injected fault in the rmsnorm override")
    x = hidden_states.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(hidden_states.dtype)
'''


@pytest.mark.slow
def test_an_override_that_raises_mid_request_errors_visibly(tmp_path):
    faulty = tmp_path / "faulty_rmsnorm.py"
    faulty.write_text(FAULTY.format(limit=3 * RMSNORM_CALLS_PER_FORWARD))  # prefill + 2 decode steps, then boom
    knobs = {"threads": 2, "op_overrides": {"rmsnorm": f"{faulty}:rmsnorm"}}
    with EmbeddedTarget(tmp_path / "leg", knobs, cwd=REPO) as target:
        assert target.server_info["op_overrides_detail"]["rmsnorm"]["modules_patched"] == RMSNORM_CALLS_PER_FORWARD
        payload = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": True, "stream": True}
        items = _stream(f"{target.base_url}/v1/completions", payload)
        tokens = [t for i in items if isinstance(i, dict) and i.get("choices") for t in i["choices"][0]["token_ids"]]
        errors = [i["error"] for i in items if isinstance(i, dict) and "error" in i]
        assert len(tokens) == 3 and len(errors) == 1  # streamed 3 tokens, then the error
        assert "injected fault" in errors[0]["message"] and errors[0]["code"] == 500
        response = _post(f"{target.base_url}/v1/completions", {**payload, "stream": False})
        assert response.status_code == 500 and "injected fault" in response.json()["error"]["message"]
        log = _wait_for_log(target, "finish=error")
        assert "ENGAGED op_override op='rmsnorm' first call" in log
        assert "ERROR decode step failed" in log and "RuntimeError: injected fault" in log
        info = httpx.get(f"{target.base_url}/server_info").json()["internal_states"][0]
        assert info["step_errors"] >= 2 and info["requests_failed"] >= 2
        target.ensure_running()  # a failing kernel fails its requests, not the server
        os.kill(target.proc.pid, signal.SIGKILL)  # ... whereas a dead server is a crash
        target.proc.wait(10)
        with pytest.raises(TargetCrashed) as crashed:
            target.ensure_running()
        assert crashed.value.kind == "crash" and crashed.value.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def featured(tmp_path_factory):
    knobs = {
        **BASE_KNOBS,
        "prompt_lookup": True,
        "prompt_lookup_num_tokens": 4,
        "response_cache": True,
        "op_overrides": {
            "rmsnorm": "harness/ops/rmsnorm_alt.py:rmsnorm",  # file form, relative to the server's cwd
            "silu_mul": "perfwarden.harness.ops.silu_mul_alt:silu_mul",  # module form
            "rotary": "perfwarden.harness.ops.rotary_alt:rotary",
        },
    }
    target = EmbeddedTarget(tmp_path_factory.mktemp("legs") / "featured", knobs, cwd=REPO)
    target.start()
    yield target
    target.stop()


@pytest.mark.slow
def test_op_overrides_report_engagement(featured):
    detail = featured.server_info["op_overrides_detail"]
    assert {op: d["modules_patched"] for op, d in detail.items()} == {"rmsnorm": 61, "silu_mul": 30, "rotary": 30}
    assert all(len(d["sha256"]) == 64 for d in detail.values())
    response = _post(f"{featured.base_url}/v1/chat/completions", {
        "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 8, "temperature": 0})
    assert response.status_code == 200 and "Paris" in response.json()["choices"][0]["message"]["content"]
    calls = httpx.get(f"{featured.base_url}/server_info").json()["internal_states"][0]["op_override_calls"]
    assert calls["rmsnorm"] >= 2 * 61 and calls["silu_mul"] >= 2 * 30 and calls["rotary"] >= 2 * 30
    log = featured.log_text()
    for op in ("rmsnorm", "silu_mul", "rotary"):
        assert f"ENGAGED op_override op={op!r} first call" in log
    assert "modules_patched=61" in log


@pytest.mark.slow
def test_prompt_lookup_reports_acceptance_length(featured):
    text = "one two three four five six seven eight nine ten " * 3
    payload = {"prompt": f"Repeat exactly: {text}\n{text}", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    data = _post(f"{featured.base_url}/v1/completions", payload).json()
    usage = data["usage"]
    assert usage["completion_tokens"] == 12
    assert usage["spec_verify_ct"] >= 1 and usage["spec_accept_length"] > 1.0  # drafts from the prompt accepted
    assert usage["spec_accepted_tokens"] > 0
    state = httpx.get(f"{featured.base_url}/server_info").json()["internal_states"][0]
    assert state["avg_spec_accept_length"] is not None and state["avg_spec_accept_length"] > 1.0
    log = _wait_for_log(featured, "prompt_lookup rid=" + data["id"])
    assert "ENGAGED prompt_lookup num_tokens=4" in log


@pytest.mark.slow
def test_response_cache_hit_is_in_the_log(featured):
    payload = {"prompt": "A short poem about rain:", "max_tokens": 5, "temperature": 0, "seed": 1}
    first = _post(f"{featured.base_url}/v1/completions", payload).json()
    second = _post(f"{featured.base_url}/v1/completions", payload).json()
    assert second["choices"][0]["token_ids"] == first["choices"][0]["token_ids"]
    assert second["id"] != first["id"]
    log = _wait_for_log(featured, f"response_cache HIT rid={second['id']}")
    assert f"stored_from={first['id']}" in log and "ENGAGED response_cache" in log
    different = _post(f"{featured.base_url}/v1/completions", {**payload, "max_tokens": 4}).json()
    assert f"response_cache HIT rid={different['id']}" not in featured.log_text()  # not identical: computed
    state = httpx.get(f"{featured.base_url}/server_info").json()["internal_states"][0]
    assert state["response_cache_hits"] >= 1
