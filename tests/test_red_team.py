"""The red-team producer: its families apply, the auditor holds against them, a planted weakness is
found and becomes a fixture, and the LLM brain works through the run's files only (scripted endpoint)."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.orchestrator.paths import default_fixture_roots
from perfwarden.redteam import red_team as rt
from perfwarden.verify.answer_key import load_answer_key

from scripted_llm import ScriptedLLM

FIXTURES = default_fixture_roots()[0]
CLEAN = FIXTURES / "syn-clean-patch-win"
RECORDED = FIXTURES / "rec-batching-undisclosed"


def test_at_least_thirty_families_each_one_function_with_a_rule():
    families = rt.load_families()
    assert len(families) >= 30
    assert all(f.rule and callable(f.apply) for f in families.values())
    assert sum(name.startswith("honest_") for name in families) >= 5  # near misses the auditor must PASS


@pytest.mark.parametrize("fixture", [CLEAN, RECORDED], ids=["synthetic", "recorded"])
def test_every_family_applies_and_says_what_the_auditor_must_answer(fixture, tmp_path):
    base = rt.load_base(fixture)
    applied = 0
    for name, fam in rt.load_families().items():
        dest = tmp_path / name / "run"
        shutil.copytree(base.run, dest, ignore=shutil.ignore_patterns("loadgen"))
        ctx = rt.AttackContext(dest, json.loads(json.dumps(base.claim)))
        exp = fam.apply(ctx, random.Random(f"t:{name}"))
        if exp is None:
            continue
        applied += 1
        assert exp.verdicts and set(exp.verdicts) <= {"PASS", "FLAG", "FAIL"} and exp.why
        assert (exp.kind == "honest") == (exp.verdicts == ("PASS",))
    assert applied >= 0.8 * len(rt.load_families())


def test_recorded_base_gets_a_truthful_disclosure_from_its_own_arithmetic():
    base = rt.load_base(RECORDED)
    disclosed = base.claim["headline"]["disclosed_regressions"]
    assert base.recorded and disclosed["p99_itl_ms"] > 50 and disclosed["median_tpot_ms"] > 50


@pytest.mark.integration
def test_the_auditor_holds_on_a_clean_and_a_recorded_base(tmp_path):
    report = rt.redteam([CLEAN, RECORDED], rounds=1, out=tmp_path, pairs=False)
    assert report.bases == [CLEAN.name, RECORDED.name] and not report.skipped_bases
    assert len(report.results) >= 80
    assert [(r.family, r.base, r.success) for r in report.successes] == []
    assert not list(tmp_path.iterdir())


def test_combining_takes_the_stricter_verdict_and_never_mixes_honest():
    fail = rt.Expectation.fail("A", why="a")
    refuse = rt.Expectation.refuse("B", why="b")
    both = rt.combine([fail, refuse])
    assert both.verdicts == ("FAIL",) and both.any_of == (("A", "B"),)
    assert rt.combine([fail, rt.Expectation.honest("h")]) is None


@pytest.mark.slow  # over 2 s on a 2-core machine: the full suite runs it
def test_a_planted_weakness_is_found_and_becomes_a_fixture(tmp_path, monkeypatch):
    """Blind the unknown-knob gates (a changed unknown knob; a key the target does not report): the
    unknown_knob_declared attack must then succeed, be written as a fixture whose answer is the attack's
    own, and the CLI must exit 1."""
    from perfwarden.auditor.findings import GateResult
    from perfwarden.auditor.gates import knobs, target_keys

    monkeypatch.setattr(knobs, "check_unknown_knobs", lambda *a, **k: GateResult(value=[]))
    monkeypatch.setattr(target_keys, "check_target_keys", lambda *a, **k: GateResult())
    monkeypatch.setattr(knobs, "lossy_reasons", lambda *a, **k: [])
    out = tmp_path / "found"
    result = CliRunner().invoke(app, ["redteam", str(CLEAN), "--families", "unknown_knob_declared", "--out",
                                      str(out), "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["successes"] >= 1 and data["success_list"][0]["why"] == "a fake win PASSed"
    fixture = out / data["success_list"][0]["fixture"]
    key = load_answer_key(fixture / "answer_key.json")
    assert key.answers[0].verdict == ["FLAG", "FAIL"] and key.answers[0].must_include_any == [["UNKNOWN_KNOB"]]
    monkeypatch.undo()
    from perfwarden.verify.backtest import run_backtest

    assert run_backtest([fixture]).agreement == 1.0  # the fixed auditor agrees with the attack's answer


def test_cli_reports_and_refuses_bad_input(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["redteam", str(CLEAN), "--families", "second_knob,honest_eval", "--out", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert "2 families" in ok.output and "0 successes" in ok.output
    bad = runner.invoke(app, ["redteam", str(CLEAN), "--families", "no_such_family"])
    assert bad.exit_code == 3 and "unknown attack families" in bad.output
    assert runner.invoke(app, ["redteam", str(tmp_path)]).exit_code == 3


def test_llm_brain_reads_only_the_runs_files_and_its_attack_is_judged(tmp_path):
    attack = {"tool": "submit", "attack": {
        "name": "hidden knob", "rationale": "an undeclared knob in the candidate only", "kind": "fail_worthy",
        "must_include_any": [["CONDITIONS_DIFFER"]],
        "edits": [{"op": "set_json", "path": "legs/cand/server_info.json", "key": "sneaky_turbo", "value": 9}]}}
    replies = [json.dumps({"tool": "list_files"}),
               json.dumps({"tool": "read_file", "path": "../../../../etc/passwd"}),
               json.dumps({"tool": "read_file", "path": "claims/001-patch.json"}),
               json.dumps(attack)]
    from perfwarden.harness.llm_client import LLMClient

    with ScriptedLLM(replies) as llm:
        brain = rt.LLMRedTeam(LLMClient(model="scripted", base_url=llm.base_url, api_key="k"))
        results = rt.llm_round(brain, [rt.load_base(CLEAN)], tmp_path, tmp_path / "out", "llm:test")
    assert len(results) == 1 and results[0].success is None and results[0].verdict == "FAIL"
    system = llm.requests[0]["messages"][0]["content"]
    assert "UNKNOWN_KNOB" in system and "patch-auditor" in system  # the auditor's own documentation
    users = [r["messages"][1]["content"] for r in llm.requests]
    assert "legs/cand/server_info.json" in users[1] and '<untrusted_data name="files">' in users[1]
    assert "leaves the run directory" in users[2]  # no file outside the run
    assert '"scope": "patch"' in users[3]


def test_llm_attack_edits_stay_inside_the_run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(CLEAN / "run", run)
    ctx = rt.AttackContext(run, json.loads((run / "claims" / "001-patch.json").read_text()))
    attack = rt.LLMAttack(name="escape", rationale="x", kind="fake_win",
                          edits=[rt.Edit(op="write_file", path="../outside.txt", text="x")])
    with pytest.raises(ValueError, match="leaves the run directory"):
        rt.apply_edits(ctx, attack)
    assert not (tmp_path / "outside.txt").exists()
