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
from typing import Any

from perfwarden.harness.model import MODEL_NAME, DeviceError
from perfwarden.harness.ops import OverrideError, install_override, load_function
from perfwarden.harness.target_config import (EMBEDDED_OPS, ConfigError, EmbeddedConfig, parse_overrides,  # noqa: F401
                                              parse_set_args)
from perfwarden.harness.targets import (EXIT_BAD_CONFIG, EXIT_CRASH, EXIT_OK, EXIT_PORT,
                                        EXIT_START_FAILED, listen_socket, port_busy_message)

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


# ---------------------------------------------------------------------------------------- requests


class RequestError(ValueError):
    """A client request that cannot be served (HTTP 400), OpenAI error format."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def _get_number(body: dict[str, Any], key: str, default: float, lo: float, hi: float, integer: bool = False):
    value = body.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise RequestError(f"{key!r} must be {'an integer' if integer else 'a number'}, got {value!r}", key)
    if not lo <= value <= hi:
        raise RequestError(f"{key!r} must be between {lo} and {hi}, got {value!r}", key)
    return value


_UNSUPPORTED = {
    "n": 1, "best_of": 1, "echo": False, "logprobs": None, "top_logprobs": None, "suffix": None,
    "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None, "tools": None, "functions": None,
}


def parse_common(body: dict[str, Any], cfg: ServerConfig, prompt_len: int):
    """Sampling parameters and stream flags shared by both endpoints (validated, never ignored)."""
    from perfwarden.harness.embedded_engine import GenParams  # lazy: torch: imported after the port is bound

    for key, neutral in _UNSUPPORTED.items():
        if key in body and body[key] not in (neutral, None) and not (key == "logprobs" and body[key] is False):
            raise RequestError(f"{key!r}={body[key]!r} is not supported by the embedded target", key)
    stop = body.get("stop")
    if stop not in (None, [], ""):
        raise RequestError("'stop' sequences are not supported by the embedded target", "stop")
    room = cfg.max_seq_len - prompt_len
    if room < 1:
        raise RequestError(f"prompt has {prompt_len} tokens; max_seq_len is {cfg.max_seq_len}", "prompt")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is None:
        max_tokens = min(cfg.default_max_tokens, room)
    max_tokens = _get_number({"max_tokens": max_tokens}, "max_tokens", 0, 1, room, integer=True)
    temperature = float(_get_number(body, "temperature", 1.0, 0.0, 2.0))
    top_p = float(_get_number(body, "top_p", 1.0, 1e-6, 1.0))
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(f"'seed' must be an integer, got {seed!r}", "seed")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise RequestError(f"'ignore_eos' must be a boolean, got {ignore_eos!r}", "ignore_eos")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"'stream' must be a boolean, got {stream!r}", "stream")
    options = body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage", False)) if isinstance(options, dict) else False
    params = GenParams(max_tokens=int(max_tokens), temperature=temperature, top_p=top_p,
                       seed=seed, ignore_eos=ignore_eos)
    return params, stream, include_usage


def completion_prompt_ids(body: dict[str, Any], tokenizer: Any, vocab_size: int) -> list[int]:
    """Token ids of a ``/v1/completions`` prompt: a string, a one-element list, or token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt, add_special_tokens=False)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise RequestError(f"prompt token ids out of range [0, {vocab_size}): {bad[:5]!r}", "prompt")
        ids = list(prompt)
    else:
        raise RequestError("'prompt' must be a string, a one-element list, or a list of token ids", "prompt")
    if not ids:
        raise RequestError("'prompt' is empty", "prompt")
    return ids


def chat_prompt_ids(body: dict[str, Any], tokenizer: Any) -> list[int]:
    """Token ids of a chat request: the model's chat template with the generation prompt appended."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", "messages")
    clean = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "user", "assistant"):
            raise RequestError(f"messages[{i}] needs a role of 'system', 'user' or 'assistant'", "messages")
        content = msg.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise RequestError(f"messages[{i}] has a non-text content part; only text is supported", "messages")
                parts.append(part["text"])
            content = "".join(parts)
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string", "messages")
        clean.append({"role": msg["role"], "content": content})
    encoded = tokenizer.apply_chat_template(clean, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas, holding back a trailing partial character."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.sent = ""

    def add(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        return self._delta(text)

    def flush(self) -> str:
        return self._delta(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _delta(self, text: str) -> str:
        # Byte-level BPE decoding is prefix-stable once no partial character trails, so the new text is
        # the old text plus a suffix; what was already streamed cannot be taken back either way.
        delta = text[len(self.sent) :]
        self.sent = text
        return delta


def sse(payload: Any) -> str:
    """One server-sent event line pair."""
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload, separators=(',', ':'))}\n\n"


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None, code: int = 400):
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


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
        return {"device_name": _cpu_name()}
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {"device_name": torch.cuda.get_device_name(index), "device_detail": {
        "capability": f"{props.major}.{props.minor}", "multi_processor_count": props.multi_processor_count,
        "total_memory_bytes": props.total_memory, "cuda_version": torch.version.cuda,
        "sdpa_flash_enabled": torch.backends.cuda.flash_sdp_enabled(),
        "sdpa_mem_efficient_enabled": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision()}}


def _cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _perfwarden_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("perfwarden")
    except PackageNotFoundError:
        return "unknown"


# ------------------------------------------------------------------------------------------- http


def build_app(server: EmbeddedServer):
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


def _make_uvicorn(app: Any):
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
        def capture_signals(self):
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
