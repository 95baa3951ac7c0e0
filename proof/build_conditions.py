"""Hand-built fixtures for "inert is proven, not assumed".

Each case is the witnessed light A/B run of ``build_witness`` (bench line version 2, LoadGen's logs,
the server's counters) whose ``server_info.json`` carries what the harness measured about each server
process (``process_conditions``: engine, cores, CPU affinity, cgroup quota, priority, thread
environment). The attacks handicap the baseline through the process, not through a knob it reports:
pinned to one core, given one OpenMP thread, a lower priority, a cgroup quota; or a condition hidden
under a parent key the registry once called inert (``process.cpu_count``); or the measured conditions
removed from both legs. The near misses must PASS: identical conditions with keys reordered and
integers written as floats; an inert key (the port, the pid) differing. Every answer is in the CASES
table below, written before the auditor was run on them.

    python -m perfwarden.proof.build_conditions [--out proof/fixtures]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from perfwarden.proof.build_integrity import QUIET
from perfwarden.proof.build_witness import build_infos, infos
from perfwarden.orchestrator.synth import fixture_builder_main, write_case_table

def case(**kw: Any) -> Callable[[Path], None]:
    return lambda run: build_infos(run, *infos(**kw))


def _reordered(run: Path) -> None:
    b, c = infos()
    c["process_conditions"] = {k: (float(v) if isinstance(v, int) and not isinstance(v, bool) else v)
                               for k, v in sorted(c["process_conditions"].items(), reverse=True)}
    build_infos(run, json.loads(json.dumps(b, sort_keys=True)), c)


# name -> (builder, verdict, action, must_include, must_exclude, rationale)
CASES: dict[str, tuple[Callable[[Path], Any], str, str, list[str], list[str], str]] = {
    "cond-one-core-baseline": (
        case(base={"cpus_allowed": [0]}), "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
        "The baseline's server was pinned to one core (taskset); every knob it reports equals the candidate's. "
        "CPU affinity is a condition."),
    "cond-omp-threads-baseline": (
        case(base={"thread_env": {"OMP_NUM_THREADS": "1"}}), "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
        "The baseline's server was launched with OMP_NUM_THREADS=1: a thread environment variable is a condition."),
    "cond-nice-baseline": (
        case(base={"nice": 19}), "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
        "The baseline's server ran at nice 19 (lowest priority) on a shared machine."),
    "cond-quota-baseline": (
        case(base={"cpu_quota_cores": 0.5}), "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
        "The baseline's server sat in a cgroup with a CPU quota of half a core."),
    "cond-engine-differs": (
        case(cand={"engine": "perfwarden.harness.embedded_server_fast"}), "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
        "The candidate ran another engine module: the engine is a condition."),
    "cond-parent-not-inert": (
        case(base_process={"cpu_count": 1}), "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
        "The baseline server's own process record says it saw 1 CPU (process.cpu_count). The registry once "
        "called the parent 'process' inert; a parent never makes its children inert."),
    "cond-conditions-removed": (
        case(strip=True), "FAIL", "eject", ["EVIDENCE_MISSING"], [],
        "Both legs' server_info.json lack the process conditions the harness records for every server it "
        "launches (their bench lines are version 2): the record that would show a handicap was removed."),
    "cond-near-reordered-floats": (
        _reordered, "PASS", "pass", [], QUIET,
        "Near miss: the same process conditions, keys in another order, integers written as floats."),
    "cond-near-inert-keys": (
        case(), "PASS", "pass", [], QUIET,
        "Near miss: only inert keys differ besides the declared change (port, process.pid, process.port), each "
        "backed by a measurement."),
}


def build_all(out: Path) -> list[str]:
    return write_case_table(out, CASES, frozen="2026-11-26", builder="proof/build_conditions.py")


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
