"""The one sandbox for code perfwarden did not write: op-bench candidates and servers that load them.

Generated code (an LLM's kernel, any candidate a producer hands over) runs in a separate process
isolated by the operating system with bubblewrap (``bwrap`` 0.7 or later, Debian's ``bubblewrap``
package, installed by ``scripts/install.sh``). Nothing here relies on Python-level guards: the code
inside may rebind anything in its own interpreter, fork, exec or load native code, and still meets the
same walls.

What every sandbox gets:

- **fresh namespaces**: user (mapped to uid/gid 65534, every capability dropped, no further user
  namespaces), mount, PID, network (loopback only, not the host's), IPC, UTS and cgroup; a new session
  (no terminal to inject into), killed with its parent (``--die-with-parent``);
- **a read-only view of the system**: ``/usr`` and its merged-usr links, the dynamic loader's cache,
  the Python installation, the virtual environment and perfwarden's own package folders, each bound
  read-only at its own path; ``Policy.inputs`` (the code under test) read-only at neutral paths
  ``/sandbox/in/<n>/<name>``; ``Policy.read_only`` extras (the model cache, a server's override files)
  read-only at their own path. ``/root``, ``/home``, the rest of ``/etc``, the run's evidence: not there;
- **one writable directory** (``Policy.writable``, inside the run directory) at ``/sandbox/work``, also
  HOME, TMPDIR and every tool cache; it cannot be a parent of the code or the interpreter (checked).
  Host paths to it and to the inputs in the command, the environment and the op bench's messages are
  rewritten to where they are inside (:class:`PathMap`), so the run's own paths never show inside;
- **an empty environment** plus an explicit allow-list; a name that looks like a secret is refused;
- **a fresh ``/proc``** of its own PID namespace: the parent's processes (and their ``environ``) are
  not in it; bwrap's options come through ``--args`` and the command through a read-only script
  (``/sandbox/.command``), so its init's command line (``/proc/1/cmdline``) names no host path;
- **limits**: CPU seconds per process (``RLIMIT_CPU``), file size, open files, no core dumps; wall time
  enforced from outside by killing the PID namespace's init (the kernel then kills every process in
  it, ``setsid`` orphans included); memory by a cgroup limit (v1 or v2, a child of the caller's own
  cgroup; an OOM kill is reported as the memory limit) when one can be created, else by a watchdog over
  the resident memory of every process in the PID namespace plus its ``/dev/shm`` and open memfds
  (System V shared memory, invisible to it, is refused there by a seccomp filter on ``shmget``) --
  never ``RLIMIT_AS``, which CUDA cannot live under; process count by a ``pids`` cgroup when one can be
  created (else only the wall time bounds a fork bomb: recorded) (``harness/sandbox_limits.py``);
- **writable tmpfs**: ``/dev/shm`` only, no bigger than the memory bound; ``/dev`` and the root are
  bwrap's own tmpfs, read-only;
- **devices**: ``/dev/null``, ``zero``, ``random``, ``urandom``, ``tty`` only; the GPU's nodes
  (``/dev/nvidia*``, ``/dev/dri``) and ``/sys`` only when the caller asks for ``device="cuda"``.

What it does not contain (docs/threat-model.md, "The sandbox"): kernel exploits (the namespaces share the host
kernel; no seccomp filter narrows the system calls, beyond ``shmget`` without a cgroup), other
processes' GPU memory and the GPU driver's own attack surface, timing and cache side channels, disk
use summed over many files in the writable directory (each file is bounded, the total only by time),
the source paths of bind mounts (the kernel shows each mount's path inside its filesystem in
``/proc/self/mountinfo``, and the code trees sit at their own paths), and a host without bwrap or user
namespaces -- there :func:`available` says why not, and callers refuse to run generated code.
:func:`call_function` never raises for what the code inside does: whatever it leaves in its directory
or writes on its result channel, it gets a result.
"""

from __future__ import annotations

