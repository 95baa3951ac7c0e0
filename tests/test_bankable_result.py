"""A result you can bank, on the run graph: the bundle states the net change, the number banked is the
conservative one, a refused claim is resubmitted only when that can change its verdict, and the terminal
shows one line per step.

The bundle's net change (the final configuration's difference from the true baseline): the first test replays the search path of an embedded run on the synthetic target: the study banked
``max_batch_size=16 + prompt_lookup=True`` (+160%), then ``max_batch_size=8 + prompt_lookup=False``
(+30% against it). ``prompt_lookup`` ends at its baseline value, so the bundle must neither declare it
(the auditor would rightly find it identical in both legs: NOT_ENGAGED) nor the speculative decoding the
first step engaged, and the first step is superseded: no knob it set survives in the final configuration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfwarden.agents import integrator
from perfwarden.agents.base import BankedChange, Proposal
from perfwarden.formats.records import Mechanism
from perfwarden.orchestrator import study
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import BASE, SyntheticLab

STEPS: list[dict[str, Any]] = [{"max_batch_size": 16, "prompt_lookup": True},
                               {"max_batch_size": 8, "prompt_lookup": False}]
"""That run's banked steps, in order."""

SURFACE = {(1, False): 1.0, (16, True): 2.6, (8, False): 3.39, (16, False): 3.0, (8, True): 2.4}
"""Throughput factor over the true baseline by (max_batch_size, prompt_lookup): prompt lookup helps a small
batch and costs a large one (its drafts take batch slots), as on the embedded target."""


def _surface(config: dict[str, Any]) -> float:
    return SURFACE.get((config["max_batch_size"], bool(config["prompt_lookup"])), 1.0)


def _scripted_steps(state: dict[str, Any], ctx: Any, run: Path, base: dict[str, Any], best: dict[str, Any],
                    room: int) -> list[Proposal]:
    """The study's next step is that run's next step (then the search has converged)."""
    done = len(state.get("proposals", []))
    if done >= len(STEPS) or room <= 0:
        return []
    change = STEPS[done]
    text = "+".join(f"{k}={v}" for k, v in sorted(change.items()))
    spec = "speculative_decoding" if change.get("prompt_lookup") else "baseline"
    return [Proposal(id=f"cfg-s{done}-{text}", kind="config", producer="config_tuner", config=dict(change),
                     against=dict(best), believed_class="B", mechanism=spec, reps=ctx.settings.reps)]


@pytest.mark.integration
def test_a_knob_turned_back_to_its_baseline_value_is_not_part_of_the_bundle(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "next_proposals", _scripted_steps)
    run = tmp_path / "run"
    state = run_graph(run, RunSettings(target="synthetic", kernels=False), SyntheticLab(surface=_surface))
    first, second = (f"cfg-s0-max_batch_size=16+prompt_lookup=True", f"cfg-s1-max_batch_size=8+prompt_lookup=False")
    assert [b.name for b in state["banked"]] == [first, second]
    bundle = next(v for v in state["verdicts"] if v.scope == "bundle")
    claim = json.loads((run / bundle.claim).read_text())
    # The net change: only max_batch_size differs from the true baseline; prompt_lookup is back at False.
    assert claim["lever"]["config_keys"] == ["max_batch_size"]
    assert claim["mechanism"]["name"] != "speculative_decoding"
    assert claim["lever"]["components"] == [second]
    assert "NOT_ENGAGED" not in bundle.codes() and bundle.verdict == "PASS", bundle.findings
    info = json.loads((run / "legs" / "bundle" / "server_info.json").read_text())
    assert (info["max_batch_size"], info["prompt_lookup"]) == (8, False)
    report = json.loads((run / "report.json").read_text())
    assert [(k["knob"], k["baseline"], k["final"]) for k in report["final_configuration"]] == [("max_batch_size", 1, 8)]
    marks = {b["name"]: b["superseded_by"] for b in report["banked"]}
    assert marks == {first: second, second: None}
    md = (run / "report.md").read_text()
    assert "prompt_lookup" not in md.split("Final configuration:")[1].split("## Search path")[0]
    assert f"superseded by {second}" in md


