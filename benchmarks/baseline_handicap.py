"""Why was a step's baseline leg slower than legs of the same configuration? (side by side, one run)

On ``--target vllm`` two of five comparisons had a baseline 20-22% slower than same-config legs of the same
run, on an idle machine, while vLLM's own benchmark client saw no such gap with the partner server idle,
interleaved or stopped. What differs is how the harness measures a leg pair. Every experiment below is
an A/A test -- every server runs the SAME configuration -- so every ratio it prints should be 1.00 within
the noise, and one that is not names a cause. Each is measured the way the lab measures a step
(``harness/labs/server_lab.py`` ``ServerLab``: the target's own server per leg, ``measure_rep`` with the
run's LoadGen settings, ``wait_until_idle`` on every server before each rep), in one run, interleaved.

Candidate causes, and the code that makes each:

1. **Position in a round.** ``ServerLab._measure_together`` ran every round in leg order, so the baseline
   always ran first (right after the partner's rep, or after the parity dumps for rep 0) and slow drift
   favoured the leg that ran second by half a slot. Measured: reps run second in their round over reps run
   first (rounds alternate, so each server is first half the time). The lab now alternates (``round_order``).
2. **Start order / concurrent start.** The lab starts every leg's server at once (a thread pool, legs in
   order); on a CPU target they load and compile (vLLM: torch.compile, its compile cache under
   ``~/.cache/vllm`` shared by every server of the machine) on the same cores at the same time, and the
   first-submitted may finish first and write what the other reads. Measured: the server submitted second
   over the first (concurrent start, as the lab does), and the second-started over the first-started when
   started one after the other.
3. **Warm-up.** No rep is discarded: the parity dump (one server at a time, ``parity_tokens``, concurrency
   4) is the only traffic before rep 0, not the measured load's batch shape. Measured: each server's first
   rep over its later reps.
4. **The process.** Every step starts fresh servers, so the same configuration is measured in a different
   process as a step's candidate and as the next step's baseline; anything fixed at process start (thread
   placement, memory, compiled code) is one draw per leg, which rep-level statistics cannot see. Measured:
   the spread of per-process medians of fresh pairs against the spread within one process.
5. **The partner's configuration.** Every experiment above is symmetric, so it cannot see a leg slowed by
   what its partner is. The handicaps seen were one-sided: the same ``max_num_seqs=2`` served 67.6-71.0
   tok/s beside a ``max_num_seqs=1`` partner and 56.7-57.2 beside a ``max_num_seqs=4`` one, and the
   baseline config 31-33 beside the final bundle where it gave 36-40 beside itself. Measured (with
   ``--partner-set``): one configuration's server beside a partner of its own configuration and beside a
   partner of the other (fresh pairs, alternating), the ratio of its medians, and the CPU the idle partner's
   processes used during its reps (``/proc/<pid>/stat``; the lab's contention sample excludes both servers'
   processes, so it could not see this).

6. **How many servers a step holds up.** A bundle step starts four servers at once (the bundle, its
   baseline, the TEST04 caching audit and its control); every other step two. In a ``--target vllm`` run
   (max_num_seqs 1 -> 2, load 3-5 from the run itself) both the bundle's baseline and the bundle were
   10-15% slower than their same-config legs of two-server steps. Measured (with ``--crowd N``): every
   server of one configuration, in groups of two and of ``N`` started at once, alternating, every server
   measured in rounds as the lab measures a step's legs; the ratio of the crowd's reps to the pairs', and the
   CPU the idle servers used during each rep.

    python benchmarks/baseline_handicap.py --target embedded [--rounds 4] [--restarts 3] [--samples 8]
        [--max-tokens 16] [--json out.json]
    python benchmarks/baseline_handicap.py --target vllm --model DIR [--vllm-python PY] [--set max_num_seqs=2]
        [--partner-set max_num_seqs=4 [--only-partner]] [--crowd 4 [--crowd-groups 4] [--only-crowd]]

Needs a quiet machine for figures that mean anything: it prints the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfwarden.formats.records import RunDir
from perfwarden.harness.contention import read_pid_stats
from perfwarden.harness.labs.embedded import EmbeddedLab
from perfwarden.harness.labs.lab import LegPlan
from perfwarden.harness.labs.server_lab import ServerLab
from perfwarden.harness.loadgen_client import measure_rep
from perfwarden.harness.prompts import varied_prompts
from perfwarden.harness.target_config import parse_set_args
from perfwarden.harness.targets import ServerTarget
from perfwarden.orchestrator.lab_spec import lab_settings
from perfwarden.orchestrator.settings import RunSettings


@dataclass(frozen=True)
class Rep:
    """One measured rep: which experiment, which server process, its round and position, its throughput."""

    experiment: str
    server: str
    process: int
    round: int
    position: int
    """0: first in its round; 1: second."""
    started: int
    """0: the server submitted (or started) first; 1: second."""
    tput: float
    partner_cpu_s: float | None = None
    """CPU seconds the other server's processes used during this rep (None: not measured)."""


