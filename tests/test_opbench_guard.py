"""The op bench's out-of-reach checks (``harness/opbench/guard``), one by one, without a sandbox."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from perfwarden.harness.opbench import guard  # noqa: E402
from perfwarden.harness.opbench.digest import reaches_reference  # noqa: E402
from perfwarden.harness.opbench.inputs import OPS  # noqa: E402


def test_inputs_come_from_a_per_run_secret():
    a, b = guard.new_secret(), guard.new_secret()
    assert a != b and len(a) == 32
    assert guard.secret_seed(a, "check", 0, (16, 576)) != guard.secret_seed(b, "check", 0, (16, 576))
    assert guard.secret_seed(a, "x") == guard.secret_seed(a, "x")


def test_probe_shapes_keep_the_models_dimensions_and_differ_from_the_benched_ones():
    secret = guard.new_secret()
    for op, shape in (("rmsnorm", (16, 576)), ("silu_mul", (2, 128, 1536)), ("rotary", (2, 9, 16, 64))):
        up, down = guard.probe_shapes(op, [shape], secret)  # one larger, one smaller: no side is safe
        assert up[0] > shape[0] and down[0] < shape[0]
        for probe in (up, down):
            assert probe[-1] == shape[-1]
            if op == "rotary":
                assert probe[1] == shape[1] and probe[3] == shape[3]
    assert len(guard.probe_shapes("rmsnorm", [(1, 576)], secret)) == 1  # nothing smaller than one row


def test_which_inputs_an_op_may_modify_is_said_once_per_op():
    assert OPS["silu_mul"].may_modify == {0, 1}
    assert OPS["rmsnorm"].may_modify == frozenset() and OPS["rotary"].may_modify == frozenset()
    x, w = torch.randn(4, 8), torch.randn(8)
    assert guard.unmodified((x, w, 1e-5), [x.clone(), w.clone()], OPS["rmsnorm"].may_modify) is None
    assert "modified input 0" in guard.unmodified((x, w, 1e-5), [x + 1, w.clone()], OPS["rmsnorm"].may_modify)
    g, u = torch.randn(4, 8), torch.randn(4, 8)
    assert guard.unmodified((g, u), [g * 2, u.clone()], OPS["silu_mul"].may_modify) is None


def test_more_threads_than_the_rig_allows_or_cpu_while_idle_is_refused():
    run = guard.cpu_window({(1, 1): 0, (1, 2): 0}, {(1, 1): 900_000, (1, 2): 800_000})
    assert run.threads_ran == 2 and run.cpu_ns == 1_700_000
    assert any("2 threads" in v for v in guard.run_violations(run, threads=1))
    assert guard.run_violations(run, threads=2) == []
    assert guard.run_violations(run, threads=1, device="cuda") == []  # a GPU driver has its own threads
    # Idle CPU is judged against the reference's after the same trial (OpenMP spins in both).
    assert guard.idle_violation(5_000_000, 100_000) and "while idle" in guard.idle_violation(5_000_000, 100_000)
    assert guard.idle_violation(4_500_000, 4_000_000) is None
    assert guard.idle_violation(300_000, 0) is None


def test_the_decisive_time_is_the_sandboxes_cpu_on_one_thread_and_never_less_than_the_wall_on_more():
    run = guard.CpuWindow(cpu_ns=2_000_000, threads_ran=1)
    assert guard.decisive_ms(run, 9_000_000, 0, 0, threads=1, calls=20, device="cpu") == pytest.approx(0.1)
    assert guard.decisive_ms(run, 9_000_000, 0, 400_000, threads=1, calls=20, device="cpu") == pytest.approx(0.08)
    assert guard.decisive_ms(run, 9_000_000, 1_000_000, 0, threads=2, calls=20, device="cpu") == pytest.approx(0.4)
    assert guard.decisive_ms(run, 3_000_000, 1_000_000, 0, threads=1, calls=20, device="cuda") == pytest.approx(0.1)


def test_samples_are_drawn_after_the_fact_from_the_secret():
    s = guard.new_secret()
    assert guard.sample_indices(s, ("16x576", 0), 20) == list(range(20))  # by default every timed call
    idx = guard.sample_indices(s, ("16x576", 0), 20, k=3)
    assert len(set(idx)) == 3 and all(0 <= i < 20 for i in idx)
    assert guard.sample_indices(s, ("16x576", 0), 20, k=3) == idx


def test_roofline_refuses_a_call_faster_than_the_rig_moves_its_bytes():
    x = torch.randn(64, 576)
    floor = guard.copy_floor_ms(guard.bytes_moved((x, x), (x,)), "cpu")
    assert floor > 0
    assert guard.below_roofline(floor * 0.1, floor) and guard.below_roofline(floor * 2, floor) is None


@pytest.mark.parametrize("text,reaches", [
    ("from perfwarden.harness.ops.reference import rmsnorm as r\n", True),
    ("import perfwarden.harness.ops.reference as r\n", True),
    ("from perfwarden.harness.ops import reference\n", True),
    ("import importlib\nM = 'perfwarden.harness.ops.reference'\n", True),
    ("import torch\ndef rmsnorm(x, w, eps):\n    return x\n", False),
    ('"""Faster than perfwarden.harness.ops.reference (a docstring does nothing)."""\n', False),
])
def test_a_candidate_that_names_the_reference_is_a_self_comparison(tmp_path, text, reaches):
    path = tmp_path / "cand.py"
    path.write_text(text + "def rmsnorm(x, w, eps):\n    return x\n")
    assert (reaches_reference(f"{path}:rmsnorm") is not None) == reaches


def test_a_patched_clock_or_tensor_method_is_seen_and_an_untouched_worker_is_not(monkeypatch):
    import time

    from perfwarden.harness.opbench import worker

    state = worker.harness_state()
    assert worker.tampered(state) == []  # a classmethod looked up twice is still the same attribute
    monkeypatch.setattr(time, "perf_counter_ns", lambda: 0)
    monkeypatch.setattr(torch.Tensor, "detach", lambda self: self)
    assert worker.tampered(state) == ["time.perf_counter_ns", "torch.Tensor.detach"]


def test_an_output_file_replaced_by_a_fifo_or_a_link_is_refused_without_blocking(tmp_path):
    import os

    from perfwarden.harness.opbench.backend import read_output_file

    os.mkfifo(tmp_path / "fifo.pt")
    os.symlink("/proc/self/environ", tmp_path / "link.pt")
    for name in ("fifo.pt", "link.pt"):
        with pytest.raises((ValueError, OSError)):
            read_output_file(tmp_path / name)


def test_a_tensor_subclass_is_not_an_answer():
    from perfwarden.harness.opbench.inputs import as_tensors

    class Lazy(torch.Tensor):
        pass

    assert as_tensors(torch.ones(2))[0].shape == (2,)
    with pytest.raises(TypeError, match="subclass"):
        as_tensors(torch.ones(2).as_subclass(Lazy))


class _Box:
    def kill(self, reason=None):
        pass


def _client(reply):
    """A WorkerClient without a sandbox: ``reply(request)`` is what the 'worker' answers."""
    import queue

    from perfwarden.harness.opbench.backend import WorkerClient

    c = WorkerClient.__new__(WorkerClient)
    c.failure, c.violations, c._count, c._secret = None, [], 0, guard.new_secret()
    c._answers, c.box = queue.Queue(), _Box()
    c._send = lambda msg: c._answers.put(reply(msg))
    return c


def test_an_answer_must_carry_its_requests_nonce_and_be_the_only_one():
    honest = _client(lambda msg: {"ok": True, "nonce": msg["nonce"]})
    assert honest.timed_request({"cmd": "ping"}, 1.0)[0]["ok"] and honest.violations == []
    guesser = _client(lambda msg: {"ok": True, "nonce": "guessed"})
    guesser.timed_request({"cmd": "ping"}, 1.0)
    assert any("not tied to its request" in v for v in guesser.violations)
    forger = _client(lambda msg: {"ok": True, "nonce": msg["nonce"]})
    forger.timed_request({"cmd": "ping"}, 1.0)
    forger._answers.put({"times_ms": [0.0001], "nonce": "x"})  # written on the stream with nothing asked
    forger.timed_request({"cmd": "ping"}, 1.0)
    assert any("nobody asked for" in v for v in forger.violations)


def test_the_worker_hook_keeps_the_reference_out_of_reach(tmp_path):
    """In a child interpreter: an audit hook cannot be removed, so it must not be installed in this one."""
    import os
    import subprocess
    import sys

    from perfwarden.harness.opbench.digest import spec_file

    ref = spec_file("perfwarden.harness.ops.reference:rmsnorm")
    code = (
        "import importlib, importlib.util, sys\n"
        "from perfwarden.harness.opbench.worker import guard_reference\n"
        f"reached = guard_reference({str(ref)!r})\n"
        "for attempt in (lambda: importlib.import_module('perfwarden.harness.ops.' + 'reference'),\n"
        f"                lambda: open({str(ref)!r}).read()):\n"
        "    try:\n"
        "        attempt(); print('REACHED')\n"
        "    except (ImportError, PermissionError):\n"
        "        pass\n"
        "print(len(reached))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "REACHED" not in out.stdout and int(out.stdout.split()[-1]) >= 2, out.stdout
