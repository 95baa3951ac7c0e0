"""The op bench's phases after the workers start: correctness (benched and unpredictable shapes, inputs
left unmodified), timing by the parent's clock with timed outputs sampled after the run, and the rig's
roofline. Every input derives from the run's secret (``guard``); everything that decides is computed
here, in the parent. A phase that finds a candidate out of bounds adds a refusal to its backend.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfwarden.harness.opbench import guard
from perfwarden.harness.opbench.backend import Backend, WorkerClient, WorkerFailed, read_output_file
from perfwarden.harness.opbench.correctness import Check, compare
from perfwarden.harness.opbench.inputs import OPS, OpArgs, as_tensors, clone_args, make_inputs, stable_seed
from perfwarden.harness.opbench.worker import describe

if TYPE_CHECKING:  # torch loads where tensors are made (the parent starts without it)
    import torch

SAMPLE_SLACK = 1.5
"""Reading a trial's outputs back may cost a candidate's worker this times the reference's before it is charged."""


@dataclass
class Bench:
    """What every phase needs: the op, the run's secret, the trusted reference and the limits."""

    op: str
    dtype: str
    device: str
    secret: bytes
    threads: int
    atol: float
    rtol: float
    ref_fn: Any
    timeout_s: float
    warmup: int
    iters: int
    _truths: dict[object, list[torch.Tensor]] = field(default_factory=dict)

    def check_gen(self, shape: tuple[int, ...], label: object) -> int:
        return guard.secret_seed(self.secret, "check", label, shape)

    def trial_gen(self, shape: tuple[int, ...], trial: int) -> int:
        return guard.secret_seed(self.secret, "time", shape, trial)

    def inputs(self, shape: tuple[int, ...], gen_seed: int) -> OpArgs:
        return make_inputs(self.op, shape, self.dtype, gen_seed, self.device)

    def cached_truth(self, key: object, args: OpArgs) -> list[torch.Tensor]:
        """The reference's outputs of a timed input set (every backend gets the same sets in a trial)."""
        if key not in self._truths:
            self._truths[key] = self.truth(args)
        return self._truths[key]

    def truth(self, args: OpArgs) -> list[torch.Tensor]:
        import torch

        with torch.no_grad():
            return [t.detach().clone() for t in as_tensors(self.ref_fn(*clone_args(args)))]


def judge_files(bench: Bench, path: Path, args: OpArgs, ref: list[torch.Tensor]) -> Check:
    """Correctness of one output file a worker wrote (outputs, and the inputs as the call left them)."""
    try:
        saved = read_output_file(path)
        outs, after = as_tensors(saved["outs"]), as_tensors(saved["inputs"])
        ref_device = ref[0].device if ref else None
        outs = [t.to(ref_device) if ref_device is not None else t for t in outs]
    except Exception as exc:  # noqa: BLE001 - a worker that wrote garbage (or a link, a FIFO, a huge file)
        return Check(False, raised=f"bad output: {describe(exc)}")
    finally:
        try:
            path.unlink()
        except OSError:
            pass
    chk = compare(outs, ref, bench.atol, bench.rtol)
    why = guard.unmodified(args, after, OPS[bench.op].may_modify)
    if why:
        return Check(False, chk.max_abs_err, chk.max_rel_err, raised=why)
    return chk


def check(bench: Bench, b: Backend, shape: tuple[int, ...], gen_seed: int) -> Check:
    """One correctness check of ``b`` at ``shape`` on the inputs of ``gen_seed``."""
    assert b.worker is not None
    args = bench.inputs(shape, gen_seed)
    ref = bench.truth(args)
    out_file = b.worker.workdir / f"out-{'x'.join(map(str, shape))}-{gen_seed:x}.pt"
    try:
        ans = b.worker.request({"cmd": "check", "shape": list(shape), "gen_seed": gen_seed, "out": str(out_file)},
                               bench.timeout_s)
    except WorkerFailed as exc:
        return Check(False, raised=str(exc))
    if "raised" in ans:
        return Check(False, raised=str(ans["raised"]))
    return judge_files(bench, out_file, args, ref)


