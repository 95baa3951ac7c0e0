"""Hand-built fixtures for "every number has a second witness".

Each case is the light A/B run of ``build_strict`` (interleaved, stamped reps; a real +10% win of a
declared knob) written as the harness writes it now (bench line version 2: ``ended_at`` and the
server's counters before and after each rep) with LoadGen's own logs of every rep. The attacks edit
one writer's account and leave the others as measured: a line faster than LoadGen's logs of it, a line
claiming more tokens or requests than the server's counters moved, zero-length gaps padded into the
ITLs (more chunks than tokens), a per-request array of another length, LoadGen's results deleted, a
version-2 line without its end stamp, and LoadGen folders named by every line and absent from an
unsealed run. The near misses must PASS: everything agreeing, with counts written as floats and keys
reordered, chunked streaming, unequal rep counts. Every answer is in the CASES table below, written
before the auditor was run on them; rebuilding never changes an answer.

    python -m perfwarden.proof.build_witness [--out proof/fixtures]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from perfwarden.proof.build_integrity import (QUIET, RUN_T0, ab, edit_lines, harness_fields, light, loadgen_logs,
                                              sample)
from perfwarden.proof.build_judgement_cases import int8_case
from perfwarden.proof.build_strict import STEP_S, timed
from perfwarden.orchestrator.synth import BASE_INFO, BASE_TPUT, CAND_TPUT, fixture_builder_main, write_case_table

BENCH_V2 = 2
COUNTERS_BEFORE = {"requests_admitted": 400, "requests_completed": 400, "requests_failed": 0,
                   "requests_cancelled": 0, "tokens_generated": 6400, "prefill_batches": 60, "decode_steps": 900,
                   "max_running_batch": 8, "spec_verify_steps": 0, "spec_drafted": 0, "spec_accepted": 0,
                   "spec_produced": 0, "response_cache_hits": 0, "response_cache_misses": 0, "step_errors": 0,
                   "avg_spec_accept_length": None, "response_cache_entries": None, "running_batch": 0, "queued": 0}


# ------------------------------------------------------------------------------------- building


def counters(line: dict, tokens: float = 1.0, requests: int = 0) -> dict:
    """The server's totals before and after ``line``'s rep: it admitted and completed the rep's requests
    (``requests`` fewer) and generated ``tokens`` x their output tokens."""
    n = len(line["errors"]) - requests
    out = sum(line["output_lens"])
    after = {**COUNTERS_BEFORE, "requests_admitted": 400 + n, "requests_completed": 400 + n,
             "tokens_generated": 6400 + round(out * tokens), "prefill_batches": 61, "decode_steps": 916}
    return {"before": dict(COUNTERS_BEFORE), "after": after}


def v2(line: dict, leg: str, start: float, **counter_kw: Any) -> dict:
    """A line as the harness writes it today: version 2, stamped, the server's counters around it."""
    line = harness_fields(timed(line, start), leg)
    line["schema_version"] = BENCH_V2
    line["output_lens_source"] = ["usage"] * len(line["errors"])
    line["finish_reasons"] = ["length"] * len(line["errors"])
    line["server_counters"] = counters(line, **counter_kw)
    line["contention"] = {"start": sample(), "end": sample()}  # sampled at the rep's start and end
    return line