import concurrent.futures
import glob
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from perfwarden.formats.records import key_store_dir
from perfwarden.formats.strict_json import StrictJsonError, loads
from perfwarden.harness.sandbox_limits import (JOIN_CGROUPS, Cgroups, MemoryBound, PidsBound, namespace_pids,
                                               no_sysv_shm_filter, tree_memory_bytes)

Device = Literal["cpu", "cuda"]

INSTALL_HINT = (
    "install bubblewrap: `apt-get install bubblewrap` on Debian/Ubuntu (`bash scripts/install.sh` does it), "
    "`dnf install bubblewrap` on Fedora; unprivileged user namespaces must be allowed (Ubuntu 24.04: "
    "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`)")
"""What to do when the sandbox cannot run here; every refusal quotes it."""

SANDBOX_UID = 65534
"""uid/gid inside the sandbox (``nobody``); the writable directory appears owned by it."""

ENV_FROM_CALLER = ("LANG", "LC_ALL", "TZ")
"""Harmless variables copied from the caller when set; nothing else of the caller's environment is."""
DEVICE_ENV_FROM_CALLER = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME",
                          "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH")
"""Also copied with ``device="cuda"``: where the driver and toolkit are, which GPU to use."""
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)

_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
"""What of ``/etc`` the loader and libc need; ``passwd``, ``shadow`` and the rest stay outside."""
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")
_PACKAGES = ("perfwarden.agents", "perfwarden.auditor", "perfwarden.cli", "perfwarden.formats", "perfwarden.harness",
             "perfwarden.orchestrator", "perfwarden.proof", "perfwarden.redteam", "perfwarden.skills",
             "perfwarden.verify")


SHM_DIR = "/dev/shm"
"""The sandbox's one writable tmpfs: bounded in size by the memory bound and counted toward it."""


class SandboxUnavailable(RuntimeError):
    """bwrap (or the kernel features it needs) is not usable here; the message says how to fix it."""


class SandboxConfigError(ValueError):
    """A policy that would not confine (writable code, a secret in the environment): our bug."""


# ------------------------------------------------------------------------------------------ policy


@dataclass(frozen=True)
class Limits:
    """Resource bounds of one sandbox (``None``: not bounded by this mechanism)."""

    wall_s: float | None = 60.0
    """Wall-clock seconds before the whole PID namespace is killed."""
    cpu_s: int | None = 120
    """CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL one second later)."""
    memory_bytes: int = 4 << 30
    """Resident memory of the whole sandbox (cgroup limit, else RSS watchdog)."""
    pids: int = 256
    """Processes and threads in the sandbox (pids cgroup, where one can be created)."""
    file_bytes: int = 256 << 20
    """Largest file a process may write (RLIMIT_FSIZE)."""
    open_files: int = 1024
    """Open file descriptors per process (RLIMIT_NOFILE)."""


@dataclass(frozen=True)
class Policy:
    """What one sandbox may see and do."""

    writable: Path
    """The one writable directory (created if missing); HOME, TMPDIR and the tool caches live in it."""
    read_only: tuple[Path, ...] = ()
    """Extra files or directories visible read-only at their own path (a candidate, the model cache)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables (on top of the fixed allow-list); no secret-looking names."""
    device: Device = "cpu"
    """``cuda`` makes the GPU's device nodes and ``/sys`` visible."""
    limits: Limits = field(default_factory=Limits)
    cwd: Path | None = None
    """Working directory inside (default: ``writable``)."""
    inputs: tuple[Path, ...] = ()
    """Files or directories visible read-only at neutral paths (``/sandbox/in/<n>/<name>``); host paths
    to them in the command and the environment are rewritten (:meth:`PathMap.translate`)."""


@dataclass
class Confinement:
    """How a sandbox was actually confined (recorded in ``rig.json`` and the server log)."""

    tool: str
    memory: MemoryBound
    memory_bytes: int
    pids: PidsBound
    pids_max: int | None
    cpu_s: int | None
    wall_s: float | None
    device: Device
    writable: str
    network: str = "none (own network namespace, loopback only)"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------ availability


