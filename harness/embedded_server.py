"""The embedded target: an OpenAI-compatible streaming server for SmolLM2-135M-Instruct (CPU, or CUDA
with ``--set device=cuda``).

Launch::

    python -m perfwarden.harness.embedded_server --port 8123 --set threads=2 --set max_batch_size=8 ...

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both with ``stream: true`` SSE and
non-streaming, and ``response_format`` with a JSON schema honoured by a token mask per step:
``harness/structured_output.py``), ``GET /v1/models``, ``GET /health``, ``GET /server_info`` (alias ``/get_server_info``).

Why it is built this way (design §6): every knob is real and validated before anything heavy happens,
so a bad knob fails the start in well under a second with a clear message and a non-zero exit. The
server itself reports its effective launch configuration (``/server_info``) — the auditor diffs that,
never a producer's copy — and the log says which mechanisms actually engaged (op override calls,
prompt-lookup acceptance, response-cache hits, quantized modules, compile warm-up).

Exit codes: 0 clean shutdown, 2 invalid knob or argument, 3 port unavailable, 1 any other start
failure (``device=cuda`` on a host without CUDA among them: a valid knob this host cannot serve), 70
scheduler crash. A start failure prints one ``START FAILED: ...`` line to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from perfwarden.harness.model import MODEL_NAME, DeviceError
from perfwarden.harness.node_identity import cpu_model
from perfwarden.harness.ops import OverrideError, install_override, load_function
from perfwarden.harness.target_config import EMBEDDED_OPS, ConfigError, EmbeddedConfig, parse_set_args
from perfwarden.harness.targets import (EXIT_BAD_CONFIG, EXIT_CRASH, EXIT_OK, EXIT_PORT,
                                        EXIT_START_FAILED, listen_socket, port_busy_message)

if TYPE_CHECKING:  # starlette and uvicorn load only once the knobs validated and the port is bound
    import uvicorn
    from starlette.applications import Starlette

log = logging.getLogger("perfwarden.embedded")


# ------------------------------------------------------------------------------------------ config
# The knobs live in one place, harness/target_config.py (the tuner, the labs and the report read the same
# model); the server validates its --set arguments with it.

ServerConfig = EmbeddedConfig
SUPPORTED_OPS = EMBEDDED_OPS


def build_config(raw: dict[str, Any]) -> EmbeddedConfig:
    """Validate raw knob values; a bad one raises ``ConfigError`` naming the knob, the value and why."""
    return EmbeddedConfig.validate_knobs(raw)


def check_overrides(cfg: ServerConfig) -> None:
    """Load every override function now (before the slow model load) so a missing file or function
    fails the start at once; installing them into the model happens after the load."""
    if not cfg.op_overrides:
        return

    for op, spec in sorted(cfg.op_overrides.items()):
        try:
            load_function(spec)
        except OverrideError as exc:
            raise ConfigError(f"invalid knob 'op_overrides' for op {op!r}: {exc}") from None


# -------------------------------------------------------------------------------------- the server


class EmbeddedServer:
    """Model, engine and everything ``/server_info`` reports."""

    def __init__(self, cfg: ServerConfig, host: str, port: int, explicit: list[str]):
        self.cfg = cfg
        self.host = host
        self.port = port
        self.explicit = explicit
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.overrides: list[Any] = []
        self.startup: dict[str, Any] = {}

    # -- start-up (heavy imports happen here, after validation and port binding)

    def load(self) -> None:
        import torch

        from perfwarden.harness import model as M  # lazy: torch: after the port is bound

        torch.set_num_threads(self.cfg.threads)  # on CUDA: host-side work only (see EmbeddedConfig.device)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set (in-process tests); the report says what is in effect
            pass
        M.check_device(self.cfg.device)  # before any weights load: a clear start error, never a traceback
        t0 = time.monotonic()
        if self.cfg.weights == "random":
            self.model, self.tokenizer, self.info = M.load_random_model(
                dtype=self.cfg.dtype, attn_implementation=self.cfg.attn_implementation, device=self.cfg.device)
            log.warning("ENGAGED weights=random seed=%d digest=%s tokenizer=%s config=%r: performance-only, "
                        "outputs are noise and correctness cannot be verified", M.RANDOM_WEIGHT_SEED,
                        self.info.weights_digest, self.info.tokenizer, self.info.model_dir)
        else:
            self.info = M.model_info()
            self.model, self.tokenizer = M.load_model(dtype=self.cfg.dtype, attn_implementation=self.cfg.attn_implementation,
                                                      device=self.cfg.device)
        log.info("model loaded name=%r dir=%r digest=%s in %.2fs", self.info.name, self.info.model_dir,
                 self.info.weights_digest, time.monotonic() - t0)
        self.startup.update(device_report(self.cfg.device))
        if self.cfg.device != "cpu":
            log.info("ENGAGED device=%s name=%r", self.cfg.device, self.startup["device_name"])
        self.stop_token_ids = sorted({int(self.tokenizer.eos_token_id), *self._extra_stop_ids()})
        if self.cfg.quantization == "int8_dynamic":
            self._quantize()
        for op, spec in sorted(self.cfg.op_overrides.items()):
            self._install_override(op, spec)
        if self.cfg.torch_compile:
            self._compile()
        from perfwarden.harness.embedded_engine import Engine, EngineOptions  # lazy: torch: after the port is bound

        self.engine = Engine(
            self.model,
            EngineOptions(
                max_batch_size=self.cfg.max_batch_size,
                batch_wait_ms=self.cfg.batch_wait_ms,
                prompt_lookup=self.cfg.prompt_lookup,
                prompt_lookup_num_tokens=self.cfg.prompt_lookup_num_tokens,
                prompt_lookup_max_ngram=self.cfg.prompt_lookup_max_ngram,
                response_cache=self.cfg.response_cache,
                response_cache_size=self.cfg.response_cache_size,
                stop_token_ids=tuple(self.stop_token_ids),
            ),
            on_fatal=self._on_fatal,
        )
        if self.cfg.prompt_lookup:
            log.info("ENGAGED prompt_lookup num_tokens=%d max_ngram=%d (speculative decoding, lever B)",
                     self.cfg.prompt_lookup_num_tokens, self.cfg.prompt_lookup_max_ngram)
        if self.cfg.response_cache:
            log.warning("ENGAGED response_cache size=%d: identical requests are answered from memory",
                        self.cfg.response_cache_size)
        self.engine.start()

    def _extra_stop_ids(self) -> list[int]:
        """``<|endoftext|>`` also ends a SmolLM2 generation when the model emits it."""
        tid = self.tokenizer.convert_tokens_to_ids("<|endoftext|>")
        return [tid] if isinstance(tid, int) and tid >= 0 else []

    def _quantize(self) -> None:
        import warnings

        import torch

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from torch.ao.quantization import quantize_dynamic

            quantize_dynamic(self.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
        n = sum(1 for m in self.model.modules() if "DynamicQuantizedLinear" in type(m).__name__
                or type(m).__module__.startswith("torch.ao.nn.quantized.dynamic"))
        if n == 0:
            raise RuntimeError("quantization 'int8_dynamic' replaced no Linear module")
        self.startup["quantized_linear_modules"] = n
        deprecations = sorted({str(w.message).splitlines()[0] for w in caught if issubclass(w.category, DeprecationWarning)})
        log.info("ENGAGED quantization=int8_dynamic linear_modules_quantized=%d", n)
        for line in deprecations:
            log.warning("quantization: %s", line)

    def _install_override(self, op: str, spec: str) -> None:
        def first_call(name: str) -> None:
            log.info("ENGAGED op_override op=%r first call", name)

        installed = install_override(self.model, op, spec, on_first_call=first_call)
        self.overrides.append(installed)
        log.info("op_override installed op=%r spec=%r source=%r sha256=%s modules_patched=%d",
                 op, spec, installed.source, installed.sha256, installed.modules_patched)

    def _compile(self) -> None:
        """Compile the forward and warm it up through the real engine so compile stalls and compile
        errors happen before ``/health`` answers, never inside a timed rep.

        Phases cover the shape classes torch specializes on (batch 1 vs >1; one query token vs many):
        one request alone, then two together (when the batch allows), each prefilled and decoded.
        Later recompilations are logged (``torch._logging`` "recompiles") so they show up in server.log.
        """
        import torch

        t0 = time.monotonic()
        torch._logging.set_logs(recompiles=True)
        self.model.forward = torch.compile(self.model.forward, dynamic=True)
        phases = [[[1, 2, 3, 4]]]
        if self.cfg.max_batch_size >= 2:
            phases.append([[5, 6, 7, 8, 9, 10], [11, 12, 13]])
        for number, prompts in enumerate(phases, start=1):
            started = time.monotonic()
            self._warm_up(prompts)
            log.info("torch_compile warm-up phase %d (batch %d) took %.2fs", number, len(prompts), time.monotonic() - started)
        self.startup["torch_compile_warmup_s"] = round(time.monotonic() - t0, 3)
        log.info("ENGAGED torch_compile dynamic=True backend='inductor' warmup_s=%.2f",
                 self.startup["torch_compile_warmup_s"])

    def _warm_up(self, prompts: list[list[int]]) -> None:
        import threading

        # lazy: torch: after the port is bound
        from perfwarden.harness.embedded_engine import DoneEvent, Engine, EngineOptions, ErrorEvent, GenParams, GenRequest

        engine = Engine(self.model, EngineOptions(max_batch_size=len(prompts), batch_wait_ms=1000.0,
                                                  prompt_lookup=self.cfg.prompt_lookup,
                                                  prompt_lookup_num_tokens=self.cfg.prompt_lookup_num_tokens,
                                                  prompt_lookup_max_ngram=self.cfg.prompt_lookup_max_ngram))
        errors: list[str] = []
        pending = threading.Semaphore(0)

        def emit(event: Any) -> None:
            if isinstance(event, ErrorEvent):
                errors.append(event.message)
            if isinstance(event, (DoneEvent, ErrorEvent)):
                pending.release()

        engine.start()
        try:
            for i, ids in enumerate(prompts):
                engine.submit(GenRequest(rid=f"warmup-{i}", prompt_ids=ids, params=GenParams(max_tokens=3), emit=emit))
            for _ in prompts:
                if not pending.acquire(timeout=1800):
                    raise RuntimeError("torch_compile warm-up timed out after 1800s")
        finally:
            engine.stop()
        if errors:
            raise RuntimeError(f"torch_compile warm-up failed: {errors[0]}")

    def _on_fatal(self, exc: BaseException) -> None:
        log.critical("scheduler crashed (%s: %s); exiting with code %d", type(exc).__name__, exc, EXIT_CRASH)
        logging.shutdown()
        os._exit(EXIT_CRASH)

    # -- reporting

    def server_info(self) -> dict[str, Any]:
        import torch
        import transformers

        info: dict[str, Any] = self.cfg.model_dump()
        info.update(
            model=MODEL_NAME,
            served_model_name=MODEL_NAME,
            model_path=self.info.model_dir,
            weights_digest=self.info.weights_digest,
            source_gguf_sha256=self.info.source_gguf_sha256,
            tokenizer=self.info.tokenizer,
            torch_version=torch.__version__,
            transformers_version=transformers.__version__,
            python_version=platform.python_version(),
            version=_perfwarden_version(),
            torch_num_threads=torch.get_num_threads(),
            torch_num_interop_threads=torch.get_num_interop_threads(),
            stop_token_ids=self.stop_token_ids,
            op_overrides_detail={
                o.op: {"spec": o.spec, "source": o.source, "sha256": o.sha256, "modules_patched": o.modules_patched}
                for o in self.overrides
            },
            explicit_knobs=self.explicit,
            **self.startup,
        )
        state = self.engine.internal_state()
        state["op_override_calls"] = {o.op: o.counter.calls for o in self.overrides}
        info["internal_states"] = [state]
        info["process"] = {"pid": os.getpid(), "host": self.host, "port": self.port, "started_at": self.started_at,
                           "cpu_count": os.cpu_count(), "platform": platform.platform()}
        return info

    def override_calls(self) -> dict[str, int]:
        return {o.op: o.counter.calls for o in self.overrides}


def device_report(device: str) -> dict[str, Any]:
    """What ``/server_info`` says about the device: ``device_name`` always (the GPU's name on CUDA, the
    CPU's model on CPU) and, on CUDA, ``device_detail`` (capability, SMs, memory, CUDA version, which
    SDPA kernels torch may pick, float32 matmul precision). Two legs on different hardware differ here."""
    import torch

    if device != "cuda":
        return {"device_name": cpu_model()}
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {"device_name": torch.cuda.get_device_name(index), "device_detail": {
        "capability": f"{props.major}.{props.minor}", "multi_processor_count": props.multi_processor_count,
        "total_memory_bytes": props.total_memory, "cuda_version": torch.version.cuda,
        "sdpa_flash_enabled": torch.backends.cuda.flash_sdp_enabled(),
        "sdpa_mem_efficient_enabled": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision()}}


def _perfwarden_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("perfwarden")
    except PackageNotFoundError:
        return "unknown"


# ------------------------------------------------------------------------------------------- http


def build_app(server: EmbeddedServer) -> Starlette:
    """The starlette application over a loaded ``EmbeddedServer`` (``harness/embedded_http.py``)."""
    # Imported here: the HTTP layer loads torch and starlette, which wait until the knobs validated.
    from perfwarden.harness.embedded_http import build_app as http_app

    return http_app(server)


# -------------------------------------------------------------------------------------------- main


def bind_port(host: str, port: int) -> socket.socket:
    """Bind (and listen on) the port now, before the slow model load, so a busy port fails fast."""
    if not 1 <= port <= 65535:
        raise ConfigError(
            f"--port must be between 1 and 65535, got {port!r} (port 0 would bind a random port the harness cannot find)"
        )
    try:
        sock = listen_socket(host, port)
    except OSError as exc:
        raise PortError(port_busy_message(host, port, exc)) from exc
    sock.set_inheritable(False)
    return sock


def inherited_socket(fd: int) -> socket.socket:
    """The listening socket the parent passed as ``fd`` (it lives in the parent's network namespace, so
    clients reach it although this process has no network of its own)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise PortError(f"--fd {fd}: not an inherited socket: {exc.strerror or exc}") from exc
    if sock.type != socket.SOCK_STREAM:
        raise PortError(f"--fd {fd}: not a stream socket")
    sock.set_inheritable(False)
    return sock