def probe(bench: Bench, b: Backend, shapes: list[tuple[int, ...]]) -> None:
    """Correctness at shapes drawn from the secret: a candidate right only where it is benched is refused."""
    for shape in guard.probe_shapes(bench.op, shapes, bench.secret):
        chk = check(bench, b, shape, bench.check_gen(shape, "probe"))
        if chk.correct is not True:
            b.refusals.append(f"wrong at a shape it could not predict {list(shape)}: "
                              f"{chk.raised or f'max_rel_err {chk.max_rel_err:.3g}'}"[:300])
            return


@dataclass
class TrialFigures:
    """One trial of one backend, measured by the parent."""

    call_ms: float
    graph_ms: float | None
    wall_ns: int
    cpu_ns: int
    sample_cpu_ns: int = 0
    idle_cpu_ns: int = 0
    """CPU the sandbox spent in the idle window right after the run (judged against the reference's)."""
    """CPU the sandbox spent handing back the timed calls' outputs (charged where it exceeds the reference's)."""


def time_trial(bench: Bench, b: Backend, shape: tuple[int, ...], trial: int, floor: Floor,
               graphs: bool) -> TrialFigures | str:
    """Prepare the trial's input sets (untimed), time the run of its ``iters`` calls from outside, then
    check a sample of the timed calls' outputs and inputs chosen after the run, and the sandbox's CPU time
    over the whole window. Returns the figures, or why there are none; refusals go on ``b``."""
    w = b.worker
    assert w is not None
    n, gen = bench.warmup + bench.iters, bench.trial_gen(shape, trial)
    try:
        ans = w.request({"cmd": "prepare", "shape": list(shape), "gen_seed": gen, "n": n, "warmup": bench.warmup},
                        bench.timeout_s)
        if "raised" in ans:
            return f"timing raised {ans['raised']}"
        before = w.cpu_tasks()
        ans, wall = w.timed_request({"cmd": "run", "count": bench.iters}, bench.timeout_s)
        after = w.cpu_tasks()
        time.sleep(guard.IDLE_WINDOW_S)
        idle = guard.cpu_window(after, w.cpu_tasks())
        if "raised" in ans or ans.get("done") != n:
            return f"timing raised {ans.get('raised', 'a short run')}"
        graph_ms = _graph(bench, w, n, floor.wall_ns) if graphs else None
        idx = guard.sample_indices(bench.secret, (shape, trial), bench.iters)
        paths = [w.workdir / f"sample-{trial}-{i}.pt" for i in idx]
        before_sample = w.cpu_tasks()
        ans = w.request({"cmd": "sample", "indices": [bench.warmup + i for i in idx],
                         "outs": [str(p) for p in paths]}, bench.timeout_s)
        sample_cpu = guard.cpu_window(before_sample, w.cpu_tasks()).cpu_ns
    except WorkerFailed as exc:
        return f"timing: {exc}"
    if "raised" in ans:
        return f"timing raised {ans['raised']}"
    for i, path in zip(idx, paths):
        args = bench.inputs(shape, stable_seed("set", gen, bench.warmup + i))
        chk = judge_files(bench, path, args, bench.cached_truth((gen, i), args))
        if chk.correct is not True:
            b.refusals.append(f"timed call {bench.warmup + i} of trial {trial} was wrong: "
                              f"{chk.raised or f'max_rel_err {chk.max_rel_err:.3g}'}"[:300])
            break
    run = guard.cpu_window(before, after)
    b.refusals.extend(v for v in guard.run_violations(run, bench.threads, bench.device) if v not in b.refusals)
    call_ms = guard.decisive_ms(run, wall, floor.wall_ns, floor.cpu_ns, bench.threads, bench.iters, bench.device)
    return TrialFigures(call_ms, graph_ms, wall, run.cpu_ns, sample_cpu, idle.cpu_ns)


