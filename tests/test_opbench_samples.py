"""An op bench line holds what the rig timed: as many figures as its ``rig.json`` says it took per trial,
and no more time in all than the rig ran. Forgeries of the recorded rig ``rec-harness-clean`` (an honest
1.10x rmsnorm, 20 per-call samples per trial, a 2.9 s rig): padding the candidate with fast samples, or
stretching the reference's, is corrupt evidence (FAIL), not a speedup. Answers from design §3 (a number
the rig did not measure is not evidence), written before the rule."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from perfwarden.auditor.audit import audit_path
from perfwarden.orchestrator.synth import build_ab_run, write_claim, write_jsonl

FIXTURE = Path(__file__).parents[1] / "proof" / "fixtures" / "rec-harness-clean" / "run"
BENCH = Path("opbench") / "rmsnorm" / "opbench.jsonl"
RIG = Path("opbench") / "rmsnorm" / "rig.json"
CANDIDATE = "/work/main/harness/ops/rmsnorm_alt.py:rmsnorm"


@pytest.fixture
def run(tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(FIXTURE, out)
    return out


def edit_rows(run: Path, fn) -> None:
    path = run / BENCH
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(fn(row)) + "\n" for row in rows))


def edit_rig(run: Path, **changes) -> None:
    path = run / RIG
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def verdict(run: Path):
    return audit_path(run, run / "claims" / "001-harness.json")


def corrupt(v) -> list[str]:
    return [f.message for f in v.findings if f.code == "EVIDENCE_CORRUPT" and f.severity == "FAIL"]


def test_the_recorded_rig_passes(run):
    v = verdict(run)
    assert v.verdict == "PASS", [f.message for f in v.findings]


def test_a_candidate_padded_with_fast_samples_is_corrupt(run):
    """A thousand copies of the candidate's fastest call appended to each of its trials: its median drops,
    and nothing but the rig's stated iterations says those calls never ran."""
    edit_rows(run, lambda r: {**r, "times_ms": r["times_ms"] + [min(r["times_ms"])] * 1000}
              if r["backend"] == CANDIDATE else r)
    v = verdict(run)
    assert v.verdict == "FAIL" and corrupt(v), [f.message for f in v.findings]
    assert any("1020" in m and "20" in m for m in corrupt(v))


def test_a_reference_stretched_past_the_rigs_run_is_corrupt(run):
    """The reference's calls made 5,000 times slower, their count kept: the candidate's speedup soars, and
    the reference's 120 calls alone now take about 7 s, longer than the whole rig ran (2.9 s). (At 1,000
    times they add to 1.4 s, inside the rig's run: that one is left to the plausibility bound, a FLAG.)"""
    edit_rows(run, lambda r: {**r, "times_ms": [t * 5000 for t in r["times_ms"]]}
              if r["backend"] == "reference" else r)
    v = verdict(run)
    assert v.verdict == "FAIL" and corrupt(v), [f.message for f in v.findings]


