"""How good a configuration each sampler banks within a budget of A/B steps, against the exhaustive grid's
best, on several response surfaces, over many seeds.

    python benchmarks/search_quality.py [--budget 24] [--seeds 0-9] [--surfaces smooth,recorded]
                                        [--samplers tpe,random,grid,coordinate]

Each search is the full graph on the synthetic target (orchestrator/simlab.py): real A/B legs with seeded
rep noise (1% CV), the real auditor, and only an audited PASS is banked; every sampler gets the same
budget of steps (``max_proposals``). The synthetic target serves a *surface*: the throughput factor of a
whole configuration of ``KNOBS`` (80 configurations). Surfaces:

- ``smooth``: each knob has its own effect (batching helps with diminishing returns, waiting costs a
  little, prompt lookup helps, eager attention costs 1%); nothing in it is built against any sampler --
  one knob at a time reaches its best;
- ``recorded``: the embedded target's real median throughput at every configuration of the grid, measured
  by ``benchmarks/record_surface.py`` and saved in ``benchmarks/data/embedded_surface.json`` (how, when and
  where it was measured, the machine's load and drift are in that file), as a factor of the true
  baseline's throughput at the time (its witnesses, measured every few configurations, interpolated);
- ``interacting``: hand-written so that one knob at a time stalls (a larger batch only fills when the
  scheduler waits; prompt lookup helps at small batches only).

``--objective goodput``: every search optimizes request goodput at the SLO ``GOODPUT_SLO`` (TTFT at most
130 ms) instead of output throughput. The simulated TTFT is modelled, not measured, on every surface: the
lab's 80 ms median, multiplied by ``TTFT_EFFECTS`` (larger batches and longer waits delay the first token),
with the lab's +-5% spread over its 16 requests. A configuration's noise-free goodput is its surface factor
times the share of its requests within the SLO (``goodput_factor``); the effects are chosen so that every
configuration is at least 7% inside or outside the SLO (all or none of its requests meet it), and so that
the SLO binds: the throughput surfaces' best configurations (batch 16) break it, so the grid's best under
goodput is another configuration.

Samplers: ``tpe`` (the default), ``random`` (uniform draws of the same study), ``grid`` (every grid point
once, in a seeded order, cut at the budget) and ``coordinate`` (one knob at a time). The figure per search:
the banked configuration's true gain on the surface (noise-free) as a share of the grid's best gain. The
output gives, per surface and sampler, the median and the worst seed's share, and TPE's margin over random
search (difference of medians, and the per-seed paired difference). Exits 1 when, on the recorded
surface, TPE's median share is not above random search's.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import record

KNOBS: dict[str, tuple[Any, ...]] = {"max_batch_size": (1, 2, 4, 8, 16), "batch_wait_ms": (0.0, 5.0, 20.0, 40.0),
                                     "prompt_lookup": (False, True), "attn_implementation": ("sdpa", "eager")}
RECORDED = Path(__file__).resolve().parent / "data" / "embedded_surface.json"
SAMPLERS = ("tpe", "random", "grid", "coordinate")
BASELINE = {"max_batch_size": 1, "batch_wait_ms": 0.0, "prompt_lookup": False, "attn_implementation": "sdpa"}
"""The embedded target's defaults for ``KNOBS``: where every search starts."""
Surface = Callable[[dict[str, Any]], float]
TTFT_EFFECTS: dict[str, dict[Any, float]] = {"max_batch_size": {1: 1.0, 2: 1.1, 4: 1.25, 8: 1.45, 16: 2.6},
                                             "batch_wait_ms": {0.0: 1.0, 5.0: 1.04, 20.0: 1.2, 40.0: 1.8}}
"""Multipliers of the simulated median TTFT (``--objective goodput``): products 1.0-1.51 meet the SLO,
1.74 and above break it (no product in between)."""
GOODPUT_SLO = "ttft_ms=130"


def interacting(config: dict[str, Any]) -> float:
    """Throughput as a factor of the baseline (batch 1, no wait, no prompt lookup, sdpa): built so that one
    knob at a time stalls."""
    fill = min(int(config.get("max_batch_size", 1)), 1.0 + float(config.get("batch_wait_ms", 0.0)) / 4.0)
    factor = min(fill, 8.0) ** 0.3 * (1.0 - 0.001 * float(config.get("batch_wait_ms", 0.0)))
    if config.get("prompt_lookup"):
        factor *= 1.12 if fill <= 2.0 else 0.95
    if config.get("attn_implementation") == "eager":
        factor *= 0.99
    return factor


def smooth(config: dict[str, Any]) -> float:
    """Each knob on its own: batching with diminishing returns, a small cost per ms waited, prompt lookup
    +8%, eager attention -1%."""
    factor = int(config.get("max_batch_size", 1)) ** 0.25 * (1.0 - 0.002 * float(config.get("batch_wait_ms", 0.0)))
    if config.get("prompt_lookup"):
        factor *= 1.08
    if config.get("attn_implementation") == "eager":
        factor *= 0.99
    return factor


