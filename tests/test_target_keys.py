"""The registry says which keys each target reports and fails closed on the rest (issue 17 §2).

Attacks: a key the registry does not know, a confusable or case variant of a known key, a key of another
target -- each held EQUAL in both legs, where the conditions diff sees nothing. Near misses: an honest
leg of every target (what its harness code really writes), keys reordered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from perfwarden.auditor import registry
from perfwarden.auditor.evidence import LegEvidence
from perfwarden.auditor.gates.conditions import flatten
from perfwarden.auditor.gates.process import FIELD_TYPES
from perfwarden.auditor.gates.target_keys import check_target_keys
from perfwarden.formats import vllm_metrics
from perfwarden.harness import node_identity, sandbox
from perfwarden.harness.process_conditions import THREAD_ENV
from perfwarden.harness.sglang_target import SglangTarget
from perfwarden.harness.target_config import EMBEDDED_OPS, EmbeddedConfig, SGLangConfig, VLLMConfig
from perfwarden.harness.targets import EmbeddedTarget
from perfwarden.harness.vllm_target import VllmTarget, engine_report, parse_log
from perfwarden.orchestrator.synth import BASE_INFO, write_manifest
from perfwarden.proof.transcribe_geak import SGLANG_INFO

sys.path.insert(0, str(Path(__file__).resolve().parent))
from auditor_cases import audit, build, codes  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
DATA = Path(__file__).parent / "data"
HARNESS_ADDED = {"process_conditions": {"engine": "perfwarden.harness.embedded_server", "cpu_count": 2,
                                        "cpus_allowed": [0, 1], "cpu_quota_cores": None, "nice": 0,
                                        "thread_env": {"OMP_NUM_THREADS": "2"}},
                 "node": node_identity.identity("0.1.0")}


def _recorded_embedded() -> dict:
    """server_info.json of a leg the real embedded server reported (proof/record_cases.py)."""
    return json.loads((FIXTURES / "rec-aa-pair" / "run" / "legs" / "base" / "server_info.json").read_text())


def _vllm_info() -> dict:
    """server_info as harness/vllm_target.py builds it from a real vLLM 0.32.0 start's log and metrics."""
    log = parse_log((DATA / "vllm_server_0.32.0.log").read_text())
    labels = vllm_metrics.labels_of((DATA / "vllm_metrics_0.32.0.txt").read_text(), "vllm:cache_config_info")
    return engine_report({"max_num_seqs": 4, "model_path": "/m"}, log, "0.32.0", labels)[0]


HONEST = {"embedded": _recorded_embedded, "sglang": lambda: dict(SGLANG_INFO), "vllm": _vllm_info,
          "synthetic": lambda: dict(BASE_INFO)}


def _stray(target: str | None, info: dict) -> list[str]:
    result = check_target_keys(Path("/nonexistent"), target, [LegEvidence(name="leg", server_info=info)])
    return [k for f in result.findings for k in f.measured["keys"]]


# ------------------------------------------------------------------------------- near misses


@pytest.mark.parametrize("target", sorted(HONEST))
def test_an_honest_leg_of_every_target_reports_only_its_own_keys(target):
    engine = {"sglang": "SglangTarget", "vllm": "VllmTarget"}.get(target, "perfwarden.harness.embedded_server")
    added = {**HARNESS_ADDED, "process_conditions": {**HARNESS_ADDED["process_conditions"], "engine": engine}}
    info = {**HONEST[target](), **added}
    assert _stray(target, info) == []
    assert _stray(target, dict(reversed(list(info.items())))) == []  # keys reordered


def test_every_knob_and_record_the_harness_writes_is_listed():
    """The lists cover what the harness code writes (the auditor never imports it: this test holds them
    together, as test_target_config holds levers.json to the config models)."""
    for target, model in (("embedded", EmbeddedConfig), ("sglang", SGLangConfig), ("vllm", VLLMConfig)):
        assert all(registry.target_reports(target, k) for k in model.model_fields), target
    for target in registry.targets():
        assert all(registry.target_reports(target, f"process_conditions.{k}") for k in FIELD_TYPES)
        assert all(registry.target_reports(target, f"process_conditions.thread_env.{v}") for v in THREAD_ENV)
        assert all(registry.target_reports(target, f"node.{k}") for k in node_identity.identity(None))
    assert all(registry.target_reports("embedded", f"op_overrides_detail.{op}.sha256") for op in EMBEDDED_OPS)
    for target, cls in (("embedded", EmbeddedTarget), ("sglang", SglangTarget), ("vllm", VllmTarget)):
        # what ServerTarget.start records as process_conditions.engine
        assert registry.target_engines(target) == {getattr(cls, "module", None) or cls.__name__}, target


