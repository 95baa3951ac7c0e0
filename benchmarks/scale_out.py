"""Wall time of the same work on 1, 2 and 4 Ray nodes: a SIMULATED study (reps sleep) and REAL A/B steps
(the embedded target serving SmolLM2 on torch). The target: >= 1.8x faster with 2 nodes than with 1 on
the simulated study, identical verdicts for identical steps.

    python benchmarks/scale_out.py [--nodes 1,2,4] [--steps 8] [--rep-delay 1.5]
                                   [--real-nodes 1,2] [--real-steps 4] [--real-reps 2] [--skip-simulated|--skip-real]

SIMULATED: the full graph on the synthetic target (orchestrator/simlab.py) with ``--cluster`` on a
loopback cluster (``cluster.simulated``: a head without CPU slots and N one-CPU worker nodes). A rep
sleeps ``--rep-delay`` seconds instead of measuring anything (on a 2-core machine sleeping keeps the CPUs
for the auditor), so a step (3 reps on 2 legs) takes ~6 x the delay: this measures the fan-out machinery
and the head's serial audits, not serving. The study asks 4 trials at a time whatever the cluster's size
(``study_batch``), so every configuration runs the same study. The figure is the study's wall time (from
the first A/B step to the bundle); the whole run's time (cluster start excluded) is printed beside.

REAL: ``--real-steps`` A/B steps of the embedded target (each: the true baseline against one batching
change, both legs' servers started on the step's node, ``--real-reps`` interleaved LoadGen reps per leg
at the run settings' smallest load, 8 prompts x 16 tokens, one torch thread per server) submitted at once
to N nodes of one CPU each -- one step per node's CPU budget -- through the same ``Cluster`` a run uses
(evidence streamed to and sealed on the head). The figure is the wall time until every step is back. On a
machine with C cores, N nodes can be at most C times faster, and other load on the machine shares them.

Exits 1 when the simulated study on 2 nodes is under 1.8x or any simulated step's verdict differs; the
real figure is reported, not judged.
"""

from __future__ import annotations

import argparse
import os
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


REAL_CHANGES = ({"max_batch_size": 2}, {"max_batch_size": 4}, {"max_batch_size": 8}, {"max_batch_size": 16},
                {"prompt_lookup": True}, {"attn_implementation": "eager"})


def real(nodes: int, steps: int, reps: int, root: Path) -> dict[str, Any]:
    """``steps`` real embedded A/B steps submitted at once to ``nodes`` one-CPU nodes; their wall time."""
    from perfwarden.formats import seal
    from perfwarden.harness.target_config import EmbeddedConfig
    from perfwarden.harness.targets import prepare_weights
    from perfwarden.harness.labs.embedded import EmbeddedLab
    from perfwarden.harness.labs.lab import LegPlan
    from perfwarden.orchestrator import cluster
    from perfwarden.orchestrator.lab_spec import lab_settings
    from perfwarden.orchestrator.settings import RunSettings

    settings = RunSettings(target="embedded", base_config={"threads": 1}, reps=reps)
    base = {**EmbeddedConfig.defaults(), "threads": 1}
    prepare_weights(base)  # converted once here, not timed
    run = root / f"real-{nodes}"
    plans = [[LegPlan(leg=f"s{i}-base", role="baseline", config=EmbeddedConfig.of(base)),
              LegPlan(leg=f"s{i}-cand", role="candidate",
                      config=EmbeddedConfig.of({**base, **REAL_CHANGES[i % len(REAL_CHANGES)]}), parent=f"s{i}-base")]
             for i in range(steps)]
    with cluster.simulated(nodes):
        seal.begin(run)
        view = cluster.Cluster(run, EmbeddedLab.from_settings(lab_settings(settings)))
        try:
            started = time.perf_counter()
            for legs in plans:
                view.submit(legs, reps)
            status = [view.measure(legs, reps) for legs in plans]
            wall = time.perf_counter() - started
        finally:
            view.close()
            seal.forget(run)
    spans = sorted(view.spans.values())
    return {"nodes": nodes, "wall_s": wall, "status": status, "nodes_used": len(set(view.nodes.values())),
            "step_s": [b - a for a, b in spans]}