def make_lab(args: argparse.Namespace) -> ServerLab:
    settings = RunSettings(target=args.target, base_config=parse_set_args(args.set), model=args.model,
                           offline_samples=args.samples, max_tokens=args.max_tokens)
    if args.target == "vllm":
        from perfwarden.harness.labs.vllm import VLLMLab  # lazy: only a vLLM run needs it

        python = args.vllm_python or os.environ.get("PERFWARDEN_VLLM_PYTHON")
        if not args.model or not python:
            sys.exit("--target vllm needs --model DIR and --vllm-python PY (or PERFWARDEN_VLLM_PYTHON)")
        return VLLMLab.from_settings(lab_settings(settings), python=python)
    return EmbeddedLab.from_settings(lab_settings(settings))


def start(lab: ServerLab, root: Path, names: list[str], config: dict[str, Any], together: bool) -> dict[str, ServerTarget]:
    """The servers of ``names``, started at once (a thread pool, in order: as the lab does) or one after
    the other."""
    paths = RunDir(root)
    targets = {name: lab.make_target(paths.leg_dir(name), lab.config_model.of(config)) for name in names}
    t0 = time.time()
    if together:
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            list(pool.map(lambda name: targets[name].start(), names))
    else:
        for name in names:
            targets[name].start()
    progress(f"started {names} ({'at once' if together else 'one after the other'}) in {time.time() - t0:.0f} s")
    return targets


def rounds(lab: ServerLab, root: Path, experiment: str, targets: dict[str, ServerTarget], n: int,
           process: int, first_round: int = 0) -> list[Rep]:
    """``n`` rounds over the servers (submitted/started order = dict order), the order alternating each
    round, every rep measured as the lab measures one."""
    names = list(targets)
    pids = [pid for t in targets.values() for pid in t.pids()]
    prompts = varied_prompts()  # the lab's prompt set for a step's legs (LoadGen draws each rep's samples)
    out = []
    for k in range(first_round, first_round + n):
        order = names if k % 2 == 0 else names[::-1]
        for position, name in enumerate(order):
            others = [pid for other, t in targets.items() if other != name for pid in t.pids()]
            before = partner_ticks(others)
            line = measure_rep(RunDir(root), name, k, targets[name].base_url, prompts, lab.load,
                               dataset_name="perfwarden-varied", exclude_pids=pids)
            if line is None:
                raise RuntimeError(f"rep {k} of {name!r} was already on disk: use a fresh scratch directory")
            partner_s = (partner_ticks(others) - before) / os.sysconf("SC_CLK_TCK")
            out.append(Rep(experiment, name, process, k, position, names.index(name), float(line["output_throughput"]),
                           partner_s))
            progress(f"{name} rep {k}: {out[-1].tput:.2f} tok/s, partner used {partner_s:.2f} CPU s")
    return out


