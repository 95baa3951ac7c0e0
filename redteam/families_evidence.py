"""Attack families on the evidence properties the auditor enforces (conditions, reported numbers,
do-no-harm, correctness, integrity of the files), and the backtest's evidence mutations
(``redteam/mutations.py``) registered as families. Same contract as ``families_judgement``.
"""

from __future__ import annotations

import random
from typing import Any

from perfwarden.formats.records import Claim
from perfwarden.redteam.attack import AttackContext, Expectation, family, rep_metric
from perfwarden.redteam.family_tools import (GIBBERISH, cover_timeline, edit_bench, kernel_headline, lossy_claim,
                                             measured_delta, strip_aggregates)
from perfwarden.redteam.mutations import MUTATIONS


# ------------------------------------------------------------- evidence: conditions and the claim

KNOWN_KNOBS = [("threads", 1), ("batch_wait_ms", 17), ("attn_implementation", "eager"), ("mem_fraction_static", 0.7),
               ("chunked_prefill_size", 2048), ("tp_size", 2)]


@family("second_knob", "evidence: conditions")
def second_knob(ctx: AttackContext, rng: random.Random) -> Expectation | None:
    declared = set((ctx.claim.get("lever") or {}).get("config_keys", []))
    key, value = rng.choice([k for k in KNOWN_KNOBS if k[0] not in declared])
    cand = ctx.info(ctx.cand_leg)
    if cand.get(key) == value:
        return None
    cand[key] = value
    ctx.write_info(ctx.cand_leg, cand)
    return Expectation.fail("CONDITIONS_DIFFER", why=f"{key} also changed, undeclared")


@family("handicapped_baseline", "evidence: conditions")
def handicapped_baseline(ctx: AttackContext, rng: random.Random) -> Expectation | None:
    declared = set((ctx.claim.get("lever") or {}).get("config_keys", []))
    key, value = rng.choice([k for k in KNOWN_KNOBS if k[0] not in declared])
    base = ctx.info(ctx.base_leg)
    if base.get(key) == value:
        return None
    base[key] = value
    ctx.write_info(ctx.base_leg, base)
    return Expectation.fail("CONDITIONS_DIFFER", why=f"the baseline ran with {key}={value!r}, the candidate not")


@family("misreported_conditions", "evidence: conditions")
def misreported_conditions(ctx: AttackContext, rng: random.Random) -> Expectation | None:
    info = ctx.info(ctx.base_leg)
    keys = [k for k, v in info.items() if isinstance(v, int) and not isinstance(v, bool) and k != "port"]
    if not keys:
        return None
    key = rng.choice(keys)
    ctx.claim.setdefault("reported", {})["conditions"] = {key: {"baseline": info[key] + rng.randint(1, 8),
                                                                "candidate": info[key]}}
    return Expectation.fail("CONDITIONS_MISREPORTED", why=f"the summary misstates the baseline's {key}")


@family("inflated_headline", "evidence: reported numbers", touches=("headline", "delta"))
def inflated_headline(ctx: AttackContext, rng: random.Random) -> Expectation:
    ctx.headline()["value"] = round(measured_delta(ctx) * rng.uniform(1.6, 4.0) + 3.0, 2)
    return Expectation.refuse("REPORTED_MISMATCH", why="the headline overstates the re-derived delta")


@family("line_aggregate_lie", "evidence: reported numbers")
def aggregate_lie(ctx: AttackContext, rng: random.Random) -> Expectation:
    lines = ctx.bench(ctx.cand_leg)
    k = rng.randrange(len(lines))
    lines[k]["output_throughput"] = rep_metric(lines[k], "output_throughput") * rng.uniform(1.3, 2.0)
    ctx.write_bench(ctx.cand_leg, lines)
    return Expectation.refuse("REPORTED_MISMATCH", why="a bench line's own aggregate disagrees with its arrays")


# ------------------------------------------------------------------------ evidence: do no harm


@family("request_errors", "evidence: do no harm")
def request_errors(ctx: AttackContext, rng: random.Random) -> Expectation:
    lines = ctx.bench(ctx.cand_leg)
    line = lines[rng.randrange(len(lines))]
    for i in rng.sample(range(len(line["errors"])), min(len(line["errors"]), rng.randint(1, 3))):
        line["errors"][i] = "HTTP 500: worker died"
        line["output_lens"][i] = 0
        line["ttfts"][i] = 0.0
        line["itls"][i] = []
        if line.get("latencies"):
            line["latencies"][i] = 0.0
        if line.get("generated_texts"):
            line["generated_texts"][i] = ""
    for x in lines:
        strip_aggregates(x)
    ctx.write_bench(ctx.cand_leg, lines)
    return Expectation.fail("REQUEST_ERRORS", why="the candidate failed requests")


