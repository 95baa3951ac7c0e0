"""Op benchmarks on real torch ops: correctness over seeds, fresh-input timing, sandboxed candidates, and
the real auditor over the rig's own output.

One rig runs once per module (a handful of worker processes at a small shape, few iterations) with the
reference RMSNorm, a correct alternative, a subtly wrong one (eps outside the sqrt), a self-copy of the
reference, a candidate that hangs, one that raises (after printing fake protocol lines and probing its
sandbox), and a Triton kernel. Each test reads what the rig wrote, as the auditor would.
"""

from __future__ import annotations

import importlib.util
import json
import resource
import socket
import textwrap
from pathlib import Path

import msgspec
import pytest

pytest.importorskip("torch")

from perfwarden.auditor.audit import audit_path  # noqa: E402
from perfwarden.formats.jsonl import OpBenchLine, read_jsonl  # noqa: E402
from perfwarden.harness import opbench as ob  # noqa: E402
from perfwarden.harness.ops.alternatives import for_op  # noqa: E402
from perfwarden.orchestrator.synth import write_claim, write_jsonl  # noqa: E402

from auditor_cases import build  # noqa: E402

SHAPE = [8, 64]
TRIALS, ITERS, WARMUP = 3, 8, 2
HANG_TIMEOUT_S = 4.0
ALT = {a.kind: a for a in for_op("rmsnorm")}


