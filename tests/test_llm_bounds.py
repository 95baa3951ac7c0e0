"""An LLM ask has hard bounds whatever the endpoint does (design §5, "LLM asks"): every variant of the
hostile stub (tests/hostile_openai.py) ends one ask within its deadline as an error the callers turn into
a degraded answer, the body is never read past its cap, and a run against the stub ends 0 with every
verdict degraded, within its budget plus one ask's deadline."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from perfwarden.auditor.audit import audit_path
from perfwarden.auditor.persona import PersonaAnswer, apply_persona
from perfwarden.harness.llm_client import ANSWER_BYTES, LLMClient, LLMOutputError, LLMUnavailable
from perfwarden.harness.llm_transport import CLOSE_GRACE_S
from perfwarden.orchestrator.persona_model import persona_model

from auditor_cases import build
from hostile_openai import MiB, HostileOpenAI, Request, variant_ids

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DEADLINE_S = 1.0
SLACK_S = 1.0
"""What a contended machine may add to an ask's end beyond the deadline and the close grace."""


def client(srv: HostileOpenAI, deadline_s: float = DEADLINE_S, retries: int = 2) -> LLMClient:
    return LLMClient(model="hostile-model", base_url=srv.base_url, api_key="test-key", timeout_s=deadline_s,
                     max_retries=retries, max_tokens=64)


def assert_asked_for_persona_answer(request: Request) -> None:
    """What the client sent: the model, the messages, the strict schema, the key."""
    assert request.path == "/v1/chat/completions" and request.authorization == "Bearer test-key"
    payload = request.payload
    assert payload["model"] == "hostile-model" and payload["temperature"] == 0
    assert payload["max_completion_tokens"] == 64
    assert [m["role"] for m in payload["messages"][:2]] == ["system", "user"]
    assert payload["messages"][1]["content"] == "the question"
    assert payload["response_format"]["type"] == "json_schema"
    assert payload["response_format"]["json_schema"]["name"] == "PersonaAnswer"
    assert payload["response_format"]["json_schema"]["strict"] is True


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("mode", "variant"), variant_ids(), ids=[f"{m}-{v}" for m, v in variant_ids()])
def test_every_hostile_answer_ends_the_ask_within_its_deadline_as_a_caught_error(mode, variant):
    with HostileOpenAI(mode, variant, drip_s=0.25, huge_bytes=64 * MiB) as srv:
        llm = client(srv)
        started = time.monotonic()
        with pytest.raises((LLMUnavailable, LLMOutputError)):
            llm.complete_json("sys", "the question", PersonaAnswer)
        elapsed = time.monotonic() - started
        requests = list(srv.requests)
    assert elapsed < DEADLINE_S + CLOSE_GRACE_S + SLACK_S, f"{mode}/{variant}: the ask took {elapsed:.1f} s"
    assert requests, "the stub was never asked"
    assert_asked_for_persona_answer(requests[0])
    assert llm.usage.failures + llm.usage.unavailable >= 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", ["huge_length", "huge_chunked", "huge_error"])
def test_a_huge_answer_is_cut_at_the_cap_not_held(variant):
    """64 MiB offered, read streamed: the peak of Python's allocations stays a few caps, not the body."""
    with HostileOpenAI("huge_body", variant, huge_bytes=64 * MiB) as srv:
        llm = client(srv, deadline_s=10, retries=0)
        tracemalloc.start()
        try:
            with pytest.raises((LLMUnavailable, LLMOutputError), match="over the cap|HTTP 500"):
                llm.complete_json("sys", "the question", PersonaAnswer)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 4 * ANSWER_BYTES + 4 * MiB, f"{variant}: {peak / MiB:.0f} MiB allocated at the peak"


def test_a_slow_answer_that_ends_within_the_deadline_is_accepted():
    """The drip stub's answer is a valid one: only the deadline makes the drip a failure."""
    with HostileOpenAI("drip", "body_drip", drip_s=0.001) as srv:
        answer = client(srv, deadline_s=30).complete_json("sys", "the question", PersonaAnswer)
        assert_asked_for_persona_answer(srv.requests[0])
    assert answer == PersonaAnswer()


def test_the_ask_deadline_is_the_runs_remaining_budget_when_that_is_shorter():
    with HostileOpenAI("never_finishing", "no_answer") as srv:
        llm = client(srv, deadline_s=60)
        llm.time_left = lambda: 0.5
        started = time.monotonic()
        with pytest.raises(LLMUnavailable, match="deadline"):
            llm.complete_json("sys", "the question", PersonaAnswer)
        assert time.monotonic() - started < 0.5 + CLOSE_GRACE_S + SLACK_S
        assert_asked_for_persona_answer(srv.requests[0])


@pytest.mark.parametrize("left", [0.0, -30.0, float("nan")])
def test_no_budget_left_means_no_ask(left):
    with HostileOpenAI("garbage_types") as srv:
        llm = client(srv)
        llm.time_left = lambda: left
        with pytest.raises(LLMUnavailable, match="budget is spent"):
            llm.complete_json("sys", "the question", PersonaAnswer)
        assert srv.requests == [] and llm.usage.unavailable == 1