def _key(config: dict[str, Any]) -> str:
    return repr(tuple((k, config[k]) for k in KNOBS))


def witness_at(witnesses: list[dict[str, Any]], when: float) -> float:
    """The true baseline's throughput at clock time ``when``: the witnesses' medians interpolated in time (the
    nearest one before the first or after the last)."""
    points = sorted((w["started_at"], w["median"]) for w in witnesses)
    if when <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if when <= t1:
            return v0 + (v1 - v0) * (when - t0) / (t1 - t0)
    return points[-1][1]


@functools.lru_cache(maxsize=1)
def _recorded_table(path: Path = RECORDED) -> tuple[dict[str, float], dict[str, Any]]:
    """The recorded figures as factors of the true baseline's throughput *at the time each was measured*
    (the witnesses interpolated): the machine's load drifted over the recording far more than most knobs
    move throughput, and dividing by one baseline figure would make the surface the drift's. Also the
    file's header."""
    data = json.loads(path.read_text())
    table = {_key(row["knobs"]): row["median"] / witness_at(data["witnesses"], row["started_at"])
             for row in data["rows"]}
    missing = [c for c in grid() if _key(c) not in table]
    if missing:
        raise SystemExit(f"{path} lacks {len(missing)} configurations of the grid (e.g. {missing[0]}): record it whole")
    header = {k: data[k] for k in ("how", "when", "where", "load", "drift")}
    return table, header


def recorded(config: dict[str, Any]) -> float:
    """The embedded target's measured throughput at ``config`` as a factor of its true baseline's."""
    return _recorded_table()[0][_key({k: config.get(k) for k in KNOBS})]


SURFACES: dict[str, Surface] = {"smooth": smooth, "recorded": recorded, "interacting": interacting}


def grid() -> list[dict[str, Any]]:
    return [dict(zip(KNOBS, values)) for values in itertools.product(*KNOBS.values())]


def grid_best(surface: Surface) -> tuple[float, dict[str, Any]]:
    best = max(grid(), key=surface)
    return surface(best), best


def ttft_factor(config: dict[str, Any]) -> float:
    """The simulated median TTFT's multiplier at ``config`` (``TTFT_EFFECTS``)."""
    return math.prod(table.get(config.get(knob), 1.0) for knob, table in TTFT_EFFECTS.items())


def goodput_factor(surface: Surface) -> Surface:
    """``surface`` under the goodput objective: the throughput factor times the share of the lab's requests
    whose TTFT meets ``GOODPUT_SLO`` (goodput = good requests / duration, and the lab's requests all carry
    the same tokens, so it scales as throughput times that share)."""
    from perfwarden.formats.slo import parse_slo
    from perfwarden.orchestrator.simlab import BASE_TTFT_MS, REQUESTS_PER_REP
    from perfwarden.orchestrator.synth import _spread

    bound = parse_slo(GOODPUT_SLO).ttft_ms
    assert bound is not None

    def factor(config: dict[str, Any]) -> float:
        ttfts = _spread(BASE_TTFT_MS * ttft_factor(config), REQUESTS_PER_REP, 0.05)
        return surface(config) * sum(t <= bound for t in ttfts) / len(ttfts)

    return factor


def one_run(surface_name: str, sampler: str, seed: int, budget: int, root: Path,
            objective: str = "throughput") -> dict[str, Any]:
    from perfwarden.agents.integrator import final_changes
    from perfwarden.formats.slo import parse_slo
    from perfwarden.orchestrator.runner import run_graph
    from perfwarden.orchestrator.settings import RunSettings
    from perfwarden.orchestrator.simlab import BASE, SyntheticLab

    surface = SURFACES[surface_name]
    effects: dict[str, dict[str, Any]] = {"prompt_lookup": {"tput": 1.0, "accept_length": 1.8}}
    goodput = objective == "goodput"
    if goodput:
        effects.update({knob: {"ttft": table} for knob, table in TTFT_EFFECTS.items()})
    lab = SyntheticLab(effects=effects, surface=surface, seed=seed)
    settings = RunSettings(target="synthetic", kernels=False, levers=list(KNOBS), sampler=sampler, seed=seed,
                           max_proposals=budget, budget_minutes=600, study_batch=1, objective=objective,
                           slo=parse_slo(GOODPUT_SLO) if goodput else None)
    started = time.perf_counter()
    state = run_graph(root / f"{surface_name}-{sampler}-{seed}", settings, lab, capture_logs=True)
    final = {**{k: BASE.get(k) for k in KNOBS}, **final_changes(state["banked"])}
    judged = goodput_factor(surface) if goodput else surface
    return {"steps": len(state["proposals"]), "banked": len(state["banked"]), "final": {k: final[k] for k in KNOBS},
            "factor": judged(final), "wall_s": time.perf_counter() - started}


def share(factor: float, best: float, start: float) -> float:
    """The banked configuration's gain over the starting configuration as a share of the grid's best gain over
    it (1.0: the best found; 0: nothing gained). ``start``: the surface at the true baseline (1.0 on a surface
    written as factors of it; a recorded one measured that configuration separately, noise and all)."""
    return (factor - start) / (best - start)


