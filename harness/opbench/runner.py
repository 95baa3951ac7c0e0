"""Running an op benchmark: one sandboxed worker per backend, correctness first, then interleaved timing.

The ground truth is computed here, in the trusted parent, from the reference on the benchmark's device
(never in a process any candidate ran in). Every worker runs inside :mod:`perfwarden.harness.sandbox`;
without a working sandbox the benchmark refuses to start (it exists to run code someone else wrote).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import queue
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from perfwarden.harness import safe_write, sandbox
from perfwarden.harness.opbench.correctness import Check, compare
from perfwarden.harness.opbench.digest import absolute_spec, impl_digest, parse_spec, spec_file, uses_triton
from perfwarden.harness.opbench.inputs import (OPS, TOLERANCES, OpBenchError, as_tensors, check_seed, clone_args,
                                               make_inputs, normalize_shapes)
from perfwarden.harness.opbench.worker import PROTOCOL_PREFIX, describe, load_impl

Dispatch = Literal["eager", "compiled"]
Device = Literal["cpu", "cuda"]

REFERENCE_MODULE = "perfwarden.harness.ops.reference"
"""Module holding the reference implementation of every overridable op (function name = op name)."""
REFERENCE_BACKEND = "reference"
"""Backend name of the reference in ``opbench.jsonl``."""
TRITON_INTERPRET_MAX_NUMEL = 1 << 14
"""Largest shape (elements) checked under ``TRITON_INTERPRET=1`` on CPU: the interpreter is ~1000x slower."""
TRITON_MISSING = "triton not installed"
OUTPUT_FILE_MAX_BYTES = 256 << 20
"""Largest output file a worker may hand back (a bigger one is a bad output, never read)."""


class WorkerFailed(RuntimeError):
    """The worker stopped answering (timeout, crash, limit): the implementation's fault, on its rows."""


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
        policy = sandbox.Policy(writable=workdir, read_only=(Path(target),) if is_file else (), env=env,
                                device=device, limits=limits)
        # The worker's stderr goes to a file beside (not inside) its writable directory: it cannot be
        # replaced by a link or a FIFO from inside, and we read it back through our own handle.
        self._stderr: IO[bytes] = open(workdir.parent / f"{workdir.name}.stderr.log", "w+b")
        self.box = sandbox.Confined([sys.executable, "-I", "-m", "perfwarden.harness.opbench.worker"], policy,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
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
                try:
                    msg = json.loads(line[len(PROTOCOL_PREFIX):])
                except json.JSONDecodeError:
                    continue
                if isinstance(msg, dict):
                    self._answers.put(msg)
        self._answers.put(None)

    def _send(self, msg: dict[str, Any]) -> None:
        stdin = self.box.proc.stdin
        assert stdin is not None
        try:
            stdin.write((json.dumps(msg) + "\n").encode())
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
        if self.failure:
            raise WorkerFailed(self.failure)
        self._send(msg)
        return self.answer(timeout_s)

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

    def ask_exit(self) -> None:
        if self.box.poll() is None and not self.failure:
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
    import io

    import torch

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
    worker: WorkerClient | None = None


def backend_names(specs: Sequence[str]) -> list[str]:
    """Short, unique backend names for specs (file stem or last module part; ``stem:function`` on clashes)."""
    names: list[str] = []
    for spec in specs:
        target, fn, is_file = parse_spec(spec)
        names.append(Path(target).stem if is_file else target.rsplit(".", 1)[-1])
    out = []
    for spec, name in zip(specs, names):
        if names.count(name) > 1 or name == REFERENCE_BACKEND:
            name = f"{name}:{parse_spec(spec)[1]}"
        out.append(name)
    if len(set(out)) != len(out):
        raise OpBenchError(f"candidate specs give duplicate backend names: {out!r}")
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]


