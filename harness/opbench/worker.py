"""The op-bench worker: runs inside the sandbox, loads one implementation, answers check/time requests.

Started by the runner as ``python -I -m perfwarden.harness.opbench.worker`` inside
:mod:`perfwarden.harness.sandbox` (the OS, not this file, confines it: nothing here guards anything).
Protocol: the first stdin line is the job (JSON); then one request per line, one answer per request on
the real stdout, each prefixed with ``PROTOCOL_PREFIX``. Whatever the implementation prints goes to
``worker.stdout.log`` instead, so it cannot forge an answer. Outputs of a check are written as a file
in the working directory (the sandbox's one writable directory) and loaded by the runner.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfwarden.harness.opbench.digest import parse_spec
from perfwarden.harness.opbench.inputs import as_tensors, check_seed, make_inputs, timing_seed

PROTOCOL_PREFIX = "@@opbench "


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
    fn = getattr(module, name, None)
    if not callable(fn):
        raise AttributeError(f"{target!r} has no callable {name!r}")
    return fn


def _device_api(device: str):
    from perfwarden.harness.opbench.timing import CudaApi, HostClockApi

    return HostClockApi() if device == "cpu" else CudaApi(device)


def main() -> int:
    real_stdout = os.dup(1)
    proto = os.fdopen(real_stdout, "w", buffering=1, encoding="utf-8")
    log_fd = os.open("worker.stdout.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)  # anything the implementation prints goes to the log, never into the protocol
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", closefd=False)

    def send(msg: dict[str, Any]) -> None:
        proto.write(PROTOCOL_PREFIX + json.dumps(msg, allow_nan=False) + "\n")
        proto.flush()

    job = json.loads(sys.stdin.readline())
    import torch

    from perfwarden.harness.opbench.timing import time_trial

    torch.set_num_threads(int(job["threads"]))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    op, dtype, device = job["op"], job["dtype"], job.get("device", "cpu")
    send({"phase": "torch_imported"})  # from here on the time is the implementation's (bounded per request)
    try:
        api = _device_api(device)
        fn = load_impl(job["spec"])
        if job["dispatch"] == "compiled":
            fn = torch.compile(fn, dynamic=False)
    except BaseException as exc:  # noqa: BLE001 - the implementation's fault, reported, never raised here
        send({"ready": False, "raised": f"import failed: {describe(exc)}"})
        return 0
    send({"ready": True, "torch_threads": torch.get_num_threads(), "device": device, "timing_method": api.method})

    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "exit":
            break
        try:
            shape = tuple(req["shape"])
            if req["cmd"] == "check":
                args = make_inputs(op, shape, dtype, check_seed(req["seed"], shape), device)
                with torch.no_grad():
                    out = as_tensors(fn(*args))
                torch.save([t.detach().contiguous().cpu() for t in out], req["out"])
                send({"ok": True})
            elif req["cmd"] == "time":
                n = int(req["n"])
                seed, trial = req["seed"], req["trial"]
                pool = [make_inputs(op, shape, dtype, timing_seed(seed, shape, trial, i), device) for i in range(n)]
                graph_pool = ([make_inputs(op, shape, dtype, timing_seed(seed, shape, trial, n + i), device)
                               for i in range(n)] if api.has_graphs else None)
                with torch.no_grad():
                    t = time_trial(api, fn, pool, int(req["warmup"]), graph_pool)
                send({"times_ms": t.call_ms, "graph_times_ms": t.graph_ms, "graph_raised": t.graph_raised})
            else:
                send({"raised": f"unknown command {req['cmd']!r}"})
        except BaseException as exc:  # noqa: BLE001
            send({"raised": describe(exc)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
