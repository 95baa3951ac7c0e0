"""Documented mutations that turn any clean patch fixture into a negative (GEAK's I-series, generalized).

Each mutation edits raw evidence or the claim of a copy of a clean fixture, and carries the answer the
design demands for it -- fixed here, in the mutation's definition, before the auditor sees the result.
The answer never comes from running the auditor.

    python -m perfwarden.proof.mutations CLEAN_FIXTURE OUT_DIR

A clean fixture has ``run/claims/<one patch claim>.json`` whose baseline and candidate legs hold
``bench_runs.jsonl`` and ``server_info.json``, and an answer key saying PASS.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from perfwarden.harness.records import Claim, IsolatedSpeedup, write_json_atomic


@dataclass(frozen=True)
class Mutation:
    name: str
    description: str
    apply: Callable[[Path, Claim], Claim]
    verdict: str
    action: str
    must_include: tuple[str, ...]


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
    lines = _bench_lines(run, claim.legs.candidate)
    for line in lines:
        line["accept_length"] = 2.7
    _write_bench(run, claim.legs.candidate, lines)
    _edit_server_info(run, claim.legs.candidate, speculative_algorithm="NGRAM", speculative_num_steps=4)
    lever = claim.lever.model_copy(update={"lever_class": "A", "config_keys": list(claim.lever.config_keys) + [
        "speculative_algorithm", "speculative_num_steps"]})
    mech = claim.mechanism.model_copy(update={"name": "speculative_decoding", "draft_model_id": "ngram",
                                              "acceptance_rate": 0.6})
    return claim.model_copy(update={"lever": lever, "mechanism": mech,
                                    "headline": claim.headline.model_copy(update={"kind": "kernel"})})


def provided_baseline_drift(run: Path, claim: Claim) -> Claim:
    """I2: a provided baseline number 30% above the re-derived one (a baseline-scope claim)."""
    from statistics import median

    lines = _bench_lines(run, claim.legs.baseline)
    reported = median(float(line["output_throughput"]) for line in lines)  # the harness's own aggregate
    return Claim(scope="baseline", seq=claim.seq, legs={"baseline": claim.legs.baseline},
                 provided_baseline={"metric": "output_throughput", "value": round(reported * 1.3, 3),
                                    "source": "mutation I2"})


def second_knob(run: Path, claim: Claim) -> Claim:
    """I3: an undeclared second knob differs in the candidate's server_info."""
    _edit_server_info(run, claim.legs.candidate, perfwarden_mutated_knob=0.80)
    _edit_server_info(run, claim.legs.baseline, perfwarden_mutated_knob=0.85)
    return claim


def null_reported_medians(run: Path, claim: Claim) -> Claim:
    """I4: the producer's reported medians are null; the raw is intact (must still PASS)."""
    reported = {"legs": {"baseline": {"output_throughput": {"median": None}},
                         "candidate": {"output_throughput": {"median": None}}}, "delta_pct": None}
    return claim.model_copy(update={"reported": reported})


def inflate_ttft(run: Path, claim: Claim) -> Claim:
    """I5: candidate TTFT +120% per request, throughput arrays untouched."""
    lines = _bench_lines(run, claim.legs.candidate)
    for line in lines:
        extra = [t * 1.2 for t in line["ttfts"]]
        line["ttfts"] = [t + e for t, e in zip(line["ttfts"], extra)]
        if line.get("latencies"):
            line["latencies"] = [lat + e for lat, e in zip(line["latencies"], extra)]
        for key in ("median_ttft_ms", "mean_ttft_ms", "p99_ttft_ms", "median_e2e_latency_ms", "mean_e2e_latency_ms",
                    "p99_e2e_latency_ms"):
            line.pop(key, None)
    _write_bench(run, claim.legs.candidate, lines)
    return claim


def isolated_within_noise(run: Path, claim: Claim) -> Claim:
    """I6: the candidate's reps are the baseline's reps re-labelled (no e2e delta) while an isolated
    3.0x is cited."""
    lines = _bench_lines(run, claim.legs.baseline)
    for line in lines:
        line["leg"] = claim.legs.candidate
        line["started_at"] = (line.get("started_at") or 0) + 1.0
    _write_bench(run, claim.legs.candidate, lines)
    iso = IsolatedSpeedup(value=3.0, op=(claim.lever.kernel_ops or ["op"])[0])
    return claim.model_copy(update={"isolated_speedup": iso,
                                    "headline": claim.headline.model_copy(update={"kind": "kernel"})})


def torn_tail(run: Path, claim: Claim) -> Claim:
    """The candidate's bench file ends in an unfinished line (the writer was killed)."""
    path = run / "legs" / claim.legs.candidate / "bench_runs.jsonl"
    path.write_bytes(path.read_bytes() + b'{"leg": "' + claim.legs.candidate.encode() + b'", "rep": 99, "dura')
    return claim


MUTATIONS: list[Mutation] = [
    Mutation("i1-spec-decode-as-kernel", spec_decode_as_kernel.__doc__, spec_decode_as_kernel, "FLAG",
             "downgrade_headline", ("ORTHOGONAL_LEVER",)),
    Mutation("i2-provided-baseline-drift", provided_baseline_drift.__doc__, provided_baseline_drift, "FAIL", "eject",
             ("BASELINE_DRIFT",)),
    Mutation("i3-second-knob", second_knob.__doc__, second_knob, "FAIL", "eject", ("CONDITIONS_DIFFER",)),
    Mutation("i4-null-reported-medians", null_reported_medians.__doc__, null_reported_medians, "PASS", "pass", ()),
    Mutation("i5-inflate-ttft", inflate_ttft.__doc__, inflate_ttft, "FLAG", "flag", ("HIDDEN_LATENCY_REGRESSION",)),
    Mutation("i6-isolated-within-noise", isolated_within_noise.__doc__, isolated_within_noise, "FAIL", "eject",
             ("ISOLATED_E2E_GAP", "DELTA_NOT_SIGNIFICANT")),
    Mutation("torn-tail", torn_tail.__doc__, torn_tail, "FLAG", "remeasure", ("EVIDENCE_CORRUPT",)),
]


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
    run = dest / "run"
    claim = Claim.model_validate_json(claims[0].read_text())
    for old in (run / "claims").glob("*.json"):
        old.unlink()
    new_claim = mutation.apply(run, claim)
    claim_rel = f"claims/{new_claim.seq:03d}-{new_claim.scope}.json"
    write_json_atomic(run / claim_rel, new_claim)
    key = {"schema_version": 1, "answers": [{"claim": claim_rel, "verdict": mutation.verdict,
                                             "action": mutation.action, "must_include": list(mutation.must_include),
                                             "must_exclude": []}],
           "provenance": f"mutation {mutation.name!r} of {clean.name!r} (proof/mutations.py)",
           "rationale": mutation.description.strip()}
    write_json_atomic(dest / "answer_key.json", key)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description="Apply every documented mutation to a clean fixture.")
    parser.add_argument("clean", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    for mutation in MUTATIONS:
        print(mutate(args.clean, args.out, mutation))


if __name__ == "__main__":
    main()