def _validate(op: str, dtype: str, dispatch: str, device: str, seeds: list[int], trials: int, warmup: int,
              iters: int) -> None:
    if op not in OPS:
        raise OpBenchError(f"op {op!r} has no benchmark inputs; supported: {sorted(OPS)!r}")
    if dtype not in TOLERANCES:
        raise OpBenchError(f"dtype {dtype!r} not supported; choose one of {sorted(TOLERANCES)!r}")
    if dispatch not in ("eager", "compiled"):
        raise OpBenchError(f"dispatch {dispatch!r} must be 'eager' or 'compiled'")
    if device not in ("cpu", "cuda"):
        raise OpBenchError(f"device {device!r} must be 'cpu' or 'cuda'")
    if len(set(seeds)) != len(seeds) or not seeds:
        raise OpBenchError(f"seeds {seeds!r} must be distinct and non-empty")
    if trials < len(seeds):
        raise OpBenchError(f"trials ({trials}) < number of seeds ({len(seeds)}): every checked seed must appear "
                           "on a row")
    if warmup < 1 or iters < 1:
        raise OpBenchError(f"need warmup >= 1 (discarded) and iters >= 1; got warmup={warmup}, iters={iters}")


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
    device: Device = "cpu",
    timeout_s: float = 60.0,
    startup_timeout_s: float = 120.0,
    mem_limit_mb: int = 4096,
    cpu_limit_s: int | None = None,
    triton_max_numel: int = TRITON_INTERPRET_MAX_NUMEL,
    settle_s: float = 0.02,
) -> Path:
    """Benchmark ``candidates`` of ``op`` against the reference on ``device``; returns ``opbench.jsonl``.

    ``candidates`` are specs (``path.py:function`` / ``module:function``), or a mapping backend name ->
    spec; a file candidate is one self-contained file (it may import torch, triton and perfwarden).
    ``shapes`` are the shapes the server serves (lists or ``"16x576"``). Trial ``k`` of every
    (backend, shape) draws its inputs from seed ``seeds[k % len(seeds)]`` and its row reports that
    seed's correctness, so ``trials >= len(seeds)`` puts every checked seed on a row. ``timeout_s``
    bounds every single request to a worker (one correctness check, one timed trial); with
    ``dispatch="compiled"`` the first check of each shape includes compilation, so give it tens of
    seconds. The file is replaced as a whole when the benchmark ends, so it never mixes two rigs;
    ``rig.json`` beside it records the parameters, the device, the sandbox, every backend's spec and
    digests, and a contention sample (load average, busy processes) before and after.

    Timing is only as good as the machine is quiet: with ``threads > 1`` on a machine whose other
    processes keep every core busy, OpenMP regions stall on descheduled threads and the per-call times
    of parallel-sized shapes jump by orders of magnitude (measured: 0.09 ms -> 24 ms for SiLU-mul at
    1x128x1536, 2 threads, load 5 on 2 cores). The contention sample in ``rig.json`` says when that was so.
    """
    import torch

    from perfwarden.harness.contention import sample_contention
    from perfwarden.harness.opbench.rig import describe_device
    from perfwarden.harness.records import RunDir, write_json_atomic

    seeds = [int(s) for s in seeds]
    _validate(op, dtype, dispatch, device, seeds, trials, warmup, iters)
    shape_list = normalize_shapes(op, shapes)
    ref_spec = reference or f"{REFERENCE_MODULE}:{op}"
    if isinstance(candidates, Mapping):
        cand_names, cand_specs = list(candidates.keys()), list(candidates.values())
        if REFERENCE_BACKEND in cand_names or len(set(cand_names)) != len(cand_names):
            raise OpBenchError(f"candidate names {cand_names!r} must be unique and not {REFERENCE_BACKEND!r}")
    else:
        cand_specs = list(candidates)
        cand_names = backend_names(cand_specs)
    atol, rtol = TOLERANCES[dtype]

    ref_spec, cand_specs = absolute_spec(ref_spec), [absolute_spec(s) for s in cand_specs]
    backends = [Backend(REFERENCE_BACKEND, ref_spec, True, impl_digest(ref_spec), uses_triton(ref_spec))]
    for name, spec in zip(cand_names, cand_specs):
        backends.append(Backend(name, spec, False, impl_digest(spec), uses_triton(spec)))
    why_not = sandbox.available()
    if why_not is not None:
        raise OpBenchError(f"the op bench runs candidates only inside the sandbox, which cannot run here: {why_not}")
    if device == "cuda" and not torch.cuda.is_available():
        raise OpBenchError("device 'cuda' asked for, but torch sees no CUDA device here (torch "
                           f"{torch.__version__}); use --device cpu")
    triton_installed = importlib.util.find_spec("triton") is not None
    for b in backends:
        if b.triton and not triton_installed:
            b.unavailable = TRITON_MISSING

    out_path = RunDir(run_dir).opbench(safe_write.check_name(op, "op"))
    op_dir = out_path.parent
    work_root = op_dir / "work"
    safe_write.preflight(run_dir, files=[out_path, op_dir / "rig.json"], dirs=[work_root])  # before any write
    if work_root.exists():
        shutil.rmtree(work_root)
    safe_write.make_dirs(work_root, run_dir)

    # Ground truth, computed here from the trusted reference on the device (never where a candidate ran).
    ref_fn = load_impl(ref_spec)
    truth: dict[tuple[tuple[int, ...], int], list] = {}
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # the workers' thread count: same reduction split as theirs
    try:
        with torch.no_grad():
            for shape in shape_list:
                for seed in seeds:
                    args = make_inputs(op, shape, dtype, check_seed(seed, shape), device)
                    truth[(shape, seed)] = [t.detach().clone() for t in as_tensors(ref_fn(*clone_args(args)))]
    finally:
        torch.set_num_threads(caller_threads)

    requests = len(shape_list) * (len(seeds) + trials)
    cpu_limit = cpu_limit_s if cpu_limit_s is not None else int(
        startup_timeout_s + timeout_s * requests * max(1, threads) + 30)
    limits = sandbox.Limits(wall_s=startup_timeout_s + timeout_s * (requests + 1) + 30, cpu_s=cpu_limit,
                            memory_bytes=int(mem_limit_mb) << 20, pids=512, file_bytes=OUTPUT_FILE_MAX_BYTES,
                            open_files=4096)
    job = {"op": op, "dtype": dtype, "threads": threads, "dispatch": dispatch, "device": device}
    contention_start = sample_contention(interval_s=0.2)  # before any worker exists: the machine's own load
    started = time.time()
    confinement: dict[str, Any] | None = None
    try:
        for i, b in enumerate(backends):  # start together: the imports overlap
            if b.unavailable is None:
                b.worker = WorkerClient(b.name, b.spec, work_root / f"{i:02d}-{_safe(b.name)}", job, threads=threads,
                                        triton=b.triton, device=device, limits=limits)
                confinement = confinement or b.worker.confinement.as_dict()
        _await_ready(backends, startup_timeout_s, timeout_s)

        for b in backends:  # correctness: every backend, every shape, every seed
            for shape in shape_list:
                for seed in seeds:
                    b.checks[(shape, seed)] = _check(b, shape, seed, truth[(shape, seed)], atol, rtol, timeout_s,
                                                     triton_max_numel if device == "cpu" else None)

        # Timing: trial-major, backend order rotated per trial; Triton is timed only on a GPU.
        timed = [b for b in backends if b.unavailable is None and not (b.triton and device == "cpu")]
        for trial in range(trials):
            seed = seeds[trial % len(seeds)]
            for shape in shape_list:
                order = timed[trial % len(timed):] + timed[: trial % len(timed)] if timed else []
                for b in order:
                    time.sleep(settle_s)  # let the previous worker's OpenMP threads stop spinning
                    b.times[(shape, trial)] = _time(b, shape, seed, trial, warmup + iters, warmup, timeout_s)
    finally:
        for b in backends:  # all exit in parallel, then reap
            if b.worker is not None:
                b.worker.ask_exit()
        for b in backends:
            if b.worker is not None:
                b.worker.close()

    contention_end = sample_contention(interval_s=0.2)
    timing_method = "cuda_events" if device == "cuda" else "host_clock"
    rows = build_rows(op, backends, shape_list, seeds, trials, dtype, atol, rtol, dispatch, warmup, device,
                      timing_method)
    write_jsonl_atomic(out_path, rows, run_dir)
    write_json_atomic(op_dir / "rig.json", root=run_dir, payload={
        "op": op, "dtype": dtype, "dispatch": dispatch, "threads": threads, "seeds": seeds, "trials": trials,
        "iters": iters, "warmup": warmup, "shapes": [list(s) for s in shape_list], "atol": atol, "rtol": rtol,
        "timeout_s": timeout_s, "mem_limit_mb": mem_limit_mb, "cpu_limit_s": cpu_limit,
        "device": describe_device(device, threads), "timing_method": timing_method,
        "l2_flushed": device == "cuda", "sandbox": confinement,
        "started_at": started, "duration_s": round(time.time() - started, 3),
        "contention": {"start": contention_start, "end": contention_end},
        "backends": [{"backend": b.name, "spec": b.spec, "is_reference": b.is_reference, "impl_sha256": b.digest,
                      "file_sha256": hashlib.sha256(spec_file(b.spec).read_bytes()).hexdigest(),
                      "triton": b.triton, "unavailable": b.unavailable} for b in backends],
    })
    from perfwarden.harness.seal import seal_file  # issue 13 §5: evidence the harness wrote is sealed as written

    seal_file(out_path, op_dir / "rig.json")
    return out_path


