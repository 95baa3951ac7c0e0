"""One banking rule (issue 19): the graph's patch step, the bundle audit and the review agree on what every
verdict x action banks, and the review of a run shows what the run banked.

A FLAG banks only when every action its deciding findings ask for banks, so no combination of findings
launders one of them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import pytest

from perfwarden.agents.base import FixDecision, Proposal
from perfwarden.auditor import audit, banking
from perfwarden.formats.records import Action, Verdict, VerdictLabel
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.orchestrator import graph
from perfwarden.orchestrator.paths import default_fixture_roots
from perfwarden.orchestrator.review.model import VerdictEntry, is_banked, load_review
from perfwarden.orchestrator.review.summary import banked
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

PAIRS = [(v, a) for v in get_args(VerdictLabel) for a in get_args(Action)]
CLEAN = default_fixture_roots()[0] / "syn-clean-patch-win" / "run"
LEVER = "cfg-max_batch_size=8"


class _Brains:
    """The producer's fix policy, for a verdict the rule does not bank: drop it (nothing banked)."""

    notes: list[str] = []
    fallbacks: dict[str, str] = {}

    def fix(self, proposal, verdict, max_reps):
        return FixDecision(action="drop", reason="the banking test drops what does not bank")


def asked(verdict: str, actions: str | list[str]) -> list[str]:
    """What the auditor writes as a verdict's ``actions``: the deciding findings' (none for a PASS)."""
    return [] if verdict == "PASS" else ([actions] if isinstance(actions, str) else list(actions))


def graph_banks(run: Path, verdict: str, action: str | list[str], seal: str) -> bool:
    """What the graph's patch step (the ``fix`` node, undecorated) banks for this verdict."""
    actions = asked(verdict, action)
    summary = VerdictSummary(seq=1, scope="patch", verdict=verdict, action=actions[0] if actions else "pass",
                             actions=actions, path="verdicts/001-patch.json", claim="claims/001-patch.json",
                             lever=LEVER, proposal=LEVER, seal=seal)
    proposal = Proposal(id=LEVER, kind="config", producer="config_tuner", config={"max_batch_size": 8})
    state = {"run_dir": str(run), "current": LEVER, "proposals": [proposal], "last_verdict": summary}
    runtime = SimpleNamespace(context=SimpleNamespace(settings=RunSettings(), brains=_Brains()))
    update = graph.fix.__wrapped__(state, runtime)
    return bool(update.get("banked"))


def bundle_keeps(run: Path, monkeypatch, verdict: str, action: str | list[str]) -> bool:
    """Whether the bundle audit accepts the patch claim as a component when it is audited again to this
    verdict (the audit itself is stubbed: no fixture answers every verdict x action pair)."""
    claim, _ = audit.load_claim(run / "claims" / "001-patch.json", root=run)
    actions = asked(verdict, action)
    answer = Verdict(scope="patch", claim="claims/001-patch.json", claim_seq=1, verdict=verdict,
                     action=actions[0] if actions else "pass", actions=actions, seal="sealed")
    monkeypatch.setattr(audit, "audit_path", lambda *a, **k: answer)
    return claim.lever.name in audit.accepted_changes(run, [claim.lever.name])


def review_banks(verdict: str, action: str | list[str], seal: str) -> bool:
    actions = asked(verdict, action)
    v = Verdict(scope="patch", claim="claims/001-patch.json", claim_seq=1, verdict=verdict,
                action=actions[0] if actions else "pass", actions=actions, seal=seal)
    return is_banked(VerdictEntry(v, "verdicts/001-patch.json"))


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("banking") / "run"
    shutil.copytree(CLEAN, run)
    return run


@pytest.mark.parametrize("verdict,action", PAIRS)
def test_graph_bundle_and_review_agree_on_every_verdict_and_action(verdict, action, clean_run, monkeypatch):
    rule = banking.banks(verdict, action, "sealed")
    assert graph_banks(clean_run, verdict, action, "sealed") is rule
    assert bundle_keeps(clean_run, monkeypatch, verdict, action) is rule
    assert review_banks(verdict, action, "sealed") is rule
    # Unsealed evidence banks nothing, in the graph and the review alike (the bundle audit judges its
    # components on the bundle's own run, sealed or not: it asks ``kept_as``, which is the same rule).
    assert graph_banks(clean_run, verdict, action, "unsealed") is False
    assert review_banks(verdict, action, "unsealed") is False