@pytest.mark.integration
@pytest.mark.skipif(sandbox.available() is not None, reason=f"sandbox unavailable: {sandbox.available()}")
def test_a_real_embedded_server_reports_only_listed_keys(tmp_path, monkeypatch):
    """What the embedded server really writes (sandboxed, with an op override engaged), measured: 57 keys on
    2026-11-26, all listed. The server imports perfwarden from the installed package, not a test's path."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    override = Path(__file__).resolve().parents[1] / "harness" / "ops" / "rmsnorm_alt.py"
    target = EmbeddedTarget(tmp_path / "run" / "legs" / "base", {"threads": 1, "op_overrides": {
        "rmsnorm": f"{override}:rmsnorm"}}, start_timeout_s=300)
    try:
        info = target.start()
    finally:
        target.stop()
    assert "op_overrides_detail.rmsnorm.modules_patched" in flatten(info)
    assert [k for k in flatten(info) if not registry.target_reports("embedded", k)] == []


# ------------------------------------------------------------------------------- the attacks (gate)


def test_a_key_no_target_reports_is_stray():
    assert _stray("embedded", {**_recorded_embedded(), "kv_turbo": 1}) == ["kv_turbo"]


@pytest.mark.parametrize("variant", ["Threads", "threads ", "thread", "tһreads", "max-batch-size", "THREADS"])
def test_a_confusable_or_case_variant_of_a_known_key_is_stray(variant):
    assert _stray("embedded", {**_recorded_embedded(), variant: 2}) == [variant]


@pytest.mark.parametrize("target,foreign", [("embedded", "mem_fraction_static"), ("sglang", "max_batch_size"),
                                            ("vllm", "response_cache"), ("embedded", "vllm_version"),
                                            ("sglang", "op_overrides.rmsnorm.deeper")])
def test_a_key_of_another_target_or_deeper_than_listed_is_stray(target, foreign):
    assert _stray(target, {**HONEST[target](), foreign: 0.9}) == [foreign]


def test_a_run_that_names_no_listed_target_cannot_attribute_any_key():
    assert _stray(None, {"threads": 2}) == ["threads"]
    assert _stray("tgi", {"threads": 2}) == ["threads"]
    assert _stray(None, {}) == []  # nothing to attribute


def test_a_leg_whose_recorded_engine_is_another_target_s_cannot_be_attributed():
    sglang_launched = {**HARNESS_ADDED["process_conditions"], "engine": "SglangTarget"}
    assert _stray("embedded", {**_recorded_embedded(), "process_conditions": sglang_launched})
    assert _stray("sglang", {**SGLANG_INFO, "process_conditions": sglang_launched}) == []
    assert _stray("synthetic", {**BASE_INFO, "process_conditions": sglang_launched}) == []  # it stands in for sglang


# ------------------------------------------------------------------------------- end to end


def _equal_in_both(tmp_path: Path, extra: dict, target: str | None = None) -> set[str]:
    claim = build(tmp_path, base_info={**BASE_INFO, **extra},
                  cand_info={**BASE_INFO, "max_batch_size": 8, "port": 8101, **extra})
    if target is not None:
        write_manifest(tmp_path, target=target)
    verdict = audit(tmp_path, claim)
    assert "CONDITIONS_DIFFER" not in codes(verdict)  # the diff sees nothing: the keys are equal
    return codes(verdict) if verdict.verdict != "PASS" else set()


def test_the_clean_run_passes(tmp_path):
    assert _equal_in_both(tmp_path, {}) == set()


@pytest.mark.parametrize("extra", [{"kv_turbo": 1}, {"Response_cache": False}, {"response_cachе": True}])
def test_an_unknown_or_confusable_key_equal_in_both_legs_is_flagged(tmp_path, extra):
    assert "UNKNOWN_KNOB" in _equal_in_both(tmp_path, extra)


def test_a_known_key_of_another_target_equal_in_both_legs_is_flagged(tmp_path):
    info = {k: v for k, v in _recorded_embedded().items() if k != "internal_states"}
    claim = build(tmp_path, base_info={**info, "mem_fraction_static": 0.5},
                  cand_info={**info, "max_batch_size": 8, "mem_fraction_static": 0.5})
    write_manifest(tmp_path, target="embedded")
    verdict = audit(tmp_path, claim)
    assert verdict.verdict != "PASS" and "UNKNOWN_KNOB" in codes(verdict)
    assert any("mem_fraction_static" in f.message for f in verdict.findings if f.code == "UNKNOWN_KNOB")


def test_an_unknown_key_only_in_the_bench_lines_copies_is_flagged(tmp_path):
    claim = build(tmp_path)
    for leg in ("base", "cand"):
        path = tmp_path / "legs" / leg / "bench_runs.jsonl"
        info = json.loads((tmp_path / "legs" / leg / "server_info.json").read_text())
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**line, "server_info": {**info, "kv_turbo": 1}}) + "\n" for line in lines))
    verdict = audit(tmp_path, claim)
    assert verdict.verdict != "PASS" and "UNKNOWN_KNOB" in codes(verdict)


def test_a_run_json_without_a_listed_target_is_flagged(tmp_path):
    claim = build(tmp_path)
    write_manifest(tmp_path, target="tgi")
    verdict = audit(tmp_path, claim)
    assert verdict.verdict != "PASS" and any("'tgi'" in f.message for f in verdict.findings if f.code == "UNKNOWN_KNOB")
