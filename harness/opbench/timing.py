"""How one timed trial is measured in-process, behind a small device interface so the logic runs on any device.

The op bench's verdict does not come from here (``guard``: its clock is the parent's, out of the
candidate's reach); the worker uses ``CudaApi`` for cache flushes and graph capture, and
``time_trial`` remains the in-process timer of the device benchmarks (``benchmarks/opbench_gpu.py``).

Two figures per trial, both with warm-up excluded and every input set used exactly once per pass:

- **call by call** (``times_ms``, what an eager server pays): for each input set, flush the cache,
  wait for the device to be idle, then time one call between two events. Because the device is idle
  when the start event is queued, the host's launch overhead is inside the interval -- on a GPU, a
  kernel faster than its launch is slower call by call than its graph figure says;
- **graph replay** (``graph_times_ms``, the kernel itself, what a CUDA-graph server pays): run the
  warm-up sets once (compiles, autotunes), capture one graph that calls the op on each of the
  remaining distinct input sets in turn, then replay it: flush, start event, replay, end event; the
  figure is the interval divided by the calls in the graph, one figure per replay, the first
  ``warmup`` replays discarded. Devices without graphs (the CPU) record none.

``DeviceApi`` is what differs between devices: events, synchronisation, cache flush and graph
capture. ``CudaApi`` uses ``torch.cuda``; ``HostClockApi`` uses the host's monotonic clock, has no
cache to flush and (unless a test asks for its stand-in graphs) no graphs.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from perfwarden.harness.opbench.inputs import OpArgs

L2_FLUSH_BYTES_MIN = 256 << 20
"""Bytes zeroed between timed calls on a GPU: at least 256 MiB (as triton.testing.do_bench), and at
least twice the device's L2, so nothing of the previous call is still cached."""


class Event(Protocol):
    def record(self) -> None: ...

    def elapsed_ms(self, end: "Event") -> float: ...


class Graph(Protocol):
    def replay(self) -> None: ...


class DeviceApi(Protocol):
    """What a device offers the timer."""

    name: str
    """``cpu`` or ``cuda``."""
    method: str
    """How intervals are measured: ``host_clock`` or ``cuda_events``."""
    flushes_cache: bool
    has_graphs: bool

    def event(self) -> Event: ...

    def synchronize(self) -> None: ...

    def flush_cache(self) -> None: ...

    def capture(self, thunk: Callable[[], Any], warmup: Callable[[], Any]) -> Graph: ...


@dataclass
class Timings:
    """One trial's figures (milliseconds per call, warm-up excluded)."""

    call_ms: list[float]
    graph_ms: list[float] | None = None
    graph_raised: str | None = None
    """Why no graph figure was taken although the device has graphs (e.g. the op cannot be captured)."""


_CLOCK = time.perf_counter_ns
"""Bound when the worker imports this module, before it loads the implementation: rebinding
``time.perf_counter_ns`` afterwards does not change the host clock's figures. (Code in the worker's
process can still reach this module; in-process figures are evidence for the harness audit, and the
patch audit re-measures through the server.)"""


class _HostEvent:
    __slots__ = ("t",)

    def __init__(self) -> None:
        self.t = 0

    def record(self) -> None:
        self.t = _CLOCK()

    def elapsed_ms(self, end: "_HostEvent") -> float:
        return (end.t - self.t) / 1e6


class _ReplayedThunk:
    """A stand-in graph for the host: replaying calls the captured thunk again."""

    def __init__(self, thunk: Callable[[], Any]):
        self.thunk = thunk

    def replay(self) -> None:
        self.thunk()


class HostClockApi:
    """The CPU: monotonic host clock, nothing to synchronise or flush; graphs only as a test stand-in."""

    name = "cpu"
    method = "host_clock"
    flushes_cache = False

    def __init__(self, stand_in_graphs: bool = False):
        self.has_graphs = stand_in_graphs
        self.flushes = 0

    def event(self) -> _HostEvent:
        return _HostEvent()

    def synchronize(self) -> None:
        return None

    def flush_cache(self) -> None:
        self.flushes += 1

    def capture(self, thunk: Callable[[], Any], warmup: Callable[[], Any]) -> _ReplayedThunk:
        warmup()
        return _ReplayedThunk(thunk)