COMBINED = [["downgrade_headline", "flag"], ["remeasure", "downgrade_headline"],
            ["replace_headline_with_e2e", "downgrade_headline"], ["downgrade_headline", "downgrade_headline"]]


@pytest.mark.parametrize("actions", COMBINED)
def test_a_flag_banks_only_when_every_deciding_finding_asks_what_banks(actions, clean_run, monkeypatch):
    """No combination of findings launders one: a downgraded headline beside an undisclosed latency
    trade-off (``flag``), a re-measure or an e2e headline swap banks nowhere -- graph, bundle or review."""
    rule = all(a == "downgrade_headline" for a in actions)
    assert banking.banks("FLAG", actions, "sealed") is rule
    assert graph_banks(clean_run, "FLAG", actions, "sealed") is rule
    assert bundle_keeps(clean_run, monkeypatch, "FLAG", actions) is rule
    assert review_banks("FLAG", actions, "sealed") is rule


def test_a_verdict_file_is_judged_by_its_findings_too():
    """A verdict written before ``actions`` existed states its one most decisive action; the review reads
    every deciding finding's action as well, so ``downgrade_headline`` cannot hide a ``flag``."""
    from perfwarden.formats.records import Finding

    findings = [Finding(code="UNREPRESENTATIVE_BASELINE", severity="FLAG", message="m", action="downgrade_headline"),
                Finding(code="HIDDEN_LATENCY_REGRESSION", severity="FLAG", message="m", action="flag")]
    old = Verdict(scope="patch", claim="claims/001-patch.json", claim_seq=1, verdict="FLAG",
                  action="downgrade_headline", findings=findings, seal="sealed")
    assert banking.verdict_actions(old) == ["downgrade_headline", "flag"]
    assert not is_banked(VerdictEntry(old, "verdicts/001-patch.json"))
    alone = old.model_copy(update={"findings": findings[:1]})
    assert is_banked(VerdictEntry(alone, "verdicts/001-patch.json"))
    # A verdict file edited to drop the ask from ``actions`` keeps the ask its findings still make.
    edited = old.model_copy(update={"actions": ["downgrade_headline"]})
    assert banking.verdict_actions(edited) == ["downgrade_headline", "flag"]
    assert not is_banked(VerdictEntry(edited, "verdicts/001-patch.json"))


def test_the_rule_fails_closed():
    """What banks, named: a PASS, and a FLAG downgraded to the auditor's own class and headline."""
    banking_pairs = {(v, a) for v, a in PAIRS if banking.banks(v, a, "sealed")}
    assert banking_pairs == {("PASS", a) for a in get_args(Action)} | {("FLAG", "downgrade_headline")}
    assert banking.banked_as("FLAG", "downgrade_headline", "sealed") == "downgraded"
    assert banking.banked_as("FLAG", "replace_headline_with_e2e", "sealed") is None


@pytest.mark.slow
def test_the_review_of_a_run_shows_what_the_run_banked(tmp_path):
    """A synthetic run banks one step and its bundle; the review lists exactly those, backed by their
    verdicts, and no verdict the run did not bank."""
    state = run_graph(tmp_path / "run", RunSettings(target="synthetic", levers=["max_batch_size=8"], kernels=False),
                      SyntheticLab())
    run_banked = {b.verdict for b in state["banked"]}
    assert run_banked, "the synthetic lever must bank for this test to mean anything"
    review = load_review(tmp_path / "run")
    shown = banked(review)
    assert shown.source == "report.json" and not shown.unreported
    assert all(item.problem is None and item.entry is not None for item in shown.items)
    patch_paths = {item.entry.path for item in shown.items if item.entry.scope == "patch"}
    assert patch_paths == run_banked