def simulated_part(args: argparse.Namespace, figures: list[record.Figure]) -> bool:
    counts = [int(n) for n in args.nodes.split(",") if n.strip()]
    print(f"SIMULATED scale-out (reps sleep {args.rep_delay} s, no model runs; the study's wall time):")
    results = []
    with tempfile.TemporaryDirectory(prefix="pw-scale-out-") as tmp:
        for n in counts:
            r = one(n, args.steps, args.rep_delay, Path(tmp))
            results.append(r)
            print(f"  {n} node(s): study {r['study_s']:6.1f}s, whole run {r['run_s']:6.1f}s, {r['steps']} steps, "
                  f"all sealed: {r['sealed']}", flush=True)
    base = results[0]
    same = all(r["verdicts"] == base["verdicts"] for r in results)
    for r in results[1:]:
        print(f"  SIMULATED {r['nodes']} vs {base['nodes']} node(s): study {base['study_s'] / r['study_s']:.2f}x faster, "
              f"whole run {base['run_s'] / r['run_s']:.2f}x")
    print(f"  identical verdicts for identical steps ({len(base['verdicts'])} steps): {'yes' if same else 'NO'}")
    for lever, verdict in sorted(base["verdicts"].items()):
        print(f"    {lever}: {verdict[0]} {verdict[1]} {list(verdict[2])}")
    two = next((r for r in results if r["nodes"] == 2), None)
    one_node = next((r for r in results if r["nodes"] == 1), None)
    figures += [record.Figure(
        f"SIMULATED study wall time on {r['nodes']} node(s), {args.steps} steps, a rep {args.rep_delay:g} s",
        f"**{r['study_s']:.1f} s** ({base['study_s'] / r['study_s']:.2f}x {base['nodes']} node(s)); whole run "
        f"{r['run_s']:.1f} s; every verdict sealed: {'yes' if r['sealed'] else 'NO'}") for r in results]
    figures.append(record.Figure(f"SIMULATED: the same verdicts for the same {len(base['verdicts'])} steps on "
                                 f"{args.nodes} nodes", "yes" if same else "NO"))
    return same and (two is None or one_node is None or one_node["study_s"] / two["study_s"] >= TARGET_SPEEDUP)


def real_part(args: argparse.Namespace, figures: list[record.Figure]) -> None:
    counts = [int(n) for n in args.real_nodes.split(",") if n.strip()]
    print(f"REAL scale-out ({args.real_steps} embedded A/B steps, {args.real_reps} reps per leg, one torch thread per "
          f"server, 1 CPU per node; {os.cpu_count()} cores here, load average {os.getloadavg()[0]:.1f} at start):")
    results = []
    with tempfile.TemporaryDirectory(prefix="pw-scale-out-real-") as tmp:
        for n in counts:
            r = real(n, args.real_steps, args.real_reps, Path(tmp))
            results.append(r)
            failed = [leg for st in r["status"] for leg, v in st.items() if v != "ok"]
            print(f"  {n} node(s): {r['wall_s']:6.1f}s for {args.real_steps} steps on {r['nodes_used']} node(s) "
                  f"(each step {min(r['step_s']):.0f}-{max(r['step_s']):.0f}s; failed legs: {failed or 'none'}; "
                  f"load average now {os.getloadavg()[0]:.1f})", flush=True)
    for r in results[1:]:
        print(f"  REAL {r['nodes']} vs {results[0]['nodes']} node(s): {results[0]['wall_s'] / r['wall_s']:.2f}x faster")
    figures += [record.Figure(
        f"REAL wall time of {args.real_steps} embedded A/B steps ({args.real_reps} reps per leg) on {r['nodes']} "
        f"one-CPU node(s)", f"**{r['wall_s']:.1f} s** ({results[0]['wall_s'] / r['wall_s']:.2f}x "
        f"{results[0]['nodes']} node(s)); failed legs: "
        f"{sum(v != 'ok' for st in r['status'] for v in st.values())}") for r in results]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,4")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rep-delay", type=float, default=1.5)
    parser.add_argument("--real-nodes", default="1,2")
    parser.add_argument("--real-steps", type=int, default=4)
    parser.add_argument("--real-reps", type=int, default=2)
    parser.add_argument("--skip-simulated", action="store_true")
    parser.add_argument("--skip-real", action="store_true")
    record.add_flag(parser)
    args = parser.parse_args()
    ok = True
    figures: list[record.Figure] = []
    if not args.skip_simulated:
        ok = simulated_part(args, figures)
    if not args.skip_real:
        real_part(args, figures)
    record.record("scale_out.py", figures, args.record)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
