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
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from perfwarden.formats import safe_write
from perfwarden.formats.records import RunDir, write_json_atomic
from perfwarden.formats.seal import seal_file
from perfwarden.harness import sandbox
from perfwarden.harness.contention import sample_contention
from perfwarden.harness.opbench import guard, phases
from perfwarden.harness.opbench.backend import (OUTPUT_FILE_MAX_BYTES, Backend, Device, Timed, WorkerClient,
                                                WorkerFailed)
from perfwarden.harness.opbench.correctness import Check
from perfwarden.harness.opbench.digest import (absolute_spec, impl_digest, parse_spec, reaches_reference, spec_file,
                                               uses_triton)
from perfwarden.harness.opbench.inputs import OPS, TOLERANCES, OpBenchError, normalize_shapes
from perfwarden.harness.opbench.rig import describe_device
from perfwarden.harness.opbench.worker import load_impl
from perfwarden.harness.ops.alternatives import for_op

Dispatch = Literal["eager", "compiled"]

REFERENCE_MODULE = "perfwarden.harness.ops.reference"
"""Module holding the reference implementation of every overridable op (function name = op name)."""
REFERENCE_BACKEND = "reference"
"""Backend name of the reference in ``opbench.jsonl``."""
TRITON_INTERPRET_MAX_NUMEL = 1 << 14
"""Largest shape (elements) checked under ``TRITON_INTERPRET=1`` on CPU: the interpreter is ~1000x slower."""
TRITON_MISSING = "triton not installed"


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


WORK_STEM_CHARS = 40
"""Longest stem of a worker's folder name: the folder is known by its index, the stem only helps a reader."""


def work_folder_name(index: int, backend: str) -> str:
    """A worker's folder under ``work/``: its index and a stem from the backend's name, in letters, digits,
    ``_`` and ``-`` only. A backend is often named by its spec, an absolute ``path.py:function``: a name
    cut to a fixed length from such a path ends in ``.py`` for some clone paths, and a folder with a
    source suffix breaks every tool that takes ``*.py`` to be a file. Without a dot the name has no suffix
    at all; without the path the stem is the file and function, whatever the clone's path."""
    tail = re.split(r"[/\\]", backend)[-1]
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", tail).strip("_-")[:WORK_STEM_CHARS].rstrip("_-")
    return f"{index:02d}-{stem}" if stem else f"{index:02d}"


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
    import torch  # heavy: imported when a benchmark runs, not when the CLI or the auditor imports this module

    seeds = [int(s) for s in seeds]
    _validate(op, dtype, dispatch, device, seeds, trials, warmup, iters)
    shape_list = normalize_shapes(op, shapes)
    ref_spec, backends = _make_backends(op, candidates, reference)
    _check_can_run(device, backends)
    out_path, work_root = _prepare_dirs(run_dir, op)
    atol, rtol = TOLERANCES[dtype]
    # Ground truth is computed here from the trusted reference on the device (never where a candidate ran),
    # on inputs from this run's secret (never sent to a worker; each request carries only its own seed).
    secret = guard.new_secret()
    bench = phases.Bench(op, dtype, device, secret, threads, atol, rtol, load_impl(ref_spec), timeout_s, warmup,
                         iters)
    _refuse_reference_reachers(backends)
    limits = _worker_limits(len(shape_list) * (len(seeds) + 1 + 3 * trials) + 10, threads, timeout_s,
                            startup_timeout_s, mem_limit_mb, cpu_limit_s)
    job = {"op": op, "dtype": dtype, "threads": threads, "dispatch": dispatch, "device": device,
           "reference_file": str(spec_file(ref_spec))}
    contention_start = sample_contention(interval_s=0.2)  # before any worker exists: the machine's own load
    started = time.time()
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # the workers' thread count: same reduction split as theirs
    try:
        confinement = _start_workers(backends, job, work_root, threads, device, limits)
        _await_ready(backends, startup_timeout_s, timeout_s)
        _correctness(bench, backends, shape_list, seeds, triton_max_numel if device == "cpu" else None)
        floor = _timing(bench, backends, shape_list, trials, settle_s)
        roofline = phases.roofline(bench, backends, shape_list)
    finally:
        torch.set_num_threads(caller_threads)
        _stop_workers(backends)
    contention_end = sample_contention(interval_s=0.2)
    timing_method = "parent_clock"
    rows = build_rows(op, backends, shape_list, seeds, trials, dtype, atol, rtol, dispatch, warmup, device,
                      timing_method)
    write_jsonl_atomic(out_path, rows, run_dir)
    write_json_atomic(out_path.parent / "rig.json", root=run_dir, payload={
        "op": op, "dtype": dtype, "dispatch": dispatch, "threads": threads, "seeds": seeds, "trials": trials,
        "iters": iters, "warmup": warmup, "shapes": [list(s) for s in shape_list], "atol": atol, "rtol": rtol,
        "timeout_s": timeout_s, "mem_limit_mb": mem_limit_mb, "cpu_limit_s": limits.cpu_s,
        "device": describe_device(device, threads), "timing_method": timing_method,
        "l2_flushed": device == "cuda", "sandbox": confinement,
        "started_at": started, "duration_s": round(time.time() - started, 3),
        "timing": _timing_record(floor, secret), "roofline": roofline,
        "contention": {"start": contention_start, "end": contention_end}, "backends": _backend_records(backends),
    })
    seal_file(out_path, out_path.parent / "rig.json")  # evidence the harness wrote is sealed as written
    return out_path