def legs_v2(n_base: int = 5, n_cand: int = 5, cand_values: list[float] | None = None,
            **kw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    base = light("base", (BASE_TPUT * 2)[:n_base], 0, **kw)
    cand = light("cand", (cand_values or CAND_TPUT * 2)[:n_cand], 1, **kw)
    base = [v2(x, "base", RUN_T0 + 100 + STEP_S * k) for k, x in enumerate(base)]
    cand = [v2(x, "cand", RUN_T0 + 100 + STEP_S * k + STEP_S / 2) for k, x in enumerate(cand)]
    return base, cand


CONDITIONS = {"engine": "perfwarden.harness.embedded_server", "cpu_count": 2, "cpus_allowed": [0, 1],
              "cpu_quota_cores": None, "nice": 0, "thread_env": {"OMP_NUM_THREADS": "2"}}
PROCESS = {"pid": 4242, "host": "127.0.0.1", "port": 8100, "started_at": "2026-11-22T10:00:00Z", "cpu_count": 2,
           "platform": "Linux-6.1-x86_64-with-glibc2.36"}


def default_infos() -> tuple[dict, dict]:
    return infos()


def infos(base: dict | None = None, cand: dict | None = None, base_process: dict | None = None,
          strip: bool = False) -> tuple[dict, dict]:
    """The legs' server_info.json: the declared change (max_batch_size 8), the harness's measured
    process conditions (``base``/``cand`` replace fields) and the server's own process record."""
    b = {**BASE_INFO, "process": {**PROCESS, **(base_process or {})}}
    c = {**BASE_INFO, "max_batch_size": 8, "port": 8101, "process": {**PROCESS, "pid": 4343, "port": 8101}}
    if not strip:
        b["process_conditions"] = {**CONDITIONS, **(base or {})}
        c["process_conditions"] = {**CONDITIONS, **(cand or {})}
    return b, c


def build_infos(run: Path, base_info: dict, cand_info: dict) -> None:
    """The clean witnessed run with these server_info.json files."""
    build(run, *legs_v2(), infos=(base_info, cand_info))


def build(run: Path, base: list[dict], cand: list[dict], logs: tuple[list[dict], list[dict]] | None = None,
          results: bool = True, write_logs: bool = True, infos: tuple[dict, dict] | None = None) -> None:
    """The A/B run; LoadGen's logs from ``logs`` (what was measured), by default the lines themselves;
    server_info.json as the harness writes it (the server's report and the measured process conditions)."""
    base_info, cand_info = infos or default_infos()
    ab(run, base_reps=base, cand_reps=cand, base_info=base_info, cand_info=cand_info)
    if write_logs:
        for line in [*(logs or (base, cand))[0], *(logs or (base, cand))[1]]:
            loadgen_logs(run, line, results)


def with_lines(fn: Callable[[dict], dict], leg: str = "cand") -> Callable[[Path], None]:
    """The clean case, then every line of ``leg`` edited by ``fn`` (its LoadGen logs as measured)."""
    def builder(run: Path) -> None:
        build(run, *legs_v2())
        edit_lines(run, leg, fn)
    return builder


# ------------------------------------------------------------------------------------- the cases


def _line_faster(run: Path) -> None:
    """The candidate's lines re-written 15% faster (self-consistent arrays and aggregates); LoadGen's
    logs and the server's counters are the measured ones."""
    measured = legs_v2()
    faster = legs_v2(cand_values=[v * 1.15 for v in CAND_TPUT])
    build(run, measured[0], faster[1], logs=measured)


def _tokens_inflated(line: dict) -> dict:
    line["server_counters"] = counters(line, tokens=0.8)
    return line


def _requests_added(line: dict) -> dict:
    line["server_counters"] = counters(line, requests=2)
    return line


def _zero_gaps(line: dict) -> dict:
    """Zero-length gaps appended to every request's ITLs: latency and TTFT + gaps unchanged, the median
    ITL falls to 0 (a fake decode win)."""
    line["itls"] = [gaps + [0.0] * len(gaps) for gaps in line["itls"]]
    line["median_itl_ms"] = 0.0
    return line


def _short_array(line: dict) -> dict:
    line["finish_reasons"] = line["finish_reasons"][:-1]
    return line


def _no_end(line: dict) -> dict:
    del line["ended_at"]
    return line


def _results_removed(run: Path) -> None:
    base, cand = legs_v2()
    base_info, cand_info = default_infos()
    ab(run, base_reps=base, cand_reps=cand, base_info=base_info, cand_info=cand_info)
    for line in base:
        loadgen_logs(run, line)
    for line in cand:
        loadgen_logs(run, line, results=False)


def _folders_absent(run: Path) -> None:
    build(run, *legs_v2(), write_logs=False)


def _floats_reordered(line: dict) -> dict:
    line["server_counters"] = {side: {k: float(v) if isinstance(v, int) else v for k, v in
                                      sorted(values.items(), reverse=True)}
                               for side, values in reversed(line["server_counters"].items())}
    return dict(sorted(line.items(), reverse=True))


def _chunked(run: Path) -> None:
    build(run, *legs_v2(itl_chunk=4))


def _unequal(run: Path) -> None:
    build(run, *legs_v2(n_base=5, n_cand=6))


def _contention_field(line: dict) -> dict:
    line["contention"] = {"start": {**sample(), "quiet_verified": True}, "end": sample()}
    return line


def _contention_busy(line: dict) -> dict:
    """A harness sample listing one light neighbour (sshd at 1% of a core): every field the harness's."""
    line["contention"] = {"start": sample(busy=[{"pid": 811, "name": "sshd", "cpu_pct": 1.0}]), "end": sample()}
    return line


def _quality_field(run: Path) -> None:
    int8_case(base_score=0.45, cand_score=0.44)(run)
    path = run / "quality" / "pw-qa-exact-v1@cand.json"
    record = json.loads(path.read_text())
    record["reviewed_by_grader"] = "passed"
    path.write_text(json.dumps(record, indent=2))


def concurrency(limit: int) -> Callable[[Path], None]:
    """Both legs' lines say ``max_concurrency`` is ``limit``; their 8 requests each overlap all the others."""
    def builder(run: Path) -> None:
        build(run, *legs_v2())
        for leg in ("base", "cand"):
            edit_lines(run, leg, lambda line: {**line, "max_concurrency": limit})
    return builder


# name -> (builder, verdict, action, must_include, must_exclude, rationale)
CASES: dict[str, tuple[Callable[[Path], Any], str, str, list[str], list[str], str]] = {
    "witness-loadgen-line-faster": (
        _line_faster, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The candidate's bench lines were rewritten 15% faster with every array and aggregate re-derived to "
        "agree; LoadGen's own logs of the same reps still say how long the samples took: LoadGen's span is "
        "longer than the line's duration."),
    "witness-counters-tokens": (
        with_lines(_tokens_inflated), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The server's own counters moved by 80% of the output tokens the candidate's lines claim: the lines "
        "report tokens the server never generated."),
    "witness-counters-requests": (
        with_lines(_requests_added), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The server completed 6 requests during each candidate rep; the line holds 8 successful ones."),
    "witness-zero-gaps": (
        with_lines(_zero_gaps), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Every candidate request's inter-token gaps padded with as many zero-length gaps: latencies and "
        "TTFT + gaps unchanged, median ITL 0. More gaps than tokens: each gap separates two chunks of at "
        "least one token."),
    "witness-array-short": (
        with_lines(_short_array), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The candidate's finish_reasons hold 7 entries for 8 requests: the arrays describe two sets of "
        "requests."),
    "witness-v2-no-end-stamp": (
        with_lines(_no_end), "FAIL", "eject", ["EVIDENCE_MISSING"], [],
        "Version-2 candidate lines (the harness stamps every rep's end) without ended_at: the window the "
        "overlap check needs was removed."),
    "witness-loadgen-results-removed": (
        _results_removed, "FAIL", "eject", ["EVIDENCE_MISSING"], [],
        "The candidate's LoadGen logs lost their result lines (rate, tokens, longest latency) and their "
        "summary figures: LoadGen writes them at the end of every test."),
    "witness-loadgen-folders-absent": (
        _folders_absent, "FAIL", "eject", ["EVIDENCE_MISSING"], [],
        "Every line of both legs names its LoadGen folder and none exists, in an unsealed run: the records "
        "that would contradict the lines were removed (the harness keeps them)."),
    "witness-contention-unknown-field": (
        with_lines(_contention_field), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The candidate's contention samples carry 'quiet_verified', a field the harness never writes: a strict "
        "record refuses it (the sample decides whether the machine was quiet)."),
    "witness-quality-unknown-field": (
        _quality_field, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "The candidate's quality eval carries 'reviewed_by_grader', a field neither its schema nor the harness's "
        "evals write."),
    "witness-near-contention-busy": (
        with_lines(_contention_busy), "PASS", "pass", [], QUIET,
        "Near miss: the candidate's samples list a light neighbour (sshd at 1% of a core), every field the "
        "harness's own."),
    "witness-concurrency-over-limit": (
        concurrency(4), "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
        "Both legs' lines say max_concurrency 4 while their requests' starts and latencies put all 8 in flight "
        "at once: the load descriptor workload parity compares is not the load that ran."),
    "witness-near-concurrency-at-limit": (
        concurrency(8), "PASS", "pass", [], QUIET,
        "Near miss: max_concurrency 8 and 8 requests in flight at once: at the limit, not over it."),
    "witness-near-agree-floats-reordered": (
        with_lines(_floats_reordered), "PASS", "pass", [], QUIET,
        "Near miss: everything agrees; the candidate's counters are written as floats (400.0) and every key "
        "of its lines and counters in reverse order."),
    "witness-near-chunked": (
        _chunked, "PASS", "pass", [], QUIET,
        "Near miss: chunked streaming (4 tokens per chunk): fewer gaps than tokens, LoadGen and the counters "
        "agree."),
    "witness-near-unequal-reps": (
        _unequal, "PASS", "pass", [], QUIET,
        "Near miss: 5 baseline reps and 6 candidate reps, every witness agreeing."),
}


def build_all(out: Path) -> list[str]:
    return write_case_table(out, CASES, frozen="2026-11-26", builder="proof/build_witness.py")


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
