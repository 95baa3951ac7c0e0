"""The sandbox's bounds that bwrap does not set (``harness/sandbox.py`` uses them): child cgroups of the
caller's own for memory and process count (v1 or v2) and the record of an OOM kill they keep, and, where
no cgroup can be created, the RSS watchdog's reading of the sandbox's memory -- resident memory plus what
it keeps outside any RSS (its tmpfs, its memfds).
"""

from __future__ import annotations

import errno
import os
import platform
import signal
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

MemoryBound = Literal["cgroup_v1", "cgroup_v2", "rss_watchdog"]
PidsBound = Literal["cgroup_v1", "cgroup_v2", "wall_time_only"]


# ------------------------------------------------------------------------------------------ cgroups


class CgroupLimits(Protocol):
    """The bounds a child cgroup sets (``sandbox.Limits`` holds them with the rest of a sandbox's bounds)."""

    @property
    def memory_bytes(self) -> int: ...
    @property
    def pids(self) -> int: ...


def own_cgroups(proc_self: Path = Path("/proc/self")) -> dict[str, tuple[str, Path]]:
    """Controller -> (hierarchy version, the caller's own cgroup directory), from /proc/self."""
    mounts: dict[str, Path] = {}
    v2_mount: Path | None = None
    try:
        for line in (proc_self / "mountinfo").read_text().splitlines():
            pre, _, post = line.partition(" - ")
            fstype, _, super_opts = (post.split(" ") + ["", "", ""])[:3]
            mount_point = Path(pre.split(" ")[4])
            if fstype == "cgroup2":
                v2_mount = mount_point
            elif fstype == "cgroup":
                for opt in super_opts.split(","):
                    if opt in ("memory", "pids"):
                        mounts[opt] = mount_point
        lines = (proc_self / "cgroup").read_text().splitlines()
    except OSError:
        return {}
    out: dict[str, tuple[str, Path]] = {}
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for ctrl in controllers.split(","):
            if ctrl in mounts:
                out[ctrl] = ("cgroup_v1", mounts[ctrl] / path.lstrip("/"))
        if hier == "0" and controllers == "" and v2_mount is not None:
            out.setdefault("v2", ("cgroup_v2", v2_mount / path.lstrip("/")))
    return out


class Cgroups:
    """Child cgroups of the caller's own (so every limit above ours still applies), one per sandbox."""

    def __init__(self, limits: CgroupLimits):
        self.dirs: list[Path] = []
        self.procs_files: list[Path] = []
        self.memory: MemoryBound = "rss_watchdog"
        self.pids: PidsBound = "wall_time_only"
        self._memory_dir: Path | None = None
        self._oom_kills: bool = False
        """Whether the kernel OOM-killed in the memory cgroup, read before the cgroup is removed."""
        self._v2_dir: Path | None = None
        name = f"perfwarden-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        own = own_cgroups()
        if "v2" in own and "memory" not in own:
            self._try_v2(own["v2"][1] / name, limits)
            return
        if "memory" in own and self._make(own["memory"][1] / name, {"memory.limit_in_bytes": limits.memory_bytes}):
            memsw = own["memory"][1] / name / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                self._write(memsw, limits.memory_bytes)
            self.memory, self._memory_dir = "cgroup_v1", own["memory"][1] / name
        if "pids" in own and self._make(own["pids"][1] / name, {"pids.max": limits.pids}):
            self.pids = "cgroup_v1"

    def _try_v2(self, path: Path, limits: CgroupLimits) -> None:
        try:
            path.mkdir()
        except OSError:
            return
        self.dirs.append(path)
        controllers = (path / "cgroup.controllers").read_text().split() if (path / "cgroup.controllers").exists() else []
        ok = False
        if "memory" in controllers and self._write(path / "memory.max", limits.memory_bytes):
            self._write(path / "memory.swap.max", 0)
            self.memory, self._memory_dir, ok = "cgroup_v2", path, True
        if "pids" in controllers and self._write(path / "pids.max", limits.pids):
            self.pids, ok = "cgroup_v2", True
        if ok:
            self.procs_files.append(path / "cgroup.procs")
            self._v2_dir = path
        else:
            self.remove()

    @staticmethod
    def _drop_stale(parent: Path) -> None:
        """Remove empty sandbox cgroups left by a perfwarden process that was killed before cleaning up."""
        for stale in parent.glob("perfwarden-sandbox-*"):
            pid = stale.name.split("-")[2]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                try:
                    stale.rmdir()
                except OSError:
                    pass

    def _make(self, path: Path, settings: Mapping[str, int]) -> bool:
        self._drop_stale(path.parent)
        try:
            path.mkdir()
        except OSError:
            return False
        self.dirs.append(path)
        if all(self._write(path / key, value) for key, value in settings.items()):
            self.procs_files.append(path / "cgroup.procs")
            return True
        return False

    @staticmethod
    def _write(path: Path, value: int) -> bool:
        try:
            path.write_text(str(value))
            return True
        except OSError:
            return False

    def pids_inside(self) -> list[int]:
        for procs in self.procs_files:
            try:
                return [int(p) for p in procs.read_text().split()]
            except (OSError, ValueError):
                continue
        return []

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a process of the sandbox (remembered once the cgroup is gone)."""
        return self._oom_kills or self._read_oom()

    def _read_oom(self) -> bool:
        if self._memory_dir is None:
            return False
        files = {}
        for name in _OOM_FILES[self.memory]:
            try:
                files[name] = (self._memory_dir / name).read_text()
            except OSError:
                continue
        self._oom_kills = self._oom_kills or oom_killed_in(self.memory, files)
        return self._oom_kills

    def kill_all(self) -> None:
        if self._v2_dir is not None and (self._v2_dir / "cgroup.kill").exists():
            self._write(self._v2_dir / "cgroup.kill", 1)
        for _ in range(50):
            pids = self.pids_inside()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        self._read_oom()  # the verdict lives in the cgroup's files: read it before they go
        for path in reversed(self.dirs):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except OSError as exc:
                    if exc.errno == errno.ENOENT:
                        break
                    time.sleep(0.02)
        self.dirs, self.procs_files = [], []


_OOM_FILES: dict[str, tuple[str, ...]] = {
    "cgroup_v1": ("memory.oom_control", "memory.failcnt", "memory.max_usage_in_bytes", "memory.limit_in_bytes"),
    "cgroup_v2": ("memory.events",),
}


def _counters(text: str) -> dict[str, int]:
    """``key value`` lines (memory.events, memory.oom_control) as numbers; other lines are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out


