"""Op benchmarks: correctness over seeds, then timing with fresh inputs, one raw line per (backend, shape, trial).

``run_opbench`` benchmarks a reference implementation of one op (``rmsnorm``, ``silu_mul``, ``rotary``)
against candidate implementations (``path.py:function`` or ``module:function``, the override contract
of ``perfwarden.harness.ops``) on the shapes the server serves, and writes
``<run>/opbench/<op>/opbench.jsonl`` (``perfwarden.harness.jsonl.OpBenchLine``), which the auditor's
harness gates re-derive everything from.

How a rig earns the auditor's trust (design §4 "harness"):

- **correctness first**: every backend (the reference too) is run on the same inputs for each input
  seed (>= 3) and each shape; its output is compared with the reference computed *in this process*
  with dtype-aware tolerances (``TOLERANCES``). ``max_rel_err`` is ``max |out - ref| / max(|ref|,
  atol / rtol)``, so ``max_rel_err <= rtol`` is exactly ``|out - ref| <= max(atol, rtol * |ref|)``
  everywhere -- the row's ``correct``. Inputs include small-RMS rows, where eps bugs show;
- **fresh inputs**: each timed trial pre-generates ``warmup + iters`` *distinct* input sets and feeds
  each one exactly once (no tensor is timed twice, so nothing is timed cache-warm); the first
  ``warmup`` timings are discarded; ``trials`` trials per shape, interleaved across backends
  (trial-major, backend order rotated per trial) so drift hits every backend alike;
- **threads pinned** (``torch.set_num_threads``, ``OMP_NUM_THREADS``) and the dispatch path recorded
  (``eager``, or ``compiled`` when every backend is wrapped in ``torch.compile``);
- **self-comparison detectable**: ``impl_sha256`` is a digest of the implementation's *code* (the
  function's AST without docstring and name, plus the module-level definitions it uses), computed
  statically (the candidate is never executed for it). A verbatim or re-commented copy of the reference,
  or a re-export of it, gets the reference's digest;
- **Triton**: a candidate whose file imports ``triton`` is checked for correctness under
  ``TRITON_INTERPRET=1`` on small shapes only, and on CPU its timing is recorded as ``measured: false``
  with ``times_ms: null`` -- never as a number. Without triton installed its rows say
  ``raised: "triton not installed"`` and ``correct: null``.

Candidate code is untrusted. Each backend runs in its own worker process (``python -I -m
perfwarden.harness.opbench _worker``): a new session (its whole process group is killed on timeout),
a scrubbed environment, cwd and HOME inside ``<run>/opbench/<op>/work/<backend>/``, RLIMIT_AS and
RLIMIT_CPU set (hard = soft) before the candidate is imported, no network (a fresh network namespace
via ``unshare --net`` where the host allows it, else a socket guard in the worker). Every request to a
worker has a wall-clock timeout. A candidate that hangs, crashes, exhausts a limit or raises is
recorded on its rows (``raised``) and the benchmark goes on. The worker reports outputs as files
(loaded here with ``torch.load(weights_only=True)``) and its own timings; the reference outputs it is
judged against never come from a process the candidate ran in.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Dispatch = Literal["eager", "compiled"]

REFERENCE_MODULE = "perfwarden.harness.ops.reference"
"""Module holding the reference implementation of every overridable op (function name = op name)."""
REFERENCE_BACKEND = "reference"
"""Backend name of the reference in ``opbench.jsonl``."""

TOLERANCES: dict[str, tuple[float, float]] = {
    # dtype: (atol, rtol), applied as |out - ref| <= max(atol, rtol * |ref|) elementwise.
    # float32: room for reordered reductions (a fused kernel sums in another order), ~100 ulp.
    # bfloat16/float16: rtol about two roundings of the output (torch.testing's 1.6e-2 / 1e-3); atol
    # covers cancellation, where two valid implementations differ by an ulp of the *operands*, not of
    # the result: bf16 rotary on N(0,1) inputs, computed in bf16 (reference) vs in float32 (candidate),
    # differs by up to 0.03 absolute on near-zero outputs (measured at 1x9x128x64).
    "float32": (1e-5, 1e-5),
    "float64": (1e-7, 1e-7),
    "bfloat16": (5e-2, 1.6e-2),
    "float16": (5e-3, 1e-3),
}

SMOLLM2_RMS_EPS = 1e-5
"""``rms_norm_eps`` of SmolLM2-135M (the served model)."""
SMOLLM2_ROPE_THETA = 100_000.0
"""``rope_theta`` of SmolLM2-135M."""
TRITON_INTERPRET_MAX_NUMEL = 1 << 14
"""Largest shape (elements) checked under ``TRITON_INTERPRET=1``: the interpreter is ~1000x slower."""
TRITON_MISSING = "triton not installed"
WORKER_ARG = "_worker"
PROTOCOL_PREFIX = "@@opbench "


class OpBenchError(ValueError):
    """A bad request to the benchmark (unknown op, malformed spec or shape): the caller's error."""


# ------------------------------------------------------------------------------------------ inputs


