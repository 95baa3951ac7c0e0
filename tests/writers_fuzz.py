"""Concurrent writers on one run: two to four perfwarden commands that write a run, started at random
offsets on one interrupted synthetic run, and what the run ends with.

Used by ``benchmarks/fuzz.py --writers`` (N tries) and ``tests/test_run_lock.py`` (a few). Each try:

1. copies the *base* -- a synthetic run killed half-way (``PERFWARDEN_CRASH_AT``), with its own seal key
   store -- into a fresh folder (a key store per copy: the head file beside the key follows one chain);
2. starts 2-4 writers as subprocesses, each after a random delay: ``run --resume`` (one or two),
   ``measure --target synthetic`` of an extra leg, ``audit --save`` of the run's baseline claim;
3. when they are done, finishes the run with one more ``run --resume`` if no resume finished it (the
   user's first terminal, after the second was refused), and judges the result.

"Equal to an uninterrupted run" means: the same banked changes (name, lever class, re-derived headline to
1e-6), the same verdict trail (seq, scope, label, action, finding codes, re-derived headline), the same
proposals and their status, every leg of the uninterrupted run holding exactly its reps, and every verdict
file on disk with the label, action, codes and headline of the uninterrupted run's. Timestamps, pids and
paths are not compared. The extra leg ``measure`` records is not part of the uninterrupted run: it must
hold reps 0..n-1 once each when ``measure`` ran, and not exist when it was refused.

Problems (each must be zero): ``rep_twice`` (a (leg, rep) line twice), ``rep_lost`` (a rep of the
uninterrupted run, or of a finished ``measure``, missing), ``seal_broken`` (the chain does not verify
under the run's key, or a file it lists differs from what it sealed), ``refused_badly`` (a refused writer
that did not exit 3 naming another writer of the try: its pid, host and command), ``writer_failed`` (a
writer that got the run ended with anything but its success: 0, or the verdict's exit for ``audit
--save``), ``report_differs``, ``traceback`` and ``hang``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "perfwarden.cli.main"]
CRASH_AT = "before:integrator#10"
"""Where the base run is killed: half-way through the search (baseline, profile and eight steps audited,
the study holding their trials), so a resume still asks and tells the study, measures, audits and banks."""
CLAIM = "claims/001-baseline.json"
"""The claim ``audit --save`` answers (it exists in the base)."""
EXTRA_LEG = "fuzz-extra"
MEASURE_REPS = 3
REP_DELAY_S = "0.01"
"""Simulated rep time: a resume takes a few seconds, so writers started at random offsets overlap."""
BUDGET = ["--budget-minutes", "1440"]
"""A run's budget counts from its start across resumes: the base is resumed for as long as the tries last
(an hour for 100), so its budget must outlast them, or late tries would find it spent and stop the search."""
TIMEOUT_S = 180.0
PROBLEMS = ("rep_twice", "rep_lost", "seal_broken", "refused_badly", "writer_failed", "report_differs",
            "traceback", "hang")


def run_cli(args: list[str], keys: Path, timeout: float = TIMEOUT_S,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=_env(keys, env), stdin=subprocess.DEVNULL)


def _env(keys: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PERFWARDEN_CRASH_AT", "PERFWARDEN_SIM_REP_DELAY")}
    return {**env, "PERFWARDEN_KEY_DIR": str(keys), "PERFWARDEN_SIM_REP_DELAY": REP_DELAY_S, **(extra or {})}


# ------------------------------------------------------------------------------------------- the base


@dataclass(frozen=True)
class Base:
    run: Path
    keys: Path
    reference: dict[str, Any]
    """``summary`` of the uninterrupted run."""
    audit_exit: int
    """``audit`` of ``CLAIM`` on the uninterrupted run: the exit an ``audit --save`` must end with."""


def build_base(work: Path) -> Base:
    """The uninterrupted reference run and the interrupted base, each with its own key store."""
    work.mkdir(parents=True, exist_ok=True)
    ref_keys, base_keys = work / "ref-keys", work / "base-keys"
    done = run_cli(["run", "--target", "synthetic", "--out", str(work / "reference"), *BUDGET], ref_keys)
    if done.returncode != 0:
        raise RuntimeError(f"the reference run failed ({done.returncode}): {done.stderr[-2000:]}")
    audit = run_cli(["audit", str(work / "reference"), "--claim", str(work / "reference" / CLAIM)], ref_keys)
    killed = run_cli(["run", "--target", "synthetic", "--out", str(work / "base"), *BUDGET], base_keys,
                     env={"PERFWARDEN_CRASH_AT": CRASH_AT})
    if killed.returncode != -signal.SIGKILL or not (work / "base" / CLAIM).is_file():
        raise RuntimeError(f"the base run was not killed at {CRASH_AT} ({killed.returncode}): {killed.stderr[-2000:]}")
    return Base(work / "base", base_keys, summary(work / "reference"), audit.returncode)


def summary(run: Path) -> dict[str, Any]:
    """What a finished run ended with, in comparable form: no clock, pid or path."""
    out: dict[str, Any] = {"report": (run / "report.json").is_file() and (run / "report.md").is_file()}
    if out["report"]:
        report = json.loads((run / "report.json").read_text("utf-8"))
        out["banked"] = [(b["name"], b["lever_class"], _round(b["headline_rederived_pct"])) for b in report["banked"]]
        out["trail"] = [(v["seq"], v["scope"], v["verdict"], v["action"], sorted(f["code"] for f in v["findings"]),
                         _round(v.get("headline_rederived"))) for v in report["verdicts"]]
        bundle = report.get("bundle") or {}
        out["bundle"] = (bundle.get("verdict"), _round(bundle.get("headline_rederived")))
        out["proposals"] = [(p["id"], p["status"]) for p in report["proposals"]]
    out["reps"] = {leg: reps for leg, reps in leg_reps(run).items() if leg != EXTRA_LEG}
    out["verdict_files"] = {p.name: verdict_key(p) for p in sorted((run / "verdicts").glob("*.json"))}
    return out


def _round(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def verdict_key(path: Path) -> tuple[Any, ...]:
    v = json.loads(path.read_text("utf-8"))
    return (v["verdict"], v["action"], sorted(f["code"] for f in v["findings"]), _round(v.get("headline_rederived")))


def leg_reps(run: Path) -> dict[str, list[Any]]:
    """Every leg's rep numbers, line by line (a line that is not JSON shows as ``"corrupt"``)."""
    out: dict[str, list[Any]] = {}
    for bench in sorted((run / "legs").glob("*/bench_runs.jsonl")):
        reps: list[Any] = []
        for line in bench.read_text("utf-8", "replace").splitlines():
            try:
                reps.append(json.loads(line)["rep"])
            except (ValueError, KeyError, TypeError):
                reps.append("corrupt")
        out[bench.parent.name] = reps
    return out


