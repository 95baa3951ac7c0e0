"""Sealed fixtures: runs whose evidence the harness sealed as it wrote it.

Every case's answer is in the CASES table below, written from the design's rules (missing or altered
evidence fails closed; a harness-marked failed leg is never banked; an unsealed file is audited as-is
and says so) *before* the auditor's integrity gate existed. The builders write raw evidence through
the harness's own sealed writers (``perfwarden.formats.seal``), with the key kept beside the run
(``<fixture>/seal.key``, ``seal.head``) -- never inside it -- so the backtest can hand it to the
auditor as an operator would with ``perfwarden audit --key``.

    python -m perfwarden.proof.seal_cases [--out proof/fixtures]            # synthetic cases
    python -m perfwarden.proof.seal_cases --record [--out proof/fixtures]   # + seal-rec-clean (embedded target)

Then the mutation families (``redteam/mutations.py`` ``SEAL_MUTATIONS``) are applied to every sealed
clean fixture::

    python -m perfwarden.redteam.mutations proof/fixtures/seal-syn-clean proof/fixtures/mutated
    python -m perfwarden.redteam.mutations proof/fixtures/seal-rec-clean proof/fixtures/mutated

Answer keys may carry ``must_note``: substrings that must appear in the verdict's ``not_checked``
(e.g. ``"unsealed"``: the verdict must say what it could not check).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any, Callable

from perfwarden.formats import seal
from perfwarden.formats.records import KernelPatch, LegSpec, Overlay, write_json_atomic
from perfwarden.harness.bench_writer import append_bench_line
from perfwarden.harness.labs.embedded import EMBEDDED_BASE, EmbeddedLab
from perfwarden.harness.labs.lab import LegPlan
from perfwarden.harness.target_config import EmbeddedConfig
from perfwarden.orchestrator.paths import shared_corpus
from perfwarden.orchestrator.synth import (BASE_INFO, CAND_TPUT, build_ab_run, make_rep, reps, write_claim, write_leg,
                                           write_manifest)
from perfwarden.proof.record_cases import _claim, _own_regressions

SEAL_CODES = ["EVIDENCE_TAMPERED", "EVIDENCE_MISSING"]
SGLANG_FILE = shared_corpus() / "sglang" / "bench_serving_llamacpp_smollm2.jsonl"
FAILED_LEG = "cand-broken"


def _sealed(fixture: Path, run_id: str) -> Path:
    """A fresh run directory whose chain is keyed with ``<fixture>/seal.key`` (outside the run)."""
    run = fixture / "run"
    run.mkdir(parents=True)
    write_manifest(run, run_id=run_id)
    seal.begin(run, key_file=fixture / "seal.key")
    return run


def _failed_leg(run: Path) -> None:
    """A candidate leg whose server died after two reps: the harness wrote its spec ``ok`` at start
    and rewrote it ``failed`` when the server died (both sealed, in that order)."""
    info = {**BASE_INFO, "max_batch_size": 16, "port": 8102}
    write_leg(run, FAILED_LEG, "candidate", info, reps(FAILED_LEG, [131.0, 129.4], 4),
              log_lines=["server ready", "Killed"], overlay={"config": {"max_batch_size": 16}}, parent="base")
    spec = LegSpec(leg=FAILED_LEG, role="candidate", overlay=Overlay(config={"max_batch_size": 16}),
                   purpose="candidate leg", parent_leg="base", status="failed",
                   failure="max_batch_size=16 server exited unexpectedly with code -9")
    seal.write_json(run / "legs" / FAILED_LEG / "leg.json", spec)


def sealed_clean(fixture: Path, run_id: str = "seal-syn") -> Path:
    """The clean A/B run of ``build_ab_run`` (a real, declared class-B 10% win), sealed, plus a leg the
    harness marked failed that the claim does not rest on."""
    run = _sealed(fixture, run_id)
    claim = build_ab_run(run)
    _failed_leg(run)
    seal.forget(run)
    return claim


def sealed_resumed(fixture: Path) -> Path:
    """Crash between writing a rep line and sealing it, then resume: the harness cuts the unsealed
    line aside (``bench_runs.jsonl.unsealed``, a ``cut`` entry) and re-measures the rep."""
    run = _sealed(fixture, "seal-resumed")
    cand = reps("cand", CAND_TPUT, 1)
    claim = build_ab_run(run, cand_reps=cand[:4])
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    with open(bench, "ab") as handle:  # written, never sealed: the process died here
        handle.write((json.dumps(cand[4], separators=(",", ":")) + "\n").encode())
    seal.forget(run)  # a new process resumes the run and continues the chain
    seal.begin(run, key_file=fixture / "seal.key")
    remeasured = make_rep("cand", 4, throughput=CAND_TPUT[4] * 1.003, ttft_ms=100.5, tpot_ms=20.1,
                          started_at=1_000.0 + 2 * 4 + 1)
    append_bench_line(bench, remeasured)
    seal.forget(run)
    return claim


def sealed_without_key(fixture: Path) -> Path:
    """A sealed run shipped without its key (audited on another machine without ``--key``)."""
    claim = sealed_clean(fixture, "seal-nokey")
    (fixture / "seal.key").unlink()
    (fixture / "seal.head").unlink()
    return claim


def sealed_without_key_rep_deleted(fixture: Path) -> Path:
    """No key, and the candidate's slowest rep line deleted: the manifest still lists it."""
    claim = sealed_without_key(fixture)
    bench = fixture / "run" / "legs" / "cand" / "bench_runs.jsonl"
    lines = bench.read_bytes().splitlines(keepends=True)
    worst = min(range(len(lines)), key=lambda i: json.loads(lines[i])["output_throughput"])
    bench.write_bytes(b"".join(lines[:worst] + lines[worst + 1:]))
    return claim