def _seed(*parts: Any) -> int:
    """A stable 63-bit seed from any tuple of simple values (same in every process and Python run)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") >> 1


def _rmsnorm_inputs(shape: tuple[int, ...], dtype, gen) -> tuple:
    import torch

    x = torch.randn(shape, generator=gen)
    # Per-row scale log-uniform in [1e-3, 10]: real hidden states are not unit-RMS, and eps bugs only
    # show on small-RMS rows.
    scale = 10.0 ** (torch.rand(shape[:-1] + (1,), generator=gen) * 4.0 - 3.0)
    weight = 1.0 + 0.1 * torch.randn(shape[-1:], generator=gen)
    return (x * scale).to(dtype), weight.to(dtype), SMOLLM2_RMS_EPS


def _silu_mul_inputs(shape: tuple[int, ...], dtype, gen) -> tuple:
    import torch

    gate = 2.0 * torch.randn(shape, generator=gen)
    up = torch.randn(shape, generator=gen)
    return gate.to(dtype), up.to(dtype)


def _rotary_kv_heads(heads: int) -> int:
    """SmolLM2 has 9 query heads sharing 3 KV heads (GQA 3:1); keep that ratio where it divides."""
    return heads // 3 if heads % 3 == 0 else heads


def _rotary_inputs(shape: tuple[int, ...], dtype, gen) -> tuple:
    import torch

    batch, heads, seq, dim = shape
    q = torch.randn(shape, generator=gen)
    k = torch.randn((batch, _rotary_kv_heads(heads), seq, dim), generator=gen)
    # Positions as the server sees them: a random start (decode steps sit deep in the context).
    start = torch.randint(0, 8192, (batch, 1), generator=gen)
    positions = (start + torch.arange(seq)).to(torch.float32)
    inv_freq = 1.0 / (SMOLLM2_ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = positions[:, :, None] * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)  # HF LlamaRotaryEmbedding: cos/sin in float32, then cast
    return q.to(dtype), k.to(dtype), emb.cos().to(dtype), emb.sin().to(dtype)


def _check_rank_at_least(n: int) -> Callable[[tuple[int, ...]], str | None]:
    def check(shape: tuple[int, ...]) -> str | None:
        return None if len(shape) >= n else f"needs at least {n} dimension(s)"
    return check


def _check_rotary(shape: tuple[int, ...]) -> str | None:
    if len(shape) != 4:
        return "needs [batch, heads, seq, head_dim]"
    return None if shape[3] % 2 == 0 else "head_dim must be even"


@dataclass(frozen=True)
class OpSpec:
    """How to build inputs for one op (the reference function is ``REFERENCE_MODULE.<name>``)."""

    name: str
    make: Callable[[tuple[int, ...], Any, Any], tuple]
    check_shape: Callable[[tuple[int, ...]], str | None]
    shape_doc: str


OPS: dict[str, OpSpec] = {
    "rmsnorm": OpSpec("rmsnorm", _rmsnorm_inputs, _check_rank_at_least(1),
                      "[..., hidden] of hidden_states (weight is [hidden], eps 1e-5)"),
    "silu_mul": OpSpec("silu_mul", _silu_mul_inputs, _check_rank_at_least(1),
                       "[..., intermediate] of gate (up has the same shape)"),
    "rotary": OpSpec("rotary", _rotary_inputs, _check_rotary,
                     "[batch, heads, seq, head_dim] of q (k has heads/3 heads; cos/sin [batch, seq, head_dim])"),
}


def make_inputs(op: str, shape: Sequence[int], dtype: str, seed: int) -> tuple:
    """The input arguments of ``op`` at ``shape``/``dtype`` for one seed (deterministic across processes)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return OPS[op].make(tuple(int(s) for s in shape), getattr(torch, dtype), gen)


def check_seed(seed: int, shape: Sequence[int]) -> int:
    """Generator seed of the correctness inputs of ``(seed, shape)``."""
    return _seed("check", seed, tuple(shape))


def timing_seed(seed: int, shape: Sequence[int], trial: int, index: int) -> int:
    """Generator seed of input set ``index`` of a timed trial (distinct from every other set)."""
    return _seed("time", seed, tuple(shape), trial, index)


def _clone(args: tuple) -> tuple:
    return tuple(a.clone() if hasattr(a, "clone") else a for a in args)


def _as_tensors(out: Any) -> list:
    """An op's output as a list of tensors; anything else breaks the override contract."""
    import torch

    items = list(out) if isinstance(out, (tuple, list)) else [out]
    for item in items:
        if not isinstance(item, torch.Tensor):
            raise TypeError(f"implementation returned {type(out).__name__!r}, expected a tensor or a tuple "
                            "of tensors")
    return items


# --------------------------------------------------------------------------------------- comparison


@dataclass
class Check:
    """Correctness of one backend on one (shape, seed)."""

    correct: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    raised: str | None = None


def compare(out: list, ref: list, atol: float, rtol: float) -> Check:
    """Compare an implementation's outputs with the reference's (see the module docstring for the metric)."""
    import torch

    if len(out) != len(ref):
        return Check(False, raised=f"bad output: {len(out)} tensor(s), the reference returns {len(ref)}")
    max_abs = max_rel = 0.0
    finite_ok = True
    for i, (o, r) in enumerate(zip(out, ref)):
        if tuple(o.shape) != tuple(r.shape):
            return Check(False, raised=f"bad output: output {i} has shape {list(o.shape)}, the reference "
                         f"{list(r.shape)}")
        if o.dtype != r.dtype:
            return Check(False, raised=f"bad output: output {i} has dtype {str(o.dtype)!r}, the reference "
                         f"{str(r.dtype)!r}")
        o64, r64 = o.detach().to(torch.float64), r.detach().to(torch.float64)
        of, rf = torch.isfinite(o64), torch.isfinite(r64)
        # Non-finite values must match the reference exactly (same positions, same inf sign, NaN for NaN).
        same_nonfinite = torch.equal(of, rf) and bool(
            ((o64 == r64) | (torch.isnan(o64) & torch.isnan(r64)) | of).all())
        finite_ok &= same_nonfinite
        both = of & rf
        if both.any():
            diff = (o64 - r64).abs()[both]
            denom = r64.abs()[both].clamp_min(atol / rtol)
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / denom).max()))
    if not finite_ok:
        return Check(False, max_abs, max_rel)
    return Check(max_rel <= rtol, max_abs, max_rel)


