"""A backend under benchmark and the parent's side of its sandboxed worker (the client of ``worker``'s
protocol: nonce-tied requests, the worker's failures, its output files read without trusting them).

Its own module so that the runner (which starts the workers) and the phases (which drive them) both
import it and neither imports the other.
"""

from __future__ import annotations

import io
import json
import os
import queue
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from perfwarden.formats.strict_json import StrictJsonError, loads
from perfwarden.harness import sandbox
from perfwarden.harness.opbench import guard
from perfwarden.harness.opbench.correctness import Check
from perfwarden.harness.opbench.digest import parse_spec
from perfwarden.harness.opbench.worker import PROTOCOL_PREFIX

Device = Literal["cpu", "cuda"]

OUTPUT_FILE_MAX_BYTES = 256 << 20
"""Largest output file a worker may hand back (a bigger one is a bad output, never read)."""


class WorkerFailed(RuntimeError):
    """The worker stopped answering (timeout, crash, limit): the implementation's fault, on its rows."""


def package_root() -> Path | None:
    """The folder holding the ``perfwarden`` package this process imported, when it is a plain folder
    named ``perfwarden`` that is not where an editable install maps it (a checkout run through
    ``PYTHONPATH``): the worker must import this same code, so the folder is shown read-only inside and put
    first on the worker's path. None where the interpreter finds the package on its own."""
    import perfwarden.harness as pkg  # lazy: where this process found the package, read at call time

    here = Path(pkg.__file__).parent.parent
    if here.name != "perfwarden":
        return None
    root = here.parent
    return None if any(Path(p).resolve() == root.resolve() for p in sys.path[1:] if p and "site-packages" in p) else root


def worker_argv(root: Path | None) -> list[str]:
    """How the worker is started: ``python -I`` (no environment, no user site), on ``root`` when given."""
    if root is None:
        return [sys.executable, "-I", "-m", "perfwarden.harness.opbench.worker"]
    boot = (f"import sys; sys.path.insert(0, {str(root)!r}); "
            "from perfwarden.harness.opbench.worker import main; sys.exit(main())")
    return [sys.executable, "-I", "-c", boot]


