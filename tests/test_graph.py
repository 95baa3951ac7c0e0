"""The run graph on the simulated target: the search, routing, fix loops, bounds, report, crash and resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langgraph.runtime import Runtime

from perfwarden.agents.base import BankedChange
from perfwarden.auditor import acceptance
from perfwarden.formats.records import Claim, DeclaredLever, Headline, LegRefs
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.harness.target_config import EmbeddedConfig, knob
from perfwarden.orchestrator import graph as G
from perfwarden.orchestrator.runner import RunUsageError, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import FailingLab, SyntheticLab
from perfwarden.orchestrator.state import RunContext, upsert_by_id

DATA = Path(__file__).parent / "data"


def settings(**kw) -> RunSettings:
    return RunSettings(target="synthetic", **kw)


def reps_by_leg(run: Path) -> dict[str, list[int]]:
    out = {}
    for bench in sorted((run / "legs").glob("*/bench_runs.jsonl")):
        out[bench.parent.name] = [json.loads(line)["rep"] for line in bench.read_text().splitlines() if line.strip()]
    return out


def claim_of(run: Path, v: VerdictSummary) -> dict:
    return json.loads((run / v.claim).read_text())


@pytest.mark.integration
def test_coordinate_descent_climbs_the_ladder_from_the_best_banked_configuration(tmp_path):
    # Coordinate descent over the former default space (the default is now the study, tests/test_search.py).
    run = tmp_path / "run"
    state = run_graph(run, settings(sampler="coordinate", levers=["max_batch_size", "attn_implementation"]),
                      SyntheticLab())
    banked = {b.name: b for b in state["banked"]}
    # max_batch_size: 1 -> 2 banked, 2 -> 4 banked (measured against 2), 4 -> 8 refused (no further gain)
    assert list(banked)[:2] == ["cfg-max_batch_size=2", "cfg-max_batch_size=4"]
    assert banked["cfg-max_batch_size=4"].against == {"max_batch_size": 2}
    step2 = next(v for v in state["verdicts"] if v.lever == "cfg-max_batch_size=4")
    claim = claim_of(run, step2)
    base_info = json.loads((run / "legs" / claim["legs"]["baseline"] / "server_info.json").read_text())
    cand_info = json.loads((run / "legs" / claim["legs"]["candidate"] / "server_info.json").read_text())
    assert (base_info["max_batch_size"], cand_info["max_batch_size"]) == (2, 4)  # the step, and only the step
    assert claim["lever"]["config_keys"] == ["max_batch_size"]
    # the run's A/A legs ran max_batch_size=1: A/A evidence for the first step, not for one measured against 2
    assert claim["legs"]["aa"] == [] and claim_of(run, next(v for v in state["verdicts"] if v.lever == "cfg-max_batch_size=2"))["legs"]["aa"] == ["baseline", "baseline-aa"]
    assert banked["krn-rmsnorm"].lever_class == "A" and banked["krn-rmsnorm"].against["max_batch_size"] == 4
    refused = {r.name for r in state["rejected"]}
    assert "cfg-max_batch_size=8" in refused
    # the cheats and lossy knobs are not in the default search
    tried = {p.id.split("=")[0] for p in state["proposals"]}
    assert not tried & {"cfg-response_cache", "cfg-prompt_lookup", "cfg-quantization", "cfg-dtype"}
    # the bundle: the true no-overlay baseline against every banked step together
    bundle = next(v for v in state["verdicts"] if v.scope == "bundle")
    bclaim = claim_of(run, bundle)
    # its components: the banked steps that survive in the final configuration (4 superseded 2)
    assert bundle.verdict == "PASS" and bclaim["lever"]["components"] == [
        b.name for b in state["banked"] if b.name != "cfg-max_batch_size=2"]
    assert json.loads((run / "legs" / "bundle-base" / "leg.json").read_text())["overlay"]["config"] == {}
    assert json.loads((run / "legs" / "bundle" / "server_info.json").read_text())["max_batch_size"] == 4
    assert bundle.headline_rederived > banked["cfg-max_batch_size=2"].headline_rederived_pct
    report = json.loads((run / "report.json").read_text())
    assert [s["change"] for s in report["search_path"]][:3] == ["cfg-max_batch_size=2", "cfg-max_batch_size=4",
                                                               "cfg-max_batch_size=8"]
    assert {k["knob"]: k["final"] for k in report["final_configuration"]}["max_batch_size"] == 4
    assert {b["name"]: b["superseded_by"] for b in report["banked"]}["cfg-max_batch_size=2"] == "cfg-max_batch_size=4"
    md = (run / "report.md").read_text()
    assert "## Search path" in md and "| 2 | cfg-max_batch_size=4 | max_batch_size=2 | banked | PASS |" in md
    trail = state["verdicts"]
    assert [v.seq for v in trail] == list(range(1, len(trail) + 1))
    assert len(list((run / "verdicts").glob("*.json"))) == len(trail)
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert {e["node"] for e in events} >= {"setup", "baseline", "auditor", "pick", "integrator", "fix", "report"}


def test_named_levers_bank_real_wins_and_refuse_tempting_ones(tmp_path):
    levers = ["max_batch_size=4", "response_cache", "prompt_lookup", "batch_wait_ms=40"]
    state = run_graph(tmp_path / "run", settings(levers=levers, kernels=False), SyntheticLab())
    banked = {b.name: b for b in state["banked"]}
    assert banked["cfg-max_batch_size=4"].lever_class == "B"
    assert banked["cfg-prompt_lookup=True"].lever_class == "B"
    spec = banked["cfg-prompt_lookup=True"].mechanism  # documented from the producer's own reading of its reps
    assert (spec.name, spec.draft_model_id, spec.acceptance_rate) == ("speculative_decoding", "prompt_lookup", 1.8)
    rejected = {r.name: r for r in state["rejected"]}
    assert "CACHING_SUSPECTED" in rejected["cfg-response_cache=True"].reason
    # a latency trade-off is banked only once the claim discloses it at its real size
    wait = banked["cfg-batch_wait_ms=40.0"]
    assert wait.disclosed_regressions["median_ttft_ms"] == pytest.approx(150.0, abs=5.0)
    first = next(v for v in state["verdicts"] if v.proposal == "cfg-batch_wait_ms=40.0")
    assert first.verdict == "FLAG" and "HIDDEN_LATENCY_REGRESSION" in first.codes()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["bundle"]["verdict"] == "PASS"
    assert "Refused or reclassified" in (tmp_path / "run" / "report.md").read_text()


def test_a_lossy_knob_gets_its_quality_eval_before_the_claim(tmp_path):
    lab = SyntheticLab()
    state = run_graph(tmp_path / "run", settings(levers=["quantization"], kernels=False), lab)
    trail = [(v.scope, v.verdict) for v in state["verdicts"]]
    assert trail == [("baseline", "PASS"), ("patch", "PASS"), ("bundle", "PASS")]
    assert [b.name for b in state["banked"]] == ["cfg-quantization=int8_dynamic"]
    assert state["banked"][0].quality_eval_id == "pw-qa-exact-v1"
    assert ("quality", "cfg-quantization-int8_dynamic-a0-cand") in lab.calls


def test_an_unplanned_lossy_change_fails_then_runs_the_eval_and_passes(tmp_path):
    """A producer that wrongly believes a knob lossless: the auditor's QUALITY_EVAL_MISSING sends it
    through the fix loop (eval, resubmit on the same legs)."""
    class WrongBelief(EmbeddedConfig):
        quantization: str = knob("none", lever_class="B", lossless=True, choices=("int8_dynamic",))

    class Lab(SyntheticLab):
        config_model = WrongBelief

    state = run_graph(tmp_path / "run", settings(levers=["quantization"], kernels=False), Lab())
    trail = [(v.scope, v.verdict) for v in state["verdicts"]]
    assert trail[:3] == [("baseline", "PASS"), ("patch", "FAIL"), ("patch", "PASS")]
    assert "QUALITY_EVAL_MISSING" in state["verdicts"][1].codes()
    assert [b.name for b in state["banked"]] == ["cfg-quantization=int8_dynamic"]


def test_a_kernel_that_is_really_speculative_decoding_is_reclassified_from_the_raw(tmp_path):
    """The producer believes class A; the candidate's reps carry accept_length. Routing reads the
    finding code (ORTHOGONAL_LEVER) and the producer documents the draft from its own reading of the raw."""
    lab = SyntheticLab(effects={"op_overrides": {"tput": 1.2, "accept_length": 1.8}})
    state = run_graph(tmp_path / "run", settings(levers=[], kernels=True), lab)
    verdicts = [v for v in state["verdicts"] if v.proposal == "krn-rmsnorm" and v.scope == "patch"]
    assert "ORTHOGONAL_LEVER" in verdicts[0].codes()
    banked = {b.name: b for b in state["banked"]}
    assert banked["krn-rmsnorm"].lever_class == "B"
    assert banked["krn-rmsnorm"].mechanism.name == "speculative_decoding"
    assert banked["krn-rmsnorm"].mechanism.acceptance_rate == pytest.approx(1.8)


def test_noise_level_change_is_never_banked(tmp_path):
    """A 0.2% effect under 2% rep noise: re-measured at most to the bound, then ejected, never banked."""
    lab = SyntheticLab(effects={"max_batch_size": {"tput": 1.002}}, cv=0.02)
    state = run_graph(tmp_path / "run", settings(levers=["max_batch_size=2"], kernels=False), lab)
    patch = [v for v in state["verdicts"] if v.scope == "patch"]
    assert 1 <= len(patch) <= RunSettings().max_fix_attempts + 1
    assert all(v.verdict != "PASS" for v in patch) and patch[-1].action == "eject"
    assert "DELTA_NOT_SIGNIFICANT" in patch[-1].codes()
    assert state["banked"] == [] and [r.name for r in state["rejected"]] == ["cfg-max_batch_size=2"]


def test_contended_baseline_is_remeasured_a_bounded_number_of_times(tmp_path):
    state = run_graph(tmp_path / "run", settings(), SyntheticLab(contended=True))
    baselines = [v for v in state["verdicts"] if v.scope == "baseline"]
    assert len(baselines) == 1 + RunSettings().max_baseline_remeasures
    assert all(v.action == "remeasure" for v in baselines)
    assert state["proposals"] == [] and state["banked"] == []
    assert "no baseline passed" in (tmp_path / "run" / "report.md").read_text()


def test_bounded_give_up_when_every_candidate_is_contended(tmp_path):
    lab = SyntheticLab(contended="-cand")
    state = run_graph(tmp_path / "run", settings(levers=["max_batch_size=2"], kernels=False), lab)
    prop = state["proposals"][0]
    assert prop.status == "rejected" and state["banked"] == []
    patch = [v for v in state["verdicts"] if v.scope == "patch"]
    assert 2 <= len(patch) <= RunSettings().max_fix_attempts + 1
    assert all(v.verdict == "FLAG" and v.action == "remeasure" for v in patch)
    assert all("CONTENDED_LEG" in v.codes() for v in patch)
    legs = reps_by_leg(tmp_path / "run")
    assert max(len(r) for r in legs.values()) <= RunSettings().max_reps  # each step stops by max_reps


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
    harness = [v for v in state["verdicts"] if v.scope == "harness"]
    assert [v.verdict for v in harness] == ["FAIL", "PASS"]
    assert "HARNESS_SELF_COMPARE" in harness[0].codes()
    kernel = next(p for p in state["proposals"] if p.id == "krn-rmsnorm")
    assert kernel.chosen == "alt/rmsnorm_fast.py:impl" and kernel.status == "banked"


def test_lab_failure_is_recorded_and_the_run_ends_cleanly(tmp_path):
    with pytest.raises(Exception) as info:
        run_graph(tmp_path / "run", settings(), FailingLab())
    assert "port in use" in str(info.value)
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert "port in use" in events


def test_budget_exhaustion_stops_the_search(tmp_path):
    ticks = iter(range(0, 10_000, 400))  # every clock read advances 400 s
    state = run_graph(tmp_path / "run", settings(budget_minutes=20), SyntheticLab(), clock=lambda: next(ticks))
    assert any("the search stops here" in n for n in state["notes"])
    assert len(state["proposals"]) < 6
    assert (tmp_path / "run" / "report.md").is_file()


def test_the_baseline_sizes_the_first_step_so_a_slow_machine_does_not_overrun(tmp_path):
    """Before any change has finished, one costs what the baseline's two legs cost: with half the budget
    gone on the baseline, no step is started (it would overrun), and the report says why."""
    now = [0.0]

    class SlowLab(SyntheticLab):
        def measure(self, run, legs, reps):
            now[0] += 300.0
            return super().measure(run, legs, reps)

    state = run_graph(tmp_path / "run", settings(budget_minutes=10, kernels=False), SlowLab(), clock=lambda: now[0])
    assert state["proposals"] == [] and state["banked"] == []
    assert any("the search stops here" in n for n in state["notes"])
    report = (tmp_path / "run" / "report.md").read_text()
    # nothing was refused: the Banked section says no change was tried, and why (not "none passed")
    assert "Nothing was banked: no change was tried (budget" in report and "the search stops here" in report
    assert "no change passed the auditor" not in report


def test_a_baseline_is_not_remeasured_when_another_would_overrun_the_budget(tmp_path):
    now = [0.0]

    class SlowContendedLab(SyntheticLab):
        def measure(self, run, legs, reps):
            now[0] += 400.0
            return super().measure(run, legs, reps)

    state = run_graph(tmp_path / "run", settings(budget_minutes=15), SlowContendedLab(contended=True),
                      clock=lambda: now[0])
    assert [v.scope for v in state["verdicts"]] == ["baseline", "baseline"]  # 400 s each; a third would overrun
    assert "no baseline passed" in (tmp_path / "run" / "report.md").read_text()


def test_a_remeasure_that_would_overrun_the_budget_is_dropped(tmp_path):
    """A re-measure at max_reps costs more than a first A/B; when it and the bundle no longer fit, the
    change is dropped with the reason instead of running past the budget."""
    now = [0.0]

    class SlowLab(SyntheticLab):
        def measure(self, run, legs, reps):
            now[0] += 100.0
            return super().measure(run, legs, reps)

    state = run_graph(tmp_path / "run", settings(budget_minutes=9, levers=["max_batch_size=2"], kernels=False),
                      SlowLab(contended="-cand"), clock=lambda: now[0])
    assert [v.scope for v in state["verdicts"]] == ["baseline", "patch"]
    assert state["rejected"][0].reason.startswith("budget: a re-measure")
    assert now[0] <= 9 * 60


def test_lab_noise_goes_to_the_run_logs_not_the_terminal(tmp_path, capfd):
    """torch's profiler and weight loading print from C++ and Python alike: whatever a lab call writes to
    fd 1/2 lands in RUN/logs/lab.log."""
    class NoisyLab(SyntheticLab):
        def profile(self, run, config):
            print("STAGE:2026 profiler noise")
            os.write(2, b"Loading weights 100%|####|\n")
            return super().profile(run, config)

    run_graph(tmp_path / "run", settings(levers=[], kernels=True), NoisyLab())
    out, err = capfd.readouterr()
    assert "profiler noise" not in out + err and "Loading weights" not in out + err
    log = (tmp_path / "run" / "logs" / "lab.log").read_text()
    assert "STAGE:2026 profiler noise" in log and "Loading weights 100%" in log and "=== " in log


def test_a_random_weights_baseline_goes_on_to_the_search_but_another_flag_does_not(tmp_path):
    """weights=random: the baseline FLAGs CORRECTNESS_UNVERIFIABLE every time, so re-measuring it would
    spend the budget for nothing; any other FLAG is still re-measured."""
    from perfwarden.formats.verdict_summary import FindingSummary

    runtime = Runtime(context=RunContext(lab=SyntheticLab(), settings=settings(kernels=False)))

    def route(*codes: str) -> str:
        v = VerdictSummary(seq=1, scope="baseline", verdict="FLAG", action="flag", path="v", claim="c",
                           findings=[FindingSummary(code=c, severity="FLAG", message="m") for c in codes])
        state = {"baseline_attempts": 1, "baseline_s": 0.0, "started_at": time.time()}
        # the decision the auditor node records with the verdict, which the router reads
        decided = acceptance.decide(v, remeasure_left=G._baseline_fits(state, runtime.context))
        return G.after_audit({**state, "last_verdict": v.model_copy(update={"acceptance": decided})}, runtime)

    assert route("CORRECTNESS_UNVERIFIABLE") == "pick"
    assert route("CORRECTNESS_UNVERIFIABLE", "CONTENDED_LEG") == "baseline"
    assert route("CONTENDED_LEG") == "baseline"


def test_nodes_are_top_level_functions_fed_by_the_runtime_context(tmp_path):
    lab = SyntheticLab()
    # coordinate descent over the former default space (the study's first step is drawn: test_study.py)
    runtime = Runtime(context=RunContext(lab=lab, settings=settings(kernels=False, levers=["max_batch_size",
                                                                                          "attn_implementation"])))
    run = tmp_path / "run"
    state = G.initial_state(run, time.time())

    def apply(update):
        for key, value in update.items():
            if key in ("verdicts", "banked", "rejected", "notes"):
                state[key] = state.get(key, []) + value
            elif key == "proposals":
                state[key] = upsert_by_id(state[key], value)
            else:
                state[key] = value

    apply(G.setup(state, runtime))
    assert (run / "run.json").is_file()
    apply(G.baseline(state, runtime))
    assert state["pending_claim"] == "claims/001-baseline.json"
    assert Claim.model_validate_json((run / state["pending_claim"]).read_text()).legs.aa == ["baseline-aa"]
    assert reps_by_leg(run) == {"baseline": [0, 1, 2], "baseline-aa": [0, 1, 2]}  # the A/A twin calibrates noise
    apply(G.auditor(state, runtime))
    assert state["last_verdict"].verdict == "PASS" and (run / "verdicts" / "001-baseline.json").is_file()
    apply(G.pick(state, runtime))
    assert state["current"] == "cfg-max_batch_size=2"
    apply(G.integrator(state, runtime))
    claim = Claim.model_validate_json((run / state["pending_claim"]).read_text())
    assert claim.lever.config_keys == ["max_batch_size"] and claim.lever.lever_class == "B"
    apply(G.auditor(state, runtime))
    apply(G.fix(state, runtime))
    assert isinstance(state["banked"][0], BankedChange) and state["fix_action"] == "done"
    apply(G.report(state, runtime))
    assert json.loads((run / "report.json").read_text())["banked"][0]["name"] == "cfg-max_batch_size=2"


def test_existing_run_dir_needs_resume(tmp_path):
    run_graph(tmp_path / "run", settings(levers=["max_batch_size=2"], kernels=False), SyntheticLab())
    with pytest.raises(RunUsageError):
        run_graph(tmp_path / "run", settings(), SyntheticLab())
    with pytest.raises(RunUsageError):
        run_graph(tmp_path / "other", settings(), SyntheticLab(), resume=True)


@pytest.mark.integration
def test_resume_after_crash_mid_rep_gives_the_same_result_without_duplicate_reps(tmp_path):
    clean = run_graph(tmp_path / "clean", settings(), SyntheticLab())
    with pytest.raises(KeyboardInterrupt):
        run_graph(tmp_path / "crashed", settings(), SyntheticLab(crash_after=20))
    resumed = run_graph(tmp_path / "crashed", settings(), SyntheticLab(), resume=True)
    assert [b.name for b in resumed["banked"]] == [b.name for b in clean["banked"]]
    assert [(v.scope, v.verdict) for v in resumed["verdicts"]] == [(v.scope, v.verdict) for v in clean["verdicts"]]
    for leg, reps in reps_by_leg(tmp_path / "crashed").items():
        assert len(reps) == len(set(reps)), f"duplicate rep in {leg}"
    assert reps_by_leg(tmp_path / "crashed").keys() == reps_by_leg(tmp_path / "clean").keys()


def test_a_checkpoint_from_before_the_typed_state_is_refused_with_a_clear_message(tmp_path):
    """tests/data/checkpoint-v1 was checkpointed by the untyped graph (state version 1) mid-run."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "checkpoint-v1" / "run", run)
    # Not the run's content: the checkpoint SQLite opens, and the writer lock the resume held while it looked.
    bookkeeping = ("checkpoints.sqlite", "writer.lock", "writer.json")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name not in bookkeeping}
    with pytest.raises(RunUsageError) as info:
        run_graph(run, settings(), SyntheticLab(), resume=True)
    message = str(info.value)
    assert "run-state version 1" in message and "resumes versions 2, 3 only" in message
    assert "perfwarden review" in message
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name not in bookkeeping}
    assert after == before  # nothing in the run was touched


