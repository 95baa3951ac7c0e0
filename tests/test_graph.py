"""The run graph on the simulated target: routing, fix loops, bounds, report, crash and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfwarden.orchestrator.graph import Services, build_graph
from perfwarden.orchestrator.runner import RunUsageError, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import FailingLab, SyntheticLab


def settings(**kw) -> RunSettings:
    return RunSettings(target="synthetic", **kw)


def reps_by_leg(run: Path) -> dict[str, list[int]]:
    out = {}
    for bench in sorted((run / "legs").glob("*/bench_runs.jsonl")):
        out[bench.parent.name] = [json.loads(line)["rep"] for line in bench.read_text().splitlines() if line.strip()]
    return out


ALL_LEVERS = ["max_batch_size", "attn_implementation", "response_cache", "prompt_lookup", "quantization",
              "batch_wait_ms"]


def test_full_run_banks_real_wins_and_refuses_tempting_levers(tmp_path):
    state = run_graph(tmp_path / "run", settings(levers=ALL_LEVERS, max_proposals=10), SyntheticLab())
    banked = {b["name"]: b for b in state["banked"]}
    assert banked["cfg-max_batch_size"]["lever_class"] == "B"
    assert banked["krn-rmsnorm"]["lever_class"] == "A"
    assert banked["cfg-prompt_lookup"]["lever_class"] == "B"  # reclassified from the producer's belief "A"
    rejected = {r["name"]: r for r in state["rejected"]}
    assert "CACHING_SUSPECTED" in rejected["cfg-response_cache"]["reason"]
    # a latency trade-off is banked only once the claim discloses it at its real size
    wait = banked["cfg-batch_wait_ms"]
    assert wait["disclosed_regressions"]["median_ttft_ms"] == pytest.approx(150.0, abs=5.0)
    first = next(v for v in state["verdicts"] if v["proposal"] == "cfg-batch_wait_ms")
    assert first["verdict"] == "FLAG" and any(f["code"] == "HIDDEN_LATENCY_REGRESSION" for f in first["findings"])
    trail = state["verdicts"]
    assert [v["seq"] for v in trail] == list(range(1, len(trail) + 1))
    assert len(list((tmp_path / "run" / "verdicts").glob("*.json"))) == len(trail)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert {h["change"] for h in report["headlines"]["A"]} == {"krn-rmsnorm"}
    assert report["bundle"]["verdict"] == "PASS"
    assert "Refused or reclassified" in (tmp_path / "run" / "report.md").read_text()
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert {e["node"] for e in events} >= {"setup", "baseline", "auditor", "pick", "integrator", "fix", "report"}


def test_fail_fix_pass_loop_quality_eval(tmp_path):
    state = run_graph(tmp_path / "run", settings(levers=["quantization"], kernels=False), SyntheticLab())
    trail = [(v["scope"], v["verdict"]) for v in state["verdicts"]]
    assert trail[:3] == [("baseline", "PASS"), ("patch", "FAIL"), ("patch", "PASS")]
    first = state["verdicts"][1]
    assert any(f["code"] == "QUALITY_EVAL_MISSING" for f in first["findings"])
    assert [b["name"] for b in state["banked"]] == ["cfg-quantization"]


def test_noise_level_change_is_ejected_without_remeasuring(tmp_path):
    lab = SyntheticLab(effects={"max_batch_size": {"tput": 1.002}}, cv=0.02)
    state = run_graph(tmp_path / "run", settings(levers=["max_batch_size"], kernels=False), lab)
    patch = [v for v in state["verdicts"] if v["scope"] == "patch"]
    assert len(patch) == 1 and patch[0]["action"] == "eject"
    assert any(f["code"] == "DELTA_NOT_SIGNIFICANT" for f in patch[0]["findings"])
    assert state["banked"] == []


def test_contended_baseline_is_remeasured_a_bounded_number_of_times(tmp_path):
    state = run_graph(tmp_path / "run", settings(), SyntheticLab(contended=True))
    baselines = [v for v in state["verdicts"] if v["scope"] == "baseline"]
    assert len(baselines) == 1 + RunSettings().max_baseline_remeasures
    assert all(v["action"] == "remeasure" for v in baselines)
    assert state["proposals"] == [] and state["banked"] == []
    assert "no baseline passed" in (tmp_path / "run" / "report.md").read_text()


def test_bounded_give_up_when_every_candidate_is_contended(tmp_path):
    lab = SyntheticLab(contended="-cand")
    state = run_graph(tmp_path / "run", settings(levers=["max_batch_size"], kernels=False), lab)
    prop = state["proposals"][0]
    assert prop["status"] == "rejected" and state["banked"] == []
    patch = [v for v in state["verdicts"] if v["scope"] == "patch"]
    assert 2 <= len(patch) <= RunSettings().max_fix_attempts + 1
    assert all(v["verdict"] == "FLAG" and v["action"] == "remeasure" for v in patch)
    assert all(any(f["code"] == "CONTENDED_LEG" for f in v["findings"]) for v in patch)
    legs = reps_by_leg(tmp_path / "run")
    assert max(len(r) for r in legs.values()) == RunSettings().max_reps  # re-measured up to max_reps, no more


def test_harness_fail_redoes_with_the_next_candidate(tmp_path):
    class SelfCompareLab(SyntheticLab):
        def alternatives(self, op):
            return ["alt/copy_of_reference.py:impl", "alt/rmsnorm_fast.py:impl"] if op == "rmsnorm" else []

        def opbench(self, run, op, candidates, shapes):
            path = super().opbench(run, op, candidates, shapes)
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            for r in rows:
                if "copy_of_reference" in r["backend"]:
                    r["impl_sha256"] = "reference"  # the same source as the reference: a self comparison
                    r["times_ms"] = [t / 2 for t in r["times_ms"]]
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            return path

    state = run_graph(tmp_path / "run", settings(levers=[], kernels=True), SelfCompareLab())
    harness = [v for v in state["verdicts"] if v["scope"] == "harness"]
    assert [v["verdict"] for v in harness] == ["FAIL", "PASS"]
    assert any(f["code"] == "HARNESS_SELF_COMPARE" for f in harness[0]["findings"])
    kernel = next(p for p in state["proposals"] if p["id"] == "krn-rmsnorm")
    assert kernel["chosen"] == "alt/rmsnorm_fast.py:impl" and kernel["status"] == "banked"


def test_lab_failure_is_recorded_and_the_run_ends_cleanly(tmp_path):
    with pytest.raises(Exception) as info:
        run_graph(tmp_path / "run", settings(), FailingLab())
    assert "port in use" in str(info.value)
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert "port in use" in events


def test_budget_exhaustion_skips_remaining_proposals(tmp_path):
    ticks = iter(range(0, 10_000, 400))  # every clock read advances 400 s
    state = run_graph(tmp_path / "run", settings(budget_minutes=20), SyntheticLab(), clock=lambda: next(ticks))
    statuses = {p["status"] for p in state["proposals"]}
    assert "skipped" in statuses
    assert (tmp_path / "run" / "report.md").is_file()


def test_nodes_alone(tmp_path):
    lab = SyntheticLab()
    g = build_graph(Services(lab=lab, settings=settings()))
    run = tmp_path / "run"
    state = {"run_dir": str(run), "started_at": time.time(), "seq": 0, "verdicts": [], "banked": [], "rejected": [],
             "proposals": [], "notes": [], "current": None}
    state |= g.nodes["setup"].runnable.invoke(state)
    assert (run / "run.json").is_file()
    state |= g.nodes["baseline"].runnable.invoke(state)
    assert state["pending_claim"] == "claims/001-baseline.json"
    assert reps_by_leg(run) == {"baseline": [0, 1, 2], "baseline-aa": [0, 1, 2]}  # the A/A twin calibrates noise
    state |= g.nodes["auditor"].runnable.invoke(state)
    assert state["last_verdict"]["verdict"] == "PASS" and (run / "verdicts" / "001-baseline.json").is_file()
    state |= g.nodes["strategize"].runnable.invoke(state)
    assert [p["id"] for p in state["proposals"]][0] == "cfg-max_batch_size"
    state |= g.nodes["pick"].runnable.invoke(state)
    assert state["current"] == "cfg-max_batch_size"
    state |= g.nodes["integrator"].runnable.invoke(state)
    claim = json.loads((run / state["pending_claim"]).read_text())
    assert claim["lever"]["config_keys"] == ["max_batch_size"] and claim["lever"]["lever_class"] == "B"
    state |= g.nodes["auditor"].runnable.invoke(state)
    state |= g.nodes["fix"].runnable.invoke(state)
    assert state["banked"][0]["name"] == "cfg-max_batch_size" and state["fix_action"] == "done"
    state |= g.nodes["report"].runnable.invoke(state)
    assert json.loads((run / "report.json").read_text())["banked"][0]["name"] == "cfg-max_batch_size"


def test_existing_run_dir_needs_resume(tmp_path):
    run_graph(tmp_path / "run", settings(levers=["max_batch_size"], kernels=False), SyntheticLab())
    with pytest.raises(RunUsageError):
        run_graph(tmp_path / "run", settings(), SyntheticLab())
    with pytest.raises(RunUsageError):
        run_graph(tmp_path / "other", settings(), SyntheticLab(), resume=True)


def test_resume_after_crash_mid_rep_gives_the_same_result_without_duplicate_reps(tmp_path):
    clean = run_graph(tmp_path / "clean", settings(), SyntheticLab())
    with pytest.raises(KeyboardInterrupt):
        run_graph(tmp_path / "crashed", settings(), SyntheticLab(crash_after=20))
    resumed = run_graph(tmp_path / "crashed", settings(), SyntheticLab(), resume=True)
    assert [b["name"] for b in resumed["banked"]] == [b["name"] for b in clean["banked"]]
    assert [(v["scope"], v["verdict"]) for v in resumed["verdicts"]] == [(v["scope"], v["verdict"]) for v in clean["verdicts"]]
    for leg, reps in reps_by_leg(tmp_path / "crashed").items():
        assert len(reps) == len(set(reps)), f"duplicate rep in {leg}"
    assert reps_by_leg(tmp_path / "crashed").keys() == reps_by_leg(tmp_path / "clean").keys()


@pytest.mark.timeout(120)
def test_sigkill_during_a_rep_then_resume(tmp_path):
    """The real CLI process is SIGKILLed while reps are being written; --resume finishes the run."""
    run = tmp_path / "run"
    env = {**os.environ, "PERFWARDEN_SIM_REP_DELAY": "0.05"}
    cmd = [sys.executable, "-m", "perfwarden.orchestrator.cli", "run", "--target", "synthetic", "--out", str(run)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        if sum(len(r) for r in reps_by_leg_safe(run).values()) >= 15:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run / "report.json").exists()
    done = subprocess.run(cmd[:4] + ["--resume", str(run)], env={**os.environ}, capture_output=True, text=True,
                          timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((run / "report.json").read_text())
    assert {b["name"] for b in report["banked"]} >= {"cfg-max_batch_size", "krn-rmsnorm"}
    for leg, reps in reps_by_leg(run).items():
        assert len(reps) == len(set(reps)), f"duplicate rep in {leg}"


def reps_by_leg_safe(run: Path) -> dict[str, list[int]]:
    out = {}
    for bench in (run / "legs").glob("*/bench_runs.jsonl") if (run / "legs").is_dir() else []:
        reps = []
        for line in bench.read_text().splitlines():
            try:
                reps.append(json.loads(line)["rep"])
            except ValueError:
                pass
        out[bench.parent.name] = reps
    return out
