"""What the rig ran on (``rig.json``'s ``device`` record): enough to tell two machines' figures apart.

On CUDA: device name, SM count, clocks, memory, driver, CUDA, torch and triton versions. On CPU: the
CPU model, logical cores, torch version and the threads the workers were pinned to. Only read here;
nothing is measured.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def describe_device(device: str, threads: int) -> dict[str, Any]:
    """The ``device`` record of ``rig.json`` for ``device`` (``cpu`` or ``cuda``)."""
    import torch

    base: dict[str, Any] = {"kind": device, "torch_version": torch.__version__, "triton_version": _version("triton"),
                            "python": platform.python_version(), "machine": platform.machine()}
    if device == "cpu":
        return {**base, "name": cpu_model(), "cores": os.cpu_count(), "threads": threads}
    props = torch.cuda.get_device_properties(torch.device(device))
    clocks = _nvidia_smi("clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem")
    sm, mem, max_sm, max_mem = ([c.strip() for c in clocks.split(",")] + [None] * 4)[:4] if clocks else [None] * 4
    return {**base, "name": props.name, "sm_count": props.multi_processor_count,
            "capability": f"{props.major}.{props.minor}", "memory_bytes": props.total_memory,
            "l2_cache_bytes": getattr(props, "L2_cache_size", None),
            "clocks_mhz": {"sm": sm, "memory": mem, "max_sm": max_sm, "max_memory": max_mem},
            "driver_version": _nvidia_smi("driver_version"), "cuda_version": torch.version.cuda,
            "cudnn_version": torch.backends.cudnn.version()}