@lru_cache(maxsize=1)
def _probe() -> tuple[str | None, str]:
    """``(why not, bwrap version)``: one real sandboxed ``true`` with every namespace we use."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap (bwrap) is not installed; {INSTALL_HINT}", ""
    if shutil.which("prlimit") is None:
        return "prlimit (util-linux) is not installed: `apt-get install util-linux`", ""
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        probe = subprocess.run([bwrap, *_namespace_args(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                                "--perms", "1777", "--size", "65536", "--tmpfs", SHM_DIR, "--", "/bin/true"],
                               capture_output=True, text=True, timeout=20, env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be run ({type(exc).__name__}: {exc}); {INSTALL_HINT}", ""
    if probe.returncode != 0 and "unknown option" in probe.stderr.lower():
        return (f"{version or 'bwrap'} is too old: the sandbox bounds its /dev/shm with --size and --perms "
                f"(bubblewrap 0.7 or later; {probe.stderr.strip()[:200]!r}); {INSTALL_HINT}"), version
    if probe.returncode != 0:
        return (f"bwrap cannot create the sandbox's namespaces here ({probe.stderr.strip()[:300]!r}); "
                f"{INSTALL_HINT}"), version
    return None, version


def available() -> str | None:
    """``None`` when the sandbox works here, else why not (with how to fix it)."""
    return _probe()[0]


def require() -> None:
    """Raise :class:`SandboxUnavailable` unless the sandbox works here."""
    why = available()
    if why is not None:
        raise SandboxUnavailable(why)


def _namespace_args() -> list[str]:
    return ["--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid",
            str(SANDBOX_UID), "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "sandbox"]


# ------------------------------------------------------------------------------------- what it sees


def python_roots() -> list[Path]:
    """The interpreter, the virtual environment and perfwarden's package folders (read-only inside)."""
    import importlib.util

    roots = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    roots.add(Path(os.path.realpath(sys.executable)).parent)
    for name in _PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for loc in (spec.submodule_search_locations or []) if spec else []:
            roots.add(Path(loc).resolve())
    return sorted(r for r in roots if r.exists())


def sandbox_env(policy: Policy) -> dict[str, str]:
    """The whole environment inside: the fixed allow-list, the caller's extras, nothing else."""
    w = str(Path(policy.writable).resolve())
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": w, "TMPDIR": f"{w}/tmp", "USER": "sandbox", "LOGNAME": "sandbox", "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "XDG_CACHE_HOME": f"{w}/.cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{w}/inductor", "TRITON_CACHE_DIR": f"{w}/triton",
    }
    names = ENV_FROM_CALLER + (DEVICE_ENV_FROM_CALLER if policy.device == "cuda" else ())
    env.update({k: os.environ[k] for k in names if k in os.environ})
    for key, value in policy.env.items():
        if _SECRET_NAME.search(key):
            raise SandboxConfigError(f"environment variable {key!r} looks like a secret; the sandbox never gets one")
        env[key] = str(value)
    return env


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _key_store() -> Path | None:
    """The seal key store, resolved, if it exists."""
    try:
        store = key_store_dir().resolve()
    except (OSError, RuntimeError):
        return None
    return store if store.is_dir() else None


