"""The process-level conditions a server ran under, measured by the harness from outside it.

A baseline can be handicapped without touching one knob the server reports: pinned to fewer cores
(``taskset``, a cgroup quota), given fewer threads through the environment (``OMP_NUM_THREADS``), run
at a lower priority. The harness launched the server, so it reads these for the server's process
itself (``/proc/<pid>``, its cgroup, the environment it was given) and records them in the leg's
``server_info.json`` as ``process_conditions``; the auditor diffs them like every other condition
(a difference not declared is CONDITIONS_DIFFER).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfwarden.harness.contention import parse_cpu_max

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "TORCH_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY",
              "KMP_AFFINITY", "OMP_WAIT_POLICY", "CUDA_VISIBLE_DEVICES", "MALLOC_ARENA_MAX")
"""Environment variables that set how many threads (or which devices) a server's libraries use."""


def process_conditions(pid: int, env: Mapping[str, str], engine: str,
                       proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> dict[str, Any]:
    """What process ``pid`` (launched with ``env``, running ``engine``) may use. A value the platform
    cannot state is None (recorded as unknown, the same for both legs of one machine)."""
    return {"engine": engine, "cpu_count": os.cpu_count(), "cpus_allowed": _affinity(pid),
            "cpu_quota_cores": _quota(proc / str(pid) / "cgroup", cgroup_root), "nice": _nice(pid),
            "thread_env": {k: env[k] for k in THREAD_ENV if k in env}}


def _affinity(pid: int) -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        return None


def _quota(cgroup_file: Path, cgroup_root: Path) -> float | None:
    try:
        rel = next((line.split("::", 1)[1].strip() for line in cgroup_file.read_text().splitlines()
                    if line.startswith("0::")), "/")
        return parse_cpu_max((cgroup_root / rel.lstrip("/") / "cpu.max").read_text())
    except (OSError, IndexError, ValueError):
        return None


def _nice(pid: int) -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except (AttributeError, OSError):
        return None