def partner_ticks(pids: list[int]) -> int:
    """utime + stime of ``pids`` now, in clock ticks (a process gone since is left out of both reads)."""
    stats = read_pid_stats()
    return sum(stats[p].cpu_ticks for p in pids if p in stats)


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def stop(targets: dict[str, ServerTarget]) -> None:
    for target in targets.values():
        target.stop()


def run_experiments(lab: ServerLab, root: Path, config: dict[str, Any], n_rounds: int, restarts: int) -> list[Rep]:
    reps: list[Rep] = []
    for experiment, together in (("together", True), ("sequential", False)):
        targets = start(lab, root / experiment, [f"{experiment}-1", f"{experiment}-2"], config, together)
        try:
            reps += rounds(lab, root / experiment, experiment, targets, n_rounds, process=0)
        finally:
            stop(targets)
    for p in range(restarts):  # fresh pairs: which is submitted first alternates with the pair
        names = [f"restart{p}-1", f"restart{p}-2"]
        targets = start(lab, root / "restart", names if p % 2 == 0 else names[::-1], config, True)
        try:
            reps += rounds(lab, root / "restart", "restart", targets, 2, process=p + 1, first_round=p * 2)
        finally:
            stop(targets)
    return reps


def run_partner(lab: ServerLab, root: Path, config: dict[str, Any], partner: dict[str, Any], n_rounds: int,
                pairs: int) -> list[Rep]:
    """``pairs`` fresh pairs, alternating: the measured configuration beside a partner of its own
    configuration (server ``*-same``) and beside a partner of ``partner`` (``*-other``); ``n_rounds`` rounds
    each. The measured server is submitted first in every pair, so start order is the same on both sides."""
    reps: list[Rep] = []
    for p in range(pairs):
        kind = "same" if p % 2 == 0 else "other"
        names = [f"pair{p}-measured", f"pair{p}-{kind}"]
        paths = RunDir(root / "partner")
        targets = {names[0]: lab.make_target(paths.leg_dir(names[0]), lab.config_model.of(config)),
                   names[1]: lab.make_target(paths.leg_dir(names[1]),
                                             lab.config_model.of(config if kind == "same" else partner))}
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda name: targets[name].start(), names))
        progress(f"started {names} in {time.time() - t0:.0f} s")
        try:
            reps += rounds(lab, root / "partner", f"partner-{kind}", targets, n_rounds, process=p + 1,
                           first_round=p * n_rounds)
        finally:
            stop(targets)
    return reps


def run_crowd(lab: ServerLab, root: Path, config: dict[str, Any], n_rounds: int, groups: int, size: int) -> list[Rep]:
    """``groups`` fresh groups of one configuration, alternating between two servers (``crowd-pair``) and
    ``size`` servers (``crowd-crowd``), each group started at once and measured for ``n_rounds`` rounds over
    every one of its servers, as the lab measures a step's legs."""
    reps: list[Rep] = []
    for g in range(groups):
        kind = "pair" if g % 2 == 0 else "crowd"
        names = [f"group{g}-{i}" for i in range(2 if kind == "pair" else size)]
        targets = start(lab, root / "crowd", names, config, True)
        try:
            reps += rounds(lab, root / "crowd", f"crowd-{kind}", targets, n_rounds, process=g + 1,
                           first_round=g * n_rounds)
        finally:
            stop(targets)
    return reps


# ------------------------------------------------------------------------------------------ figures


def ratio(num: list[float], den: list[float]) -> float | None:
    """Median over median; None when either side is empty."""
    return statistics.median(num) / statistics.median(den) if num and den else None


def spread_pct(values: list[float]) -> float | None:
    """(max - min) / median, in percent; None below two values."""
    return (max(values) - min(values)) / statistics.median(values) * 100.0 if len(values) >= 2 else None


