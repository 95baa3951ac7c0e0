"""Real runs against a hostile OpenAI-compatible endpoint, mode by mode (``benchmarks/fuzz.py --llm-stub``).

    .venv/bin/python benchmarks/fuzz.py --llm-stub [--budget-minutes 1] [--modes drip,huge_body]
                                                   [--drip-s 5] [--huge-bytes 536870912] [--keep]

For every mode of ``tests/hostile_openai.py`` (each cycles through its variants, one per request): the
stub in its own process on 127.0.0.1, then a real ``perfwarden run --target synthetic --llm hostile-model
--budget-minutes B`` as a subprocess, ``OPENAI_BASE_URL`` pointing at the stub. What each row measures:

- exit: the run's exit code (target 0: no answer may end the run);
- degraded: verdicts marked degraded by the LLM persona over all verdicts in ``RUN/verdicts`` (target all);
- wall: seconds from the run's start to its exit, against the bound ``B*60 + llm_timeout_s`` (its budget
  plus one ask's deadline: an LLM ask may overrun the budget by at most that);
- peak RSS: the run process's maximum resident set (``os.wait4``'s rusage, its reaped children
  included; target under 1 GiB: a 512 MiB answer must not be held);
- the LLM's counts from ``RUN/report.json`` (answers, invalid answers, unanswered asks, fallbacks).

A run that outlives its bound by three minutes is killed (by its own pid) and fails its row. Exit 0
when every row meets every target. The machine's load average is printed beside the figures: wall
times on a shared machine are what it was at the time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import record

from perfwarden.orchestrator.settings import RunSettings

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "tests" / "hostile_openai.py"
sys.path.insert(0, str(STUB.parent))  # the stub is a test tool: tests/ is not installed
from hostile_openai import MODES  # noqa: E402
RSS_LIMIT_KIB = 1 << 20
"""1 GiB, in the KiB ``ru_maxrss`` counts on Linux."""
KILL_AFTER_S = 180.0
"""How long past its bound a run may go before it is killed (then its row fails)."""


@dataclass(frozen=True)
class Row:
    """One mode's run, as measured."""

    mode: str
    exit_code: int
    verdicts: int
    degraded: int
    wall_s: float
    bound_s: float
    peak_rss_kib: int
    llm: str
    """The report's LLM counts, or why there are none."""
    killed: bool

    @property
    def ok(self) -> bool:
        return (self.exit_code == 0 and not self.killed and self.verdicts > 0 and self.degraded == self.verdicts
                and self.wall_s <= self.bound_s and self.peak_rss_kib < RSS_LIMIT_KIB)


def start_stub(mode: str, drip_s: float, huge_bytes: int) -> tuple[subprocess.Popen[str], int]:
    stub = subprocess.Popen([sys.executable, str(STUB), "--mode", mode, "--drip-s", str(drip_s),
                             "--huge-bytes", str(huge_bytes)], stdout=subprocess.PIPE, text=True)
    assert stub.stdout is not None
    line = stub.stdout.readline()
    if not line.startswith("PORT "):
        stub.kill()
        raise SystemExit(f"the hostile stub for {mode!r} did not start: {line!r}")
    return stub, int(line.split()[1])


def degraded_verdicts(run: Path) -> tuple[int, int]:
    """(verdicts, verdicts the LLM persona marked degraded) in ``run/verdicts``."""
    total = degraded = 0
    for path in sorted((run / "verdicts").glob("*.json")):
        verdict = json.loads(path.read_text("utf-8"))
        total += 1
        reasons = verdict.get("degraded_reasons") or []
        degraded += bool(verdict.get("degraded")) and any(str(r).startswith("LLM persona: ") for r in reasons)
    return total, degraded


