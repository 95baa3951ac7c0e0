"""Record A/A rep series on the real embedded target, as data for ``benchmarks/aa_power.py``.

Two legs with the same configuration (the run's default baseline: every knob at its default) are measured
the way a run measures a step's A/B: both servers up, reps interleaved A B A B under LoadGen with the run's
default load (Offline, 8 samples, 16 output tokens). Each rep's output throughput is then re-derived by
the auditor's own loader from the bench lines the harness wrote (never the client's figure), and the two
series are saved in rep order, with the date, the machine, the command and the load average beside them,
to ``benchmarks/data/aa_noise-<date>.json``. ``aa_power.py`` resamples interleaved rep *pairs* from that
file, so the drift both legs share stays in the simulated steps.

    python benchmarks/record_aa_noise.py --reps 40 [--keep runs/aa-noise]

A busy machine gives noisier series than a quiet one; the file records the load average at every rep so
a reader can tell which it was.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.gates import measurement
from perfwarden.harness.labs.embedded import EmbeddedLab
from perfwarden.harness.labs.lab import LegPlan
from perfwarden.harness.target_config import EmbeddedConfig
from perfwarden.orchestrator.lab_spec import lab_settings
from perfwarden.orchestrator.settings import RunSettings

METRIC = "output_throughput"
LEGS = ("aa-a", "aa-b")
DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass
class NoiseRecord:
    """What ``aa_power.py`` reads: two same-config legs' per-rep values, in the order they were measured."""

    metric: str
    legs: list[str]
    values: dict[str, list[float]]
    """Per leg, the auditor-re-derived metric of each rep, rep 0 first."""
    started_at: dict[str, list[float]]
    """Per leg, each rep's start stamp (epoch seconds) as the harness wrote it."""
    load_avg_1m: dict[str, list[float | None]]
    """Per leg and rep, the 1-minute load average the harness sampled as the rep started."""
    server_cpu_share: dict[str, list[float | None]]
    """Per leg and rep, the server's share of the machine's CPU time over the rep (the harness's contention
    window): 1/cores would be a whole core on a quiet machine; far less means neighbours took the rest."""
    contended: dict[str, list[bool]]
    """Per leg and rep, whether the auditor's contention gate flags the rep (CONTENDED_LEG): a step measured
    on such reps is re-measured, not judged."""
    date: str
    machine: dict[str, str | int]
    command: str
    load_settings: dict[str, object] = field(default_factory=dict)
    measured_s: float = 0.0
    """From the first rep's start to the last rep's start, as the harness stamped them (a resumed recording
    spans its sessions)."""
    note: str = ""
    """What the command line does not say (``--note``): e.g. a recording stopped and resumed."""


def machine() -> dict[str, str | int]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text("utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = "unknown"
    return {"host": platform.node(), "cpu": cpu or platform.processor() or "unknown", "cores": os.cpu_count() or 0,
            "python": platform.python_version(), "platform": platform.platform()}


def cpu_share(contention: object) -> float | None:
    """The server's share of the machine's CPU seconds over the rep, from the harness's window sample."""
    window = contention.get("window") if isinstance(contention, dict) else None
    if not isinstance(window, dict):
        return None
    machine_s, server_s = window.get("machine_cpu_s"), window.get("server_cpu_s")
    if not isinstance(machine_s, (int, float)) or not isinstance(server_s, (int, float)) or machine_s <= 0:
        return None
    return round(float(server_s) / float(machine_s), 4)


def load_at_start(contention: object) -> float | None:
    start = contention.get("start") if isinstance(contention, dict) else None
    load = start.get("loadavg") if isinstance(start, dict) else None
    return float(load[0]) if isinstance(load, list) and load and isinstance(load[0], (int, float)) else None


@dataclass
class LegSeries:
    """One leg's reps as the auditor's loader reads them."""

    values: list[float]
    started_at: list[float]
    load_avg_1m: list[float | None]
    server_cpu_share: list[float | None]
    contended: list[bool]


def rederived(run: Path, name: str) -> LegSeries:
    """One leg's per-rep metric, stamps, load and contention, from the auditor's loader and contention gate;
    exits if a rep lacks the metric or its stamp."""
    loader = RunLoader(run)
    leg = loader.leg(name)
    reps = sorted(leg.reps, key=lambda r: r.rep)
    if not reps or any(METRIC not in r.metrics or r.started_at is None for r in reps):
        raise SystemExit(f"leg {name!r}: a rep lacks {METRIC!r} or its start stamp; what reading met: "
                         f"{[p.kind for p in loader.problems]}")
    flagged = {ev.line for f in measurement.check_contention(run, leg).findings if f.code == "CONTENDED_LEG"
               for ev in f.evidence}
    return LegSeries(values=[float(r.metrics[METRIC]) for r in reps],
                     started_at=[float(r.started_at) for r in reps if r.started_at is not None],
                     load_avg_1m=[load_at_start(r.contention) for r in reps],
                     server_cpu_share=[cpu_share(r.contention) for r in reps],
                     contended=[r.ref.line in flagged for r in reps])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=40, help="reps per leg (each a few seconds)")
    parser.add_argument("--keep", type=Path, default=None, help="run directory to keep (default: a temporary one)")
    parser.add_argument("--note", default="", help="recorded beside the series (e.g. how a resumed recording ran)")
    parser.add_argument("--out", type=Path, default=None, help="data file (default benchmarks/data/aa_noise-DATE.json)")
    args = parser.parse_args()
    if not 2 <= args.reps <= 200:
        print("--reps must be 2..200", file=sys.stderr)
        sys.exit(3)
    settings = RunSettings.model_validate({})  # the defaults a run measures with
    lab = EmbeddedLab(**EmbeddedLab.settings_kwargs(lab_settings(settings)))
    config = EmbeddedConfig()
    plans = [LegPlan(leg=LEGS[0], role="baseline", config=config, purpose="A/A noise record"),
             LegPlan(leg=LEGS[1], role="aa", config=config, purpose="A/A noise record: the same config again")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aa-noise-") as tmp:
        run = args.keep or Path(tmp) / "run"
        status = lab.measure(run, plans, args.reps)  # reps already in a kept run are not measured again
        if any(s != "ok" for s in status.values()):
            raise SystemExit(f"a leg failed: {status!r}")
        series = {name: rederived(run, name) for name in LEGS}
    stamps = [t for v in series.values() for t in v.started_at]
    now = dt.datetime.now(dt.timezone.utc)
    record = NoiseRecord(metric=METRIC, legs=list(LEGS), values={k: v.values for k, v in series.items()},
                         started_at={k: v.started_at for k, v in series.items()},
                         load_avg_1m={k: v.load_avg_1m for k, v in series.items()},
                         server_cpu_share={k: v.server_cpu_share for k, v in series.items()},
                         contended={k: v.contended for k, v in series.items()},
                         date=now.isoformat(timespec="seconds"), machine=machine(),
                         command=" ".join(shlex.quote(a) for a in ["python", *sys.argv]),
                         load_settings=lab.load.summary(), note=args.note,
                         measured_s=round(max(stamps) - min(stamps), 1))
    out = args.out or DATA_DIR / f"aa_noise-{now:%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(asdict(record), indent=1) + "\n", "utf-8")
    loads = [x for v in series.values() for x in v.load_avg_1m if x is not None]
    print(f"wrote {out}: {args.reps} reps per leg over {record.measured_s:.0f} s ({time.perf_counter() - started:.0f} s "
          f"this session), load average "
          f"{min(loads, default=math.nan):.2f}..{max(loads, default=math.nan):.2f}")


if __name__ == "__main__":
    main()
