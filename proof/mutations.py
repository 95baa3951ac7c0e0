"""Documented mutations that turn any clean patch fixture into a negative (GEAK's I-series, generalized).

Each mutation edits raw evidence or the claim of a copy of a clean fixture, and carries the answer the
design demands for it -- fixed here, in the mutation's definition, before the auditor sees the result.
The answer never comes from running the auditor.

    python -m perfwarden.proof.mutations CLEAN_FIXTURE OUT_DIR

A clean fixture has ``run/claims/<one patch claim>.json`` whose baseline and candidate legs hold
``bench_runs.jsonl`` and ``server_info.json``, and an answer key saying PASS.

A *sealed* clean fixture (``seal.key`` beside its run: the harness sealed its evidence, see
``perfwarden.harness.seal``) gets the ``SEAL_MUTATIONS`` instead: an attacker's edits made after the
harness wrote (without the key), each with its answer. Note for new families: on a sealed fixture ANY
edit of harness-written evidence is also ``EVIDENCE_TAMPERED`` at FAIL, so a content mutation's answer
there is FAIL/eject whatever it is on an unsealed fixture.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import secrets
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
    must_exclude: tuple[str, ...] = ()
    applies: Callable[[Path, Claim], bool] = lambda run, claim: True
    """Whether the mutation makes sense on this fixture (e.g. it needs a leg the harness marked failed)."""


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


def _has_failed_leg(run: Path, claim: Claim) -> bool:
    return _failed_leg(run) is not None


def edit_one_byte(run: Path, claim: Claim) -> Claim:
    """One digit of the candidate's first rep's output_throughput aggregate is changed (valid JSON)."""
    lines = _raw_lines(run, claim.legs.candidate)
    match = re.search(rb'"output_throughput":\s*-?\d+\.(\d)', lines[0])
    pos = match.start(1)
    digit = lines[0][pos] - ord("0")
    lines[0] = lines[0][:pos] + bytes([ord("0") + (digit + 5) % 10]) + lines[0][pos + 1:]
    _write_raw(run, claim.legs.candidate, lines)
    return claim


def reorder_two_lines(run: Path, claim: Claim) -> Claim:
    """The candidate's first two rep lines swap places (same bytes, another order)."""
    lines = _raw_lines(run, claim.legs.candidate)
    lines[0], lines[1] = lines[1], lines[0]
    _write_raw(run, claim.legs.candidate, lines)
    return claim


def delete_worst_rep(run: Path, claim: Claim) -> Claim:
    """The candidate's slowest rep line is deleted (the others are untouched)."""
    lines = _raw_lines(run, claim.legs.candidate)
    lines.remove(min(lines, key=_tput))
    _write_raw(run, claim.legs.candidate, lines)
    return claim


def insert_best_rep(run: Path, claim: Claim) -> Claim:
    """A copy of the candidate's fastest rep, renumbered, is inserted after the first line."""
    lines = _raw_lines(run, claim.legs.candidate)
    lines.insert(1, _best_as_new_rep(lines))
    _write_raw(run, claim.legs.candidate, lines)
    return claim


def append_rep_after_sealing(run: Path, claim: Claim) -> Claim:
    """A copy of the candidate's fastest rep, renumbered, is appended after the last sealed line."""
    lines = _raw_lines(run, claim.legs.candidate)
    lines.append(_best_as_new_rep(lines))
    _write_raw(run, claim.legs.candidate, lines)
    return claim


def strip_contention(run: Path, claim: Claim) -> Claim:
    """The contention sample of the candidate's first rep is removed (set to null)."""
    lines = _raw_lines(run, claim.legs.candidate)
    first = json.loads(lines[0])
    first["contention"] = None
    lines[0] = _dump(first)
    _write_raw(run, claim.legs.candidate, lines)
    return claim


def delete_leg_spec(run: Path, claim: Claim) -> Claim:
    """The candidate's leg.json is deleted."""
    (run / "legs" / claim.legs.candidate / "leg.json").unlink()
    return claim


def delete_server_log(run: Path, claim: Claim) -> Claim:
    """The candidate's server.log is deleted (it would show a crash or a warning)."""
    (run / "legs" / claim.legs.candidate / "server.log").unlink()
    return claim


def delete_bench_file(run: Path, claim: Claim) -> Claim:
    """The baseline's whole bench_runs.jsonl is deleted."""
    (run / "legs" / claim.legs.baseline / "bench_runs.jsonl").unlink()
    return claim


def delete_outputs(run: Path, claim: Claim) -> Claim:
    """The candidate's parity dump (outputs.jsonl) is deleted."""
    (run / "legs" / claim.legs.candidate / "outputs.jsonl").unlink()
    return claim


def edit_server_info(run: Path, claim: Claim) -> Claim:
    """The baseline's server_info.json is rewritten (a key added), as if the server had said so."""
    _edit_server_info(run, claim.legs.baseline, perfwarden_rewritten=True)
    return claim


def flip_failed_leg(run: Path, claim: Claim) -> Claim:
    """The leg the harness marked failed is rewritten to status ok, and the claim rests on it."""
    leg = _failed_leg(run)
    path = run / "legs" / leg / "leg.json"
    spec = json.loads(path.read_text())
    spec.update(status="ok", failure=None)
    write_json_atomic(path, spec)
    return claim.model_copy(update={"legs": claim.legs.model_copy(update={"candidate": leg})})


def delete_failed_leg_spec(run: Path, claim: Claim) -> Claim:
    """The failed leg's leg.json (which says failed) is deleted, and the claim rests on that leg."""
    leg = _failed_leg(run)
    (run / "legs" / leg / "leg.json").unlink()
    return claim.model_copy(update={"legs": claim.legs.model_copy(update={"candidate": leg})})


