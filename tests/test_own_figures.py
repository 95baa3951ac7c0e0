"""Producers state their own figures (issue 18 item 5): every patch and bundle claim carries the headline
delta the producer read from its own client's bench lines, the review and the report show it beside the
auditor's re-derivation, and a figure overstated beyond tolerance is REPORTED_MISMATCH in a real run."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import pytest

from perfwarden.agents import own_figures
from perfwarden.harness.llm_client import LLMClient
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

from scripted_llm import ScriptedLLM


def claims(run: Path, scopes: tuple[str, ...] = ("patch", "bundle")) -> list[dict]:
    out = [json.loads(p.read_text()) for p in sorted((run / "claims").glob("*.json"))]
    return [c for c in out if c["scope"] in scopes]


def write_bench(path: Path, values: list[float | None], torn: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"schema_version": 1, "leg": path.parent.name, "rep": i, "output_throughput": v})
             for i, v in enumerate(values)]
    path.write_text("\n".join(lines) + ("\n{\"leg\": \"x\", \"rep" if torn else "\n"))


def test_the_reading_is_the_ratio_of_medians_of_the_clients_own_lines(tmp_path):
    write_bench(tmp_path / "legs" / "a" / "bench_runs.jsonl", [100.0, 90.0, 110.0, None])
    write_bench(tmp_path / "legs" / "b" / "bench_runs.jsonl", [120.0, 130.0, 125.0], torn=True)
    reading = own_figures.read_ab(tmp_path, ["a", "b"])
    assert reading.baseline == [100.0, 90.0, 110.0] and reading.candidate == [120.0, 130.0, 125.0]
    assert reading.delta_pct == round((median([120, 130, 125]) / median([100, 90, 110]) - 1) * 100, 2) == 25.0
    assert own_figures.read_ab(tmp_path, ["a", "missing"]) is None
    assert own_figures.own_regressions(tmp_path, ["a", "b"], ["output_throughput", "median_ttft_ms"]) == {
        "output_throughput": 25.0}


@pytest.mark.slow
def test_every_patch_and_bundle_claim_states_the_producers_own_figure(tmp_path):
    run = tmp_path / "run"
    state = run_graph(run, RunSettings(target="synthetic", levers=["max_batch_size=2", "attn_implementation"],
                                       kernels=False), SyntheticLab())
    stated = claims(run)
    assert {c["scope"] for c in stated} == {"patch", "bundle"}
    for claim in stated:
        legs = [claim["legs"]["baseline"], claim["legs"]["candidate"]]
        assert claim["headline"]["value"] == own_figures.read_ab(run, legs).delta_pct, claim["seq"]
    for v in state["verdicts"]:
        assert "REPORTED_MISMATCH" not in v.codes()  # the producer's honest figure agrees with the raw
        if v.scope in ("patch", "bundle"):
            assert v.headline_claimed is not None and v.headline_rederived is not None
            assert abs(v.headline_claimed - v.headline_rederived) < 1.0
    md = (run / "report.md").read_text()
    banked = next(v for v in state["verdicts"] if v.lever == "cfg-max_batch_size=2")
    assert (f"| {banked.seq} | patch | cfg-max_batch_size=2 | PASS | pass | {banked.headline_claimed:+.2f} | "
            f"{banked.headline_rederived:+.2f} |") in md
    assert "| Δ claimed | Δ re-derived |" in md


@pytest.mark.slow
def test_an_llm_brain_that_overstates_its_figure_gets_reported_mismatch_and_banks_the_auditors_figure(tmp_path):
    """The LLM brain's stated figure goes into the claim; overstated, the auditor flags it
    (REPORTED_MISMATCH, downgrade_headline) and the change banks under the auditor's figure, never the
    stated one."""
    asked: list[str] = []

    def reply(payload):
        name = payload.get("response_format", {}).get("json_schema", {}).get("name")
        asked.append(name)
        if name == "StatedFigure":
            readings = payload["messages"][1]["content"]
            assert '"baseline": [' in readings and '"candidate": [' in readings  # the producer's own numbers
            return json.dumps({"delta_pct": 250.0, "rationale": "much faster"})
        if name == "PersonaAnswer":
            return json.dumps({"findings": [], "notes": ""})
        return "no JSON here"  # the other brains fall back to the deterministic policy

    with ScriptedLLM([], default=None) as llm:
        llm.default = reply
        client = LLMClient(model="scripted-model", base_url=llm.base_url, api_key="k", timeout_s=5, max_retries=0)
        settings = RunSettings(target="synthetic", levers=["max_batch_size=2"], kernels=False, llm_model="scripted-model")
        state = run_graph(tmp_path / "run", settings, SyntheticLab(), llm=client)
    patches = [v for v in state["verdicts"] if v.scope == "patch"]
    # One banking rule (auditor/banking.py): a FLAG whose action is downgrade_headline banks the change
    # under the auditor's re-derived headline at once -- the overstated figure is never banked, and no
    # restatement is needed to bank.
    assert len(patches) == 1, [(v.verdict, v.action) for v in patches]
    first = patches[0]
    assert first.headline_claimed == 250.0 and first.verdict == "FLAG" and "REPORTED_MISMATCH" in first.codes()
    assert first.action == "downgrade_headline"
    banked = state["banked"]
    assert [b.name for b in banked] == ["cfg-max_batch_size=2"]
    assert banked[0].headline_rederived_pct == pytest.approx(first.headline_rederived)
    assert abs(banked[0].headline_rederived_pct - 250.0) > 50
    assert asked.count("StatedFigure") == 1
    history = next(p for p in state["proposals"] if p.id == "cfg-max_batch_size=2").history
    assert any("states +250.00% (llm)" in h for h in history)
