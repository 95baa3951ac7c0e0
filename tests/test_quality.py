"""Quality probes: scoring and the Wilson interval as pure functions; the QA eval end to end against a
scripted local OpenAI-compatible server (asserting every payload it received); perplexity in-process
with a tiny model and from endpoint logprobs; and, marked slow, the real embedded server."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from perfwarden.harness.target_config import EmbeddedConfig
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import FakeOpenAIServer  # noqa: E402

from perfwarden.auditor import registry  # noqa: E402
from perfwarden.formats.records import QualityEval, RunDir  # noqa: E402
from perfwarden.harness import quality as Q  # noqa: E402

# ------------------------------------------------------------------------------------------ scoring


@pytest.mark.parametrize("response, answers, expected", [
    ("Paris", ["Paris"], True),
    ("paris.", ["Paris"], True),
    ("**Paris**", ["Paris"], True),
    ('"Paris"', ["Paris"], True),
    ("Paris is the capital of France.", ["Paris"], True),          # one-word gold: first word counts
    ("Paris\nIt is also the largest city.", ["Paris"], True),      # first line only
    ("\n\n  Tokyo  \n", ["Tokyo"], True),
    ("The kangaroo", ["cow"], False),
    ("the cow", ["cow"], True),                                    # leading article dropped
    ("The capital of France is Paris.", ["Paris"], False),         # exact match, not "contains"
    ("Two hundred.", ["200", "two hundred"], True),
    ("two hundred and five", ["200", "two hundred"], False),       # multi-word gold: whole line only
    ("200", ["200", "two hundred"], True),
    ("12.", ["12", "twelve"], True),
    ("", ["blue"], False),
    ("Feline", ["cats"], False),
])
def test_exact_match_after_normalization(response, answers, expected):
    assert Q.is_match(response, answers) is expected


def test_normalize():
    assert Q.normalize("  The  Sky is BLUE!!\nsecond line") == "sky is blue"
    assert Q.normalize("“Quoted” — text…") == "quoted text"
    assert Q.normalize("An apple") == "apple" and Q.normalize("Anna") == "anna"
    assert Q.normalize("") == "" and Q.normalize(None) == ""


def test_wilson_interval_known_values():
    low, high = Q.wilson_interval(20, 40)
    assert (low, high) == pytest.approx((0.3520, 0.6480), abs=1e-4)
    assert Q.wilson_interval(0, 40) == pytest.approx((0.0, 0.08762), abs=1e-5)
    assert Q.wilson_interval(40, 40)[1] == pytest.approx(1.0) and Q.wilson_interval(40, 40)[0] < 1.0
    low, high = Q.wilson_interval(7, 31)
    low2, high2 = Q.wilson_interval(24, 31)
    assert low == pytest.approx(1 - high2) and high == pytest.approx(1 - low2)  # symmetric in k <-> n-k
    assert Q.wilson_interval(1, 1000)[0] > 0
    with pytest.raises(ValueError):
        Q.wilson_interval(0, 0)
    with pytest.raises(ValueError):
        Q.wilson_interval(5, 4)


def test_shipped_item_set():
    items = Q.load_items()
    assert len(items.items) == 40 and len({i.id for i in items.items}) == 40
    assert len({i.category for i in items.items}) >= 6
    assert items.few_shot and not {q for q, _ in items.few_shot} & {i.question for i in items.items}
    assert registry.quality_evals()[Q.QA_EVAL_ID].min_n <= len(items.items)
    messages = Q.item_messages(items, "What is 2 + 2?")
    assert [m["role"] for m in messages] == ["user", "assistant"] * len(items.few_shot) + ["user"]
    assert messages[-1]["content"] == "What is 2 + 2?\nAnswer with a single word or number."
    sub = items.subset(5)
    assert len(sub.items) == 5 and sub.sha256 != items.sha256
    text, sha = Q.load_text()
    assert 250 <= len(text.split()) <= 350 and len(sha) == 64


def test_broken_item_sets_are_rejected(tmp_path):
    good = json.loads(Q.ITEMS_PATH.read_text())
    variants = {
        "no_placeholder": {**good, "prompt_template": "Answer:"},
        "dup_ids": {**good, "items": good["items"][:2] + good["items"][:1]},
        "no_answers": {**good, "items": [{**good["items"][0], "answers": []}]},
        "shot_is_item": {**good, "few_shot": [{"question": good["items"][0]["question"], "answer": "x"}]},
    }
    for name, data in variants.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        with pytest.raises(Q.QualityError):
            Q.load_items(path)
    (tmp_path / "truncated.json").write_text(Q.ITEMS_PATH.read_text()[:300])
    with pytest.raises(Q.QualityError):
        Q.load_items(tmp_path / "truncated.json")
    with pytest.raises(KeyError):
        Q.render_prompt("{question} {missing}", "q")


# ---------------------------------------------------------------------------- scripted chat server

ITEMS = Q.load_items()
BY_QUESTION = {i.question: i for i in ITEMS.items}
WRONG = {"cap-02": "Kyoto", "ari-03": "ten", "plu-03": "mouses"}
SENTENCE = {"cap-01": "Paris is the capital of France.", "opp-01": "**Cold**"}
FAIL_500, SLOW, MALFORMED = "col-01", "col-02", "col-03"
TIMEOUT_S = 0.5


class ChatServer(FakeOpenAIServer):
    """FakeOpenAIServer plus a scripted non-streaming ``/v1/chat/completions`` and an echo-logprobs
    ``/v1/completions``, keyed by the question in the last user message."""

    def __init__(self, *, all_fail: bool = False, logprobs: list | None = None, **kw):
        super().__init__(**kw)
        self.all_fail = all_fail
        self.logprobs = logprobs
        self.app.router.routes.insert(0, Route("/v1/chat/completions", self._chat, methods=["POST"]))
        self.app.router.routes.insert(0, Route("/v1/completions", self._echo, methods=["POST"]))

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
        if self.all_fail:
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        question = body["messages"][-1]["content"].split("\n")[0]
        item = BY_QUESTION[question]
        if item.id == FAIL_500:
            return JSONResponse({"error": {"message": "scripted"}}, status_code=500)
        if item.id == SLOW:
            await asyncio.sleep(TIMEOUT_S * 4)
        if item.id == MALFORMED:
            return Response(b'{"choices": [', media_type="application/json")
        text = WRONG.get(item.id) or SENTENCE.get(item.id) or item.answers[0]
        return JSONResponse({"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text}}]})

    async def _echo(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
        if self.logprobs is None:
            return JSONResponse({"error": {"message": "'echo'=True is not supported"}}, status_code=400)
        return JSONResponse({"choices": [{"index": 0, "text": body["prompt"] + " x",
                                          "logprobs": {"token_logprobs": self.logprobs}}]})


@pytest.mark.slow  # over 2 s on a 2-core machine: the full suite runs it
def test_qa_eval_end_to_end_against_a_scripted_server(tmp_path):
    base = QualityEval(eval_id=Q.QA_EVAL_ID, leg="base", n=40, score=0.9, item_set_sha256=ITEMS.sha256)
    with ChatServer(model="served-model") as srv:
        t0 = time.monotonic()
        path = Q.run_qa_eval(tmp_path, "cand", srv.base_url, baseline=base, timeout_s=TIMEOUT_S, concurrency=4)
        took = time.monotonic() - t0
        sent = list(srv.requests)
    assert path == RunDir(tmp_path).quality(Q.QA_EVAL_ID, "cand") and path.name == "pw-qa-exact-v1@cand.json"
    result = QualityEval.model_validate_json(path.read_text())
    extra = result.model_extra

    # every item was sent exactly once, with the payload the eval promises
    assert len(sent) == 40
    assert sorted(b["messages"][-1]["content"] for b in sent) == sorted(
        Q.render_prompt(ITEMS.prompt_template, i.question) for i in ITEMS.items)
    for body in sent:
        assert body["model"] == "served-model"  # discovered from GET /v1/models
        assert body["temperature"] == 0 and body["stream"] is False and body["max_tokens"] == 12
        assert body["messages"][:-1] == Q.item_messages(ITEMS, "x")[:-1]  # the few-shot turns
        assert set(body) == {"model", "messages", "temperature", "max_tokens", "stream"}

    # failures are scored wrong AND counted; nothing is dropped
    errors = {d["id"]: d["error"] for d in extra["items"] if d["error"]}
    assert set(errors) == {FAIL_500, SLOW, MALFORMED}
    assert "HTTP 500" in errors[FAIL_500] and "timeout" in errors[SLOW] and "malformed" in errors[MALFORMED]
    right = 40 - len(WRONG) - 3
    assert result.n == 40 and extra["errors"] == 3 and extra["correct"] == right
    assert result.score == pytest.approx(right / 40)
    assert (result.ci_low, result.ci_high) == pytest.approx(Q.wilson_interval(right, 40))
    assert result.completed is True  # 3/40 = 7.5% failed <= 10%
    assert result.baseline_score == 0.9 and result.baseline_leg == "base"
    assert extra["item_set_sha256"] == ITEMS.sha256 and extra["model"] == "served-model"
    assert took < 10


def test_qa_eval_with_too_many_failures_is_not_completed(tmp_path):
    with ChatServer(all_fail=True) as srv:
        result = Q.evaluate_qa(srv.base_url, "cand", model="m", items=ITEMS.subset(20), timeout_s=2)
        assert len(srv.requests) == 20
    assert result.n == 20 and result.score == 0.0 and result.model_extra["errors"] == 20
    assert result.completed is False


def test_qa_eval_deadline_bounds_the_whole_run():
    with ChatServer() as srv:
        result = Q.evaluate_qa(srv.base_url, "cand", model="m", items=ITEMS.subset(3), deadline_s=0.0)
        assert srv.requests == []
    assert result.n == 3 and result.model_extra["errors"] == 3 and not result.completed
    assert all("deadline" in d["error"] for d in result.model_extra["items"])


def test_baseline_must_match(tmp_path):
    other = QualityEval(eval_id=Q.PPL_EVAL_ID, leg="base", n=300, score=12.0)
    with pytest.raises(Q.QualityError, match="eval"):
        Q.evaluate_qa("http://127.0.0.1:9", "cand", model="m", baseline=other)
    unfinished = QualityEval(eval_id=Q.QA_EVAL_ID, leg="base", n=40, score=0.5, completed=False)
    with pytest.raises(Q.QualityError, match="not completed"):
        Q.evaluate_qa("http://127.0.0.1:9", "cand", model="m", baseline=unfinished)
    other_set = QualityEval(eval_id=Q.QA_EVAL_ID, leg="base", n=40, score=0.5, item_set_sha256="0" * 64)
    with pytest.raises(Q.QualityError, match="item_set_sha256"):
        Q.evaluate_qa("http://127.0.0.1:9", "cand", model="m", baseline=other_set)


# -------------------------------------------------------------------------------------- perplexity


class _CharTokenizer:
    """Enough of a tokenizer for ``token_nlls_in_process``: one id per character, vocab 64."""

    def __call__(self, text, return_tensors=None):
        import torch

        class Out:
            input_ids = torch.tensor([[ord(c) % 64 for c in text[:120]]])

        return Out()


@pytest.mark.slow
def test_perplexity_in_process_matches_cross_entropy(tmp_path):
    torch = pytest.importorskip("torch")

    class TinyLM(torch.nn.Module):
        """A causal LM in the shape transformers returns: ``model(input_ids=...).logits``."""

        class config:
            max_position_embeddings = 256

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb = torch.nn.Embedding(64, 16)
            self.head = torch.nn.Linear(16, 64)

        def forward(self, input_ids):
            class Out:
                pass

            out = Out()
            out.logits = self.head(torch.cumsum(self.emb(input_ids), dim=1))
            return out

    model, tok = TinyLM().eval(), _CharTokenizer()
    base = QualityEval(eval_id=Q.PPL_EVAL_ID, leg="base", n=119, score=60.0)
    path = Q.run_ppl_eval(tmp_path, "cand", model=model, tokenizer=tok, baseline=base)
    result = QualityEval.model_validate_json(path.read_text())
    text, sha = Q.load_text()
    ids = tok(text).input_ids
    with torch.no_grad():
        loss = float(torch.nn.functional.cross_entropy(model(input_ids=ids).logits[0, :-1], ids[0, 1:]))
    assert result.eval_id == "pw-ppl-v1" and result.n == ids.shape[1] - 1
    assert result.score == pytest.approx(math.exp(loss), rel=1e-5)
    assert result.ci_low < result.score < result.ci_high
    assert result.model_extra["method"] == "in_process" and result.model_extra["text_sha256"] == sha
    assert result.baseline_score == 60.0 and result.completed
    assert path.name == "pw-ppl-v1@cand.json"
    TinyLM.config.max_position_embeddings = 10
    with pytest.raises(Q.QualityError, match="tokens"):
        Q.evaluate_ppl("cand", model=model, tokenizer=tok)


def test_perplexity_from_endpoint_logprobs_and_fallback():
    with ChatServer(model="m", logprobs=[None, -1.0, -2.0, -3.0, -0.25]) as srv:
        result = Q.evaluate_ppl("cand", base_url=srv.base_url)
        body = srv.requests[-1]
    text, _ = Q.load_text()
    assert body == {"model": "m", "prompt": text, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}
    assert result.model_extra["method"] == "endpoint_logprobs" and result.n == 3
    assert result.score == pytest.approx(math.exp(2.0))
    with ChatServer(model="m") as srv:  # answers 400, like the embedded target
        with pytest.raises(Q.QualityError, match="HTTP 400"):
            Q.evaluate_ppl("cand", base_url=srv.base_url)


def test_quality_pair_for_the_lab_runs_baseline_then_candidate_and_reuses_the_baseline(tmp_path, monkeypatch):
    started: list[tuple[str, str]] = []

    class FakeTarget:
        """Stands in for EmbeddedTarget: a scripted server per leg, recording where and how it started."""

        def __init__(self, leg_dir, config, **kw):
            started.append((str(Path(leg_dir).relative_to(tmp_path)), config["quantization"]))
            self.srv = ChatServer(model="served-model")

        def __enter__(self):
            self.srv.start()
            self.base_url = self.srv.base_url
            return self

        def __exit__(self, *exc):
            self.srv.stop()

    monkeypatch.setattr(Q, "EmbeddedTarget", FakeTarget)  # quality.py imports it by name
    items = ITEMS.subset(20)
    assert Q.run_quality_pair(tmp_path, "cand", EmbeddedConfig(quantization="int8_dynamic"), "base", EmbeddedConfig(),
                              items=items, timeout_s=TIMEOUT_S) == Q.QA_EVAL_ID
    assert started == [("quality/servers/base", "none"), ("quality/servers/cand", "int8_dynamic")]  # every knob given
    base = QualityEval.model_validate_json(RunDir(tmp_path).quality(Q.QA_EVAL_ID, "base").read_text())
    cand = QualityEval.model_validate_json(RunDir(tmp_path).quality(Q.QA_EVAL_ID, "cand").read_text())
    assert base.leg == "base" and base.baseline_score is None and base.n == 20
    assert cand.leg == "cand" and cand.baseline_leg == "base" and cand.baseline_score == base.score
    Q.run_quality_pair(tmp_path, "cand2", EmbeddedConfig(max_batch_size=8), "base", EmbeddedConfig(), items=items,
                       timeout_s=TIMEOUT_S)
    assert [s[0] for s in started[2:]] == ["quality/servers/cand2"]  # the baseline result was reused


# ---------------------------------------------------------------------------- real embedded server


@pytest.mark.slow
def test_qa_probe_against_the_real_embedded_server(tmp_path):
    pytest.importorskip("transformers")
    from perfwarden.harness import model as M
    from perfwarden.harness.targets import EmbeddedTarget

    try:
        M.gguf_path()
    except M.ModelError as exc:
        pytest.skip(str(exc))
    with EmbeddedTarget(tmp_path / "legs" / "base", {"threads": 2}) as target:
        result = Q.evaluate_qa(target.base_url, "base", items=ITEMS.subset(5), timeout_s=120)
    extra = result.model_extra
    assert result.n == 5 and extra["errors"] == 0 and result.completed
    assert extra["model"] == "SmolLM2-135M-Instruct"
    assert all(d["response"] and len(d["response"]) < 200 for d in extra["items"])
    # the first five items are capitals the model knows (measured: it answers them in one word)
    assert result.score >= 0.6
