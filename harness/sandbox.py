"""Run untrusted generated code (LLM-written kernels) in a confined subprocess.

Layers, each cheap and each recorded when it trips:
- a separate process with a wall-clock timeout (the whole process group is killed);
- resource limits: CPU seconds, address space, file size, open files;
- a scrubbed environment (no API keys, no proxies) and ``python -I`` (no user site, no PYTHON* vars);
- no network: a fresh network namespace when the kernel allows it (root on Linux), and in any case an
  audit hook that refuses socket creation/connection and subprocesses;
- confinement to the run directory: the audit hook refuses opening files for writing outside it.

The audit hook is defence in depth, not a security boundary against hostile native code; the namespace
and rlimits are what hold then. Results come back as one JSON object on a dedicated file descriptor.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
SAFE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ")


@dataclass
class SandboxResult:
    """What happened to one sandboxed call."""

    ok: bool
    value: Any = None
    error: str | None = None
    """Why it failed: ``timeout``, ``killed by signal N``, ``blocked: …``, or the exception it raised."""
    seconds: float = 0.0
    stderr_tail: str = ""
    network_namespace: bool = False


_BOOTSTRAP = textwrap.dedent(r'''
    import json, os, sys
    RUN_DIR = os.path.realpath(sys.argv[1])
    OUT_FD = int(sys.argv[2])
    MODULE_PATH, FUNC = sys.argv[3], sys.argv[4]
    PAYLOAD = json.loads(sys.argv[5])

    def _inside(path):
        try:
            p = os.path.realpath(os.fsdecode(path))
        except Exception:
            return False
        return p == RUN_DIR or p.startswith(RUN_DIR + os.sep) or p.startswith("/dev/null")

    def _hook(event, args):
        if event in ("socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto"):
            raise PermissionError("blocked: network access (" + event + ")")
        if event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.spawn", "pty.spawn"):
            raise PermissionError("blocked: process creation (" + event + ")")
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = any(c in mode for c in "wax+") or (flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
            if writes and not _inside(args[0]):
                raise PermissionError("blocked: write outside the run directory: " + os.fsdecode(args[0]))
        if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.chmod") and args:
            if not _inside(args[0]):
                raise PermissionError("blocked: " + event + " outside the run directory")

    import importlib.util
    spec = importlib.util.spec_from_file_location("candidate", MODULE_PATH)
    module = importlib.util.module_from_spec(spec)
    out = os.fdopen(OUT_FD, "w")
    sys.addaudithook(_hook)
    try:
        spec.loader.exec_module(module)
        value = getattr(module, FUNC)(**PAYLOAD)
        out.write(json.dumps({"ok": True, "value": value}))
    except BaseException as exc:
        out.write(json.dumps({"ok": False, "error": type(exc).__name__ + ": " + str(exc)[:500]}))
    out.flush()
''')


def _limits(cpu_s: int, mem_bytes: int, fsize_bytes: int, net_ns: bool):
    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        if net_ns:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.unshare(CLONE_NEWNET)  # best effort: without privileges the audit hook still blocks sockets
    return apply


def network_namespace_available() -> bool:
    """Whether this process may create a network namespace (root on Linux)."""
    return sys.platform.startswith("linux") and os.geteuid() == 0


def run_sandboxed(module_path: Path, function: str, run_dir: Path, payload: dict[str, Any] | None = None, *,
                  timeout_s: float = 30.0, cpu_s: int = 60, mem_bytes: int = 4 << 30,
                  fsize_bytes: int = 64 << 20, extra_env: dict[str, str] | None = None) -> SandboxResult:
    """Call ``function(**payload)`` from ``module_path`` in a confined child; never raises for the
    child's misbehaviour (it is recorded in the result)."""
    run_dir = Path(run_dir).resolve()
    work = run_dir / "sandbox"
    work.mkdir(parents=True, exist_ok=True)
    env = {k: os.environ[k] for k in SAFE_ENV_KEYS if k in os.environ}
    env.update({"HOME": str(work), "TMPDIR": str(work), "OMP_NUM_THREADS": "1", **(extra_env or {})})
    read_fd, write_fd = os.pipe()
    net_ns = network_namespace_available()
    cmd = [sys.executable, "-I", "-c", _BOOTSTRAP, str(run_dir), str(write_fd), str(Path(module_path).resolve()),
           function, json.dumps(payload or {})]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, pass_fds=(write_fd,),
                                preexec_fn=_limits(cpu_s, mem_bytes, fsize_bytes, net_ns))
    finally:
        os.close(write_fd)
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        timed_out = True
    with os.fdopen(read_fd, "r") as handle:
        raw = handle.read()
    seconds = time.monotonic() - started
    tail = stderr.decode("utf-8", "replace")[-2000:]
    if timed_out:
        return SandboxResult(False, error=f"timeout after {timeout_s:.0f}s", seconds=seconds, stderr_tail=tail,
                             network_namespace=net_ns)
    if proc.returncode and proc.returncode < 0:
        return SandboxResult(False, error=f"killed by signal {-proc.returncode}", seconds=seconds,
                             stderr_tail=tail, network_namespace=net_ns)
    try:
        body = json.loads(raw)
    except ValueError:
        return SandboxResult(False, error=f"no result (exit code {proc.returncode})", seconds=seconds,
                             stderr_tail=tail, network_namespace=net_ns)
    return SandboxResult(bool(body.get("ok")), value=body.get("value"), error=body.get("error"), seconds=seconds,
                         stderr_tail=tail, network_namespace=net_ns)
