"""Wall time of the same study on 1, 2 and 4 simulated Ray nodes (issue 20's target: >= 1.8x faster with
2 nodes than with 1, identical verdicts for identical steps).

    python benchmarks/scale_out.py [--nodes 1,2,4] [--steps 8] [--rep-delay 1.5]

Each configuration runs the full graph on the synthetic target (orchestrator/simlab.py) with ``--cluster``
on a local ``ray.cluster_utils.Cluster`` (127.0.0.1, no dashboard): a head without CPU slots and N
one-CPU worker nodes. A rep sleeps ``--rep-delay`` seconds (a serving rep waits on the server; on this
2-core machine sleeping keeps the CPUs for the auditor), so a step (3 reps on 2 legs) takes ~6 x the
delay. The study asks 4 trials at a time whatever the cluster's size (``study_batch``), so every
configuration runs the same study: the same trials, steps and verdicts. The figure is the study's wall
time (from the first A/B step to the bundle: the part that fans out); the whole run's time (cluster start
excluded) is printed beside. Exits 1 when 2 nodes are under 1.8x or any step's verdict differs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import record

TARGET_SPEEDUP = 1.8


class _Clock:
    """A run watcher that notes when the study starts (first A/B step) and ends (the bundle)."""

    def __init__(self) -> None:
        self.first_step: float | None = None
        self.bundle: float | None = None

    def node(self, name: str, detail: str, remaining_s: float) -> None:
        if name == "integrator" and self.first_step is None:
            self.first_step = time.perf_counter()
        if name in ("bundle", "report") and self.bundle is None:
            self.bundle = time.perf_counter()

    def measuring(self, legs, reps) -> None:
        pass

    def rep(self, leg, rep, status) -> None:
        pass

    def verdict(self, summary, claim, remaining_s) -> None:
        pass


def one(nodes: int, steps: int, delay: float, root: Path) -> dict[str, Any]:
    from perfwarden.orchestrator import cluster
    from perfwarden.orchestrator.runner import run_graph
    from perfwarden.orchestrator.settings import RunSettings
    from perfwarden.orchestrator.simlab import SyntheticLab

    settings = RunSettings(target="synthetic", kernels=False, max_proposals=steps, study_batch=4, budget_minutes=600)
    with cluster.simulated(nodes):
        lab = SyntheticLab()
        lab.rep_delay_s = delay
        clock = _Clock()
        started = time.perf_counter()
        state = run_graph(root / f"nodes-{nodes}", settings, lab, watcher=clock, cluster="attached")
        whole = time.perf_counter() - started
    verdicts = {v.lever: (v.verdict, v.action, tuple(sorted(v.codes()))) for v in state["verdicts"]
                if v.scope == "patch"}
    return {"nodes": nodes, "study_s": (clock.bundle or time.perf_counter()) - (clock.first_step or started),
            "run_s": whole, "verdicts": verdicts, "steps": len(state["proposals"]),
            "sealed": all(v.seal == "sealed" for v in state["verdicts"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,4")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rep-delay", type=float, default=1.5)
    record.add_flag(parser)
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",") if n.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="pw-scale-out-") as tmp:
        for n in counts:
            r = one(n, args.steps, args.rep_delay, Path(tmp))
            results.append(r)
            print(f"{n} node(s): study {r['study_s']:6.1f}s, whole run {r['run_s']:6.1f}s, {r['steps']} steps, "
                  f"all sealed: {r['sealed']}", flush=True)
    base = results[0]
    same = all(r["verdicts"] == base["verdicts"] for r in results)
    for r in results[1:]:
        print(f"{r['nodes']} vs {base['nodes']} node(s): study {base['study_s'] / r['study_s']:.2f}x faster, "
              f"whole run {base['run_s'] / r['run_s']:.2f}x")
    print(f"identical verdicts for identical steps ({len(base['verdicts'])} steps): {'yes' if same else 'NO'}")
    for lever, verdict in sorted(base["verdicts"].items()):
        print(f"  {lever}: {verdict[0]} {verdict[1]} {list(verdict[2])}")
    two = next((r for r in results if r["nodes"] == 2), None)
    one_node = next((r for r in results if r["nodes"] == 1), None)
    ok = same and (two is None or one_node is None or one_node["study_s"] / two["study_s"] >= TARGET_SPEEDUP)
    record.record("scale_out.py", [record.Figure(
        f"study wall time on {r['nodes']} simulated node(s), {args.steps} steps, a rep {args.rep_delay:g} s",
        f"**{r['study_s']:.1f} s** ({base['study_s'] / r['study_s']:.2f}x {base['nodes']} node(s)); whole run "
        f"{r['run_s']:.1f} s; every verdict sealed: {'yes' if r['sealed'] else 'NO'}") for r in results]
        + [record.Figure(f"the same verdicts for the same {len(base['verdicts'])} steps on {args.nodes} nodes",
                         "yes" if same else "NO")], args.record)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