@family("crash_log_and_lost_rep", "evidence: do no harm")
def crash(ctx: AttackContext, rng: random.Random) -> Expectation | None:
    lines = ctx.bench(ctx.cand_leg)
    if len(lines) < 3:
        return None
    ctx.write_bench(ctx.cand_leg, lines[:-1])
    ctx.append_log(ctx.cand_leg, [rng.choice(["Segmentation fault (core dumped)", "CUDA error: an illegal memory "
                                              "access was encountered", "Killed"])])
    return Expectation.fail("SERVER_CRASH", why="the candidate server died and lost a rep")


@family("output_length_shift", "evidence: do no harm")
def length_shift(ctx: AttackContext, rng: random.Random) -> Expectation:
    s = rng.uniform(0.4, 0.8)

    def shorter(line: dict[str, Any]) -> None:
        line["output_lens"] = [max(1, int(n * s)) if n else 0 for n in line["output_lens"]]
        line["itls"] = [gaps[:max(0, n - 1)] for gaps, n in zip(line["itls"], line["output_lens"])]
        if line.get("latencies"):
            line["latencies"] = [t + sum(g) if n else 0.0 for t, g, n in
                                 zip(line["ttfts"], line["itls"], line["output_lens"])]
        line["duration"] = line["duration"] * s
        cover_timeline(line)
    edit_bench(ctx, ctx.cand_leg, shorter)
    return Expectation.fail("OUTPUT_LENGTH_SHIFT", why=f"outputs {1 - s:.0%} shorter, same tok/s")


# ----------------------------------------------------------------------- evidence: correctness


@family("gibberish_reference", "evidence: correctness")
def gibberish(ctx: AttackContext, rng: random.Random) -> Expectation | None:
    rows_b, rows_c = ctx.outputs(ctx.base_leg), ctx.outputs(ctx.cand_leg)
    if not rows_b or not rows_c or lossy_claim(ctx):
        return None
    for rows, leg in ((rows_b, ctx.base_leg), (rows_c, ctx.cand_leg)):
        for i, row in enumerate(rows):
            row["text"] = GIBBERISH[i % len(GIBBERISH)]
        ctx.write_outputs(leg, rows)
    return Expectation.fail("NONCOHERENT_REFERENCE", "PARITY_MISMATCH", why="parity against a gibberish reference")


@family("parity_dump_mismatch", "evidence: correctness")
def parity_mismatch(ctx: AttackContext, rng: random.Random) -> Expectation | None:
    rows = ctx.outputs(ctx.cand_leg)
    if not rows or lossy_claim(ctx):
        return None
    for row in rng.sample(rows, max(1, int(len(rows) * rng.uniform(0.4, 1.0)))):
        row["text"] = row["text"].upper() + " !"
    ctx.write_outputs(ctx.cand_leg, rows)
    return Expectation.fail("PARITY_MISMATCH", why="a lossless change whose greedy outputs differ")


@family("declared_spec_decode_as_kernel", "evidence: lever class", touches=("lever", "headline"))
def spec_as_kernel(ctx: AttackContext, rng: random.Random) -> Expectation:
    length = round(rng.uniform(1.5, 3.0), 2)
    edit_bench(ctx, ctx.cand_leg, lambda line: line.__setitem__("accept_length", length))
    ctx.claim["mechanism"] = {"name": "speculative_decoding", "variant": "ngram", "draft_model_id": "ngram"}
    kernel_headline(ctx)
    return Expectation.refuse("ORTHOGONAL_LEVER", why="declared speculative decoding headlined as a kernel win")


# ------------------------------------------------------------------- evidence: statistics, caching


def _noise_copy(ctx: AttackContext, rng: random.Random) -> None:
    """The candidate's reps are the baseline's, re-labelled, each with a small jitter of either sign: no
    systematic shift, so no real delta. (A one-sided jitter is a small real win, which a tight noise
    band correctly calls real -- found by this family's first version.)"""
    eps = rng.uniform(0.0, 0.004)
    lines = ctx.bench(ctx.base_leg)
    for k, line in enumerate(lines):
        line["leg"] = ctx.cand_leg
        line["started_at"] = (line.get("started_at") or 1000.0) + 1.0
        line["duration"] = line["duration"] * (1.0 + eps * (1 if k % 2 else -1))
        strip_aggregates(line)
    ctx.write_bench(ctx.cand_leg, lines)


@family("win_inside_the_noise", "evidence: significance", touches=("delta",))
def noise_win(ctx: AttackContext, rng: random.Random) -> Expectation:
    _noise_copy(ctx, rng)
    return Expectation.fail("DELTA_NOT_SIGNIFICANT", why="the candidate's reps are the baseline's, within noise")


@family("isolated_speedup_inside_the_noise", "evidence: significance", touches=("delta",))
def isolated_noise(ctx: AttackContext, rng: random.Random) -> Expectation:
    _noise_copy(ctx, rng)
    ops = (ctx.claim.get("lever") or {}).get("kernel_ops") or ["rmsnorm"]
    ctx.claim["isolated_speedup"] = {"value": round(rng.uniform(1.5, 4.0), 2), "op": ops[0]}
    return Expectation.fail("ISOLATED_E2E_GAP", "DELTA_NOT_SIGNIFICANT", why="an isolated speedup, no e2e delta")