# ------------------------------------------------------------------------------------------- digests


def parse_spec(spec: str) -> tuple[str, str, bool]:
    """``(target, function, is_file)`` of ``path.py:function`` or ``dotted.module:function``."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise OpBenchError(f"implementation spec {spec!r} must look like 'path/to/file.py:function' or "
                           "'module:function'")
    return target, name, target.endswith(".py") or "/" in target or os.sep in target


def _module_file(module: str, near: Path | None) -> Path | None:
    """Source file of a module, found without executing untrusted code.

    Relative to the candidate's directory and on ``sys.path`` by plain file lookup; through the import
    system only for perfwarden's own modules (whose packages are trusted and may be path-mapped).
    """
    parts = module.split(".")
    roots = ([near] if near else []) + [Path(p) for p in sys.path if p]
    for root in roots:
        base = root.joinpath(*parts)
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                return cand
    if parts[0] == "perfwarden":
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            return Path(spec.origin)
    return None


def _absolute(spec: str) -> str:
    """The spec with its file made absolute (workers run in their own cwd); module specs unchanged."""
    target, name, is_file = parse_spec(spec)
    return f"{Path(target).resolve()}:{name}" if is_file else spec


def spec_file(spec: str) -> Path:
    """The source file an implementation spec points at."""
    target, _, is_file = parse_spec(spec)
    if is_file:
        path = Path(target).resolve()
        if not path.is_file():
            raise OpBenchError(f"implementation file {str(path)!r} (from {spec!r}) does not exist")
        return path
    path = _module_file(target, None)
    if path is None:
        raise OpBenchError(f"module {target!r} (from {spec!r}) has no source file")
    return path


class _Canon:
    """Canonical code of a function and the module-level definitions it reaches, for ``impl_digest``."""

    def __init__(self, max_depth: int = 4):
        self.max_depth = max_depth

    def digest(self, path: Path, name: str) -> str:
        parts = self._resolve(path, name, depth=0, top=True)
        if parts is None:
            # Not resolvable statically (built dynamically, imported from elsewhere): fall back to the
            # file's bytes plus the name, which still differs between different files.
            data = path.read_bytes()
            return "file:" + hashlib.sha256(data + b"\0" + name.encode()).hexdigest()
        return hashlib.sha256("\n".join(["pyfunc-v1", *parts]).encode()).hexdigest()

    def _resolve(self, path: Path, name: str, depth: int, top: bool) -> list[str] | None:
        if depth > self.max_depth:
            return None
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            return None
        defs = self._top_level(tree)
        node = defs.get(name)
        if node is None:
            return None
        if isinstance(node, (ast.ImportFrom, ast.Import)):
            return self._follow_import(path, node, name, depth)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and top:
            return self._resolve(path, node.value.id, depth + 1, top=True)  # ``rmsnorm = _impl``
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and top:
            base = node.value.value
            if isinstance(base, ast.Name) and isinstance(defs.get(base.id), (ast.Import, ast.ImportFrom)):
                mod = self._imported_module(path, defs[base.id], base.id)
                if mod is not None:
                    return self._resolve(mod, node.value.attr, depth + 1, top=True)
            return None
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        parts: list[str] = []
        seen: set[str] = set()
        self._closure(node, defs, parts, seen, top_name=True)
        return parts

    @staticmethod
    def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
        defs: dict[str, ast.AST] = {}
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs[stmt.name] = stmt
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        defs[t.id] = stmt
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                defs[stmt.target.id] = stmt
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    defs[alias.asname or alias.name] = stmt
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    defs[(alias.asname or alias.name).split(".")[0]] = stmt
        return defs

    def _imported_module(self, path: Path, node: ast.AST, bound: str) -> Path | None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name).split(".")[0] == bound:
                    return _module_file(alias.name if alias.asname else alias.name.split(".")[0], path.parent)
        if isinstance(node, ast.ImportFrom):  # ``from pkg import module``
            for alias in node.names:
                if (alias.asname or alias.name) == bound:
                    return self._from_target(path, node, alias.name)
        return None

    def _from_target(self, path: Path, node: ast.ImportFrom, member: str) -> Path | None:
        module = node.module or ""
        if node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            full = base.joinpath(*module.split(".")) if module else base
            for cand in (full.with_suffix(".py"), full / "__init__.py", full / member / "__init__.py",
                         (full / member).with_suffix(".py")):
                if cand.is_file():
                    return cand
            return None
        return _module_file(f"{module}.{member}", path.parent) or _module_file(module, path.parent)

    def _follow_import(self, path: Path, node: ast.AST, name: str, depth: int) -> list[str] | None:
        if not isinstance(node, ast.ImportFrom):
            return None
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            module = node.module or ""
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                full = base.joinpath(*module.split(".")) if module else base
                target = next((c for c in (full.with_suffix(".py"), full / "__init__.py") if c.is_file()), None)
            else:
                target = _module_file(module, path.parent)
            if target is None:
                return None
            return self._resolve(target, alias.name, depth + 1, top=True)
        return None

    def _closure(self, node: ast.AST, defs: dict[str, ast.AST], parts: list[str], seen: set[str],
                 top_name: bool) -> None:
        parts.append(self._dump(node, blank_name=top_name))
        local = self._bound_names(node)
        for ref in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}):
            if ref in seen or ref in local or ref not in defs:
                continue
            seen.add(ref)
            dep = defs[ref]
            if isinstance(dep, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
                self._closure(dep, defs, parts, seen, top_name=False)
            else:  # an import: its text (``import torch``) is part of what the code means
                parts.append(ast.dump(dep, include_attributes=False))

    @staticmethod
    def _bound_names(node: ast.AST) -> set[str]:
        names: set[str] = set()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                names.add(arg.arg)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
        return names

    @staticmethod
    def _dump(node: ast.AST, blank_name: bool) -> str:
        node = ast.parse(ast.unparse(node)).body[0]  # a copy
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
            if blank_name:
                node.name = "_"
        return ast.dump(node, include_attributes=False)


def impl_digest(spec: str) -> str:
    """sha256 of an implementation's code, computed statically (see the module docstring)."""
    _, name, _ = parse_spec(spec)
    return _Canon().digest(spec_file(spec), name)


