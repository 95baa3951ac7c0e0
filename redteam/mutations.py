"""Documented mutations that turn any clean patch fixture into a negative (GEAK's I-series, generalized).

Each mutation edits raw evidence or the claim of a copy of a clean fixture, and carries the answer the
design demands for it -- fixed here, in the mutation's definition, before the auditor sees the result.
The answer never comes from running the auditor.

    python -m perfwarden.redteam.mutations CLEAN_FIXTURE OUT_DIR

A clean fixture has ``run/claims/<one patch claim>.json`` whose baseline and candidate legs hold
``bench_runs.jsonl`` and ``server_info.json``, and an answer key saying PASS.

A *sealed* clean fixture (``seal.key`` beside its run: the harness sealed its evidence, see
``perfwarden.formats.seal``) gets the ``SEAL_MUTATIONS`` instead: an attacker's edits made after the
harness wrote (without the key), each with its answer. Note for new families: on a sealed fixture ANY
edit of harness-written evidence is also ``EVIDENCE_TAMPERED`` at FAIL, so a content mutation's answer
there is FAIL/eject whatever it is on an unsealed fixture.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from perfwarden.auditor.model import roles
from perfwarden.formats.records import (Claim, DeclaredLever, IsolatedSpeedup, LegRefs, ProvidedBaseline,
                                        write_json_atomic)
from perfwarden.formats.seal import GENESIS_MAC, encode_entry, key_id

PROOF_FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
"""The shipped fixtures (data of perfwarden.proof) the committed mutations are built from."""


@dataclass(frozen=True)
class Mutation:
    name: str
    description: str
    apply: Callable[[Path, Claim], Claim]
    verdict: str
    action: str
    must_include: tuple[str, ...]
    must_exclude: tuple[str, ...] = ()
    family: str = "judgement"
    """The property the mutation attacks (``workload``, ``consistency``, ``seal`` …; else ``judgement``)."""
    applies: Callable[[Path, Claim], bool] = lambda run, claim: True
    """Whether the mutation makes sense on this fixture (e.g. it needs a leg the harness marked failed)."""


def _leg(claim: Claim, role: str) -> str:
    leg = getattr(claim.legs, role)
    if not isinstance(leg, str):  # a mutation is only applied to a fixture whose claim names the leg
        raise ValueError(f"this mutation edits the {role} leg, and the claim names none")
    return leg


def _lever(claim: Claim) -> DeclaredLever:
    if claim.lever is None:
        raise ValueError("this mutation edits the claim's declared lever, and the claim declares none")
    return claim.lever


def _doc(apply: Callable[[Path, Claim], Claim]) -> str:
    """A mutation's description: the docstring of the function that applies it."""
    return apply.__doc__ or ""


def _candidate(claim: Claim) -> str:
    return _leg(claim, "candidate")


def _baseline(claim: Claim) -> str:
    return _leg(claim, "baseline")


def _bench_lines(run: Path, leg: str) -> list[dict[str, Any]]:
    path = run / "legs" / leg / "bench_runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_bench(run: Path, leg: str, lines: list[dict[str, Any]]) -> None:
    path = run / "legs" / leg / "bench_runs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _edit_server_info(run: Path, leg: str, **changes: Any) -> None:
    path = run / "legs" / leg / "server_info.json"
    info = json.loads(path.read_text())
    info.update(changes)
    write_json_atomic(path, info)


def spec_decode_as_kernel(run: Path, claim: Claim) -> Claim:
    """I1: the candidate runs speculative decoding (raw accept_length), declared but headlined as a
    kernel win."""
    lines = _bench_lines(run, _candidate(claim))
    for line in lines:
        line["accept_length"] = 2.7
    _write_bench(run, _candidate(claim), lines)
    _edit_server_info(run, _candidate(claim), speculative_algorithm="NGRAM", speculative_num_steps=4)
    lever = _lever(claim).model_copy(update={"lever_class": "A", "config_keys": list(_lever(claim).config_keys) + [
        "speculative_algorithm", "speculative_num_steps"]})
    mech = claim.mechanism.model_copy(update={"name": "speculative_decoding", "draft_model_id": "ngram",
                                              "acceptance_rate": 0.6})
    return claim.model_copy(update={"lever": lever, "mechanism": mech,
                                    "headline": claim.headline.model_copy(update={"kind": "kernel"})})


def provided_baseline_drift(run: Path, claim: Claim) -> Claim:
    """I2: a provided baseline number 30% above the re-derived one (a baseline-scope claim)."""
    from statistics import median

    lines = _bench_lines(run, _baseline(claim))
    reported = median(float(line["output_throughput"]) for line in lines)  # the harness's own aggregate
    return Claim(scope="baseline", seq=claim.seq, legs=LegRefs(baseline=_baseline(claim)),
                 provided_baseline=ProvidedBaseline(metric="output_throughput", value=round(reported * 1.3, 3),
                                                    source="mutation I2"))


def second_knob(run: Path, claim: Claim) -> Claim:
    """I3: an undeclared second knob differs in the candidate's server_info."""
    _edit_server_info(run, _candidate(claim), perfwarden_mutated_knob=0.80)
    _edit_server_info(run, _baseline(claim), perfwarden_mutated_knob=0.85)
    return claim


def null_reported_medians(run: Path, claim: Claim) -> Claim:
    """I4: the producer's reported medians are null; the raw is intact (must still PASS)."""
    reported = {"legs": {"baseline": {"output_throughput": {"median": None}},
                         "candidate": {"output_throughput": {"median": None}}}, "delta_pct": None}
    return claim.model_copy(update={"reported": reported})


