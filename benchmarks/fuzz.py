"""The long fuzz: >= 10,000 mutated inputs through every command and reader, in parallel processes.

    .venv/bin/python benchmarks/fuzz.py [--inputs 10000] [--workers N] [--seed 0] [--timeout 30]
    .venv/bin/python benchmarks/fuzz.py --replay 1234          # one input, verbosely
    .venv/bin/python benchmarks/fuzz.py --rundir [--inputs 10000]   # run directories as input (tests/fuzzing/fuzz_rundir.py)
    .venv/bin/python benchmarks/fuzz.py --llm-stub [--budget-minutes 1]  # runs against a hostile LLM endpoint
    .venv/bin/python benchmarks/fuzz.py --writers [--tries 100]     # concurrent writers on one run

The engine and its oracle are ``fuzzing.fuzz`` (read its docstring for what counts as damaged
evidence, and why a mutation no gate reads may legitimately PASS); the test suite runs a bounded
hypothesis fuzz of the same engine (``tests/test_fuzz.py``). Input ``i`` is fully determined by
``--seed`` and ``i`` (a ``random.Random``), so any failure printed here replays with ``--replay``.

Each worker process handles inputs in-process (no interpreter start per input) under an address-space
limit (``--memory-gib``: a runaway allocation becomes a MemoryError, counted, instead of the OOM
killer), with a per-input alarm (``--timeout``: a hang is counted, never waited on). Printed: inputs,
tracebacks, exit codes outside the contract, PASS on damaged evidence, hangs, raw terminal controls,
inputs over the memory bound, peak memory, and the gate crashes that failed open (each one a bug,
though not a false PASS). Exit status 0 when every count that must be zero is zero.

``--rundir`` fuzzes run directories as input to ``run --resume``, ``measure`` and ``audit --save``
instead (``fuzzing.fuzz_rundir``: links, FIFOs, crafted checkpoints and settings, hostile leg
names; its docstring says what is planted and how the oracle sees it). Printed: code executions, writes
outside the run, tracebacks, internal errors, exit codes outside the contract, hangs, injections into
report.md, raw controls, memory. Its scratch lies on /dev/shm when there is one (a run is copied per input).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import record

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fuzzers are test tools, never installed

_FUZZER = None
_MEMORY = 0
_CURRENT: Path | None = None
"""This worker's input in progress (a file in the scratch), so a chunk the alarm could not stop names it."""


def _fuzzer(work: Path, timeout: int, memory_limit: int, rundir: bool, seeds: Path | None = None):
    if rundir:
        from fuzzing.fuzz_rundir import RundirFuzzer

        return RundirFuzzer(work, timeout_s=timeout, memory_limit=memory_limit, seeds_root=seeds)
    from fuzzing.fuzz import Fuzzer

    return Fuzzer(work, timeout_s=timeout, memory_limit=memory_limit)


def _init(scratch: str, timeout: int, memory: int, rundir: bool) -> None:
    global _FUZZER, _MEMORY, _CURRENT
    _CURRENT = Path(scratch) / f"current-{os.getpid()}"
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    _MEMORY = memory
    work = Path(tempfile.mkdtemp(prefix=f"w{os.getpid()}-", dir=scratch))
    _FUZZER = _fuzzer(work, timeout, memory // 2, rundir, Path(scratch) / "seeds")


def _chunk(args: tuple[int, list[int]]) -> dict:
    from fuzzing.fuzz import RandomChooser

    seed, indices = args
    counts: collections.Counter = collections.Counter()
    failures, degraded = [], []
    for i in indices:
        _CURRENT.write_text(str(i))
        outcome = _FUZZER.run_one(RandomChooser(seed * 1_000_003 + i))
        counts["inputs"] += 1
        counts[f"target:{outcome.target}"] += 1
        counts["damaged"] += bool(outcome.damaged)
        counts[f"verdict:{outcome.verdict}"] += outcome.verdict is not None
        counts[f"seed:{outcome.seed}"] += 1
        for tag in outcome.exercised:
            counts[f"exercised:{tag}"] += 1
        for problem in set(outcome.problems):
            counts[problem] += 1
        if outcome.problems and len(failures) < 20:
            failures.append({"input": i, **outcome.__dict__})
        if outcome.degraded:
            counts["degraded"] += 1
            if len(degraded) < 20:
                degraded.append({"input": i, **outcome.__dict__})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"counts": counts, "failures": failures, "degraded": degraded, "peak": peak}


