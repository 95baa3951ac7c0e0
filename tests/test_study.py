"""Issue 20 §1: the config-tuner's search as an Optuna study in the run's SQLite (tests/test_search.py: coordinate descent)."""

from __future__ import annotations

import json
import sqlite3

import optuna
import pytest
from optuna.trial import TrialState

from perfwarden.agents import search
from perfwarden.agents.base import Proposal
from perfwarden.formats.verdict_summary import FindingSummary, VerdictSummary
from perfwarden.harness.target_config import EmbeddedConfig, SGLangConfig
from perfwarden.orchestrator.review.search_plot import clean_rows, history_svg
from perfwarden.orchestrator.runner import checkpoint_path, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab


def settings(**kw) -> RunSettings:
    return RunSettings(target="synthetic", kernels=False, **kw)


def test_default_space_is_lossless_and_takes_ngram_spec_decoding():
    embedded = search.default_knobs(EmbeddedConfig)
    assert {"max_batch_size", "attn_implementation", "prompt_lookup"} <= set(embedded)
    assert not set(embedded) & {"response_cache", "quantization", "dtype", "weights", "threads"}
    sglang = search.default_knobs(SGLangConfig)
    assert "speculative_algorithm" in sglang
    assert not set(sglang) & {"kv_cache_dtype", "quantization", "dtype"}
    for knob in embedded + sglang:
        model = EmbeddedConfig if knob in embedded else SGLangConfig
        assert model.spec(knob).lossless


def test_space_keeps_the_baseline_value_and_round_trips_params():
    space = search.study_space(EmbeddedConfig, {"max_batch_size": (2, 8), "prompt_lookup": (True,)},
                               {"max_batch_size": 1, "prompt_lookup": False})
    assert space == {"max_batch_size": (1, 2, 8), "prompt_lookup": (True, False)}
    config = {"max_batch_size": 8, "prompt_lookup": True}
    assert search.decode(EmbeddedConfig, space, search.encode(EmbeddedConfig, space, config)) == config


def test_history_plot_draws_numbers_only():
    rows = clean_rows([{"value": 1.2, "feasible": True, "best": 1.2}, {"value": "<script>", "feasible": False,
                                                                       "best": 1.2},
                       {"value": None, "feasible": False, "best": 1.2}, "junk", {"value": 1e400, "best": 1}])
    assert rows == [(1.2, True, 1.2), (None, False, 1.2)]
    svg = history_svg(rows)
    assert svg.startswith("<svg") and "script" not in svg and svg.count("<circle") == 1


@pytest.mark.slow
def test_default_run_is_a_study_stored_beside_the_checkpoint(tmp_path):
    run = tmp_path / "run"
    state = run_graph(run, settings(max_proposals=5), SyntheticLab())
    tables = {r[0] for r in sqlite3.connect(checkpoint_path(run)).execute("select name from sqlite_master")}
    assert {"checkpoints", "trials", "studies"} <= tables  # one SQLite: LangGraph's tables and the study's
    study = optuna.load_study(study_name=search.STUDY_NAME, storage=search.storage_url(run))
    trials = {t.number: t for t in study.get_trials()}
    assert set(trials[0].distributions) >= {"max_batch_size", "attn_implementation", "prompt_lookup"}
    proposals = [p for p in state["proposals"] if p.trial is not None]
    assert proposals and all(not t.state == TrialState.RUNNING for t in trials.values())
    banked = {b.name for b in state["banked"]}
    for p in proposals:
        last = [v for v in state["verdicts"] if v.proposal == p.id][-1]
        feasible = trials[p.trial].system_attrs.get(f"constraints:{search.CONSTRAINT_KEY}") == search.FEASIBLE
        assert feasible == (p.id in banked)
        assert (p.id in banked) <= (last.verdict == "PASS")  # only an audited PASS becomes the best
    report = json.loads((run / "report.json").read_text())
    assert len(report["search_history"]) == len(proposals)
    assert "<svg" in (run / "report.md").read_text()


@pytest.mark.slow
def test_a_resumed_run_continues_the_study_to_the_uninterrupted_result(tmp_path):
    whole = run_graph(tmp_path / "whole", settings(max_proposals=4), SyntheticLab())
    with pytest.raises(KeyboardInterrupt):
        run_graph(tmp_path / "cut", settings(max_proposals=4), SyntheticLab(crash_after=14))
    resumed = run_graph(tmp_path / "cut", settings(), SyntheticLab(), resume=True)
    assert [(p.id, p.status) for p in resumed["proposals"]] == [(p.id, p.status) for p in whole["proposals"]]
    study = optuna.load_study(study_name=search.STUDY_NAME, storage=search.storage_url(tmp_path / "cut"))
    assert not [t for t in study.get_trials() if t.state == TrialState.RUNNING]


