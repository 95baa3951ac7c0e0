"""The kernel-extractor routes an op for a kernel only when it is hot (at least 5% of the profiled time and
among the 5 hottest, fragments merged); when no op the target can override is, the run says so and goes on
without a kernel path, instead of submitting a route the auditor must refuse (PROFILE_MISATTRIBUTION).

A real SmolLM2 profile on 2 cores puts rmsnorm near 5%, on either side from run to run: a route of it then
is a refusal the producer could have seen coming, and a FAIL on the first screen of an honest run."""

from __future__ import annotations

import json
from pathlib import Path

from perfwarden.agents.kernel_extractor import HOT_RANK, HOT_SHARE, no_route_note, routed_op
from perfwarden.auditor.gates import profile as profile_gate
from perfwarden.formats import seal
from perfwarden.formats.records import RunDir
from perfwarden.harness.target_config import TargetConfig
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab
from perfwarden.orchestrator.synth import write_jsonl


def test_the_hottest_op_the_target_can_override_is_routed_when_hot():
    ranking = [("linear", 0.60), ("rmsnorm", 0.20), ("silu_mul", 0.12), ("softmax", 0.08)]
    assert routed_op(ranking, ["silu_mul", "rmsnorm"]) == "rmsnorm"
    assert routed_op(ranking, ["silu_mul"]) == "silu_mul"


def test_an_op_below_the_share_or_the_rank_is_not_routed():
    assert routed_op([("linear", 0.951), ("rmsnorm", 0.049)], ["rmsnorm"]) is None
    six = [(f"op{i}", 0.15) for i in range(5)] + [("rmsnorm", 0.25 / 2)]
    assert routed_op(six, ["rmsnorm"]) is None  # 12.5% but sixth
    assert routed_op([("linear", 0.9), ("softmax", 0.1)], ["rmsnorm"]) is None  # nothing it can override
    assert routed_op([], ["rmsnorm"]) is None
    # a colder overridable op behind a cold one is colder still: the first overridable op decides
    assert routed_op([("linear", 0.96), ("rmsnorm", 0.03), ("silu_mul", 0.01)], ["rmsnorm", "silu_mul"]) is None


def test_the_bounds_are_inclusive_as_the_auditors_are():
    at_bounds = [(f"op{i}", 0.19) for i in range(4)] + [("rmsnorm", HOT_SHARE)]
    assert routed_op(at_bounds, ["rmsnorm"]) == "rmsnorm"  # rank 5, exactly 5%


def test_the_producer_never_routes_what_the_auditor_calls_cold():
    """Stricter is allowed (the producer only leaves a kernel untried); looser would submit refusals."""
    assert HOT_SHARE >= profile_gate.HOT_SHARE and HOT_RANK <= profile_gate.HOT_RANK


def test_the_note_names_the_op_its_share_and_rank():
    note = no_route_note([("linear", 0.951), ("rmsnorm", 0.049)], ["rmsnorm"])
    assert "'rmsnorm'" in note and "4.9%" in note and "rank 2" in note and "no kernel path" in note
    assert "none of the profiled ops" in no_route_note([("linear", 1.0)], ["rmsnorm"])


class ColdProfileLab(SyntheticLab):
    """The synthetic target with a profile where rmsnorm, the op it can override, is 4% of the time."""

    def profile(self, run: Path, config: TargetConfig) -> Path:
        self.calls.append(("profile", None))
        seal.begin(run)
        path = RunDir(run).profile
        write_jsonl(path, [{"name": "aten::linear", "op": "linear", "self_time_us": 9600.0, "shapes": [[8, 576]]},
                           {"name": "rmsnorm", "op": "rmsnorm", "self_time_us": 400.0, "shapes": [[8, 576]]}])
        return path


def test_a_run_whose_profile_has_no_hot_op_it_can_override_skips_the_kernel_path(tmp_path):
    lab = ColdProfileLab()
    run = tmp_path / "run"
    state = run_graph(run, RunSettings(target="synthetic", levers=["max_batch_size=2"]), lab)
    assert ("profile", None) in lab.calls and not [c for c in lab.calls if c[0] == "opbench"]
    assert [v.scope for v in state["verdicts"] if v.scope in ("profile", "harness")] == []
    report = json.loads((run / "report.json").read_text())
    assert any("'rmsnorm'" in n and "no kernel path" in n for n in report["notes"])
    assert not [p for p in report["proposals"] if p["id"].startswith("krn-")]
    assert "cfg-max_batch_size=2" in {b["name"] for b in report["banked"]}  # the search went on


def test_the_terminal_says_why_there_is_no_kernel_path(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from perfwarden.cli import run as run_command
    from perfwarden.cli.main import app

    monkeypatch.setattr(run_command, "make_lab", lambda settings, **kwargs: ColdProfileLab())
    done = CliRunner().invoke(app, ["run", "--target", "synthetic", "--out", str(tmp_path / "run"),
                                    "--levers", "max_batch_size=2"])
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert "profile: the hottest op the target can override, 'rmsnorm', takes 4.0% of profiled time" in said
    assert said.count("no kernel path") == 1