def delete_unrelated_leg(run: Path, claim: Claim) -> Claim:
    """A whole leg directory the claim does not rest on (the failed one) is deleted."""
    shutil.rmtree(run / "legs" / _failed_leg(run))
    return claim


def inject_leg(run: Path, claim: Claim) -> Claim:
    """A leg the harness never wrote: the candidate copied with 10% more throughput, claimed instead."""
    src, dst = run / "legs" / claim.legs.candidate, run / "legs" / f"{claim.legs.candidate}-v2"
    shutil.copytree(src, dst)
    lines = []
    for raw in _raw_lines(run, claim.legs.candidate):
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
    rel = f"legs/{claim.legs.candidate}/bench_runs.jsonl"
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
    from perfwarden.harness.seal import GENESIS_MAC, encode_entry, key_id

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
    key = {"schema_version": 1, "answers": [{"claim": claim_rel, "verdict": mutation.verdict,
                                             "action": mutation.action, "must_include": list(mutation.must_include),
                                             "must_exclude": list(mutation.must_exclude)}],
           "provenance": f"mutation {mutation.name!r} of {clean.name!r} (proof/mutations.py)",
           "rationale": mutation.description.strip()}
    write_json_atomic(dest / "answer_key.json", key)
    return dest


T, M = "EVIDENCE_TAMPERED", "EVIDENCE_MISSING"
SEAL_MUTATIONS: list[Mutation] = [
    Mutation("seal-edit-byte", edit_one_byte.__doc__, edit_one_byte, "FAIL", "eject", (T,)),
    Mutation("seal-reorder-lines", reorder_two_lines.__doc__, reorder_two_lines, "FAIL", "eject", (T,)),
    Mutation("seal-delete-rep", delete_worst_rep.__doc__, delete_worst_rep, "FAIL", "eject", (T, M)),
    Mutation("seal-insert-line", insert_best_rep.__doc__, insert_best_rep, "FAIL", "eject", (T,)),
    Mutation("seal-append-rep", append_rep_after_sealing.__doc__, append_rep_after_sealing, "FAIL", "eject", (T,)),
    Mutation("seal-strip-contention", strip_contention.__doc__, strip_contention, "FAIL", "eject", (T, M)),
    Mutation("seal-delete-leg-json", delete_leg_spec.__doc__, delete_leg_spec, "FAIL", "eject", (M,)),
    Mutation("seal-delete-server-log", delete_server_log.__doc__, delete_server_log, "FAIL", "eject", (M,)),
    Mutation("seal-delete-bench-file", delete_bench_file.__doc__, delete_bench_file, "FAIL", "eject", (M,)),
    Mutation("seal-delete-outputs", delete_outputs.__doc__, delete_outputs, "FAIL", "eject", (M,)),
    Mutation("seal-edit-server-info", edit_server_info.__doc__, edit_server_info, "FAIL", "eject", (T,)),
    Mutation("seal-flip-failed-leg", flip_failed_leg.__doc__, flip_failed_leg, "FAIL", "eject", (T,),
             applies=_has_failed_leg),
    Mutation("seal-delete-failed-leg-spec", delete_failed_leg_spec.__doc__, delete_failed_leg_spec, "FAIL", "eject",
             (M,), applies=_has_failed_leg),
    Mutation("seal-delete-unrelated-leg", delete_unrelated_leg.__doc__, delete_unrelated_leg, "FAIL", "eject", (M,),
             applies=_has_failed_leg),
    Mutation("seal-inject-leg", inject_leg.__doc__, inject_leg, "FAIL", "eject", (T,)),
    Mutation("seal-truncate-chain", truncate_chain.__doc__, truncate_chain, "FAIL", "eject", (T,)),
    Mutation("seal-delete-chain", delete_chain.__doc__, delete_chain, "FAIL", "eject", (T,)),
    Mutation("seal-edit-data-and-chain", edit_data_and_chain.__doc__, edit_data_and_chain, "FAIL", "eject", (T,)),
    Mutation("seal-chain-under-other-key", forge_chain_under_other_key.__doc__, forge_chain_under_other_key, "FAIL",
             "eject", (T,)),
    Mutation("seal-torn-tail", torn_tail_sealed.__doc__, torn_tail_sealed, "FLAG", "remeasure", ("EVIDENCE_CORRUPT",),
             must_exclude=(T,)),
    Mutation("seal-producer-files-added", producer_files_added.__doc__, producer_files_added, "PASS", "pass", (),
             must_exclude=(T, M)),
]


def mutations_for(clean: Path) -> list[Mutation]:
    """SEAL_MUTATIONS for a sealed clean fixture (``seal.key`` beside its run), MUTATIONS otherwise."""
    return SEAL_MUTATIONS if (Path(clean) / "seal.key").is_file() else MUTATIONS


def main() -> None:
    parser = argparse.ArgumentParser(description="Apply every documented mutation to a clean fixture.")
    parser.add_argument("clean", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    claims = sorted((args.clean / "run" / "claims").glob("*-patch.json"))
    claim = Claim.model_validate_json(claims[0].read_text()) if len(claims) == 1 else None
    for mutation in mutations_for(args.clean):
        if claim is not None and not mutation.applies(args.clean / "run", claim):
            print(f"skipped {mutation.name!r}: does not apply to {args.clean.name!r}")
            continue
        print(mutate(args.clean, args.out, mutation))


if __name__ == "__main__":
    main()