@pytest.mark.slow
def test_a_batch_step_passed_against_an_older_best_is_not_banked(tmp_path):
    state = run_graph(tmp_path / "run", settings(max_proposals=4, study_batch=2), SyntheticLab())
    superseded = [r for r in state["rejected"] if r.reason.startswith("superseded")]
    assert superseded, [(r.name, r.reason) for r in state["rejected"]]
    banked = {b.name for b in state["banked"]}
    for b in state["banked"]:
        assert b.against == search_best_before(state, b.name)
    assert not {r.name for r in superseded} & banked


def search_best_before(state, name: str) -> dict:
    """The best configuration just before ``name`` was banked: every earlier banked change applied."""
    out: dict = {}
    for b in state["banked"]:
        if b.name == name:
            return out
        out = {**out, **b.config}
    raise AssertionError(name)


def test_the_grid_baseline_visits_every_configuration_once_then_converges():
    space = search.study_space(EmbeddedConfig, {"max_batch_size": (2, 8), "prompt_lookup": (True,)},
                               {"max_batch_size": 1, "prompt_lookup": False})
    study = optuna.create_study(direction="maximize")
    current = {"max_batch_size": 1, "prompt_lookup": False}
    seen = []
    for _ in range(8):
        asked = search.ask(study, EmbeddedConfig, space, current, 1.0, set(), {}, "grid", seed=3)
        if asked is None:
            break
        seen.append(repr(sorted(asked.config.items())))
        study.tell(asked.number, 1.0)
    assert len(seen) == 5 and len(set(seen)) == 5  # 3 x 2 grid less the current best, each once
    again = optuna.create_study(direction="maximize")
    first = search.ask(again, EmbeddedConfig, space, current, 1.0, set(), {}, "grid", seed=3)
    assert first is not None and repr(sorted(first.config.items())) == seen[0]  # seeded: a resume redraws it


def test_the_random_baseline_draws_uniformly_where_tpe_exploits():
    """Told that one value is far better, TPE keeps drawing it; the random baseline does not."""
    space = search.study_space(EmbeddedConfig, {"max_batch_size": (2, 4, 8, 16)}, {"max_batch_size": 1})
    share = {}
    for sampler in ("tpe", "random"):
        study = optuna.create_study(direction="maximize")
        drawn = []
        for _ in range(80):
            asked = search.ask(study, EmbeddedConfig, space, {"max_batch_size": 1}, 1.0, set(), {}, sampler, seed=0,
                               n_startup=2)
            assert asked is not None
            drawn.append(asked.config["max_batch_size"])
            study.tell(asked.number, 10.0 if drawn[-1] == 16 else 1.0)
        share[sampler] = drawn.count(16) / len(drawn)
        assert set(drawn) == {2, 4, 8, 16}
    assert share["tpe"] > 0.5 > 0.4 > share["random"], share  # uniform: 1/4 expected


def _rejected_step(rederived: float | None, claimed: float | None, codes: list[str]):
    step = Proposal(id="cfg-t3", kind="config", producer="config-tuner", config={"max_batch_size": 16}, status="rejected")
    verdict = VerdictSummary(seq=4, scope="patch", verdict="FAIL", action="eject", path="verdicts/004-patch.json",
                             claim="claims/004-patch.json", proposal="cfg-t3", headline_metric="request_goodput",
                             headline_claimed=claimed, headline_rederived=rederived,
                             findings=[FindingSummary(code=c, severity="FAIL", message=c) for c in codes])
    return step, [verdict]


def test_a_regression_the_auditor_could_not_size_is_told_as_its_measured_value_not_as_a_failed_trial():
    """A step whose goodput fell to zero (every request outside the SLO): the auditor finds DELTA_REGRESSION but
    re-derives no ratio. The study must learn it as the worst value (0 x the factor), or TPE, which learns
    nothing from a failed trial, keeps drawing configurations that break the SLO."""
    step, verdicts = _rejected_step(None, -100.0, ["DELTA_REGRESSION"])
    assert search.trial_outcome(step, verdicts, 1.5) == (0.0, search.INFEASIBLE)
    # without a regression found (the audit could not judge the step at all), nothing is told but a failure
    step, verdicts = _rejected_step(None, -100.0, ["EVIDENCE_MISSING"])
    assert search.trial_outcome(step, verdicts, 1.5) == (None, search.INFEASIBLE)
    # a re-derived figure always wins over the producer's own
    step, verdicts = _rejected_step(-20.0, -100.0, ["DELTA_REGRESSION"])
    assert search.trial_outcome(step, verdicts, 1.5) == (pytest.approx(1.2), search.INFEASIBLE)
