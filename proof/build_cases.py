"""Hand-built fixtures: one positive case per finding code, plus near-miss negatives.

Every case is a clean A/B run (``orchestrator.synth.build_ab_run``) with one fault introduced, and its answer
written in the CASES table below -- from the design's rules, before the auditor ran on the case. The
script writes each fixture's raw evidence and its ``answer_key.json``; rebuilding never changes an
answer (the table is the frozen source; edit it only when the raw evidence proves a label wrong, and say
so in the commit).

    python -m perfwarden.proof.build_cases [--out proof/fixtures]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from perfwarden.orchestrator.synth import (fixture_builder_main, write_case_table, BASE_INFO, BASE_TPUT, CAND_TPUT, COHERENT_TEXTS, GIBBERISH_TEXTS, build_ab_run,
                                    make_rep, reps, write_claim, write_jsonl, write_quality_pair)

PATCH_CODES = ["EVIDENCE_MISSING", "EVIDENCE_CORRUPT", "REPORTED_MISMATCH", "CONDITIONS_DIFFER",
               "CONDITIONS_MISREPORTED", "CONTENDED_LEG", "DELTA_NOT_SIGNIFICANT", "HIDDEN_LATENCY_REGRESSION",
               "ORTHOGONAL_LEVER", "NOT_ENGAGED", "REQUEST_ERRORS", "SERVER_CRASH", "PARITY_MISMATCH",
               "NONCOHERENT_REFERENCE", "QUALITY_EVAL_MISSING", "QUALITY_REGRESSION", "OUTPUT_LENGTH_SHIFT",
               "CACHING_SUSPECTED", "ISOLATED_E2E_GAP", "IMPLAUSIBLE_SPEEDUP", "UNTRACED_CLAIM"]
CAND_INFO = {**BASE_INFO, "max_batch_size": 8, "port": 8101}
KERNEL_INFO = {**BASE_INFO, "port": 8101, "op_overrides": {"rmsnorm": "ops/rmsnorm_fused.py:rmsnorm"}}
KERNEL_CLAIM = {"lever": {"name": "rmsnorm_fused", "lever_class": "A", "kernel_ops": ["rmsnorm"]},
                "headline": {"metric": "output_throughput", "value": 10.0, "kind": "kernel"}}


def cand_reps(**kw) -> list[dict]:
    return reps("cand", CAND_TPUT, 1, **kw)


def _opbench(run: Path, rows: list[dict]) -> str:
    write_jsonl(run / "opbench" / "rmsnorm" / "opbench.jsonl", rows)
    return "opbench/rmsnorm/opbench.jsonl"


def _rows(backend, ms, *, ref=False, seeds=(0, 1, 2), rel=1e-6, shape=(16, 576), dispatch="eager", digest=None):
    return [{"op": "rmsnorm", "backend": backend, "shape": list(shape), "trial": t, "dtype": "float32",
             "times_ms": [ms * (1 + 0.01 * i) for i in range(5)], "warmup_discarded": 3, "fresh_inputs": True,
             "correct": rel < 1e-4, "max_abs_err": rel, "max_rel_err": rel, "dispatch": dispatch, "seed": s,
             "is_reference": ref, "impl_sha256": digest or backend} for t, s in enumerate(seeds)]


def _profile(run: Path, rows: list[dict] | None = None) -> None:
    write_jsonl(run / "profile" / "profile.jsonl", rows or [
        {"name": "rmsnorm", "op": "rmsnorm", "self_time_us": 3000.0, "count": 100, "shapes": [[16, 576]]},
        {"name": "aten::linear", "op": "linear", "self_time_us": 9000.0, "count": 300, "shapes": [[16, 576]]},
        {"name": "aten::softmax", "op": "softmax", "self_time_us": 500.0, "count": 30, "shapes": [[16, 9, 9]]}])


def _harness(run: Path, rows: list[dict], value: float, ref="torch_ref", cand="fused", profile=True) -> None:
    build_ab_run(run)
    (run / "claims" / "001-patch.json").unlink()
    if profile:
        _profile(run)
    path = _opbench(run, rows)
    write_claim(run, {"scope": "harness", "seq": 1, "op": "rmsnorm", "opbench": path, "legs": {"baseline": "base"},
                      "isolated_speedup": {"value": value, "op": "rmsnorm", "opbench": path,
                                           "baseline_backend": ref, "candidate_backend": cand}})


def _baseline_only(run: Path, base_reps: list[dict] | None = None, **claim: Any) -> None:
    build_ab_run(run, base_reps=base_reps)
    (run / "claims" / "001-patch.json").unlink()
    write_claim(run, {"scope": "baseline", "seq": 1, "legs": {"baseline": "base"}, **claim})


def _quality(run: Path, score: float, base: float) -> None:
    write_quality_pair(run, base_score=base, cand_score=score)


INT8 = {"lever": {"name": "int8", "lever_class": "B", "config_keys": ["quantization"]}}


def _corrupt_mid(run: Path) -> None:
    build_ab_run(run)
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    lines = bench.read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2] + "}"
    bench.write_text("\n".join(lines) + "\n")


def _torn(run: Path) -> None:
    build_ab_run(run)
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    bench.write_bytes(bench.read_bytes() + b'{"leg": "cand", "rep": 5, "duration": 1.2, "out')


def _report(run: Path, text: str) -> None:
    build_ab_run(run, claim={"report": "report.md"})
    (run / "report.md").write_text(text)


def _evidence_missing(run: Path) -> None:
    build_ab_run(run)
    (run / "legs/cand/bench_runs.jsonl").unlink()


def _int8_with_eval(run: Path, score: float, base: float) -> None:
    """A lossy int8 change that cites a completed quality eval scoring ``score`` against ``base``."""
    _quality(run, score, base)
    build_ab_run(run, cand_info={**BASE_INFO, "port": 8101, "quantization": "int8_dynamic"},
                 claim={**INT8, "correctness": {"parity": "none", "quality_eval_id": "pw-qa-exact-v1"}})


def _profile_claim(run: Path, op: str, rows: list[dict[str, Any]]) -> None:
    """A profile of ``rows`` and a profile claim naming ``op`` the hot one."""
    _profile(run, rows)
    write_claim(run, {"scope": "profile", "seq": 1, "op": op})


def _isolated_noise(run: Path) -> None:
    _profile(run)
    build_ab_run(run, cand_info=KERNEL_INFO, cand_log=["override rmsnorm engaged"],
                 cand_reps=reps("cand", [100.3, 99.6, 101.0, 100.1, 99.2], 1),
                 claim={**KERNEL_CLAIM, "isolated_speedup": {"value": 3.0, "op": "rmsnorm"}})


def _amdahl_violation(run: Path) -> None:
    _profile(run)
    _opbench(run, _rows("torch_ref", 2.0, ref=True) + _rows("fused", 1.6))
    build_ab_run(run, cand_info=KERNEL_INFO, cand_log=["override rmsnorm engaged"],
                 claim={**KERNEL_CLAIM, "isolated_speedup": {
                     "value": 1.25, "op": "rmsnorm", "opbench": "opbench/rmsnorm/opbench.jsonl",
                     "baseline_backend": "torch_ref", "candidate_backend": "fused"}})


# name -> (builder, verdict, action, must_include, must_exclude, rationale)
CASES: dict[str, tuple[Callable[[Path], Any], str, str, list[str], list[str], str]] = {
    "syn-clean-patch-win": (lambda r: build_ab_run(r), "PASS", "pass", [], PATCH_CODES,
                            "A declared batching knob, 5 interleaved reps per leg, +10% with no overlap, identical "
                            "coherent outputs, nothing else differs. The negative for every patch-scope code."),
    "syn-aa-pair": (lambda r: build_ab_run(r, cand_info={**BASE_INFO, "port": 8101},
                                           cand_reps=reps("cand", [100.4, 99.5, 100.9, 99.8, 100.2], 1),
                                           claim={"headline": {"value": 0.3}, "lever": {"name": "none", "lever_class": "A"}}),
                    "FAIL", "eject", ["DELTA_NOT_SIGNIFICANT"], ["CONDITIONS_DIFFER", "HIDDEN_LATENCY_REGRESSION"],
                    "Same config on both legs: the delta is inside the noise band, so no win can be banked."),
    "syn-evidence-missing": (_evidence_missing, "FAIL", "eject",
                             ["EVIDENCE_MISSING"], [], "The candidate's bench_runs.jsonl is gone: fail closed."),
    "syn-torn-tail": (_torn, "FLAG", "remeasure", ["EVIDENCE_CORRUPT"], ["DELTA_NOT_SIGNIFICANT"],
                      "The last line was never finished (writer killed): not evidence, a FLAG; the 5 complete reps "
                      "still decide."),
    "syn-corrupt-mid-file": (_corrupt_mid, "FAIL", "eject", ["EVIDENCE_CORRUPT"], [],
                             "A line in the middle of the file does not decode: the file cannot be trusted."),
    "syn-line-aggregate-mismatch": (lambda r: build_ab_run(r, cand_reps=[{**x, "output_throughput": x["output_throughput"] * 1.4}
                                                                        if x["rep"] == 0 else x for x in cand_reps()]),
                                    "FLAG", "flag", ["REPORTED_MISMATCH"], ["DELTA_NOT_SIGNIFICANT"],
                                    "One bench line's own aggregate disagrees with its per-request arrays by 40%."),
    "syn-second-knob": (lambda r: build_ab_run(r, cand_info={**CAND_INFO, "threads": 1}), "FAIL", "eject",
                        ["CONDITIONS_DIFFER"], [], "threads also changed 2 -> 1, undeclared: a confound."),
    "syn-misreported-summary": (lambda r: build_ab_run(r, claim={"reported": {"conditions": {
                                    "threads": {"baseline": 4, "candidate": 4}}}}), "FAIL", "eject",
                                ["CONDITIONS_MISREPORTED"], ["CONDITIONS_DIFFER"],
                                "The summary says both legs ran 4 threads; both servers reported 2."),
    "syn-contended-rep": (lambda r: build_ab_run(r, base_reps=[make_rep("base", k, throughput=v, started_at=1000.0 + 2 * k,
                                                                        contention={"busy": [{"name": "stress-ng", "cpu_pct": 96.0}]} if k == 2 else None)
                                                               for k, v in enumerate(BASE_TPUT)]),
                          "FLAG", "remeasure", ["CONTENDED_LEG"], [], "A CPU hog ran during baseline rep 2."),
    "syn-contended-near-miss": (lambda r: build_ab_run(r, base_reps=[make_rep("base", k, throughput=v, started_at=1000.0 + 2 * k,
                                                                              contention={"busy": [{"name": "sshd", "cpu_pct": 12.0}]})
                                                                     for k, v in enumerate(BASE_TPUT)]),
                                "PASS", "pass", [], ["CONTENDED_LEG"], "A background process at 12% CPU is not contention."),
    "syn-hidden-ttft": (lambda r: build_ab_run(r, cand_reps=cand_reps(ttft_ms=260.0)), "FLAG", "flag",
                        ["HIDDEN_LATENCY_REGRESSION"], [], "+10% throughput bought with 2.6x TTFT."),
    "syn-latency-near-miss": (lambda r: build_ab_run(r, cand_reps=cand_reps(ttft_ms=100.5)), "PASS", "pass", [],
                              ["HIDDEN_LATENCY_REGRESSION"], "TTFT +0.5% is inside the noise band."),
    "syn-not-engaged": (lambda r: build_ab_run(r, cand_info=KERNEL_INFO, claim=KERNEL_CLAIM,
                                               cand_log=["server ready", "override rmsnorm not engaged: no module matched"]),
                        "FAIL", "eject", ["NOT_ENGAGED"], [], "The override never engaged, so the delta is not its doing."),
    "syn-kernel-engaged": (lambda r: build_ab_run(r, cand_info=KERNEL_INFO, claim=KERNEL_CLAIM,
                                                  cand_log=["server ready", "override rmsnorm engaged on 30 modules"]),
                           "PASS", "pass", [], ["NOT_ENGAGED", "ORTHOGONAL_LEVER", "CONDITIONS_DIFFER"],
                           "A kernel override, engaged, the only difference, a real delta: a class-A win."),
    "syn-request-errors": (lambda r: build_ab_run(r, cand_reps=[make_rep("cand", k, throughput=v, errors=2 if k == 1 else 0,
                                                                         started_at=1001.0 + 2 * k) for k, v in enumerate(CAND_TPUT)]),
                           "FAIL", "eject", ["REQUEST_ERRORS"], [], "The candidate failed 2 requests; the baseline none."),
    "syn-server-crash": (lambda r: build_ab_run(r, cand_reps=reps("cand", CAND_TPUT[:2], 1), cand_status="failed",
                                                cand_log=["ready", "Segmentation fault (core dumped)"]),
                         "FAIL", "eject", ["SERVER_CRASH"], [], "The candidate server died after 2 reps."),
    "syn-parity-mismatch": (lambda r: build_ab_run(r, cand_outputs=[t.upper() for t in COHERENT_TEXTS]), "FAIL", "eject",
                            ["PARITY_MISMATCH"], ["NONCOHERENT_REFERENCE"], "0/12 greedy outputs match a lossless change."),
    "syn-parity-near-miss": (lambda r: build_ab_run(r, cand_outputs=COHERENT_TEXTS[:11] + ["The last answer differs late."]),
                             "PASS", "pass", [], ["PARITY_MISMATCH"], "11/12 identical: within the allowance."),
    "syn-gibberish-reference": (lambda r: build_ab_run(r, base_outputs=GIBBERISH_TEXTS, cand_outputs=GIBBERISH_TEXTS),
                                "FAIL", "eject", ["NONCOHERENT_REFERENCE"], [],
                                "Byte parity against a reference that emits gibberish proves nothing."),
    "syn-int8-no-eval": (lambda r: build_ab_run(r, cand_info={**BASE_INFO, "port": 8101, "quantization": "int8_dynamic"},
                                                claim=INT8), "FAIL", "eject", ["QUALITY_EVAL_MISSING"], [],
                         "Lossy int8 claimed supported without a quality eval."),
    "syn-int8-regression": (lambda r: _int8_with_eval(r, 0.30, 0.45),
        "FAIL", "eject", ["QUALITY_REGRESSION"], ["QUALITY_EVAL_MISSING"], "The eval shows 0.45 -> 0.30."),
    "syn-int8-eval-ok": (lambda r: _int8_with_eval(r, 0.44, 0.45),
        "PASS", "pass", [], ["QUALITY_EVAL_MISSING", "QUALITY_REGRESSION"], "A completed registered eval, -0.01."),
    "syn-output-length-shift": (lambda r: build_ab_run(r, cand_reps=cand_reps(output_len=48)), "FAIL", "eject",
                                ["OUTPUT_LENGTH_SHIFT"], [], "Outputs 25% shorter: early EOS."),
    "syn-response-cache": (lambda r: build_ab_run(r, cand_info={**BASE_INFO, "port": 8101, "response_cache": True},
                                                  claim={"lever": {"name": "cache", "lever_class": "B", "config_keys": ["response_cache"]}},
                                                  cand_log=["response cache hit (prompt p03)"]),
                           "FAIL", "eject", ["CACHING_SUSPECTED"], [], "A response cache measures the cache."),
    "syn-warm-vs-cold": (lambda r: build_ab_run(r, base_reps=reps("base", BASE_TPUT, 0, cache_hit_rate=0.0),
                                                cand_reps=cand_reps(cache_hit_rate=0.7)), "FAIL", "remeasure",
                         ["CACHING_SUSPECTED"], [], "Candidate ran with a warm prefix cache (70% hits), baseline cold."),
    "syn-test04-leg": (lambda r: build_ab_run(r, extra_legs={"t04": ("caching_audit", CAND_INFO, reps("t04", [175.0, 178.0, 176.0], 40))},
                                              claim={"legs": {"baseline": "base", "candidate": "cand", "caching_audit": "t04"}}),
                       "FLAG", "flag", ["CACHING_SUSPECTED"], [],
                       "One prompt repeated beats the varied-prompt candidate leg by 59.9% on output throughput (median "
                       "176.0 vs 110.1 tok/s) with the same median TTFT (100.0 ms) and the same median TPOT (20.0 ms). "
                       "Decode time per token, which caching cannot legitimately shorten, did not move, and no faster first "
                       "token explains the throughput: under issue 9 rule 10 (decided) that is an unexplained throughput-"
                       "only beat -- CACHING_SUSPECTED at FLAG -- not proof of caching (a TPOT beat is the FAIL). Answer "
                       "changed from FAIL/eject on that raw evidence."),
    "syn-test04-honest": (lambda r: build_ab_run(r, extra_legs={"t04": ("caching_audit", CAND_INFO, reps("t04", [111.0, 110.2, 109.0], 40))},
                                                 claim={"legs": {"baseline": "base", "candidate": "cand", "caching_audit": "t04"}}),
                          "PASS", "pass", [], ["CACHING_SUSPECTED"], "The repeated-prompt leg runs like the varied one."),
    "syn-harness-clean": (lambda r: _harness(r, _rows("torch_ref", 2.0, ref=True) + _rows("fused", 1.0), 2.0),
                          "PASS", "pass", [], ["HARNESS_SELF_COMPARE", "HARNESS_INCORRECT", "HARNESS_DISPATCH_MISMATCH",
                                               "HARNESS_UNSERVED_SHAPES", "IMPLAUSIBLE_SPEEDUP"],
                          "Two implementations, correct over 3 seeds, served shapes, eager like the server: 2.0x."),
    "syn-harness-self-compare": (lambda r: _harness(r, _rows("torch_ref", 2.0, ref=True, digest="same") +
                                                    _rows("fused", 0.66, digest="same"), 3.03),
                                 "FAIL", "redo_harness", ["HARNESS_SELF_COMPARE"], [],
                                 "The 'candidate' has the reference's source digest: measured against itself."),
    "syn-harness-incorrect": (lambda r: _harness(r, _rows("torch_ref", 2.0, ref=True) + _rows("fused", 0.5, rel=45.4), 4.0),
                              "FAIL", "redo_harness", ["HARNESS_INCORRECT"], [], "rel_err 45.4: wrong, fast."),
    "syn-harness-dispatch": (lambda r: _harness(r, _rows("torch_ref", 2.0, ref=True, dispatch="compiled") +
                                                _rows("fused", 1.0, dispatch="compiled"), 2.0),
                             "FAIL", "redo_harness", ["HARNESS_DISPATCH_MISMATCH"], ["HARNESS_UNSERVED_SHAPES"],
                             "Timed under torch.compile; the server runs eager."),
    "syn-harness-unserved": (lambda r: _harness(r, _rows("torch_ref", 2.0, ref=True, shape=(4096, 576)) +
                                                _rows("fused", 1.0, shape=(4096, 576)), 2.0),
                             "FAIL", "redo_harness", ["HARNESS_UNSERVED_SHAPES"], ["HARNESS_DISPATCH_MISMATCH"],
                             "Benchmarked at 4096 rows; the server serves 16."),
    "syn-harness-implausible": (lambda r: _harness(r, _rows("torch_ref", 20.0, ref=True) + _rows("magic", 1.0), 20.0, cand="magic"),
                                "FLAG", "redo_harness", ["IMPLAUSIBLE_SPEEDUP"], ["HARNESS_INCORRECT"],
                                "20x on an elementwise op needs extra proof."),
    "syn-profile-misattribution": (lambda r: _profile_claim(r, "rotary", [
                                       {"name": "silu_mul_kernel_0", "self_time_us": 2000.0},
                                       {"name": "silu_mul_kernel_1", "self_time_us": 2100.0},
                                       {"name": "aten::linear", "self_time_us": 5000.0},
                                       {"name": "rotary", "self_time_us": 150.0}]),
                                   "FAIL", "eject", ["PROFILE_MISATTRIBUTION"], [], "Rotary is 1.6% of the time."),
    "syn-profile-fragmented-hot": (lambda r: _profile_claim(r, "silu_mul", [
                                       {"name": "silu_mul_kernel_0", "self_time_us": 2000.0},
                                       {"name": "silu_mul_kernel_1", "self_time_us": 2100.0},
                                       {"name": "silu_mul_kernel_2", "self_time_us": 1900.0},
                                       {"name": "aten::linear", "self_time_us": 5000.0}]),
                                   "PASS", "pass", [], ["PROFILE_MISATTRIBUTION"],
                                   "silu_mul is split under three kernel names; merged it is 55% of the time."),
    "syn-report-untraced": (lambda r: _report(r, "# Result\n\nThroughput rose 10.1%.\nWith int8 we would reach 180 tok/s "
                                                 "(expected +80%).\nLatency fell 37.5%.\n"),
                            "FAIL", "eject", ["UNTRACED_CLAIM"], [], "An 'expected' figure and an untraced 37.5%."),
    "syn-report-clean": (lambda r: _report(r, "# Result\n\nThroughput went from 100.0 to 110.1 tok/s (+10.1%).\n"),
                         "PASS", "pass", [], ["UNTRACED_CLAIM"], "Every number traces to a re-derived value."),
    "syn-baseline-drift": (lambda r: _baseline_only(r, provided_baseline={"value": 130.0, "source": "dashboard"}),
                           "FAIL", "eject", ["BASELINE_DRIFT"], [], "Provided 130 vs re-derived 100.0."),
    "syn-baseline-noisy": (lambda r: _baseline_only(r, reps("base", [92.0, 100.0, 101.0, 100.4, 99.8], 0)),
                           "FLAG", "remeasure", ["NOISY_BASELINE"], [], "A warm-up rep 8% low: spread 9%."),
    "syn-baseline-quiet": (lambda r: _baseline_only(r, provided_baseline={"value": 100.2, "source": "last week"}),
                           "PASS", "pass", [], ["NOISY_BASELINE", "BASELINE_DRIFT", "CONTENDED_LEG", "REQUEST_ERRORS"],
                           "Spread 2.1%, drift 0.1%."),
    "syn-spec-decode-as-kernel": (lambda r: build_ab_run(r, cand_reps=cand_reps(accept_length=2.2), claim={
                                      "lever": {"name": "fast_decode", "lever_class": "A", "config_keys": ["max_batch_size"]},
                                      "headline": {"kind": "kernel", "value": 10.0},
                                      "mechanism": {"name": "speculative_decoding", "draft_model_id": "ngram", "acceptance_rate": 0.5}}),
                                  "FLAG", "downgrade_headline", ["ORTHOGONAL_LEVER"], ["CONDITIONS_DIFFER"],
                                  "accept_length in the raw means speculative decoding, headlined as a kernel win."),
    "syn-isolated-noise": (_isolated_noise,
                           "FAIL", "eject", ["ISOLATED_E2E_GAP", "DELTA_NOT_SIGNIFICANT"], [],
                           "3.0x isolated, e2e inside the noise band."),
    "syn-amdahl-violation": (_amdahl_violation,
                             "FLAG", "replace_headline_with_e2e", ["IMPLAUSIBLE_SPEEDUP"], ["DELTA_NOT_SIGNIFICANT"],
                             "1.25x on an op taking 24% of time bounds e2e at +5%; +10% measured came from elsewhere."),
}


def build_all(out: Path) -> list[str]:
    return write_case_table(out, CASES, frozen="2026-11-22", builder="proof/build_cases.py")


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
