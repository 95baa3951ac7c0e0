"""The op-bench worker: runs inside the sandbox, loads one implementation, answers the runner's requests.

Started by the runner as ``python -I -m perfwarden.harness.opbench.worker`` inside
:mod:`perfwarden.harness.sandbox` (the OS, not this file, confines it). Nothing this process says is
believed on its word (see :mod:`perfwarden.harness.opbench.guard`): the runner times every request
from outside, reads outputs and inputs back from files and checks them itself, and refuses an answer
that does not carry its request's nonce. Protocol: the first stdin line is the job (JSON); then one
request per line, one answer per request on the real stdout, each prefixed with ``PROTOCOL_PREFIX`` and
echoing the request's ``nonce``. Whatever the implementation prints goes to ``worker.stdout.log``.

Requests: ``ping``; ``null_run`` (a timed run's path with an op that does nothing: the floor every timed
figure is measured above); ``check`` (inputs from ``gen_seed`` at ``shape``; writes outputs and the inputs as the
call left them to ``out``); ``prepare`` (builds a trial's input sets from ``gen_seed``, runs the warm-up
calls); ``run`` (the next ``count`` timed calls, the device synchronised before answering); ``sample``
(writes the outputs and inputs of timed calls ``indices`` to ``out``); ``graph_run`` (replays the trial's
CUDA graph ``replays`` times; devices with graphs only).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfwarden.harness.opbench.digest import parse_spec
from perfwarden.harness.opbench.inputs import OpArgs, as_tensors, make_inputs, stable_seed

if TYPE_CHECKING:  # torch and the device timers load inside the sandbox, once the job is known
    import torch

    from perfwarden.harness.opbench.timing import Graph

PROTOCOL_PREFIX = "@@opbench "
REFERENCE_MODULE_NAME = "perfwarden.harness.ops.reference"
_TENSOR_METHODS = ("detach", "contiguous", "cpu", "clone", "to", "copy_", "__torch_function__", "__reduce_ex__",
                   "__getstate__", "__setstate__", "storage", "untyped_storage", "_typed_storage", "numpy")
_CLOCKS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time",
           "process_time_ns", "thread_time", "thread_time_ns")


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 500 else text[:497] + "..."


def load_impl(spec: str) -> Callable[..., Any]:
    """The function a spec names, imported (file specs load exactly that one file)."""
    target, name, is_file = parse_spec(spec)
    if is_file:
        path = Path(target).resolve()
        mod_name = "opbench_impl_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError(f"cannot load {str(path)!r}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn: object = getattr(module, name, None)
    if not callable(fn):
        raise AttributeError(f"{target!r} has no callable {name!r}")
    return fn


def guard_reference(reference_file: str | None) -> list[str]:
    """An audit hook (it cannot be removed) that makes the reference unreachable to a candidate: importing
    its module or opening its file raises, and the attempt is recorded for the runner."""
    reached: list[str] = []
    ref_path = os.path.realpath(reference_file) if reference_file else None

    ref_dir = os.path.dirname(ref_path) if ref_path else None

    def is_reference_file(path: object) -> bool:
        try:
            real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        if real == ref_path:
            return True
        return (ref_dir is not None and os.path.dirname(real) == os.path.join(ref_dir, "__pycache__")
                and os.path.basename(real).startswith("reference."))

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event == "import" and args and args[0] == REFERENCE_MODULE_NAME:
            reached.append(f"imported {REFERENCE_MODULE_NAME}")
            raise ImportError("the reference is out of a candidate's reach (op bench)")
        if ref_path is None or not args:
            return
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)) and is_reference_file(args[0]):
            reached.append("opened the reference's file")
            raise PermissionError("the reference is out of a candidate's reach (op bench)")
        if event == "exec" and is_reference_file(getattr(args[0], "co_filename", "")):
            reached.append("executed the reference's code")
            raise PermissionError("the reference is out of a candidate's reach (op bench)")

    sys.addaudithook(hook)
    return reached


class Trial:
    """One timed trial's input sets, and the outputs of its calls (kept until the runner sampled them)."""

    def __init__(self, op: str, shape: tuple[int, ...], dtype: str, gen_seed: int, n: int, device: str):
        self.sets = [make_inputs(op, shape, dtype, stable_seed("set", gen_seed, i), device) for i in range(n)]
        self.outs: list[Any] = [None] * n
        self.next = 0
        self.graph: Graph | None = None
        self.graph_outs: list[Any] = []


_SAVE: list[Callable[..., Any]] = []
"""``torch.save`` as it was before the candidate loaded (a patched one still runs in the same process; what
it does while saving is charged to the candidate's clock: ``phases.charge_deferred_work``)."""


def _save(path: str, outs: list[torch.Tensor], args: OpArgs) -> None:
    import torch

    tensors = [t.detach().contiguous().cpu() for t in outs]
    inputs = [a.detach().contiguous().cpu() for a in args if isinstance(a, torch.Tensor)]
    (_SAVE[0] if _SAVE else torch.save)({"outs": tensors, "inputs": inputs}, path)