def _on_node(timeout: int, memory: int, rundir: bool, chunk: tuple[int, list[int]]) -> dict:
    """One chunk as a Ray task (``--cluster``): its own scratch and fuzzer (seed runs built there for
    ``--rundir``), removed afterwards; the same per-input alarm, but no address-space limit (a Ray worker
    process maps its object store). The inputs are the same, so are the counts."""
    global _FUZZER, _CURRENT
    scratch = Path(tempfile.mkdtemp(prefix="pw-fuzz-node-", dir=_scratch_root(rundir)))
    try:
        seeds = None
        if rundir:
            from fuzzing.fuzz_rundir import build_seeds

            seeds = scratch / "seeds"
            build_seeds(seeds)
        _CURRENT = scratch / f"current-{os.getpid()}"
        _FUZZER = _fuzzer(Path(tempfile.mkdtemp(dir=scratch)), timeout, memory // 2, rundir, seeds)
        return _chunk(chunk)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def replay(seed: int, index: int, timeout: int, rundir: bool) -> None:
    from fuzzing.fuzz import RandomChooser

    scratch = Path(tempfile.mkdtemp(prefix="pw-fuzz-replay-", dir=_scratch_root(rundir)))
    try:
        outcome = _fuzzer(scratch, timeout, 3 << 30, rundir).run_one(RandomChooser(seed * 1_000_003 + index))
        print(json.dumps(outcome.__dict__, indent=2, default=str))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _scratch_root(rundir: bool) -> str | None:
    """Run directories are copied, written and removed per input: on tmpfs when there is one."""
    return "/dev/shm" if rundir and os.access("/dev/shm", os.W_OK) else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=None, help="seconds per input before it counts as a hang "
                        "(default 30; 10 with --rundir)")
    parser.add_argument("--rundir", action="store_true", help="fuzz run directories as input to run --resume, "
                        "measure and audit --save (fuzzing.fuzz_rundir) instead of the readers")
    parser.add_argument("--memory-gib", type=float, default=4.0, help="address-space limit per worker")
    parser.add_argument("--chunk", type=int, default=25)
    parser.add_argument("--replay", type=int, default=None, help="run input N of --seed alone and print it")
    parser.add_argument("--out", type=Path, default=None, help="also write every failure as JSON here")
    parser.add_argument("--cluster", default=None, help="Ray address (`local` starts Ray here): run the chunks on "
                        "its nodes, one task each, instead of --workers processes here")
    _writers_arguments(parser)
    record.add_flag(parser)
    return parser