def figures(reps: list[Rep]) -> list[tuple[str, float | None, str]]:
    """(what, figure, how it was measured): each should be 1.00 (a ratio) or small (a spread)."""
    def of(experiment: str, **where: int) -> list[float]:
        return [r.tput for r in reps if r.experiment == experiment and all(getattr(r, k) == v for k, v in where.items())]

    pair = [r for r in reps if r.experiment in ("together", "sequential")]
    later = [r.tput for r in pair if r.round > 0]
    per_process: dict[tuple[int, str], list[float]] = {}
    for r in reps:
        if r.experiment == "restart":
            per_process.setdefault((r.process, r.server), []).append(r.tput)
    medians = [statistics.median(v) for v in per_process.values()]
    within = [s for s in (spread_pct(v) for v in per_process.values()) if s is not None]
    return [
        ("position: second in round / first", ratio([r.tput for r in pair if r.position == 1],
                                                    [r.tput for r in pair if r.position == 0]),
         "both pairs, rounds alternating (each server first half the time)"),
        ("concurrent start: submitted second / first", ratio(of("together", started=1), of("together", started=0)),
         "two servers started at once, as the lab starts a step's legs"),
        ("sequential start: started second / first", ratio(of("sequential", started=1), of("sequential", started=0)),
         "the second server started once the first was up"),
        ("warm-up: first rep / later reps", ratio([r.tput for r in pair if r.round == 0], later),
         "each server's rep 0 against its reps 1.."),
        ("process: spread of per-process medians (%)", spread_pct(medians),
         f"{len(medians)} fresh server processes, 2 reps each"),
        ("process: median spread within one process (%)", statistics.median(within) if within else None,
         "the same processes' own reps"),
        *partner_figures(reps),
        *crowd_figures(reps),
    ]


def crowd_figures(reps: list[Rep]) -> list[tuple[str, float | None, str]]:
    """Every rep of a server among ``N`` over every rep of one in a pair, and the idle servers' CPU (empty
    without the crowd experiment)."""
    pair = [r for r in reps if r.experiment == "crowd-pair"]
    crowd = [r for r in reps if r.experiment == "crowd-crowd"]
    if not pair or not crowd:
        return []

    return [
        ("crowd: among N servers / in a pair", ratio([r.tput for r in crowd], [r.tput for r in pair]),
         f"{len(crowd)} and {len(pair)} reps, groups alternating, every server measured"),
        ("crowd: idle servers' CPU s per rep, pair (median)", median_cpu(pair), "the other servers' processes, /proc/<pid>/stat"),
        ("crowd: idle servers' CPU s per rep, crowd (median)", median_cpu(crowd), "the other servers' processes"),
    ]


def median_cpu(reps: list[Rep]) -> float | None:
    """The median CPU seconds the other servers used during ``reps`` (None when none was read)."""
    values = [r.partner_cpu_s for r in reps if r.partner_cpu_s is not None]
    return statistics.median(values) if values else None


