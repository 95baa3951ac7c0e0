"""Issue 9's judgement rules at unit level: the knob registry, the user's quality registry, answer keys
that can say what is right, prose read by meaning, parity from what was served. (Each rule also has
positive and near-miss fixtures: ``proof/fixtures/jdg-*``.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfwarden.auditor import registry
from perfwarden.auditor.gates import prose
from perfwarden.auditor.model import roles
from perfwarden.cli.main import app
from perfwarden.orchestrator.synth import BASE_INFO, COHERENT_TEXTS, write_json_atomic
from perfwarden.verify.answer_key import AnswerKeyError, answer_problems, load_answer_key, parse_answer_key

from auditor_cases import audit, build, codes

REC = Path(__file__).resolve().parents[1] / "proof" / "fixtures"


# ------------------------------------------------------------------------------- rule 1: registry

SGLANG_VLLM_NUMERICS = ["quantization", "torchao_config", "kv_cache_dtype", "speculative_algorithm",
                        "speculative_num_draft_tokens", "speculative_config", "attention_backend",
                        "prefill_attention_backend", "chunked_prefill_size", "enable_chunked_prefill",
                        "mem_fraction_static", "gpu_memory_utilization", "cuda_graph_max_bs", "cuda_graph_sizes",
                        "enforce_eager", "max_num_batched_tokens", "max_num_seqs", "tensor_parallel_size",
                        "enable_prefix_caching", "disable_radix_cache", "schedule_policy", "dtype", "load_format"]


@pytest.mark.parametrize("key", SGLANG_VLLM_NUMERICS)
def test_registry_knows_the_numerics_and_scheduling_knobs(key):
    assert roles.is_known(key) and registry.lever_class(key)[0] in ("A", "B")


def test_lossiness_lives_with_the_knobs():
    assert registry.is_lossy_change("kv_cache_dtype", "auto", "fp8_e5m2")
    assert registry.is_lossy_change("quantization", None, "fp8")
    assert registry.is_lossy_change("dtype", "float32", "bfloat16")
    assert registry.is_lossy_change("load_format", "auto", "dummy")  # random weights
    assert not registry.is_lossy_change("chunked_prefill_size", 8192, 4096)
    assert not registry.is_lossy_change("kv_cache_dtype", "fp8_e5m2", "fp8_e5m2")  # no change, no loss


def test_every_embedded_server_info_key_is_known():
    """A real embedded run must never trip UNKNOWN_KNOB: every key its servers report is classified."""
    keys = set()
    for info in REC.glob("rec-*/run/legs/*/server_info.json"):
        from perfwarden.auditor.gates.conditions import flatten

        keys |= set(flatten(json.loads(info.read_text())))
    unknown = sorted(k for k in keys if not roles.is_known(k))
    assert keys and unknown == []


# ------------------------------------------------------------------------ rule 3: user quality evals


def _user_registry(tmp_path: Path, **extra) -> Path:
    items = tmp_path / "items.txt"
    items.write_text("my item set\n")
    spec = {"description": "team eval", "metric": "accuracy", "max_drop": 0.02, "min_n": 10,
            "items_sha256": hashlib.sha256(items.read_bytes()).hexdigest(), **extra}
    path = tmp_path / "evals.json"
    path.write_text(json.dumps({"evals": {"team-eval-v1": spec}}))
    return path


def _records(run: Path, digest: str, base=0.80, cand=0.79, n=50) -> None:
    for leg, score in (("base", base), ("cand", cand)):
        rec = {"eval_id": "team-eval-v1", "leg": leg, "n": n, "score": score, "items_sha256": digest}
        if leg == "cand":
            rec.update(baseline_score=base, baseline_leg="base")
        write_json_atomic(run / "quality" / f"team-eval-v1@{leg}.json", rec)


def test_an_eval_registered_from_a_file_counts(tmp_path, monkeypatch):
    path = _user_registry(tmp_path)
    monkeypatch.setenv(registry.QUALITY_REGISTRY_ENV, str(path))
    run = tmp_path / "run"
    claim = build(run, cand_info={**BASE_INFO, "port": 8101, "quantization": "int8_dynamic"}, claim={
        "lever": {"name": "int8", "lever_class": "B", "config_keys": ["quantization"]},
        "correctness": {"parity": "none", "quality_eval_id": "team-eval-v1"}})
    digest = json.loads(path.read_text())["evals"]["team-eval-v1"]["items_sha256"]
    _records(run, digest)
    assert audit(run, claim).verdict == "PASS"
    _records(run, "0" * 64)  # scored on other items than the registered ones
    assert "QUALITY_EVAL_MISSING" in codes(audit(run, claim), "FAIL")
    monkeypatch.delenv(registry.QUALITY_REGISTRY_ENV)
    _records(run, digest)
    assert "QUALITY_EVAL_MISSING" in codes(audit(run, claim), "FAIL")  # not registered without the file


def test_a_user_registry_cannot_redefine_a_shipped_eval_and_bad_files_exit_3(tmp_path):
    runner = CliRunner()
    run = tmp_path / "run"
    claim = build(run)
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps({"evals": {"pw-qa-exact-v1": {"metric": "exact_match", "max_drop": 1.0}}}))
    r = runner.invoke(app, ["audit", str(run), "--claim", str(claim), "--quality-registry", str(evil)])
    assert r.exit_code == 3 and "redefines shipped evals" in r.output
    broken = tmp_path / "broken.json"
    broken.write_text('{"evals": {"x": {"metric": "accuracy"}}}')  # no max_drop
    r = runner.invoke(app, ["audit", str(run), "--claim", str(claim), "--quality-registry", str(broken)])
    assert r.exit_code == 3 and "max_drop" in r.output
    import os

    os.environ.pop(registry.QUALITY_REGISTRY_ENV, None)


def test_shipped_registry_digests_match_the_harness_items():
    root = Path(__file__).resolve().parents[1] / "harness"
    evals = registry.quality_evals()
    assert evals["pw-qa-exact-v1"].items_sha256 == hashlib.sha256((root / "quality_items.json").read_bytes()).hexdigest()
    assert evals["pw-ppl-v1"].items_sha256 == hashlib.sha256((root / "quality_text.txt").read_bytes()).hexdigest()


# --------------------------------------------------------------------------------- rule 11: keys


def _key(**answer):
    return {"schema_version": 1, "answers": [{"claim": "claims/001-patch.json", **answer}]}


def test_answer_keys_allow_sets_and_groups_and_refuse_typos():
    key = parse_answer_key(_key(verdict=["FLAG", "FAIL"], must_include_any=[["UNKNOWN_KNOB", "CONDITIONS_DIFFER"]]))
    assert key.answers[0].verdict == ["FLAG", "FAIL"] and key.answers[0].action == []
    for bad, fragment in [(_key(verdict="FAIL", must_include=["CONDITION_DIFFER"]), "not in the catalog"),
                          (_key(verdict="MAYBE"), "verdict"),
                          (_key(verdict="FAIL", must_include_any=[[]]), "empty"),
                          (_key(verdict="PASS", must_include=["UNKNOWN_KNOB"]), "PASS answer"),
                          (_key(verdict="FAIL", must_include=["UNKNOWN_KNOB"], must_exclude=["UNKNOWN_KNOB"]),
                           "both required and excluded"),
                          ({**_key(verdict="FAIL"), "answer": []}, "answer"),
                          (_key(verdict="PASS", banks=False), "PASS answer cannot refuse banking"),
                          (_key(verdict="FAIL", banks=True), "FAIL answer cannot bank"),
                          (_key(verdict="FLAG", headline_rederived=[5.0, 1.0]), "not a finite range"),
                          (_key(verdict="FLAG", headline_rederived=[1.0]), "headline_rederived"),
                          (_key(verdict="FAIL", must_inclde=["X"]), "must_inclde")]:
        with pytest.raises(AnswerKeyError, match=fragment):
            parse_answer_key(bad)


def test_an_answer_scores_what_is_banked_and_at_what_size():
    answer = parse_answer_key(_key(verdict="FLAG", banks=True, headline_rederived=[40.0, 44.0])).answers[0]
    assert answer_problems(answer, "FLAG", "downgrade_headline", set(), [], True, 41.9) == []
    assert answer_problems(answer, "FLAG", "downgrade_headline", set(), [], False, 41.9) == ["banks False != expected True"]
    assert answer_problems(answer, "FLAG", "downgrade_headline", set(), [], True, 73.1) == [
        "re-derived headline +73.10% outside the expected [+40.00%, +44.00%]"]
    assert answer_problems(answer, "FLAG", "downgrade_headline", set(), [], True, None) == [
        "re-derived headline none outside the expected [+40.00%, +44.00%]"]


def test_backtest_scores_groups_and_exits_3_on_a_damaged_key(tmp_path):
    import shutil

    dst = tmp_path / "case"
    shutil.copytree(REC / "jdg-knob-unknown-declared", dst)
    key = json.loads((dst / "answer_key.json").read_text())
    key["answers"][0].update(verdict=["FLAG", "FAIL"], must_include_any=[["CONDITIONS_DIFFER", "UNKNOWN_KNOB"]])
    (dst / "answer_key.json").write_text(json.dumps(key))
    assert CliRunner().invoke(app, ["backtest", str(dst), "--no-mlperf"]).exit_code == 0
    key["answers"][0].update(must_include_any=[["CONDITIONS_DIFFER"]], must_exclude=[])
    (dst / "answer_key.json").write_text(json.dumps(key))
    r = CliRunner().invoke(app, ["backtest", str(dst), "--no-mlperf", "--json"])
    assert r.exit_code == 1 and "none of ['CONDITIONS_DIFFER'] raised" in r.stdout
    key["answers"][0]["must_include"] = ["NOT_A_CODE"]
    (dst / "answer_key.json").write_text(json.dumps(key))
    r = CliRunner().invoke(app, ["backtest", str(dst), "--no-mlperf"])
    assert r.exit_code == 3 and "NOT_A_CODE" in r.output
    assert load_answer_key(REC / "syn-clean-patch-win" / "answer_key.json").answers[0].verdict == ["PASS"]


# ----------------------------------------------------------------------------------- rule 6: prose


def _read(line: str):
    text = line
    for rx in prose.NON_RESULTS:
        text = rx.sub(" ", text)
    return [(q.token, q.unit, q.families, q.legs) if q else why for q, why in
            prose.read_numbers(text, "base", "cand", ["base", "cand"])]


def test_prose_skips_what_is_not_a_result():
    assert _read("SmolLM2-135M on torch 2.13.0 and Python 3.11, 2026-11-22, Nov 22, 2026, in 2026.") == ["a year"]
    assert _read("We scored 40 items over 24 prompts.") == ["a count of things", "a count of things"]
    assert _read("Our target was a 5% gain; the goal for 2027 is 20%.") == ["a goal, not a result", "a year",
                                                                            "a goal, not a result"]
    assert _read("The goal was met: throughput rose 25%.") == [("25", "%", ("throughput",), ())]


def test_prose_reads_unit_metric_and_leg():
    assert _read("The baseline served 110.1 tok/s") == [("110.1", "tok/s", ("throughput",), ("base",))]
    assert _read("TTFT went from 100.0 to 62.0 ms") == [("100.0", "ms", ("ttft",), ("base",)),
                                                        ("62.0", "ms", ("ttft",), ())]


# ---------------------------------------------------------------------------------- rule 4: served


def test_served_parity_is_not_checked_without_prompt_ids(tmp_path):
    v = audit(tmp_path, build(tmp_path))  # synthetic reps carry no prompt_ids
    assert v.verdict == "PASS"
    assert any(n.startswith("served parity: the bench lines carry no prompt_ids") for n in v.not_checked)


def test_served_texts_must_match_across_legs(tmp_path):
    from perfwarden.orchestrator.synth import reps

    def served(leg, values, offset, texts):
        lines = reps(leg, values, offset)
        for line in lines:
            line["prompt_ids"] = [f"p{i:02d}" for i in range(8)]
            line["generated_texts"] = texts
        return lines

    same = [t + " More." for t in COHERENT_TEXTS[:8]]
    v = audit(tmp_path, build(tmp_path, base_reps=served("base", [100.0, 101.2, 99.1, 100.6, 99.7], 0, same),
                              cand_reps=served("cand", [110.3, 109.6, 111.0, 110.1, 109.2], 1,
                                               [t.upper() for t in same])))
    assert v.verdict == "FAIL" and "PARITY_MISMATCH" in codes(v, "FAIL") and v.correctness == "failed"
    f = next(f for f in v.findings if f.gate == "served" and f.severity == "FAIL")
    assert {e.file for e in f.evidence} >= {"legs/cand/bench_runs.jsonl"}


def _sglang_step(tmp_path, declared: str, changes: dict) -> set[str]:
    """The chunked-prefill fixture re-declared as ``declared`` with ``changes`` in the candidate's
    server_info (every copy): the FAIL codes the auditor raises."""
    import shutil

    from perfwarden.auditor.audit import audit_path

    run = tmp_path / "run"
    shutil.copytree(REC / "jdg-knob-sglang-chunked-prefill" / "run", run)
    info_path = run / "legs" / "cand" / "server_info.json"
    base_info = json.loads((run / "legs" / "base" / "server_info.json").read_text())
    info = {**base_info, **{k: v for k, v in json.loads(info_path.read_text()).items() if k in ("port", "pid")}}
    info.update(changes)
    info_path.write_text(json.dumps(info))
    spec_path = run / "legs" / "cand" / "leg.json"
    spec = json.loads(spec_path.read_text())
    spec["overlay"]["config"] = changes
    spec_path.write_text(json.dumps(spec))
    claim_path = next((run / "claims").glob("*.json"))
    claim = json.loads(claim_path.read_text())
    claim["lever"].update(name=declared, lever_class="A", config_keys=[declared])
    claim_path.write_text(json.dumps(claim))
    verdict = audit_path(run, claim_path)
    return {f.code for f in verdict.findings if f.severity == "FAIL" and f.code == "CONDITIONS_DIFFER"}


def test_sglang_fills_cuda_graph_bs_from_cuda_graph_max_bs_and_that_is_not_a_second_knob(tmp_path):
    """SGLang derives ``cuda_graph_bs`` from ``cuda_graph_max_bs``: a declared max-bs step moves both.
    Near miss: the same ``cuda_graph_bs`` change under a chunked-prefill declaration is a confound."""
    both = {"cuda_graph_max_bs": 16, "cuda_graph_bs": [1, 2, 4, 8, 16]}
    assert _sglang_step(tmp_path / "a", "cuda_graph_max_bs", both) == set()
    assert _sglang_step(tmp_path / "b", "chunked_prefill_size", {"chunked_prefill_size": 4096,
                                                                   "cuda_graph_bs": [1, 2, 4, 8, 16]}) == {"CONDITIONS_DIFFER"}
