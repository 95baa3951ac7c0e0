"""Unsealed evidence is marked wherever a verdict appears and is never banked (issue 17 §8).

A run without a verified seal chain (an imported bench file, a run recorded before sealing, no key)
keeps its verdict, action and codes -- foreign evidence is still judged -- but every surface shows it as
``PASS (unsealed)`` and no banking rule (the auditor's, the graph's, the review's) banks it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from rich.console import Console
from test_review_cases import build_demo_run
from typer.testing import CliRunner

from perfwarden.auditor.audit import audit_path
from perfwarden.auditor.banking import banks
from perfwarden.cli.main import app
from perfwarden.cli.run import TerminalWatcher
from perfwarden.orchestrator import graph as G
from perfwarden.orchestrator.review.export import export
from perfwarden.orchestrator.review.model import load_review
from perfwarden.orchestrator.review.report_html import render_review_html
from perfwarden.orchestrator.review.terminal import print_review
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab
from perfwarden.orchestrator.synth import build_ab_run
from perfwarden.proof.seal_cases import sealed_clean

runner = CliRunner()


def _cli_audit(run: Path, claim: Path, *extra: str):
    return runner.invoke(app, ["audit", str(run), "--claim", str(claim), *extra])


def test_an_unsealed_run_keeps_its_verdict_and_says_unsealed_in_the_audit_output(tmp_path):
    run = tmp_path / "imported"
    claim = build_ab_run(run)  # plain writes: no seal chain, like an imported bench file
    verdict = audit_path(run, claim)
    assert (verdict.verdict, verdict.action, verdict.seal) == ("PASS", "pass", "unsealed")
    assert verdict.shown == "PASS (unsealed)" and not banks(verdict.verdict, verdict.action, verdict.seal)
    human = _cli_audit(run, claim)
    assert human.exit_code == 0, human.output  # the verdict (and its exit code) is unchanged
    assert "PASS (unsealed)" in human.stdout
    as_json = _cli_audit(run, claim, "--json")
    assert as_json.exit_code == 0
    body = json.loads(as_json.stdout)
    assert (body["verdict"], body["seal"]) == ("PASS", "unsealed")


def test_an_mlperf_compliance_verdict_is_judged_and_marked_unsealed():
    """LoadGen's logs are foreign files: their verdict stands (exit 0, PASS) and says it is unsealed."""
    case = Path(__file__).resolve().parent / "data" / "mlperf" / "test05_r06_v41_multistream_retinanet_lenovo"
    args = ["audit-mlperf", "-r", str(case / "reference"), "-c", str(case / "compliance")]
    human = runner.invoke(app, args)
    assert human.exit_code == 0 and "perfwarden audit-mlperf: PASS (unsealed)" in human.stdout, human.output
    body = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert (body["verdict"], body["seal"]) == ("PASS", "unsealed")


def test_a_sealed_run_verified_with_its_key_is_not_marked(tmp_path):
    fixture = tmp_path / "fx"
    fixture.mkdir()
    claim = sealed_clean(fixture)
    run, key = fixture / "run", fixture / "seal.key"
    verdict = audit_path(run, claim, key=key)
    assert (verdict.verdict, verdict.seal, verdict.shown) == ("PASS", "sealed", "PASS") and banks(verdict.verdict, verdict.action, verdict.seal)
    human = _cli_audit(run, claim, "--key", str(key))
    assert human.exit_code == 0 and "PASS" in human.stdout and "unsealed" not in human.stdout.split("\n")[0]
    assert json.loads(_cli_audit(run, claim, "--key", str(key), "--json").stdout)["seal"] == "sealed"
    # the same chain read without its key proves nothing a forger could not write: unsealed
    assert audit_path(run, claim).seal == "unsealed"


def test_every_review_surface_marks_unsealed_verdicts_and_banks_none(tmp_path):
    run = build_demo_run(tmp_path / "run", sealed=False)
    review = load_review(run)
    assert [e.verdict.seal for e in review.entries] == ["unsealed"] * 4
    console = Console(file=io.StringIO(), width=160)
    print_review(review, console)
    terminal = console.file.getvalue()
    assert "001-baseline  PASS (unsealed)  pass" in terminal
    assert "FLAG (unsealed)" in terminal and "sealed evidence only" in terminal
    html = render_review_html(review)
    assert ">PASS (unsealed)</span>" in html and ">FLAG (unsealed)</span>" in html
    md = export(review, "md")
    assert "| PASS (unsealed) |" in md and "| FLAG (unsealed) |" in md
    rows = list(csv.DictReader(io.StringIO(export(review, "csv"))))
    assert {r["verdict"] for r in rows if r["claim"] == "002-patch"} == {"PASS (unsealed)"}
    assert all(r["banked"] == "False" for r in rows)
    data = json.loads(export(review, "json"))
    assert {v["shown"] for v in data["verdicts"]} >= {"PASS (unsealed)", "FLAG (unsealed)"}
    assert data["banked"]["items"] == [] and data["banked"]["bankable_not_in_report"] == []


def _unsealed_patches(monkeypatch) -> None:
    """The auditor answers every patch claim as if its evidence carried no verified seal (the harness
    seals every run it records, so this stands in for a chain that went missing or could not be read)."""
    real = G.audit_path

    def audit(run, claim, **kw):
        verdict = real(run, claim, **kw)
        return verdict.model_copy(update={"seal": "unsealed"}) if verdict.scope == "patch" else verdict

    monkeypatch.setattr(G, "audit_path", audit)


def test_the_graph_never_banks_a_step_whose_evidence_is_unsealed(tmp_path, monkeypatch):
    _unsealed_patches(monkeypatch)
    console = Console(file=io.StringIO(), width=250)
    state = run_graph(tmp_path / "run", RunSettings(target="synthetic", levers=["max_batch_size=2"], kernels=False),
                      SyntheticLab(), watcher=TerminalWatcher(console, started=0.0))
    step = next(v for v in state["verdicts"] if v.scope == "patch")
    assert (step.verdict, step.seal) == ("PASS", "unsealed")  # the verdict stands; only banking is refused
    assert state["banked"] == []
    refused = {r.name: r.reason for r in state["rejected"]}
    assert "evidence unsealed" in refused["cfg-max_batch_size=2"]
    proposal = next(p for p in state["proposals"] if p.id == "cfg-max_batch_size=2")
    assert proposal.status == "rejected" and any("PASS (unsealed)" in h for h in proposal.history)
    baseline = next(v for v in state["verdicts"] if v.scope == "baseline")
    assert baseline.seal == "sealed"  # a harness-recorded run is sealed: the marking is the patch's alone
    assert re.search(r"patch\s+cfg-max_batch_size=2\s+PASS \(unsealed\) pass", console.file.getvalue())
    run = tmp_path / "run"
    report = json.loads((run / "report.json").read_text())
    assert report["banked"] == [] and report["search_path"][0]["verdict"] == "PASS (unsealed)"
    assert [r["verdict"] for r in report["refused_or_reclassified"]] == ["PASS (unsealed)"]
    md = (run / "report.md").read_text()
    assert "| PASS (unsealed) |" in md and "Nothing was banked" in md
    saved = json.loads((run / step.path).read_text())
    assert (saved["verdict"], saved["seal"]) == ("PASS", "unsealed")