def partner_figures(reps: list[Rep]) -> list[tuple[str, float | None, str]]:
    """The measured configuration beside the other configuration over beside its own, and what each idle
    partner burned during the measured server's reps (empty without the partner experiment)."""
    def measured(kind: str) -> list[Rep]:
        return [r for r in reps if r.experiment == f"partner-{kind}" and r.server.endswith("-measured")]

    same, other = measured("same"), measured("other")
    if not same or not other:
        return []

    return [
        ("partner: beside the other config / beside its own", ratio([r.tput for r in other], [r.tput for r in same]),
         f"{len(other)} and {len(same)} reps of the measured configuration, fresh pairs alternating"),
        ("partner CPU s per rep, own config (median)", median_cpu(same), "the idle partner's processes, /proc/<pid>/stat"),
        ("partner CPU s per rep, other config (median)", median_cpu(other), "the idle partner's processes, /proc/<pid>/stat"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("embedded", "vllm"), default="embedded")
    parser.add_argument("--model", help="vllm: the weights directory every server serves")
    parser.add_argument("--vllm-python", help="vllm: the vLLM environment's interpreter (or PERFWARDEN_VLLM_PYTHON)")
    parser.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                        help="the configuration every server runs (the target's defaults otherwise)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per pair (each server measured once a round)")
    parser.add_argument("--restarts", type=int, default=3, help="fresh server pairs for the process experiment")
    parser.add_argument("--samples", type=int, default=8, help="prompts per rep (the run's offline_samples)")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per request (the run's max_tokens)")
    parser.add_argument("--partner-set", action="append", default=[], metavar="KNOB=VALUE",
                        help="also measure the configuration beside a partner of this one (the partner experiment)")
    parser.add_argument("--partner-pairs", type=int, default=4, help="fresh pairs of the partner experiment, alternating")
    parser.add_argument("--only-partner", action="store_true", help="run only the partner experiment")
    parser.add_argument("--crowd", type=int, default=0, metavar="N",
                        help="also measure servers in groups of N against groups of two (the crowd experiment)")
    parser.add_argument("--crowd-groups", type=int, default=4, help="fresh groups of the crowd experiment, alternating")
    parser.add_argument("--only-crowd", action="store_true", help="run only the crowd experiment")
    parser.add_argument("--json", type=Path, help="also write every rep and figure here")
    args = parser.parse_args()
    if args.only_partner and not args.partner_set:
        sys.exit("--only-partner needs --partner-set KNOB=VALUE")
    if args.only_crowd and not args.crowd:
        sys.exit("--only-crowd needs --crowd N")
    if args.crowd and not (3 <= args.crowd <= 6 and 2 <= args.crowd_groups <= 10):
        sys.exit("--crowd must be 3..6 and --crowd-groups 2..10 (the load is bounded)")
    if not 2 <= args.partner_pairs <= 10:
        sys.exit("--partner-pairs must be 2..10 (the load is bounded)")
    if not 2 <= args.rounds <= 20 or not 0 <= args.restarts <= 10:
        sys.exit("--rounds must be 2..20 and --restarts 0..10 (the load is bounded)")
    lab = make_lab(args)
    config = lab.base_config().model_dump()
    partner = lab.config_model.of({**config, **parse_set_args(args.partner_set)}).model_dump()
    lab.prepare([LegPlan(leg="handicap", role="baseline", config=lab.base_config())])  # weights converted once, up front
    load_before, t0 = os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory(prefix="pw-handicap-") as scratch:
        only = args.only_partner or args.only_crowd
        reps = [] if only else run_experiments(lab, Path(scratch), config, args.rounds, args.restarts)
        if args.crowd:
            reps += run_crowd(lab, Path(scratch), config, args.rounds, args.crowd_groups, args.crowd)
        if args.partner_set:
            reps += run_partner(lab, Path(scratch), config, partner, args.rounds, args.partner_pairs)
    load_after = os.getloadavg()
    print(f"target {args.target}, config {json.dumps({k: v for k, v in config.items() if k in dict(parse_set_args(args.set))})} "
          f"(else the target's defaults); {len(reps)} reps in {time.time() - t0:.0f} s; "
          f"load average {load_before[0]:.2f} at start, {load_after[0]:.2f} at end on {os.cpu_count()} cores")
    print("Every measured server runs the same configuration: a ratio should read 1.00, a spread a few percent.")
    rows = figures(reps)
    for what, value, how in rows:
        shown = "-" if value is None else (f"{value:.3f}" if "spread" not in what else f"{value:.1f}%")
        print(f"  {what:<48} {shown:>8}   ({how})")
    if args.json:
        args.json.write_text(json.dumps({"reps": [asdict(r) for r in reps],
                                         "figures": [{"what": w, "value": v, "how": h} for w, v, h in rows],
                                         "loadavg": [load_before[0], load_after[0]]}, indent=1))


if __name__ == "__main__":
    main()
