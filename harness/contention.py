"""Contention sampler: was anything else busy on this machine when a rep started or ended?

A rep measured while another process burns CPU is not evidence about the serving change (design §4,
``CONTENDED_LEG``). The harness therefore records, at rep start and end, the load average and the
processes that used CPU during a short sampling window. The parsing is pure functions over the text
of ``/proc`` files (testable with literal strings); :func:`sample_contention` is the thin reader.

Sample format (one dict, stored under ``contention.start`` / ``contention.end`` of a bench line)::

    {"t": 1732230000.1,            # unix time the window ended
     "interval_s": 0.25,           # length of the CPU sampling window
     "ncpu": 2,                    # logical CPUs (os.cpu_count())
     "ncpu_available": 2,          # CPUs this process may run on (sched_getaffinity), or null
     "cpu_quota_cores": null,      # cgroup v2 CPU quota in cores (cpu.max), null when unlimited/unknown
     "loadavg": [0.52, 0.58, 0.59],# 1, 5, 15-minute load averages
     "procs_running": 2, "procs_total": 345,
     "cpu_busy_pct": 12.5,         # whole machine, 0..100, over the window (from /proc/stat)
     "busy": [{"pid": 4242, "name": "python3", "cpu_pct": 97.0}, ...],  # >= threshold, busiest first
     "threshold_pct": 5.0,         # per-process CPU% (100 = one core) to be listed in "busy"
     "self_pid": 1234, "excluded_pids": [1234],
     "error": null}                # a string when /proc could not be read: nothing else is then set

Processes listed in ``excluded_pids`` (the harness itself, and whatever the caller passes, e.g. the
server under test) are left out of ``busy`` and say so, so a reader can tell "nothing busy" from "not
looked at".
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")


@dataclass(frozen=True)
class LoadAvg:
    """``/proc/loadavg``: load averages and scheduler entity counts."""

    load1: float
    load5: float
    load15: float
    running: int
    total: int


@dataclass(frozen=True)
class CpuTimes:
    """Aggregate CPU jiffies from the first ``cpu`` line of ``/proc/stat``."""

    total: int
    idle: int
    """idle + iowait: time no task wanted the CPU."""


@dataclass(frozen=True)
class PidStat:
    """The parts of ``/proc/<pid>/stat`` the sampler needs."""

    pid: int
    name: str
    state: str
    cpu_ticks: int
    """utime + stime, in clock ticks (all threads of the process)."""


def parse_loadavg(text: str) -> LoadAvg:
    """Parse ``/proc/loadavg`` (``"0.52 0.58 0.59 2/345 12345"``)."""
    fields = text.split()
    if len(fields) < 4 or "/" not in fields[3]:
        raise ValueError(f"unexpected /proc/loadavg content: {text!r}")
    running, total = fields[3].split("/", 1)
    return LoadAvg(float(fields[0]), float(fields[1]), float(fields[2]), int(running), int(total))


def parse_cpu_times(text: str) -> CpuTimes:
    """Parse the aggregate ``cpu`` line of ``/proc/stat`` (user nice system idle iowait irq softirq
    steal ...); guest time is already inside user/nice, so it is not added twice."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            if len(values) < 4:
                break
            total = sum(values[:8])
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return CpuTimes(total=total, idle=idle)
    raise ValueError("no aggregate 'cpu ' line in /proc/stat")


def parse_pid_stat(text: str) -> PidStat:
    """Parse ``/proc/<pid>/stat``. The name (``comm``) is in parentheses and may itself contain
    spaces and parentheses, so split on the *last* ``)``."""
    open_paren = text.index("(")
    close_paren = text.rindex(")")
    pid = int(text[:open_paren].strip())
    name = text[open_paren + 1:close_paren]
    rest = text[close_paren + 2:].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return PidStat(pid=pid, name=name, state=rest[0], cpu_ticks=int(rest[11]) + int(rest[12]))


def parse_cpu_max(text: str) -> float | None:
    """Cores allowed by a cgroup v2 ``cpu.max`` (``"200000 100000"`` -> 2.0); None for ``max``
    (no quota) or anything unexpected. A container's quota, not ``os.cpu_count()``, is what the
    server under test can actually use."""
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def available_cpus() -> int | None:
    """CPUs this process may be scheduled on (None where the platform cannot say)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cpu_quota_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cgroup v2 CPU quota of this process's cgroup, in cores; None when unlimited or unknown."""
    try:
        rel = next((line.split("::", 1)[1].strip() for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.startswith("0::")), "/")
        return parse_cpu_max((cgroup_root / rel.lstrip("/") / "cpu.max").read_text())
    except (OSError, IndexError):
        return None


