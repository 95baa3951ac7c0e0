"""What accepts a verdict of each scope (auditor/acceptance.py), recorded once and read by the graph and the report.

The rule table first, then the ways a verdict could slip past it (fail closed), then what the graph and the
report do with the recorded decision.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from langgraph.runtime import Runtime
from pydantic import ValidationError

from perfwarden.agents.base import Proposal
from perfwarden.auditor import acceptance
from perfwarden.formats.records import Action
from perfwarden.formats.verdict_summary import Acceptance, FindingSummary, VerdictSummary
from perfwarden.harness.labs.lab import LegPlan
from perfwarden.orchestrator import graph as G
from perfwarden.orchestrator.checkpoint_serde import CheckpointTypeError, check_state
from perfwarden.orchestrator.review.model import load_review
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab
from perfwarden.orchestrator.state import RunContext, RunState


def summary(scope: str, label: str, *found: tuple[str, str, Action | None], seal: str = "sealed",
            actions: list[Action] | None = None) -> VerdictSummary:
    """A verdict summary with findings given as (code, severity, action); ``actions`` defaults to what they ask."""
    findings = [FindingSummary(code=c, severity=s, message="m", action=a) for c, s, a in found]
    asked = acceptance.asked(VerdictSummary(seq=1, scope=scope, verdict=label, action="pass", path="verdicts/001.json",
                                            claim="claims/001.json", findings=findings))
    return VerdictSummary(seq=1, scope=scope, verdict=label, action=asked[0] if asked else "pass",
                          actions=asked if actions is None else actions, path=f"verdicts/001-{scope}.json",
                          claim=f"claims/001-{scope}.json", findings=findings, seal=seal)


def basis(v: VerdictSummary, remeasure_left: bool = False) -> str:
    decision = acceptance.decide(v, remeasure_left=remeasure_left)
    assert decision.accepted == (decision.basis in ("pass", "performance_only", "noise_only", "downgraded",
                                                    "flag_only"))
    return decision.basis


NOISY = ("NOISY_BASELINE", "FLAG", "remeasure")
RANDOM_WEIGHTS = ("CORRECTNESS_UNVERIFIABLE", "FLAG", "flag")
CONTENDED = ("CONTENDED_LEG", "FLAG", "remeasure")


# ------------------------------------------------------------------------------------------ the rule


def test_a_baseline_is_accepted_on_a_pass_on_speed_only_codes_and_on_noise_once_no_remeasure_is_left():
    assert basis(summary("baseline", "PASS")) == "pass"
    assert basis(summary("baseline", "FLAG", RANDOM_WEIGHTS), remeasure_left=True) == "performance_only"
    assert basis(summary("baseline", "FLAG", NOISY), remeasure_left=True) == "remeasure"
    assert basis(summary("baseline", "FLAG", NOISY), remeasure_left=False) == "noise_only"
    assert basis(summary("baseline", "FLAG", CONTENDED), remeasure_left=True) == "remeasure"
    assert basis(summary("baseline", "FLAG", CONTENDED), remeasure_left=False) == "refused"


@pytest.mark.parametrize("found", [
    (NOISY, CONTENDED),  # noise beside another finding is not the machine's noise alone
    (RANDOM_WEIGHTS, CONTENDED),
    (RANDOM_WEIGHTS, NOISY),  # each alone is accepted; together neither rule covers the baseline
    (("NOISY_BASELINE", "FAIL", "remeasure"),),  # a FAIL is never noise only
    (("CORRECTNESS_UNVERIFIABLE", "FAIL", "eject"),),
    (),  # a FLAG with no finding to say why (a degraded audit) is no speed-only or noise-only FLAG
])
def test_near_misses_of_the_baseline_rules_are_refused_after_the_last_remeasure(found):
    label = "FAIL" if any(s == "FAIL" for _, s, _ in found) else "FLAG"
    assert basis(summary("baseline", label, *found), remeasure_left=False) == "refused"


def test_a_profile_is_accepted_only_on_a_pass():
    assert basis(summary("profile", "PASS")) == "pass"
    assert basis(summary("profile", "FLAG", ("PROFILE_MISATTRIBUTION", "FLAG", "flag"))) == "refused"


def test_a_harness_verdict_is_accepted_on_a_pass_or_a_flag_that_asks_only_to_flag():
    assert basis(summary("harness", "PASS")) == "pass"
    assert basis(summary("harness", "FLAG", ("HARNESS_UNSERVED_SHAPES", "FLAG", "flag"))) == "flag_only"
    assert basis(summary("harness", "FLAG", ("HARNESS_UNSERVED_SHAPES", "FLAG", "redo_harness"))) == "refused"
    assert basis(summary("harness", "FAIL", ("HARNESS_INCORRECT", "FAIL", "eject"))) == "refused"


def test_a_harness_fail_whose_finding_asks_only_to_flag_is_refused():
    """The graph's harness step read the one ``action``: a FAIL whose deciding finding asked ``flag`` sent a
    candidate that failed its op bench to the A/B. The label decides first."""
    assert basis(summary("harness", "FAIL", ("HARNESS_INCORRECT", "FAIL", "flag"))) == "refused"


def test_an_ask_dropped_from_the_actions_still_counts():
    """A summary whose ``actions`` lost the redo its finding asks for (an older record, an edited one)."""
    v = summary("harness", "FLAG", ("HARNESS_UNSERVED_SHAPES", "FLAG", "flag"), ("HARNESS_INCORRECT", "FLAG",
                                                                                "redo_harness"), actions=["flag"])
    assert basis(v) == "refused"
    patch = summary("patch", "FLAG", ("ORTHOGONAL_LEVER", "FLAG", "downgrade_headline"),
                    ("HIDDEN_LATENCY_REGRESSION", "FLAG", "flag"), actions=["downgrade_headline"])
    assert basis(patch) == "refused"


@pytest.mark.parametrize("scope", ["patch", "bundle"])
def test_a_patch_and_the_bundle_follow_the_banking_rule(scope):
    downgrade = ("ORTHOGONAL_LEVER", "FLAG", "downgrade_headline")
    assert basis(summary(scope, "PASS")) == "pass"
    assert basis(summary(scope, "PASS", seal="unsealed")) == "unsealed"
    assert basis(summary(scope, "FLAG", downgrade)) == "downgraded"
    assert basis(summary(scope, "FLAG", downgrade, seal="unsealed")) == "unsealed"
    assert basis(summary(scope, "FLAG", downgrade, ("HIDDEN_LATENCY_REGRESSION", "FLAG", "flag"))) == "refused"
    assert basis(summary(scope, "FLAG", ("IMPLAUSIBLE_SPEEDUP", "FLAG", "replace_headline_with_e2e"))) == "refused"
    assert basis(summary(scope, "FAIL", ("DELTA_REGRESSION", "FAIL", "eject"))) == "refused"


# ------------------------------------------------------------------------------------- fail closed


def test_a_code_outside_the_catalog_accepts_nothing_even_as_info():
    for scope in ("baseline", "profile", "harness", "patch", "bundle"):
        v = summary(scope, "PASS", ("TOTALLY_FINE", "INFO", None))
        assert basis(v) == "unknown_code", scope


def test_a_scope_without_a_rule_accepts_nothing():
    v = VerdictSummary.model_construct(**{**summary("patch", "PASS").__dict__, "scope": "mlperf"})
    assert basis(v) == "unknown_scope"


@pytest.mark.parametrize("label,found", [
    ("PASS", [("DELTA_REGRESSION", "FAIL", "eject")]),
    ("PASS", [("ORTHOGONAL_LEVER", "FLAG", "downgrade_headline")]),
    ("FLAG", [("ORTHOGONAL_LEVER", "FLAG", "downgrade_headline"), ("EVIDENCE_TAMPERED", "FAIL", "eject")]),
])
def test_a_label_kinder_than_its_own_findings_accepts_nothing(label, found):
    """A summary edited to a kinder label (and its actions with it) while its findings still say otherwise."""
    for scope in ("baseline", "harness", "patch", "bundle"):
        v = summary(scope, label, *found, actions=["downgrade_headline"] if label == "FLAG" else [])
        assert basis(v) == "inconsistent", (scope, label)


def test_a_decision_record_cannot_accept_on_a_refusing_basis():
    with pytest.raises(ValidationError, match="does not go with"):
        Acceptance(accepted=True, basis="refused", reason="r")
    with pytest.raises(ValidationError, match="does not go with"):
        Acceptance(accepted=False, basis="pass", reason="r")


def test_a_checkpoint_that_records_a_kinder_decision_than_the_rule_gives_is_refused():
    """The forged state: a FAILed patch recorded as accepted. Resuming it would bank the change."""
    failed = summary("patch", "FAIL", ("DELTA_REGRESSION", "FAIL", "eject"))
    forged = failed.model_copy(update={"acceptance": Acceptance(accepted=True, basis="pass", reason="trust me")})
    with pytest.raises(CheckpointTypeError, match="rule refuses it"):
        check_state({"last_verdict": forged, "verdicts": [forged]}, time.time())
    honest = failed.model_copy(update={"acceptance": acceptance.decide(failed, remeasure_left=False)})
    check_state({"last_verdict": honest, "verdicts": [honest]}, time.time())
    # a harsher record than the rule's (a baseline recorded for a re-measure) is no forgery
    noisy = summary("baseline", "FLAG", NOISY)
    pending = noisy.model_copy(update={"acceptance": acceptance.decide(noisy, remeasure_left=True)})
    check_state({"verdicts": [pending]}, time.time())


def test_a_trail_recorded_without_decisions_is_decided_from_what_it_shows():
    """Run state version 2: a baseline followed by another was measured again; the last one decided the run."""
    trail = [summary("baseline", "FLAG", NOISY), summary("baseline", "FLAG", NOISY), summary("patch", "PASS")]
    decided = acceptance.recorded_trail(trail)
    assert [v.acceptance.basis for v in decided] == ["remeasure", "noise_only", "pass"]
    kept = trail[2].model_copy(update={"acceptance": Acceptance(accepted=False, basis="refused", reason="recorded")})
    assert acceptance.recorded_trail([kept])[0].acceptance.basis == "refused"  # a recorded decision is read as is


# ------------------------------------------------------------------------------ the graph reads it


def settings(**kw) -> RunSettings:
    return RunSettings(target="synthetic", **kw)


def test_the_routers_follow_the_recorded_decision(tmp_path):
    runtime = Runtime(context=RunContext(lab=SyntheticLab(), settings=settings(kernels=False)))
    noisy = summary("baseline", "FLAG", NOISY)
    state = {"started_at": time.time(), "baseline_attempts": 1}

    def route(decision: Acceptance) -> str:
        return G.after_audit({**state, "last_verdict": noisy.model_copy(update={"acceptance": decision})}, runtime)

    assert route(acceptance.decide(noisy, remeasure_left=True)) == "baseline"
    assert route(acceptance.decide(noisy, remeasure_left=False)) == "pick"
    assert route(Acceptance(accepted=False, basis="refused", reason="r")) == "report"


def test_the_harness_step_drops_a_candidate_the_rule_refuses(tmp_path):
    runtime = Runtime(context=RunContext(lab=SyntheticLab(), settings=settings()))
    p = Proposal(id="krn-rmsnorm", kind="kernel", producer="kernel_extractor", op="rmsnorm",
                 candidates=["a.py:f", "b.py:g"], chosen="a.py:f", harness_attempts=1)
    failed = summary("harness", "FAIL", ("HARNESS_INCORRECT", "FAIL", "flag"))
    failed = failed.model_copy(update={"acceptance": acceptance.decide(failed, remeasure_left=False)})
    update = G.harness_result({"run_dir": str(tmp_path), "started_at": time.time(), "proposals": [p], "current": p.id,
                               "last_verdict": failed},
                              runtime)
    out = update["proposals"][0]
    assert out.status == "pending" and out.candidates == ["b.py:g"] and out.chosen is None


class RandomWeightsLab(SyntheticLab):
    """Every leg serves random weights (``weights=random``): a performance-only run."""

    def measure(self, run: Path, legs: list[LegPlan], reps: int) -> dict[str, str]:
        return super().measure(run, [p.model_copy(update={"config": p.config.model_copy(update={"weights": "random"})})
                                     for p in legs], reps)


@pytest.fixture(scope="module")
def random_weights_run(tmp_path_factory) -> tuple[RunState, Path]:
    """One synthetic run whose every leg served random weights, shared by the tests that read it."""
    root = tmp_path_factory.mktemp("random-weights")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFWARDEN_KEY_DIR", str(root / "keys"))
        state = run_graph(root / "run", settings(levers=["max_batch_size=4"], kernels=False), RandomWeightsLab(),
                          capture_logs=False)
    return state, root / "run"


@pytest.mark.integration
def test_a_random_weights_baseline_is_reported_as_accepted_for_speed_not_as_noise(random_weights_run):
    """The report guessed from counts: a baseline that was not a PASS while other verdicts followed was
    'the machine is noisier than the documented limit', and a budget note said no further baseline fitted.
    Neither is what happened: the baseline was accepted for speed only, and never re-measured."""
    state, run = random_weights_run
    baseline = next(v for v in state["verdicts"] if v.scope == "baseline")
    assert baseline.codes() == {"CORRECTNESS_UNVERIFIABLE"} and baseline.acceptance.basis == "performance_only"
    text = (run / "report.md").read_text()
    assert "accepted for speed only" in text
    assert "noisier than the documented limit" not in text and "no further baseline was measured" not in text
    report = json.loads((run / "report.json").read_text())
    assert [v["acceptance"]["basis"] for v in report["verdicts"]] == ["performance_only", "refused"]


@pytest.mark.integration
def test_the_review_shows_the_runs_decision_and_a_forged_one_as_not_the_auditors(random_weights_run, tmp_path):
    _, run = random_weights_run
    review = load_review(run)
    assert [(r.scope, r.decided) for r in review.summary.rows] == [("baseline", "accepted (performance_only)"),
                                                                   ("patch", "not accepted (refused)")]
    assert not [n for n in review.notes if "not the auditor's" in n]
    forged = tmp_path / "forged"
    shutil.copytree(run, forged)
    report = json.loads((forged / "report.json").read_text())
    patch = next(v for v in report["verdicts"] if v["scope"] == "patch")
    patch["acceptance"] = {"accepted": True, "basis": "pass", "reason": "trust me"}
    (forged / "report.json").write_text(json.dumps(report))
    notes = [n for n in load_review(forged).notes if "not the auditor's" in n]
    assert len(notes) == 1 and patch["path"] in notes[0] and "rule refuses it" in notes[0]
