"""What the sandbox costs: start-up of the embedded server confined vs unconfined, and a bare sandboxed
``python -c pass`` vs the same without the sandbox (alternated, same run, medians).

    .venv/bin/python benchmarks/sandbox_startup.py [--servers 3] [--bare 20]

The server figure is the time from ``start()`` to a healthy server that has reported its
``/server_info`` (model load included); the bare figure isolates the sandbox's own set-up (namespaces,
binds, cgroups, the watchdog).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _bare(n: int, work: Path) -> tuple[float, float]:
    from perfwarden.harness import sandbox

    confined, plain = [], []
    policy = sandbox.Policy(writable=work / "bare", limits=sandbox.Limits(wall_s=60))
    for _ in range(n):
        t = time.perf_counter()
        sandbox.run([sys.executable, "-I", "-c", "pass"], policy)
        confined.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
        plain.append(time.perf_counter() - t)
    return statistics.median(confined), statistics.median(plain)


def _servers(n: int, work: Path) -> tuple[list[float], list[float]]:
    from perfwarden.harness.targets import EmbeddedTarget

    confined, plain = [], []
    for i in range(n):
        for confine, out in ((True, confined), (False, plain)):
            target = EmbeddedTarget(work / f"leg-{i}-{confine}", {"threads": 2}, confine=confine)
            t = time.perf_counter()
            target.start()
            out.append(time.perf_counter() - t)
            target.stop()
    return confined, plain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--bare", type=int, default=20)
    args = parser.parse_args(argv)
    from perfwarden.harness import sandbox

    why = sandbox.available()
    if why is not None:
        print(f"sandbox unavailable: {why}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        c, p = _bare(args.bare, work)
        print(f"python -c pass: sandboxed {c * 1000:.0f} ms, plain {p * 1000:.0f} ms (median of {args.bare}); "
              f"sandbox set-up {1000 * (c - p):.0f} ms")
        sc, sp = _servers(args.servers, work)
        print(f"embedded server start to healthy: confined {statistics.median(sc):.2f} s {[round(x, 2) for x in sc]}, "
              f"unconfined {statistics.median(sp):.2f} s {[round(x, 2) for x in sp]} (median of {args.servers}, "
              "alternated)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