def summary(shares: dict[str, list[float]], seeds: list[int]) -> list[str]:
    """Per sampler: median and worst seed; then TPE against random search, seed by seed."""
    lines = [f"  {name:<10} median {statistics.median(v):6.1%}   worst seed {min(v):6.1%}   (seeds {seeds[0]}-{seeds[-1]}: "
             + ", ".join(f"{x:.0%}" for x in v) + ")" for name, v in shares.items()]
    if "tpe" in shares and "random" in shares:
        lines.append(f"  TPE - random: {tpe_margin(shares['tpe'], shares['random'])}")
    return lines


def tpe_margin(tpe: list[float], random: list[float]) -> str:
    """TPE's margin over random search, seed against seed: the difference of medians, then the per-seed
    differences' median and worst (their spread), and on how many seeds TPE is ahead or tied."""
    paired = [t - r for t, r in zip(tpe, random)]
    wins = sum(d > 0 for d in paired)
    ties = sum(d == 0 for d in paired)
    return (f"median share {statistics.median(tpe) - statistics.median(random):+.1%} (difference of medians); per seed: "
            f"median {statistics.median(paired):+.1%}, worst {min(paired):+.1%}, best {max(paired):+.1%}; "
            f"TPE ahead on {wins} of {len(paired)} seeds, tied on {ties}")


def _seeds(text: str) -> list[int]:
    if "-" in text and "," not in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",") if s.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=24, help="A/B steps per search (max_proposals)")
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,1,2")
    parser.add_argument("--surfaces", default="smooth,recorded")
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--objective", choices=("throughput", "goodput"), default="throughput",
                        help=f"goodput: request goodput at {GOODPUT_SLO} with a modelled TTFT (module docstring)")
    record.add_flag(parser)
    args = parser.parse_args()
    seeds = _seeds(args.seeds)
    surfaces = [s for s in args.surfaces.split(",") if s]
    samplers = [s for s in args.samplers.split(",") if s]
    print(f"budget: {args.budget} A/B steps per search; {len(grid())} configurations in the grid; seeds {seeds}; "
          f"objective {args.objective}" + (f" at {GOODPUT_SLO} (TTFT modelled: TTFT_EFFECTS)" if args.objective == "goodput" else ""))
    if "recorded" in surfaces:
        print(f"recorded surface: {RECORDED.name}: {json.dumps(_recorded_table()[1])}")
    verdict_ok = True
    tag = f", objective goodput at {GOODPUT_SLO} (modelled TTFT)" if args.objective == "goodput" else ""
    figures: list[record.Figure] = []
    with tempfile.TemporaryDirectory(prefix="pw-search-quality-") as tmp:
        for surface_name in surfaces:
            judged = goodput_factor(SURFACES[surface_name]) if args.objective == "goodput" else SURFACES[surface_name]
            best, where = grid_best(judged)
            start = judged(BASELINE)
            top = sorted((judged(c) for c in grid()), reverse=True)
            near = sum(f - start >= 0.95 * (best - start) for f in top)
            print(f"\n== surface {surface_name}: the true baseline {start:.3f}x; grid best {best:.3f}x at {where}; "
                  f"{near} of {len(top)} configurations within 95% of the best gain")
            shares: dict[str, list[float]] = {s: [] for s in samplers}
            for seed in seeds:
                for sampler in samplers:
                    r = one_run(surface_name, sampler, seed, args.budget, Path(tmp), args.objective)
                    shares[sampler].append(share(r["factor"], best, start))
                    print(f"  {sampler:<10} seed {seed}: {r['steps']:>2} steps, {r['banked']} banked -> {r['factor']:.3f}x, "
                          f"{shares[sampler][-1]:6.1%} of the best gain ({r['wall_s']:.0f}s)", flush=True)
            print(f"-- {surface_name}: share of the grid's best gain banked within {args.budget} steps")
            for line in summary(shares, seeds):
                print(line)
            figures += [record.Figure(
                f"share of the grid's best gain banked within {args.budget} A/B steps, surface {surface_name}{tag}, "
                f"sampler {name}, seeds {args.seeds}",
                f"median **{statistics.median(v):.1%}**, worst seed {min(v):.1%}") for name, v in shares.items()]
            if "tpe" in shares and "random" in shares:
                figures.append(record.Figure(
                    f"TPE's margin over random search within {args.budget} A/B steps, surface {surface_name}{tag}, "
                    f"seeds {args.seeds}", tpe_margin(shares["tpe"], shares["random"])))
            if surface_name == "recorded" and "tpe" in shares and "random" in shares:
                verdict_ok = statistics.median(shares["tpe"]) > statistics.median(shares["random"])
                print(f"TPE beats random search on the recorded surface (median share): {'yes' if verdict_ok else 'NO'}")
    record.record("search_quality.py", figures, args.record)
    return 0 if verdict_ok else 1


if __name__ == "__main__":
    sys.exit(main())
