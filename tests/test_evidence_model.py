"""Coverage is a test: every field a writer in this repository produces has a role in the evidence model.

The fields are enumerated from the writers themselves, never from a hand list: the record types' own
definitions (pydantic models, msgspec structs, the LoadGen settings dataclass), the harness functions that
build nested objects (run for real: a contention sample read from /proc, a CPU window, the request body,
the embedded server's ``/server_info`` and its engine's ``internal_state``, vLLM's ``engine_report``, the
process and node stamps), and -- where a writer builds a dict literal inside a function that needs a
server and LoadGen to run -- the literal's keys read from the writer's source (``measure_rep``'s line
extras, the op bench's ``rig.json`` payload, the quality evals' extra fields). A field added to any of
them without a role fails here. ``docs/evidence-model.md`` must be what the model renders.
"""

from __future__ import annotations

import ast
import inspect
import os
import queue
import textwrap
import types
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic import BaseModel

from perfwarden.auditor import registry
from perfwarden.auditor.gates.conditions import flatten
from perfwarden.auditor.model import roles
from perfwarden.auditor.model import doc
from perfwarden.auditor.model.schema import EvidenceModel, ModelError, _check, evidence_model
from perfwarden.formats import jsonl, records, vllm_metrics
from perfwarden.formats.objective import RunObjective
from perfwarden.harness import contention, loadgen_client, node_identity
from perfwarden.harness.process_conditions import process_conditions

ROOT = Path(__file__).resolve().parents[1]
MODEL = evidence_model()


def unroled(record: str, paths: list[str], foreign: bool = False) -> list[str]:
    return sorted(p for p in paths if MODEL.role_of(record, p, foreign) is None and not MODEL.is_container(record, p))


def model_paths(model: type, prefix: str = "") -> list[str]:
    """Dotted field paths of a pydantic model, its nested models included."""
    out = []
    for name, info in model.model_fields.items():
        out.append(prefix + name)
        for arg in [info.annotation, *getattr(info.annotation, "__args__", ())]:
            inner = [arg, *getattr(arg, "__args__", ())]
            for tp in inner:
                if isinstance(tp, type) and issubclass(tp, BaseModel) and tp is not model:
                    out += model_paths(tp, f"{prefix}{name}.")
    return list(dict.fromkeys(out))


def struct_fields(struct: type) -> list[str]:
    return [f.name for f in msgspec.structs.fields(struct)]


