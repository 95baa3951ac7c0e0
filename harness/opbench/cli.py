"""``python -m perfwarden.harness.opbench``: benchmark op implementations against the reference."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfwarden.formats.safe_read import RECORD_BYTES, read_bytes
from perfwarden.formats.strict_json import loads
from perfwarden.harness.opbench.backend import Device
from perfwarden.harness.opbench.inputs import OPS, TOLERANCES, OpBenchError
from perfwarden.harness.opbench.runner import alternatives_for, run_opbench
from perfwarden.harness.opbench.summary import summarize


def target_device(run_dir: Path) -> Device:
    """The device the run's target serves on: ``cuda`` when a leg's ``server_info.json`` says so (key
    ``device``, at the top or under ``server_args``), else ``cpu`` (the embedded target's default)."""
    for info_path in sorted(Path(run_dir).glob("legs/*/server_info.json")):
        try:
            info = loads(read_bytes(info_path, run_dir, limit=RECORD_BYTES, what="server_info"), what="server_info")
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict):
            continue
        nested = info.get("server_args")
        if not isinstance(nested, dict):
            nested = {}
        device = info.get("device", nested.get("device"))
        if isinstance(device, str) and device.startswith("cuda"):
            return "cuda"
    return "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfwarden.harness.opbench",
                                     description="Benchmark op implementations against the reference.")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--op", required=True, choices=sorted(OPS))
    parser.add_argument("--candidate", action="append", default=[], help="path.py:function (repeatable)")
    parser.add_argument("--catalog", action="store_true",
                        help="add every catalogued alternative of the op (harness/ops/alternatives)")
    parser.add_argument("--shape", action="append", required=True, help="e.g. 16x576 (repeatable)")
    parser.add_argument("--dtype", default="float32", choices=sorted(TOLERANCES))
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="where reference and candidates run (default: the device the run's target serves on)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dispatch", default="eager", choices=["eager", "compiled"])
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    device: Device = args.device or target_device(args.run_dir)
    candidates = list(args.candidate)
    if args.catalog:
        candidates += alternatives_for(args.op, device=device)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
        path = run_opbench(args.run_dir, args.op, candidates, args.shape, args.dtype, seeds=seeds,
                           trials=args.trials, iters=args.iters, warmup=args.warmup, threads=args.threads,
                           dispatch=args.dispatch, device=device, timeout_s=args.timeout)
    except (OpBenchError, ValueError) as exc:
        print(f"opbench: {exc}", file=sys.stderr)
        return 3
    print(json.dumps({"opbench": str(path), "device": device, "summary": summarize(path)}, indent=2))
    return 0
