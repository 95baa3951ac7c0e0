"""Kill a synthetic run at many instants, resume each, and report what every resumed run ended with.

    python tests/resume_driver.py WORKDIR [--cases] [CASE_ID...]  ->  JSON lines: the reference, then one per case

The cases and their ids are ``resume_cases.py``'s: those named, all when none is (none after ``--cases``).

Used by ``test_resume_anywhere.py``. This process runs the uninterrupted reference run itself (which
also warms every lazy import; only the main thread is left afterwards, so forking is safe), derives
the crash instants from the reference's steps, then runs each crashing run and each resume in a
``fork()``ed child: a case costs a run, not an interpreter start; cases run in ``JOBS`` forked
workers. A case is either a crash point (``PERFWARDEN_CRASH_AT``, see ``orchestrator/crashpoints.py``:
the child SIGKILLs itself there) or a delay after which the parent SIGKILLs the child (a random
instant, reps slowed down so it lands anywhere). The resume runs in a fresh child without the hook.
A run killed before its directory appeared (it is created whole, settings included) has nothing to
resume: the case starts it again, as its user would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from resume_cases import CASES, case_id, crash_cases

from perfwarden.orchestrator.crashpoints import ENV
from perfwarden.orchestrator.runner import RunUsageError, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

JOBS = min(2, os.cpu_count() or 1)
"""Cases run in this many workers at once (each case is one process at a time)."""
SETTINGS = RunSettings(target="synthetic", levers=["batch_wait_ms", "quantization"])
LAB = dict(fail_first_quality=True)
"""Small but complete: every node runs (baseline, profile, op bench, A/B, a disclosed latency trade-off
resubmitted, a quality eval that fails once and is re-run, bundle, report) in about 1.4 CPU s (mostly
the auditor and the safe writes' fsyncs)."""


def _child(fn) -> int:
    """Run ``fn`` in a forked child; returns the child's pid."""
    pid = os.fork()
    if pid == 0:  # the child never returns into the caller's stack
        code = 70
        try:
            code = fn()
        except BaseException as exc:  # noqa: BLE001 - report, then leave without running atexit handlers
            sys.stderr.write(f"child failed: {type(exc).__name__}: {exc}\n")
        finally:
            os._exit(code)
    return pid


def _status(pid: int) -> str:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit {os.WEXITSTATUS(status)}"


def _start(run: Path, crash_at: str | None, rep_delay: float) -> int:
    def go() -> int:
        os.environ.pop(ENV, None)
        if crash_at:
            os.environ[ENV] = crash_at
        os.environ["PERFWARDEN_SIM_REP_DELAY"] = str(rep_delay)
        run_graph(run, SETTINGS, SyntheticLab(**LAB))
        return 0
    return _child(go)


def _resume(run: Path, message_file: Path, *, again: bool = False) -> int:
    def go() -> int:
        os.environ.pop(ENV, None)
        os.environ["PERFWARDEN_SIM_REP_DELAY"] = "0"
        try:
            run_graph(run, SETTINGS, SyntheticLab(**LAB), resume=not again)
        except RunUsageError as exc:
            message_file.write_text(str(exc))
            return 3
        return 0
    return _child(go)


def summary(run: Path) -> dict:
    """What a finished run ended with, in comparable form (no clock, no paths outside the run)."""
    out: dict = {"report": (run / "report.json").is_file() and (run / "report.md").is_file()}
    if out["report"]:
        report = json.loads((run / "report.json").read_text())
        out["banked"] = [(b["name"], b["lever_class"], round(b["headline_rederived_pct"] or 0.0, 6))
                         for b in report["banked"]]
        out["trail"] = [(v["seq"], v["scope"], v["verdict"], v["action"]) for v in report["verdicts"]]
        out["proposals"] = [(p["id"], p["status"]) for p in report["proposals"]]
    reps = {}
    for bench in sorted((run / "legs").glob("*/bench_runs.jsonl")) if (run / "legs").is_dir() else []:
        keys = []
        for line in bench.read_text().splitlines():
            try:
                keys.append(json.loads(line)["rep"])
            except ValueError:
                keys.append("corrupt line")
        reps[bench.parent.name] = keys
    out["reps"] = reps
    out["verdict_files"] = sorted(p.name for p in (run / "verdicts").glob("*.json")) if (run / "verdicts").is_dir() else []
    return out


def one_case(workdir: Path, index: int, case: dict) -> dict:
    run = workdir / f"case-{index:03d}"
    started = time.monotonic()
    pid = _start(run, case.get("crash_at"), case.get("rep_delay", 0.0))
    if "kill_after" in case:
        time.sleep(case["kill_after"])
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    crashed = _status(pid)
    message = workdir / f"case-{index:03d}.message"
    again = not run.exists()  # killed before the run existed: start it again
    resumed = _status(_resume(run, message, again=again))
    return {**case, "crashed": crashed, "resumed": resumed, "started_again": again,
            "seconds": round(time.monotonic() - started, 2),
            "message": message.read_text() if message.exists() else None, "summary": summary(run)}


def main() -> None:
    workdir = Path(sys.argv[1])
    workdir.mkdir(parents=True, exist_ok=True)
    run_graph(workdir / "reference", SETTINGS, SyntheticLab(**LAB))
    assert threading.active_count() == 1, "a thread outlived the run: forking would copy its locks"
    steps = [json.loads(line)["node"] for line in (workdir / "reference" / "events.jsonl").read_text().splitlines()]
    print(json.dumps({"reference": summary(workdir / "reference"), "steps": steps}), flush=True)
    args = sys.argv[2:]
    wanted = set(args[1:]) if args[:1] == ["--cases"] else set(args) or set(CASES)  # --cases alone: none
    unknown = sorted(wanted - set(CASES))
    if unknown:
        raise SystemExit(f"unknown case ids: {unknown}")
    selected = [(i, c) for i, c in enumerate(crash_cases(steps)) if case_id(c) in wanted]
    for line in run_cases(workdir, selected, max(1, min(JOBS, len(selected)))) if selected else []:
        print(line, flush=True)


def run_cases(workdir: Path, selected: list[tuple[int, dict]], jobs: int) -> list[str]:
    """Run the cases in ``jobs`` forked workers (each forks its own runs), results in case order."""
    def worker(part: list[tuple[int, dict]], out: Path):
        def go() -> int:
            with open(out, "w", encoding="utf-8") as handle:
                for index, case in part:
                    handle.write(json.dumps({"index": index, "id": case_id(case), **one_case(workdir, index, case)})
                                 + "\n")
                    handle.flush()
            return 0
        return go

    outs = [workdir / f"results-{j}.jsonl" for j in range(jobs)]
    pids = [_child(worker(selected[j::jobs], outs[j])) for j in range(jobs)]
    failed = [status for status in map(_status, pids) if status != "exit 0"]
    if failed:
        raise SystemExit(f"a case worker ended {failed}")
    results = [json.loads(line) for out in outs for line in out.read_text("utf-8").splitlines()]
    return [json.dumps(r) for r in sorted(results, key=lambda r: r["index"])]


if __name__ == "__main__":
    main()