@dataclass(frozen=True)
class PathMap:
    """Where the sandbox shows host paths: the writable directory at ``/sandbox/work``, each input at
    ``/sandbox/in/<n>/<name>``, everything else (the system, the interpreter, perfwarden's code, the
    caller's ``read_only`` extras) at its own path. The run's own paths never appear inside."""

    roots: tuple[tuple[str, str], ...]
    """``(host, inside)`` pairs, resolved host paths."""

    def inside(self, path: Path | str) -> str:
        """Where host ``path`` appears inside the sandbox (the deepest root it lies under). A path the
        confined code may have left as a link loop is taken as written, never raises."""
        try:
            resolved = Path(path).resolve()
        except (OSError, RuntimeError):
            resolved = Path(os.path.abspath(path))
        best: tuple[Path, str] | None = None
        for host, there in self.roots:
            if _inside(resolved, Path(host)) and (best is None or len(Path(host).parts) > len(best[0].parts)):
                best = (Path(host), there)
        if best is None:
            return str(path)
        rel = resolved.relative_to(best[0])
        return best[1] if rel == Path(".") else f"{best[1]}/{rel}"

    def translate(self, text: str) -> str:
        """``text`` (an argument, an environment value, a message) with every host path under a root
        rewritten to where it is inside; other text unchanged."""
        for host, there in sorted(self.roots, key=lambda r: -len(r[0])):
            # a function, not a replacement string: the path is put in as it is, with no backslash escapes
            text = re.sub(rf"(?<![\w.\-/]){re.escape(host)}(?![\w.\-])", lambda _m: there, text)
        return text

    def translate_value(self, value: Any) -> Any:
        """A JSON-able value (a message for the command) with every string in it translated."""
        if isinstance(value, str):
            return self.translate(value)
        if isinstance(value, Mapping):
            return {key: self.translate_value(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.translate_value(item) for item in value]
        return value


SANDBOX_ROOT = "/sandbox"
"""Parent of the neutral paths (on bwrap's own root, read-only)."""
COMMAND_FILE = f"{SANDBOX_ROOT}/.command"
"""The command, as a shell script bound read-only: bwrap's own command line (``/proc/1/cmdline``
inside) then names no host path; its options come through ``--args`` from an unnamed file."""


def path_map(policy: Policy) -> PathMap:
    """The neutral paths of ``policy``: its writable directory, then each input not inside an earlier root."""
    roots = [(str(Path(policy.writable).resolve()), f"{SANDBOX_ROOT}/work")]
    for n, item in enumerate(policy.inputs):
        host = Path(item).resolve()
        if not any(_inside(host, Path(r)) for r, _ in roots):
            roots.append((str(host), f"{SANDBOX_ROOT}/in/{n}/{host.name or 'root'}"))
    return PathMap(tuple(roots))


def bwrap_args(policy: Policy, info_fd: int | None = None, command_fd: int | None = None) -> list[str]:
    """bwrap's options (before ``--``) for ``policy``: what is bound where, read-only or not."""
    writable = Path(policy.writable).resolve()
    paths = path_map(policy)
    code = python_roots()
    for root in code:
        if _inside(root, writable):
            raise SandboxConfigError(f"writable directory {str(writable)!r} contains code {str(root)!r}: "
                                     "the sandbox could rewrite what runs next")
    if writable == Path("/") or any(writable == Path(p) for p in ("/usr", "/etc", "/proc", "/dev", "/sys")):
        raise SandboxConfigError(f"writable directory {str(writable)!r} is a system directory")
    args = _namespace_args()
    args += ["--ro-bind", "/usr", "/usr"]
    for name in _MERGED_USR:
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # /dev is bwrap's own tmpfs: read-only at the end (below); /dev/shm (POSIX shared memory, semaphores:
    # multiprocessing and torch need it) is a tmpfs of its own, no bigger than the memory bound -- and
    # the RSS watchdog counts what is in it (a cgroup charges it to the sandbox by itself).
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(policy.limits.memory_bytes), "--tmpfs", SHM_DIR]
    binds: list[tuple[str, Path]] = [("--ro-bind", p) for p in code]
    binds += [("--ro-bind", Path(p).resolve()) for p in (*policy.read_only, *policy.inputs)]
    if policy.device == "cuda":
        for pattern in _GPU_NODES:
            binds += [("--dev-bind", Path(p)) for p in sorted(glob.glob(pattern))]
        binds.append(("--ro-bind", Path("/sys")))
        for entry in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
            if entry and Path(entry).is_dir() and not Path(entry).resolve().is_relative_to("/usr"):
                binds.append(("--ro-bind", Path(entry).resolve()))
    binds.append(("--bind", writable))
    # Parents before children (where they appear inside), so a read-only file inside the writable
    # directory stays read-only.
    seen: set[tuple[str, Path]] = set()
    placed = sorted(((kind, path, paths.inside(path)) for kind, path in binds),
                    key=lambda b: (len(Path(b[2]).parts), b[0] != "--bind", b[2]))
    for kind, path, there in placed:
        if (kind, path) in seen or not path.exists():
            continue
        seen.add((kind, path))
        args += [kind, str(path), there]
    # The seal keys: whoever reads them can seal anything, so where the store lies inside something
    # bound above, an empty tmpfs covers it (a store inside the writable directory is refused by seal).
    keys = _key_store()
    if keys is not None and any(_inside(keys, path) for _, path in seen):
        args += ["--perms", "0555", "--size", "4096", "--tmpfs", paths.inside(keys), "--remount-ro", paths.inside(keys)]
    # bwrap builds the view (and /dev) on tmpfs mounts it owns; make them read-only too, so the writable
    # directory and the bounded /dev/shm really are the only places a write can land.
    if command_fd is not None:
        args += ["--ro-bind-data", str(command_fd), COMMAND_FILE]
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    args += ["--chdir", paths.inside(policy.cwd if policy.cwd else writable)]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return args