_TRITON_IMPORT = re.compile(r"^\s*(import\s+triton\b|from\s+triton\b)", re.MULTILINE)


def uses_triton(spec: str) -> bool:
    """Whether the implementation's file imports triton (then it is a Triton kernel, timed only on GPU)."""
    try:
        return bool(_TRITON_IMPORT.search(spec_file(spec).read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


# -------------------------------------------------------------------------------------------- worker


def _worker_main() -> int:
    """Inside the sandboxed worker: load one implementation, then answer check/time requests."""
    real_stdout = os.dup(1)
    proto = os.fdopen(real_stdout, "w", buffering=1, encoding="utf-8")
    log_fd = os.open("worker.stdout.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)  # anything the candidate prints goes to the log, never into the protocol
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", closefd=False)
    clock = time.perf_counter_ns  # bound before the candidate can touch the time module

    def send(msg: dict[str, Any]) -> None:
        proto.write(PROTOCOL_PREFIX + json.dumps(msg, allow_nan=False) + "\n")
        proto.flush()

    job = json.loads(sys.stdin.readline())
    import resource

    for limit, value in (("RLIMIT_AS", job["mem_limit_bytes"]), ("RLIMIT_CPU", job["cpu_limit_s"])):
        if value:
            resource.setrlimit(getattr(resource, limit), (int(value), int(value)))
    if not job.get("netns"):
        _guard_network()

    import torch

    torch.set_num_threads(int(job["threads"]))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    op, dtype = job["op"], job["dtype"]
    send({"phase": "torch_imported"})  # from here on the time is the candidate's (bounded by timeout_s)
    try:
        fn = _load_impl(job["spec"])
        if job["dispatch"] == "compiled":
            fn = torch.compile(fn, dynamic=False)
    except BaseException as exc:  # noqa: BLE001 - the candidate's fault, reported, never raised here
        send({"ready": False, "raised": f"import failed: {_describe(exc)}"})
        return 0
    send({"ready": True, "torch_threads": torch.get_num_threads()})
    import gc

    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "exit":
            break
        try:
            shape = tuple(req["shape"])
            if req["cmd"] == "check":
                args = make_inputs(op, shape, dtype, check_seed(req["seed"], shape))
                with torch.no_grad():
                    out = _as_tensors(fn(*args))
                torch.save([t.detach().contiguous() for t in out], req["out"])
                send({"ok": True})
            elif req["cmd"] == "time":
                n, warmup = int(req["n"]), int(req["warmup"])
                pool = [make_inputs(op, shape, dtype, timing_seed(req["seed"], shape, req["trial"], i))
                        for i in range(n)]
                times: list[float] = []
                gc.collect()
                gc.disable()
                try:
                    with torch.no_grad():
                        for i in range(n):
                            args = pool[i]
                            pool[i] = None  # each input set is used once, then released
                            t0 = clock()
                            out = fn(*args)
                            t1 = clock()
                            del out, args
                            if i >= warmup:
                                times.append((t1 - t0) / 1e6)
                finally:
                    gc.enable()
                send({"times_ms": times})
            else:
                send({"raised": f"unknown command {req['cmd']!r}"})
        except BaseException as exc:  # noqa: BLE001
            send({"raised": _describe(exc)})
    return 0


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 500 else text[:497] + "..."


def _guard_network() -> None:
    """Fallback when no network namespace is available: refuse socket creation in this process."""
    import socket

    def refuse(*_a: Any, **_k: Any):
        raise PermissionError("network access is disabled inside op-benchmark workers")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.getaddrinfo = refuse  # type: ignore[assignment]


def _load_impl(spec: str, add_path: bool = True) -> Callable[..., Any]:
    import importlib

    target, name, is_file = parse_spec(spec)
    if is_file:
        path = Path(target).resolve()
        if add_path:
            sys.path.insert(0, str(path.parent))  # the candidate's own helper modules (worker only)
        mod_name = "opbench_impl_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError(f"cannot load {str(path)!r}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise AttributeError(f"{target!r} has no callable {name!r}")
    return fn


# -------------------------------------------------------------------------------------------- parent


class WorkerFailed(RuntimeError):
    """The worker stopped answering (timeout, crash, limit): the candidate's fault, recorded on its rows."""


_NETNS: bool | None = None


def _netns_available() -> bool:
    """Whether ``unshare --net`` works here (root or unprivileged user namespaces); probed once."""
    global _NETNS
    if _NETNS is None:
        exe = shutil.which("unshare")
        _NETNS = False
        if exe:
            try:
                _NETNS = subprocess.run([exe, "--net", "--", "true"], capture_output=True, timeout=10).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                _NETNS = False
    return _NETNS


class _Worker:
    """One sandboxed worker process and its request/answer channel."""

    def __init__(self, backend: str, spec: str, workdir: Path, job: dict[str, Any], threads: int, triton: bool):
        self.backend = backend
        self.workdir = workdir
        self.failure: str | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(workdir),
            "TMPDIR": str(workdir),
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads),
            "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor"),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
        }
        if triton:
            env["TRITON_INTERPRET"] = "1"
        netns = _netns_available()
        argv = ([shutil.which("unshare") or "unshare", "--net", "--"] if netns else []) + [
            sys.executable, "-I", "-m", "perfwarden.harness.opbench", WORKER_ARG]
        self._stderr = open(workdir / "worker.stderr.log", "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     cwd=workdir, env=env, start_new_session=True)
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, name=f"opbench-{backend}", daemon=True).start()
        self._send({**job, "spec": spec, "netns": netns})

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", errors="replace")
            if line.startswith(PROTOCOL_PREFIX):
                try:
                    self._answers.put(json.loads(line[len(PROTOCOL_PREFIX):]))
                except json.JSONDecodeError:
                    continue
        self._answers.put(None)

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reader sees EOF and the request fails with the exit status

    def answer(self, timeout_s: float) -> dict[str, Any]:
        if self.failure:
            raise WorkerFailed(self.failure)
        try:
            msg = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            self.kill()
            self.failure = f"timeout: no answer within {timeout_s:g}s (worker killed)"
            raise WorkerFailed(self.failure) from None
        if msg is None:
            self.failure = self._exit_description()
            raise WorkerFailed(self.failure)
        return msg

    def request(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self.failure:
            raise WorkerFailed(self.failure)
        self._send(msg)
        return self.answer(timeout_s)

    def _exit_description(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        if code < 0:
            try:
                what = signal.Signals(-code).name
            except ValueError:
                what = f"signal {-code}"
            hint = {"SIGXCPU": " (CPU-time limit)", "SIGKILL": " (killed; memory or time limit?)",
                    "SIGSEGV": " (segmentation fault)"}.get(what, "")
            desc = f"worker died of {what}{hint}"
        else:
            desc = f"worker exited with status {code}"
        tail = self.stderr_tail()
        return desc + (f": {tail}" if tail else "")

    def stderr_tail(self, limit: int = 300) -> str:
        try:
            self._stderr.flush()
            text = (self.workdir / "worker.stderr.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-limit:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and anything it spawned
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def ask_exit(self) -> None:
        if self.proc.poll() is None and not self.failure:
            self._send({"cmd": "exit"})

    def close(self) -> None:
        if self.proc.poll() is None and not self.failure:
            self.ask_exit()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        self._stderr.close()


@dataclass
class Backend:
    """One implementation under benchmark."""

    name: str
    spec: str
    is_reference: bool
    digest: str
    triton: bool
    checks: dict[tuple[tuple[int, ...], int], Check] = field(default_factory=dict)
    times: dict[tuple[tuple[int, ...], int], list[float] | str] = field(default_factory=dict)
    """(shape, trial) -> per-iteration ms, or why the trial has none."""
    unavailable: str | None = None
    """Set when the backend never ran (e.g. triton not installed)."""
    worker: _Worker | None = None


def _backend_names(specs: Sequence[str]) -> list[str]:
    names: list[str] = []
    for spec in specs:
        target, fn, is_file = parse_spec(spec)
        stem = Path(target).stem if is_file else target.rsplit(".", 1)[-1]
        names.append(stem)
    out = []
    for spec, name in zip(specs, names):
        if names.count(name) > 1 or name == REFERENCE_BACKEND:
            name = f"{name}:{parse_spec(spec)[1]}"
        out.append(name)
    if len(set(out)) != len(out):
        raise OpBenchError(f"candidate specs give duplicate backend names: {out!r}")
    return out


def _normalize_shapes(op: str, shapes: Sequence[Sequence[int] | str]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for shape in shapes:
        if isinstance(shape, str):
            try:
                shape = [int(s) for s in shape.lower().split("x")]
            except ValueError:
                raise OpBenchError(f"shape {shape!r} is not like '16x576'") from None
        tup = tuple(int(s) for s in shape)
        if any(s <= 0 for s in tup):
            raise OpBenchError(f"shape {list(tup)!r} has a non-positive dimension")
        why = OPS[op].check_shape(tup)
        if why:
            raise OpBenchError(f"shape {list(tup)!r} for op {op!r}: {why} ({OPS[op].shape_doc})")
        if tup not in out:
            out.append(tup)
    if not out:
        raise OpBenchError("no shapes to benchmark")
    return out


def run_opbench(
    run_dir: Path | str,
    op: str,
    candidates: Sequence[str] | Mapping[str, str],
    shapes: Sequence[Sequence[int] | str],
    dtype: str = "float32",
    seeds: Sequence[int] = (0, 1, 2),
    trials: int = 3,
    iters: int = 50,
    warmup: int = 5,
    *,
    reference: str | None = None,
    threads: int = 1,
    dispatch: Dispatch = "eager",
    timeout_s: float = 60.0,
    startup_timeout_s: float = 120.0,
    mem_limit_mb: int = 4096,
    cpu_limit_s: int | None = None,
    triton_max_numel: int = TRITON_INTERPRET_MAX_NUMEL,
    settle_s: float = 0.02,
) -> Path:
    """Benchmark ``candidates`` of ``op`` against the reference; returns the path of ``opbench.jsonl``.

    ``candidates`` are specs (``path.py:function`` / ``module:function``), or a mapping backend name ->
    spec. ``shapes`` are the shapes the server serves (lists or ``"16x576"``). Trial ``k`` of every
    (backend, shape) draws its inputs from seed ``seeds[k % len(seeds)]`` and its row reports that
    seed's correctness, so ``trials >= len(seeds)`` puts every checked seed on a row. ``timeout_s``
    bounds every single request to a worker (one correctness check, one timed trial); with
    ``dispatch="compiled"`` the first check of each shape includes compilation, so give it tens of
    seconds. The file is replaced as a whole when the benchmark ends, so it never mixes two rigs;
    ``rig.json`` beside it records the parameters, every backend's spec and digests, and a contention
    sample (load average, busy processes) before and after.

    Timing is only as good as the machine is quiet: with ``threads > 1`` on a machine whose other
    processes keep every core busy, OpenMP regions stall on descheduled threads and the per-call times
    of parallel-sized shapes jump by orders of magnitude (measured: 0.09 ms -> 24 ms for SiLU-mul at
    1x128x1536, 2 threads, load 5 on 2 cores). The contention sample in ``rig.json`` says when that was so.
    """
    import torch

    from perfwarden.harness.records import RunDir, write_json_atomic

    if op not in OPS:
        raise OpBenchError(f"op {op!r} has no benchmark inputs; supported: {sorted(OPS)!r}")
    if dtype not in TOLERANCES:
        raise OpBenchError(f"dtype {dtype!r} not supported; choose one of {sorted(TOLERANCES)!r}")
    if dispatch not in ("eager", "compiled"):
        raise OpBenchError(f"dispatch {dispatch!r} must be 'eager' or 'compiled'")
    seeds = [int(s) for s in seeds]
    if len(set(seeds)) != len(seeds) or not seeds:
        raise OpBenchError(f"seeds {seeds!r} must be distinct and non-empty")
    if trials < len(seeds):
        raise OpBenchError(f"trials ({trials}) < number of seeds ({len(seeds)}): every checked seed must appear "
                           "on a row")
    if warmup < 1 or iters < 1:
        raise OpBenchError(f"need warmup >= 1 (discarded) and iters >= 1; got warmup={warmup}, iters={iters}")
    shape_list = _normalize_shapes(op, shapes)
    ref_spec = reference or f"{REFERENCE_MODULE}:{op}"
    if isinstance(candidates, Mapping):
        cand_names, cand_specs = list(candidates.keys()), list(candidates.values())
        if REFERENCE_BACKEND in cand_names or len(set(cand_names)) != len(cand_names):
            raise OpBenchError(f"candidate names {cand_names!r} must be unique and not {REFERENCE_BACKEND!r}")
    else:
        cand_specs = list(candidates)
        cand_names = _backend_names(cand_specs)
    atol, rtol = TOLERANCES[dtype]

    ref_spec, cand_specs = _absolute(ref_spec), [_absolute(s) for s in cand_specs]
    backends = [Backend(REFERENCE_BACKEND, ref_spec, True, impl_digest(ref_spec), uses_triton(ref_spec))]
    for name, spec in zip(cand_names, cand_specs):
        backends.append(Backend(name, spec, False, impl_digest(spec), uses_triton(spec)))
    triton_installed = importlib.util.find_spec("triton") is not None
    for b in backends:
        if b.triton and not triton_installed:
            b.unavailable = TRITON_MISSING

    rig = RunDir(run_dir)
    out_path = rig.opbench(op)
    op_dir = out_path.parent
    work_root = op_dir / "work"
    if work_root.exists():
        shutil.rmtree(work_root)
    work_root.mkdir(parents=True)

    # Ground truth, computed here from the trusted reference (never in a process a candidate ran in).
    ref_fn = _load_impl(ref_spec, add_path=False)
    truth: dict[tuple[tuple[int, ...], int], list] = {}
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # the workers' thread count: same reduction split as theirs
    try:
        with torch.no_grad():
            for shape in shape_list:
                for seed in seeds:
                    args = make_inputs(op, shape, dtype, check_seed(seed, shape))
                    truth[(shape, seed)] = [t.detach().clone() for t in _as_tensors(ref_fn(*_clone(args)))]
    finally:
        torch.set_num_threads(caller_threads)

    job = {"op": op, "dtype": dtype, "threads": threads, "dispatch": dispatch,
           "mem_limit_bytes": int(mem_limit_mb) * 1024 * 1024 if mem_limit_mb else 0,
           "cpu_limit_s": cpu_limit_s if cpu_limit_s is not None else int(
               startup_timeout_s + timeout_s * (len(shape_list) * (len(seeds) + trials)) * max(1, threads) + 30)}
    from perfwarden.harness.contention import sample_contention

    contention_start = sample_contention(interval_s=0.2)  # before any worker exists: the machine's own load
    started = time.time()
    try:
        for i, b in enumerate(backends):  # start together: the imports overlap
            if b.unavailable is None:
                b.worker = _Worker(b.name, b.spec, work_root / f"{i:02d}-{_safe(b.name)}", job, threads, b.triton)
        deadline = time.monotonic() + startup_timeout_s
        for b in backends:
            if b.worker is None:
                continue
            try:  # our part of the start (interpreter, torch) is bounded by startup_timeout_s ...
                phase = b.worker.answer(max(1.0, deadline - time.monotonic()))
            except WorkerFailed as exc:
                b.unavailable = f"worker did not start: {exc}"
                continue
            try:  # ... importing the candidate (its module-level code) by timeout_s, like any request
                ready = b.worker.answer(timeout_s) if phase.get("phase") == "torch_imported" else phase
            except WorkerFailed as exc:
                b.unavailable = f"import failed: {exc}"
                continue
            if not ready.get("ready"):
                b.unavailable = str(ready.get("raised") or "worker refused the job")
                b.worker.close()

        # Correctness: every backend, every shape, every seed.
        for b in backends:
            for shape in shape_list:
                for seed in seeds:
                    b.checks[(shape, seed)] = _check(b, op, shape, seed, truth[(shape, seed)], atol, rtol,
                                                     timeout_s, triton_max_numel)

        # Timing: trial-major, backend order rotated per trial; Triton is never timed on CPU.
        timed = [b for b in backends if not b.triton and b.unavailable is None]
        for trial in range(trials):
            seed = seeds[trial % len(seeds)]
            for shape in shape_list:
                order = timed[trial % len(timed):] + timed[: trial % len(timed)] if timed else []
                for b in order:
                    time.sleep(settle_s)  # let the previous worker's OpenMP threads stop spinning
                    try:
                        ans = b.worker.request({"cmd": "time", "shape": list(shape), "seed": seed, "trial": trial,
                                                "n": warmup + iters, "warmup": warmup}, timeout_s)
                        b.times[(shape, trial)] = (ans["times_ms"] if "times_ms" in ans
                                                   else f"timing raised {ans.get('raised')}")
                    except WorkerFailed as exc:
                        b.times[(shape, trial)] = f"timing: {exc}"
    finally:
        for b in backends:  # all exit in parallel, then reap
            if b.worker is not None:
                b.worker.ask_exit()
        for b in backends:
            if b.worker is not None:
                b.worker.close()

    worker_pids = [b.worker.proc.pid for b in backends if b.worker is not None]
    contention_end = sample_contention(interval_s=0.2, exclude_pids=worker_pids)
    rows = _rows(op, backends, shape_list, seeds, trials, dtype, atol, rtol, dispatch, warmup)
    _write_jsonl_atomic(out_path, rows)
    write_json_atomic(op_dir / "rig.json", {
        "op": op, "dtype": dtype, "dispatch": dispatch, "threads": threads, "seeds": seeds, "trials": trials,
        "iters": iters, "warmup": warmup, "shapes": [list(s) for s in shape_list], "atol": atol, "rtol": rtol,
        "timeout_s": timeout_s, "mem_limit_mb": mem_limit_mb, "cpu_limit_s": job["cpu_limit_s"],
        "network_isolation": "netns" if _netns_available() else "socket_guard",
        "torch_version": torch.__version__, "started_at": started, "duration_s": round(time.time() - started, 3),
        "contention": {"start": contention_start, "end": contention_end},
        "backends": [{"backend": b.name, "spec": b.spec, "is_reference": b.is_reference, "impl_sha256": b.digest,
                      "file_sha256": hashlib.sha256(spec_file(b.spec).read_bytes()).hexdigest(),
                      "triton": b.triton, "unavailable": b.unavailable} for b in backends],
    })
    from perfwarden.harness.seal import seal_file  # issue 13 §5: the seal hook (keep it here when splitting)
    seal_file(out_path, op_dir / "rig.json")
    return out_path


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]


def _check(b: Backend, op: str, shape: tuple[int, ...], seed: int, ref: list, atol: float, rtol: float,
           timeout_s: float, triton_max_numel: int) -> Check:
    import torch

    if b.unavailable is not None:
        # Not installed here is nobody's verdict on the kernel; failing to start is the kernel's fault.
        return Check(None if b.unavailable == TRITON_MISSING else False, raised=b.unavailable)
    if b.triton and math.prod(shape) > triton_max_numel:
        return Check(None)  # not checked: too large for the interpreter (no claim either way)
    assert b.worker is not None
    out_file = b.worker.workdir / f"out-{'x'.join(map(str, shape))}-{seed}.pt"
    try:
        ans = b.worker.request({"cmd": "check", "shape": list(shape), "seed": seed, "out": str(out_file)}, timeout_s)
    except WorkerFailed as exc:
        return Check(False, raised=str(exc))
    if "raised" in ans:
        return Check(False, raised=str(ans["raised"]))
    try:
        out = torch.load(out_file, weights_only=True)
        out = _as_tensors(out)
    except Exception as exc:  # noqa: BLE001 - a worker that wrote garbage
        return Check(False, raised=f"bad output: {_describe(exc)}")
    finally:
        out_file.unlink(missing_ok=True)
    return compare(out, ref, atol, rtol)


def _rows(op: str, backends: list[Backend], shapes: list[tuple[int, ...]], seeds: list[int], trials: int,
          dtype: str, atol: float, rtol: float, dispatch: str, warmup: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for b in backends:
        for shape in shapes:
            for trial in range(trials):
                seed = seeds[trial % len(seeds)]
                chk = b.checks.get((shape, seed), Check(None))
                timing = b.times.get((shape, trial))
                times = timing if isinstance(timing, list) else None
                raised = chk.raised
                if raised is None and isinstance(timing, str):
                    raised = timing
                rows.append({
                    "op": op, "backend": b.name, "shape": list(shape), "trial": trial, "dtype": dtype,
                    "times_ms": times,
                    "warmup_discarded": warmup if times is not None else None,
                    "fresh_inputs": True if times is not None else None,
                    "correct": chk.correct,
                    "max_abs_err": _finite(chk.max_abs_err), "max_rel_err": _finite(chk.max_rel_err),
                    "atol": atol, "rtol": rtol, "dispatch": dispatch, "seed": seed, "raised": raised,
                    "is_reference": b.is_reference, "impl_sha256": b.digest,
                    "measured": times is not None,
                })
    return rows


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _write_jsonl_atomic(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, allow_nan=False, separators=(",", ":")) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------- the lab


def alternatives_for(op: str, kinds: tuple[str, ...] = ("alternative", "slow", "wrong", "self_copy")) -> list[str]:
    """Implementation specs (absolute ``path.py:function``) on offer for ``op``: the override module
    ``harness/ops/<op>_alt.py`` when it exists, then the catalogued ones (``harness/ops/alternatives``).

    The negative kinds are included on purpose: the rig must flag the wrong one and rank the slow one
    last, and a producer that "wins" with the self-copy must be failed by the auditor. Pass ``kinds``
    to narrow the list.
    """
    from perfwarden.harness.ops.alternatives import for_op

    specs: list[str] = []
    own = Path(__file__).resolve().parent / "ops" / f"{op}_alt.py"
    if "alternative" in kinds and own.is_file():
        specs.append(f"{own}:{op}")
    specs += [a.spec for a in for_op(op, kinds)]  # type: ignore[arg-type]
    return specs


def run_opbench_for_lab(run_dir: Path | str, op: str, candidates: Sequence[str], shapes: Sequence[Sequence[int]],
                        *, dtype: str = "float32", threads: int = 2, dispatch: Dispatch = "eager",
                        iters: int = 30, warmup: int = 5, trials: int = 3, timeout_s: float = 120.0) -> Path:
    """``run_opbench`` as the lab calls it: each backend is named by its spec (the name the producer
    claims and the integrator installs as the override), shapes are the profile's served shapes, and the
    defaults match the embedded target's true baseline (float32, 2 threads, eager)."""
    unique = list(dict.fromkeys(candidates))
    if not shapes:
        raise OpBenchError(f"no served shapes for op {op!r}: profile the target first")
    return run_opbench(run_dir, op, {spec: spec for spec in unique}, [list(s) for s in shapes], dtype,
                       trials=trials, iters=iters, warmup=warmup, threads=threads, dispatch=dispatch,
                       timeout_s=timeout_s)


# ------------------------------------------------------------------------------------------- reading


def summarize(path: Path | str) -> dict[str, Any]:
    """A human summary of an ``opbench.jsonl``: per backend and shape, median ms, speedup over the
    reference (reference median / backend median) and whether every row was correct. For reports and
    the CLI only -- the auditor re-derives its own numbers from the raw lines."""
    import statistics

    from perfwarden.harness.jsonl import OpBenchLine, read_jsonl

    report = read_jsonl(Path(path), OpBenchLine)
    per: dict[str, dict[str, dict[str, Any]]] = {}
    for _, r in report.records:
        shape = "x".join(map(str, r.shape)) if isinstance(r.shape, list) else str(r.shape)
        cell = per.setdefault(r.backend, {}).setdefault(shape, {"times": [], "correct": True, "raised": None,
                                                                "max_rel_err": 0.0, "measured": True,
                                                                "is_reference": bool(r.is_reference),
                                                                "impl_sha256": r.impl_sha256})
        cell["times"].extend(r.times_ms or [])
        cell["correct"] = cell["correct"] and r.correct is True
        cell["raised"] = cell["raised"] or r.raised
        cell["measured"] = cell["measured"] and r.measured
        if r.max_rel_err is not None:
            cell["max_rel_err"] = max(cell["max_rel_err"], r.max_rel_err)
    ref = next((b for b, shapes in per.items() if any(c["is_reference"] for c in shapes.values())), None)
    out: dict[str, Any] = {}
    for backend, shapes in per.items():
        out[backend] = {}
        for shape, cell in shapes.items():
            med = statistics.median(cell["times"]) if cell["times"] else None
            ref_cell = per.get(ref, {}).get(shape) if ref else None
            ref_med = statistics.median(ref_cell["times"]) if ref_cell and ref_cell["times"] else None
            out[backend][shape] = {
                "median_ms": med, "speedup": (ref_med / med) if med and ref_med else None,
                "correct": cell["correct"], "max_rel_err": cell["max_rel_err"], "raised": cell["raised"],
                "measured": cell["measured"], "impl_sha256": cell["impl_sha256"],
                "is_reference": cell["is_reference"]}
    return out


# ----------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [WORKER_ARG]:
        return _worker_main()
    parser = argparse.ArgumentParser(prog="python -m perfwarden.harness.opbench",
                                     description="Benchmark op implementations against the reference.")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--op", required=True, choices=sorted(OPS))
    parser.add_argument("--candidate", action="append", default=[], help="path.py:function (repeatable)")
    parser.add_argument("--catalog", action="store_true",
                        help="add every catalogued alternative of the op (harness/ops/alternatives)")
    parser.add_argument("--shape", action="append", required=True, help="e.g. 16x576 (repeatable)")
    parser.add_argument("--dtype", default="float32", choices=sorted(TOLERANCES))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dispatch", default="eager", choices=["eager", "compiled"])
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    candidates = list(args.candidate)
    if args.catalog:
        from perfwarden.harness.ops.alternatives import for_op

        candidates += [a.spec for a in for_op(args.op)]
    path = run_opbench(args.run_dir, args.op, candidates, args.shape, args.dtype,
                       seeds=[int(s) for s in args.seeds.split(",")], trials=args.trials, iters=args.iters,
                       warmup=args.warmup, threads=args.threads, dispatch=args.dispatch, timeout_s=args.timeout)
    print(json.dumps({"opbench": str(path), "summary": summarize(path)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
