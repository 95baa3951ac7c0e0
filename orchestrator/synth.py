"""Build run directories from figures: synthesized raw evidence consistent with given per-rep numbers.

Used to transcribe published cases (GEAK's answer key gives per-leg medians, spreads, TTFT/TPOT), to
make hand-built test runs for every finding code, and to make the large runs the benchmarks audit.
It writes *raw* records (per-request arrays) whose re-derived statistics equal the figures asked for;
it never writes a verdict or an answer.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from pathlib import Path
from typing import Any, Literal

from perfwarden.formats import seal
from perfwarden.formats.records import Claim, LegRole, LegSpec, Overlay, QualityEval, RunManifest, write_json_atomic

COHERENT_TEXTS = [
    "The capital of France is Paris, a city known for its museums and long history.",
    "Water boils at one hundred degrees Celsius at sea level, and the temperature drops with altitude.",
    "A binary search works by repeatedly halving the part of the list that could contain the item.",
    "Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar and oxygen.",
    "To make tea, boil fresh water, pour it over the leaves and let it steep for a few minutes.",
    "The moon orbits the earth about once every twenty seven days and shows phases as it moves.",
    "Exercise improves heart health, mood and sleep when it is done regularly and safely.",
    "A good email has a clear subject line, a short greeting and one request per message.",
    "Rivers carry sediment from the mountains to the sea, building deltas where they slow down.",
    "The library opens at nine in the morning and closes at six in the evening on weekdays.",
    "Learning a new language takes practice every day, patience and a lot of listening.",
    "Bees help flowers reproduce by carrying pollen from one plant to another as they feed.",
]
GIBBERISH_TEXTS = [
    "ocialbuckets crap Vert Vertuzzzz PMID herbs?\u00bb\u00bb\u00bb contempl Bolt Bolt Bolt Bolt trom",
    "Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir Pir",
    "\u0437\u0430 rasp)\"); ],\r uint8 ValueError spectro ancest ancest ancest \u2581\u2581\u2581 xcd",
    "CorporatePiratesEscapeMaliSinFloatsLyingInTheSeaTruTruTruTru Floats Floats",
    "eqn)}} dtype ARR ARR antagon Sinai Sinai rpm rpm rpm quantum@@ \\\\ \\\\ Whit",
    "illon illon illon illon illon illon illon illon illon illon illon illon illon",
    "%%%% 0x1f 0x1f ;;;; kW kW kW kW )))) ]]]] ~~~~ ^^^^ ????",
    "mgmgmgmg zzxq vbnrt plkjh qwrtp zxcvb nmlkj hgfds poiuy trewq lkjhg",
    "____ ____ ____ ____ ____ ____ ____ ____ ____ ____ ____ ____",
    "unt unt unt ikh ikh ikh zzt zzt zzt blorp blorp blorp",
    "Sov Sov Sov Sov Sov Sov Sov Sov Sov Sov Sov Sov Sov Sov",
    "\u00e2\u20ac\u2122 \u00e2\u20ac\u0153 \u00c3\u00a9 \u00c3\u00a8 \u00e2\u20ac\u2122 \u00e2\u20ac\u0153 \u00c3\u00a9 \u00c3\u00a8",
]


def _spread(center: float, n: int, rel: float) -> list[float]:
    """n values with median exactly ``center`` and a symmetric relative spread ``rel``."""
    if n == 1:
        return [center]
    step = 2 * rel / (n - 1)
    return [center * (1 - rel + i * step) for i in range(n)]


def _median(values: list[float]) -> float:
    return float(np.median(values))


def _p99(values: list[float]) -> float:
    return float(np.percentile(values, 99))


def _rep_perturbation(leg: str, rep: int, n: int) -> np.ndarray:
    """Per-request relative perturbations in [-5e-4, 5e-4], a function of (leg, rep) only.

    Measured timings never repeat exactly from one rep (or leg) to the next; without this, two reps
    built from the same figures would carry byte-identical per-request arrays, which the auditor
    rightly calls duplicated evidence. 0.05% moves no median a gate could notice.
    """
    seed = int.from_bytes(hashlib.sha256(f"{leg}\x00{rep}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed).uniform(-5e-4, 5e-4, n)


def _chunk_gaps(tpot_s: float, output_len: int, chunk: int) -> list[float]:
    """Gaps between streamed chunks of ``chunk`` tokens (the last chunk may be shorter)."""
    gaps, left = [], output_len - 1
    while left > 0:
        step = min(chunk, left)
        gaps.append(round(tpot_s * step, 6))
        left -= step
    return gaps


def make_rep(leg: str, rep: int, *, throughput: float, ttft_ms: float = 100.0, tpot_ms: float = 20.0,
             n_requests: int = 8, output_len: int = 32, input_len: int = 128, errors: int = 0,
             accept_length: float | None = None, contention: dict | None = None, started_at: float | None = None,
             cache_hit_rate: float | None = None, jitter: float = 0.05, error_text: str = "HTTP 500: boom",
             with_latencies: bool = True, itl_chunk: int = 1, start_step_s: float = 0.01,
             max_concurrency: int | None = 16) -> dict[str, Any]:
    """One bench_runs line whose re-derived output throughput, median TTFT and median TPOT are the
    given numbers (failed requests are extra: they carry no tokens).

    The line is physically consistent, as a measured one is: every request starts at
    ``i * start_step_s`` and ends inside the rep's ``duration`` (figures that cannot fit -- e.g. a
    4 s TTFT in a 0.8 s rep -- raise ``ValueError``: choose more requests), each latency is its TTFT
    plus its inter-token gaps, and no two (leg, rep) pairs carry identical timings. ``itl_chunk``
    tokens arrive per streamed chunk (sglang's ``--stream-interval``): ``itls`` then holds one gap
    per chunk, which keeps long outputs small on disk without changing TTFT, TPOT or latency.
    """
    ok = n_requests
    wobble = _rep_perturbation(leg, rep, 2 * ok)
    ttfts = [round(t / 1000.0 * (1 + w), 6) for t, w in zip(_spread(ttft_ms, ok, jitter), wobble[:ok])]
    tpots = [t / 1000.0 * (1 + w) for t, w in zip(_spread(tpot_ms, ok, jitter), wobble[ok:])]
    out_lens = [output_len] * ok
    itls = [_chunk_gaps(tp, output_len, itl_chunk) for tp in tpots]
    lat = [round(tt + sum(g), 6) for tt, g in zip(ttfts, itls)]
    starts = [round(i * start_step_s, 6) for i in range(ok + errors)]
    total_out = sum(out_lens)
    duration = total_out / throughput
    timeline = max(s + x for s, x in zip(starts, lat))
    if timeline > duration:
        raise ValueError(f"rep {leg!r}/{rep}: requests end at {timeline:.3f} s, after the rep's duration "
                         f"{duration:.3f} s ({total_out} tokens at {throughput} tok/s); use more requests")
    tpot_obs = [(x - tt) * 1000 / (output_len - 1) for x, tt in zip(lat, ttfts)] if output_len > 1 else []
    gaps_ms = [g * 1000 for gs in itls for g in gs]
    line: dict[str, Any] = {
        "schema_version": 1, "leg": leg, "rep": rep, "backend": "perfwarden", "dataset_name": "synthetic",
        "request_rate": "inf", "max_concurrency": max_concurrency, "server_info": None, "duration": duration,
        "completed": ok, "total_input_tokens": input_len * ok, "total_output_tokens": total_out,
        "request_throughput": ok / duration, "output_throughput": throughput,
        "total_throughput": (total_out + input_len * ok) / duration,
        "median_ttft_ms": ttft_ms, "median_tpot_ms": tpot_ms, "accept_length": accept_length,
        "p99_ttft_ms": _p99([t * 1000 for t in ttfts]), "p99_tpot_ms": _p99(tpot_obs) if tpot_obs else None,
        "median_e2e_latency_ms": _median([x * 1000 for x in lat]), "p99_e2e_latency_ms": _p99([x * 1000 for x in lat]),
        "median_itl_ms": _median(gaps_ms) if gaps_ms else None, "p99_itl_ms": _p99(gaps_ms) if gaps_ms else None,
        "input_lens": [input_len] * ok + [input_len] * errors,
        "output_lens": out_lens + [0] * errors,
        "ttfts": ttfts + [0.0] * errors,
        "itls": itls + [[] for _ in range(errors)],
        "generated_texts": ["x"] * ok + [""] * errors,
        "errors": [""] * ok + [error_text] * errors,
        "request_starts": starts,
        "contention": contention if contention is not None else {"loadavg_1m": 0.5, "ncpu": 2, "busy": []},
        "started_at": started_at if started_at is not None else 1_700_000_000.0 + rep * 60.0,
    }
    if with_latencies:
        line["latencies"] = lat + [0.0] * errors
    if cache_hit_rate is not None:
        line["cache_hits"] = [int(input_len * cache_hit_rate)] * ok + [0] * errors
    return line


LegStatus = Literal["ok", "failed"]
"""``LegSpec.status``: whether the leg's server came up and its reps ran."""


def write_manifest(run: Path, run_id: str = "synthetic", target: str = "synthetic", model: str = "model") -> None:
    write_json_atomic(Path(run) / "run.json", RunManifest(id=run_id, target=target, model=model))


def write_leg(run: Path, leg: str, role: LegRole, server_info: dict[str, Any], reps: list[dict[str, Any]],
              log_lines: list[str] | None = None, outputs: list[str] | None = None,
              overlay: dict[str, Any] | None = None, status: LegStatus = "ok", failure: str | None = None,
              parent: str | None = None) -> Path:
    """Write one leg directory: leg.json, server_info.json, server.log, bench_runs.jsonl, outputs.jsonl.

    Written through the harness's sealed writers: when the run has a seal chain (``seal.begin``), the
    leg is sealed exactly as a recorded one would be; otherwise these are plain writes."""
    leg_dir = Path(run) / "legs" / leg
    leg_dir.mkdir(parents=True, exist_ok=True)
    spec = LegSpec(leg=leg, role=role, overlay=Overlay(**(overlay or {})), purpose=f"{role} leg",
                   parent_leg=parent, status=status, failure=failure)
    seal.write_json(leg_dir / "leg.json", spec)
    seal.write_json(leg_dir / "server_info.json", server_info)
    seal.write_text(leg_dir / "server.log", "".join(f"{line}\n" for line in (log_lines or ["server ready"])))
    bench = leg_dir / "bench_runs.jsonl"
    seal.unlink(bench)
    for line in reps:
        seal.append_jsonl(bench, line)
    if outputs is not None:
        out = leg_dir / "outputs.jsonl"
        seal.unlink(out)
        for i, text in enumerate(outputs):
            seal.append_jsonl(out, {"prompt_id": f"p{i:02d}", "text": text, "finish_reason": "length", "seed": 0})
    return leg_dir


def write_claim(run: Path, claim: dict[str, Any] | Claim, name: str | None = None) -> Path:
    model = claim if isinstance(claim, Claim) else Claim.model_validate(claim)
    path = Path(run) / "claims" / (name or f"{model.seq:03d}-{model.scope}.json")
    write_json_atomic(path, model)
    return path


QA_ITEMS_PATH = Path(__file__).resolve().parents[1] / "harness" / "quality_items.json"


def write_quality_pair(run: Path, *, base_score: float, cand_score: float, base_leg: str = "base",
                       cand_leg: str = "cand", n: int = 40) -> None:
    """``pw-qa-exact-v1`` for both legs, as ``harness/quality.run_quality_pair`` writes it: one record
    per leg (``quality/<eval>@<leg>.json``) with the item set's digest, the baseline's score copied into
    the candidate's record."""
    import hashlib

    digest = hashlib.sha256(QA_ITEMS_PATH.read_bytes()).hexdigest()
    seal.write_json(Path(run) / "quality" / f"pw-qa-exact-v1@{base_leg}.json", QualityEval(
        eval_id="pw-qa-exact-v1", leg=base_leg, n=n, score=base_score, items_sha256=digest, item_set_sha256=digest))
    seal.write_json(Path(run) / "quality" / f"pw-qa-exact-v1@{cand_leg}.json", QualityEval(
        eval_id="pw-qa-exact-v1", leg=cand_leg, n=n, score=cand_score, baseline_score=base_score,
        baseline_leg=base_leg, items_sha256=digest, item_set_sha256=digest))


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path = Path(path)
    seal.write_text(path, "".join(json.dumps(r) + "\n" for r in rows))  # sealed in a sealed run
    return path


# ------------------------------------------------------------------ a clean A/B run to edit

BASE_INFO: dict[str, Any] = {
    "model": "SmolLM2-135M-Instruct", "weights_digest": "abc123", "dtype": "float32", "threads": 2,
    "max_batch_size": 4, "batch_wait_ms": 5, "attn_implementation": "sdpa", "torch_compile": False,
    "prompt_lookup": False, "quantization": "none", "response_cache": False, "op_overrides": {},
    "torch_version": "2.13.0", "port": 8100, "host": "127.0.0.1",
}
BASE_TPUT = [100.0, 101.2, 99.1, 100.6, 99.7]
CAND_TPUT = [110.3, 109.6, 111.0, 110.1, 109.2]


REP_LATENCY_JITTER = (-0.010, 0.0, 0.010, -0.005, 0.005, 0.002, -0.002)
"""Per-rep relative jitter of TTFT/TPOT, so latency metrics vary across reps as measured ones do."""


def reps(leg: str, values: list[float], offset: float, **kw) -> list[dict]:
    """Interleaved reps (A B A B: start times alternate between legs) with the given throughputs and
    per-rep latency jitter around the given (or default) TTFT and TPOT."""
    ttft, tpot = kw.pop("ttft_ms", 100.0), kw.pop("tpot_ms", 20.0)
    out = []
    for k, v in enumerate(values):
        j = 1.0 + REP_LATENCY_JITTER[k % len(REP_LATENCY_JITTER)]
        out.append(make_rep(leg, k, throughput=v, ttft_ms=ttft * j, tpot_ms=tpot * j,
                            started_at=1_000.0 + 2 * k + offset, **kw))
    return out


_NOT_KNOBS = ("port", "host", "process", "process_conditions")
"""server_info keys a leg's overlay never sets: where the server listens, the process record and what the harness
measured about the process are not knobs an overlay sets."""


def overlay_between(base_info: dict[str, Any], cand_info: dict[str, Any]) -> dict[str, Any]:
    """The overlay that turns the baseline's server into the candidate's: every knob whose value
    differs, op overrides as kernel patches. A leg.json is one of the copies of a leg's conditions, so
    it must say what its server reports (the auditor holds every copy against the others)."""
    config = {k: v for k, v in cand_info.items()
              if k not in _NOT_KNOBS and k != "op_overrides" and base_info.get(k) != v}
    patches = [{"op": op, "impl": impl} for op, impl in sorted((cand_info.get("op_overrides") or {}).items())
               if (base_info.get("op_overrides") or {}).get(op) != impl]
    return {"config": config, "kernel_patches": patches}


ExtraLeg = tuple[LegRole, dict[str, Any], list[dict[str, Any]]]
"""A leg ``build_ab_run`` writes beside its A/B pair: its role, server info and reps."""


def build_ab_run(run: Path, *, base_info: dict[str, Any] | None = None, cand_info: dict[str, Any] | None = None,
          base_reps: list[dict[str, Any]] | None = None, cand_reps: list[dict[str, Any]] | None = None,
          base_log: list[str] | None = None, cand_log: list[str] | None = None,
          base_outputs: list[str] | None = COHERENT_TEXTS, cand_outputs: list[str] | None = COHERENT_TEXTS,
          claim: dict[str, Any] | None = None, cand_status: LegStatus = "ok",
          extra_legs: dict[str, ExtraLeg] | None = None) -> Path:
    """Write a clean A/B run (a real 10% throughput win of a declared class-B knob, 5 interleaved reps
    per leg, coherent identical outputs) with any part replaced; returns the claim path."""
    write_manifest(run)
    cand_default = {**BASE_INFO, "max_batch_size": 8, "port": 8101}
    write_leg(run, "base", "baseline", base_info or BASE_INFO, base_reps or reps("base", BASE_TPUT, 0),
              log_lines=base_log, outputs=base_outputs)
    write_leg(run, "cand", "candidate", cand_info or cand_default, cand_reps if cand_reps is not None else
              reps("cand", CAND_TPUT, 1), log_lines=cand_log, outputs=cand_outputs,
              overlay=overlay_between(base_info or BASE_INFO, cand_info or cand_default), status=cand_status,
              parent="base")
    for name, (role, info, leg_reps) in (extra_legs or {}).items():
        write_leg(run, name, role, info, leg_reps)
    body = {"scope": "patch", "seq": 1, "producer": "config_tuner",
            "legs": {"baseline": "base", "candidate": "cand"},
            "lever": {"name": "max_batch_size=8", "lever_class": "B", "config_keys": ["max_batch_size"]},
            "headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e"}}
    body.update(claim or {})
    return write_claim(run, body)


