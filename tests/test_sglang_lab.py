"""The SGLang lab end to end, on CPU, against a stand-in SGLang server.

SGLang needs a GPU and cannot be installed on CI machines, so ``--sglang-python`` here is a wrapper
script whose ``-m sglang.launch_server`` resolves to ``tests/sglang_standin/sglang/launch_server.py``
(a test double: SGLang's flags, log lines, /health, /server_info and OpenAI-compatible endpoints, with
deterministic text). Everything on perfwarden's side runs for real: the environment check, the command
line, one server at a time with interleaved reps, LoadGen, the parity dump, the quality eval, the seal
and the auditor reading what was written. The real SGLang path is run on a GPU host (docs/gpu.md,
"SGLang as the target").
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfwarden.agents import integrator
from perfwarden.agents.base import Proposal
from perfwarden.auditor.audit import audit_claim
from perfwarden.cli.main import app
from perfwarden.formats import seal
from perfwarden.formats.records import Overlay, RunManifest, write_json_atomic
from perfwarden.harness.labs.lab import LabError, LegPlan
from perfwarden.harness.labs.sglang import SGLangLab
from perfwarden.harness.prompts import parity_prompts
from perfwarden.harness.sglang_target import SGLangEnvError, check_model_path, find_sglang_python
from perfwarden.harness.target_config import SGLangConfig

STANDIN = Path(__file__).resolve().parent / "sglang_standin"
runner = CliRunner()

# ServerArgs field names of sglang (python/sglang/srt/server_args.py, sgl-project/sglang@001067ff, read
# through the code index; also the keys of /server_info, which is dataclasses.asdict(server_args)).
# Transcribed by hand, not generated from SGLangConfig: a knob that is not one of these is not a flag.
SGLANG_SERVER_ARGS = {
    "mem_fraction_static", "chunked_prefill_size", "max_running_requests", "schedule_policy",
    "attention_backend", "cuda_graph_max_bs", "cuda_graph_bs", "disable_cuda_graph", "enable_torch_compile",
    "disable_radix_cache", "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "kv_cache_dtype", "quantization", "dtype", "tp_size",
}


@pytest.fixture(scope="module")
def sglang_python(tmp_path_factory) -> str:
    """An interpreter whose ``sglang`` package is the stand-in (perfwarden's own python plus PYTHONPATH)."""
    wrapper = tmp_path_factory.mktemp("sglang-env") / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{STANDIN}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("weights")
    (path / "config.json").write_text("{}")
    return str(path)


def lab(model_dir: str, sglang_python: str, **kw) -> SGLangLab:
    return SGLangLab(model_path=model_dir, python=sglang_python, start_timeout_s=60.0, max_tokens=8,
                     offline_samples=4, parity_tokens=12, **kw)


def plan(leg: str, role: str = "baseline", parent: str | None = None, **changes) -> LegPlan:
    return LegPlan(leg=leg, role=role, config=SGLangConfig.of(changes), overlay=Overlay(config=changes),
                   parent=parent, purpose="test")


# ------------------------------------------------------------------------------------- the config model


def test_every_sglang_knob_is_an_sglang_server_argument():
    assert set(SGLangConfig.model_fields) <= SGLANG_SERVER_ARGS, set(SGLangConfig.model_fields) - SGLANG_SERVER_ARGS


def test_the_default_search_covers_the_issues_levers_and_leaves_lossy_knobs_to_a_named_search():
    default = SGLangConfig.search_knobs(None)
    assert default == ["mem_fraction_static", "chunked_prefill_size", "max_running_requests", "schedule_policy",
                       "attention_backend"]
    named = SGLangConfig.search_knobs(["kv_cache_dtype", "speculative_algorithm", "quantization", "cuda_graph_max_bs"])
    assert named == ["cuda_graph_max_bs", "speculative_algorithm", "kv_cache_dtype", "quantization"]  # when named
    assert SGLangConfig.allowed_values("kv_cache_dtype") == ("auto", "fp8_e5m2", "fp8_e4m3")
    assert not any(SGLangConfig.spec(k).lossless for k in ("kv_cache_dtype", "quantization", "dtype"))


def test_memory_fraction_is_pinned_so_no_step_moves_it_silently():
    """Left None, SGLang derives it from chunked_prefill_size and cuda_graph_max_bs: a step on those
    would change two server_info keys."""
    assert SGLangConfig.defaults()["mem_fraction_static"] == 0.85


# ----------------------------------------------------------------------------------- environment checks


def test_the_environment_check_finds_sglang_or_says_how_to_get_it(sglang_python, tmp_path, monkeypatch):
    python, version = find_sglang_python(sglang_python)
    assert python == sglang_python and version == "0.0.0+standin"
    monkeypatch.setenv("PERFWARDEN_SGLANG_PYTHON", sglang_python)
    assert find_sglang_python(None)[0] == sglang_python  # the environment variable is the fallback
    monkeypatch.delenv("PERFWARDEN_SGLANG_PYTHON")
    if importlib.util.find_spec("sglang") is None:  # perfwarden's own environment has no sglang
        with pytest.raises(SGLangEnvError, match="cannot `import sglang`.*--sglang-python"):
            find_sglang_python(None)
    with pytest.raises(SGLangEnvError, match="not an executable"):
        find_sglang_python(str(tmp_path / "nope" / "python"))
    with pytest.raises(SGLangEnvError, match="--model PATH"):
        check_model_path(None)
    with pytest.raises(SGLangEnvError, match="does not exist"):
        check_model_path(str(tmp_path / "missing-weights"))


@pytest.mark.parametrize("command", ["run", "measure"])
def test_a_missing_model_or_an_environment_without_sglang_exits_3_before_anything_runs(command, tmp_path, model_dir,
                                                                                        sglang_python):
    out = tmp_path / "out"
    base = [command, "--target", "sglang", "--out", str(out)] + (["--leg", "b"] if command == "measure" else [])
    no_model = runner.invoke(app, base + ["--sglang-python", sglang_python])
    assert no_model.exit_code == 3, no_model.output
    assert "--model PATH" in no_model.output
    no_sglang = runner.invoke(app, base + ["--model", model_dir, "--sglang-python", sys.executable])
    if importlib.util.find_spec("sglang") is None:
        assert no_sglang.exit_code == 3, no_sglang.output
        assert "cannot `import sglang`" in " ".join(no_sglang.output.split())
    assert not out.exists()  # nothing was started or written
    wrong_target = runner.invoke(app, [command, "--target", "embedded", "--model", model_dir] +
                                 (["--out", str(out), "--leg", "b"] if command == "measure" else []))
    assert wrong_target.exit_code == 2 and "sglang options" in wrong_target.output


def test_a_resumed_sglang_run_checks_its_environment_again_and_a_bad_baseline_knob_is_refused(tmp_path, model_dir,
                                                                                                sglang_python,
                                                                                                monkeypatch):
    from perfwarden.formats.records import write_json_atomic
    from perfwarden.orchestrator.settings import RunSettings

    run = tmp_path / "run"
    run.mkdir()
    gone = str(tmp_path / "removed-env" / "bin" / "python")  # the SGLang environment was deleted since
    write_json_atomic(run / "settings.json", RunSettings(target="sglang", model=model_dir))
    result = runner.invoke(app, ["run", "--resume", str(run), "--sglang-python", gone])
    assert result.exit_code == 3 and "not an executable" in result.output, result.output
    monkeypatch.delenv("PERFWARDEN_SGLANG_PYTHON", raising=False)
    asked = runner.invoke(app, ["run", "--resume", str(run)])  # the run never names its interpreter: ask for it
    assert asked.exit_code == 3 and "name the SGLang interpreter to resume it with" in " ".join(asked.output.split())
    bad = runner.invoke(app, ["run", "--target", "sglang", "--model", model_dir, "--sglang-python", sglang_python,
                              "--out", str(tmp_path / "bad"), "--set", "mem_fraction_static=1.5"])
    assert bad.exit_code == 3 and "mem_fraction_static" in bad.output and not (tmp_path / "bad").exists()


# --------------------------------------------------------------------------------------------- the lab


@pytest.mark.integration
def test_legs_are_interleaved_with_one_server_at_a_time(tmp_path, model_dir, sglang_python):
    live, most = [], [0]
    lock = threading.Lock()

    class Watched(SGLangLab):
        def make_target(self, leg_dir, config):
            target = super().make_target(leg_dir, config)
            start, stop = target.start, target.stop

            def started():
                info = start()
                with lock:
                    live.append(target)
                    most[0] = max(most[0], len(live))
                return info

            def stopped(*a, **kw):
                with lock:
                    if target in live:
                        live.remove(target)
                return stop(*a, **kw)

            target.start, target.stop = started, stopped
            return target

    run = tmp_path / "run"
    lab_ = Watched(model_path=model_dir, python=sglang_python, start_timeout_s=60.0, max_tokens=8,
                   offline_samples=4, parity_tokens=12)
    status = lab_.measure(run, [plan("base"), plan("cand", "candidate", "base", mem_fraction_static=0.9)], reps=2)
    assert status == {"base": "ok", "cand": "ok"}
    assert most[0] == 1 and live == []  # never two SGLang servers on the device at once
    starts = {}
    for leg in ("base", "cand"):
        d = run / "legs" / leg
        log = (d / "server.log").read_text()
        assert log.count("=== perfwarden SglangTarget start") == 2 and log.count("server_args=ServerArgs(") == 2
        info = json.loads((d / "server_info.json").read_text())
        assert info["mem_fraction_static"] == (0.9 if leg == "cand" else 0.85)
        assert info["model_path"] == model_dir and "--model-path" in log
        reps = [json.loads(line) for line in (d / "bench_runs.jsonl").read_text().splitlines()]
        assert [r["rep"] for r in reps] == [0, 1]
        assert all(r["completed"] == 4 and not any(r["errors"]) for r in reps)
        assert all(r["server_info"]["mem_fraction_static"] == info["mem_fraction_static"] for r in reps)
        assert all("contention" in r for r in reps)
        starts[leg] = [r["started_at"] for r in reps]
        outputs = [json.loads(line) for line in (d / "outputs.jsonl").read_text().splitlines()]
        assert len(outputs) == len(parity_prompts()) and all(o["text"].strip() for o in outputs)
        spec = json.loads((d / "leg.json").read_text())
        assert spec["status"] == "ok" and spec["workload"]["scenario"] == "Offline"
    assert starts["base"][0] < starts["cand"][0] < starts["cand"][1] < starts["base"][1]  # A B, then B A
    for f in ("legs/base/server_info.json", "legs/cand/outputs.jsonl", "legs/cand/bench_runs.jsonl"):
        assert seal.is_current(run / f), f


def test_a_crash_mid_rep_and_a_refused_start_fail_the_leg_with_the_servers_words(tmp_path, model_dir, sglang_python,
                                                                               monkeypatch):
    monkeypatch.setenv("SGLANG_STANDIN_FAIL_AFTER", str(len(parity_prompts()) + 1))
    run = tmp_path / "run"
    status = lab(model_dir, sglang_python).measure(run, [plan("base")], reps=2)
    assert status["base"].startswith("failed:") and "illegal memory access" in status["base"]
    spec = json.loads((run / "legs" / "base" / "leg.json").read_text())
    assert spec["status"] == "failed"
    monkeypatch.delenv("SGLANG_STANDIN_FAIL_AFTER")
    monkeypatch.setenv("SGLANG_STANDIN_REFUSE", "1")
    status = lab(model_dir, sglang_python).measure(tmp_path / "run2", [plan("base")], reps=1)
    assert status["base"].startswith("failed:") and "simulated bad argument" in status["base"]
    spec = json.loads((tmp_path / "run2" / "legs" / "base" / "leg.json").read_text())
    assert spec["status"] == "failed" and spec["failure"].startswith("server did not start")


def test_no_kernel_path_on_sglang(tmp_path, model_dir, sglang_python):
    lab_ = lab(model_dir, sglang_python)
    assert lab_.overridable_ops() == [] and lab_.alternatives("rmsnorm") == []
    with pytest.raises(LabError, match="--no-kernels"):
        lab_.profile(tmp_path, SGLangConfig.defaults())
    with pytest.raises(LabError, match="--no-kernels"):
        lab_.opbench(tmp_path, "rmsnorm", [], [])


def test_the_quality_eval_of_a_lossy_knob_runs_through_the_sglang_endpoint(tmp_path, model_dir, sglang_python):
    run = tmp_path / "run"
    base, cand = plan("base"), plan("cand", "candidate", "base", kv_cache_dtype="fp8_e4m3")
    assert lab(model_dir, sglang_python).quality(run, cand, base) == "pw-qa-exact-v1"
    for leg in ("base", "cand"):
        result = json.loads((run / "quality" / f"pw-qa-exact-v1@{leg}.json").read_text())
        assert result["completed"] and result["n"] == 40 and result["errors"] == 0
        assert result["model"] == model_dir and result["endpoint"].endswith("/v1/chat/completions")
        log = (run / "quality" / "servers" / leg / "server.log").read_text()
        assert ("'--kv-cache-dtype', 'fp8_e4m3'" in log) == (leg == "cand")  # each on its leg's own config
    assert json.loads((run / "quality" / "pw-qa-exact-v1@cand.json").read_text())["baseline_leg"] == "base"


@pytest.mark.integration
def test_the_auditor_audits_an_sglang_ab_from_the_raw(tmp_path, model_dir, sglang_python):
    """An honest class-B step measured on the stand-in: the auditor reads the legs the SGLang lab wrote
    (sealed), finds the declared knob in server_info, and does not call the evidence missing or forged."""
    run = tmp_path / "run"
    run.mkdir()  # run.json first, as the graph writes it: it names the target the auditor holds each key to
    write_json_atomic(run / "run.json", RunManifest(id="run", target="sglang", model=model_dir))
    legs = [plan("base"), plan("aa", "aa"), plan("cand", "candidate", "base", mem_fraction_static=0.9)]
    assert lab(model_dir, sglang_python).measure(run, legs, reps=3) == {"base": "ok", "aa": "ok", "cand": "ok"}
    proposal = Proposal(id="cfg-mem_fraction_static=0.9", kind="config", producer="config_tuner",
                        config={"mem_fraction_static": 0.9}, believed_class="B", lossless=True, reps=3)
    claim = integrator.patch_claim(proposal, "base", "cand", None, ["base", "aa"]).model_copy(update={"seq": 1})
    (run / "claims").mkdir()
    path = run / "claims" / "001-patch.json"
    path.write_text(claim.model_dump_json())
    verdict = audit_claim(run, claim, "claims/001-patch.json", "0" * 64, key=seal.find_key_file(run))
    codes = {f.code for f in verdict.findings}
    assert not verdict.degraded, verdict.degraded_reasons
    assert not codes & {"EVIDENCE_MISSING", "EVIDENCE_CORRUPT", "EVIDENCE_TAMPERED", "NOT_INTERLEAVED",
                        "SERVER_CRASH", "REQUEST_ERRORS", "PARITY_MISMATCH", "NONCOHERENT_REFERENCE",
                        "UNKNOWN_KNOB"}, [(f.code, f.message) for f in verdict.findings]
    # the stand-in's speed does not depend on the memory fraction, so whether the delta is significant is
    # chance (a no-op step must be DELTA_NOT_SIGNIFICANT when it is not); nothing else may FAIL
    fails = [f for f in verdict.findings if f.severity == "FAIL" and f.code != "DELTA_NOT_SIGNIFICANT"]
    assert not fails, [(f.code, f.message) for f in verdict.findings]
    # the one declared difference and its registered consequence (the KV pool, shown unused by the
    # server's own "token usage" lines); the port differs too, and is inert
    assert set(verdict.server_info_diff) == {"mem_fraction_static", "max_total_num_tokens", "port"}, \
        verdict.server_info_diff
    derived = [f for f in verdict.findings if f.code == "CONDITIONS_DIFFER"]
    assert [f.severity for f in derived] == ["INFO"] and "max_total_num_tokens" in derived[0].message
    assert verdict.lever_detected == "B" and verdict.correctness == "verified"


# ------------------------------------------------------------------------------------------ the CLI


@pytest.mark.slow  # over 2 s on a 2-core machine: the full suite runs it
def test_measure_writes_an_sglang_leg(tmp_path, model_dir, sglang_python):
    out = tmp_path / "m"
    result = runner.invoke(app, ["measure", "--target", "sglang", "--model", model_dir, "--sglang-python", sglang_python,
                                 "--out", str(out), "--leg", "b", "--reps", "2", "--scenario", "offline",
                                 "--max-tokens", "8", "--set", "schedule_policy=lpm", "--set", "cuda_graph_max_bs=8"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["target"] == "sglang" and manifest["model"] == model_dir
    info = json.loads((out / "legs" / "b" / "server_info.json").read_text())
    assert info["schedule_policy"] == "lpm" and info["cuda_graph_max_bs"] == 8 and info["cuda_graph_bs"] == [1, 2, 4, 8]
    assert len((out / "legs" / "b" / "bench_runs.jsonl").read_text().splitlines()) == 2
    bad = runner.invoke(app, ["measure", "--target", "sglang", "--model", model_dir, "--sglang-python", sglang_python,
                              "--out", str(tmp_path / "bad"), "--leg", "b", "--set", "threads=2"])
    assert bad.exit_code == 3 and "unknown knob 'threads'" in bad.output  # an embedded knob is not an sglang one


@pytest.mark.slow
def test_run_on_sglang_reaches_a_report(tmp_path, model_dir, sglang_python, monkeypatch):
    monkeypatch.setenv("PERFWARDEN_SGLANG_PYTHON", sglang_python)
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--target", "sglang", "--model", model_dir, "--out", str(out),
                                 "--budget-minutes", "4", "--levers", "schedule_policy=lpm", "--reps", "2",
                                 "--set", "chunked_prefill_size=4096"])
    assert result.exit_code == 0, result.output
    assert "tunes server arguments only (--no-kernels)" in " ".join(result.output.split())
    settings = json.loads((out / "settings.json").read_text())
    assert settings["target"] == "sglang" and settings["kernels"] is False
    assert "sglang_python" not in settings and settings["model"] == model_dir  # never a program to run
    assert settings["base_config"] == {"chunked_prefill_size": 4096}
    assert json.loads((out / "run.json").read_text())["model"] == model_dir
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").is_file()
    verdicts = [json.loads(p.read_text()) for p in sorted((out / "verdicts").glob("*.json"))]
    assert verdicts and verdicts[0]["scope"] == "baseline"
    evidence = {"EVIDENCE_MISSING", "EVIDENCE_CORRUPT", "EVIDENCE_TAMPERED", "SERVER_CRASH", "REQUEST_ERRORS",
                "NONCOHERENT_REFERENCE", "UNKNOWN_KNOB"}
    assert not [f["code"] for v in verdicts for f in v["findings"] if f["code"] in evidence]
    if not any(v["scope"] == "patch" for v in verdicts):
        # Only a busy machine (other jobs on a shared CI runner) keeps the search from starting: the
        # auditor then refuses every baseline as contended, and the report says so.
        baselines = [v for v in verdicts if v["scope"] == "baseline"]
        assert all(any(f["code"] in ("CONTENDED_LEG", "NOISY_BASELINE") for f in v["findings"]) for v in baselines)
        assert "no baseline passed" in (out / "report.md").read_text()
    assert not (out / "profile").exists() and not (out / "opbench").exists()
    info = json.loads((out / "legs" / "baseline" / "server_info.json").read_text())
    assert info["chunked_prefill_size"] == 4096 and info["mem_fraction_static"] == 0.85
    assert "banked" in report and "rejected" in report