def seal_problems(run: Path, keys: Path) -> list[str]:
    """What is wrong with the run's seal chain under its key: a broken link, a torn tail, a listed file
    that differs from what was sealed (the auditor's own reader, ``auditor/manifest.py``)."""
    from perfwarden.auditor.manifest import observe, read_manifest
    from perfwarden.formats.jsonl import chain_seal_id

    chain = run / "evidence.jsonl"
    seal_id = chain_seal_id(chain)
    key_file = keys / f"{seal_id}.key"
    if seal_id is None or not key_file.is_file():
        return [f"no chain or no key ({seal_id!r})"]
    key = bytes.fromhex(json.loads(key_file.read_text("utf-8"))["key"])
    manifest = read_manifest(chain, key, None)
    out = []
    if manifest.broken is not None:
        out.append(f"chain broken: {manifest.broken.message}")
    if manifest.torn_tail is not None:
        out.append("chain ends in a torn entry")
    for rel, state in observe(run, manifest, {}).items():
        sealed = manifest.files[rel]
        if not state.exists or state.sha256 != sealed.sha256 or state.size != sealed.size:
            out.append(f"{rel} differs from its seal")
    return out


# ------------------------------------------------------------------------------------------ one try


@dataclass
class Writer:
    kind: str
    args: list[str]
    delay_s: float
    proc: subprocess.Popen[str] | None = None
    exit: int | None = None
    stderr: str = ""
    pid: int = 0


@dataclass
class TryOutcome:
    index: int
    writers: list[tuple[str, float, int | None]] = field(default_factory=list)
    """(kind, start offset, exit) of every writer."""
    problems: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    finished_by_extra_resume: bool = False
    seconds: float = 0.0