def _banked(name: str, config: dict[str, Any], mechanism: str = "baseline") -> BankedChange:
    return BankedChange(name=name, kind="config", lever_class="B", config=config, verdict=f"verdicts/{name}.json",
                        claim=f"claims/{name}.json", mechanism=Mechanism(name=mechanism, variant="prompt_lookup"
                                                                        if mechanism != "baseline" else None))


def test_the_net_change_drops_knobs_at_their_baseline_value_and_keeps_what_survives():
    base = dict(BASE)
    spec = _banked("a", {"max_batch_size": 16, "prompt_lookup": True}, "speculative_decoding")
    back = _banked("b", {"max_batch_size": 8, "prompt_lookup": False})
    assert integrator.net_changes([spec, back], base) == {"max_batch_size": 8}
    assert integrator.superseded_by([spec, back], base) == {"a": "b", "b": None}
    claim = integrator.bundle_claim([spec, back], base, "bundle-base", "bundle", "bundle-test04", {}, None)
    assert claim.lever.components == ["b"] and claim.lever.config_keys == ["max_batch_size"]
    assert claim.mechanism.name == "baseline"
    # A later step that leaves prompt lookup on keeps the first step (and its mechanism) in the bundle.
    bigger = _banked("c", {"max_batch_size": 32})
    assert integrator.net_changes([spec, bigger], base) == {"max_batch_size": 32, "prompt_lookup": True}
    assert integrator.superseded_by([spec, bigger], base) == {"a": None, "c": None}
    kept = integrator.bundle_claim([spec, bigger], base, "bundle-base", "bundle", "bundle-test04", {}, None)
    assert kept.mechanism.name == "speculative_decoding" and kept.lever.components == ["a", "c"]
    # A step whose only knob a later step set back to the baseline leaves nothing: the bundle is the baseline.
    undo = _banked("d", {"max_batch_size": 1, "prompt_lookup": False})
    assert integrator.net_changes([spec, undo], base) == {}
    assert integrator.superseded_by([spec, undo], base) == {"a": "d", "d": None}


# ------------------------------------------------------------------ the number banked is the conservative one


@pytest.mark.integration
def test_a_step_measured_against_a_handicapped_baseline_banks_the_twin_figure(tmp_path):
    """The step's baseline leg is 18% slow (how it was measured, not its configuration); the run's
    baseline and A/A legs ran the same configuration: the step banks its delta against them, and the
    report says why."""
    lab = SyntheticLab(handicap={"-a0-base": 0.82})
    state = run_graph(tmp_path / "run", RunSettings(target="synthetic", levers=["max_batch_size=4"], kernels=False,
                                                    sampler="coordinate"), lab)
    (step,) = [b for b in state["banked"] if b.name == "cfg-max_batch_size=4"]
    verdict = next(v for v in state["verdicts"] if v.lever == step.name)
    assert "UNREPRESENTATIVE_BASELINE" in verdict.codes() and verdict.actions == ["downgrade_headline"]
    assert step.headline_rederived_pct == pytest.approx(60.0, abs=4.0)  # not the +95% against the slow leg
    assert verdict.headline_note and "same-config" in verdict.headline_note
    md = (tmp_path / "run" / "report.md").read_text()
    assert "the figure banked is the conservative one" in md
    # What each verdict checked, per leg (the synthetic target writes no LoadGen logs: the report says 0/3).
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    held = {w["leg"]: w for v in report["verdicts"] if v["path"] == step.verdict for w in v["witnesses"]}
    assert set(held) == {"cfg-max_batch_size-4-a0-base", "cfg-max_batch_size-4-a0-cand"}
    # The sequential rule may take more looks than the first (3, 5, 7 reps): both legs take each look.
    reps = {w["reps"] for w in held.values()}
    assert len(reps) == 1 and min(reps) >= 3, held
    assert all(w["loadgen_logs"] == 0 and w["sealed"] for w in held.values())
    assert "### What each verdict checked" in md and f"| cfg-max_batch_size-4-a0-base | LoadGen logs 0/{min(reps)} ·" in md


