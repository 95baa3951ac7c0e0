"""The harness gate on GPU rigs: the figure that counts is the one of the dispatch path the server runs.

The fixtures in proof/fixtures/gpu-* carry the main cases with frozen answers; these tests pin the
attacks around them that a fixture table would not show."""

from __future__ import annotations

from pathlib import Path

from perfwarden.auditor.audit import audit_path
from perfwarden.proof import gpu_cases
from perfwarden.proof.synth import write_jsonl


def _audit(tmp_path: Path, server_info: dict, rows: list[dict], claimed: float):
    run = tmp_path / "run"
    gpu_cases._harness_case(run, server_info, rows, claimed)
    return audit_path(run, run / "claims" / "001-harness.json")


def _codes(verdict) -> set[str]:
    return {f.code for f in verdict.findings if f.severity != "INFO"}


def test_graph_server_speedup_comes_from_the_graph_figures(tmp_path):
    verdict = _audit(tmp_path, gpu_cases.GPU_INFO, gpu_cases.launch_bound_rig(), 2.0)
    assert verdict.verdict == "PASS"
    assert abs(verdict.headline_rederived - 2.0) < 0.05


def test_eager_server_speedup_comes_from_the_call_figures(tmp_path):
    verdict = _audit(tmp_path, gpu_cases.EAGER_INFO, gpu_cases.launch_bound_rig(), 0.75)
    assert abs(verdict.headline_rederived - 0.75) < 0.02
    assert "HARNESS_DISPATCH_MISMATCH" not in _codes(verdict)


def test_rows_that_say_graph_replay_without_graph_figures_derive_nothing(tmp_path):
    """Attack: relabel call-by-call rows as graph replay so a graph server's check passes on figures that
    were never taken in a graph. No graph figure, no speedup: evidence missing, never a silent PASS."""
    rows = gpu_cases.launch_bound_rig()
    for row in rows:
        row["dispatch"], row["graph_times_ms"] = "graph_replay", None
    verdict = _audit(tmp_path, gpu_cases.GPU_INFO, rows, 2.0)
    assert verdict.verdict == "FAIL" and "EVIDENCE_MISSING" in _codes(verdict)
    assert verdict.headline_rederived is None


def test_rows_without_a_device_are_cpu_rows(tmp_path):
    """Attack: drop the device field so a CPU rig looks device-neutral to a CUDA server."""
    rows = gpu_cases.launch_bound_rig()
    for row in rows:
        row.pop("device")
    verdict = _audit(tmp_path, gpu_cases.GPU_INFO, rows, 2.0)
    assert verdict.verdict == "FAIL" and "HARNESS_DISPATCH_MISMATCH" in _codes(verdict)


def test_warm_l2_on_the_reference_only_is_also_bad_timing(tmp_path):
    """A warm reference makes the candidate look slower or faster depending on the op: either way the
    comparison is not the served one."""
    rows = gpu_cases._rows("torch_ref", 0.0100, 0.0080, ref=True, l2_flushed=False) + gpu_cases._rows(
        "triton_fused", 0.0050, 0.0040)
    verdict = _audit(tmp_path, gpu_cases.GPU_INFO, rows, 2.0)
    assert "HARNESS_INCORRECT" in _codes(verdict)