def _make_backends(op: str, candidates: Sequence[str] | Mapping[str, str],
                   reference: str | None) -> tuple[str, list[Backend]]:
    """The reference and every candidate as backends (absolute specs, names, code digests), and the
    reference's spec. A triton backend without triton installed is marked unavailable, not dropped."""
    ref_spec = reference or f"{REFERENCE_MODULE}:{op}"
    if isinstance(candidates, Mapping):
        cand_names, cand_specs = list(candidates.keys()), list(candidates.values())
        if REFERENCE_BACKEND in cand_names or len(set(cand_names)) != len(cand_names):
            raise OpBenchError(f"candidate names {cand_names!r} must be unique and not {REFERENCE_BACKEND!r}")
    else:
        cand_specs = list(candidates)
        cand_names = backend_names(cand_specs)
    ref_spec, cand_specs = absolute_spec(ref_spec), [absolute_spec(s) for s in cand_specs]
    backends = [Backend(REFERENCE_BACKEND, ref_spec, True, impl_digest(ref_spec), uses_triton(ref_spec))]
    for name, spec in zip(cand_names, cand_specs):
        backends.append(Backend(name, spec, False, impl_digest(spec), uses_triton(spec)))
    triton_installed = importlib.util.find_spec("triton") is not None
    for b in backends:
        if b.triton and not triton_installed:
            b.unavailable = TRITON_MISSING
    return ref_spec, backends


def _check_can_run(device: str, backends: list[Backend]) -> None:
    """Refuse before anything is written: candidates run only inside the sandbox, on a device that exists."""
    import torch  # heavy: see run_opbench

    why_not = sandbox.available()
    if why_not is not None:
        raise OpBenchError(f"the op bench runs candidates only inside the sandbox, which cannot run here: {why_not}")
    if device == "cuda" and not torch.cuda.is_available():
        raise OpBenchError("device 'cuda' asked for, but torch sees no CUDA device here (torch "
                           f"{torch.__version__}); use --device cpu")


def _prepare_dirs(run_dir: Path | str, op: str) -> tuple[Path, Path]:
    """``opbench/<op>/opbench.jsonl`` and a fresh ``work/`` folder beside it, every path checked before
    the first write (a link planted in the run is refused, never written through)."""
    out_path = RunDir(run_dir).opbench(safe_write.check_name(op, "op"))
    work_root = out_path.parent / "work"
    safe_write.preflight(run_dir, files=[out_path, out_path.parent / "rig.json"], dirs=[work_root])
    if work_root.exists():
        shutil.rmtree(work_root)
    safe_write.make_dirs(work_root, run_dir)
    return out_path, work_root


def _worker_limits(requests: int, threads: int, timeout_s: float, startup_timeout_s: float, mem_limit_mb: int,
                   cpu_limit_s: int | None) -> sandbox.Limits:
    """A worker's sandbox bounds: wall and CPU time for every request it can be asked, memory, processes."""
    cpu_limit = cpu_limit_s if cpu_limit_s is not None else int(
        startup_timeout_s + timeout_s * requests * max(1, threads) + 30)
    return sandbox.Limits(wall_s=startup_timeout_s + timeout_s * (requests + 1) + 30, cpu_s=cpu_limit,
                          memory_bytes=int(mem_limit_mb) << 20, pids=512, file_bytes=OUTPUT_FILE_MAX_BYTES,
                          open_files=4096)


def _start_workers(backends: list[Backend], job: dict[str, Any], work_root: Path, threads: int, device: Device,
                   limits: sandbox.Limits) -> dict[str, Any] | None:
    """One sandboxed worker per available backend, started together (the imports overlap); returns the
    sandbox's confinement as recorded in ``rig.json``."""
    confinement: dict[str, Any] | None = None
    for i, b in enumerate(backends):
        if b.unavailable is None:
            b.worker = WorkerClient(b.name, b.spec, work_root / work_folder_name(i, b.name),
                                    {**job, "guard_reference": not b.is_reference}, threads=threads,
                                    triton=b.triton, device=device, limits=limits)
            confinement = confinement or b.worker.confinement.as_dict()
    return confinement


def _stop_workers(backends: list[Backend]) -> None:
    """Every worker exits in parallel, then is reaped; what a worker's guard saw becomes its refusals."""
    for b in backends:
        if b.worker is not None:
            b.worker.ask_exit()
    for b in backends:
        if b.worker is not None:
            b.refusals.extend(v for v in b.worker.violations if v not in b.refusals)
            b.worker.close()


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


