"""Record the embedded target's real response surface over the whole knob grid of
``benchmarks/search_quality.py`` (its ``KNOBS``), as data that benchmark replays.

    python benchmarks/record_surface.py [--out benchmarks/data/embedded_surface.json] [--reps 3] [--threads 1]

Every configuration of the grid is served by the real embedded server (SmolLM2-135M on torch, sandboxed
like any leg) and measured with the harness's own rep (``harness.loadgen_client.measure_rep``: LoadGen
Offline, the run settings' smallest load: 8 prompts of the varied set, 16 output tokens), ``--reps``
times; its figure is the median output throughput (tok/s). The grid is visited in a seeded shuffled
order, so the machine's drift over the recording does not line up with any knob, and the true baseline
(the target's defaults) is measured again every ``--witness-every`` configurations: the spread of those
witnesses is the recording's drift, printed and saved beside the figures. Each row keeps its reps, the
contention the harness sampled around each, and the load average, so a reader can judge the noise.

The output names how, when and where it was measured (host, CPU, cores, torch, perfwarden commit, load
average at start and end). It is CPU-heavy (~80 server starts and 240+ reps).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_quality import KNOBS  # noqa: E402  (the grid the search benchmark scores against)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "data" / "embedded_surface.json"
ORDER_SEED = 29


def grid() -> list[dict[str, Any]]:
    return [dict(zip(KNOBS, values)) for values in itertools.product(*KNOBS.values())]


def where() -> dict[str, Any]:
    """The machine and code the figures come from."""
    import torch

    from perfwarden.harness import node_identity

    info = node_identity.stamp({"version": "embedded"})["node"]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True).stdout.strip())
    return {"host_id": info["host_id"], "cpu_model": info["cpu_model"], "cpu_cores": info["cpu_cores"],
            "python": platform.python_version(), "torch": torch.__version__,
            "perfwarden_commit": commit + ("+dirty" if dirty else "")}


def slim(contention: Any) -> Any:
    """A rep's contention samples (before, after) as their load figures; the busy-process lists stay in the run."""
    if not isinstance(contention, dict):
        return contention
    keep = ("loadavg", "cpu_busy_pct", "procs_running")
    return {when: {k: sample.get(k) for k in keep} for when, sample in contention.items() if isinstance(sample, dict)}


def measure_config(run: Path, name: str, config: dict[str, Any], reps: int, lab: Any) -> dict[str, Any]:
    """One configuration on its own server: ``reps`` LoadGen reps, their throughputs and contention."""
    from perfwarden.formats.records import RunDir
    from perfwarden.harness.loadgen_client import measure_rep
    from perfwarden.harness.prompts import varied_prompts

    paths = RunDir(run)
    paths.leg_dir(name).mkdir(parents=True, exist_ok=True)
    target = lab.make_target(paths.leg_dir(name), lab.config_model.of(config))
    started = time.time()
    target.start()
    try:
        lines = [measure_rep(paths, name, k, target.base_url, varied_prompts(), lab.load,
                             dataset_name="perfwarden-varied", exclude_pids=target.pids()) for k in range(reps)]
    finally:
        target.stop()
    tputs = [float(line["output_throughput"]) for line in lines if line is not None]
    return {"leg": name, "config": config, "reps": tputs, "median": statistics.median(tputs),
            "contention": [slim(line.get("contention")) for line in lines if line is not None],
            "loadavg_1m": os.getloadavg()[0], "started_at": started, "seconds": time.time() - started}


def record(reps: int, threads: int, witness_every: int, limit: int | None) -> dict[str, Any]:
    from perfwarden.formats import seal
    from perfwarden.harness.labs.embedded import EmbeddedLab
    from perfwarden.harness.target_config import EmbeddedConfig
    from perfwarden.harness.targets import prepare_weights
    from perfwarden.orchestrator.lab_spec import lab_settings
    from perfwarden.orchestrator.settings import RunSettings

    settings = RunSettings(target="embedded", base_config={"threads": threads})  # the run's smallest load
    lab = EmbeddedLab.from_settings(lab_settings(settings))
    base = {**EmbeddedConfig.defaults(), "threads": threads}
    configs = grid()
    random.Random(ORDER_SEED).shuffle(configs)
    configs = configs[:limit] if limit else configs
    prepare_weights(base)
    load_start = os.getloadavg()
    begun = datetime.now(timezone.utc)
    machine = where()  # the code as it is when the recording starts (what every server loads)
    rows, witnesses = [], []
    with tempfile.TemporaryDirectory(prefix="pw-surface-") as tmp:
        os.environ.setdefault("PERFWARDEN_KEY_DIR", str(Path(tmp) / "keys"))
        run = Path(tmp) / "run"
        seal.begin(run)
        for i, knobs in enumerate(configs):
            if i % witness_every == 0:
                witnesses.append(measure_config(run, f"witness-{i}", base, reps, lab))
                print(f"witness (true baseline) before config {i}: {witnesses[-1]['median']:.1f} tok/s "
                      f"{[round(x, 1) for x in witnesses[-1]['reps']]}", flush=True)
            row = measure_config(run, f"cfg-{i}", {**base, **knobs}, reps, lab)
            row["knobs"] = knobs
            rows.append(row)
            print(f"[{i + 1}/{len(configs)}] {knobs}: {row['median']:.1f} tok/s {[round(x, 1) for x in row['reps']]} "
                  f"(load {row['loadavg_1m']:.1f}, {row['seconds']:.0f}s)", flush=True)
        witnesses.append(measure_config(run, "witness-end", base, reps, lab))
    medians = [w["median"] for w in witnesses]
    return {
        "what": "median output throughput (tok/s) of the embedded target for every configuration of "
                "benchmarks/search_quality.py's KNOBS grid; other knobs at the target's defaults",
        "how": {"script": "benchmarks/record_surface.py", "reps_per_config": reps, "threads": threads,
                "scenario": lab.load.scenario, "offline_samples": settings.offline_samples,
                "max_tokens": settings.max_tokens, "order": f"shuffled, seed {ORDER_SEED}",
                "witness_every": witness_every},
        "when": {"started": begun.isoformat(timespec="seconds"),
                 "ended": datetime.now(timezone.utc).isoformat(timespec="seconds")},
        "where": machine,
        "load": {"loadavg_at_start": list(load_start), "loadavg_at_end": list(os.getloadavg()),
                 "note": "shared 2-core machine: other engineers' tests ran meanwhile"},
        "drift": {"witness_medians": medians,
                  "spread_pct": 100.0 * (max(medians) - min(medians)) / statistics.median(medians)},
        "baseline": {k: base[k] for k in KNOBS},
        "rows": rows, "witnesses": witnesses,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every server (one core each)")
    parser.add_argument("--witness-every", type=int, default=10)
    parser.add_argument("--limit", type=int, default=None, help="only the first N configurations (a dry run)")
    args = parser.parse_args()
    data = record(args.reps, args.threads, args.witness_every, args.limit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(f"{len(data['rows'])} configurations -> {args.out}; baseline witnesses {data['drift']['witness_medians']} "
          f"(drift {data['drift']['spread_pct']:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