@pytest.mark.integration
def test_the_cli_says_why_an_old_checkpoint_cannot_resume(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA / "checkpoint-v1" / "run", run)
    done = subprocess.run([sys.executable, "-m", "perfwarden.cli.main", "run", "--resume", str(run)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "run-state version 1" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_bad_lever_is_a_clear_error_before_anything_runs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "perfwarden.cli.main", "run", "--target", "synthetic",
                           "--out", str(tmp_path / "run"), "--levers", "max_batch_size,warp_speed"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "unknown lever(s) ['warp_speed']" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_red_team_claims_go_through_the_same_auditor_and_are_reported(tmp_path):
    """The seam for --red-team: an attack producer's claims are audited like any other."""
    class Attacker:
        name = "stub"

        def __init__(self):
            self.sent = 0

        def next_attack(self, run, banked, verdicts):
            if self.sent:
                return None
            self.sent += 1
            # a fake win: the A/A twin presented as a batching gain (no difference at all)
            return Claim(scope="patch", legs=LegRefs(baseline="baseline", candidate="baseline-aa"),
                         lever=DeclaredLever(name="fake-batching", lever_class="B", config_keys=["max_batch_size"]),
                         headline=Headline(metric="output_throughput", value=30.0))

    state = run_graph(tmp_path / "run", settings(levers=["max_batch_size=2"], kernels=False), SyntheticLab(),
                      attacker=Attacker())
    attacks = [v for v in state["verdicts"] if v.producer == "red_team"]
    assert len(attacks) == 1 and attacks[0].verdict != "PASS"
    assert [b.name for b in state["banked"]] == ["cfg-max_batch_size=2"]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["red_team"]["attacks"] == 1 and report["red_team"]["passed"] == []
    assert "## Red team" in (tmp_path / "run" / "report.md").read_text()


def test_the_live_red_team_producer_banks_nothing(tmp_path):
    """``run --red-team`` with the shipped producer: every attack over the run's own evidence (a config
    win relabelled as a kernel, an inflated headline, an undeclared knob, a leg against itself, a forged
    copy of a leg, a report doubling the gain) is audited and refused, and the banked result is unchanged."""
    from perfwarden.redteam import red_team

    state = run_graph(tmp_path / "run", settings(levers=["max_batch_size=2"], kernels=False, red_team=True),
                      SyntheticLab(), attacker=red_team.make_producer(settings()))
    attacks = {v.lever: v for v in state["verdicts"] if v.producer == "red_team"}
    assert set(attacks) == {"rt-relabel-kernel", "rt-inflated", "rt-undeclared", "rt-self", "rt-forged", "rt-prose"}
    assert {name: v.verdict for name, v in attacks.items() if v.verdict == "PASS"} == {}
    assert [b.name for b in state["banked"]] == ["cfg-max_batch_size=2"]
    codes = {name: {f.code for f in v.findings if f.severity != "INFO"} for name, v in attacks.items()}
    assert codes["rt-forged"] & {"EVIDENCE_TAMPERED", "EVIDENCE_UNSEALED"}, codes["rt-forged"]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["red_team"]["attacks"] == 6 and report["red_team"]["passed"] == []


def test_a_forged_pass_verdict_does_not_get_a_component_into_a_bundle(tmp_path):
    """Verdict files are not sealed: a producer can write ``verdicts/<seq>-patch.json`` saying PASS. The
    bundle audit audits each component's claim again instead of believing the file."""
    from perfwarden.auditor.audit import audit_path
    from perfwarden.formats.seal import find_key_file

    run = tmp_path / "run"
    run_graph(run, settings(levers=["max_batch_size=2"], kernels=False), SyntheticLab())
    bundle_path = next((run / "claims").glob("*-bundle.json"))
    bundle = Claim.model_validate_json(bundle_path.read_text())
    honest = audit_path(run, bundle_path, claim_root=run, key=find_key_file(run))
    assert honest.verdict == "PASS", [f.code for f in honest.findings]
    # a fake component: the baseline against its A/A twin, with a forged PASS verdict beside it
    fake = Claim(seq=90, scope="patch", producer="config_tuner", legs=LegRefs(baseline="baseline", candidate="baseline-aa"),
                 lever=DeclaredLever(name="cfg-fake", lever_class="B", config_keys=["max_batch_size"]))
    (run / "claims" / "090-patch.json").write_text(fake.model_dump_json())
    forged = json.loads(next((run / "verdicts").glob("*-patch.json")).read_text())
    forged.update(claim="claims/090-patch.json", claim_seq=90, verdict="PASS", action="bank")
    (run / "verdicts" / "090-patch.json").write_text(json.dumps(forged))
    padded = bundle.model_copy(update={"seq": 91, "lever": bundle.lever.model_copy(
        update={"components": [*bundle.lever.components, "cfg-fake"]})})
    (run / "claims" / "091-bundle.json").write_text(padded.model_dump_json())
    verdict = audit_path(run, run / "claims" / "091-bundle.json", claim_root=run, key=find_key_file(run))
    assert verdict.verdict == "FAIL"
    assert any(f.code == "CONDITIONS_DIFFER" and "cfg-fake" in f.message for f in verdict.findings)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_sigkill_during_a_rep_then_resume(tmp_path):
    """The real CLI process is SIGKILLed while reps are being written; --resume finishes the run."""
    run = tmp_path / "run"
    env = {**os.environ, "PERFWARDEN_SIM_REP_DELAY": "0.05"}
    cmd = [sys.executable, "-m", "perfwarden.cli.main", "run", "--target", "synthetic", "--out", str(run)]
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
    banked = {b["name"] for b in report["banked"]}  # the default search is the study: its first trial is drawn
    assert "krn-rmsnorm" in banked and any(name.startswith("cfg-t") for name in banked), banked
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


def test_the_terminal_shows_one_budget_figure_the_runs_own(tmp_path):
    """Issue 18: the measuring line and the verdict lines showed two different "min left" figures (the
    terminal counted from its own start, the run from its checkpoint's). A run that started 3 minutes
    before this process (as a resumed one did) shows the run's figure everywhere."""
    import io
    import re

    from rich.console import Console

    from perfwarden.cli.run import TerminalWatcher

    console = Console(file=io.StringIO(), width=250)  # not a terminal: one line per measurement
    watcher = TerminalWatcher(console, started=time.time())
    readings = iter([time.time() - 180.0])

    def clock() -> float:  # the run's start (the first reading) was 180 s ago; every later reading is now
        return next(readings, None) or time.time()

    run_graph(tmp_path / "run", settings(levers=["max_batch_size=2"], kernels=False, budget_minutes=10),
              SyntheticLab(), watcher=watcher, clock=clock)
    out = console.file.getvalue()
    figures = [float(x) for x in re.findall(r"(\d+\.\d) min left", out)]
    assert "measuring" in out and "cfg-max_batch_size=2" in out and len(figures) >= 2, out
    assert all(6.5 <= f <= 7.0 for f in figures), out


def test_the_state_version_is_read_across_the_checkpoints_pending_writes(tmp_path):
    """Killed while the input was written, a checkpoint holds ``run_dir`` and ``state_version`` as separate
    pending writes; read one write at a time, ``run_dir`` alone looked like a version-1 state and the
    resume was refused (the clean-clone CI's resume test, crash point before-setup-1)."""
    from perfwarden.orchestrator.runner import RunUsageError, check_state_version, merged_values
    from perfwarden.orchestrator.state import STATE_VERSION

    parts = [{}, {"run_dir": str(tmp_path)}, {"state_version": STATE_VERSION}]
    check_state_version(tmp_path, merged_values(parts))
    with pytest.raises(RunUsageError):
        check_state_version(tmp_path, merged_values([{"run_dir": str(tmp_path), "state_version": 1}]))
    check_state_version(tmp_path, merged_values([{}]))  # checkpointed before the input: no state yet


def test_a_baseline_noisy_after_every_remeasure_lets_the_search_go_on_judging_each_step_on_its_own_legs(tmp_path):
    """The clean-clone CI on a noisy 2-core machine: every baseline spread 3.4-10.8% over the documented 3% limit,
    the run stopped, and nothing could be banked there however large the change. Noise alone (no other finding)
    is the machine's, not the evidence's: the search goes on, a change far above the noise is banked, one inside
    it is not, and the baselines' FLAG stays in the trail and the report."""
    big = run_graph(tmp_path / "big", settings(levers=["max_batch_size=4"], kernels=False), SyntheticLab(cv=0.06))
    baselines = [v for v in big["verdicts"] if v.scope == "baseline"]
    assert len(baselines) == 1 + RunSettings().max_baseline_remeasures
    assert all(v.verdict == "FLAG" and v.codes() == {"NOISY_BASELINE"} for v in baselines)
    assert [b.name for b in big["banked"]] == ["cfg-max_batch_size=4"]
    assert "the machine is noisier than the documented limit" in (tmp_path / "big" / "report.md").read_text()
    small = run_graph(tmp_path / "small", settings(levers=["max_batch_size=4"], kernels=False),
                      SyntheticLab(cv=0.06, effects={"max_batch_size": {"tput": 1.02}}))
    assert all(v.codes() == {"NOISY_BASELINE"} for v in small["verdicts"] if v.scope == "baseline")
    assert small["banked"] == [] and [r.name for r in small["rejected"]] == ["cfg-max_batch_size=4"]


def test_no_baseline_remeasure_measures_a_noisy_baseline_once_and_the_search_goes_on(tmp_path):
    """``--baseline-remeasures 0`` (a machine known to be noisier than the limit): one baseline, FLAGged for
    its noise and kept in the trail; the steps are still judged on their own legs."""
    state = run_graph(tmp_path / "run", settings(levers=["max_batch_size=4"], kernels=False, max_baseline_remeasures=0),
                      SyntheticLab(cv=0.06))
    baselines = [v for v in state["verdicts"] if v.scope == "baseline"]
    assert [(v.verdict, v.codes()) for v in baselines] == [("FLAG", {"NOISY_BASELINE"})]
    assert [b.name for b in state["banked"]] == ["cfg-max_batch_size=4"]


def test_a_baseline_with_another_finding_still_stops_the_run(tmp_path):
    """Near miss: contention (or any finding beside the noise) still stops the search after the re-measures."""
    state = run_graph(tmp_path / "run", settings(kernels=False), SyntheticLab(contended=True, cv=0.06))
    assert state["proposals"] == [] and state["banked"] == []
    assert "The run stopped: no baseline passed" in (tmp_path / "run" / "report.md").read_text()