# ------------------------------------------------------------------------------------------ limits


def _rlimit_args(limits: Limits) -> list[str]:
    args = [f"--fsize={limits.file_bytes}:{limits.file_bytes}", f"--nofile={limits.open_files}:{limits.open_files}",
            "--core=0:0"]
    if limits.cpu_s is not None:
        args.append(f"--cpu={int(limits.cpu_s)}:{int(limits.cpu_s) + 1}")
    return args


# -------------------------------------------------------------------------------------- a sandbox


def _data_file(data: bytes) -> Any:
    """An unnamed file holding ``data``, at offset 0, for bwrap to read from its descriptor (a file, not
    a pipe: no size at which writing it before bwrap starts would block). bwrap closes it after reading."""
    handle = tempfile.TemporaryFile()
    handle.write(data)
    handle.flush()
    handle.seek(0)
    return handle


def _command_script(argv: Sequence[str]) -> bytes:
    """``argv`` as a one-line ``sh`` script that execs it (so the command keeps bwrap's child's pid)."""
    return b"exec " + b" ".join(os.fsencode(shlex.quote(a)) for a in argv) + b"\n"


def _prepare_writable(writable: Path) -> None:
    """Create the writable directory and its ``tmp`` and ``.cache``. A previous sandbox may have left
    anything there (a file, a link, a FIFO, a directory it locked): that is only its own problem, so a
    name that cannot be made a directory is left as it is (``mkdir`` never follows a link)."""
    writable.mkdir(parents=True, exist_ok=True)
    for sub in ("tmp", ".cache"):
        try:
            (writable / sub).mkdir()
        except OSError:
            pass


_SPAWNER: concurrent.futures.ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def _popen(cmd: list[str], kwargs: dict[str, Any]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, **kwargs)


