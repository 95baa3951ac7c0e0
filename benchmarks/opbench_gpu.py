"""The op bench on a GPU, checked against an independent measurement.

For rmsnorm, silu_mul and rotary at SmolLM2-135M's served shapes (decode, batched decode, prefill),
runs the op bench (sandboxed workers, CUDA events, L2 flushed) with the reference and the hand-written
Triton kernel, and prints per op and shape: reference and Triton ms call by call and by CUDA-graph
replay, the speedups, and the op bench's graph figure against ``triton.testing.do_bench_cudagraph`` of the
same two functions (median of graph replays, as the op bench's graph figure is) -- they must agree within
5%. ``triton.testing.do_bench`` (one call between events, L2 flushed before each: cold cache, launch
latency exposed for microsecond kernels) is printed beside for reference; it measures another thing and is
not held to the tolerance.

    .venv/bin/python benchmarks/opbench_gpu.py [--dtype bfloat16] [--iters 50] [--trials 3]

Without CUDA it says "needs CUDA", still checks every Triton kernel's correctness at the served shapes
under ``TRITON_INTERPRET=1`` through the op bench (decode and batched-decode shapes; prefill shapes are
too large for the interpreter), prints that table, and exits 0. With CUDA it exits 1 when a figure
disagrees with do_bench by more than the tolerance.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

AGREEMENT = 0.05
"""Largest relative difference between the op bench's graph figure and do_bench_cudagraph's median."""

SHAPES: dict[str, list[list[int]]] = {
    "rmsnorm": [[1, 1, 576], [8, 1, 576], [1, 128, 576]],
    "silu_mul": [[1, 1, 1536], [8, 1, 1536], [1, 128, 1536]],
    "rotary": [[1, 9, 1, 64], [8, 9, 1, 64], [1, 9, 128, 64]],
}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _rows(path: Path) -> dict[tuple[str, str], dict]:
    from perfwarden.formats.jsonl import OpBenchLine, read_jsonl

    cells: dict[tuple[str, str], dict] = {}
    for _, r in read_jsonl(path, OpBenchLine).records:
        key = (r.backend, "x".join(map(str, r.shape)))
        cell = cells.setdefault(key, {"call": [], "graph": [], "correct": [], "raised": None, "graph_raised": None})
        cell["call"] += r.times_ms or []
        cell["graph"] += r.graph_times_ms or []
        cell["correct"].append(r.correct)
        cell["raised"] = cell["raised"] or r.raised
        cell["graph_raised"] = cell["graph_raised"] or r.graph_raised
    return cells


def _correct(values: list) -> str:
    if any(v is False for v in values):
        return "WRONG"
    return "ok" if values and all(v is True for v in values) else "not checked"


def _do_bench_ms(op: str, spec: str, shape: list[int], dtype: str) -> tuple[float, float]:
    """``(do_bench_cudagraph median, do_bench median)`` of ``spec`` at ``shape``, in ms."""
    import torch
    import triton.testing

    from perfwarden.harness.opbench.inputs import make_inputs, timing_seed
    from perfwarden.harness.opbench.worker import load_impl

    fn = load_impl(spec)
    args = make_inputs(op, shape, dtype, timing_seed(99, shape, 0, 0), "cuda")
    with torch.no_grad():
        graph = float(triton.testing.do_bench_cudagraph(lambda: fn(*args), return_mode="median"))
        single = float(triton.testing.do_bench(lambda: fn(*args), return_mode="median"))
    return graph, single


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--run-dir", type=Path, default=None, help="where opbench/ goes (default: a temp dir)")
    args = parser.parse_args(argv)

    import torch

    from perfwarden.harness import sandbox
    from perfwarden.harness.opbench import TRITON_INTERPRET_MAX_NUMEL, run_opbench
    from perfwarden.harness.ops.alternatives import for_op

    if importlib.util.find_spec("triton") is None:
        print("triton is not installed: pip install -e '.[triton]'")
        return 0
    why = sandbox.available()
    if why is not None:
        print(f"the op bench needs its sandbox: {why}")
        return 0
    cuda = torch.cuda.is_available()
    if not cuda:
        print("needs CUDA: no GPU here, so nothing is timed. Checking the Triton kernels' correctness at the "
              "served shapes under TRITON_INTERPRET=1 instead (float32; prefill shapes are too large for the "
              "interpreter).")
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="opbench-gpu-"))
    dtype = args.dtype if cuda else "float32"
    disagreements = 0
    compared = 0
    header = (f"{'op':<9} {'shape':<11} {'correct':<8} {'ref call':>9} {'tri call':>9} {'x call':>7} "
              f"{'ref graph':>9} {'tri graph':>9} {'x graph':>7} {'cudagraph ref/tri':>17} {'agree':>6} "
              f"{'do_bench ref/tri':>17}")
    if cuda:
        name = torch.cuda.get_device_name(0)
        print(f"device: {name}; dtype {dtype}; ms per call (median); x = reference / Triton")
        print(header)
    else:
        print(f"{'op':<9} {'shape':<11} {'correct':<12} raised")
    for op, shapes in SHAPES.items():
        spec = next(a.spec for a in for_op(op) if a.kind == "triton")
        use = shapes if cuda else [s for s in shapes if _numel(s) <= TRITON_INTERPRET_MAX_NUMEL]
        path = run_opbench(run_dir / op, op, {"triton": spec}, use, dtype, trials=args.trials,
                           iters=args.iters if cuda else 2, warmup=5 if cuda else 1,
                           device="cuda" if cuda else "cpu", timeout_s=600)
        cells = _rows(path)
        for shape in use:
            key = "x".join(map(str, shape))
            ref, tri = cells[("reference", key)], cells[("triton", key)]
            if not cuda:
                print(f"{op:<9} {key:<11} {_correct(tri['correct']):<12} {tri['raised'] or ''}")
                continue
            rc, tc = _median(ref["call"]), _median(tri["call"])
            rg, tg = _median(ref["graph"]), _median(tri["graph"])
            (db_ref, single_ref) = _do_bench_ms(op, f"perfwarden.harness.ops.reference:{op}", shape, dtype)
            (db_tri, single_tri) = _do_bench_ms(op, spec, shape, dtype)
            agree = []
            for ours, theirs in ((rg, db_ref), (tg, db_tri)):
                if ours is not None:
                    compared += 1
                    ok = abs(ours - theirs) / theirs <= AGREEMENT
                    disagreements += not ok
                    agree.append(ok)
            mark = "yes" if agree and all(agree) else "NO"
            print(f"{op:<9} {key:<11} {_correct(tri['correct']):<8} {_fmt(rc):>9} {_fmt(tc):>9} "
                  f"{_fmt(rc / tc if rc and tc else None, 2):>7} {_fmt(rg):>9} {_fmt(tg):>9} "
                  f"{_fmt(rg / tg if rg and tg else None, 2):>7} {_fmt(db_ref) + '/' + _fmt(db_tri):>17} {mark:>6} "
                  f"{_fmt(single_ref) + '/' + _fmt(single_tri):>17}"
                  + (f"  graph: {tri['graph_raised'] or ref['graph_raised']}" if not (rg and tg) else "")
                  + (f"  refused: {str(tri['raised'])[:300]}" if tri["raised"] else ""))
    if cuda:
        print(f"op bench graph figure vs triton.testing.do_bench_cudagraph: {compared - disagreements}/{compared} within "
              f"{AGREEMENT:.0%}; rig files under {run_dir}")
        return 1 if disagreements else 0
    print(f"rig files under {run_dir}")
    return 0


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


if __name__ == "__main__":
    sys.exit(main())