def sealed_failed_leg_claimed(fixture: Path) -> Path:
    """Untouched sealed run; the claim rests on the leg the harness marked failed."""
    sealed_clean(fixture, "seal-failed")
    run = fixture / "run"
    for old in (run / "claims").glob("*.json"):
        old.unlink()
    return write_claim(run, {"scope": "patch", "seq": 1, "producer": "config_tuner",
                             "legs": {"baseline": "base", "candidate": FAILED_LEG},
                             "lever": {"name": "max_batch_size=16", "lever_class": "B", "config_keys": ["max_batch_size"]},
                             "headline": {"metric": "output_throughput", "value": 30.0, "kind": "e2e"}})


def external_sglang(fixture: Path) -> Path:
    """A real sglang ``--output-details`` file imported as-is (no manifest, no key): audited, and the
    verdict says it is unsealed."""
    run = fixture / "run"
    leg = run / "legs" / "llamacpp"
    leg.mkdir(parents=True)
    shutil.copy(SGLANG_FILE, leg / "bench_runs.jsonl")
    return write_claim(run, {"scope": "baseline", "seq": 1, "producer": "import",
                             "legs": {"baseline": "llamacpp"}})


# name -> (builder(fixture) -> claim path, verdict, action, must_include, must_exclude, must_note, why)
CASES: dict[str, tuple[Callable[[Path], Path], str, str, list[str], list[str], list[str], str]] = {
    "seal-syn-clean": (sealed_clean, "PASS", "pass", [], [*SEAL_CODES, "SERVER_CRASH"], [],
                       "A clean, declared class-B win whose every file was sealed as the harness wrote it and "
                       "is untouched; the run also holds a failed leg the claim does not rest on (still present "
                       "and unchanged), which must not taint this claim."),
    "seal-syn-resumed": (sealed_resumed, "PASS", "pass", [], [*SEAL_CODES, "EVIDENCE_CORRUPT"], [],
                         "The harness died between writing a rep line and sealing it; on resume it cut the "
                         "unsealed line aside itself (a 'cut' entry under the key) and re-measured the rep. "
                         "What the key holder cut is not tampering, and every line now on disk is sealed."),
    "seal-syn-no-key": (sealed_without_key, "PASS", "pass", [], SEAL_CODES, ["unsealed"],
                        "The chain is present but no key was given or found, so the seal cannot be verified: "
                        "the verdict says 'unsealed' in not_checked; the manifest's completeness checks still "
                        "run and find nothing missing."),
    "seal-syn-no-key-rep-deleted": (sealed_without_key_rep_deleted, "FAIL", "eject", ["EVIDENCE_MISSING"], [],
                                    ["unsealed"],
                                    "Even without the key, the manifest lists 5 candidate reps and the file holds "
                                    "4: evidence went missing after writing. Fails closed."),
    "seal-syn-failed-leg-claimed": (sealed_failed_leg_claimed, "FAIL", "eject", ["SERVER_CRASH"],
                                    ["EVIDENCE_TAMPERED"], [],
                                    "The claim rests on a leg the harness marked failed (its server died after two "
                                    "reps): a failed leg can never be banked."),
    "seal-external-sglang": (external_sglang, "FLAG", "remeasure", ["REQUEST_ERRORS"], ["EVIDENCE_TAMPERED"],
                             ["unsealed"],
                             "A real sglang bench_serving file (11 of 20 requests failed in line 1) imported "
                             "without a manifest: audited as-is (request errors in a baseline -> FLAG "
                             "remeasure) and the verdict lists the seal as not checked, with no tamper finding."),
}