class CudaApi:
    """A CUDA device through torch: CUDA events, an L2 flush by zeroing a scratch buffer, CUDA graphs."""

    name = "cuda"
    method = "cuda_events"
    flushes_cache = True
    has_graphs = True

    def __init__(self, device: str = "cuda"):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        props = torch.cuda.get_device_properties(self.device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        self._scratch = torch.empty(max(L2_FLUSH_BYTES_MIN, 2 * l2), dtype=torch.int8, device=self.device)

    def event(self) -> Any:
        torch = self.torch

        class _CudaEvent:
            __slots__ = ("e",)

            def __init__(self) -> None:
                self.e = torch.cuda.Event(enable_timing=True)

            def record(self) -> None:
                self.e.record()

            def elapsed_ms(self, end: "_CudaEvent") -> float:
                end.e.synchronize()
                return float(self.e.elapsed_time(end.e))

        return _CudaEvent()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def flush_cache(self) -> None:
        self._scratch.zero_()

    def capture(self, thunk: Callable[[], Any], warmup: Callable[[], Any]) -> Any:
        torch = self.torch
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up off the capture stream, as torch's graph docs require
            warmup()
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            thunk()
        self.synchronize()
        return graph


def time_trial(api: DeviceApi, fn: Callable[..., Any], pool: list[OpArgs], warmup: int,
               graph_pool: list[OpArgs] | None = None) -> Timings:
    """Time ``fn`` on every input set of ``pool`` once (call by call), then, where the device has
    graphs, on ``graph_pool`` (distinct sets of its own) by graph replay. ``pool`` is consumed: each set
    is released after its call, so nothing is timed twice or kept alive."""
    if warmup < 1 or len(pool) <= warmup:
        raise ValueError(f"need 1 <= warmup < len(pool); got warmup={warmup}, pool of {len(pool)}")
    call_ms: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for i in range(len(pool)):
            args = pool[i]
            pool[i] = ()  # each input set is used once, then released
            api.flush_cache()
            api.synchronize()  # the device idles: the call's launch overhead is inside the interval
            start, end = api.event(), api.event()
            start.record()
            out = fn(*args)
            end.record()
            ms = start.elapsed_ms(end)
            del out, args
            if i >= warmup:
                call_ms.append(ms)
    finally:
        gc.enable()
    if not api.has_graphs or graph_pool is None:
        return Timings(call_ms)
    try:
        graph_ms = _graph_replays(api, fn, graph_pool, warmup)
    except Exception as exc:  # noqa: BLE001 - an op that cannot be captured is the op's property, recorded
        return Timings(call_ms, None, f"graph capture failed: {type(exc).__name__}: {str(exc)[:300]}")
    return Timings(call_ms, graph_ms)


def _graph_replays(api: DeviceApi, fn: Callable[..., Any], pool: list[OpArgs], warmup: int) -> list[float]:
    if len(pool) <= warmup:
        raise ValueError(f"graph pool of {len(pool)} set(s) leaves nothing after {warmup} warm-up set(s)")
    warm, captured = pool[:warmup], pool[warmup:]
    outs: list[Any] = []

    def run_warm() -> None:
        for args in warm:
            fn(*args)

    def run_all() -> None:
        outs.clear()
        for args in captured:
            outs.append(fn(*args))

    graph = api.capture(run_all, run_warm)
    per_call: list[float] = []
    for replay in range(warmup + len(captured)):  # as many graph figures as call-by-call ones
        api.flush_cache()
        start, end = api.event(), api.event()
        start.record()
        graph.replay()
        end.record()
        ms = start.elapsed_ms(end) / len(captured)
        if replay >= warmup:
            per_call.append(ms)
    return per_call