def _await_ready(backends: list[Backend], startup_timeout_s: float, timeout_s: float) -> None:
    deadline = time.monotonic() + startup_timeout_s
    for b in backends:
        if b.worker is None:
            continue
        try:  # our part of the start (interpreter, torch) is bounded by startup_timeout_s ...
            phase = b.worker.answer(max(1.0, deadline - time.monotonic()))
        except WorkerFailed as exc:
            b.unavailable = f"worker did not start: {exc}"
            continue
        try:  # ... importing the implementation (its module-level code) by timeout_s, like any request
            ready = b.worker.answer(timeout_s) if phase.get("phase") == "torch_imported" else phase
        except WorkerFailed as exc:
            b.unavailable = f"import failed: {exc}"
            continue
        if not ready.get("ready"):
            b.unavailable = str(ready.get("raised") or "worker refused the job")
            b.worker.close()


def _check(b: Backend, shape: tuple[int, ...], seed: int, ref: list, atol: float, rtol: float, timeout_s: float,
           interpret_max_numel: int | None) -> Check:
    if b.unavailable is not None:
        # Not installed here is nobody's verdict on the kernel; failing to start is the kernel's fault.
        return Check(None if b.unavailable == TRITON_MISSING else False, raised=b.unavailable)
    if b.triton and interpret_max_numel is not None and math.prod(shape) > interpret_max_numel:
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
        out = as_tensors(read_output_file(out_file))
        ref_device = ref[0].device if ref else None
        out = [t.to(ref_device) if ref_device is not None else t for t in out]
    except Exception as exc:  # noqa: BLE001 - a worker that wrote garbage (or a link, a FIFO, a huge file)
        return Check(False, raised=f"bad output: {describe(exc)}")
    finally:
        try:
            out_file.unlink()
        except OSError:
            pass
    return compare(out, ref, atol, rtol)