def charge_deferred_work(bench: Bench, backends: list[Backend],
                         figures: dict[tuple[str, tuple[int, ...], int], TrialFigures]) -> None:
    """Work a candidate does after its run (deferred to a thread, or done while its outputs are read back: a
    lazy tensor, a patched method) is work its clock did not see: the CPU its sandbox spends idle after the
    run and handing outputs back, beyond what the reference's spends on the same trial, is added to its
    figure, and idle work beyond the slack refuses it. ``figures``: (backend, shape, trial) -> TrialFigures."""
    ref = next((b for b in backends if b.is_reference), None)
    if ref is None:
        return
    ref_sample = {shape: statistics.median(f.sample_cpu_ns for (name, s, _), f in figures.items()
                                           if name == ref.name and s == shape) for shape in {k[1] for k in figures}
                  if any(k[0] == ref.name and k[1] == shape for k in figures)}
    for b in backends:
        if b.is_reference:
            continue
        for (shape, trial), timed in list(b.times.items()):
            mine, theirs = figures.get((b.name, shape, trial)), figures.get((ref.name, shape, trial))
            if mine is None or theirs is None or isinstance(timed, str):
                continue
            why = guard.idle_violation(mine.idle_cpu_ns, theirs.idle_cpu_ns)
            if why and not any(r.startswith("used ") for r in b.refusals):
                b.refusals.append(why)
            # Handing outputs back costs the same for every backend, give or take: beyond half as much again
            # as the reference's (median over its trials) it is charged.
            extra_ns = max(0, mine.sample_cpu_ns - int(SAMPLE_SLACK * ref_sample.get(shape, mine.sample_cpu_ns)))
            timed.call_ms = [t + extra_ns / bench.iters / 1e6 for t in timed.call_ms]


def _graph(bench: Bench, w: WorkerClient, n: int, ipc_ns: int) -> float | None:
    replays = bench.iters  # one flush per replay: the same floor as a run of ``iters`` calls
    ans, wall = w.timed_request({"cmd": "graph_run", "replays": replays, "warmup": bench.warmup}, bench.timeout_s)
    if "raised" in ans:
        return None
    return max(guard.MIN_FIGURE_MS, max(0, wall - ipc_ns) / (replays * (n - bench.warmup)) / 1e6)


@dataclass(frozen=True)
class Floor:
    """What one request costs with no op in it, measured on the trusted reference's worker: subtracted from
    every timed request, so a figure is the calls, not the pipe, the protocol or a GPU's flushes."""

    wall_ns: int = 0
    cpu_ns: int = 0


def request_floor(bench: Bench, reference: Backend, pings: int = 7) -> Floor:
    """The least wall and CPU time of ``pings`` timed runs of ``iters`` calls of an op that does nothing
    (cache flushes included on a GPU) on the reference's worker. Never measured on a candidate's worker
    (it could inflate its own floor)."""
    w = reference.worker
    if w is None:
        return Floor()
    walls, cpus = [], []
    msg = {"cmd": "null_run", "count": bench.iters}
    for _ in range(pings):
        try:
            before = w.cpu_tasks()
            walls.append(w.timed_request(msg, bench.timeout_s)[1])
            cpus.append(guard.cpu_window(before, w.cpu_tasks()).cpu_ns)
        except WorkerFailed:
            return Floor()
    return Floor(min(walls), min(cpus))


def roofline(bench: Bench, backends: list[Backend], shapes: list[tuple[int, ...]]) -> dict[str, Any]:
    """The rig's floor per shape (the time to move the op's bytes here) and the isolated speedup it allows;
    a candidate timed below the floor is refused (implausible, whatever ratio it claims)."""
    import torch

    out: dict[str, Any] = {}
    caller = torch.get_num_threads()
    torch.set_num_threads(bench.threads)
    try:
        for shape in shapes:
            args = bench.inputs(shape, bench.check_gen(shape, "roofline"))
            nbytes = guard.bytes_moved(args, bench.truth(args))
            floor = guard.copy_floor_ms(nbytes, bench.device)
            key = "x".join(map(str, shape))
            ref = next((b for b in backends if b.is_reference), None)
            ref_ms = _median_call(ref, shape) if ref else None
            out[key] = {"bytes_moved": nbytes, "floor_ms": floor, "bandwidth_gb_s": nbytes / floor / 1e6 if floor else None,
                        "max_plausible_speedup": (ref_ms / (guard.ROOFLINE_MARGIN * floor)) if ref_ms and floor else None}
            for b in backends:
                mine = _median_call(b, shape)
                why = guard.below_roofline(mine, floor) if mine is not None and not b.is_reference else None
                if why:
                    b.refusals.append(f"{key}: {why}")
    finally:
        torch.set_num_threads(caller)
    return out


def _median_call(b: Backend, shape: tuple[int, ...]) -> float | None:
    figures: list[float] = [t.call_ms[0] for (s, _), t in b.times.items()
                            if s == shape and not isinstance(t, str) and t.call_ms]
    return statistics.median(figures) if figures else None