def main() -> int:
    if "--llm-stub" in sys.argv[1:]:  # lazy: its own options and imports (benchmarks/fuzz_llm.py)
        from fuzz_llm import main as llm_stub

        return llm_stub([arg for arg in sys.argv[1:] if arg != "--llm-stub"])
    args = _parser().parse_args()
    if args.writers:
        return _writers(args)
    args.timeout = args.timeout or (10 if args.rundir else 30)
    if args.replay is not None:
        replay(args.seed, args.replay, args.timeout, args.rundir)
        return 0
    if args.rundir:
        from fuzzing.fuzz_rundir import PROBLEMS
    else:
        from fuzzing.fuzz import PROBLEMS

    memory = int(args.memory_gib * (1 << 30))
    scratch = tempfile.mkdtemp(prefix="pw-fuzz-", dir=_scratch_root(args.rundir))
    if args.rundir:  # the seed runs, recorded once for every worker
        from fuzzing.fuzz_rundir import build_seeds

        build_seeds(Path(scratch) / "seeds")
    chunks = [(args.seed, list(range(k, min(k + args.chunk, args.inputs)))) for k in range(0, args.inputs, args.chunk)]
    counts: collections.Counter = collections.Counter()
    failures, degraded, peak = [], [], 0
    started = time.monotonic()
    print(f"fuzzing {args.inputs} inputs with {args.workers} worker(s), seed {args.seed}, "
          f"{args.timeout} s per input, {args.memory_gib:g} GiB address space per worker", flush=True)
    try:
        if args.cluster:
            import functools

            from perfwarden.orchestrator.cluster import fan_out

            for result in fan_out(functools.partial(_on_node, args.timeout, memory, args.rundir), chunks,
                                  args.cluster):
                counts.update(result["counts"])
                failures += result["failures"]
                degraded += result["degraded"]
                peak = max(peak, result["peak"])
        else:
            with mp.get_context("fork").Pool(args.workers, initializer=_init,
                                              initargs=(scratch, args.timeout, memory, args.rundir)) as pool:
                pending = pool.imap_unordered(_chunk, chunks)
                for done in range(len(chunks)):
                    # A chunk that outlives every input's own alarm is a hang the alarm could not break.
                    try:
                        result = pending.next(timeout=args.chunk * args.timeout + 60)
                    except mp.TimeoutError:
                        counts["hang"] += 1
                        stuck = sorted(int(p.read_text() or -1) for p in Path(scratch).glob("current-*"))
                        print(f"a chunk did not finish: counted as a hang; stopping (inputs in progress: {stuck}; "
                              "replay each with --replay)", flush=True)
                        pool.terminate()
                        break
                    counts.update(result["counts"])
                    failures += result["failures"]
                    degraded += result["degraded"]
                    peak = max(peak, result["peak"])
                    if (done + 1) % max(1, len(chunks) // 10) == 0:
                        print(f"  {counts['inputs']:>6} inputs, {time.monotonic() - started:6.0f} s, problems so far: "
                              f"{sum(counts[p] for p in PROBLEMS)}",
                              flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.monotonic() - started
    print()
    if args.rundir:
        code = _report_rundir(args, counts, failures, peak, wall, PROBLEMS)
    else:
        code = _report_readers(args, counts, failures, degraded, peak, wall, PROBLEMS)
    record.record("fuzz.py", [fuzz_figure(args, counts, PROBLEMS, peak, wall)], args.record)
    return code


def _report_readers(args: argparse.Namespace, counts: collections.Counter, failures: list, degraded: list,
                    peak: int, wall: float, problems: tuple[str, ...]) -> int:
    """The readers' fuzz figures; exit 0 only when every input ran and none showed a problem."""
    print(f"inputs                         {counts['inputs']}")
    print(f"tracebacks                     {counts['traceback']}")
    print(f"exit codes outside contract    {counts['exit_code']}")
    print(f"PASS on damaged evidence       {counts['pass_on_damaged']}")
    print(f"hangs (> {args.timeout} s)                {counts['hang']}")
    print(f"raw terminal controls          {counts['raw_control']}")
    print(f"inputs over the memory bound   {counts['memory']}   (peak RSS of a worker: {peak / (1 << 20):.0f} MiB)")
    print(f"gate crashes (failed open)     {counts['degraded']}")
    print(f"wall time                      {wall:.0f} s with {args.workers} worker(s)")
    print("by target: " + ", ".join(f"{k[7:]} {v}" for k, v in sorted(counts.items()) if k.startswith("target:")))
    print("verdicts: " + ", ".join(f"{k[8:]} {v}" for k, v in sorted(counts.items()) if k.startswith("verdict:"))
          + f"; inputs with damage the oracle proves: {counts['damaged']}")
    for f in failures[:20] + degraded[:5]:
        print(f"  input {f['input']}: {f['target']} {f['seed']} {f['problems'] or 'degraded'} exit {f['exit_code']} "
              f"{f['mutations']} damaged={f['damaged'][:2]}")
    if args.out:
        args.out.write_text(json.dumps({"counts": counts, "failures": failures, "degraded": degraded}, indent=1,
                                       default=str))
    return 0 if all(counts[k] == 0 for k in problems) and counts["inputs"] == args.inputs else 1


def _writers_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--writers", action="store_true", help="concurrent writers on one run instead "
                        "(tests/writers_fuzz.py): --tries tries of 2-4 of run --resume, measure, audit --save")
    parser.add_argument("--tries", type=int, default=100, help="--writers: how many tries")


def _writers(args: argparse.Namespace) -> int:
    """``--writers``: the engine is a test tool, outside the installed package."""
    import writers_fuzz

    done = writers_fuzz.run_tries(args.tries, args.seed, args.out)
    problems = {p: done.counts.get(p, 0) for p in writers_fuzz.PROBLEMS}
    record.record("fuzz.py", [record.Figure(
        f"concurrent writers on one run (2-4 of run --resume, measure, audit --save at once), {args.tries:,} tries, "
        f"seed {args.seed}",
        f"{done.counts.get('tries', 0):,} tries in {done.wall_s:.0f} s: {problem_counts(problems)}; writers refused "
        f"(exit 3, the holder named) {done.counts.get('refused', 0):,}")], args.record)
    return done.exit_code


def problem_counts(counts: dict[str, int]) -> str:
    """``all **0** (a, b, ...)`` when every count is zero, else each non-zero count named."""
    if not any(counts.values()):
        return f"{', '.join(k.replace('_', ' ') for k in counts)}: all **0**"
    return ", ".join(f"{k.replace('_', ' ')} **{v}**" for k, v in counts.items() if v)


def fuzz_figure(args: argparse.Namespace, counts: collections.Counter, problems: tuple[str, ...], peak: int,
                wall: float) -> record.Figure:
    """The fuzz's figure for ``--record``: every count that must be zero, the inputs and the time."""
    what = ("run directories as input to run --resume, measure and audit --save" if args.rundir
            else "mutated inputs through every command and reader")
    return record.Figure(
        f"{what}, {args.inputs:,} inputs, seed {args.seed}",
        f"{counts['inputs']:,} inputs in {wall:.0f} s ({args.workers} worker(s)): "
        f"{problem_counts({p: counts[p] for p in problems})}; gate crashes that failed open {counts['degraded']}; "
        f"peak RSS of a worker {peak / (1 << 20):.0f} MiB")


def _report_rundir(args: argparse.Namespace, counts: collections.Counter, failures: list[dict], peak: int,
                   wall: float, problems: tuple[str, ...]) -> int:
    print(f"inputs                         {counts['inputs']}")
    print(f"code executions                {counts['code_execution']}")
    print(f"writes outside the run         {counts['write_outside']}")
    print(f"tracebacks                     {counts['traceback']}")
    print(f"internal errors (run exit 1)   {counts['internal_error']}")
    print(f"exit codes outside contract    {counts['exit_code']}")
    print(f"hangs (> {args.timeout} s)                {counts['hang']}")
    print(f"injections into report.md      {counts['injection']}")
    print(f"raw terminal controls          {counts['raw_control']}")
    print(f"inputs over the memory bound   {counts['memory']}   (peak RSS of a worker: {peak / (1 << 20):.0f} MiB)")
    print(f"wall time                      {wall:.0f} s with {args.workers} worker(s)")
    print("by command: " + ", ".join(f"{k[7:]} {v}" for k, v in sorted(counts.items()) if k.startswith("target:")))
    print("by seed: " + ", ".join(f"{k[5:]} {v}" for k, v in sorted(counts.items()) if k.startswith("seed:")))
    print("exit codes: " + ", ".join(f"{k[8:]} {v}" for k, v in sorted(counts.items()) if k.startswith("verdict:")))
    print("inputs that: " + ", ".join(f"{k[10:]} {v}" for k, v in sorted(counts.items()) if k.startswith("exercised:"))
          + "  (unmutated: a genuine run; payload: a crafted checkpoint; program: settings naming one; "
            "report_text: hostile text planted and report.md rewritten)")
    for f in failures[:20]:
        print(f"  input {f['input']}: {f['target']} seed={f['seed']} {f['problems']} exit {f['exit_code']} {f['mutations']}")
    if args.out:
        args.out.write_text(json.dumps({"counts": counts, "failures": failures}, indent=1, default=str))
    return 0 if all(counts[k] == 0 for k in problems) and counts["inputs"] == args.inputs else 1


if __name__ == "__main__":
    sys.exit(main())
