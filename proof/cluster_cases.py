"""Cluster fixtures: A/B steps measured on cluster nodes.

Every case's answer is in the CASES table below, written from the design's rules before the auditor ran
on any of them:

- **hardware is a condition**: each leg's ``server_info.json`` records the node it ran on
  (harness/node_identity.py, under ``node``); two legs of one A/B on different nodes differ in an
  undeclared condition (CONDITIONS_DIFFER, FAIL eject). Both legs on one node: nothing differs (PASS).
- **the seal across nodes**: a worker's evidence is streamed to the head and sealed there
  (formats/seal_stream.py); the fixtures are written through that path (a worker scratch run whose
  writes stream to an ``EvidenceSink`` on the head run, key beside the head run). A worker that then
  edits a streamed line in the head's run (a shared file system) changes sealed evidence
  (EVIDENCE_TAMPERED, FAIL eject); one that edits only its own scratch copy changes nothing the head
  sealed (PASS).

    python -m perfwarden.proof.cluster_cases [--out proof/fixtures]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from perfwarden.formats import seal
from perfwarden.formats.seal_stream import EvidenceSink, StreamChain
from perfwarden.orchestrator.synth import BASE_INFO, build_ab_run
from perfwarden.proof.seal_cases import SEAL_CODES, _answer, _fresh, _sealed

NODE_A = {"host_id": "5f0c0a7e51f54b1c9a0e3d2b1c4d5e6f", "ray_node_id": "a1" * 28, "cpu_model": "AMD EPYC 9654",
          "cpu_cores": 192, "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_uuid": "GPU-0b6e2c1a-3f7d-4e2a-9c1b-5d8e7f6a4b3c",
          "driver": "550.54.15", "engine_version": "0.1.0"}
NODE_B = {**NODE_A, "host_id": "9d8c7b6a5f4e4d3c8b2a1f0e9d8c7b6a", "ray_node_id": "b2" * 28,
          "gpu_name": "NVIDIA H200", "gpu_uuid": "GPU-7c5d3e2f-1a9b-4c8d-8e7f-6a5b4c3d2e1f"}
CAND_INFO = {**BASE_INFO, "max_batch_size": 8, "port": 8101}


def legs_on_two_nodes(fixture: Path) -> Path:
    """Baseline leg measured on node A, candidate on node B (another host, another GPU)."""
    run = _sealed(fixture, "cluster-two-nodes")
    claim = build_ab_run(run, base_info={**BASE_INFO, "node": NODE_A}, cand_info={**CAND_INFO, "node": NODE_B})
    seal.forget(run)
    return claim


def legs_on_one_node(fixture: Path) -> Path:
    """Near miss: both legs on node A, as the cluster schedules them."""
    run = _sealed(fixture, "cluster-one-node")
    claim = build_ab_run(run, base_info={**BASE_INFO, "node": NODE_A}, cand_info={**CAND_INFO, "node": NODE_A})
    seal.forget(run)
    return claim


def _streamed(fixture: Path, run_id: str, after: Callable[[Path, Path], None]) -> Path:
    """The A/B measured by a worker: written into the worker's scratch run, every write streamed to the
    head's sink and sealed there; ``after(head_run, scratch)`` is what the worker does afterwards. The
    claim (a producer's file, on the head) is copied into the head run."""
    run = _sealed(fixture, run_id)
    sink = EvidenceSink(run)
    scratch = Path(tempfile.mkdtemp(prefix="pw-worker-"))
    try:
        seal.attach(scratch, StreamChain(scratch, sink.receive))
        claim = build_ab_run(scratch, base_info={**BASE_INFO, "node": NODE_A}, cand_info={**CAND_INFO, "node": NODE_A})
        seal.forget(scratch)
        (run / "claims").mkdir(exist_ok=True)
        head_claim = run / "claims" / claim.name
        head_claim.write_bytes(claim.read_bytes())
        after(run, scratch)
    finally:
        seal.forget(run)
        shutil.rmtree(scratch, ignore_errors=True)
    return head_claim


def _raise_rep(bench: Path) -> None:
    """Rewrite the first rep's throughput 15% higher, the line still valid JSON."""
    lines = bench.read_text("utf-8").splitlines()
    rep = json.loads(lines[0])
    rep["output_throughput"] = round(rep["output_throughput"] * 1.15, 3)
    lines[0] = json.dumps(rep)
    bench.write_text("\n".join(lines) + "\n", "utf-8")


def worker_edits_head_after_stream(fixture: Path) -> Path:
    return _streamed(fixture, "cluster-tampered", lambda run, scratch: _raise_rep(run / "legs/cand/bench_runs.jsonl"))


def worker_edits_scratch_after_stream(fixture: Path) -> Path:
    return _streamed(fixture, "cluster-scratch-edit",
                     lambda run, scratch: _raise_rep(scratch / "legs/cand/bench_runs.jsonl"))


# name -> (builder(fixture) -> claim path, verdict, action, must_include, must_exclude, must_note, why)
CASES: dict[str, tuple[Callable[[Path], Path], str, str, list[str], list[str], list[str], str]] = {
    "cluster-legs-on-two-nodes": (
        legs_on_two_nodes, "FAIL", "eject", ["CONDITIONS_DIFFER"], ["EVIDENCE_TAMPERED"], [],
        "The baseline leg ran on one node (an H100 host) and the candidate on another (an H200 host): both "
        "legs' server_info.json record the node, and the node is a condition like any knob. The A/B "
        "measured two machines, not the declared change: an undeclared difference, FAIL eject."),
    "cluster-legs-on-one-node": (
        legs_on_one_node, "PASS", "pass", [], ["CONDITIONS_DIFFER", *SEAL_CODES], [],
        "Near miss: both legs on the same node (as the cluster schedules one step), identical node "
        "identity; the declared 10% class-B win stands."),
    "cluster-worker-edit-after-stream": (
        worker_edits_head_after_stream, "FAIL", "eject", ["EVIDENCE_TAMPERED"], [], [],
        "A worker streamed its legs to the head, which sealed each write as it arrived; afterwards the "
        "worker rewrote a candidate rep 15% faster in the head's run (a shared file system). The line is "
        "not what was sealed: tampered evidence, FAIL eject."),
    "cluster-worker-edit-scratch": (
        worker_edits_scratch_after_stream, "PASS", "pass", [], [*SEAL_CODES, "CONDITIONS_DIFFER"], [],
        "Near miss: the worker edited only its own scratch copy after streaming; the head's evidence is "
        "exactly what was sealed as it arrived, so the clean win stands."),
}


def build_all(out: Path) -> list[str]:
    built = []
    for name, (builder, verdict, action, include, exclude, note, why) in CASES.items():
        fixture = out / name
        _fresh(fixture)
        claim = builder(fixture)
        _answer(fixture, claim, verdict, action, include, exclude, note, why,
                "hand-built by proof/cluster_cases.py through the harness's sealed writers; the streamed cases "
                "through formats/seal_stream.py (a worker scratch run streaming to the head's sink)",
                frozen="2026-11-26")
        built.append(name)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "fixtures")
    args = parser.parse_args()
    print("\n".join(build_all(args.out)))


if __name__ == "__main__":
    main()