def cpu_busy_pct(before: CpuTimes, after: CpuTimes) -> float | None:
    """Whole-machine busy percentage between two ``/proc/stat`` readings (None if no time passed)."""
    total = after.total - before.total
    if total <= 0:
        return None
    return 100.0 * (total - (after.idle - before.idle)) / total


def busy_processes(before: Mapping[int, PidStat], after: Mapping[int, PidStat], interval_s: float,
                   clk_tck: int, threshold_pct: float, exclude: Iterable[int] = ()) -> list[dict[str, Any]]:
    """Processes whose CPU use over the window is at least ``threshold_pct`` (100 = one full core),
    busiest first. A pid present in only one reading (started or exited during the window) is
    skipped: its share of the window is unknown, and guessing would invent contention."""
    if interval_s <= 0:
        raise ValueError(f"interval_s={interval_s!r} must be > 0")
    excluded = set(exclude)
    busy: list[dict[str, Any]] = []
    for pid, end in after.items():
        start = before.get(pid)
        if start is None or pid in excluded or start.name != end.name:
            continue
        pct = 100.0 * (end.cpu_ticks - start.cpu_ticks) / clk_tck / interval_s
        if pct >= threshold_pct:
            busy.append({"pid": pid, "name": end.name, "cpu_pct": round(pct, 1)})
    busy.sort(key=lambda p: (-p["cpu_pct"], p["pid"]))
    return busy


def processes_cpu_pct(before: Mapping[int, PidStat], after: Mapping[int, PidStat], pids: Iterable[int],
                      interval_s: float, clk_tck: int) -> float:
    """Summed CPU use of ``pids`` over the window (100 = one full core); a pid missing from either reading
    counts nothing (it started or exited within the window)."""
    if interval_s <= 0:
        raise ValueError(f"interval_s={interval_s!r} must be > 0")
    ticks = sum(after[p].cpu_ticks - before[p].cpu_ticks for p in set(pids)
                if p in before and p in after and before[p].name == after[p].name)
    return 100.0 * ticks / clk_tck / interval_s


SETTLE_IDLE_PCT = 10.0
"""The server's own processes below this much CPU together (100 = one core) are idle."""
SETTLE_WINDOW_S = 0.25
SETTLE_MAX_S = 6.0
"""Longest wait for a server to go idle: vLLM's workers busy-poll their queue for 1 s after the last
request (``shm_broadcast``'s ``busy_loop_s``); a server still busy after this is sampled anyway."""


def wait_until_idle(pids: Iterable[int], max_s: float = SETTLE_MAX_S, window_s: float = SETTLE_WINDOW_S,
                    idle_pct: float = SETTLE_IDLE_PCT, read: Callable[[], Mapping[int, PidStat]] | None = None,
                    clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
                    ) -> float:
    """Wait, at most ``max_s``, until the server's own processes (``pids``) stop using CPU; returns the
    seconds waited. A contention sample judges the whole machine's busy share "while the server idled":
    taken while the server still spins on its last request, it would blame the machine for the server's own
    tail. A server that never idles is sampled anyway, and its busy machine is then a finding (fail closed).
    """
    pids = sorted(set(pids))
    if not pids:
        return 0.0
    read = read or read_pid_stats
    clk_tck = os.sysconf("SC_CLK_TCK")
    start = clock()
    while True:
        t0, before = clock(), read()
        sleep(window_s)
        t1, after = clock(), read()
        if processes_cpu_pct(before, after, pids, max(t1 - t0, 1e-6), clk_tck) < idle_pct or t1 - start >= max_s:
            return t1 - start


@dataclass(frozen=True)
class CpuWindow:
    """The readings a rep's CPU window starts from (:func:`open_cpu_window`)."""

    t: float
    machine: CpuTimes
    server: dict[int, PidStat]
    harness: PidStat