def _refuse_reference_reachers(backends: list[Backend]) -> None:
    """A candidate whose code reaches the reference is refused before it runs (a self-comparison)."""
    for b in backends:
        why = None if b.is_reference else reaches_reference(b.spec)
        if why:
            b.refusals.append(f"reaches the reference ({why}): a self-comparison whatever its digest")
            b.unavailable = b.unavailable or f"refused before it ran: {b.refusals[-1]}"


def _timing_record(floor: phases.Floor, secret: bytes) -> dict[str, Any]:
    """How the figures were taken (``rig.json`` ``timing``); the secret is published once the run is over."""
    return {"clock": "parent", "request_floor_ms": {"wall": floor.wall_ns / 1e6, "cpu": floor.cpu_ns / 1e6},
            "samples_per_trial": guard.SAMPLES_PER_TRIAL or "all", "inputs": "per-run secret",
            "input_secret": secret.hex()}


def _backend_records(backends: list[Backend]) -> list[dict[str, Any]]:
    return [{"backend": b.name, "spec": b.spec, "is_reference": b.is_reference, "impl_sha256": b.digest,
             "file_sha256": hashlib.sha256(spec_file(b.spec).read_bytes()).hexdigest(), "triton": b.triton,
             "unavailable": b.unavailable, "refused": b.refusals or None} for b in backends]


def _timing(bench: phases.Bench, backends: list[Backend], shapes: list[tuple[int, ...]], trials: int,
            settle_s: float) -> phases.Floor:
    """Every trial of every timed backend, trial-major with the backend order rotated per trial (drift hits
    all alike); Triton only on a GPU. Returns the request floor the figures were measured above."""
    timed = [b for b in backends if b.unavailable is None and not (b.triton and bench.device == "cpu")]
    floor = phases.request_floor(bench, backends[0])
    figures: dict[tuple[str, tuple[int, ...], int], phases.TrialFigures] = {}
    for trial in range(trials):
        for shape in shapes:
            order = timed[trial % len(timed):] + timed[: trial % len(timed)] if timed else []
            for b in order:
                time.sleep(settle_s)  # let the previous worker's OpenMP threads stop spinning
                result = phases.time_trial(bench, b, shape, trial, floor, bench.device == "cuda")
                if not isinstance(result, str):
                    figures[(b.name, shape, trial)] = result
                b.times[(shape, trial)] = _figures(result)
    phases.charge_deferred_work(bench, backends, figures)
    return floor


def _correctness(bench: phases.Bench, backends: list[Backend], shapes: list[tuple[int, ...]], seeds: list[int],
                 interpret_max_numel: int | None) -> None:
    """Every backend, every shape, every seed (inputs from the secret), then the unpredictable shapes."""
    for b in backends:
        for shape in shapes:
            for seed in seeds:
                b.checks[(shape, seed)] = _check(bench, b, shape, seed, interpret_max_numel)
        if b.worker is not None and not b.is_reference and b.unavailable is None and not b.triton:
            phases.probe(bench, b, shapes)


def _check(bench: phases.Bench, b: Backend, shape: tuple[int, ...], seed: int,
           interpret_max_numel: int | None) -> Check:
    if b.unavailable is not None:
        # Not installed here is nobody's verdict on the kernel; failing to start is the kernel's fault.
        return Check(None if b.unavailable == TRITON_MISSING else False, raised=b.unavailable)
    if b.triton and interpret_max_numel is not None and math.prod(shape) > interpret_max_numel:
        return Check(None)  # not checked: too large for the interpreter (no claim either way)
    return phases.check(bench, b, shape, bench.check_gen(shape, seed))


def _figures(result: phases.TrialFigures | str) -> Timed | str:
    if isinstance(result, str):
        return result
    return Timed([result.call_ms], [result.graph_ms] if result.graph_ms is not None else None)


def build_rows(op: str, backends: list[Backend], shapes: list[tuple[int, ...]], seeds: list[int], trials: int,
               dtype: str, atol: float, rtol: float, dispatch: str, warmup: int, device: str,
               timing_method: str) -> list[dict[str, Any]]:
    """One ``opbench.jsonl`` row per (backend, shape, trial) (``perfwarden.formats.jsonl.OpBenchLine``)."""
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
                # The reference is the trusted baseline: what its worker showed is recorded (rig.json), never a refusal.
                refused = "; ".join(b.refusals)[:1000] if b.refusals and not b.is_reference else None
                correct = False if refused else chk.correct
                raised = raised or (f"refused: {refused}" if refused else None)
                rows.append({
                    "op": op, "backend": b.name, "shape": list(shape), "trial": trial, "dtype": dtype,
                    "times_ms": timed.call_ms if timed else None,
                    "graph_times_ms": timed.graph_ms if timed else None,
                    "graph_raised": timed.graph_raised if timed else None,
                    "warmup_discarded": warmup if timed else None,
                    "fresh_inputs": True if timed else None,
                    "l2_flushed": (device == "cuda") if timed else None,
                    "correct": correct, "refused": refused,
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