def test_the_rigs_iterations_restated_with_the_padding_still_exceed_its_run(run):
    """The coherent variant: every line padded to 40,020 figures of its own median and the rig's ``iters``
    restated to match; the figures then add to about 5.8 s, more than the rig's run (2.9 s)."""
    def pad(r):
        med = sorted(r["times_ms"])[len(r["times_ms"]) // 2]
        return {**r, "times_ms": r["times_ms"] + [med] * 40000}
    edit_rows(run, pad)
    edit_rig(run, iters=40020)
    v = verdict(run)
    assert v.verdict == "FAIL" and corrupt(v), [f.message for f in v.findings]


def test_a_rig_that_states_no_iterations_is_not_taken_on_trust(run):
    path = run / RIG
    rig = json.loads(path.read_text())
    del rig["iters"]
    path.write_text(json.dumps(rig))
    v = verdict(run)
    assert v.verdict != "PASS"


# ------------------------------------------------------------------ a rig timed by the parent's clock

PARENT_ITERS = 30


def parent_clock_run(tmp_path: Path, claimed: float = 2.0) -> Path:
    """A clean harness claim as the harness writes one now: each line one figure a trial by the parent's
    clock (the per-call time of 30 calls), the rows and ``rig.json`` both naming that clock, the rig's
    ``duration_s`` the time of those calls (warm-up included), a 2x candidate (``claimed``: the speedup its
    claim states)."""
    run = tmp_path / "parent"
    build_ab_run(run)
    write_jsonl(run / "profile" / "profile.jsonl", [
        {"name": "rmsnorm", "op": "rmsnorm", "self_time_us": 3000.0, "count": 100, "shapes": [[16, 576]]},
        {"name": "aten::linear", "op": "linear", "self_time_us": 9000.0, "count": 300, "shapes": [[16, 576]]}])
    rows = [{"op": "rmsnorm", "backend": backend, "shape": [16, 576], "trial": t, "dtype": "float32",
             "times_ms": [ms * (1.0, 1.01, 0.99)[t]], "warmup_discarded": 3, "fresh_inputs": True, "correct": True,
             "max_abs_err": 1e-7, "max_rel_err": 1e-7, "dispatch": "eager", "seed": t, "is_reference": ref,
             "impl_sha256": backend, "measured": True, "timing_method": "parent_clock"}
            for backend, ms, ref in (("torch_ref", 2.0, True), ("fused", 1.0, False)) for t in range(3)]
    write_jsonl(run / BENCH, rows)
    calls_ms = sum(r["times_ms"][0] * (PARENT_ITERS + 3) for r in rows)
    (run / RIG).write_text(json.dumps({
        "op": "rmsnorm", "dtype": "float32", "trials": 3, "seeds": [0, 1, 2], "iters": PARENT_ITERS, "warmup": 3,
        "timing_method": "parent_clock", "timing": {"clock": "parent"}, "duration_s": math.ceil(calls_ms) / 1e3}))
    path = BENCH.as_posix()
    write_claim(run, {"scope": "harness", "seq": 5, "op": "rmsnorm", "opbench": path, "legs": {"baseline": "base"},
                      "isolated_speedup": {"value": claimed, "op": "rmsnorm", "opbench": path,
                                           "baseline_backend": "torch_ref", "candidate_backend": "fused"}})
    return run


def parent_verdict(run: Path):
    return audit_path(run, run / "claims" / "005-harness.json")


def test_a_parent_clock_rig_passes(tmp_path):
    v = parent_verdict(parent_clock_run(tmp_path))
    assert v.verdict == "PASS", [f.message for f in v.findings]


def test_a_rig_stripped_of_its_clock_is_still_read_by_the_clock_its_lines_name(tmp_path):
    """The coherent padding of a parent-clock rig: ``rig.json``'s clock statements deleted, so that a line
    would hold ``iters`` per-call figures, and every line padded to 30 -- the reference with its own
    figure, the candidate with a third of its own (a 6x speedup). Counts and time then fit a per-call rig;
    the lines themselves still say the parent's clock timed them, one figure a trial. The claim states 6x."""
    run = parent_clock_run(tmp_path, claimed=6.0)
    rig = json.loads((run / RIG).read_text())
    del rig["timing"], rig["timing_method"]
    (run / RIG).write_text(json.dumps(rig))
    edit_rows(run, lambda r: {**r, "times_ms": r["times_ms"] * PARENT_ITERS if r["is_reference"]
                              else [r["times_ms"][0] / 3] * PARENT_ITERS})
    v = parent_verdict(run)
    assert v.verdict == "FAIL" and corrupt(v), [f.message for f in v.findings]


# ------------------------------------------------------- every witness moved at once, in a sealed run


def test_a_sealed_op_bench_forged_coherently_is_tampered_evidence(tmp_path, monkeypatch):
    """The forger moves every witness the rule reads together: the candidate padded with copies of its
    fastest figure, ``iters`` restated to the padded count, ``duration_s`` stretched to hold it, and every
    clock statement (rig.json's and each line's) turned to per-call timing. Nothing inside the op bench's
    files disagrees any more; the harness sealed them, so the seal does (FAIL, never banked). Without a seal
    the same files are foreign evidence, at best PASS (unsealed), which the graph refuses to bank."""
    from perfwarden.orchestrator.runner import run_graph
    from perfwarden.orchestrator.settings import RunSettings
    from perfwarden.orchestrator.simlab import SyntheticLab

    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path / "keys"))
    run = tmp_path / "run"
    run_graph(run, RunSettings(target="synthetic", levers=[]), SyntheticLab(), capture_logs=False)
    claim = next((run / "claims").glob("*-harness.json"))
    assert audit_path(run, claim).verdict == "PASS"  # the honest simulated rig
    bench = next((run / "opbench").glob("*/opbench.jsonl"))
    rig_path = bench.parent / "rig.json"
    rig = json.loads(rig_path.read_text())
    rows = [json.loads(line) for line in bench.read_text().splitlines() if line.strip()]
    pad = rig["iters"] * 4
    bench.write_text("".join(json.dumps({**r, "timing_method": "per_call",
                                         "times_ms": r["times_ms"] + [min(r["times_ms"])] * pad}) + "\n"
                             for r in rows))
    rig_path.write_text(json.dumps({**rig, "iters": len(rows[0]["times_ms"]) + pad, "timing_method": "per_call",
                                    "timing": {}, "duration_s": rig["duration_s"] * 100}))
    v = audit_path(run, claim)
    assert v.verdict == "FAIL" and "EVIDENCE_TAMPERED" in {f.code for f in v.findings}, \
        [f.message for f in v.findings]