def write_fixture(out: Path, name: str, build, answer: dict[str, Any], *, frozen: str, provenance: str,
                  rationale: str, claim_returned: bool = False) -> str:
    """One hand-built fixture: a fresh ``<out>/<name>/run`` filled by ``build(run)``, then its answer key.
    The claim answered is the run's first claim file, or the path ``build`` returns when
    ``claim_returned``. Every fixture builder
    writes its cases through here, so an answer key always has the same shape."""
    import shutil

    fixture = Path(out) / name
    if fixture.exists():
        shutil.rmtree(fixture)
    run = fixture / "run"
    run.mkdir(parents=True)
    returned = build(run)
    claim = returned if claim_returned else None
    if claim is None:
        claim = sorted((run / "claims").glob("*.json"))[0]
    key = {"schema_version": 1, "frozen": frozen, "answers": [{"claim": str(claim.relative_to(run)), **answer}],
           "provenance": provenance, "rationale": rationale}
    write_json_atomic(fixture / "answer_key.json", key)
    return name


def write_case_table(out: Path, cases: dict[str, tuple], *, frozen: str, builder: str) -> list[str]:
    """Every fixture of a builder's case table, ``{name: (build, verdict, action, must_include, must_exclude,
    rationale)}``, through :func:`write_fixture` (the builders' one shape of answer key)."""
    return [write_fixture(out, name, build, {"verdict": verdict, "action": action, "must_include": include,
                                             "must_exclude": exclude},
                          frozen=frozen, provenance=f"hand-built by {builder} (synthetic raw evidence)", rationale=why)
            for name, (build, verdict, action, include, exclude, why) in cases.items()]


def fixture_builder_main(doc: str, build_all, default_out: Path) -> None:
    """The command line every fixture builder shares: ``--out DIR``, then one line per fixture built."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()
    for name in build_all(args.out):
        print(f"built {args.out / name}")