def inflate_ttft(run: Path, claim: Claim) -> Claim:
    """I5: candidate TTFT +120% per request, throughput arrays untouched."""
    lines = _bench_lines(run, _candidate(claim))
    for line in lines:
        extra = [t * 1.2 for t in line["ttfts"]]
        line["ttfts"] = [t + e for t, e in zip(line["ttfts"], extra)]
        if line.get("latencies"):
            line["latencies"] = [lat + e for lat, e in zip(line["latencies"], extra)]
        for key in ("median_ttft_ms", "mean_ttft_ms", "p99_ttft_ms", "median_e2e_latency_ms", "mean_e2e_latency_ms",
                    "p99_e2e_latency_ms"):
            line.pop(key, None)
    _write_bench(run, _candidate(claim), lines)
    return claim


def isolated_within_noise(run: Path, claim: Claim) -> Claim:
    """I6: the candidate's reps are the baseline's reps re-labelled (no e2e delta) while an isolated
    3.0x is cited."""
    lines = _bench_lines(run, _baseline(claim))
    for line in lines:
        line["leg"] = _candidate(claim)
        line["started_at"] = (line.get("started_at") or 0) + 1.0
    _write_bench(run, _candidate(claim), lines)
    iso = IsolatedSpeedup(value=3.0, op=(_lever(claim).kernel_ops or ["op"])[0])
    return claim.model_copy(update={"isolated_speedup": iso,
                                    "headline": claim.headline.model_copy(update={"kind": "kernel"})})


def torn_tail(run: Path, claim: Claim) -> Claim:
    """The candidate's bench file ends in an unfinished line (the writer was killed)."""
    path = run / "legs" / _candidate(claim) / "bench_runs.jsonl"
    path.write_bytes(path.read_bytes() + b'{"leg": "' + _candidate(claim).encode() + b'", "rep": 99, "dura')
    return claim


# ------------------------------------------------------------------ evidence-integrity families
# Each edits the candidate leg (unless it says otherwise) the way a sloppy harness or a producer
# touching its own files would, and its answer follows from the rule it breaks (docs/auditing.md, "How
# the auditor decides"), whatever clean fixture it is applied to.

_PER_REQUEST_SKIP = ("errors",)


def _n(line: dict[str, Any]) -> int:
    return len(line["errors"])


def _per_request_keys(line: dict[str, Any]) -> list[str]:
    n = _n(line)
    return [k for k, v in line.items() if isinstance(v, list) and len(v) == n and k not in _PER_REQUEST_SKIP]


def _e2e(line: dict[str, Any]) -> list[float]:
    if line.get("latencies"):
        return list(line["latencies"])
    return [t + sum(g) for t, g in zip(line["ttfts"], line.get("itls") or [[] for _ in line["ttfts"]])]


def _timeline_end(line: dict[str, Any]) -> float:
    starts = line.get("request_starts") or [0.0] * _n(line)
    return max(s + e for s, e in zip(starts, _e2e(line)))


def _recount(line: dict[str, Any]) -> dict[str, Any]:
    """Rewrite a line's counts and throughputs from its arrays (a careful forger does)."""
    ok = [i for i, e in enumerate(line["errors"]) if not e]
    line["completed"] = len(ok)
    line["total_output_tokens"] = sum(line["output_lens"][i] for i in ok)
    if line.get("input_lens") is not None:
        line["total_input_tokens"] = sum(line["input_lens"][i] for i in ok)
    d = line["duration"]
    line["output_throughput"] = line["total_output_tokens"] / d
    line["request_throughput"] = line["completed"] / d
    if line.get("input_lens") is not None:
        line["total_throughput"] = (line["total_output_tokens"] + line["total_input_tokens"]) / d
    return line