def llm_counts(run: Path) -> str:
    try:
        llm = json.loads((run / "report.json").read_text("utf-8"))["llm"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"no report ({type(exc).__name__})"
    fallbacks = sum(llm["fallbacks"].values())
    return f"{llm['calls']}/{llm['invalid_outputs']}/{llm['unavailable']}/{fallbacks}"


def run_mode(mode: str, work: Path, budget_minutes: float, deadline_s: float, drip_s: float, huge_bytes: int) -> Row:
    stub, port = start_stub(mode, drip_s, huge_bytes)
    run = work / f"run-{mode}"
    bound = budget_minutes * 60 + deadline_s
    env = {**os.environ, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "hostile-key"}
    log = (work / f"{mode}.log").open("w")
    try:
        started = time.monotonic()
        child = subprocess.Popen([str(Path(sys.executable).parent / "perfwarden"), "run", "--target", "synthetic",
                                  "--llm", "hostile-model", "--budget-minutes", f"{budget_minutes:g}", "--out", str(run)],
                                 env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            child.kill()

        killer = threading.Timer(bound + KILL_AFTER_S, kill)
        killer.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - started
        killer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: tell Popen, so it never waits
    finally:
        log.close()
        stub.terminate()
        stub.wait(10)
    total, degraded = degraded_verdicts(run)
    return Row(mode=mode, exit_code=child.returncode, verdicts=total, degraded=degraded, wall_s=wall, bound_s=bound,
               peak_rss_kib=usage.ru_maxrss, llm=llm_counts(run), killed=killed.is_set())


def print_table(rows: list[Row]) -> None:
    print(f"{'mode':<20} {'exit':>4} {'degraded':>9} {'wall s':>7} {'bound s':>7} {'peak RSS':>9} "
          f"{'LLM answers/invalid/unanswered/fallbacks':>41}  ok")
    for r in rows:
        print(f"{r.mode:<20} {r.exit_code:>4} {f'{r.degraded}/{r.verdicts}':>9} {r.wall_s:>7.1f} {r.bound_s:>7.0f} "
              f"{f'{r.peak_rss_kib / 1024:.0f} MiB':>9} {r.llm:>41}  {'yes' if r.ok else 'NO'}")


def figure(rows: list[Row], budget_minutes: float) -> record.Figure:
    """The modes' figure for ``--record``: how many met every target, and the worst of each measure."""
    slowest = max(rows, key=lambda r: r.wall_s / r.bound_s)
    return record.Figure(
        f"perfwarden run --target synthetic against a hostile LLM endpoint, one run per mode ({', '.join(r.mode for r in rows)}), "
        f"budget {budget_minutes:g} min",
        f"**{sum(r.ok for r in rows)}/{len(rows)}** modes met every target (exit 0, every verdict degraded, within the "
        f"budget plus one ask's deadline, under 1 GiB); slowest {slowest.mode} {slowest.wall_s:.0f} s of its "
        f"{slowest.bound_s:.0f} s bound; largest peak RSS {max(r.peak_rss_kib for r in rows) / 1024:.0f} MiB")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fuzz.py --llm-stub", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--budget-minutes", type=float, default=1.0)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default: all)")
    parser.add_argument("--drip-s", type=float, default=5.0, help="seconds between dripped bytes")
    parser.add_argument("--huge-bytes", type=int, default=512 << 20, help="size of a huge answer")
    parser.add_argument("--keep", action="store_true", help="keep the runs and their logs (the path is printed)")
    record.add_flag(parser)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode {unknown[0]!r}; modes: {', '.join(MODES)}")
    deadline_s = float(RunSettings.model_fields["llm_timeout_s"].default)  # what a run asks with (no --set for it)
    work = Path(tempfile.mkdtemp(prefix="pw-fuzz-llm-"))
    print(f"{len(modes)} mode(s), budget {args.budget_minutes:g} min, one ask's deadline {deadline_s:g} s, drip "
          f"{args.drip_s:g} s/byte, huge answers {args.huge_bytes / (1 << 20):.0f} MiB; load average "
          f"{os.getloadavg()[0]:.2f}; runs in {work}", flush=True)
    started = time.monotonic()
    rows = []
    for mode in modes:
        rows.append(run_mode(mode, work, args.budget_minutes, deadline_s, args.drip_s, args.huge_bytes))
        print(f"  {mode}: exit {rows[-1].exit_code}, {rows[-1].wall_s:.0f} s", flush=True)
    print()
    print_table(rows)
    print(f"\n{sum(r.ok for r in rows)}/{len(rows)} modes met every target in {time.monotonic() - started:.0f} s; "
          f"load average {os.getloadavg()[0]:.2f} at the end (this process's peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")
    record.record("fuzz.py", [figure(rows, args.budget_minutes)], args.record)
    if args.keep or not all(r.ok for r in rows):
        print(f"runs and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