def dict_literal_keys(node: ast.AST) -> list[str]:
    """String keys of every dict literal under ``node`` (``**`` spreads included, recursively)."""
    return [k.value for d in ast.walk(node) if isinstance(d, ast.Dict)
            for k in d.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


def function_node(fn: Any) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def keyword_values(fn: Any, names: tuple[str, ...]) -> dict[str, ast.AST]:
    """The expression passed as each keyword argument ``names`` anywhere in ``fn``'s body."""
    out = {}
    for call in ast.walk(function_node(fn)):
        if isinstance(call, ast.Call):
            for kw in call.keywords:
                if kw.arg in names:
                    out[kw.arg] = kw.value
    return out


# ------------------------------------------------------------------------------------ the model itself


def test_the_model_loads_and_every_field_has_one_role():
    assert MODEL.records and MODEL.witnesses and MODEL.mechanisms


def test_a_field_given_two_roles_is_refused():
    data = MODEL.model_dump(by_alias=True)
    data["records"]["bench_line"]["groups"][0]["fields"] = ["schema_version", "duration"]
    with pytest.raises(ModelError, match="two roles"):
        _check(EvidenceModel.model_validate(data))


def test_bookkeeping_needs_its_proof():
    data = MODEL.model_dump(by_alias=True)
    group = next(g for g in data["records"]["bench_line"]["groups"] if g["role"] == "bookkeeping")
    group["proof"] = None
    with pytest.raises(ModelError, match="without a proof"):
        _check(EvidenceModel.model_validate(data))


def test_the_most_specific_entry_wins_and_unknown_paths_have_no_role():
    assert MODEL.role_of("loadgen_detail", "requested_min_query_count").role == "condition"
    assert MODEL.role_of("loadgen_detail", "loadgen_git_log_message").role == "not_judged"
    assert MODEL.role_of("server_info", "speculative_extra_knob") is None
    assert MODEL.role_of("no_such_record", "x") is None


def test_the_doc_is_what_the_model_renders():
    page = (ROOT / "docs" / "evidence-model.md").read_text("utf-8")
    assert page == doc.render(MODEL), "docs/evidence-model.md is stale: python -m perfwarden.auditor.model.doc"


# ------------------------------------------------------------------------------------ harness records


@pytest.mark.parametrize("record,struct", [
    ("bench_line", jsonl.BenchRunLine), ("output_line", jsonl.OutputLine), ("op_bench_line", jsonl.OpBenchLine),
    ("profile_line", jsonl.ProfileLine), ("seal_entry", jsonl.SealEntry), ("engine_metrics", vllm_metrics.WitnessRecord)])
def test_every_line_schema_field_has_a_role(record, struct):
    assert unroled(record, struct_fields(struct)) == []


@pytest.mark.parametrize("record,model", [
    ("leg_spec", records.LegSpec), ("quality_eval", records.QualityEval), ("run_manifest", records.RunManifest),
    ("claim", records.Claim), ("run_objective", RunObjective)])
def test_every_pydantic_record_field_has_a_role(record, model):
    assert unroled(record, model_paths(model)) == []


def test_the_quality_evals_extra_fields_have_a_role():
    from perfwarden.harness import quality

    written = [kw.arg for node in ast.walk(ast.parse(inspect.getsource(quality)))
               if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "QualityEval"
               for kw in node.keywords if kw.arg]
    assert len(set(written)) > 10
    assert unroled("quality_eval", sorted(set(written))) == []


def test_the_bench_lines_nested_objects_have_a_role():
    extras = keyword_values(loadgen_client.measure_rep, ("contention", "server_counters", "extra"))
    assert set(dict_literal_keys(extras["contention"])) == {"start", "end", "window"}
    assert set(dict_literal_keys(extras["server_counters"])) == {"before", "after"}
    line_keys = dict_literal_keys(extras["extra"])
    loadgen = next(d for d in ast.walk(extras["extra"]) if isinstance(d, ast.Dict)
                   and any(isinstance(k, ast.Constant) and k.value == "dir" for k in d.keys))
    nested = [f"loadgen.{k.value}" for k in loadgen.keys if isinstance(k, ast.Constant)]
    top = [k for k in line_keys if f"loadgen.{k}" not in nested]
    assert unroled("bench_line", top + nested + ["contention", "server_counters"]) == []


def test_the_load_settings_and_request_body_have_a_role():
    settings = list(loadgen_client.LoadSettings().summary())
    settings += [f"extra_body.{k}" for k in loadgen_client.LoadSettings(extra_body={"ignore_eos": True}).extra_body]
    assert unroled("loadgen_settings", settings) == []
    bodies = [loadgen_client.request_params(loadgen_client.LoadSettings(endpoint=e, model=m))
              for e in ("completions", "chat") for m in (None, "m")]
    assert unroled("request_params", sorted({k for b in bodies for k in flatten(b)})) == []


def test_a_contention_sample_and_a_cpu_window_have_a_role(tmp_path):
    sample = contention.sample_contention(0.01)
    failed = contention.sample_contention(0.01, proc=tmp_path / "no-proc")
    stat = contention.PidStat(pid=1, name="x", state="R", cpu_ticks=0)
    busy = contention.busy_processes({1: stat}, {1: contention.PidStat(pid=1, name="x", state="R", cpu_ticks=100)},
                                     1.0, 100, 5.0)
    assert busy and failed["error"]
    keys = {*sample, *failed, *(f"busy.{k}" for k in busy[0])}
    assert unroled("contention_sample", sorted(keys)) == []
    times = contention.CpuTimes(total=100, idle=50)
    start = contention.CpuWindow(0.0, times, {}, stat)
    window = contention.window_figures(start, contention.CpuWindow(1.0, times, {}, stat), 100)
    assert unroled("cpu_window", list(window)) == []


# ------------------------------------------------------------------------------ what the servers report


def _engine_state() -> dict[str, Any]:
    """The embedded engine's ``internal_state`` as its own code writes it (run on a stand-in scheduler)."""
    from perfwarden.harness.embedded_engine import Engine, EngineCounters

    scheduler = types.SimpleNamespace(counters=EngineCounters(), _batch=None, _response_cache={}, _queue=queue.Queue(),
                                      options=types.SimpleNamespace(prompt_lookup=True, response_cache=True))
    return Engine.internal_state(scheduler)


def embedded_server_info() -> dict[str, Any]:
    """``/server_info`` of the embedded server, built by its own method over a stand-in for the loaded model,
    then stamped as the harness stamps every target (process conditions, node identity)."""
    from perfwarden.harness.embedded_server import EmbeddedServer, ServerConfig, device_report

    override = types.SimpleNamespace(op="rmsnorm", spec="m:f", source="m.py", sha256="0" * 64, modules_patched=1,
                                     counter=types.SimpleNamespace(calls=0))
    state = _engine_state()
    server = types.SimpleNamespace(
        cfg=ServerConfig(), explicit=[], host="127.0.0.1", port=1, started_at="t", stop_token_ids=[2],
        info=types.SimpleNamespace(model_dir="/m", weights_digest="d", source_gguf_sha256="g", tokenizer="t"),
        overrides=[override], engine=types.SimpleNamespace(internal_state=lambda: dict(state)),
        startup={**device_report("cpu"), "quantized_linear_modules": 1, "torch_compile_warmup_s": 1.0})
    info = EmbeddedServer.server_info(server)
    info["process_conditions"] = process_conditions(os.getpid(), {"OMP_NUM_THREADS": "1"}, "e")
    return node_identity.stamp(info)


@pytest.mark.slow  # imports torch and transformers (the writer's own imports)
def test_every_key_the_embedded_server_reports_has_a_role():
    info = embedded_server_info()
    keys = list(flatten(info))
    assert "internal_states" in keys and "node.host_id" in keys and "process_conditions.engine" in keys
    assert unroled("server_info", keys) == []


def test_every_counter_the_embedded_engine_keeps_has_a_role():
    state = _engine_state()
    assert "spec_drafted" in state and "response_cache_entries" in state
    assert unroled("server_counters", [*state, "op_override_calls", "op_override_calls.rmsnorm"]) == []


def test_every_key_vllms_report_holds_has_a_role():
    from perfwarden.harness.target_config import VLLMConfig
    from perfwarden.harness.vllm_target import engine_report

    log = {"args": {"max_num_seqs": 4, "speculative_config": {"method": "ngram", "num_speculative_tokens": 2,
                                                               "prompt_lookup_max": 3, "prompt_lookup_min": 1}},
           "engine": {"max_model_len": 2048, "device": "cpu"}, "version": "0.32"}
    info, _ = engine_report({"model_path": "/m"}, log, "0.32", {"block_size": "16", "kv_cache_memory_bytes": "1"})
    assert set(VLLMConfig.model_fields) <= set(info)
    assert unroled("server_info", list(flatten(info))) == []


def test_every_key_any_target_lists_has_a_role():
    keys = list(registry.load("target_keys.json")["every_target"]["keys"])
    for entry in registry.targets().values():
        keys += entry["keys"]
    assert unroled("server_info", sorted(set(keys))) == []


def test_every_vllm_metrics_family_read_has_a_role():
    assert unroled("engine_counters", list(vllm_metrics.WITNESS_SERIES)) == []


def test_every_figure_read_from_loadgens_logs_has_a_role():
    from perfwarden.auditor import loadgen_logs

    detail = [k for keys, _ in loadgen_logs.DETAIL_KEYS.values() for k in keys]
    summary = [k for keys, _ in loadgen_logs.SUMMARY_KEYS.values() for k in keys]
    assert all(MODEL.role_of("loadgen_detail", k).role == "measurement" for k in detail)
    assert all(MODEL.role_of("loadgen_summary", k).role == "measurement" for k in summary)


def test_the_op_bench_rig_payload_has_a_role():
    from perfwarden.harness.opbench import runner

    payload = keyword_values(runner.run_opbench, ("payload",))["payload"]
    keys = [k.value for k in payload.keys if isinstance(k, ast.Constant)]  # its top level only
    assert "roofline" in keys
    assert unroled("op_bench_rig", keys) == []


def test_a_foreign_bench_tools_statistics_are_listed_not_judged():
    for name in ("std_ttft_ms", "p95_itl_ms", "max_output_tokens_per_s", "queue_times"):
        assert MODEL.role_of("bench_line", name, foreign=True).role == "not_judged"
    for name in ("start_times", "date", "request_goodput"):  # its clock and goodput are held (gates/foreign_run.py)
        assert MODEL.role_of("bench_line", name, foreign=True).role == "measurement"
    assert MODEL.role_of("bench_line", "goodput", foreign=True).role == "condition"
    assert MODEL.role_of("bench_line", "model_id", foreign=True).role == "identity"
    assert MODEL.role_of("bench_line", "std_ttft_ms") is None  # never on a harness line


# ------------------------------------------------------------------------------ roles the engine applies


def test_every_bookkeeping_key_of_server_info_has_its_proof_and_every_proof_is_bookkeeping():
    bookkeeping = set(MODEL.fields_with_role("server_info", "bookkeeping"))
    assert bookkeeping == set(registry.inert_entries())


def test_identity_is_known_never_inert_and_never_a_lever_of_its_own():
    for key in ("model", "served_model_name", "tokenizer", "weights_digest", "device_name", "node.host_id",
                "stop_token_ids", "default_max_tokens", "vllm_version"):
        assert MODEL.role_of("server_info", key).role == "identity", key
        assert roles.is_known(key) and not roles.is_inert(key), key
    assert roles.is_inert("internal_states") and roles.is_inert("process.port")
    assert not roles.is_inert("turbo_mode") and not roles.is_known("turbo_mode")


def test_the_server_logs_model_lines_are_copies_of_its_identity():
    from perfwarden.auditor.serverlog import parse_server_log

    copies, problems = parse_server_log([
        "2026-11-23T13:30:29.764 INFO perfwarden.embedded: model loaded name='SmolLM2-135M-Instruct' "
        "dir='/m/SmolLM2' digest=sha256:a6 in 3.18s",
        "2026-11-23T13:30:29.817 INFO perfwarden.embedded: serving model='SmolLM2-135M-Instruct' on http://127.0.0.1:1"])
    assert problems == []
    assert [(c.source, c.values) for c in copies] == [
        ("model_loaded", {"model": "SmolLM2-135M-Instruct", "model_path": "/m/SmolLM2", "weights_digest": "sha256:a6"}),
        ("serving", {"model": "SmolLM2-135M-Instruct"})]


def test_every_record_type_the_auditor_reads_has_a_model():
    from perfwarden.verify.field_explorer import RECORD_TYPES

    assert {rt.name for rt in RECORD_TYPES} <= set(MODEL.records)


def test_the_load_the_workload_gate_compares_is_what_the_model_calls_conditions_of_a_bench_line():
    from perfwarden.auditor.rederive import RAW_WORKLOAD_FIELDS, WORKLOAD_FIELDS

    for name in (*WORKLOAD_FIELDS, *RAW_WORKLOAD_FIELDS):
        found = MODEL.role_of("bench_line", "loadgen.settings" if name == "loadgen" else name)
        assert found is not None and found.role in ("condition", "identity"), name