def _time(b: Backend, shape: tuple[int, ...], seed: int, trial: int, n: int, warmup: int,
          timeout_s: float) -> Timed | str:
    assert b.worker is not None
    try:
        ans = b.worker.request({"cmd": "time", "shape": list(shape), "seed": seed, "trial": trial, "n": n,
                                "warmup": warmup}, timeout_s)
    except WorkerFailed as exc:
        return f"timing: {exc}"
    times = ans.get("times_ms")
    if not _valid_times(times, n - warmup):
        return f"timing raised {ans.get('raised')}" if "raised" in ans else "timing: malformed answer"
    graph = ans.get("graph_times_ms")
    return Timed(list(times), list(graph) if _valid_times(graph, None) else None,
                 str(ans["graph_raised"])[:500] if ans.get("graph_raised") else None)


def _valid_times(times: Any, expected: int | None) -> bool:
    return (isinstance(times, list) and bool(times) and (expected is None or len(times) == expected)
            and all(isinstance(t, (int, float)) and math.isfinite(t) and 0 <= t < 1e9 for t in times))


def build_rows(op: str, backends: list[Backend], shapes: list[tuple[int, ...]], seeds: list[int], trials: int,
               dtype: str, atol: float, rtol: float, dispatch: str, warmup: int, device: str,
               timing_method: str) -> list[dict[str, Any]]:
    """One ``opbench.jsonl`` row per (backend, shape, trial) (``perfwarden.harness.jsonl.OpBenchLine``)."""
    rows: list[dict[str, Any]] = []
    for b in backends:
        for shape in shapes:
            for trial in range(trials):
                seed = seeds[trial % len(seeds)]
                chk = b.checks.get((shape, seed), Check(None))
                timing = b.times.get((shape, trial))
                timed = timing if isinstance(timing, Timed) else None
                raised = chk.raised
                if raised is None and isinstance(timing, str):
                    raised = timing
                rows.append({
                    "op": op, "backend": b.name, "shape": list(shape), "trial": trial, "dtype": dtype,
                    "times_ms": timed.call_ms if timed else None,
                    "graph_times_ms": timed.graph_ms if timed else None,
                    "graph_raised": timed.graph_raised if timed else None,
                    "warmup_discarded": warmup if timed else None,
                    "fresh_inputs": True if timed else None,
                    "l2_flushed": (device == "cuda") if timed else None,
                    "correct": chk.correct,
                    "max_abs_err": _finite(chk.max_abs_err), "max_rel_err": _finite(chk.max_rel_err),
                    "atol": atol, "rtol": rtol, "dispatch": dispatch, "seed": seed, "raised": raised,
                    "is_reference": b.is_reference, "impl_sha256": b.digest,
                    "measured": timed is not None, "device": device, "timing_method": timing_method if timed else None,
                })
    return rows


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def write_jsonl_atomic(path: Path, rows: list[dict[str, Any]], root: Path | str | None = None) -> None:
    """All rows at once (readers never see half a bench), inside ``root`` without following a link."""
    safe_write.write_text(path, "".join(json.dumps(row, allow_nan=False, separators=(",", ":")) + "\n"
                                        for row in rows), root)


