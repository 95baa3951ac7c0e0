"""The SGLang target (GPU hosts): build the ``sglang.launch_server`` command from a config, wait for
readiness, capture ``/server_info`` and the log, tear down. The same LoadGen client drives it.

SGLang pins its own torch and openai versions, so it lives in its own environment on a GPU host::

    python -m venv /opt/sglang-env
    /opt/sglang-env/bin/pip install "sglang[all]"        # brings its CUDA torch
    export PERFWARDEN_SGLANG_PYTHON=/opt/sglang-env/bin/python

perfwarden itself stays in its own environment and only starts that interpreter as a subprocess
(``--sglang-python PY`` or ``PERFWARDEN_SGLANG_PYTHON``; ``find_sglang_python`` checks it before anything
runs). SGLang loads no generated code, so its server is not sandboxed; it gets the caller's environment
(CUDA_VISIBLE_DEVICES, HF_HOME …) minus the LLM API keys perfwarden's own brains use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from perfwarden.harness.targets import EngineEnvError, EngineProbe, ServerTarget, find_engine_python

PYTHON_ENV = "PERFWARDEN_SGLANG_PYTHON"
"""Environment variable naming the SGLang environment's interpreter."""
SECRET_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
"""Keys the SGLang server has no use for (perfwarden's LLM brains' credentials)."""


class SGLangEnvError(EngineEnvError):
    """The SGLang environment cannot be used (no interpreter, or it has no sglang); the message says how to fix it."""


def find_sglang_python(explicit: str | None) -> tuple[str, str]:
    """The interpreter to launch SGLang with and the sglang version it imports.

    ``explicit`` (``--sglang-python``), else ``$PERFWARDEN_SGLANG_PYTHON``, else this interpreter. One
    ``PY -c "import sglang"`` (seconds, no GPU touched) so a wrong environment fails before any leg."""
    return find_engine_python(explicit, EngineProbe(
        label="SGLang", module="sglang", flag="--sglang-python", env=PYTHON_ENV, error=SGLangEnvError,
        hint="Install SGLang in its own environment (docs/gpu.md, 'SGLang as the target')"))

# Config keys that are not launch flags (bookkeeping the lab adds).
NOT_FLAGS = {"op_overrides", "kernel_patches"}


def flag_args(config: dict[str, Any]) -> list[str]:
    """``{'tp_size': 8, 'disable_radix_cache': True, 'speculative_algorithm': None}`` ->
    ``['--disable-radix-cache', '--tp-size', '8']``: sorted, booleans as bare flags (False and None
    omitted), lists repeated as space-separated values, everything else ``--key value``."""
    args: list[str] = []
    for key in sorted(config):
        if key in NOT_FLAGS or key in ("model_path", "host", "port"):
            continue
        value = config[key]
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [flag, *[str(v) for v in value]]
        elif isinstance(value, dict):
            import json

            args += [flag, json.dumps(value, sort_keys=True, separators=(",", ":"))]
        else:
            args += [flag, str(value)]
    return args


def check_model_path(model: str | None) -> str:
    """The weights directory as an absolute path; ``SGLangEnvError`` when missing. A local path only
    (not a hub id): a run on a GPU host is reproducible from what is on its disk, and a typo fails here,
    not minutes into a server start."""
    if not model:
        raise SGLangEnvError("the sglang target needs --model PATH: the directory of the weights to serve "
                             "(e.g. huggingface-cli download HuggingFaceTB/SmolLM2-135M-Instruct --local-dir PATH)")
    path = Path(model).expanduser()
    if not path.exists():
        raise SGLangEnvError(f"--model {model!r} does not exist; download the weights to a local directory first")
    return str(path.absolute())


class SglangTarget(ServerTarget):
    """Runs ``python -m sglang.launch_server`` from the SGLang environment for one leg."""

    name = "sglang"
    health_path = "/health"
    info_paths = ("/server_info", "/get_server_info")

    def __init__(self, leg_dir: Path | str, config: dict[str, Any], **kwargs: Any):
        if not config.get("model_path"):
            raise ValueError("an SGLang leg needs 'model_path' in its config")
        kwargs.setdefault("python", os.environ.get("PERFWARDEN_SGLANG_PYTHON"))
        kwargs.setdefault("start_timeout_s", 900.0)  # weights load and CUDA graph capture take minutes
        super().__init__(leg_dir, config, **kwargs)

    def environment(self) -> dict[str, str]:
        env = super().environment()
        for key in SECRET_ENV:
            env.pop(key, None)
        return env

    def command(self) -> list[str]:
        return [self.python, "-m", "sglang.launch_server", "--model-path", str(self.config["model_path"]),
                "--host", self.host, "--port", str(self.port), *flag_args(self.config)]