def _edit_cand(run: Path, claim: Claim, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    _write_bench(run, _candidate(claim), [fn(line) for line in _bench_lines(run, _candidate(claim))])


def fewer_requests(run: Path, claim: Claim) -> Claim:
    """Workload: the slowest request of every candidate rep is removed from all its arrays and every
    count of the line is rewritten to match (``issued`` too, where recorded): a careful forger's edit,
    after which the candidate's lines describe a smaller load than the baseline's."""
    def edit(line):
        drop = max(range(_n(line)), key=lambda i: _e2e(line)[i])
        for key in _per_request_keys(line) + ["errors"]:
            line[key] = line[key][:drop] + line[key][drop + 1:]
        if line.get("issued") is not None:
            line["issued"] = _n(line)
        return _recount(line)
    _edit_cand(run, claim, edit)
    return claim


def other_prompts(run: Path, claim: Claim) -> Claim:
    """Workload: the candidate ran other prompts, half as long (its ``input_lens`` halved, its prompt
    ids, where recorded, renamed); counts rewritten to match."""
    def edit(line):
        line["input_lens"] = [max(1, x // 2) for x in line["input_lens"]]
        if line.get("prompt_ids"):
            line["prompt_ids"] = [f"{p}-alt" for p in line["prompt_ids"]]
        return _recount(line)
    _edit_cand(run, claim, edit)
    return claim


def smaller_output_budget(run: Path, claim: Claim) -> Claim:
    """Workload: the baseline's requests asked for twice the tokens the candidate's did (both legs'
    ``request_params.max_tokens`` set; every output still fits its budget)."""
    top = max(max(line["output_lens"]) for leg in (_baseline(claim), _candidate(claim))
              for line in _bench_lines(run, leg))
    for leg, budget in ((_baseline(claim), 2 * top), (_candidate(claim), top)):
        lines = _bench_lines(run, leg)
        for line in lines:
            line["request_params"] = {**(line.get("request_params") or {}), "max_tokens": budget}
        _write_bench(run, leg, lines)
    return claim


def more_concurrency(run: Path, claim: Claim) -> Claim:
    """Workload: the candidate's reps ran at twice the baseline's concurrency limit (4096 where the
    baseline had none)."""
    base = _bench_lines(run, _baseline(claim))[0].get("max_concurrency")
    _edit_cand(run, claim, lambda line: {**line, "max_concurrency": 2 * base if base else 4096})
    return claim


def other_request_rate(run: Path, claim: Claim) -> Claim:
    """Workload: the candidate's reps ran at another request rate (7.5 QPS, or twice the baseline's)."""
    base = _bench_lines(run, _baseline(claim))[0].get("request_rate")
    rate = 2.0 * base if isinstance(base, (int, float)) and not isinstance(base, bool) else 7.5
    _edit_cand(run, claim, lambda line: {**line, "request_rate": rate})
    return claim


def ms_units(run: Path, claim: Claim) -> Claim:
    """Consistency: the candidate's per-request times are written in milliseconds (x1000) where the
    format has seconds; the line's own aggregates are left as they were."""
    def edit(line):
        line["ttfts"] = [t * 1000 for t in line["ttfts"]]
        if line.get("itls") is not None:
            line["itls"] = [[g * 1000 for g in gaps] for gaps in line["itls"]]
        for key in ("latencies", "request_starts"):
            if line.get(key) is not None:
                line[key] = [x * 1000 for x in line[key]]
        return line
    _edit_cand(run, claim, edit)
    return claim


def latency_below_ttft(run: Path, claim: Claim) -> Claim:
    """Consistency: every candidate request's latency is half its TTFT (a request that ends before
    its first token)."""
    _edit_cand(run, claim, lambda line: {**line, "latencies": [0.5 * t for t in line["ttfts"]]})
    return claim


def duration_short(run: Path, claim: Claim) -> Claim:
    """Consistency: each candidate rep's duration is half its own request timeline (first start to
    last end); throughputs rewritten to match."""
    _edit_cand(run, claim, lambda line: _recount({**line, "duration": 0.5 * _timeline_end(line)}))
    return claim


def duplicated_rep(run: Path, claim: Claim) -> Claim:
    """Consistency: the candidate's last rep carries its first rep's per-request arrays (its number,
    start time and duration kept)."""
    lines = _bench_lines(run, _candidate(claim))
    first, last = lines[0], lines[-1]
    for key in _per_request_keys(first) + ["errors"]:
        last[key] = first[key]
    _write_bench(run, _candidate(claim), lines)
    return claim


def copied_from_baseline(run: Path, claim: Claim) -> Claim:
    """Consistency: the candidate's reps are the baseline's, relabelled, with 10% shorter durations
    (a fake +11% win)."""
    lines = []
    for line in _bench_lines(run, _baseline(claim)):
        line = {**line, "duration": line["duration"] * 0.9}
        if "leg" in line:
            line["leg"] = _candidate(claim)
        if line.get("started_at") is not None:
            line["started_at"] += 1.0
        lines.append(_recount(line))
    _write_bench(run, _candidate(claim), lines)
    return claim


def huge_ttft(run: Path, claim: Claim) -> Claim:
    """Consistency (plausibility): one candidate request has a TTFT of 5,000 s (its latency too)."""
    def edit(line):
        line["ttfts"] = [5000.0] + line["ttfts"][1:]
        if line.get("latencies"):
            line["latencies"] = [5000.0 + line["latencies"][0]] + line["latencies"][1:]
        return line
    lines = _bench_lines(run, _candidate(claim))
    lines[-1] = edit(lines[-1])
    _write_bench(run, _candidate(claim), lines)
    return claim


def counts_contradict(run: Path, claim: Claim) -> Claim:
    """Consistency: one request is removed from every candidate rep's arrays, the line's counts and
    totals left as written (the line contradicts itself)."""
    def edit(line):
        for key in _per_request_keys(line) + ["errors"]:
            line[key] = line[key][1:]
        return line
    _edit_cand(run, claim, edit)
    return claim


def _a_knob(info: dict[str, Any]) -> tuple[str, Any]:
    """A knob of ``info`` (not a runtime or inert key) and a different value for it."""
    for key in sorted(info):
        value = info[key]
        if roles.is_inert(key) or isinstance(value, (dict, list)) or value is None:
            continue
        if isinstance(value, bool):
            return key, not value
        if isinstance(value, (int, float)):
            return key, value * 2 + 1
        return key, f"{value}-other"
    raise ValueError("server_info has no scalar knob to change")


def knob_only_in_bench_line(run: Path, claim: Claim) -> Claim:
    """Conditions: the server_info inside every candidate bench line is the leg's server_info.json
    with one knob changed (the other copies are untouched)."""
    info = json.loads((run / "legs" / _candidate(claim) / "server_info.json").read_text())
    key, value = _a_knob(info)
    _edit_cand(run, claim, lambda line: {**line, "server_info": {**info, key: value}})
    return claim


def knob_only_in_log(run: Path, claim: Claim) -> Claim:
    """Conditions: the candidate's server.log gains the embedded server's effective_config line, equal
    to its server_info.json except for one changed knob."""
    info = json.loads((run / "legs" / _candidate(claim) / "server_info.json").read_text())
    key, value = _a_knob(info)
    line = ("2026-11-22T10:00:01.000 INFO perfwarden.embedded: effective_config "
            + json.dumps({**info, key: value}, sort_keys=True))
    with open(run / "legs" / _candidate(claim) / "server.log", "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return claim


def busy_machine(run: Path, claim: Claim) -> Claim:
    """Contention: during every candidate rep five other processes used 25% of a core each (none past
    the per-process threshold) and the machine was 65% busy while the server idled."""
    busy = [{"pid": 500 + i, "name": f"job{i}", "cpu_pct": 25.0} for i in range(5)]

    def edit(line):
        sample = {"ncpu": 2, "loadavg": [1.5, 1.2, 1.0], "cpu_busy_pct": 65.0, "busy": busy, "error": None}
        return {**line, "contention": {"start": sample, "end": sample}}
    _edit_cand(run, claim, edit)
    return claim


def contention_missing(run: Path, claim: Claim) -> Claim:
    """Contention: the candidate's lines, written by perfwarden's harness (schema_version 1), carry no
    contention sample. A foreign baseline's lines are labelled the harness's too: the legs keep one writer,
    so the missing sample is the only thing the mutation changes."""
    def edit(line):
        line = {k: v for k, v in line.items() if k != "contention"}
        line.setdefault("schema_version", 1)
        return line
    _edit_cand(run, claim, edit)
    base = _bench_lines(run, _baseline(claim))
    if any("schema_version" not in line for line in base):
        _write_bench(run, _baseline(claim), [{**line, "schema_version": line.get("schema_version", 1)} for line in base])
    return claim


def blocked_order(run: Path, claim: Claim) -> Claim:
    """Order: every baseline rep ran before every candidate rep (legs measured in blocks)."""
    base = _bench_lines(run, _baseline(claim))
    t0 = min([x["started_at"] for x in base if x.get("started_at") is not None] or [1000.0])
    step = 10.0 + max(x["duration"] for leg in (_baseline(claim), _candidate(claim))
                      for x in _bench_lines(run, leg))
    for k, line in enumerate(base):
        line["started_at"] = t0 + k * step
    _write_bench(run, _baseline(claim), base)
    cand = _bench_lines(run, _candidate(claim))
    for k, line in enumerate(cand, start=len(base)):
        line["started_at"] = t0 + k * step
    _write_bench(run, _candidate(claim), cand)
    return claim


def absurd_rep_id(run: Path, claim: Claim) -> Claim:
    """Resources: the candidate's last line says it is rep 10^12."""
    lines = _bench_lines(run, _candidate(claim))
    lines[-1]["rep"] = 10**12
    _write_bench(run, _candidate(claim), lines)
    return claim


def absurd_issued(run: Path, claim: Claim) -> Claim:
    """Resources: the candidate's first line says LoadGen issued 10^15 requests."""
    lines = _bench_lines(run, _candidate(claim))
    lines[0]["issued"] = 10**15
    _write_bench(run, _candidate(claim), lines)
    return claim


def torn_last_rep(run: Path, claim: Claim) -> Claim:
    """Torn tail: the candidate's last rep line is cut in half (the writer was killed mid-line), so the
    candidate has one rep fewer than the baseline; nothing says the server died."""
    path = run / "legs" / _candidate(claim) / "bench_runs.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    return claim


MUTATIONS: list[Mutation] = [
    Mutation("i1-spec-decode-as-kernel", _doc(spec_decode_as_kernel), spec_decode_as_kernel, "FLAG",
             "downgrade_headline", ("ORTHOGONAL_LEVER",)),
    Mutation("i2-provided-baseline-drift", _doc(provided_baseline_drift), provided_baseline_drift, "FAIL", "eject",
             ("BASELINE_DRIFT",)),
    Mutation("i3-second-knob", _doc(second_knob), second_knob, "FAIL", "eject", ("CONDITIONS_DIFFER",)),
    Mutation("i4-null-reported-medians", _doc(null_reported_medians), null_reported_medians, "PASS", "pass", ()),
    Mutation("i5-inflate-ttft", _doc(inflate_ttft), inflate_ttft, "FLAG", "flag", ("HIDDEN_LATENCY_REGRESSION",)),
    Mutation("i6-isolated-within-noise", _doc(isolated_within_noise), isolated_within_noise, "FAIL", "eject",
             ("ISOLATED_E2E_GAP", "DELTA_NOT_SIGNIFICANT")),
    Mutation("torn-tail", _doc(torn_tail), torn_tail, "FLAG", "remeasure", ("EVIDENCE_CORRUPT",)),
    # 1. workload parity
    Mutation("wl-fewer-requests", _doc(fewer_requests), fewer_requests, "FAIL", "eject", ("CONDITIONS_DIFFER",),
             family="workload"),
    Mutation("wl-other-prompts", _doc(other_prompts), other_prompts, "FAIL", "eject", ("CONDITIONS_DIFFER",),
             family="workload"),
    Mutation("wl-output-budget", _doc(smaller_output_budget), smaller_output_budget, "FAIL", "eject",
             ("CONDITIONS_DIFFER",), family="workload"),
    Mutation("wl-concurrency", _doc(more_concurrency), more_concurrency, "FAIL", "eject", ("CONDITIONS_DIFFER",),
             family="workload"),
    Mutation("wl-request-rate", _doc(other_request_rate), other_request_rate, "FAIL", "eject",
             ("CONDITIONS_DIFFER",), family="workload"),
    # 2. every rep is internally consistent
    Mutation("rep-ms-units", _doc(ms_units), ms_units, "FAIL", "eject", ("EVIDENCE_CORRUPT",), family="consistency"),
    Mutation("rep-latency-below-ttft", _doc(latency_below_ttft), latency_below_ttft, "FAIL", "eject",
             ("EVIDENCE_CORRUPT",), family="consistency"),
    Mutation("rep-duration-short", _doc(duration_short), duration_short, "FAIL", "eject", ("EVIDENCE_CORRUPT",),
             family="consistency"),
    Mutation("rep-duplicated", _doc(duplicated_rep), duplicated_rep, "FAIL", "eject", ("EVIDENCE_CORRUPT",),
             family="consistency"),
    Mutation("rep-copied-from-baseline", _doc(copied_from_baseline), copied_from_baseline, "FAIL", "eject",
             ("EVIDENCE_CORRUPT",), family="consistency"),
    Mutation("rep-ttft-5000s", _doc(huge_ttft), huge_ttft, "FAIL", "eject", ("EVIDENCE_CORRUPT",),
             family="consistency"),
    Mutation("rep-counts-contradict", _doc(counts_contradict), counts_contradict, "FAIL", "eject",
             ("EVIDENCE_CORRUPT",), family="consistency"),
    # 3. every copy of the conditions agrees
    Mutation("cond-knob-only-in-bench-line", _doc(knob_only_in_bench_line), knob_only_in_bench_line, "FAIL",
             "eject", ("CONDITIONS_MISREPORTED",), family="conditions"),
    Mutation("cond-knob-only-in-log", _doc(knob_only_in_log), knob_only_in_log, "FAIL", "eject",
             ("CONDITIONS_MISREPORTED",), family="conditions"),
    # 6. contention and order
    Mutation("contention-busy-machine", _doc(busy_machine), busy_machine, "FLAG", "remeasure", ("CONTENDED_LEG",),
             family="contention"),
    Mutation("contention-missing", _doc(contention_missing), contention_missing, "FLAG", "remeasure",
             ("EVIDENCE_MISSING",), family="contention"),
    Mutation("order-blocked", _doc(blocked_order), blocked_order, "FLAG", "remeasure", ("NOT_INTERLEAVED",),
             family="order"),
    # 7. bounded resources
    Mutation("absurd-rep-id", _doc(absurd_rep_id), absurd_rep_id, "FAIL", "eject", ("EVIDENCE_CORRUPT",),
             family="resources"),
    Mutation("absurd-issued", _doc(absurd_issued), absurd_issued, "FAIL", "eject", ("EVIDENCE_MISSING",),
             family="resources"),
    # 8. a torn last line is not a crash
    Mutation("torn-last-rep", _doc(torn_last_rep), torn_last_rep, "FLAG", "remeasure", ("EVIDENCE_CORRUPT",),
             ("SERVER_CRASH",), family="torn"),
]

CLEAN_FIXTURES: tuple[str, ...] = (
    "syn-clean-patch-win", "geak-p1-clean", "syn-kernel-engaged", "syn-latency-near-miss", "syn-parity-near-miss",
    "syn-int8-eval-ok", "syn-test04-honest", "syn-contended-near-miss",
    "int-wl-issued-recorded", "int-wl-params-equal", "int-wl-concurrency-null", "int-wl-loadgen-log-agrees",
    "int-rep-latency-tail", "int-rep-aggregate-rounding", "int-rep-inside-run", "int-cond-bench-runtime",
    "int-cond-log-config-agrees", "int-cond-sglang-args-agree", "int-cond-log-unparseable", "int-contention-light",
    "int-foreign-sglang-pair", "int-order-randomized",
)
"""Fixtures every mutation is applied to: one patch claim answered PASS, and room in the evidence for
the mutation to mean what it says. Left out, with why: ``syn-report-clean`` (its prose quotes the
clean numbers, so any edit of the raw also makes the report untraced), ``int-rep-duration-tight`` (a
boundary case: its requests already fill the rep, so I5's longer TTFT cannot fit), and
``rec-batching-disclosed`` (recorded with the baseline's reps all before the candidate's: blocked,
see proof/README.md)."""

COMMITTED: dict[str, tuple[str, ...] | None] = {"syn-clean-patch-win": None, "geak-p1-clean": ("judgement",)}
"""Clean fixture -> the families whose mutations are written to ``proof/fixtures/mutated/`` (None: all).
Every other (clean fixture, mutation) pair is generated in a temporary directory by
``tests/test_mutation_families.py``, which keeps the repository small."""

SEALED_COMMITTED: tuple[str, ...] = ("seal-syn-clean", "seal-rec-clean", "seal-syn-resumed")
"""Sealed clean fixtures (``seal.key`` beside the run): every ``SEAL_MUTATIONS`` attack that applies is
written to ``proof/fixtures/mutated/``."""


# ------------------------------------------------------------------- attacks on sealed evidence
# Each edits harness-written files after the fact, as a producer that can touch the run directory but
# not the key store would. Lines are edited as raw bytes so that only the attacked line changes.


def _raw_lines(run: Path, leg: str) -> list[bytes]:
    return (run / "legs" / leg / "bench_runs.jsonl").read_bytes().splitlines(keepends=True)


def _write_raw(run: Path, leg: str, lines: list[bytes]) -> None:
    (run / "legs" / leg / "bench_runs.jsonl").write_bytes(b"".join(lines))


def _tput(line: bytes) -> float:
    return float(json.loads(line)["output_throughput"])


def _dump(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def _best_as_new_rep(lines: list[bytes]) -> bytes:
    """The fastest rep re-numbered as one more rep: what an attacker adds to lift the median."""
    best = json.loads(max(lines, key=_tput))
    best["rep"] = max(json.loads(line)["rep"] for line in lines) + 1
    best["started_at"] = (best.get("started_at") or 0) + 0.5
    return _dump(best)


def _failed_leg(run: Path) -> str | None:
    for spec in sorted((run / "legs").glob("*/leg.json")):
        try:
            if json.loads(spec.read_text()).get("status") == "failed":
                return spec.parent.name
        except ValueError:
            continue
    return None


def _the_failed_leg(run: Path) -> str:
    leg = _failed_leg(run)
    if leg is None:  # applied only where ``_has_failed_leg`` holds
        raise ValueError(f"{str(run)!r} has no leg the harness marked failed")
    return leg


def _has_failed_leg(run: Path, claim: Claim) -> bool:
    return _failed_leg(run) is not None


def edit_one_byte(run: Path, claim: Claim) -> Claim:
    """One digit of the candidate's first rep's output_throughput aggregate is changed (valid JSON)."""
    lines = _raw_lines(run, _candidate(claim))
    match = re.search(rb'"output_throughput":\s*-?\d+\.(\d)', lines[0])
    if match is None:
        raise ValueError("the candidate's first rep has no output_throughput aggregate with a decimal digit")
    pos = match.start(1)
    digit = lines[0][pos] - ord("0")
    lines[0] = lines[0][:pos] + bytes([ord("0") + (digit + 5) % 10]) + lines[0][pos + 1:]
    _write_raw(run, _candidate(claim), lines)
    return claim


def reorder_two_lines(run: Path, claim: Claim) -> Claim:
    """The candidate's first two rep lines swap places (same bytes, another order)."""
    lines = _raw_lines(run, _candidate(claim))
    lines[0], lines[1] = lines[1], lines[0]
    _write_raw(run, _candidate(claim), lines)
    return claim


def delete_worst_rep(run: Path, claim: Claim) -> Claim:
    """The candidate's slowest rep line is deleted (the others are untouched)."""
    lines = _raw_lines(run, _candidate(claim))
    lines.remove(min(lines, key=_tput))
    _write_raw(run, _candidate(claim), lines)
    return claim


def insert_best_rep(run: Path, claim: Claim) -> Claim:
    """A copy of the candidate's fastest rep, renumbered, is inserted after the first line."""
    lines = _raw_lines(run, _candidate(claim))
    lines.insert(1, _best_as_new_rep(lines))
    _write_raw(run, _candidate(claim), lines)
    return claim


def append_rep_after_sealing(run: Path, claim: Claim) -> Claim:
    """A copy of the candidate's fastest rep, renumbered, is appended after the last sealed line."""
    lines = _raw_lines(run, _candidate(claim))
    lines.append(_best_as_new_rep(lines))
    _write_raw(run, _candidate(claim), lines)
    return claim


def strip_contention(run: Path, claim: Claim) -> Claim:
    """The contention sample of the candidate's first rep is removed (set to null)."""
    lines = _raw_lines(run, _candidate(claim))
    first = json.loads(lines[0])
    first["contention"] = None
    lines[0] = _dump(first)
    _write_raw(run, _candidate(claim), lines)
    return claim


def delete_leg_spec(run: Path, claim: Claim) -> Claim:
    """The candidate's leg.json is deleted."""
    (run / "legs" / _candidate(claim) / "leg.json").unlink()
    return claim


def delete_server_log(run: Path, claim: Claim) -> Claim:
    """The candidate's server.log is deleted (it would show a crash or a warning)."""
    (run / "legs" / _candidate(claim) / "server.log").unlink()
    return claim


def delete_bench_file(run: Path, claim: Claim) -> Claim:
    """The baseline's whole bench_runs.jsonl is deleted."""
    (run / "legs" / _baseline(claim) / "bench_runs.jsonl").unlink()
    return claim


def delete_outputs(run: Path, claim: Claim) -> Claim:
    """The candidate's parity dump (outputs.jsonl) is deleted."""
    (run / "legs" / _candidate(claim) / "outputs.jsonl").unlink()
    return claim


def edit_server_info(run: Path, claim: Claim) -> Claim:
    """The baseline's server_info.json is rewritten (a key added), as if the server had said so."""
    _edit_server_info(run, _baseline(claim), perfwarden_rewritten=True)
    return claim


def flip_failed_leg(run: Path, claim: Claim) -> Claim:
    """The leg the harness marked failed is rewritten to status ok, and the claim rests on it."""
    leg = _the_failed_leg(run)
    path = run / "legs" / leg / "leg.json"
    spec = json.loads(path.read_text())
    spec.update(status="ok", failure=None)
    write_json_atomic(path, spec)
    return claim.model_copy(update={"legs": claim.legs.model_copy(update={"candidate": leg})})


def delete_failed_leg_spec(run: Path, claim: Claim) -> Claim:
    """The failed leg's leg.json (which says failed) is deleted, and the claim rests on that leg."""
    leg = _the_failed_leg(run)
    (run / "legs" / leg / "leg.json").unlink()
    return claim.model_copy(update={"legs": claim.legs.model_copy(update={"candidate": leg})})


def delete_unrelated_leg(run: Path, claim: Claim) -> Claim:
    """A whole leg directory the claim does not rest on (the failed one) is deleted."""
    shutil.rmtree(run / "legs" / _the_failed_leg(run))
    return claim


def inject_leg(run: Path, claim: Claim) -> Claim:
    """A leg the harness never wrote: the candidate copied with 10% more throughput, claimed instead."""
    src, dst = run / "legs" / _candidate(claim), run / "legs" / f"{_candidate(claim)}-v2"
    shutil.copytree(src, dst)
    lines = []
    for raw in _raw_lines(run, _candidate(claim)):
        rep = json.loads(raw)
        rep["leg"] = dst.name
        rep["duration"] = rep["duration"] / 1.1
        for key in ("output_throughput", "request_throughput", "total_throughput", "input_throughput"):
            if isinstance(rep.get(key), (int, float)):
                rep[key] = rep[key] * 1.1
        lines.append(_dump(rep))
    _write_raw(run, dst.name, lines)
    spec = json.loads((dst / "leg.json").read_text())
    spec["leg"] = dst.name
    write_json_atomic(dst / "leg.json", spec)
    return claim.model_copy(update={"legs": claim.legs.model_copy(update={"candidate": dst.name})})


def truncate_chain(run: Path, claim: Claim) -> Claim:
    """The last three entries of the seal chain are cut off (at a line boundary)."""
    path = run / "evidence.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-3]))
    return claim


def delete_chain(run: Path, claim: Claim) -> Claim:
    """The seal chain is deleted, so the run looks like an unsealed import."""
    (run / "evidence.jsonl").unlink()
    return claim


def edit_data_and_chain(run: Path, claim: Claim) -> Claim:
    """A candidate line is edited and every chain entry of that file is fixed up to match (line and
    whole-file digests recomputed); without the key the entries' MACs cannot be redone."""
    edit_one_byte(run, claim)
    rel = f"legs/{_candidate(claim)}/bench_runs.jsonl"
    data = (run / rel).read_bytes()
    chain = run / "evidence.jsonl"
    out = []
    for raw in chain.read_bytes().splitlines(keepends=True):
        entry = json.loads(raw)
        if entry.get("kind") == "line" and entry.get("file") == rel:
            start, end = entry["offset"], entry["offset"] + entry["length"]
            entry["sha256"] = hashlib.sha256(data[start:end]).hexdigest()
            entry["file_sha256"] = hashlib.sha256(data[:entry["size"]]).hexdigest()
            mac = entry.pop("mac")
            body = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
            raw = body[:-1] + b',"mac":"' + mac.encode() + b'"}\n'
        out.append(raw)
    chain.write_bytes(b"".join(out))
    return claim


def forge_chain_under_other_key(run: Path, claim: Claim) -> Claim:
    """The candidate's first rep is edited, then the whole chain is rebuilt -- consistently, over every
    file now on disk -- under a fresh key the forger made (same seal id, new key)."""
    edit_one_byte(run, claim)
    chain = run / "evidence.jsonl"
    first = json.loads(chain.read_bytes().splitlines()[0])
    key = secrets.token_bytes(32)
    entries: list[dict[str, Any]] = [{"kind": "open", "seal_id": first["seal_id"], "run_id": first.get("run_id"),
                                      "key_id": key_id(key), "created_at": first.get("created_at")}]
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        rel = path.relative_to(run).as_posix()
        if rel == "evidence.jsonl" or rel.split("/")[0] in ("claims", "verdicts") or rel == "run.json":
            continue
        parts = rel.split("/")
        leg = {"leg": parts[1]} if parts[0] == "legs" and len(parts) > 2 else {}
        if path.name == "bench_runs.jsonl":
            running, offset = hashlib.sha256(), 0
            for n, raw in enumerate(path.read_bytes().splitlines(keepends=True), 1):
                running.update(raw)
                rep = json.loads(raw)
                entries.append({"kind": "line", "file": rel, "line": n, "offset": offset, "length": len(raw) - 1,
                                "sha256": hashlib.sha256(raw[:-1]).hexdigest(), "size": offset + len(raw),
                                "file_sha256": running.copy().hexdigest(), "rep": rep.get("rep"),
                                "contention": rep.get("contention") is not None, **leg})
                offset += len(raw)
        else:
            data = path.read_bytes()
            status = {"status": json.loads(data).get("status", "ok")} if path.name == "leg.json" else {}
            entries.append({"kind": "file", "file": rel, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                            **leg, **status})
    prev, out = GENESIS_MAC, []
    for seq, fields in enumerate(entries):
        line, prev = encode_entry({"v": 1, "seq": seq, "prev": prev, **{k: v for k, v in fields.items()
                                                                      if v is not None}}, key)
        out.append(line)
    chain.write_bytes(b"".join(out))
    return claim


def torn_tail_sealed(run: Path, claim: Claim) -> Claim:
    """Near miss: the candidate's bench file ends in an unfinished line (a writer killed mid-line).
    An unterminated fragment is not a record; it is torn-tail residue, not an inserted rep."""
    return torn_tail(run, claim)


def producer_files_added(run: Path, claim: Claim) -> Claim:
    """Near miss: a producer wrote a report and an earlier verdict into the run. Claims, verdicts and
    reports are not the harness's and are not sealed; their presence is not tampering."""
    (run / "report.md").write_text("# notes\n\nbatching helps on this box.\n")
    write_json_atomic(run / "verdicts" / "000-baseline.json", {"note": "an older verdict"})
    return claim


def mutate(clean: Path, out_root: Path, mutation: Mutation) -> Path:
    """Copy a clean fixture, apply one mutation, write its answer key. Returns the new fixture dir."""
    clean = Path(clean)
    claims = sorted((clean / "run" / "claims").glob("*-patch.json"))
    if len(claims) != 1:
        raise ValueError(f"{str(clean)!r} needs exactly one patch claim, has {len(claims)}")
    dest = Path(out_root) / f"{clean.name}--{mutation.name}"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(clean / "run", dest / "run", ignore=shutil.ignore_patterns("verdicts"))
    for name in ("seal.key", "seal.head"):  # the key stays beside the run, as the operator holds it
        if (clean / name).is_file():
            shutil.copy(clean / name, dest / name)
    run = dest / "run"
    claim = Claim.model_validate_json(claims[0].read_text())
    for old in (run / "claims").glob("*.json"):
        old.unlink()
    new_claim = mutation.apply(run, claim)
    claim_rel = f"claims/{new_claim.seq:03d}-{new_claim.scope}.json"
    write_json_atomic(run / claim_rel, new_claim)
    # The provenance keeps this module's old path: the 94 committed answer keys (frozen) were written with it.
    key = {"schema_version": 1, "answers": [{"claim": claim_rel, "verdict": mutation.verdict,
                                             "action": mutation.action, "must_include": list(mutation.must_include),
                                             "must_exclude": list(mutation.must_exclude)}],
           "provenance": f"mutation {mutation.name!r} of {clean.name!r} (proof/mutations.py)",
           "rationale": mutation.description.strip()}
    write_json_atomic(dest / "answer_key.json", key)
    return dest


T, M = "EVIDENCE_TAMPERED", "EVIDENCE_MISSING"
SEAL_MUTATIONS: list[Mutation] = [
    Mutation("seal-edit-byte", _doc(edit_one_byte), edit_one_byte, "FAIL", "eject", (T,)),
    Mutation("seal-reorder-lines", _doc(reorder_two_lines), reorder_two_lines, "FAIL", "eject", (T,)),
    Mutation("seal-delete-rep", _doc(delete_worst_rep), delete_worst_rep, "FAIL", "eject", (T, M)),
    Mutation("seal-insert-line", _doc(insert_best_rep), insert_best_rep, "FAIL", "eject", (T,)),
    Mutation("seal-append-rep", _doc(append_rep_after_sealing), append_rep_after_sealing, "FAIL", "eject", (T,)),
    Mutation("seal-strip-contention", _doc(strip_contention), strip_contention, "FAIL", "eject", (T, M)),
    Mutation("seal-delete-leg-json", _doc(delete_leg_spec), delete_leg_spec, "FAIL", "eject", (M,)),
    Mutation("seal-delete-server-log", _doc(delete_server_log), delete_server_log, "FAIL", "eject", (M,)),
    Mutation("seal-delete-bench-file", _doc(delete_bench_file), delete_bench_file, "FAIL", "eject", (M,)),
    Mutation("seal-delete-outputs", _doc(delete_outputs), delete_outputs, "FAIL", "eject", (M,)),
    Mutation("seal-edit-server-info", _doc(edit_server_info), edit_server_info, "FAIL", "eject", (T,)),
    Mutation("seal-flip-failed-leg", _doc(flip_failed_leg), flip_failed_leg, "FAIL", "eject", (T,),
             applies=_has_failed_leg),
    Mutation("seal-delete-failed-leg-spec", _doc(delete_failed_leg_spec), delete_failed_leg_spec, "FAIL", "eject",
             (M,), applies=_has_failed_leg),
    Mutation("seal-delete-unrelated-leg", _doc(delete_unrelated_leg), delete_unrelated_leg, "FAIL", "eject", (M,),
             applies=_has_failed_leg),
    Mutation("seal-inject-leg", _doc(inject_leg), inject_leg, "FAIL", "eject", (T,)),
    Mutation("seal-truncate-chain", _doc(truncate_chain), truncate_chain, "FAIL", "eject", (T,)),
    Mutation("seal-delete-chain", _doc(delete_chain), delete_chain, "FAIL", "eject", (T,)),
    Mutation("seal-edit-data-and-chain", _doc(edit_data_and_chain), edit_data_and_chain, "FAIL", "eject", (T,)),
    Mutation("seal-chain-under-other-key", _doc(forge_chain_under_other_key), forge_chain_under_other_key, "FAIL",
             "eject", (T,)),
    Mutation("seal-torn-tail", _doc(torn_tail_sealed), torn_tail_sealed, "FLAG", "remeasure", ("EVIDENCE_CORRUPT",),
             must_exclude=(T,)),
    Mutation("seal-producer-files-added", _doc(producer_files_added), producer_files_added, "PASS", "pass", (),
             must_exclude=(T, M)),
]
SEAL_MUTATIONS = [dataclasses.replace(m, family="seal") for m in SEAL_MUTATIONS]


def mutations_for(clean: Path) -> list[Mutation]:
    """SEAL_MUTATIONS for a sealed clean fixture (``seal.key`` beside its run), MUTATIONS otherwise."""
    return SEAL_MUTATIONS if (Path(clean) / "seal.key").is_file() else MUTATIONS


def main() -> None:
    parser = argparse.ArgumentParser(description="Apply every documented mutation to a clean fixture.")
    parser.add_argument("clean", type=Path, nargs="?", help="one clean fixture (default: the committed ones)")
    parser.add_argument("out", type=Path, nargs="?", default=PROOF_FIXTURES / "mutated")
    args = parser.parse_args()
    root = PROOF_FIXTURES
    plan = {args.clean: None} if args.clean else {
        **{root / name: families for name, families in COMMITTED.items()},
        **{root / name: None for name in SEALED_COMMITTED}}
    for clean, families in plan.items():
        claims = sorted((clean / "run" / "claims").glob("*-patch.json"))
        claim = Claim.model_validate_json(claims[0].read_text()) if len(claims) == 1 else None
        for mutation in mutations_for(clean):
            if families is not None and mutation.family not in families:
                continue
            if claim is not None and not mutation.applies(clean / "run", claim):
                print(f"skipped {mutation.name!r}: does not apply to {clean.name!r}")
                continue
            print(mutate(clean, args.out, mutation))


if __name__ == "__main__":
    main()
