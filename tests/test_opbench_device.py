"""The op bench's device path: the timer's logic (exercised on the CPU through the device interface),
Triton kernels checked under the interpreter at SmolLM2-135M's served shapes and recorded as not timed,
the rig's device record, and the summary's "not checked". GPU-only tests skip with a reason here and
run unchanged on a CUDA host."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

torch = pytest.importorskip("torch")

from perfwarden.formats.jsonl import OpBenchLine, read_jsonl  # noqa: E402
from perfwarden.harness import sandbox  # noqa: E402
from perfwarden.harness.opbench import alternatives_for, run_opbench, summarize  # noqa: E402
from perfwarden.harness.opbench.backend import read_output_file  # noqa: E402
from perfwarden.harness.opbench.rig import describe_device  # noqa: E402
from perfwarden.harness.opbench.timing import HostClockApi, time_trial  # noqa: E402
from perfwarden.harness.ops.alternatives import for_op  # noqa: E402

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_CUDA = torch.cuda.is_available()
NEEDS_SANDBOX = pytest.mark.skipif(sandbox.available() is not None, reason=f"sandbox unavailable: {sandbox.available()}")
NEEDS_TRITON = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (pip install -e '.[triton]')")
NEEDS_CUDA = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU: torch.cuda.is_available() is False here")

# SmolLM2-135M: hidden 576, 9 heads x 64, 3 KV heads, intermediate 1536; decode (1 token) and a short prefill.
SERVED = {"rmsnorm": [[1, 1, 576], [1, 7, 576]], "silu_mul": [[1, 1, 1536], [1, 7, 1536]],
          "rotary": [[1, 9, 1, 64], [1, 9, 7, 64]]}
SERVED_GPU = {"rmsnorm": [[1, 1, 576], [1, 128, 576], [8, 1, 576]],
              "silu_mul": [[1, 1, 1536], [1, 128, 1536], [8, 1, 1536]],
              "rotary": [[1, 9, 1, 64], [1, 9, 128, 64], [8, 9, 1, 64]]}


# ------------------------------------------------------------------------- the timer, on a fake clock


class FakeClock(HostClockApi):
    """A device whose clock only moves when the op runs (2 ms a call) or the cache is flushed (100 ms):
    any figure that includes a flush, or divides a graph replay wrongly, shows."""

    def __init__(self, graphs: bool = True, capture_fails: bool = False):
        super().__init__(stand_in_graphs=graphs)
        self.now = 0.0
        self.syncs = 0
        self.capture_fails = capture_fails

    def event(self):
        clock = self

        class _E:
            def record(self) -> None:
                self.t = clock.now

            def elapsed_ms(self, end) -> float:
                return end.t - self.t

        return _E()

    def synchronize(self) -> None:
        self.syncs += 1

    def flush_cache(self) -> None:
        super().flush_cache()
        self.now += 100.0

    def capture(self, thunk, warmup):
        if self.capture_fails:
            raise RuntimeError("operation not permitted when stream is capturing")
        return super().capture(thunk, warmup)


def _op(clock: FakeClock, seen: list[int]):
    def fn(x):
        seen.append(x)
        clock.now += 2.0
        return x
    return fn


def test_call_by_call_excludes_warmup_and_flushes_and_uses_each_set_once():
    clock, seen = FakeClock(graphs=False), []
    pool = [(i,) for i in range(10)]
    t = time_trial(clock, _op(clock, seen), pool, warmup=3)
    assert t.call_ms == [2.0] * 7 and t.graph_ms is None and t.graph_raised is None
    assert seen == list(range(10)) and pool == [()] * 10  # each set once, then released
    assert clock.flushes == 10 and clock.syncs == 10  # a flush and an idle device before every call


def test_graph_replay_divides_by_the_calls_in_the_graph_and_drops_warmup_replays():
    clock, seen = FakeClock(graphs=True), []
    pool = [(i,) for i in range(8)]
    graph_pool = [(100 + i,) for i in range(8)]
    t = time_trial(clock, _op(clock, seen), pool, warmup=2, graph_pool=graph_pool)
    assert t.call_ms == [2.0] * 6
    assert t.graph_ms == [2.0] * 6  # one figure per replay, as many as call-by-call figures
    graph_calls = [x for x in seen if x >= 100]
    assert graph_calls[:2] == [100, 101]  # warm-up sets run once before capture
    assert set(graph_calls[2:]) == set(range(102, 108))  # the captured sets are distinct from the timed pool


def test_an_op_that_cannot_be_captured_keeps_its_call_figures_and_says_why():
    clock, seen = FakeClock(graphs=True, capture_fails=True), []
    t = time_trial(clock, _op(clock, seen), [(i,) for i in range(4)], warmup=1, graph_pool=[(i,) for i in range(4)])
    assert t.call_ms == [2.0] * 3 and t.graph_ms is None and "capture" in t.graph_raised


def test_timer_refuses_a_pool_with_nothing_after_warmup():
    with pytest.raises(ValueError, match="warmup"):
        time_trial(FakeClock(), lambda x: x, [(1,)], warmup=1)


# ----------------------------------------------------------------------------------- rig and summary


def test_cpu_device_record():
    rec = describe_device("cpu", threads=2)
    assert rec["kind"] == "cpu" and rec["threads"] == 2 and rec["cores"] == os.cpu_count()
    assert rec["torch_version"] == torch.__version__ and "name" in rec


def test_summary_never_turns_not_checked_into_incorrect(tmp_path):
    path = tmp_path / "opbench.jsonl"
    base = {"op": "rmsnorm", "shape": [1, 576], "dtype": "float32", "seed": 0, "measured": False}
    rows = [{**base, "backend": "reference", "is_reference": True, "correct": True, "times_ms": [1.0],
             "measured": True},
            {**base, "backend": "tri", "correct": None, "raised": "triton not installed"},
            {**base, "backend": "bad", "correct": False}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    s = summarize(path)
    assert s["tri"]["1x576"]["correct"] is None and s["bad"]["1x576"]["correct"] is False
    assert s["reference"]["1x576"]["correct"] is True and s["tri"]["1x576"]["speedup"] is None


def test_output_files_are_read_only_when_regular_and_bounded(tmp_path):
    good = tmp_path / "good.pt"
    torch.save([torch.ones(3)], good)
    assert torch.equal(read_output_file(good)[0], torch.ones(3))
    link = tmp_path / "link.pt"
    link.symlink_to(good)
    with pytest.raises(OSError):
        read_output_file(link)
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_output_file(fifo)  # returns at once instead of blocking on a FIFO with no writer
    with pytest.raises(ValueError, match="limit"):
        read_output_file(good, limit=10)


def test_cli_defaults_to_the_targets_device_and_refuses_bad_input_clearly(tmp_path, capsys):
    from perfwarden.harness.opbench.cli import main, target_device

    assert target_device(tmp_path) == "cpu"
    leg = tmp_path / "legs" / "base"
    leg.mkdir(parents=True)
    (leg / "server_info.json").write_text(json.dumps({"server_args": {"device": "cuda:0"}}))
    assert target_device(tmp_path) == "cuda"
    (leg / "server_info.json").write_text("{not json")
    assert target_device(tmp_path) == "cpu"
    assert main(["--run-dir", str(tmp_path), "--op", "rmsnorm", "--shape", "1x7x576", "--trials", "1"]) == 3
    assert "trials (1) < number of seeds (3)" in capsys.readouterr().err


def test_triton_kernels_are_catalogued_for_every_op_and_offered_on_gpu_only():
    assert {a.op for a in for_op("rmsnorm") + for_op("silu_mul") + for_op("rotary") if a.kind == "triton"} == {
        "rmsnorm", "silu_mul", "rotary"}
    for op in SERVED:
        cpu, gpu = alternatives_for(op), alternatives_for(op, device="cuda")
        assert not any("_triton.py" in s for s in cpu)
        assert any(s.endswith(f"{op}_triton.py:{op}") for s in gpu)


# ------------------------------------------------------------------- Triton under the interpreter (CPU)


@pytest.mark.integration
@NEEDS_SANDBOX
@NEEDS_TRITON
@pytest.mark.parametrize("op", sorted(SERVED))
def test_triton_kernel_is_correct_at_served_shapes_and_not_timed_on_cpu(tmp_path, op):
    spec = next(a.spec for a in for_op(op) if a.kind == "triton")
    path = run_opbench(tmp_path, op, {"triton": spec}, SERVED[op], "float32", trials=3, iters=3, warmup=1,
                       timeout_s=120)
    rows = [r for _, r in read_jsonl(path, OpBenchLine).records]
    tri = [r for r in rows if r.backend == "triton"]
    assert len(tri) == 3 * len(SERVED[op])
    assert all(r.correct is True and r.raised is None for r in tri), [(r.shape, r.raised, r.max_rel_err) for r in tri]
    assert all(r.measured is False and r.times_ms is None and r.graph_times_ms is None for r in tri)
    assert all(r.device == "cpu" and r.timing_method is None for r in tri)
    ref = [r for r in rows if r.is_reference]
    assert all(r.measured and r.timing_method == "parent_clock" and r.graph_times_ms is None for r in ref)
    rig = json.loads((path.parent / "rig.json").read_text())
    assert rig["device"]["kind"] == "cpu" and rig["timing_method"] == "parent_clock" and rig["l2_flushed"] is False


# ------------------------------------------------------------------------------------ on a real GPU


@NEEDS_SANDBOX
@NEEDS_TRITON
@NEEDS_CUDA
@pytest.mark.parametrize("op", sorted(SERVED_GPU))
def test_gpu_rig_checks_on_device_and_times_both_ways(tmp_path, op):
    spec = next(a.spec for a in for_op(op) if a.kind == "triton")
    path = run_opbench(tmp_path, op, {"triton": spec}, SERVED_GPU[op], "bfloat16", trials=3, iters=20, warmup=3,
                       device="cuda", timeout_s=300)
    rows = [r for _, r in read_jsonl(path, OpBenchLine).records]
    for r in rows:
        # The parent's clock decides (one figure per trial, over its 20 calls, above the flushes' floor).
        assert r.device == "cuda" and r.timing_method == "parent_clock" and r.l2_flushed is True
        assert r.correct is True and r.measured and len(r.times_ms) == 1, (r.backend, r.shape, r.raised)
        assert r.graph_times_ms and len(r.graph_times_ms) == 1, r.graph_raised
    rig = json.loads((path.parent / "rig.json").read_text())
    dev = rig["device"]
    assert dev["kind"] == "cuda" and dev["sm_count"] > 0 and dev["name"] and dev["cuda_version"]
    assert rig["sandbox"]["device"] == "cuda"


@NEEDS_CUDA
def test_cuda_timer_agrees_with_its_own_call_figure_on_a_long_kernel():
    """On a kernel long enough that launch overhead is noise, graph and call-by-call figures agree."""
    from perfwarden.harness.opbench.timing import CudaApi

    api = CudaApi()
    a = [(torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")) for _ in range(12)]
    b = [(torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")) for _ in range(12)]
    t = time_trial(api, torch.matmul, a, warmup=2, graph_pool=b)
    call, graph = sorted(t.call_ms)[len(t.call_ms) // 2], sorted(t.graph_ms)[len(t.graph_ms) // 2]
    assert abs(call - graph) / graph < 0.15, (call, graph)