def _write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.fixture(scope="module")
def listener():
    """A TCP listener the raising candidate tries to reach: it must not get through."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory, listener):
    run = tmp_path_factory.mktemp("run")
    cands = tmp_path_factory.mktemp("candidates")
    specs = {
        "vecnorm": ALT["alternative"].spec,
        "hang": _write(cands / "hang.py", """
            def rmsnorm(hidden_states, weight, eps):
                while True:
                    pass
            """) + ":rmsnorm",
        "eps_outside": ALT["wrong"].spec,
        "selfcopy": ALT["self_copy"].spec,
        "raiser": _write(cands / "raiser.py", f"""
            import json, os, resource, socket
            print('@@opbench {{"ready": true}}')            # fake protocol lines go to the log
            print('@@opbench {{"times_ms": [0.000001]}}')
            try:
                socket.create_connection(("127.0.0.1", {listener}), timeout=1).close()
                net = "connected"
            except Exception as exc:
                net = type(exc).__name__
            with open("probe.json", "w") as f:
                json.dump({{"env": sorted(os.environ), "cwd": os.getcwd(), "net": net,
                           "as": resource.getrlimit(resource.RLIMIT_AS),
                           "cpu": resource.getrlimit(resource.RLIMIT_CPU)}}, f)

            def rmsnorm(hidden_states, weight, eps):
                raise RuntimeError("boom")
            """) + ":rmsnorm",
        # The implementation runs in the worker's process: it can replace the worker's torch.save and
        # hand back a FIFO (the parent must not block on it) or a link out (never followed).
        "fifo": _write(cands / "fifo.py", """
            import os, torch
            torch.save = lambda obj, path: os.mkfifo(path)

            def rmsnorm(hidden_states, weight, eps):
                return weight * (hidden_states * torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + eps))
            """) + ":rmsnorm",
        "link": _write(cands / "link.py", """
            import os, torch
            torch.save = lambda obj, path: os.symlink("/proc/self/environ", path)

            def rmsnorm(hidden_states, weight, eps):
                return hidden_states * weight
            """) + ":rmsnorm",
        "triton_kernel": _write(cands / "triton_kernel.py", """
            import triton
            import triton.language as tl

            def rmsnorm(hidden_states, weight, eps):
                raise NotImplementedError
            """) + ":rmsnorm",
    }
    path = ob.run_opbench(run, "rmsnorm", specs, [SHAPE], "float32", seeds=(0, 1, 2), trials=TRIALS, iters=ITERS,
                          warmup=WARMUP, threads=1, timeout_s=HANG_TIMEOUT_S, mem_limit_mb=4096)
    report = read_jsonl(path, OpBenchLine)
    assert not report.issues, report.issues
    rows: dict[str, list[OpBenchLine]] = {}
    for _, r in report.records:
        rows.setdefault(r.backend, []).append(r)
    return {"run": run, "path": path, "rows": rows, "specs": specs}


# ------------------------------------------------------------------------------------ the raw lines


@pytest.mark.integration
def test_one_line_per_backend_shape_trial_in_the_auditors_format(rig):
    lines = rig["path"].read_bytes().splitlines()
    assert len(lines) == 9 * 1 * TRIALS
    for line in lines:
        raw = json.loads(line)
        assert set(raw) == set(OpBenchLine.__struct_fields__), set(raw) ^ set(OpBenchLine.__struct_fields__)
        msgspec.json.decode(line, type=OpBenchLine)
    ref = rig["rows"]["reference"]
    assert [r.is_reference for rows in rig["rows"].values() for r in rows].count(True) == TRIALS
    assert all(r.is_reference for r in ref)
    assert [r.trial for r in ref] == [0, 1, 2] and [r.seed for r in ref] == [0, 1, 2]
    for r in ref + rig["rows"]["vecnorm"]:
        assert r.measured and len(r.times_ms) == 1 and all(t > 0 for t in r.times_ms)
        assert r.warmup_discarded == WARMUP and r.fresh_inputs is True and r.dispatch == "eager"
        assert r.shape == SHAPE and r.dtype == "float32" and (r.atol, r.rtol) == ob.TOLERANCES["float32"]
        assert r.correct is True and r.raised is None
    assert all(r.max_abs_err == 0.0 for r in ref)  # the worker reproduces the in-process reference exactly
    rig_json = json.loads((rig["path"].parent / "rig.json").read_text())
    assert rig_json["threads"] == 1 and rig_json["iters"] == ITERS and rig_json["shapes"] == [SHAPE]
    assert {"start", "end"} <= set(rig_json["contention"])  # the machine's load, so noise can be judged
    assert [b["backend"] for b in rig_json["backends"]][0] == "reference"


@pytest.mark.integration
def test_correct_alternative_passes_every_seed(rig):
    rows = rig["rows"]["vecnorm"]
    assert {r.seed for r in rows} == {0, 1, 2}
    assert all(r.correct is True and r.max_rel_err <= r.rtol for r in rows)
    assert max(r.max_rel_err for r in rows) > 0  # a different reduction order, not a copy


@pytest.mark.integration
def test_eps_outside_sqrt_is_flagged_incorrect(rig):
    rows = rig["rows"]["eps_outside"]
    # Inputs come from a per-run secret now (issue 17 item 7): how far past the tolerance the error lands
    # depends on the draw (its small-RMS rows), so the rule is 'beyond tolerance', not a fixed 100x of it
    # (100x failed once in CI on one draw).
    assert all(r.correct is False and r.max_rel_err > r.rtol for r in rows), [
        (r.shape, r.correct, r.max_rel_err, r.rtol, r.raised) for r in rows]
    # Wrong at the shapes the secret drew and on the timed calls sampled after the run: refused by the rig.
    assert all(r.refused and r.raised.startswith("refused: ") for r in rows)
    assert all(r.measured for r in rows)  # still timed (the parent's figures are evidence either way)


@pytest.mark.integration
def test_hanging_candidate_is_stopped_and_the_benchmark_goes_on(rig):
    rows = rig["rows"]["hang"]
    assert all(r.raised and "timeout" in r.raised and f"{HANG_TIMEOUT_S:g}s" in r.raised for r in rows)
    assert all(r.correct is False and r.times_ms is None and r.measured is False for r in rows)
    # backends listed after it were still checked and timed
    assert all(r.times_ms for r in rig["rows"]["selfcopy"])


@pytest.mark.integration
def test_raising_candidate_is_recorded_and_cannot_forge_protocol_lines(rig):
    rows = rig["rows"]["raiser"]
    assert all(r.raised == "RuntimeError: boom" and r.correct is False for r in rows)
    assert all(r.times_ms is None and r.measured is False for r in rows)
    work = next((rig["path"].parent / "work").glob("*-raiser"))
    assert "@@opbench" in (work / "worker.stdout.log").read_text()


@pytest.mark.integration
def test_candidates_run_sandboxed(rig):
    work = next((rig["path"].parent / "work").glob("*-raiser"))
    probe = json.loads((work / "probe.json").read_text())
    assert probe["cwd"] == "/sandbox/work"  # its writable directory (probe.json landed in `work`), at a neutral path
    assert probe["net"] != "connected"
    # Memory is bounded from outside (cgroup or RSS watchdog), never by RLIMIT_AS, which CUDA cannot live under.
    assert probe["as"][0] == resource.RLIM_INFINITY
    assert 0 < probe["cpu"][0] <= probe["cpu"][1]
    box = json.loads((rig["path"].parent / "rig.json").read_text())["sandbox"]
    assert box["memory_bytes"] == 4096 << 20 and box["memory"] in ("cgroup_v1", "cgroup_v2", "rss_watchdog")
    assert box["network"].startswith("none") and box["device"] == "cpu"
    leaked = [k for k in probe["env"] if k.startswith(("VIRTUAL_ENV", "PYTEST", "OPENAI", "HF_", "AWS", "GITHUB"))]
    assert not leaked and "HOME" in probe["env"]


@pytest.mark.integration
def test_forged_output_files_are_bad_outputs_not_hangs(rig):
    # The worker saves with the torch.save it bound before the candidate loaded, so the patch no longer
    # reaches the file; the patch itself is seen and refuses the candidate. A FIFO or link made any other
    # way is still a bad output, never followed or blocked on (read_output_file).
    for backend in ("fifo", "link"):
        rows = rig["rows"][backend]
        assert all(r.correct is False for r in rows), backend
        assert all(r.raised.startswith("bad output") or "torch.save" in (r.refused or "") for r in rows), backend


@pytest.mark.integration
def test_self_copy_has_the_references_digest(rig):
    ref, copy, alt = (rig["rows"][b][0].impl_sha256 for b in ("reference", "selfcopy", "vecnorm"))
    assert copy == ref and alt != ref
    assert all(r.correct and r.max_abs_err == 0.0 for r in rig["rows"]["selfcopy"])


@pytest.mark.integration
def test_triton_kernel_is_never_timed_on_cpu(rig):
    rows = rig["rows"]["triton_kernel"]
    assert all(r.times_ms is None and r.measured is False for r in rows)
    if importlib.util.find_spec("triton") is None:
        assert all(r.raised == "triton not installed" and r.correct is None for r in rows)


# --------------------------------------------------------------------------------- the real auditor


def _harness_claim(rig, seq: int, candidate: str, value: float | None = None) -> Path:
    run = rig["run"]
    if not (run / "legs" / "base").is_dir():
        build(run)  # baseline leg: eager server (torch_compile false), threads 2
        write_jsonl(run / "profile" / "profile.jsonl", [
            {"name": "rmsnorm", "op": "rmsnorm", "self_time_us": 3000.0, "count": 100, "shapes": [SHAPE]},
            {"name": "aten::linear", "op": "linear", "self_time_us": 9000.0, "count": 300, "shapes": [SHAPE]}])
    if value is None:
        value = ob.summarize(rig["path"])[candidate]["x".join(map(str, SHAPE))]["speedup"]
    rel = "opbench/rmsnorm/opbench.jsonl"
    return write_claim(run, {"scope": "harness", "seq": seq, "op": "rmsnorm", "opbench": rel,
                             "legs": {"baseline": "base"},
                             "isolated_speedup": {"value": value, "op": "rmsnorm", "opbench": rel,
                                                  "baseline_backend": "reference", "candidate_backend": candidate}})


def _codes(verdict) -> set[str]:
    return {f.code for f in verdict.findings if f.severity != "INFO"}


@pytest.mark.integration
def test_auditor_passes_the_correct_rig(rig):
    v = audit_path(rig["run"], _harness_claim(rig, 11, "vecnorm"))
    assert v.verdict == "PASS", [f.message for f in v.findings]
    assert v.headline_rederived == pytest.approx(
        ob.summarize(rig["path"])["vecnorm"]["8x64"]["speedup"], rel=1e-6)


@pytest.mark.integration
def test_auditor_fails_the_self_comparison(rig):
    v = audit_path(rig["run"], _harness_claim(rig, 12, "selfcopy"))
    assert v.verdict == "FAIL" and v.action == "redo_harness" and "HARNESS_SELF_COMPARE" in _codes(v)


@pytest.mark.integration
def test_auditor_fails_the_wrong_and_the_hanging_candidates(rig):
    for seq, cand in ((13, "eps_outside"), (14, "hang")):
        v = audit_path(rig["run"], _harness_claim(rig, seq, cand, value=1.5))
        assert v.verdict == "FAIL" and "HARNESS_INCORRECT" in _codes(v), cand


# ------------------------------------------------------------------------------- pure parts, no workers


def test_digest_sees_through_copies_and_reexports_but_not_edits(tmp_path):
    ref = ob.impl_digest("perfwarden.harness.ops.reference:rmsnorm")
    reexport = _write(tmp_path / "reexport.py", """
        from perfwarden.harness.ops.reference import rmsnorm as fast_rmsnorm
        """) + ":fast_rmsnorm"
    via_module = _write(tmp_path / "via_module.py", """
        from perfwarden.harness.ops import reference
        rmsnorm = reference.rmsnorm
        """) + ":rmsnorm"
    src = Path(ob.spec_file("perfwarden.harness.ops.reference:rmsnorm")).read_text()
    recommented = _write(tmp_path / "recommented.py", "# totally new kernel\n" + src.replace(
        '"""``LlamaRMSNorm.forward``', '"""A brand new docstring. ``LlamaRMSNorm.forward``'))
    edited = _write(tmp_path / "edited.py", src.replace("variance + eps", "variance + 2 * eps"))
    assert ob.impl_digest(reexport) == ref
    assert ob.impl_digest(via_module) == ref
    assert ob.impl_digest(recommented + ":rmsnorm") == ref
    assert ob.impl_digest(edited + ":rmsnorm") != ref
    # rotary reaches its module-level helper: changing the helper changes the digest
    rsrc = Path(ob.spec_file("perfwarden.harness.ops.reference:rotary")).read_text()
    helper_edit = _write(tmp_path / "rot.py",
                         rsrc.replace("torch.cat((-x2, x1), dim=-1)", "torch.cat((x2, -x1), dim=-1)"))
    assert ob.impl_digest(helper_edit + ":rotary") != ob.impl_digest("perfwarden.harness.ops.reference:rotary")


def test_compare_is_allclose_with_the_recorded_metric():
    import torch

    ref = [torch.tensor([1.0, -2.0, 0.0, 100.0])]
    atol, rtol = 1e-5, 1e-5
    ok = ob.compare([ref[0] + torch.tensor([5e-6, 0, 9e-6, 9e-4])], ref, atol, rtol)
    assert ok.correct and ok.max_rel_err <= rtol
    bad = ob.compare([ref[0] + torch.tensor([0, 0, 0, 2e-3])], ref, atol, rtol)
    assert bad.correct is False and bad.max_rel_err == pytest.approx(2e-5, rel=1e-3)
    nan = ob.compare([torch.tensor([1.0, float("nan"), 0.0, 100.0])], ref, atol, rtol)
    assert nan.correct is False
    shape = ob.compare([torch.zeros(3)], ref, atol, rtol)
    assert shape.correct is False and "shape" in shape.raised
    dtype = ob.compare([ref[0].to(torch.bfloat16)], ref, atol, rtol)
    assert dtype.correct is False and "dtype" in dtype.raised
    tuples = ob.compare(ref * 2, ref, atol, rtol)
    assert tuples.correct is False


def test_inputs_are_deterministic_distinct_and_include_small_rms_rows():
    import torch

    a = ob.make_inputs("rmsnorm", [64, 576], "float32", ob.check_seed(0, (64, 576)))
    b = ob.make_inputs("rmsnorm", [64, 576], "float32", ob.check_seed(0, (64, 576)))
    assert torch.equal(a[0], b[0]) and a[2] == ob.SMOLLM2_RMS_EPS
    pool = [ob.make_inputs("rmsnorm", [4, 64], "float32", ob.timing_seed(0, (4, 64), 0, i))[0] for i in range(20)]
    assert all(not torch.equal(pool[i], pool[j]) for i in range(20) for j in range(i))
    rms = a[0].pow(2).mean(-1).sqrt()
    assert rms.min() < 1e-2 and rms.max() > 1.0
    q, k, cos, sin = ob.make_inputs("rotary", [1, 9, 5, 64], "bfloat16", 7)
    assert k.shape == (1, 3, 5, 64) and cos.shape == (1, 5, 64) and q.dtype == torch.bfloat16
    gate, up = ob.make_inputs("silu_mul", [2, 1536], "float32", 3)
    assert gate.shape == up.shape == (2, 1536)


def test_bad_requests_are_the_callers_error(tmp_path):
    with pytest.raises(ob.OpBenchError, match="trials"):
        ob.run_opbench(tmp_path, "rmsnorm", [], [SHAPE], trials=2)
    with pytest.raises(ob.OpBenchError, match="warmup"):
        ob.run_opbench(tmp_path, "rmsnorm", [], [SHAPE], warmup=0)
    with pytest.raises(ob.OpBenchError, match="head_dim"):
        ob.run_opbench(tmp_path, "rotary", [], [[1, 9, 4]])
    with pytest.raises(ob.OpBenchError, match="supported"):
        ob.run_opbench(tmp_path, "attention", [], [SHAPE])
    with pytest.raises(ob.OpBenchError, match="does not exist"):
        ob.run_opbench(tmp_path, "rmsnorm", [str(tmp_path / "missing.py") + ":rmsnorm"], [SHAPE])
    assert not (tmp_path / "opbench").exists()


def test_lab_entry_points(tmp_path, monkeypatch):
    specs = ob.alternatives_for("rmsnorm")
    assert all(Path(s.rsplit(":", 1)[0]).is_file() and s.endswith(":rmsnorm") for s in specs)
    assert ALT["self_copy"].spec in specs and ALT["wrong"].spec in specs
    assert ob.alternatives_for("rmsnorm", kinds=("alternative",)) == [
        s for s in specs if "eps_outside" not in s and "rowloop" not in s and "selfcopy" not in s]
    seen = {}
    from perfwarden.harness.opbench import runner

    monkeypatch.setattr(runner, "run_opbench", lambda *a, **kw: seen.update(args=a, kw=kw) or tmp_path)
    ob.run_opbench_for_lab(tmp_path, "rmsnorm", specs[:2] + specs[:1], [[1, 7, 576]])
    # backends are named by their spec: the name the producer claims and the integrator installs
    assert seen["args"][2] == {s: s for s in specs[:2]} and seen["args"][3] == [[1, 7, 576]]
    assert seen["kw"]["threads"] == 2 and seen["args"][4] == "float32" and seen["kw"]["device"] == "cpu"
    with pytest.raises(ob.OpBenchError, match="served shapes"):
        ob.run_opbench_for_lab(tmp_path, "rmsnorm", specs, [])