def _number(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def oom_killed_in(version: str, files: Mapping[str, str]) -> bool:
    """Whether a memory cgroup's files (name -> text) show an OOM kill. v2: ``memory.events`` counts
    ``oom_kill``; v1: ``memory.oom_control`` does too (kernels since 4.13), and on older kernels the limit
    having been hit (``memory.failcnt``) with the peak at the limit is the only trace left."""
    if version == "cgroup_v2":
        events = _counters(files.get("memory.events", ""))
        return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0
    if version != "cgroup_v1":
        return False
    control = _counters(files.get("memory.oom_control", ""))
    if "oom_kill" in control:
        return control["oom_kill"] > 0
    failcnt, peak = _number(files.get("memory.failcnt")), _number(files.get("memory.max_usage_in_bytes"))
    limit = _number(files.get("memory.limit_in_bytes"))
    return bool(failcnt and peak is not None and limit and peak >= limit - (1 << 20))


JOIN_CGROUPS = 'while [ "$1" != "--" ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
"""Moves the launcher shell into the sandbox's cgroups, then execs prlimit -> bwrap (all inherit them)."""


# ---------------------------------------------------------------------------- the RSS watchdog


def namespace_pids(init_pid: int) -> list[int]:
    """Host pids of every process in ``init_pid``'s PID namespace."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return []
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") == ns:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _rss_bytes(pids: Sequence[int]) -> int:
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
                total += int(handle.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def _memfd_bytes(pids: Sequence[int], max_fds: int = 8192) -> int:
    """Memory held by ``memfd_create`` files the processes have open (not in RSS unless mapped)."""
    seen: dict[int, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")[:max_fds]
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                if os.readlink(path).startswith("/memfd:"):
                    st = os.stat(path)
                    seen[st.st_ino] = st.st_blocks * 512
            except OSError:
                continue
    return sum(seen.values())


def _tmpfs_bytes(init_pid: int, shm_dir: str) -> int:
    """What the sandbox keeps in its own ``/dev/shm`` (seen through its init's root)."""
    try:
        st = os.statvfs(f"/proc/{init_pid}/root{shm_dir}")
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def tree_memory_bytes(init_pid: int, shm_dir: str) -> int:
    """The RSS watchdog's reading: resident memory of every process in ``init_pid``'s PID namespace, plus
    what it keeps in its tmpfs and in memfds -- memory a process can hold outside its RSS."""
    pids = namespace_pids(init_pid)
    return _rss_bytes(pids) + _memfd_bytes(pids) + _tmpfs_bytes(init_pid, shm_dir)


# ------------------------------------------------------------------- System V shared memory, unbounded


_SECCOMP_KILL_PROCESS, _SECCOMP_ERRNO, _SECCOMP_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_EPERM = 1
_SHMGET: dict[str, tuple[int, int, bool]] = {
    "x86_64": (0xC000003E, 29, True),     # AUDIT_ARCH_X86_64, __NR_shmget, has the x32 ABI
    "aarch64": (0xC00000B7, 194, False),  # AUDIT_ARCH_AARCH64
}
"""Per machine: the audit architecture, ``shmget``'s number, whether x32 syscalls exist."""


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def no_sysv_shm_filter(machine: str | None = None) -> bytes | None:
    """A seccomp program (classic BPF, for bwrap's ``--seccomp``) refusing ``shmget`` with EPERM, or
    ``None`` on a machine it does not know. Used where no memory cgroup can be created: a System V
    segment filled and detached is in no process's RSS, and the sandbox's IPC namespace is out of the
    watchdog's sight. Syscalls of another ABI (i386, x32), which would name ``shmget`` otherwise, kill
    the process. POSIX shared memory (``/dev/shm``), which torch and multiprocessing use, stays."""
    arch = _SHMGET.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, shmget, x32 = arch
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    prog = [_bpf(ld_w_abs, 0, 0, 4),                    # seccomp_data.arch
            _bpf(jeq_k, 1, 0, audit_arch),
            _bpf(ret_k, 0, 0, _SECCOMP_KILL_PROCESS),
            _bpf(ld_w_abs, 0, 0, 0)]                    # seccomp_data.nr
    if x32:
        prog += [_bpf(jge_k, 0, 1, 0x40000000),         # __X32_SYSCALL_BIT
                 _bpf(ret_k, 0, 0, _SECCOMP_KILL_PROCESS)]
    prog += [_bpf(jeq_k, 0, 1, shmget),
             _bpf(ret_k, 0, 0, _SECCOMP_ERRNO | _EPERM),
             _bpf(ret_k, 0, 0, _SECCOMP_ALLOW)]
    return b"".join(prog)