# ------------------------------------------------------------------------------------------- the lab


def alternatives_for(op: str, kinds: Sequence[str] | None = None, device: Device = "cpu") -> list[str]:
    """Implementation specs (absolute ``path.py:function``) on offer for ``op``: the override module
    ``harness/ops/<op>_alt.py`` when it exists, then the catalogued ones (``harness/ops/alternatives``).

    The negative kinds are included on purpose: the rig must flag the wrong one and rank the slow one
    last, and a producer that "wins" with the self-copy must be failed by the auditor. The Triton
    kernels are offered by default only on a GPU (on a CPU they can only be checked, never timed, and
    the interpreter would spend the run's budget). Pass ``kinds`` to choose exactly.
    """
    from perfwarden.harness.ops.alternatives import for_op

    if kinds is None:
        kinds = ("alternative", "slow", "wrong", "self_copy") + (("triton",) if device == "cuda" else ())
    specs: list[str] = []
    own = Path(__file__).resolve().parents[1] / "ops" / f"{op}_alt.py"
    if "alternative" in kinds and own.is_file():
        specs.append(f"{own}:{op}")
    specs += [a.spec for a in for_op(op, tuple(kinds))]  # type: ignore[arg-type]
    return specs


def run_opbench_for_lab(run_dir: Path | str, op: str, candidates: Sequence[str], shapes: Sequence[Sequence[int]],
                        *, dtype: str = "float32", threads: int = 2, dispatch: Dispatch = "eager",
                        device: Device = "cpu", iters: int = 30, warmup: int = 5, trials: int = 3,
                        timeout_s: float = 120.0) -> Path:
    """``run_opbench`` as the lab calls it: each backend is named by its spec (the name the producer
    claims and the integrator installs as the override), shapes are the profile's served shapes, and the
    defaults match the embedded target's true baseline (float32, 2 threads, eager, CPU)."""
    unique = list(dict.fromkeys(candidates))
    if not shapes:
        raise OpBenchError(f"no served shapes for op {op!r}: profile the target first")
    return run_opbench(run_dir, op, {spec: spec for spec in unique}, [list(s) for s in shapes], dtype,
                       trials=trials, iters=iters, warmup=warmup, threads=threads, dispatch=dispatch, device=device,
                       timeout_s=timeout_s)