@family("contended_rep", "evidence: measurement conditions")
def contended(ctx: AttackContext, rng: random.Random) -> Expectation:
    leg = rng.choice([ctx.base_leg, ctx.cand_leg])
    lines = ctx.bench(leg)
    lines[rng.randrange(len(lines))]["contention"] = {"loadavg_1m": 3.1, "ncpu": 2, "busy": [
        {"name": rng.choice(["stress-ng", "python", "cc1plus"]), "cpu_pct": round(rng.uniform(60, 199), 1)}]}
    ctx.write_bench(leg, lines)
    return Expectation.refuse("CONTENDED_LEG", why=f"a CPU hog ran during a {leg} rep")


@family("warm_prefix_cache", "evidence: caching")
def warm_cache(ctx: AttackContext, rng: random.Random) -> Expectation | None:
    rate = rng.uniform(0.4, 0.9)
    for leg, r in ((ctx.base_leg, 0.0), (ctx.cand_leg, rate)):
        lines = ctx.bench(leg)
        if not lines[0].get("input_lens"):
            return None
        for line in lines:
            line["cache_hits"] = [int(n * r) for n in line["input_lens"]]
        ctx.write_bench(leg, lines)
    return Expectation.fail("CACHING_SUSPECTED", why=f"the candidate ran with a warm prefix cache ({rate:.0%} hits)")


# ------------------------------------------------------------------------ evidence: the files


@family("corrupt_mid_file", "evidence: integrity", combinable=False)
def corrupt_mid(ctx: AttackContext, rng: random.Random) -> Expectation | None:
    path = ctx.leg_path(ctx.cand_leg, "bench_runs.jsonl")
    lines = path.read_text("utf-8").splitlines()
    if len(lines) < 3:
        return None
    k = rng.randrange(1, len(lines) - 1)
    lines[k] = lines[k][: rng.randint(5, len(lines[k]) // 2)] + "}"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    # Cut after a complete value, the line still decodes, as a line missing its fields.
    return Expectation.fail("EVIDENCE_CORRUPT", "EVIDENCE_MISSING",
                            why="a bench line in the middle of the file is damaged")


@family("missing_bench_file", "evidence: integrity", combinable=False)
def missing_bench(ctx: AttackContext, rng: random.Random) -> Expectation:
    ctx.leg_path(rng.choice([ctx.base_leg, ctx.cand_leg]), "bench_runs.jsonl").unlink()
    return Expectation.fail("EVIDENCE_MISSING", why="a leg's bench file is gone")


@family("torn_tail", "evidence: integrity", combinable=False)
def torn(ctx: AttackContext, rng: random.Random) -> Expectation:
    path = ctx.leg_path(ctx.cand_leg, "bench_runs.jsonl")
    path.write_bytes(path.read_bytes() + f'{{"leg": "{ctx.cand_leg}", "rep": 99, "dura'.encode())
    return Expectation.refuse("EVIDENCE_CORRUPT", why="the last line was never finished")


# ----------------------------------------------------------- evidence properties, from the backtest


EVIDENCE_PROPERTIES = ("workload", "consistency", "conditions", "contention", "order", "resources", "torn")
"""Mutation families of ``redteam/mutations.py`` that the red team also applies, to every base it attacks
(the backtest applies each to the clean fixtures; here they meet recorded runs and each other's bases)."""


def _from_mutation(mutation: Any) -> Any:
    """A red-team family that applies one backtest mutation; its expectation is the mutation's own
    frozen answer (FAIL: exactly FAIL; FLAG: not banked), never the auditor's output."""
    def apply(ctx: AttackContext, rng: random.Random) -> Expectation | None:

        claim = Claim.model_validate(ctx.claim)
        if not mutation.applies(ctx.run, claim):
            return None
        try:
            ctx.claim = mutation.apply(ctx.run, claim).model_dump(mode="json")
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, FileNotFoundError):
            return None  # the base lacks what the mutation edits (no per-request arrays, no log …)
        why = (mutation.description or mutation.name).strip().splitlines()[0]
        if mutation.verdict == "FAIL":
            return Expectation.fail(*mutation.must_include, why=why)
        return Expectation.refuse(*mutation.must_include, why=why)
    return apply


def _register_evidence_families() -> None:

    for mutation in MUTATIONS:
        if mutation.family in EVIDENCE_PROPERTIES and mutation.verdict in ("FAIL", "FLAG"):
            family(f"evidence_{mutation.name.replace('-', '_')}", f"evidence: {mutation.family}",
                   combinable=False)(_from_mutation(mutation))


_register_evidence_families()
