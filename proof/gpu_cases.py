"""Hand-built GPU op-bench rigs: the traps an auditor on a GPU must get right.

On a GPU the same kernel has two honest timings: replayed inside a CUDA graph (the kernel itself, what a
CUDA-graph server pays) and launched call by call (launch overhead included, what an eager server pays).
A small elementwise kernel can be 2x faster in a graph and 0.75x call by call, so the figure that counts
is the one of the dispatch path the server runs. These cases pin that rule, the device the rig ran on,
cache-warm timing and a kernel that cannot be captured. Answers are written in ``CASES`` from the
design's rules (§4 harness scope) before the auditor ran on them.

    python -m perfwarden.proof.gpu_cases [--out proof/fixtures]
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

from perfwarden.formats.records import write_json_atomic
from perfwarden.orchestrator.synth import BASE_INFO, build_ab_run, fixture_builder_main, write_claim, write_jsonl

OP = "rmsnorm"
SHAPE = [16, 576]
GPU_INFO = {**BASE_INFO, "device": "cuda", "dtype": "bfloat16", "disable_cuda_graph": False}
"""A CUDA-graph server (sglang's default: graphs replayed for decode batches)."""
EAGER_INFO = {**GPU_INFO, "disable_cuda_graph": True}
"""The same server launched with ``--disable-cuda-graph``: every kernel is launched call by call."""


def _rows(backend: str, call_ms: float, graph_ms: float | None, *, ref: bool = False, device: str = "cuda",
          l2_flushed: bool = True, graph_raised: str | None = None) -> list[dict[str, Any]]:
    """Three seeds of one backend at the served shape, timed call by call and (unless it raised) in a
    CUDA graph, as ``harness/opbench`` writes them on a GPU."""
    rows = []
    for trial, seed in enumerate((0, 1, 2)):
        rows.append({
            "op": OP, "backend": backend, "shape": SHAPE, "trial": trial, "dtype": "bfloat16",
            "times_ms": [call_ms * (1 + 0.01 * i) for i in range(5)],
            "graph_times_ms": None if graph_ms is None else [graph_ms * (1 + 0.01 * i) for i in range(5)],
            "graph_raised": graph_raised, "warmup_discarded": 3, "fresh_inputs": True, "l2_flushed": l2_flushed,
            "correct": True, "max_abs_err": 1e-3, "max_rel_err": 1e-3, "dispatch": "eager", "seed": seed,
            "is_reference": ref, "impl_sha256": f"sha-{backend}", "device": device,
            "timing_method": "cuda_events" if device == "cuda" else "host_clock", "measured": True})
    return rows


def launch_bound_rig(**cand: Any) -> list[dict[str, Any]]:
    """Reference 10 us call by call / 8 us in a graph; Triton candidate 13.3 us / 4 us: 2x in a graph,
    0.75x call by call (launch overhead decides)."""
    return _rows("torch_ref", 0.0100, 0.0080, ref=True) + _rows("triton_fused", 0.01333, 0.0040, **cand)


def _harness_case(run: Path, server_info: dict, rows: list[dict], claimed: float) -> None:
    build_ab_run(run, base_info=server_info, cand_info={**server_info, "port": 8101})
    (run / "claims" / "001-patch.json").unlink()
    write_jsonl(run / "profile" / "profile.jsonl", [
        {"name": "rmsnorm_kernel", "op": OP, "self_time_us": 3000.0, "count": 100, "shapes": [SHAPE], "device": "cuda"},
        {"name": "gemm", "op": "linear", "self_time_us": 9000.0, "count": 300, "shapes": [SHAPE], "device": "cuda"}])
    path = f"opbench/{OP}/opbench.jsonl"
    write_jsonl(run / path, rows)
    write_claim(run, {"scope": "harness", "seq": 1, "op": OP, "opbench": path, "legs": {"baseline": "base"},
                      "isolated_speedup": {"value": claimed, "op": OP, "opbench": path,
                                           "baseline_backend": "torch_ref", "candidate_backend": "triton_fused"}})


Build = Callable[[Path], None]
CASES: dict[str, tuple[Build, str, str, list[str], list[str], str]] = {
    "gpu-launch-bound-eager-server": (
        lambda r: _harness_case(r, EAGER_INFO, launch_bound_rig(), 2.0),
        "FAIL", "redo_harness", ["HARNESS_DISPATCH_MISMATCH"], ["HARNESS_SELF_COMPARE", "HARNESS_INCORRECT"],
        "The server runs with CUDA graphs disabled, so it pays the call-by-call figure, where the candidate is "
        "0.75x; the claimed 2x is the CUDA-graph figure of a path the server does not run."),
    "gpu-graph-server-clean": (
        lambda r: _harness_case(r, GPU_INFO, launch_bound_rig(), 2.0),
        "PASS", "pass", [], ["HARNESS_DISPATCH_MISMATCH", "HARNESS_INCORRECT", "HARNESS_SELF_COMPARE",
                             "REPORTED_MISMATCH", "EVIDENCE_MISSING"],
        "Near miss of the launch-bound trap: the server replays CUDA graphs, so the graph figure (2x) is the "
        "one it pays, and the claim states it."),
    "gpu-warm-l2": (
        lambda r: _harness_case(r, GPU_INFO, _rows("torch_ref", 0.0100, 0.0080, ref=True)
                                + _rows("triton_fused", 0.0060, 0.0040, l2_flushed=False), 2.0),
        "FAIL", "redo_harness", ["HARNESS_INCORRECT"], ["HARNESS_DISPATCH_MISMATCH"],
        "The candidate was timed on a GPU without flushing the L2 between calls: its inputs stay cache-resident "
        "across iterations, which a server's fresh activations never are."),
    "gpu-rig-on-cpu": (
        lambda r: _harness_case(r, GPU_INFO, _rows("torch_ref", 0.20, None, ref=True, device="cpu")
                                + _rows("triton_fused", 0.10, None, device="cpu"), 2.0),
        "FAIL", "redo_harness", ["HARNESS_DISPATCH_MISMATCH"], [],
        "The server serves on CUDA; the rig timed both backends on the CPU, which says nothing about the GPU."),
    "gpu-graph-capture-failed": (
        lambda r: _harness_case(r, GPU_INFO, _rows("torch_ref", 0.0100, 0.0080, ref=True)
                                + _rows("triton_fused", 0.0050, None, graph_raised="RuntimeError: operation not "
                                        "permitted when stream is capturing"), 2.0),
        "FAIL", "redo_harness", ["HARNESS_INCORRECT"], [],
        "The server replays CUDA graphs and the candidate could not be captured in one: it would break graph "
        "serving, and its call-by-call 2x is not what the server would pay."),
}


def build_all(out: Path) -> list[str]:
    built = []
    for name, (build, verdict, action, include, exclude, rationale) in CASES.items():
        dest = Path(out) / name
        if dest.exists():
            shutil.rmtree(dest)
        build(dest / "run")
        write_json_atomic(dest / "answer_key.json", {
            "schema_version": 1, "frozen": "2026-11-23",
            "answers": [{"claim": "claims/001-harness.json", "verdict": verdict, "action": action,
                         "must_include": include, "must_exclude": exclude}],
            "provenance": "hand-built by proof/gpu_cases.py (synthetic GPU op-bench rows in the format "
                          "harness/opbench writes on CUDA)",
            "rationale": rationale})
        built.append(name)
    return built


if __name__ == "__main__":
    fixture_builder_main(__doc__, build_all, Path(__file__).resolve().parent / "fixtures")