def test_an_ask_from_inside_an_event_loop_is_bounded_too():
    """A caller already running asyncio gets the same deadline (the ask runs on a helper thread)."""
    with HostileOpenAI("drip", "header_drip", drip_s=0.25) as srv:
        llm = client(srv)

        async def caller() -> float:
            started = time.monotonic()
            with pytest.raises(LLMUnavailable):
                llm.complete_json("sys", "the question", PersonaAnswer)
            return time.monotonic() - started

        assert asyncio.run(caller()) < DEADLINE_S + CLOSE_GRACE_S + SLACK_S
        assert_asked_for_persona_answer(srv.requests[0])


@pytest.mark.parametrize(("mode", "variant"), [("numeric_overflow", "usage_inf"), ("deep_nesting", "answer_deep"),
                                               ("drip", "body_drip"), ("garbage_types", "content_number")])
def test_the_persona_marks_the_verdict_degraded_and_keeps_its_label(tmp_path, mode, variant):
    claim = build(tmp_path)
    verdict = audit_path(tmp_path, claim)
    with HostileOpenAI(mode, variant, drip_s=0.25) as srv:
        out = apply_persona(tmp_path, claim.read_text(), verdict, persona_model(client(srv)))
        prompt = srv.requests[0].payload["messages"][1]["content"]
    assert out.degraded and any(r.startswith("LLM persona: ") for r in out.degraded_reasons)
    assert out.verdict == verdict.verdict and out.findings == verdict.findings
    assert '<untrusted_data name="claim">' in prompt


def run_against_the_stub(tmp_path: Path, mode: str, budget_minutes: float) -> tuple[subprocess.CompletedProcess, float]:
    stub = subprocess.Popen([sys.executable, str(TESTS / "hostile_openai.py"), "--mode", mode, "--drip-s", "5"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert stub.stdout is not None
        port = int(stub.stdout.readline().split()[1])
        env = {**os.environ, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "k"}
        started = time.monotonic()
        done = subprocess.run([str(Path(sys.executable).parent / "perfwarden"), "run", "--target", "synthetic",
                               "--llm", "hostile-model", "--budget-minutes", str(budget_minutes),
                               "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True,
                              timeout=budget_minutes * 60 + 60 + 120)
        return done, time.monotonic() - started
    finally:
        stub.terminate()
        stub.wait(10)


@pytest.mark.integration
# never_finishing holds its first ask until the budget is spent, so the whole budget is waited out: 15 s is
# enough to show the ask ends with the budget and not at its own 60 s deadline
@pytest.mark.parametrize(("mode", "budget_minutes"), [("garbage_types", 1.0), ("never_finishing", 0.25)])
def test_a_run_against_a_hostile_endpoint_ends_0_degraded_within_budget(tmp_path, mode, budget_minutes):
    done, wall = run_against_the_stub(tmp_path, mode, budget_minutes)
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = [json.loads(p.read_text()) for p in sorted((tmp_path / "run" / "verdicts").glob("*.json"))]
    assert verdicts and all(v["degraded"] for v in verdicts)
    assert all(any(r.startswith("LLM persona: ") for r in v["degraded_reasons"]) for v in verdicts)
    llm = json.loads((tmp_path / "run" / "report.json").read_text())["llm"]
    assert llm["model"] == "hostile-model" and llm["invalid_outputs"] + llm["unavailable"] > 0
    assert wall < budget_minutes * 60 + 60 + 30, f"{mode}: {wall:.0f} s on a {budget_minutes} min budget"


def test_a_flood_of_persona_findings_is_capped_and_keeps_its_worst_severity(tmp_path):
    """A schema-valid answer of 2 MiB: 2,000 findings of one code (the last a FAIL), 1,000 unknown codes, a
    file name of 100,000 characters. The verdict lists at most MAX_LISTED of the code plus one summary that
    keeps the FAIL, and stays small."""
    from perfwarden.auditor.findings import MAX_LISTED
    from scripted_llm import ScriptedLLM

    claim = build(tmp_path)
    verdict = audit_path(tmp_path, claim)
    flood = [{"code": "OUTPUT_LENGTH_SHIFT", "severity": "FLAG", "message": "m",
              "evidence": [{"file": "x" * 100_000, "line": 1}]}]
    flood += [{"code": "OUTPUT_LENGTH_SHIFT", "severity": "FLAG", "message": "m", "evidence": []}] * 1998
    flood += [{"code": "OUTPUT_LENGTH_SHIFT", "severity": "FAIL", "message": "the worst", "evidence": []}]
    flood += [{"code": f"MADE_UP_{i}", "severity": "FAIL", "message": "m", "evidence": []} for i in range(1000)]
    with ScriptedLLM([json.dumps({"findings": flood, "notes": "n"})]) as llm:
        out = apply_persona(tmp_path, claim.read_text(), verdict,
                            persona_model(LLMClient(model="scripted-model", base_url=llm.base_url, api_key="k",
                                                    timeout_s=10, max_retries=0)))
        assert llm.requests[0]["response_format"]["json_schema"]["name"] == "PersonaAnswer"
    persona = [f for f in out.findings if f.gate == "llm_persona"]
    assert len(persona) == MAX_LISTED + 1 and persona[-1].omitted == 2000 - MAX_LISTED
    assert out.verdict == "FAIL" and not out.degraded
    assert max(len(e.file) for f in persona for e in f.evidence) <= 200
    assert len(out.model_extra["persona_ignored"]) <= 12
    assert len(out.model_dump_json()) < 64 << 10
