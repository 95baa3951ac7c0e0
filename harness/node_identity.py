"""The hardware a leg ran on, recorded in its ``server_info.json`` under ``node``.

Once steps fan out over a cluster, two legs of one A/B could land on different machines; a faster GPU
or a newer driver is then a "win". The harness writes the node's identity into every leg's
``server_info.json`` (the file the auditor takes as the reference for conditions), so the auditor's
condition diff sees it like any knob: legs on different hardware differ in ``node.*`` and the A/B is
CONDITIONS_DIFFER. The key ``node`` is deliberately not in the auditor's inert list.

Fields: ``host_id`` (``/etc/machine-id``, else a hash of the host name), ``ray_node_id`` (the Ray node a
cluster worker runs on, from ``PERFWARDEN_NODE_ID`` that orchestrator/cluster.py sets; simulated nodes
of one machine differ only here), ``cpu_model``, ``cpu_cores``, ``gpu_name``/``gpu_uuid``/``driver``
(``nvidia-smi``, visible devices only; None without a GPU) and ``engine_version`` (what the server
reported about its own version).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import socket
import subprocess
from typing import Any

NODE_KEY = "node"
NODE_ENV = "PERFWARDEN_NODE_ID"
"""Set by a cluster worker to the Ray node id it runs on (orchestrator/cluster.py)."""
SMI_TIMEOUT_S = 5.0


def _host_id() -> str:
    try:
        with open("/etc/machine-id", encoding="ascii", errors="replace") as handle:
            value = handle.read(64).strip()
        if value:
            return value
    except OSError:
        pass
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:32]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _gpus() -> list[dict[str, str]]:
    """Visible GPUs (name, uuid, driver) from ``nvidia-smi``; empty without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name,uuid,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = [dict(zip(("name", "uuid", "driver"), (p.strip() for p in line.split(","))))
            for line in out.splitlines() if line.count(",") == 2]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        gpus = [g for i, g in enumerate(gpus) if str(i) in wanted or g["uuid"] in wanted]
    return gpus


@functools.lru_cache(maxsize=1)
def _machine() -> dict[str, Any]:
    gpus = _gpus()
    return {"host_id": _host_id(), "cpu_model": cpu_model(), "cpu_cores": os.cpu_count(),
            "gpu_name": ",".join(g["name"] for g in gpus) or None,
            "gpu_uuid": ",".join(g["uuid"] for g in gpus) or None,
            "driver": ",".join(sorted({g["driver"] for g in gpus})) or None}


def identity(engine_version: str | None) -> dict[str, Any]:
    """This node's identity as ``server_info.json`` records it."""
    return {**_machine(), "ray_node_id": os.environ.get(NODE_ENV) or None, "engine_version": engine_version}


def stamp(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` (a server's ``/server_info``) with this node's identity under ``node``; the engine version is
    what the server reported (``version``, else its torch version)."""
    version = info.get("version") or info.get("torch_version")
    return {**info, NODE_KEY: identity(str(version) if version is not None else None)}