@pytest.mark.integration
def test_a_latency_trade_off_beside_a_handicapped_baseline_is_disclosed_before_it_banks(tmp_path):
    """batch_wait_ms trades TTFT for throughput. Against a handicapped baseline the verdict asks both to
    downgrade the headline and to disclose the trade-off; it banks only once the resubmitted claim
    discloses it, and at the twin figure."""
    lab = SyntheticLab(handicap={"-a0-base": 0.82})
    state = run_graph(tmp_path / "run", RunSettings(target="synthetic", levers=["batch_wait_ms=40"], kernels=False,
                                                    sampler="coordinate"), lab)
    trail = [v for v in state["verdicts"] if v.proposal == "cfg-batch_wait_ms=40.0"]
    assert trail[0].actions == ["downgrade_headline", "flag"] and "HIDDEN_LATENCY_REGRESSION" in trail[0].codes()
    (step,) = [b for b in state["banked"] if b.name == "cfg-batch_wait_ms=40.0"]
    assert step.verdict == trail[-1].path and len(trail) == 2 and trail[-1].actions == ["downgrade_headline"]
    assert step.disclosed_regressions["median_ttft_ms"] == pytest.approx(150.0, abs=5.0)
    assert step.headline_rederived_pct == pytest.approx(10.0, abs=3.0)


# ------------------------------------------------------------------------ codes and lines that read right


def _regressing_wait() -> SyntheticLab:
    """batch_wait_ms=40 costs throughput (x0.85) and first tokens (x2.5): a regression with a trade-off."""
    return SyntheticLab(effects={"batch_wait_ms": {"tput": 0.85, "ttft": 2.5}})


@pytest.mark.integration
def test_a_refused_regression_is_not_resubmitted_to_disclose_its_latency(tmp_path):
    """DELTA_REGRESSION (FAIL eject) beside HIDDEN_LATENCY_REGRESSION (FLAG): a disclosure cannot change a
    verdict the raw already refused, so the step ends after one audit."""
    state = run_graph(tmp_path / "run", RunSettings(target="synthetic", levers=["batch_wait_ms=40"], kernels=False,
                                                    sampler="coordinate"), _regressing_wait())
    trail = [v for v in state["verdicts"] if v.proposal == "cfg-batch_wait_ms=40.0"]
    assert len(trail) == 1 and trail[0].verdict == "FAIL"
    assert {"DELTA_REGRESSION", "HIDDEN_LATENCY_REGRESSION"} <= trail[0].codes()
    assert "DELTA_NOT_SIGNIFICANT" not in trail[0].codes()
    (rejected,) = [r for r in state["rejected"] if r.name == "cfg-batch_wait_ms=40.0"]
    # Either the sequential rule ended the step (futile) or the resubmission was judged futile: never resubmitted.
    assert "cannot change the verdict" in rejected.reason or "ended the step without a win" in rejected.reason


@pytest.mark.integration
def test_the_terminal_shows_one_line_per_step_with_its_audits(tmp_path):
    """A step disclosed and resubmitted on the same legs is audited twice: one line, its last verdict,
    '[2 audits]'; a step audited once has no count."""
    import io
    import re

    from rich.console import Console

    from perfwarden.cli.run import TerminalWatcher

    console = Console(file=io.StringIO(), width=250)
    run_graph(tmp_path / "run", RunSettings(target="synthetic", levers=["batch_wait_ms=40", "max_batch_size=4"],
                                            kernels=False, sampler="coordinate"),
              SyntheticLab(), watcher=TerminalWatcher(console, started=0.0))
    out = console.file.getvalue()
    wait = [line for line in out.splitlines() if re.search(r"\] patch\s+cfg-batch_wait_ms=40.0", line)]
    batch = [line for line in out.splitlines() if re.search(r"\] patch\s+cfg-max_batch_size=4", line)]
    assert len(wait) == 1 and "[2 audits]" in wait[0] and " PASS " in wait[0], out
    assert len(batch) == 1 and "audits]" not in batch[0], out
    assert re.search(r"\] bundle", out), out