class PortError(OSError):
    """The port cannot be bound."""


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                                           "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _make_uvicorn(app: Starlette) -> uvicorn.Server:
    """A uvicorn server whose SIGTERM/SIGINT end ``run()`` normally.

    uvicorn re-raises a captured SIGTERM after shutting down, which kills the process before our
    shutdown summary (final engagement counts) reaches the log; here a signal only asks it to exit
    (a second one forces it) and ``main`` returns 0.
    """
    import contextlib
    import signal

    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=5)
    userver = _Server(config)

    def on_signal(signum: int, frame: Any) -> None:
        log.info("received signal %d; shutting down", signum)
        if userver.should_exit:
            userver.force_exit = True
        userver.should_exit = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return userver


def _fail(code: int, message: str) -> int:
    print(f"START FAILED: {message}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfwarden.harness.embedded_server",
                                     description="perfwarden's embedded OpenAI-compatible CPU server (SmolLM2-135M).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fd", type=int, default=None,
                        help="serve on this inherited listening socket (bound to --host:--port by the parent, which "
                             "starts the server inside the sandbox's own network namespace)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help=f"a knob, repeatable; knobs: {', '.join(ServerConfig.model_fields)}")
    args = parser.parse_args(argv)
    _setup_logging()
    try:
        raw = parse_set_args(args.sets)
        cfg = build_config(raw)
        check_overrides(cfg)
        sock = inherited_socket(args.fd) if args.fd is not None else bind_port(args.host, args.port)
    except ConfigError as exc:
        return _fail(EXIT_BAD_CONFIG, str(exc))
    except PortError as exc:
        return _fail(EXIT_PORT, str(exc))
    log.info("effective_config %s", json.dumps(cfg.model_dump(), sort_keys=True))
    server = EmbeddedServer(cfg, args.host, args.port, explicit=sorted(raw))
    try:
        server.load()
    except Exception as exc:
        code = EXIT_BAD_CONFIG if isinstance(exc, OverrideError) else EXIT_START_FAILED
        if isinstance(exc, DeviceError):  # the host's fault, not ours: the reason, no traceback
            log.error("start-up failed: %s", exc)
        else:
            log.error("start-up failed:\n%s", traceback.format_exc())
        sock.close()
        return _fail(code, f"{type(exc).__name__}: {exc}")

    app = build_app(server)
    userver = _make_uvicorn(app)
    log.info("serving model=%r on http://%s:%d", server.info.name, args.host, args.port)
    try:
        userver.run(sockets=[sock])
    finally:
        server.engine.stop()
        log.info("shutdown complete internal_states=%s", json.dumps(server.engine.internal_state(), sort_keys=True))
        if server.overrides:
            log.info("op_override final calls %r", server.override_calls())
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