# The recorded clean fixture: the embedded target really run (SmolLM2-135M on torch, LoadGen reps),
# sealed by the real harness. Answer written before recording.
RECORDED: dict[str, tuple[str, str, list[str], list[str], list[str], str]] = {
    "seal-rec-clean": ("PASS", "pass", [], [*SEAL_CODES, "SERVER_CRASH", "CONDITIONS_DIFFER"], [],
                       "Baseline vs max_batch_size=4 recorded on the embedded target with the per-token latency "
                       "cost disclosed at the size the producer read from its own bench lines; every file sealed "
                       "by the harness as written. A third leg whose kernel override could not load was marked "
                       "failed by the harness; the claim does not rest on it."),
}
RECORDED_LEGS: dict[str, dict[str, Any]] = {
    "base": {},
    "mbs4": {"max_batch_size": 4},
    FAILED_LEG: {"op_overrides": {"rmsnorm": "/nonexistent/perfwarden/fused_rmsnorm.py:rmsnorm"}},
}


def _answer(fixture: Path, claim: Path, verdict: str, action: str, include: list[str], exclude: list[str],
            note: list[str], why: str, provenance: str, frozen: str = "2026-11-23") -> None:
    answer: dict[str, Any] = {"claim": str(claim.relative_to(fixture / "run")), "verdict": verdict, "action": action,
                              "must_include": include, "must_exclude": exclude}
    if note:
        answer["must_note"] = note
    write_json_atomic(fixture / "answer_key.json", {"schema_version": 1, "frozen": frozen, "answers": [answer],
                                                    "provenance": provenance, "rationale": why})


def _fresh(fixture: Path) -> None:
    if fixture.exists():
        shutil.rmtree(fixture)
    fixture.mkdir(parents=True)
    seal.forget(fixture / "run")


def build_all(out: Path) -> list[str]:
    built = []
    for name, (builder, verdict, action, include, exclude, note, why) in CASES.items():
        fixture = out / name
        _fresh(fixture)
        claim = builder(fixture)
        _answer(fixture, claim, verdict, action, include, exclude, note, why,
                "hand-built by proof/seal_cases.py through the harness's sealed writers (synthetic raw evidence)")
        built.append(name)
    return built


def record(out: Path, reps_per_leg: int = 3) -> list[str]:
    """Record ``seal-rec-clean`` on the embedded target (a few minutes on 2 cores)."""
    name = "seal-rec-clean"
    verdict, action, include, exclude, note, why = RECORDED[name]
    fixture = out / name
    _fresh(fixture)
    run = fixture / "run"
    run.mkdir()
    write_json_atomic(run / "run.json", {"schema_version": 1, "id": "seal-rec", "target": "embedded",
                                         "model": "SmolLM2-135M-Instruct", "seed": 0})
    seal.begin(run, key_file=fixture / "seal.key")
    plans = [LegPlan(leg=leg, role="baseline" if leg == "base" else "candidate",
                     config=EmbeddedConfig.of({**EMBEDDED_BASE, **change}),
                     overlay=Overlay(config=change) if "op_overrides" not in change else
                     Overlay(kernel_patches=[KernelPatch(op="rmsnorm", impl=change["op_overrides"]["rmsnorm"])]))
             for leg, change in RECORDED_LEGS.items()]
    EmbeddedLab().measure(run, plans, reps_per_leg)
    seal.forget(run)
    body = _claim("base", "mbs4", "max_batch_size=4", headline={"disclosed_regressions": _own_regressions(
        run, "base", "mbs4", ["median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "median_e2e_latency_ms",
                              "p99_e2e_latency_ms"])})
    claim = write_claim(run, body)
    _answer(fixture, claim, verdict, action, include, exclude, note, why,
            "recorded on the embedded target (SmolLM2-135M, torch CPU, mlcommons-loadgen) by "
            "proof/seal_cases.py --record; sealed by the harness as it wrote")
    return [name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "fixtures")
    parser.add_argument("--record", action="store_true", help="also record seal-rec-clean on the embedded target")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    names = build_all(args.out) + (record(args.out, args.reps) if args.record else [])
    for name in names:
        print(f"built {args.out / name}")


if __name__ == "__main__":
    main()
