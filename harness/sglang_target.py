"""The SGLang target (GPU hosts): build the ``sglang.launch_server`` command from a config, wait for
readiness, capture ``/server_info`` and the log, tear down. The same LoadGen client drives it.

SGLang pins its own torch and openai versions, so it lives in its own environment on a GPU host::

    python -m venv /opt/sglang-env
    /opt/sglang-env/bin/pip install "sglang[all]"        # brings its CUDA torch
    export PERFWARDEN_SGLANG_PYTHON=/opt/sglang-env/bin/python

perfwarden itself stays in its own environment and only starts that interpreter as a subprocess.
"""

from __future__ import annotations

import os
from typing import Any

from perfwarden.harness.targets import ServerTarget

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


class SglangTarget(ServerTarget):
    """Runs ``python -m sglang.launch_server`` from the SGLang environment for one leg."""

    name = "sglang"
    health_path = "/health"
    info_paths = ("/server_info", "/get_server_info")

    def __init__(self, leg_dir, config: dict[str, Any], **kwargs: Any):
        if not config.get("model_path"):
            raise ValueError("an SGLang leg needs 'model_path' in its config")
        kwargs.setdefault("python", os.environ.get("PERFWARDEN_SGLANG_PYTHON"))
        kwargs.setdefault("start_timeout_s", 900.0)  # weights load and CUDA graph capture take minutes
        super().__init__(leg_dir, config, **kwargs)

    def command(self) -> list[str]:
        return [self.python, "-m", "sglang.launch_server", "--model-path", str(self.config["model_path"]),
                "--host", self.host, "--port", str(self.port), *flag_args(self.config)]
