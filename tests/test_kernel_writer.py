"""The kernel writer follows the target's device (issue 10 §5): on CUDA the deterministic brain proposes
the hand-written Triton kernels and the LLM brain is asked for Triton with every served shape; on a CPU
neither (a Triton kernel there is only checked under the interpreter, never timed). The LLM is the
scripted OpenAI-compatible server; every test asserts the payload it was sent."""

from __future__ import annotations

import json

import pytest

from perfwarden.agents import kernel_extractor
from perfwarden.agents.brains import Brains, served_shapes
from perfwarden.harness.llm_client import LLMClient
from perfwarden.harness.ops.alternatives import for_op
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

from scripted_llm import ScriptedLLM

OPS = ("rmsnorm", "silu_mul", "rotary")
RANKING = [("rmsnorm", 0.2), ("silu_mul", 0.1), ("rotary", 0.05)]
SHAPES = [[1, 7, 576], [4, 1, 576], [8, 1, 576], [1, 31, 576], [2, 1, 576], [16, 1, 576]]


def client(llm: ScriptedLLM) -> LLMClient:
    return LLMClient(model="scripted-model", base_url=llm.base_url, api_key="test-key", timeout_s=5, max_retries=1)


def triton_spec(op: str) -> str:
    return next(a.spec for a in for_op(op) if a.kind == "triton")


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_deterministic_brain_proposes_the_triton_kernels_on_cuda_only(device):
    alternatives = {op: [f"/alt/{op}_fast.py:{op}"] for op in OPS}
    proposals = kernel_extractor.propose(RANKING, list(OPS), alternatives, {}, max_ops=3, device=device)
    assert [p.op for p in proposals] == list(OPS)
    for p in proposals:
        assert p.candidates[0] == f"/alt/{p.op}_fast.py:{p.op}"  # the lab's own first, order kept
        assert (triton_spec(p.op) in p.candidates) == (device == "cuda")
        assert f"target device {device}" in p.rationale


def test_triton_is_not_proposed_twice_and_an_op_with_only_triton_is_proposed_on_cuda():
    lab_offers = {"rmsnorm": [triton_spec("rmsnorm")], "silu_mul": []}
    proposals = kernel_extractor.propose(RANKING, ["rmsnorm", "silu_mul"], lab_offers, {}, max_ops=3, device="cuda")
    assert [p.candidates for p in proposals] == [[triton_spec("rmsnorm")], [triton_spec("silu_mul")]]
    assert kernel_extractor.propose(RANKING, ["silu_mul"], lab_offers, {}, device="cpu") == []


def test_served_shapes_are_carried_whole_and_clean():
    assert served_shapes(SHAPES + [SHAPES[0], [True, 2], "3x4", [-1, 2]]) == SHAPES


@pytest.mark.parametrize("device,asked,not_asked", [
    ("cuda", ["Write a Triton kernel", "@triton.jit", "a CUDA GPU", "one launch per call", "bfloat16"], ["plain torch"]),
    ("cpu", ["Write a faster torch implementation", "plain torch", "the CPU"], ["@triton.jit", "Write a Triton kernel"]),
])
def test_llm_prompt_carries_every_served_shape_and_asks_for_the_devices_language(tmp_path, device, asked, not_asked):
    code = "import torch\ndef rmsnorm(hidden_states, weight, eps):\n    return hidden_states\n"
    with ScriptedLLM([json.dumps({"code": code, "rationale": "r"})]) as llm:
        spec = Brains(llm=client(llm)).write_kernel(tmp_path, "rmsnorm", 0.2, SHAPES, "def rmsnorm(x, w, eps): ...",
                                                    "rmsnorm", 0, device=device, dtype="bfloat16")
        prompt = llm.requests[0]["messages"][1]["content"]
    assert spec == f"{tmp_path / 'generated' / 'rmsnorm_llm_0.py'}:rmsnorm"
    assert json.dumps(SHAPES) in prompt  # all six, not the first four
    for text in asked:
        assert text in prompt, text
    for text in not_asked:
        assert text not in prompt, text


def test_a_cuda_run_proposes_triton_and_asks_the_llm_for_triton(tmp_path):
    """Through the graph: the run's device (``--set device=cuda``) reaches both brains."""
    prompts: list[str] = []

    def reply(payload):
        system, user = payload["messages"][0]["content"], payload["messages"][1]["content"]
        if "kernel-extractor" in system:
            prompts.append(user)
            return json.dumps({"code": "def rmsnorm(h, w, eps):\n    return h\n", "rationale": "r"})
        if "config-tuner" in system:
            return json.dumps({"proposals": []})
        return json.dumps({"findings": []})

    lab = SyntheticLab()
    lab.alternatives = lambda op: [f"alt/{op}_fast.py:impl"] if op == "rmsnorm" else []  # type: ignore[method-assign]
    with ScriptedLLM([], default=None) as llm:
        llm.default = reply
        settings = RunSettings(target="synthetic", levers=[], kernels=True, base_config={"device": "cuda"})
        run_graph(tmp_path / "run", settings, lab, llm=client(llm))
    assert prompts and all("a Triton kernel" in p and "a CUDA GPU" in p for p in prompts)
    benched = [c for c in lab.calls if c[0] == "opbench"]
    assert benched and any(triton_spec(c[1]) in c[2] for c in benched), benched
