"""Rebuild GEAK's published patch-auditor cases as raw evidence consistent with their figures.

Source: AMD-AGI/GEAK ``perf_knowledge/expert_skills/skills/patch_auditor/proof/fixtures.yaml``. Only the
figures are transcribed (medians, spreads, TTFT/TPOT, KV pool sizes, backends, speedups, rep values);
the per-request arrays are synthesized so that re-deriving them gives those figures back. Answer keys
live beside each fixture and were written before this script ran; this script never writes one.

    python -m perfwarden.proof.transcribe_geak [--out proof/fixtures]
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, TypedDict

from perfwarden.orchestrator.synth import (fixture_builder_main, COHERENT_TEXTS, GIBBERISH_TEXTS, make_rep, overlay_between,
                                    write_claim, write_jsonl, write_leg, write_manifest)

SGLANG_INFO: dict[str, Any] = {
    "model_path": "/models/DeepSeek-R1", "served_model_name": "deepseek-r1", "tp_size": 8, "dp_size": 1,
    "mem_fraction_static": 0.85, "max_total_num_tokens": 1156449, "attention_backend": "aiter",
    "kv_cache_dtype": "auto", "quantization": "fp8", "chunked_prefill_size": 16384, "max_running_requests": 512,
    "disable_radix_cache": True, "disable_cuda_graph": False, "cuda_graph_max_bs": 512,
    "speculative_algorithm": None, "speculative_num_steps": None, "random_seed": 42, "port": 30000,
    "host": "127.0.0.1", "op_overrides": {}, "version": "0.4.9",
}
KERNEL_LOG = ["server ready", "kernel patch fused_moe_v2 engaged on 58 layers", "token usage: 0.41",
              "token usage: 0.63"]
PLAIN_LOG = ["server ready", "token usage: 0.40", "token usage: 0.62"]


# The published figures (≈1,000 output tok/s at a 4.3 s TTFT and 60 ms TPOT) are only consistent with
# many requests in flight: a rep must last as long as its slowest request. 112 requests of 480 tokens,
# all issued at once, keep every request inside its rep (with room for the I5 case's 2.2x TTFT);
# tokens stream in chunks of 96 (sglang's --stream-interval), which keeps the files small.
class RepShape(TypedDict):
    """The request shape of every GEAK rep (``make_rep``'s keyword arguments of the same names)."""

    n_requests: int
    output_len: int
    input_len: int
    itl_chunk: int
    start_step_s: float
    max_concurrency: int | None


GEAK_REP: RepShape = {"n_requests": 112, "output_len": 480, "input_len": 1024, "itl_chunk": 96, "start_step_s": 0.0,
                      "max_concurrency": None}


def three_reps(leg: str, lo: float, mid: float, hi: float, ttft_ms: float, tpot_ms: float, offset: float,
               **kw) -> list[dict]:
    """Three reps with the given min/median/max throughput (rep order interleaves min first)."""
    return [make_rep(leg, k, throughput=v, ttft_ms=ttft_ms, tpot_ms=tpot_ms, **GEAK_REP,
                     started_at=1_000.0 + 100 * k + 60 * offset, **kw) for k, v in enumerate((lo, mid, hi))]


# P1's figures: ref median 1004.906 (spread 0.15%, max 1005.254), cand median 1677.476 (spread 0.62%,
# min 1674.248); TTFT 4280.883 -> 2915.774 ms, TPOT 59.476 -> 35.260 ms.
REF_MAX, REF_MED = 1005.254, 1004.906
REF_MIN = REF_MAX - 0.0015 * REF_MED
CAND_MIN, CAND_MED = 1674.248, 1677.476
CAND_MAX = CAND_MIN + 0.0062 * CAND_MED


def p1_reps(ref_leg: str = "ref", cand_leg: str = "cand", cand_ttft: float = 2915.774, **cand_kw):
    ref = three_reps(ref_leg, REF_MIN, REF_MED, REF_MAX, 4280.883, 59.476, 0)
    cand = three_reps(cand_leg, CAND_MIN, CAND_MED, CAND_MAX, cand_ttft, 35.260, 1, **cand_kw)
    return ref, cand


KERNEL_CLAIM = {"producer": "integrator", "legs": {"baseline": "ref", "candidate": "cand"},
                "lever": {"name": "fused_moe_v2", "lever_class": "A", "kernel_ops": ["fused_moe_v2"]},
                "headline": {"metric": "output_throughput", "value": 66.93, "kind": "e2e"},
                "correctness": {"parity": "exact_text"}, "mechanism": {"name": "baseline"}}
PATCHED = {**SGLANG_INFO, "op_overrides": {"fused_moe_v2": "kernels/fused_moe_v2.py"}}


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    write_manifest(path, run_id=path.parent.name, target="sglang", model="DeepSeek-R1")
    return path


def p1_clean(run: Path, cand_ttft: float = 2915.774, cand_info: dict | None = None, claim: dict | None = None,
             patch_claim: bool = True, **cand_kw) -> None:
    ref, cand = p1_reps(cand_ttft=cand_ttft, **cand_kw)
    write_leg(run, "ref", "baseline", SGLANG_INFO, ref, log_lines=PLAIN_LOG, outputs=COHERENT_TEXTS)
    write_leg(run, "cand", "candidate", cand_info or PATCHED, cand, log_lines=KERNEL_LOG, outputs=COHERENT_TEXTS,
              overlay=overlay_between(SGLANG_INFO, cand_info or PATCHED), parent="ref")
    if patch_claim:
        write_claim(run, {"seq": 1, "scope": "patch", **KERNEL_CLAIM, **(claim or {})})


def _geak_p1_bundle(run: Path) -> None:
    """P1: the published bundle with two undeclared differences and a summary that misstates one."""
    ref, cand = p1_reps()
    handicapped = {**SGLANG_INFO, "mem_fraction_static": 0.7225, "max_total_num_tokens": 947041}
    write_leg(run, "ref", "baseline", handicapped, ref, log_lines=PLAIN_LOG, outputs=COHERENT_TEXTS)
    write_leg(run, "cand", "candidate", {**PATCHED, "attention_backend": "triton"}, cand, log_lines=KERNEL_LOG,
              outputs=COHERENT_TEXTS, overlay={"kernel_patches": [{"op": "fused_moe_v2", "impl": "k.py"}]}, parent="ref")
    write_claim(run, {"seq": 1, "scope": "bundle", **KERNEL_CLAIM,
                      "reported": {"conditions": {"mem_fraction_static": {"baseline": 0.85, "candidate": 0.85}},
                                   "delta_pct": 66.93}})


def _geak_n2_selfcompare(run: Path) -> None:
    """N2: real e2e +62.74% (1022.0 -> 1663.2); the isolated 3.0306x compares the winner with itself."""
    ref = three_reps("ref", 1020.5, 1022.0, 1023.1, 4200.0, 58.0, 0)
    cand = three_reps("cand", 1660.9, 1663.2, 1665.0, 2950.0, 36.0, 1)
    write_leg(run, "ref", "baseline", SGLANG_INFO, ref, log_lines=PLAIN_LOG, outputs=COHERENT_TEXTS)
    write_leg(run, "cand", "candidate", PATCHED, cand, log_lines=KERNEL_LOG, outputs=COHERENT_TEXTS, parent="ref",
              overlay=overlay_between(SGLANG_INFO, PATCHED))
    rows = []
    for trial, seed in enumerate((0, 1, 2)):
        rows.append({"op": "fused_moe_v2", "backend": "triton_v2", "shape": [256, 7168], "trial": trial,
                     "dtype": "bfloat16", "times_ms": [0.3300, 0.3310, 0.3305], "warmup_discarded": 10,
                     "fresh_inputs": True, "correct": True, "max_rel_err": 0.004, "dispatch": "graph_replay",
                     "seed": seed, "is_reference": True, "impl_sha256": "9f1c"})
        rows.append({"op": "fused_moe_v2", "backend": "ck_alt", "shape": [256, 7168], "trial": trial,
                     "dtype": "bfloat16", "times_ms": [0.1089, 0.1091, 0.1090], "warmup_discarded": 10,
                     "fresh_inputs": True, "correct": False, "max_rel_err": 45.4, "dispatch": "graph_replay",
                     "seed": seed, "is_reference": False, "impl_sha256": "77ab"})
    write_jsonl(run / "opbench" / "fused_moe_v2" / "opbench.jsonl", rows)
    write_claim(run, {"seq": 1, "scope": "patch", **KERNEL_CLAIM,
                      "headline": {"metric": "output_throughput", "value": 203.06, "kind": "isolated"},
                      "isolated_speedup": {"value": 3.0306, "op": "fused_moe_v2",
                                           "opbench": "opbench/fused_moe_v2/opbench.jsonl",
                                           "baseline_backend": "triton_v2", "candidate_backend": "triton_v2"}})


def _geak_n5_gibberish(run: Path) -> None:
    """N5: attention backend change, +9%, reference decode is gibberish, 0/12 identical, mem-fraction confound."""
    ref = three_reps("ref", 998.0, 1000.0, 1001.5, 4300.0, 60.0, 0)
    cand = three_reps("cand", 1088.0, 1090.0, 1091.2, 4000.0, 55.0, 1)
    write_leg(run, "ref", "baseline", {**SGLANG_INFO, "mem_fraction_static": 0.7225, "max_total_num_tokens": 947041},
              ref, log_lines=PLAIN_LOG, outputs=GIBBERISH_TEXTS)
    write_leg(run, "cand", "candidate", {**SGLANG_INFO, "attention_backend": "triton"}, cand, log_lines=PLAIN_LOG,
              outputs=[t[::-1] for t in GIBBERISH_TEXTS], parent="ref",
              overlay=overlay_between(SGLANG_INFO, {**SGLANG_INFO, "attention_backend": "triton"}))
    write_claim(run, {"seq": 1, "scope": "patch", "producer": "config_tuner",
                      "legs": {"baseline": "ref", "candidate": "cand"},
                      "lever": {"name": "attention_backend=triton", "lever_class": "A",
                                "config_keys": ["attention_backend"]},
                      "headline": {"metric": "output_throughput", "value": 9.0, "kind": "e2e"}})


def _geak_p2_crash(run: Path) -> None:
    """P2: isolated 6.6061x; the live server crashed on the served shape after one candidate rep."""
    ref = three_reps("ref", 1003.0, 1004.9, 1005.2, 4280.0, 59.5, 0)
    cand = three_reps("cand", 1102.0, 1102.0, 1102.0, 4000.0, 54.0, 1)[:1]
    write_leg(run, "ref", "baseline", SGLANG_INFO, ref, log_lines=PLAIN_LOG, outputs=COHERENT_TEXTS)
    write_leg(run, "cand", "candidate", PATCHED, cand, outputs=COHERENT_TEXTS, parent="ref", status="failed",
              overlay=overlay_between(SGLANG_INFO, PATCHED),
              failure="server exited during rep 1", log_lines=[
                  "server ready", "kernel patch fused_moe_v2 engaged on 58 layers",
                  "Traceback (most recent call last):",
                  "RuntimeError: HIP error: an illegal memory access was encountered (shape [384, 7168])",
                  "Worker 3 died with exit code -6"])
    write_claim(run, {"seq": 1, "scope": "patch", **KERNEL_CLAIM,
                      "headline": {"metric": "output_throughput", "value": 9.7, "kind": "kernel"},
                      "isolated_speedup": {"value": 6.6061, "op": "fused_moe_v2"}})


def _geak_i1_specdecode(run: Path) -> None:
    """I-series, injected on P1 with its conditions restored."""
    spec_info = {**SGLANG_INFO, "speculative_algorithm": "NEXTN", "speculative_num_steps": 4}
    p1_clean(run, cand_info=spec_info, accept_length=3.1, claim={
        "lever": {"name": "fused_moe_v2", "lever_class": "A",
                  "config_keys": ["speculative_algorithm", "speculative_num_steps"]},
        "headline": {"metric": "output_throughput", "value": 66.93, "kind": "kernel"},
        "mechanism": {"name": "speculative_decoding", "variant": "NEXTN", "draft_model_id": "nextn-mtp",
                      "acceptance_rate": 0.7}})
    (run / "legs" / "cand" / "server.log").write_text("server ready\nspeculative NEXTN steps=4 accept_len=3.1\n"
                                                      "token usage: 0.41\n")


def _geak_i2_drift(run: Path) -> None:
    p1_clean(run, patch_claim=False)
    write_claim(run, {"seq": 1, "scope": "baseline", "legs": {"baseline": "ref"},
                      "provided_baseline": {"metric": "output_throughput", "value": 1300.0,
                                            "source": "previous session summary"}})


def _geak_i3_second_knob(run: Path) -> None:
    p1_clean(run, cand_info={**PATCHED, "mem_fraction_static": 0.80})


def _geak_i4_nulled_medians(run: Path) -> None:
    p1_clean(run, claim={"reported": {"legs": {"baseline": {"output_throughput": {"median": None}},
                                               "candidate": {"output_throughput": {"median": None}}},
                                      "delta_pct": None}})


def _geak_i5_ttft(run: Path) -> None:
    p1_clean(run, cand_ttft=4280.883 * 2.2)


def _geak_i6_isolated_noise(run: Path) -> None:
    ref, _ = p1_reps()
    cand = three_reps("cand", 1003.1, 1005.4, 1006.0, 4270.0, 59.3, 1)
    write_leg(run, "ref", "baseline", SGLANG_INFO, ref, log_lines=PLAIN_LOG, outputs=COHERENT_TEXTS)
    write_leg(run, "cand", "candidate", PATCHED, cand, log_lines=KERNEL_LOG, outputs=COHERENT_TEXTS, parent="ref",
              overlay=overlay_between(SGLANG_INFO, PATCHED))
    write_claim(run, {"seq": 1, "scope": "patch", **KERNEL_CLAIM,
                      "headline": {"metric": "output_throughput", "value": 200.0, "kind": "kernel"},
                      "isolated_speedup": {"value": 3.0, "op": "fused_moe_v2"}})


def _geak_noisy_baseline(run: Path) -> None:
    write_leg(run, "ref", "baseline", SGLANG_INFO,
              [make_rep("ref", k, throughput=v, ttft_ms=4280.0, tpot_ms=59.5, **GEAK_REP,
                        started_at=1000.0 + 100 * k) for k, v in enumerate((966.36, 1004.05, 1004.71))],
              log_lines=PLAIN_LOG, outputs=COHERENT_TEXTS)
    write_claim(run, {"seq": 1, "scope": "baseline", "legs": {"baseline": "ref"}})


def _geak_p1_clean(run: Path) -> None:
    p1_clean(run)


GEAK_FIXTURES: dict[str, Callable[[Path], None]] = {
    "geak-p1-bundle": _geak_p1_bundle,
    "geak-n2-selfcompare": _geak_n2_selfcompare,
    "geak-n5-gibberish": _geak_n5_gibberish,
    "geak-p2-crash": _geak_p2_crash,
    "geak-i1-specdecode": _geak_i1_specdecode,
    "geak-i2-drift": _geak_i2_drift,
    "geak-i3-second-knob": _geak_i3_second_knob,
    "geak-i4-nulled-medians": _geak_i4_nulled_medians,
    "geak-i5-ttft": _geak_i5_ttft,
    "geak-i6-isolated-noise": _geak_i6_isolated_noise,
    "geak-noisy-baseline": _geak_noisy_baseline,
    "geak-p1-clean": _geak_p1_clean,
}
"""Fixture name -> its builder, in build order."""


def build_all(out: Path) -> list[str]:
    """Build every GEAK fixture under ``out`` (each from a fresh directory); returns their names."""
    for name, build in GEAK_FIXTURES.items():
        build(_fresh(out / name / "run"))
    return list(GEAK_FIXTURES)


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