def window_figures(start: CpuWindow, end: CpuWindow, clk_tck: int) -> dict[str, float]:
    """CPU seconds over the window: the whole machine's busy time, the server's processes' (those seen at
    both ends) and the harness's own process (LoadGen and the client run in it)."""
    server = sum(end.server[p].cpu_ticks - st.cpu_ticks for p, st in start.server.items()
                 if p in end.server and end.server[p].name == st.name) / clk_tck
    harness = (end.harness.cpu_ticks - start.harness.cpu_ticks) / clk_tck
    busy = (end.machine.total - end.machine.idle) - (start.machine.total - start.machine.idle)
    return {"wall_s": round(end.t - start.t, 4), "machine_cpu_s": round(busy / clk_tck, 3),
            "server_cpu_s": round(server, 3), "harness_cpu_s": round(harness, 3)}


def _read_window(pids: Iterable[int], proc: Path) -> CpuWindow:
    t = time.perf_counter()
    machine = parse_cpu_times((proc / "stat").read_text())
    wanted = set(pids)
    stats = read_pid_stats(proc)
    return CpuWindow(t, machine, {p: st for p, st in stats.items() if p in wanted},
                     parse_pid_stat((proc / "self" / "stat").read_text()))


def open_cpu_window(pids: Iterable[int], proc: Path = PROC) -> CpuWindow | None:
    """Start a rep's CPU window over the server's processes ``pids`` (None where /proc cannot be read:
    the line then carries no window, and the auditor judges the load average instead)."""
    try:
        return _read_window(pids, proc)
    except (OSError, ValueError):
        return None


def close_cpu_window(start: CpuWindow | None, proc: Path = PROC) -> dict[str, float] | None:
    """The rep's CPU window (``contention.window`` of a bench line): what the machine, the server and the
    harness used over the rep. Samples before and after a rep see a neighbour only while they look; the
    window sees all of the rep, and unlike the load average it does not count the server's own threads
    as neighbours (vLLM's engine core, worker and OpenMP threads held a 2-core machine's load above 4)."""
    if start is None:
        return None
    try:
        end = _read_window(start.server, proc)
    except (OSError, ValueError):
        return None
    return window_figures(start, end, os.sysconf("SC_CLK_TCK"))


# --------------------------------------------------------------------------------------- readers


def read_pid_stats(proc: Path = PROC) -> dict[int, PidStat]:
    """Read ``/proc/<pid>/stat`` for every process; processes that exit mid-read are skipped."""
    stats: dict[int, PidStat] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), encoding="utf-8", errors="replace") as handle:
                stat = parse_pid_stat(handle.read())
        except (OSError, ValueError, IndexError):
            continue
        stats[stat.pid] = stat
    return stats


def sample_contention(interval_s: float = 0.25, threshold_pct: float = 5.0, exclude_pids: Iterable[int] = (),
                      top: int = 10, proc: Path = PROC) -> dict[str, Any]:
    """Take one contention sample (format in the module docstring).

    Blocks for ``interval_s`` (CPU use needs two readings). Never raises for an unreadable ``/proc``
    (e.g. not Linux): the sample then carries ``error`` instead of the harness crashing a rep or pretending
    the machine was idle; the auditor judges such a rep EVIDENCE_MISSING (it cannot show a quiet machine).
    """
    self_pid = os.getpid()
    excluded = sorted({self_pid, *exclude_pids})
    try:
        clk_tck = os.sysconf("SC_CLK_TCK")
        cpu0 = parse_cpu_times((proc / "stat").read_text())
        pids0 = read_pid_stats(proc)
        t0 = time.perf_counter()
        time.sleep(interval_s)
        cpu1 = parse_cpu_times((proc / "stat").read_text())
        pids1 = read_pid_stats(proc)
        elapsed = time.perf_counter() - t0
        load = parse_loadavg((proc / "loadavg").read_text())
    except (OSError, ValueError) as exc:
        return {"t": time.time(), "error": f"cannot sample contention from {str(proc)!r}: {exc}",
                "self_pid": self_pid, "excluded_pids": excluded}
    busy = busy_processes(pids0, pids1, elapsed, clk_tck, threshold_pct, excluded)
    busy_pct = cpu_busy_pct(cpu0, cpu1)
    return {
        "t": time.time(),
        "interval_s": round(elapsed, 4),
        "ncpu": os.cpu_count(),
        "ncpu_available": available_cpus(),
        "cpu_quota_cores": cpu_quota_cores(),
        "loadavg": [load.load1, load.load5, load.load15],
        "procs_running": load.running,
        "procs_total": load.total,
        "cpu_busy_pct": None if busy_pct is None else round(busy_pct, 1),
        "busy": busy[:top],
        "threshold_pct": threshold_pct,
        "self_pid": self_pid,
        "excluded_pids": excluded,
        "error": None,
    }
