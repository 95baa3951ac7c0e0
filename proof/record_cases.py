"""Record fixtures on the embedded target: each faulty condition really run, with real LoadGen reps.

Every case's answer is in the CASES table below, written from the design's rules before the cases were
recorded; the script records raw evidence (servers, LoadGen, op benchmarks, profile) and writes each
fixture's claims and answer key from that table. Re-recording (new machine, new noise) never changes an
answer; if a re-recorded case disagrees, the auditor -- or the recording -- is what gets investigated.

    python -m perfwarden.proof.record_cases [--out proof/fixtures] [--reps 3]

Each fixture's legs are recorded together, interleaved, in their own run (a shared baseline recorded
in another session would be blocked in time), so it takes about twenty minutes on a quiet 2-core
machine. Run it on a quiet machine: a busy one records
CONTENDED_LEG everywhere (which the auditor then reports, correctly).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perfwarden.agents.op_benchmarker import pick_winner
from perfwarden.formats.records import Overlay, RunManifest, write_json_atomic
from perfwarden.harness.labs.embedded import EMBEDDED_BASE, EmbeddedLab
from perfwarden.harness.labs.lab import LegPlan
from perfwarden.harness.opbench import run_opbench_for_lab
from perfwarden.harness.profiling import profile_model
from perfwarden.harness.target_config import EmbeddedConfig

RAISING_OVERRIDE = '''import torch


def rmsnorm(hidden_states, weight, eps):
    raise RuntimeError("fused kernel does not support this shape")
'''

# Leg name -> config changes on top of the true baseline (recorded together, interleaved).
LEGS: dict[str, dict[str, Any]] = {
    "base": {},
    "aa": {},
    "mbs4": {"max_batch_size": 4},
    "threads1": {"threads": 1},
    "cache": {"response_cache": True},
    "int8": {"quantization": "int8_dynamic"},
    "plookup": {"prompt_lookup": True},
    "crash": {"op_overrides": {"rmsnorm": "ops/raising_rmsnorm.py:rmsnorm"}},
}

B_LEVER = {"lever_class": "B"}


def _claim(base: str, cand: str, name: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"seq": 1, "scope": "patch", "producer": "recorder",
                            "legs": {"baseline": base, "candidate": cand},
                            "lever": {"name": name, "lever_class": "B", "config_keys": [name.split("=")[0]]},
                            "headline": {"metric": "output_throughput", "kind": "e2e"}}
    for key, value in extra.items():
        body[key] = {**body.get(key, {}), **value} if isinstance(value, dict) and key in body else value
    return body


# name -> (legs used, claim builder(run) -> claim dict, verdict, action, must_include, must_exclude, why)
CASES: dict[str, tuple[tuple[str, ...], Any, str, str, list[str], list[str], str]] = {
    "rec-aa-pair": (("base", "aa"), lambda run: _claim("base", "aa", "nothing", lever={"config_keys": []}),
                    "FAIL", "eject", ["DELTA_NOT_SIGNIFICANT"], ["CONDITIONS_DIFFER", "CONTENDED_LEG"],
                    "Two legs of the same config, interleaved: any 'win' between them is noise."),
    "rec-batching-undisclosed": (("base", "mbs4"), lambda run: _claim("base", "mbs4", "max_batch_size=4"),
                                 "FLAG", "flag", ["HIDDEN_LATENCY_REGRESSION"], ["CONDITIONS_DIFFER", "DELTA_NOT_SIGNIFICANT"],
                                 "Batching 4 sequences raises throughput but each decode step serves 4: time per "
                                 "output token gets worse, and the claim does not say so."),
    "rec-batching-disclosed": (("base", "mbs4"), lambda run: _claim(
        "base", "mbs4", "max_batch_size=4",
        headline={"disclosed_regressions": _own_regressions(run, "base", "mbs4", ["median_tpot_ms", "p99_tpot_ms",
                                                                                   "median_itl_ms", "median_e2e_latency_ms",
                                                                                   "p99_e2e_latency_ms"])}),
        "FLAG", "flag", ["HIDDEN_LATENCY_REGRESSION"], ["CONDITIONS_DIFFER", "DELTA_NOT_SIGNIFICANT"],
        "The same batching win with its median per-token latency cost stated at the size the producer measured, "
        "but not its p99 ITL (re-derived by hand from the itls arrays of this recording): 118-135 ms per rep in "
        "the baseline vs 268-279 ms in mbs4 (+113%; +175% in the first recording), a tail regression "
        "the disclosure leaves out. Every primary metric is checked whatever the headline (issue 9 rule 5). "
        "Relabelled from PASS on 2026-11-23 on that raw evidence."),
    "rec-handicapped-baseline": (("threads1", "mbs4"), lambda run: _claim("threads1", "mbs4", "max_batch_size=4"),
                                 "FAIL", "eject", ["CONDITIONS_DIFFER"], [],
                                 "The baseline ran with 1 thread, the candidate with 2; only batching was declared."),
    "rec-misreported-summary": (("threads1", "mbs4"), lambda run: _claim(
        "threads1", "mbs4", "max_batch_size=4", reported={"conditions": {"threads": {"baseline": 2, "candidate": 2}}}),
        "FAIL", "eject", ["CONDITIONS_MISREPORTED", "CONDITIONS_DIFFER"], [],
        "The summary says both legs ran 2 threads; the baseline's server reported 1."),
    "rec-response-cache": (("base", "cache"), lambda run: _claim("base", "cache", "response_cache=True"),
                           "FAIL", "eject", ["CACHING_SUSPECTED"], [],
                           "A response cache serves stored answers: the measurement is of the cache."),
    "rec-int8-no-eval": (("base", "int8"), lambda run: _claim("base", "int8", "quantization=int8_dynamic"),
                         "FAIL", "eject", ["QUALITY_EVAL_MISSING"], [],
                         "Dynamic int8 is lossy; claimed supported with no quality eval."),
    "rec-prompt-lookup-as-kernel": (("base", "plookup"), lambda run: _claim(
        "base", "plookup", "prompt_lookup=True", lever={"lever_class": "A"}, headline={"kind": "kernel"}),
        "FAIL", "eject", ["ORTHOGONAL_LEVER", "DELTA_NOT_SIGNIFICANT"], [],
        "Prompt-lookup decoding is speculative decoding (accept length in the raw), headlined as a kernel win; on "
        "these prompts it does not even win."),
    "rec-crashing-override": (("base", "crash"), lambda run: _claim(
        "base", "crash", "rmsnorm_fused", lever={"lever_class": "A", "config_keys": [], "kernel_ops": ["rmsnorm"]}),
        "FAIL", "eject", ["REQUEST_ERRORS"], [],
        "The override raises on the served shape: requests fail. Do no harm."),
}

OPBENCH_CASES = {
    "rec-harness-clean": ("rmsnorm_alt.py", None, "PASS", "pass", [],
                          ["HARNESS_SELF_COMPARE", "HARNESS_INCORRECT", "HARNESS_UNSERVED_SHAPES"],
                          "F.rms_norm against the reference on the served shapes, correct over 3 seeds."),
    "rec-harness-self-compare": ("alternatives/rmsnorm_selfcopy.py", None, "FAIL", "redo_harness",
                                 ["HARNESS_SELF_COMPARE"], [], "The candidate is a copy of the reference."),
    "rec-harness-unserved-shapes": ("rmsnorm_alt.py", [[4096, 576]], "FAIL", "redo_harness",
                                    ["HARNESS_UNSERVED_SHAPES"], ["HARNESS_SELF_COMPARE"],
                                    "Benchmarked at 4096 rows; the server serves single sequences."),
}


def _own_regressions(run: Path, base: str, cand: str, metrics: list[str]) -> dict[str, float]:
    """The producer's own reading (the harness's per-rep aggregates), as an honest producer discloses."""
    out = {}
    for metric in metrics:
        med = []
        for leg in (base, cand):
            values = sorted(json.loads(line)[metric] for line in (run / "legs" / leg / "bench_runs.jsonl")
                            .read_text().splitlines() if line.strip())
            med.append(values[len(values) // 2])
        if med[0] and med[1] > med[0]:
            out[metric] = round((med[1] / med[0] - 1) * 100, 1)
    return out


def _fixture(out: Path, name: str, source: Path, legs: tuple[str, ...]) -> Path:
    """Copy some legs of the shared recording into a fixture. The recording is sealed (EmbeddedLab seals
    what it writes), but its chain covers every leg, so these per-case copies ship without it: they are
    unsealed fixtures (the sealed recorded case is ``proof/seal_cases.py --record``)."""
    fixture = out / name
    if fixture.exists():
        shutil.rmtree(fixture)
    run = fixture / "run"
    (run / "legs").mkdir(parents=True)
    shutil.copy(source / "run.json", run / "run.json")
    for leg in legs:
        shutil.copytree(source / "legs" / leg, run / "legs" / leg)
    return fixture


def _answer(fixture: Path, claim: dict, verdict: str, action: str, include: list[str], exclude: list[str],
            why: str) -> None:
    write_json_atomic(fixture / "run" / "claims" / f"001-{claim['scope']}.json", claim)
    write_json_atomic(fixture / "answer_key.json", {
        "schema_version": 1, "frozen": "2026-11-22",
        "answers": [{"claim": f"claims/001-{claim['scope']}.json", "verdict": verdict, "action": action,
                     "must_include": include, "must_exclude": exclude}],
        "provenance": "recorded on the embedded target (SmolLM2-135M, torch CPU, mlcommons-loadgen) by "
                      "proof/record_cases.py", "rationale": why})


def record(out: Path, reps: int, work: Path, only: set[str] | None = None) -> list[str]:
    """Record every case (or only the named ones) into ``out``; returns the names recorded."""
    work.mkdir(parents=True, exist_ok=True)
    write_json_atomic(work / "run.json", RunManifest(id="recorded", target="embedded", model="SmolLM2-135M-Instruct"))
    (work / "ops").mkdir(exist_ok=True)
    (work / "ops" / "raising_rmsnorm.py").write_text(RAISING_OVERRIDE)
    plans = []
    for leg, change in LEGS.items():
        config = {**EMBEDDED_BASE, **change}
        if "op_overrides" in change:
            config["op_overrides"] = {op: str(work / spec.split(":")[0]) + ":" + spec.split(":")[1]
                                      for op, spec in change["op_overrides"].items()}
        plans.append(LegPlan(leg=leg, role="baseline" if leg in ("base", "threads1") else "candidate",
                             config=EmbeddedConfig.of(config), overlay=Overlay(config=change)))
    lab = EmbeddedLab()
    by_leg = {plan.leg: plan for plan in plans}
    built = []
    for name, (legs, build, verdict, action, include, exclude, why) in CASES.items():
        if only is not None and name not in only:
            continue
        # Each fixture's legs are measured together, interleaved (A B A B), in their own run: legs
        # recorded in different sessions would be blocked in time, and the auditor (rightly) asks for a
        # re-measure of blocked legs (NOT_INTERLEAVED). Two servers at a time fit 2 cores' caches.
        case_dir = work / name
        write_json_atomic(case_dir / "run.json", RunManifest(id="recorded", target="embedded",
                                                             model="SmolLM2-135M-Instruct"))
        if any("op_overrides" in LEGS[leg] for leg in legs):
            shutil.copytree(work / "ops", case_dir / "ops", dirs_exist_ok=True)
        lab.measure(case_dir, [by_leg[leg] for leg in legs], reps)
        fixture = _fixture(out, name, case_dir, legs)
        if any("op_overrides" in LEGS[leg] for leg in legs):
            shutil.copytree(case_dir / "ops", fixture / "run" / "ops")
        _answer(fixture, build(fixture / "run"), verdict, action, include, exclude, why)
        built.append(name)

    if only is not None and "rec-cpu-hog" not in only and not only & set(OPBENCH_CASES):
        return built
    # A CPU hog during both legs of an otherwise clean comparison.
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        hog_dir = work / "hog"
        write_json_atomic(hog_dir / "run.json", RunManifest(id="hog", target="embedded", model="SmolLM2-135M-Instruct"))
        lab.measure(hog_dir, [LegPlan(leg="base", role="baseline", config=EmbeddedConfig.of(EMBEDDED_BASE)),
                              LegPlan(leg="mbs4", role="candidate",
                                      config=EmbeddedConfig.of({**EMBEDDED_BASE, "max_batch_size": 4}))], reps)
    finally:
        hog.kill()
    fixture = _fixture(out, "rec-cpu-hog", hog_dir, ("base", "mbs4"))
    _answer(fixture, _claim("base", "mbs4", "max_batch_size=4"), "FLAG", "remeasure", ["CONTENDED_LEG"], [],
            "Another process burned a core during the reps: the numbers measure the neighbour too.")
    built.append("rec-cpu-hog")

    # Op benchmarks on the served shapes from a real profile.
    ops_dir = Path(__file__).resolve().parents[1] / "harness" / "ops"
    for name, (impl, shapes, verdict, action, include, exclude, why) in OPBENCH_CASES.items():
        fixture = _fixture(out, name, work / "rec-aa-pair", ("base",))
        run = fixture / "run"
        profile_model(run / "profile" / "profile.jsonl", EmbeddedConfig.of(EMBEDDED_BASE), max_tokens=6)
        if shapes is None:  # the shapes the profile says the server serves
            rows = [json.loads(line) for line in (run / "profile" / "profile.jsonl").read_text().splitlines()]
            shapes = next(r["shapes"] for r in rows if r["name"] == "rmsnorm")[:2]
        spec = f"{ops_dir / impl}:rmsnorm"
        path = run_opbench_for_lab(run, "rmsnorm", [spec], shapes, iters=20)
        winner, speedup, ref = pick_winner(path)
        claim = {"seq": 1, "scope": "harness", "producer": "recorder", "op": "rmsnorm",
                 "opbench": str(path.relative_to(run)), "legs": {"baseline": "base"},
                 "isolated_speedup": {"value": round(speedup or 1.0, 4), "op": "rmsnorm",
                                      "opbench": str(path.relative_to(run)), "baseline_backend": ref,
                                      "candidate_backend": winner or spec}}
        _answer(fixture, claim, verdict, action, include, exclude, why)
        built.append(name)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "fixtures")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp") / f"perfwarden-record-{int(time.time())}")
    parser.add_argument("--only", nargs="+", default=None, help="record only these cases (A/B cases of CASES)")
    args = parser.parse_args()
    unknown = set(args.only or ()) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)!r} (--only takes A/B cases of CASES)")
    for name in record(args.out, args.reps, args.work, set(args.only) if args.only else None):
        print(f"recorded {args.out / name}")


if __name__ == "__main__":
    main()
