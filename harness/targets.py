"""Serving targets the harness drives: start, health-wait, record what the server reports, stop.

Why failures are classified: a leg whose server never came up, one whose server died mid-run, and one
that hung are different evidence (start failure = the overlay is broken; crash = SERVER_CRASH; timeout
= we cannot tell). Each raises its own exception carrying the exit code and the tail of ``server.log``,
so the orchestrator records the right failure instead of a generic traceback.

What is written into the leg directory:
- ``server.log``: the server's stdout+stderr, appended, with one header line per start (sealed when the
  server stops, see ``perfwarden.harness.seal``);
- ``server_info.json``: ``GET /server_info`` as the running server reports it (written atomically, sealed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import httpx

from perfwarden.harness import seal

FailureKind = Literal["start_failure", "crash", "timeout"]


class TargetError(RuntimeError):
    """The target failed; ``kind`` says how, ``log_tail`` shows the server's last words."""

    kind: FailureKind = "start_failure"

    def __init__(self, message: str, *, returncode: int | None = None, log_tail: str = ""):
        super().__init__(message)
        self.returncode = returncode
        self.log_tail = log_tail

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n--- server.log tail ---\n{self.log_tail}" if self.log_tail else base


class TargetStartError(TargetError):
    """The server exited (or refused) before it became healthy: bad knob, busy port, load failure."""

    kind: FailureKind = "start_failure"


class TargetCrashed(TargetError):
    """The server was healthy and then exited without being asked to."""

    kind: FailureKind = "crash"


class TargetTimeout(TargetError):
    """The server did not become healthy (or did not stop) in time."""

    kind: FailureKind = "timeout"


def knob_args(config: dict[str, Any]) -> list[str]:
    """``{'threads': 2, 'torch_compile': True, 'op_overrides': {...}}`` -> ``['--set', 'threads=2', ...]``."""
    args: list[str] = []
    for key in sorted(config):
        value = config[key]
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, dict):
            text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        else:
            text = str(value)
        args += ["--set", f"{key}={text}"]
    return args


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the server re-checks and fails clearly if it was taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def start_failure_line(log_text: str) -> str | None:
    """The server's own one-line reason for a failed start, if it printed one."""
    for line in reversed(log_text.splitlines()):
        if line.startswith("START FAILED:"):
            return line[len("START FAILED:") :].strip()
    return None


class ServerTarget:
    """A server subprocess for one leg: start, wait for health, record what it reports, stop.

    Subclasses say how to build the command line and where the server reports itself."""

    name = "server"
    health_path = "/health"
    info_paths: tuple[str, ...] = ("/server_info",)

    def __init__(
        self,
        leg_dir: Path | str,
        config: dict[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        start_timeout_s: float = 180.0,
        python: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
    ):
        self.leg_dir = Path(leg_dir)
        self.config = dict(config or {})
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.start_timeout_s = start_timeout_s
        self.python = python or sys.executable
        self.extra_env = dict(env or {})
        self.cwd = Path(cwd) if cwd is not None else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.server_info: dict[str, Any] | None = None
        self._stopping = False
        self._log_handle: Any = None

    # -- paths

    @property
    def server_log(self) -> Path:
        return self.leg_dir / "server.log"

    @property
    def server_info_path(self) -> Path:
        return self.leg_dir / "server_info.json"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def thread_env(self) -> dict[str, str]:
        """Environment that pins the server's threads (none by default)."""
        return {}

    def log_text(self) -> str:
        return self.server_log.read_text(encoding="utf-8", errors="replace") if self.server_log.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- lifecycle

    def start(self) -> dict[str, Any]:
        """Start the server, wait for ``/health``, record ``/server_info``; returns the server info."""
        if self.proc is not None:
            raise RuntimeError(f"target for {str(self.leg_dir)!r} already started")
        self.leg_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.thread_env())
        env.update(self.extra_env)
        cmd = self.command()
        self._log_handle = open(self.server_log, "ab")
        header = f"=== perfwarden EmbeddedTarget start {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} cmd={cmd!r}\n"
        self._log_handle.write(header.encode())
        self._log_handle.flush()
        self.proc = subprocess.Popen(
            cmd, stdout=self._log_handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=self.cwd, start_new_session=True,
        )
        self._wait_healthy()
        info = self.fetch_info()
        if info is None:
            self._kill()
            raise TargetStartError(f"server at {self.base_url} is healthy but none of {list(self.info_paths)!r} "
                                   "answered with a JSON object", returncode=self._returncode(),
                                   log_tail=self.log_tail())
        seal.write_json(self.server_info_path, info)
        self.server_info = info
        return info

    def fetch_info(self) -> dict[str, Any] | None:
        """What the running server reports about its launch (first info path that answers)."""
        with httpx.Client(timeout=10.0) as client:
            for path in self.info_paths:
                try:
                    response = client.get(f"{self.base_url}{path}")
                    if response.status_code == 200 and isinstance(response.json(), dict):
                        return response.json()
                except (httpx.HTTPError, ValueError):
                    continue
        return None

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    self._close_log()
                    reason = start_failure_line(self.log_text()) or "no START FAILED line; see the log tail"
                    raise TargetStartError(f"{self.name} server exited with code {rc} before becoming healthy: {reason}",
                                           returncode=rc, log_tail=self.log_tail())
                try:
                    if client.get(f"{self.base_url}{self.health_path}").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self._kill()
                    raise TargetTimeout(
                        f"{self.name} server did not become healthy within {self.start_timeout_s:.0f}s at {self.base_url}",
                        returncode=self._returncode(), log_tail=self.log_tail(),
                    )
                time.sleep(0.1)

    def ensure_running(self) -> None:
        """Raise ``TargetCrashed`` if the server exited without being asked to."""
        if self.proc is None:
            raise RuntimeError("target not started")
        rc = self.proc.poll()
        if rc is not None and not self._stopping:
            self._close_log()
            raise TargetCrashed(f"{self.name} server exited unexpectedly with code {rc}", returncode=rc,
                                log_tail=self.log_tail())

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, wait ``timeout_s``, then SIGKILL the process group; returns the exit code."""
        if self.proc is None:
            return None
        self._stopping = True
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._kill()
        self._close_log()
        return self.proc.returncode

    def _kill(self) -> None:
        assert self.proc is not None
        self._stopping = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - the kernel did not reap it
            pass
        self._close_log()

    def _returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def _close_log(self) -> None:
        """Close the server's log; once nothing writes to it any more, seal it as it is."""
        if self._log_handle is not None and not self._log_handle.closed:
            self._log_handle.close()
            seal.seal_file(self.server_log)

    def __enter__(self) -> ServerTarget:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class EmbeddedTarget(ServerTarget):
    """Runs ``python -m perfwarden.harness.embedded_server`` for one leg."""

    name = "embedded"
    module = "perfwarden.harness.embedded_server"

    def command(self) -> list[str]:
        return [self.python, "-m", self.module, "--host", self.host, "--port", str(self.port), *knob_args(self.config)]

    def thread_env(self) -> dict[str, str]:
        return {"OMP_NUM_THREADS": str(self.config["threads"])} if "threads" in self.config else {}
