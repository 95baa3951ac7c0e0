"""The coherent-forgery explorer (issue 27 §5): forgeries made from the evidence model, its oracle reading the
model, and the runner (seal made again, blind audit, fixtures with answers first)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from perfwarden.auditor.audit import audit_path
from perfwarden.auditor.model.schema import evidence_model
from perfwarden.verify import forgery, forgery_more, forgery_oracle, forgery_run

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "proof" / "fixtures" / "seal-rec-clean"


@pytest.fixture(scope="module")
def plan() -> list[forgery.Forgery]:
    claim = json.loads((BASE / "run" / "claims" / "001-patch.json").read_text())
    return forgery.plan(forgery.view(BASE / "run", claim), forgery_more.FAMILIES)


def test_the_plan_covers_ten_thousand_forgeries_over_thirteen_record_types(plan):
    assert len(plan) >= 10_000 and len({f.name for f in plan}) == len(plan)
    records = {r for f in plan for r in f.records} | {"seal_entry"}  # every forgery is sealed again
    assert len(records) >= 13 and records <= set(evidence_model().records)
    families = Counter(f.family for f in plan)
    assert set(families) == {"witnesses", "statements", "records", "downgrades"}


def test_every_witness_group_names_relations_the_model_lists():
    listed = {w.id for w in evidence_model().witnesses}
    for groups in (forgery.TIME_RELATIONS, forgery.TOKEN_RELATIONS, forgery_more.REQUEST_RELATIONS):
        assert {r for rels in groups.values() for r in rels} <= listed
    with pytest.raises(ValueError, match="does not list"):
        forgery_oracle.witnesses_left(frozenset({"x"}), frozenset(), {"x": ("no_such_relation",)})


def test_the_oracle_reads_roles_from_the_model():
    assert forgery_oracle.statement("model", 3, 2, False).outcome == "refuse"       # copies disagree
    assert forgery_oracle.statement("model", 3, 3, True).outcome == "refuse"        # an identity, even declared
    assert forgery_oracle.statement("max_batch_size", 3, 3, True).outcome == "consistent"
    assert forgery_oracle.statement("max_batch_size", 3, 3, False).outcome == "refuse"
    assert forgery_oracle.statement("process.pid", 3, 1, False).outcome == "consistent"  # bookkeeping
    assert forgery_oracle.statement("internal_states", 3, 1, False).outcome == "consistent"  # a measurement


def _audited(tmp_path: Path, f: forgery.Forgery):
    run, key = tmp_path / "run", tmp_path / "seal.key"
    forgery.apply(BASE / "run", run, f)
    forgery_run._seal(BASE, run, key, f)
    return audit_path(run, run / "claims" / "001-patch.json", key=key)


def _one(plan, prefix: str) -> forgery.Forgery:
    return next(f for f in plan if f.name.startswith(prefix))


@pytest.mark.slow
@pytest.mark.parametrize("prefix", [
    "time:base:reps=0:x1.25:moved=arrays+detail+summary+wall",  # the samples' clock left
    "tokens:base+mbs4:reps=1:x0.875:moved=detail+summary",      # the server's running totals left
    "requests:base+mbs4:reps=1,2:drop1:moved=counters+detail",   # LoadGen's summary left
    "statement:mbs4:model=", "records:move:base:1:mbs4", "downgrade:strip:mbs4:issue_delays",
    "settings:min_query_count=9:logs=False", "claim:declares-identity:model",
    "downgrade:strip:base:server_info"])
def test_a_forgery_that_leaves_a_witness_is_refused_on_sealed_evidence(tmp_path, plan, prefix):
    f = _one(plan, prefix)
    assert f.expected.outcome == "refuse"
    verdict = _audited(tmp_path, f)
    assert verdict.seal == "sealed" and verdict.verdict != "PASS", [x.message for x in verdict.findings][:3]


@pytest.mark.slow
def test_a_forgery_that_moves_every_witness_the_model_names_is_consistent(tmp_path, plan):
    """The limit the seal states: a forger who writes every record consistently and seals it is not caught
    (README, "Sealed evidence"); the oracle says so, and the auditor indeed passes it."""
    f = _one(plan, "time:base:reps=0:x1.1:moved=arrays+detail+samples+summary+wall")
    assert f.expected.outcome == "consistent"
    assert _audited(tmp_path, f).verdict == "PASS"


def test_a_success_becomes_a_fixture_whose_answer_is_written_first(tmp_path, plan):
    f = _one(plan, "settings:min_query_count=9:logs=False")
    report = forgery_run.ForgeryReport(successes=[forgery_run.ForgeryOutcome(
        "seal-rec-clean", f.name, f.family, list(f.records), f.expected.why, "PASS", [])])
    forgery_run.write_fixtures(report, {"seal-rec-clean": BASE}, tmp_path)
    (fixture,) = list(tmp_path.iterdir())
    key = json.loads((fixture / "answer_key.json").read_text())
    assert fixture.name.startswith("forge-statements-settings-") and key["answers"][0]["verdict"] == ["FLAG", "FAIL"]
    assert (fixture / "answer_key.json").stat().st_ctime_ns <= (fixture / "run" / "claims").stat().st_ctime_ns
    assert (fixture / "seal.key").is_file() and report.successes[0].fixture == fixture.name
