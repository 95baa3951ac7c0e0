"""What keeps the op bench's verdict out of the candidate's reach.

A candidate runs in a sandboxed worker, but inside that worker it can reach everything: the clock, the
protocol stream, the seeds, the inputs and the outputs it hands back. So nothing that decides is taken
there:

- **the clock** is the parent's: the wall time of a request seen from outside, and the CPU time of every
  thread of every process in the candidate's sandbox read from ``/proc`` by the parent (``task_cpu_ns``,
  ``decisive_ms``); more threads running than the rig allows, or CPU spent while idle after the run, is
  work outside the timed calls (a background thread, a helper process) and refuses the candidate
  (``run_violations``);
- **inputs** come from a per-run secret (``new_secret``/``secret_seed``) the worker learns one request at a
  time, so nothing can be precomputed at import;
- **answers** carry the request's nonce; an answer nobody asked for is a forgery (``WorkerClient``);
- **outputs of timed calls** are checked after the run (every one by default, ``sample_indices``);
- **inputs the op must not modify** are compared bit for bit (``inputs.OpSpec.may_modify``);
- **shapes** the candidate cannot predict are checked too (``probe_shapes``);
- **the plausibility bound** is the rig's own memory roofline (``copy_floor_ms``), not a fixed ratio;
- **the reference** is out of a candidate's reach: statically (``digest.reaches_reference``) and at run
  time (the worker's audit hook).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads in the checks that read tensors
    import torch

ROOFLINE_MARGIN = 0.5
"""A call faster than half the time the rig needs to move its bytes (a copy of that size) is refused."""
SAMPLES_PER_TRIAL: int | None = None
"""Timed calls of each trial whose outputs (and unmodified inputs) are checked after the run; None: all of
them (a candidate that computes its answers only when they are read back pays for all of them, see
``phases.charge_deferred_work``)."""


def new_secret() -> bytes:
    """The per-run secret every input seed derives from (never sent to a worker)."""
    return os.urandom(32)


def secret_seed(secret: bytes, *parts: object) -> int:
    """A 63-bit generator seed for ``parts`` under ``secret`` (HMAC-SHA256)."""
    return int.from_bytes(hmac.new(secret, repr(parts).encode(), hashlib.sha256).digest()[:8], "big") >> 1


def nonce(secret: bytes, counter: int) -> str:
    return hmac.new(secret, f"nonce:{counter}".encode(), hashlib.sha256).hexdigest()[:24]


def sample_indices(secret: bytes, key: object, count: int, k: int | None = SAMPLES_PER_TRIAL) -> list[int]:
    """``k`` distinct indices in ``range(count)`` (all when ``k`` is None), drawn after the run from the secret."""
    rng = random.Random(secret_seed(secret, "sample", key))
    return sorted(rng.sample(range(count), count if k is None else min(k, count)))


def probe_shapes(op: str, shapes: Sequence[tuple[int, ...]], secret: bytes) -> list[tuple[int, ...]]:
    """Shapes the candidate cannot predict, two per benched shape: the leading (token, batch, sequence)
    dimensions redrawn from the secret, once larger and once smaller where they can be; the model's own
    dimensions (hidden size, heads, head dim) kept."""
    rng = random.Random(secret_seed(secret, "probe", op))
    out: list[tuple[int, ...]] = []
    for shape in shapes:
        free = [i for i in ({0, 2} if op == "rotary" else set(range(len(shape) - 1)))]
        bounds: tuple[tuple[Callable[[int], int], Callable[[int], int]], ...] = (
            (lambda d: d + 1, lambda d: 2 * d + 7), (lambda d: 1, lambda d: d - 1))
        for low, high in bounds:
            if all(high(shape[i]) < low(shape[i]) for i in free):
                continue
            cand = tuple(rng.randint(low(d), max(low(d), high(d))) if i in free and high(d) >= low(d) else d
                         for i, d in enumerate(shape))
            if cand != shape and cand not in shapes and cand not in out:
                out.append(cand)
    return out


def unmodified(before: Sequence[object], after: Sequence[torch.Tensor], may_modify: frozenset[int]) -> str | None:
    """Why ``after`` (the inputs as the worker saw them after the call) differs from ``before`` in an
    argument the op must not modify, or None."""
    import torch

    if len(after) != sum(isinstance(a, torch.Tensor) for a in before):
        return "bad output: the worker did not return the inputs it was given"
    tensors = [(i, a) for i, a in enumerate(before) if isinstance(a, torch.Tensor)]
    for (i, b), a in zip(tensors, after):
        if i in may_modify:
            continue
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype or not torch.equal(a.to(b.device), b):
            return f"modified input {i}, which the op must not modify"
    return None


# ------------------------------------------------------------------------------ the parent's clock


def task_cpu_ns(pids: Sequence[int]) -> dict[tuple[int, int], int]:
    """CPU time (ns) of every live thread of every process in ``pids``, keyed by (pid, tid), from
    ``/proc/<pid>/task/*/schedstat``: read from outside, precise to well under a millisecond (unlike the
    tick-counted ``stat``)."""
    out: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                out[(pid, int(tid))] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return out


@dataclass(frozen=True)
class CpuWindow:
    """What the sandbox spent between two readings: CPU in all, and how many threads ran."""

    cpu_ns: int
    threads_ran: int


def cpu_window(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> CpuWindow:
    deltas = [ns - before.get(key, 0) for key, ns in after.items()]
    return CpuWindow(sum(max(0, d) for d in deltas), sum(d > THREAD_RAN_NS for d in deltas))


THREAD_RAN_NS = 50_000
"""A thread that used more than 50 us of CPU in a window ran in it (less is a wake-up, not work)."""
IDLE_WINDOW_S = 0.01
"""After a timed run the parent watches the idle sandbox this long: work deferred past the clock shows."""
IDLE_CPU_NS = 1_000_000
"""CPU a candidate's idle sandbox may spend beyond the reference's in the idle window (``idle_violation``)."""


def run_violations(run: CpuWindow, threads: int, device: str = "cpu") -> list[str]:
    """Why a timed run ran on more threads than the rig allows (on the CPU only: a GPU driver keeps
    threads of its own): a background thread, a thread pool or a helper process."""
    if device == "cpu" and run.threads_ran > threads:
        return [f"ran on {run.threads_ran} threads during its timed calls; the rig allows {threads} "
                "(a background thread, a thread pool or a helper process)"]
    return []


def idle_violation(mine_ns: int, reference_ns: int) -> str | None:
    """Why a candidate's sandbox spent more CPU while idle after its run than the reference's did after the
    same trial (OpenMP threads spin for a while after a parallel region, in both): work deferred past the
    clock. The reference's figure is the witness; ``IDLE_CPU_NS`` and half of it are the slack."""
    if mine_ns - reference_ns > IDLE_CPU_NS + reference_ns // 2:
        return (f"used {mine_ns / 1e6:.1f} ms of CPU while idle after its timed calls, the reference "
                f"{reference_ns / 1e6:.1f} ms (work deferred past the clock)")
    return None


def decisive_ms(run: CpuWindow, wall_ns: int, ipc_ns: int, ipc_cpu_ns: int, threads: int, calls: int,
                device: str) -> float:
    """Per-call time that decides, all of it read by the parent. On the CPU with one thread: the sandbox's
    CPU time (immune to other load on the machine; every thread and process of the sandbox counts). With
    more threads: the larger of CPU per thread and the wall time (so neither serial work nor parallel work
    is credited for what it did not save). On a GPU: the wall time of the request, which ends after the
    worker synchronised the device with a function bound before the candidate loaded. ``ipc_ns`` and
    ``ipc_cpu_ns`` are the cost of an empty request (``phases.request_floor``)."""
    wall_ms = max(0, wall_ns - ipc_ns) / 1e6
    if device != "cpu":
        return max(MIN_FIGURE_MS, wall_ms / calls)
    cpu_ms = max(0, run.cpu_ns - ipc_cpu_ns) / 1e6 / threads
    return max(MIN_FIGURE_MS, (cpu_ms if threads == 1 else max(cpu_ms, wall_ms)) / calls)


MIN_FIGURE_MS = 1e-6
"""A call measured at or below its floor is recorded at one nanosecond, never zero (a ratio over it stays
finite and the roofline refuses it)."""


# ----------------------------------------------------------------------------- the rig's roofline


def bytes_moved(args: Sequence[object], outs: Sequence[object]) -> int:
    """Compulsory traffic of one call: every input read once, every output written once."""
    import torch

    return sum(t.numel() * t.element_size() for t in (*args, *outs) if isinstance(t, torch.Tensor))


def copy_floor_ms(nbytes: int, device: str, reps: int = 30) -> float:
    """The fastest this rig moves ``nbytes`` (a copy of ``nbytes / 2``: read plus write), best of ``reps``:
    no correct implementation of a memory-bound op can beat it by much.

    On a GPU: ``nbytes`` over the device memory's bandwidth, measured by CUDA events on a copy far larger
    than the L2 cache (the candidate's inputs are cold: the L2 is flushed between its calls). A floor timed
    on a copy of ``nbytes`` itself is the fixed cost of one kernel (2-15 us on an H200 whether timed by the
    host or by events), which honest microsecond Triton kernels beat in a stream of calls: the first GPU
    check (2026-11-26) saw both ways refuse them as faster than the rig."""
    import torch

    if device != "cpu":
        return nbytes / device_bandwidth_bytes_per_ms(device)
    n = max(1, math.ceil(nbytes / 2 / 4))
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        dst.copy_(src)
        best = min(best, (time.perf_counter_ns() - t0) / 1e6)
    return best


DEVICE_COPY_BYTES = 1 << 30
"""The bandwidth copy on a GPU: 512 MiB read and 512 MiB written, many times any L2 cache."""


@functools.lru_cache(maxsize=None)
def device_bandwidth_bytes_per_ms(device: str, reps: int = 5) -> float:
    """Bytes read plus written per ms by the device's own copy kernel, best of ``reps`` (events)."""
    import torch

    src = torch.empty(DEVICE_COPY_BYTES // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dst.copy_(src)
    best = math.inf
    for _ in range(reps):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    del src, dst
    return DEVICE_COPY_BYTES / best


def below_roofline(call_ms: float, floor_ms: float) -> str | None:
    if call_ms < ROOFLINE_MARGIN * floor_ms:
        return (f"{call_ms * 1e3:.2f} us per call is faster than this rig can move the op's bytes "
                f"({floor_ms * 1e3:.2f} us): implausible")
    return None