def plan_writers(rng: random.Random, run: Path) -> list[Writer]:
    """Two to four writers with random start offsets (at least one ``run --resume``)."""
    kinds = ["resume"] + rng.sample(["resume", "measure", "audit"], rng.randint(1, 3))
    rng.shuffle(kinds)
    args = {"resume": ["run", "--resume", str(run)],
            "measure": ["measure", "--target", "synthetic", "--out", str(run), "--leg", EXTRA_LEG,
                        "--reps", str(MEASURE_REPS)],
            "audit": ["audit", str(run), "--claim", str(run / CLAIM), "--save"]}
    return [Writer(kind, args[kind], round(rng.uniform(0.0, 3.0), 3)) for kind in kinds]


def _start_all(writers: list[Writer], keys: Path) -> None:
    t0 = time.monotonic()
    for w in sorted(writers, key=lambda w: w.delay_s):
        time.sleep(max(0.0, t0 + w.delay_s - time.monotonic()))
        w.proc = subprocess.Popen([*CLI, *w.args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=_env(keys), stdin=subprocess.DEVNULL, start_new_session=True)
        w.pid = w.proc.pid


def _wait_all(writers: list[Writer], outcome: TryOutcome) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    for w in writers:
        assert w.proc is not None
        try:
            _, w.stderr = w.proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            w.exit = w.proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(w.proc.pid, signal.SIGKILL)
            _, w.stderr = w.proc.communicate()
            w.exit = None
            outcome.problems.append("hang")
            outcome.details.append(f"{w.kind} (pid {w.pid}) ran past {TIMEOUT_S:.0f} s")


def refused_properly(w: Writer, writers: list[Writer]) -> bool:
    """Exit 3 naming another writer of this try: its pid, this host and its command."""
    if w.exit != 3:
        return False
    words = {"resume": "run --resume", "measure": "measure", "audit": "audit"}
    return any(f"pid {o.pid} " in w.stderr and words[o.kind] in w.stderr for o in writers if o is not w) \
        and repr(socket.gethostname()) in w.stderr and "being written by another perfwarden command" in w.stderr


def _judge_writers(writers: list[Writer], base: Base, outcome: TryOutcome) -> None:
    success = {"resume": 0, "measure": 0, "audit": base.audit_exit}
    for w in writers:
        if "Traceback" in w.stderr:
            outcome.problems.append("traceback")
            outcome.details.append(f"{w.kind}: {w.stderr[-800:]}")
        if w.exit is None or w.exit == success[w.kind]:
            continue
        if "being written by another perfwarden command" in w.stderr:
            if not refused_properly(w, writers):
                outcome.problems.append("refused_badly")
                outcome.details.append(f"{w.kind} exit {w.exit}: {w.stderr[-600:]}")
        else:
            outcome.problems.append("writer_failed")
            outcome.details.append(f"{w.kind} exit {w.exit}: {w.stderr[-600:]}")


def _judge_run(run: Path, keys: Path, base: Base, measured: bool, outcome: TryOutcome) -> None:
    got = summary(run)
    reps = leg_reps(run)
    for leg, lines in reps.items():
        if len(lines) != len(set(lines)):
            outcome.problems.append("rep_twice")
            outcome.details.append(f"{leg}: reps {lines}")
    for leg, want in base.reference["reps"].items():
        if sorted(set(reps.get(leg, []))) != sorted(want):
            outcome.problems.append("rep_lost")
            outcome.details.append(f"{leg}: reps {reps.get(leg)} (uninterrupted: {want})")
    extra = reps.get(EXTRA_LEG)
    if (measured and sorted(set(extra or [])) != list(range(MEASURE_REPS))) or (not measured and extra is not None):
        outcome.problems.append("rep_lost")
        outcome.details.append(f"{EXTRA_LEG}: reps {extra} (measure {'ran' if measured else 'was refused'})")
    broken = seal_problems(run, keys)
    if broken:
        outcome.problems.append("seal_broken")
        outcome.details += broken[:5]
    diff = {k: (v, got.get(k)) for k, v in base.reference.items() if k != "reps" and got.get(k) != v}
    if diff:
        outcome.problems.append("report_differs")
        outcome.details.append(f"differs from the uninterrupted run (expected, got): {str(diff)[:1500]}")


def one_try(base: Base, work: Path, rng: random.Random, index: int) -> TryOutcome:
    """One try in ``work`` (made here, removed by the caller)."""
    started = time.monotonic()
    outcome = TryOutcome(index)
    run, keys = work / "run", work / "keys"
    shutil.copytree(base.run, run, symlinks=True)
    shutil.copytree(base.keys, keys)
    writers = plan_writers(rng, run)
    _start_all(writers, keys)
    _wait_all(writers, outcome)
    outcome.writers = [(w.kind, w.delay_s, w.exit) for w in writers]
    _judge_writers(writers, base, outcome)
    if "hang" not in outcome.problems:
        if not any(w.kind == "resume" and w.exit == 0 for w in writers):
            outcome.finished_by_extra_resume = True
            last = run_cli(["run", "--resume", str(run)], keys)
            if last.returncode != 0:
                outcome.problems.append("writer_failed")
                outcome.details.append(f"the final resume exit {last.returncode}: {last.stderr[-600:]}")
        measured = any(w.kind == "measure" and w.exit == 0 for w in writers)
        _judge_run(run, keys, base, measured, outcome)
    outcome.seconds = round(time.monotonic() - started, 2)
    return outcome


# ------------------------------------------------------------------------------------------ N tries


@dataclass(frozen=True)
class TriesDone:
    """What ``run_tries`` measured."""

    exit_code: int
    """0 when every problem count is 0 and every try ran."""
    counts: dict[str, int]
    wall_s: float


def run_tries(tries: int, seed: int, out: Path | None = None) -> TriesDone:
    """``benchmarks/fuzz.py --writers``: ``tries`` tries, the counts printed."""
    import collections
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="pw-writers-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    load_before = os.getloadavg()
    started = time.monotonic()
    print(f"{tries} tries of 2-4 concurrent writers on one synthetic run (seed {seed}); load average "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} on {os.cpu_count()} cpu(s)", flush=True)
    counts: collections.Counter[str] = collections.Counter()
    failures: list[dict[str, Any]] = []
    try:
        base = build_base(scratch / "base")
        print(f"  base built in {time.monotonic() - started:.0f} s (reference: {len(base.reference['trail'])} "
              f"verdicts, {len(base.reference['banked'])} banked)", flush=True)
        for index in range(tries):
            work = scratch / f"try-{index}"
            outcome = one_try(base, work, random.Random(seed * 1_000_003 + index), index)
            shutil.rmtree(work, ignore_errors=True)
            _count(counts, outcome)
            if outcome.problems and len(failures) < 20:
                failures.append(outcome.__dict__)
            if (index + 1) % max(1, tries // 10) == 0:
                print(f"  {index + 1:>4} tries, {time.monotonic() - started:6.0f} s, problems so far: "
                      f"{sum(counts[p] for p in PROBLEMS)}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.monotonic() - started
    _print_counts(counts, failures, wall, load_before)
    if out is not None:
        out.write_text(json.dumps({"counts": counts, "failures": failures}, indent=1, default=str))
    ok = all(counts[p] == 0 for p in PROBLEMS) and counts["tries"] == tries
    return TriesDone(exit_code=0 if ok else 1, counts=dict(counts), wall_s=wall)


def _count(counts: Any, outcome: TryOutcome) -> None:
    counts["tries"] += 1
    counts[f"writers:{len(outcome.writers)}"] += 1
    for kind, _delay, code in outcome.writers:
        counts[f"{kind}:{'exit ' + str(code) if code is not None else 'hung'}"] += 1
        counts["refused"] += code == 3
    counts["finished by a later resume"] += outcome.finished_by_extra_resume
    for problem in set(outcome.problems):
        counts[problem] += 1


def _print_counts(counts: Any, failures: list[dict[str, Any]], wall: float, load_before: tuple[float, ...]) -> None:
    load = os.getloadavg()
    print()
    print(f"tries                              {counts['tries']}")
    for problem in PROBLEMS:
        print(f"tries with {problem:<24}{counts[problem]}")
    print(f"writers refused (exit 3, holder named; a wrong refusal counts as refused_badly) {counts['refused']}")
    print("writers by command and exit: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if ":exit" in k
                                                     or k.endswith(":hung")))
    print("tries by writer count: " + ", ".join(f"{k[8:]} {v}" for k, v in sorted(counts.items())
                                               if k.startswith("writers:")))
    print(f"tries whose run a later resume finished (every resume refused) {counts['finished by a later resume']}")
    print(f"wall time                          {wall:.0f} s ({wall / max(1, counts['tries']):.1f} s per try); load "
          f"average before {load_before[0]:.2f}, after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"(1/5/15 min) on {os.cpu_count()} cpu(s), shared")
    for f in failures[:10]:
        print(f"  try {f['index']}: {f['writers']} {f['problems']} {str(f['details'])[:600]}")