class Session:
    """The worker's state between requests."""

    def __init__(self, job: dict[str, Any], fn: Callable[..., Any], sync: Callable[[], None]):
        self.job, self.fn, self.sync = job, fn, sync
        self.trial: Trial | None = None
        self.flush: Callable[[], None] = lambda: None
        self.api = None
        if job.get("device", "cpu") != "cpu":  # on a GPU the L2 is flushed before every timed call
            from perfwarden.harness.opbench.timing import CudaApi  # lazy: cycle via the opbench __init__

            self.api = CudaApi(job["device"])
            self.flush = self.api.flush_cache

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        import torch

        op, dtype, device = self.job["op"], self.job["dtype"], self.job.get("device", "cpu")
        cmd = req["cmd"]
        if cmd == "ping":
            return {"ok": True}
        if cmd == "null_run":  # a timed run's path with an op that does nothing (the reference's worker only)
            return self._run([(torch.empty(1),)] * int(req["count"]), lambda x: x, 0, int(req["count"]), [None] * int(req["count"]))
        if cmd == "check":
            args = make_inputs(op, tuple(req["shape"]), dtype, int(req["gen_seed"]), device)
            with torch.no_grad():
                out = as_tensors(self.fn(*args))
            self.sync()
            _save(req["out"], out, args)
            return {"ok": True}
        if cmd == "prepare":
            self.trial = Trial(op, tuple(req["shape"]), dtype, int(req["gen_seed"]), int(req["n"]), device)
            with torch.no_grad():
                for i in range(int(req["warmup"])):
                    self.fn(*self.trial.sets[i])
                self.trial.next = int(req["warmup"])
            self.sync()
            return {"ok": True}
        trial = self.trial
        if trial is None:
            return {"raised": f"{cmd!r} before 'prepare'"}
        if cmd == "run":
            end = min(len(trial.sets), trial.next + int(req["count"]))
            ans = self._run(trial.sets, self.fn, trial.next, end, trial.outs)
            trial.next = end
            return ans
        if cmd == "sample":
            for idx, path in zip(req["indices"], req["outs"]):
                _save(path, as_tensors(trial.outs[idx]), trial.sets[idx])
            return {"ok": True}
        if cmd == "graph_run":
            return self._graph_run(trial, req)
        return {"raised": f"unknown command {cmd!r}"}

    def _run(self, sets: list[OpArgs], fn: Callable[..., Any], start: int, end: int,
             outs: list[Any]) -> dict[str, Any]:
        """Calls ``start..end`` (the timed path; the same code for the floor, with an op that does nothing)."""
        import torch

        flush = self.flush
        with torch.no_grad():
            for i in range(start, end):
                flush()
                outs[i] = fn(*sets[i])
        self.sync()
        plain = all(type(t) is torch.Tensor for o in outs[start:end] for t in (o if isinstance(o, (tuple, list)) else (o,)))
        return {"ok": True, "done": end, "not_plain": not plain}

    def _graph_run(self, trial: Trial, req: dict[str, Any]) -> dict[str, Any]:
        if self.api is None:
            return {"raised": "no graphs on this device"}
        if trial.graph is None:
            captured = trial.sets[int(req["warmup"]):]
            outs = trial.graph_outs

            def run_all() -> None:
                outs.clear()
                for args in captured:
                    outs.append(self.fn(*args))

            def warm() -> None:  # on the capture's side stream, as torch's graph docs require
                for args in captured[:1]:
                    self.fn(*args)

            trial.graph = self.api.capture(run_all, warm)
        for _ in range(int(req["replays"])):
            self.flush()
            trial.graph.replay()
        self.sync()
        return {"ok": True}


def harness_state() -> dict[str, Any]:
    """What the worker relies on that a candidate could patch: the clocks and the tensor methods used to
    hand outputs back (their raw class attributes: a classmethod is a new object on every lookup).
    Compared after every request (evidence only: the decision is taken outside)."""
    import torch

    state: dict[str, Any] = {f"time.{name}": getattr(time, name, None) for name in _CLOCKS}
    for name in _TENSOR_METHODS:
        state[f"torch.Tensor.{name}"] = torch.Tensor.__dict__.get(name, torch._C.TensorBase.__dict__.get(name))
    state["torch.save"] = torch.save
    state["torch._utils._rebuild_tensor_v2"] = getattr(torch._utils, "_rebuild_tensor_v2", None)
    return state


def tampered(before: dict[str, Any]) -> list[str]:
    now = harness_state()
    return [name for name, f in before.items() if now.get(name) is not f]


def main() -> int:
    real_stdout = os.dup(1)
    proto = os.fdopen(real_stdout, "w", buffering=1, encoding="utf-8")
    log_fd = os.open("worker.stdout.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)  # anything the implementation prints goes to the log, never into the protocol
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", closefd=False)
    dumps = json.dumps

    def send(msg: dict[str, Any]) -> None:
        proto.write(PROTOCOL_PREFIX + dumps(msg, allow_nan=False) + "\n")
        proto.flush()

    job = json.loads(sys.stdin.readline())
    import torch

    torch.set_num_threads(int(job["threads"]))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    device = job.get("device", "cpu")
    cuda_sync = torch.cuda.synchronize if device == "cuda" else None  # bound before the candidate loads
    sync = (lambda: cuda_sync(device)) if cuda_sync else (lambda: None)
    _SAVE.append(torch.save)
    state = harness_state()
    send({"phase": "torch_imported"})  # from here on the time is the implementation's (bounded per request)
    reached = guard_reference(job.get("reference_file")) if job.get("guard_reference") else []
    try:
        fn = load_impl(job["spec"])
        if job["dispatch"] == "compiled":
            fn = torch.compile(fn, dynamic=False)
    except BaseException as exc:  # noqa: BLE001 - the implementation's fault, reported, never raised here
        send({"ready": False, "raised": f"import failed: {describe(exc)}", "reached_reference": reached})
        return 0
    send({"ready": True, "torch_threads": torch.get_num_threads(), "device": device,
          "timing_method": "parent_clock", "reached_reference": reached})
    session = Session(job, fn, sync)
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "exit":
            break
        try:
            ans = session.handle(req)
        except BaseException as exc:  # noqa: BLE001
            ans = {"raised": describe(exc)}
        send({**ans, "nonce": req.get("nonce"), "reached_reference": list(reached), "tampered": tampered(state)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