def _spawn(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` from a thread that lives as long as the process.

    bwrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG`` in the outer bwrap (and its init), and the
    kernel fires it when the *thread* that forked it exits, not the process. Servers started from the
    lab's start-up pool were SIGKILLed the moment that pool shut down (strace: the worker exits, the
    outer bwrap is killed 0.5 ms later). Forking from the main thread or one long-lived spawner thread
    keeps "dies with its parent" meaning the parent process."""
    global _SPAWNER
    if threading.current_thread() is threading.main_thread():
        return _popen(cmd, kwargs)
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")
    return _SPAWNER.submit(_popen, cmd, kwargs).result()


class Confined:
    """One running sandbox around ``argv``. Use like a ``Popen``: ``poll``, ``wait``, ``terminate``,
    ``kill``; ``killed_for`` says why perfwarden stopped it (wall time, memory), ``None`` otherwise.

    Raises :class:`SandboxUnavailable` when bwrap cannot run here (never falls back to running the code
    unconfined)."""

    def __init__(self, argv: Sequence[str], policy: Policy, *, stdin: Any = subprocess.DEVNULL,
                 stdout: Any = subprocess.DEVNULL, stderr: Any = subprocess.DEVNULL, pass_fds: Sequence[int] = ()):
        require()
        self.policy = policy
        writable = Path(policy.writable)
        _prepare_writable(writable)
        self.paths = path_map(policy)
        env = {key: self.paths.translate(value) for key, value in sandbox_env(policy).items()}
        command_file = _data_file(_command_script([self.paths.translate(str(a)) for a in argv]))
        info_r, info_w = os.pipe()
        args = bwrap_args(policy, info_fd=info_w, command_fd=command_file.fileno())
        self.cgroups = Cgroups(policy.limits)
        data_files = [command_file]
        seccomp = no_sysv_shm_filter() if self.cgroups.memory == "rss_watchdog" else None
        if seccomp:
            data_files.append(_data_file(seccomp))
            args += ["--seccomp", str(data_files[-1].fileno())]
        args_file = _data_file(b"".join(os.fsencode(a) + b"\0" for a in args))
        data_files.append(args_file)
        launcher: list[str] = []
        if self.cgroups.procs_files:
            launcher = ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *map(str, self.cgroups.procs_files), "--"]
        cmd = [*launcher, shutil.which("prlimit") or "prlimit", *_rlimit_args(policy.limits), "--",
               shutil.which("bwrap") or "bwrap", "--args", str(args_file.fileno()), "--", "/bin/sh", COMMAND_FILE]
        self.confinement = Confinement(
            tool=_probe()[1], memory=self.cgroups.memory, memory_bytes=policy.limits.memory_bytes,
            pids=self.cgroups.pids, pids_max=policy.limits.pids if self.cgroups.pids != "wall_time_only" else None,
            cpu_s=policy.limits.cpu_s, wall_s=policy.limits.wall_s, device=policy.device, writable=str(writable))
        self.killed_for: str | None = None
        self.started = time.monotonic()
        self._init_pid: int | None = None
        self._pidfd: int | None = None
        self._lock = threading.Lock()
        try:
            self.proc = _spawn(cmd, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                               pass_fds=(info_w, *(f.fileno() for f in data_files), *pass_fds),
                               start_new_session=True, cwd="/")
        except BaseException:
            os.close(info_r)
            self.cgroups.remove()
            raise
        finally:
            os.close(info_w)
            for handle in data_files:
                handle.close()
        self._info_r = info_r
        self._done = threading.Event()
        self._watch = threading.Thread(target=self._watchdog, name=f"sandbox-{self.proc.pid}", daemon=True)
        self._watch.start()

    def translate(self, value: Any) -> Any:
        """``value`` (a message for the command: text or JSON-able) with host paths rewritten to where
        they are inside."""
        return self.paths.translate_value(value)

    # -- Popen-like surface
    @property
    def pid(self) -> int:
        """pid of the outer bwrap process (the sandbox's processes are its descendants)."""
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        code = self.proc.wait(timeout)
        self._finish()
        return code

    def pids(self) -> list[int]:
        """Host pids of every process in the sandbox (for contention samples to exclude)."""
        inside = set(self.cgroups.pids_inside())
        if self._init_pid is not None:
            inside.update(namespace_pids(self._init_pid))
        return sorted(inside | {self.proc.pid})

    def terminate(self) -> None:
        """SIGTERM to the sandboxed command itself (bwrap's init does not forward signals), so a server
        can shut down cleanly and log its final state; :meth:`kill` is the guarantee."""
        target = self._command_pid()
        try:
            if target is not None:
                os.kill(target, signal.SIGTERM)
            else:
                self.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    def kill(self, reason: str | None = None) -> None:
        """SIGKILL the whole sandbox: its PID namespace's init (the kernel kills everything in the
        namespace with it), the launcher, and anything left in its cgroups; waits until they are gone."""
        with self._lock:
            if reason and self.killed_for is None:
                self.killed_for = reason
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.cgroups.kill_all()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - the kernel did not reap it
            pass
        if self._pidfd is not None:
            select.select([self._pidfd], [], [], 10)  # readable once the init (and so the namespace) is gone
        self._finish()

    def exit_reason(self) -> str | None:
        """Why the sandbox ended, when it was not a plain exit: perfwarden's kill, or the memory limit."""
        if self.killed_for:
            return self.killed_for
        if self.cgroups.oom_killed():
            return f"memory limit ({self.policy.limits.memory_bytes >> 20} MiB, cgroup OOM kill)"
        return None

    # -- internals
    def _command_pid(self) -> int | None:
        if self._init_pid is None:
            return None
        try:
            children = Path(f"/proc/{self._init_pid}/task/{self._init_pid}/children").read_text().split()
            return int(children[0]) if children else None
        except (OSError, ValueError):
            return None

    def _read_info(self, deadline: float) -> None:
        buf = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._info_r], [], [], 0.05)
            if ready:
                chunk = os.read(self._info_r, 4096)
                buf += chunk
                if not chunk or buf.rstrip().endswith(b"}"):
                    break
            if self.proc.poll() is not None:
                break
        try:
            self._init_pid = int(loads(buf, what="bwrap's info")["child-pid"])
            self._pidfd = os.pidfd_open(self._init_pid)
        except (ValueError, KeyError, OSError):
            self._init_pid = None

    def _watchdog(self) -> None:
        limits = self.policy.limits
        deadline = self.started + limits.wall_s if limits.wall_s is not None else None
        self._read_info(min(deadline, time.monotonic() + 30) if deadline else time.monotonic() + 30)
        rss = self.cgroups.memory == "rss_watchdog"
        while self.proc.poll() is None and not self._done.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self.kill(f"wall time limit ({limits.wall_s:g}s)")
                return
            if rss and self._init_pid is not None and tree_memory_bytes(self._init_pid, SHM_DIR) > limits.memory_bytes:
                self.kill(f"memory limit ({limits.memory_bytes >> 20} MiB, RSS watchdog)")
                return
            wait = 0.1 if rss else 0.25
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - now))
            self._done.wait(wait)
        self._finish()

    def _finish(self) -> None:
        if self.proc.poll() is None:
            return
        with self._lock:
            if self._done.is_set():
                return
            self._done.set()
        # The outer bwrap is gone; make sure nothing of the sandbox outlived it, then drop the cgroups.
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            select.select([self._pidfd], [], [], 10)
            os.close(self._pidfd)
            self._pidfd = None
        self.cgroups.kill_all()
        self.cgroups.remove()
        try:
            os.close(self._info_r)
        except OSError:
            pass


@dataclass
class Completed:
    """A finished sandboxed command."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    killed_for: str | None
    """Why the sandbox was stopped from outside (``wall time limit …``, ``memory limit …``), else None."""
    confinement: Confinement


def run(argv: Sequence[str], policy: Policy, *, input: bytes | None = None, pass_fds: Sequence[int] = ()) -> Completed:
    """Run ``argv`` confined until it exits or a limit stops it; output is captured (bounded by the file
    size limit). It goes through anonymous temporary files outside the sandbox's view: no name the
    confined code could replace with a directory, FIFO or link for the parent to trip over."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        box = Confined(argv, policy, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                       stdout=out, stderr=err, pass_fds=pass_fds)
        if input is not None:
            assert box.proc.stdin is not None
            try:
                box.proc.stdin.write(input)
                box.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
        code = box.wait()
        limit = policy.limits.file_bytes
        out.seek(0)
        err.seek(0)
        result = Completed(code, out.read(limit), err.read(limit), time.monotonic() - box.started,
                           box.exit_reason(), box.confinement)
    return result


# ---------------------------------------------------------------------------- calling one function


@dataclass
class SandboxResult:
    """What happened to one sandboxed function call."""

    ok: bool
    value: Any = None
    error: str | None = None
    """Why it failed: ``wall time limit …``, ``memory limit …``, ``killed by SIGXCPU …``, or the
    exception it raised (``Type: message``)."""
    seconds: float = 0.0
    stderr_tail: str = ""
    confinement: Confinement | None = None


_CALL = textwrap.dedent(r'''
    import importlib.util, json, os, sys
    out = os.fdopen(int(sys.argv[1]), "w")
    path, func, payload = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    try:
        spec = importlib.util.spec_from_file_location("candidate", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        value = getattr(module, func)(**payload)
        text = json.dumps({"ok": True, "value": value})
    except BaseException as exc:
        text = json.dumps({"ok": False, "error": type(exc).__name__ + ": " + str(exc)[:500]})
    out.write(text)
    out.flush()
''')


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def describe_exit(code: int | None) -> str:
    """A sandboxed command's exit status in words (bwrap reports a signal death as 128 + signal)."""
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {_signal_name(-code)}"
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        name = _signal_name(code - 128)
        hint = {"SIGXCPU": " (CPU-time limit)", "SIGXFSZ": " (file-size limit)", "SIGKILL": " (killed)",
                "SIGSEGV": " (segmentation fault)"}.get(name, "")
        return f"killed by {name}{hint}"
    return f"exit status {code}"


def call_function(module_path: Path | str, function: str, payload: Mapping[str, Any] | None,
                  policy: Policy) -> SandboxResult:
    """Call ``function(**payload)`` from the file ``module_path`` inside a sandbox (the file is made
    visible read-only); the JSON-able return value comes back. Never raises for the code's misbehaviour."""
    module_path = Path(module_path).resolve()
    policy = Policy(writable=policy.writable, read_only=policy.read_only, env=policy.env, device=policy.device,
                    limits=policy.limits, cwd=policy.cwd, inputs=(*policy.inputs, module_path))
    read_fd, write_fd = os.pipe()
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: _drain(read_fd, chunks), daemon=True)
    reader.start()
    try:
        done = run([sys.executable, "-I", "-c", _CALL, str(write_fd), str(module_path), function,
                    json.dumps(dict(payload or {}))], policy, pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    reader.join(5)
    tail = done.stderr.decode("utf-8", "replace")[-2000:]
    if done.killed_for:
        return SandboxResult(False, error=done.killed_for, seconds=done.seconds, stderr_tail=tail,
                             confinement=done.confinement)
    ok, value, error = parse_result(b"".join(chunks), done.returncode)
    return SandboxResult(ok, value=value, error=error, seconds=done.seconds, stderr_tail=tail,
                         confinement=done.confinement)


def parse_result(raw: bytes, returncode: int | None) -> tuple[bool, Any, str | None]:
    """``(ok, value, error)`` from what the confined code wrote on the result channel. It may have written
    anything there, so anything but the harness's own ``{"ok": bool, ...}`` is a failure saying so
    (never an exception: nesting too deep for the parser, an error that is not a string, bad UTF-8)."""
    try:
        body = loads(raw, what="the sandbox's result")
    except StrictJsonError:
        return False, None, f"no result ({describe_exit(returncode)})"
    if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
        return False, None, "malformed result"
    error = body.get("error")
    if body["ok"]:
        return (True, body.get("value"), None) if error is None else (False, None, "malformed result")
    return False, None, error if isinstance(error, str) and error else "malformed result"


def _drain(fd: int, chunks: list[bytes], limit: int = 16 << 20) -> None:
    with os.fdopen(fd, "rb") as handle:
        total = 0
        while total < limit:
            chunk = handle.read(65536)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