class WorkerClient:
    """One sandboxed worker process and its request/answer channel."""

    def __init__(self, backend: str, spec: str, workdir: Path, job: dict[str, Any], *, threads: int, triton: bool,
                 device: Device, limits: sandbox.Limits):
        self.backend = backend
        self.workdir = workdir
        self.failure: str | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        target, _, is_file = parse_spec(spec)
        env = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "OPENBLAS_NUM_THREADS": str(threads), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
        if triton and device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        root = package_root()
        policy = sandbox.Policy(writable=workdir, inputs=(Path(target),) if is_file else (),
                                read_only=(root,) if root else (), env=env, device=device, limits=limits)
        # The worker's stderr goes to a file beside (not inside) its writable directory: it cannot be
        # replaced by a link or a FIFO from inside, and we read it back through our own handle.
        self._stderr: IO[bytes] = open(workdir.parent / f"{workdir.name}.stderr.log", "w+b")
        self.box = sandbox.Confined(worker_argv(root), policy,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.violations: list[str] = []
        """Why this worker's candidate is refused, as seen on the protocol (forged answers, the reference
        reached, the clock patched): the runner refuses the backend on any."""
        self._secret = guard.new_secret()
        self._count = 0
        threading.Thread(target=self._read, name=f"opbench-{backend}", daemon=True).start()
        self._send({**job, "spec": spec})

    @property
    def confinement(self) -> sandbox.Confinement:
        return self.box.confinement

    def _read(self) -> None:
        stdout = self.box.proc.stdout
        assert stdout is not None
        for raw in stdout:
            line = raw.decode("utf-8", errors="replace")
            if line.startswith(PROTOCOL_PREFIX):
                try:  # the confined worker may write anything: strict, and never an exception
                    msg = loads(line[len(PROTOCOL_PREFIX):], what="a worker message")
                except StrictJsonError:
                    continue
                if isinstance(msg, dict):
                    self._answers.put(msg)
        self._answers.put(None)

    def _send(self, msg: dict[str, Any]) -> None:
        stdin = self.box.proc.stdin
        assert stdin is not None
        try:
            stdin.write((json.dumps(self.box.translate(msg)) + "\n").encode())  # paths as the worker sees them
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reader sees EOF and the request fails with the exit status

    def answer(self, timeout_s: float) -> dict[str, Any]:
        if self.failure:
            raise WorkerFailed(self.failure)
        try:
            msg = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            self.box.kill(f"timeout: no answer within {timeout_s:g}s (worker killed)")
            self.failure = f"timeout: no answer within {timeout_s:g}s (worker killed)"
            raise WorkerFailed(self.failure) from None
        if msg is None:
            self.failure = self._exit_description()
            raise WorkerFailed(self.failure)
        return msg

    def request(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return self.timed_request(msg, timeout_s)[0]

    def timed_request(self, msg: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], int]:
        """The answer to ``msg`` and the wall time (ns, the parent's clock) from sending it to its answer.
        The answer must carry the request's nonce and be the only one: anything else is a forgery."""
        if self.failure:
            raise WorkerFailed(self.failure)
        self._unasked()
        self._count += 1
        tag = guard.nonce(self._secret, self._count)
        t0 = time.perf_counter_ns()
        self._send({**msg, "nonce": tag})
        ans = self.answer(timeout_s)
        wall = time.perf_counter_ns() - t0
        if ans.get("nonce") != tag:
            self._violate("protocol: an answer not tied to its request (forged on the worker's stream)")
        for what in ans.get("reached_reference") or []:
            self._violate(f"reached the reference at run time ({what}): a self-comparison")
        if ans.get("not_plain"):
            self._violate("returned something other than a plain tensor from a timed call (a subclass or a "
                          "lazy object computes when it is read, after the clock)")
        if ans.get("tampered"):
            self._violate(f"patched the harness's clock or tensor methods ({', '.join(map(str, ans['tampered']))[:120]})")
        return ans, wall

    def _unasked(self) -> None:
        if not self._answers.empty():
            extra = self._answers.get_nowait()
            if extra is not None:
                self._violate("protocol: an answer nobody asked for (forged on the worker's stream)")
            else:
                self._answers.put(None)

    def _violate(self, why: str) -> None:
        if why not in self.violations:
            self.violations.append(why)

    def _exit_description(self) -> str:
        try:
            code = self.box.wait(5)
        except subprocess.TimeoutExpired:
            self.box.kill()
            code = self.box.wait()
        reason = self.box.exit_reason()
        desc = f"worker stopped: {reason}" if reason else f"worker {sandbox.describe_exit(code)}"
        tail = self.stderr_tail()
        return desc + (f": {tail}" if tail else "")

    def stderr_tail(self, limit: int = 300) -> str:
        try:
            self._stderr.flush()
            self._stderr.seek(max(0, os.fstat(self._stderr.fileno()).st_size - 8192))
            text = self._stderr.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return ""
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-limit:]

    def cpu_tasks(self) -> dict[tuple[int, int], int]:
        """CPU time of every thread of every process in this worker's sandbox, read by the parent."""
        return guard.task_cpu_ns(self.box.pids())

    def ask_exit(self) -> None:
        if self.box.poll() is None and not self.failure:
            self._unasked()
            self._send({"cmd": "exit"})

    def close(self) -> None:
        if self.box.poll() is None and not self.failure:
            self.ask_exit()
            try:
                self.box.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self.box.kill()
        for stream in (self.box.proc.stdin, self.box.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        self._stderr.close()


def read_output_file(path: Path, limit: int = OUTPUT_FILE_MAX_BYTES) -> Any:
    """A worker's output tensors, read without following links or blocking on a FIFO the worker may have
    put in its place, and only when it is a regular file within ``limit`` bytes."""
    import torch  # heavy: imported when an output is read, not when the CLI or the auditor imports the op bench

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path.name!r} is not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{path.name!r} is {info.st_size} bytes, over the {limit}-byte limit")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    return torch.load(io.BytesIO(data), weights_only=True)


@dataclass
class Timed:
    """One timed trial of one backend at one shape."""

    call_ms: list[float]
    graph_ms: list[float] | None = None
    graph_raised: str | None = None


@dataclass
class Backend:
    """One implementation under benchmark."""

    name: str
    spec: str
    is_reference: bool
    digest: str
    triton: bool
    checks: dict[tuple[tuple[int, ...], int], Check] = field(default_factory=dict)
    times: dict[tuple[tuple[int, ...], int], Timed | str] = field(default_factory=dict)
    """(shape, trial) -> the trial's figures, or why the trial has none."""
    unavailable: str | None = None
    """Set when the backend never ran (e.g. triton not installed)."""
    refusals: list[str] = field(default_factory=list)
    """Why the op bench refuses this candidate (``guard``): its rows are incorrect whatever they timed."""
    worker: WorkerClient | None = None
