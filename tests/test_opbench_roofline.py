"""The plausibility bound of an isolated speedup comes from the rig's memory roofline (issue 17 §7): the op's
bytes moved and the rig's measured bandwidth in ``rig.json``, not a fixed 10x. A candidate timed under what
that bandwidth allows is implausible; a large speedup the roofline allows is not; a rig that should carry
the figure and does not fails closed (FLAG)."""

from __future__ import annotations

import json
import math

from pathlib import Path

from perfwarden.auditor.gates import opbench
from perfwarden.formats.jsonl import read_jsonl, OpBenchLine
from perfwarden.orchestrator.synth import write_claim, write_jsonl

from auditor_cases import audit, build, codes

SHAPE = (16, 576)
BYTES = 2 * 16 * 576 * 4 + 576 * 4  # x in, out, weight: the op's compulsory traffic at float32


def _rows(backend: str, ms: float, ref: bool = False) -> list[dict]:
    return [{"op": "rmsnorm", "backend": backend, "shape": list(SHAPE), "trial": t, "dtype": "float32",
             "times_ms": [ms * (1 + 0.01 * i) for i in range(5)], "warmup_discarded": 3, "fresh_inputs": True,
             "correct": True, "max_abs_err": 1e-7, "max_rel_err": 1e-7, "dispatch": "eager", "seed": s,
             "is_reference": ref, "impl_sha256": backend} for t, s in enumerate((0, 1, 2))]


def _rig(rows: list[dict]) -> dict:
    """``rig.json`` as a harness that timed call by call writes it: ``iters`` calls a trial, one figure each (no
    parent's clock), and a ``duration_s`` that is the time of the calls the rows stand for (warm-up ones at the
    line's mean), rounded up to the millisecond and nothing added."""
    iters, warmup = len(rows[0]["times_ms"]), rows[0]["warmup_discarded"]
    calls_ms = sum(sum(r["times_ms"]) * (iters + warmup) / iters for r in rows)
    return {"op": "rmsnorm", "dtype": "float32", "trials": len({r["trial"] for r in rows}),
            "seeds": sorted({r["seed"] for r in rows}), "iters": iters, "warmup": warmup,
            "duration_s": math.ceil(calls_ms) / 1e3}


def _case(run: Path, ref_ms: float, cand_ms: float, roofline: dict | None) -> Path:
    build(run)
    write_jsonl(run / "profile" / "profile.jsonl", [
        {"name": "rmsnorm", "op": "rmsnorm", "self_time_us": 3000.0, "count": 100, "shapes": [list(SHAPE)]},
        {"name": "aten::linear", "op": "linear", "self_time_us": 9000.0, "count": 300, "shapes": [list(SHAPE)]}])
    rows = _rows("torch_ref", ref_ms, True) + _rows("fused", cand_ms)
    write_jsonl(run / "opbench" / "rmsnorm" / "opbench.jsonl", rows)
    rig = _rig(rows)
    if roofline is not None:
        rig["roofline"] = roofline
    (run / "opbench" / "rmsnorm" / "rig.json").write_text(json.dumps(rig), encoding="utf-8")
    path = "opbench/rmsnorm/opbench.jsonl"
    return write_claim(run, {"scope": "harness", "seq": 5, "op": "rmsnorm", "opbench": path, "legs": {"baseline": "base"},
                             "isolated_speedup": {"value": round(ref_ms / cand_ms, 3), "op": "rmsnorm", "opbench": path,
                                                  "baseline_backend": "torch_ref", "candidate_backend": "fused"}})


def _roof(floor_ms: float, nbytes: int = BYTES) -> dict:
    return {"16x576": {"bytes_moved": nbytes, "floor_ms": floor_ms, "bandwidth_gb_s": nbytes / floor_ms / 1e6}}


def test_a_speedup_under_ten_that_needs_more_than_the_rigs_bandwidth_is_implausible(tmp_path):
    # 3x, but the candidate's 0.004 ms is under half the 0.01 ms this rig needs to move the bytes.
    v = audit(tmp_path, _case(tmp_path, 0.012, 0.004, _roof(0.01)))
    assert v.verdict == "FLAG" and "IMPLAUSIBLE_SPEEDUP" in codes(v), [f.message for f in v.findings]
    f = next(f for f in v.findings if f.code == "IMPLAUSIBLE_SPEEDUP")
    assert f.threshold["max_plausible_speedup"] == round(0.012 * 1.02 / (0.5 * 0.01), 3)  # median ref / half the floor


def test_a_large_speedup_the_roofline_allows_passes(tmp_path):
    # 20x of a slow reference, the candidate still above the floor: the bandwidth allows it.
    v = audit(tmp_path, _case(tmp_path, 2.0, 0.1, _roof(0.05)))
    assert v.verdict == "PASS", [f.message for f in v.findings]


def test_a_roofline_without_the_benched_shape_fails_closed(tmp_path):
    roof = {"32x576": _roof(0.01)["16x576"]}
    v = audit(tmp_path, _case(tmp_path, 2.0, 1.0, roof))
    assert v.verdict == "FLAG" and "EVIDENCE_MISSING" in codes(v), [f.message for f in v.findings]


def test_bytes_moved_shrunk_below_the_shapes_own_traffic_is_no_floor(tmp_path):
    # A figure a tenth of the shape's own input and output would admit any time: refused, FLAG.
    v = audit(tmp_path, _case(tmp_path, 2.0, 1.0, _roof(0.0001, nbytes=BYTES // 10)))
    assert v.verdict == "FLAG" and "EVIDENCE_MISSING" in codes(v), [f.message for f in v.findings]


def test_a_non_numeric_bandwidth_is_no_figure(tmp_path):
    roof = {"16x576": {"bytes_moved": BYTES, "bandwidth_gb_s": "fast"}}
    v = audit(tmp_path, _case(tmp_path, 2.0, 1.0, roof))
    assert v.verdict == "FLAG" and "EVIDENCE_MISSING" in codes(v)


def test_a_rig_that_recorded_no_roofline_keeps_the_fixed_ceiling_and_says_so(tmp_path):
    v = audit(tmp_path, _case(tmp_path, 2.0, 1.0, None))
    assert v.verdict == "PASS" and any("roofline" in n for n in v.not_checked)
    v = audit(tmp_path, _case(tmp_path, 20.0, 1.0, None))
    assert v.verdict == "FLAG" and "IMPLAUSIBLE_SPEEDUP" in codes(v)


def test_a_sealed_run_without_the_figure_fails_closed(tmp_path):
    _case(tmp_path, 2.0, 1.0, None)
    rows = read_jsonl(tmp_path / "opbench" / "rmsnorm" / "opbench.jsonl", OpBenchLine, cite=True).records
    res = opbench.audit_rig(tmp_path, rows, "torch_ref", "fused", None, None, "rmsnorm",
                            rig=opbench.RigFigures(required=True))
    assert {(f.code, f.severity) for f in res.findings} == {("EVIDENCE_MISSING", "FLAG")}
