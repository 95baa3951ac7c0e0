"""How fast the red team attacks the auditor, and whether it holds (the target: >= 1,000 attacks
over >= 30 families with 0 successes in under 10 minutes on a 2-core machine).

    python benchmarks/redteam_rate.py [--rounds 2] [--seed 0]

Prints attacks, families, successes, wall time and attacks/s (one line per success first). Successes are
written under a temporary directory, not into the shipped fixtures (``perfwarden redteam`` does that).
Exits 1 when any attack succeeds. A rate taken on a shared or contended machine is a lower bound.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

TARGET_ATTACKS, TARGET_FAMILIES, TARGET_SECONDS = 1000, 30, 600.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from perfwarden.redteam import red_team
    from perfwarden.orchestrator.paths import default_fixture_roots

    root = default_fixture_roots()[0]
    with tempfile.TemporaryDirectory(prefix="pw-redteam-bench-") as out:
        started = time.perf_counter()
        report = red_team.redteam([root / b for b in red_team.DEFAULT_BASES], rounds=args.rounds, seed=args.seed,
                                  out=Path(out))
        wall = time.perf_counter() - started
    data = report.to_json()
    for s in data["success_list"]:
        print(f"SUCCESS {s['family']} on {s['base']}: {s['why']}")
    for base, why in data["skipped_bases"].items():
        print(f"skipped base {base}: {why}")
    n, fam = data["attacks"], data["families"]
    print(f"cpus={os.cpu_count()} rounds={args.rounds} bases={len(data['bases'])} families={fam} attacks={n} "
          f"successes={data['successes']} wall_s={wall:.1f} attacks_per_s={n / wall:.2f}")
    met = n >= TARGET_ATTACKS and fam >= TARGET_FAMILIES and data["successes"] == 0 and wall < TARGET_SECONDS
    print(f"target (>= {TARGET_ATTACKS} attacks, >= {TARGET_FAMILIES} families, 0 successes, < {TARGET_SECONDS:.0f} s): "
          f"{'met' if met else 'not met'}")
    return 0 if data["successes"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
