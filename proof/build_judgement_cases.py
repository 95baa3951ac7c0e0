"""Fixtures for the auditor's judgement rules: a positive and a near miss per rule.

Each case is a clean A/B run (``orchestrator.synth.build_ab_run``) with one adversarial edit, and its answer is
written in the ``CASES`` table below from the rule's text, before the auditor ran on the case. Where a
case needs a number to be true of its raw (a p99 ITL stall, an Amdahl share), the builder computes it
with plain numpy from the lines it writes and asserts it -- never with the auditor's code.

    python -m perfwarden.proof.build_judgement_cases [--out proof/fixtures]

Rules and fixture prefixes: ``jdg-knob-*`` (1 unknown knobs, registry), ``jdg-signal-*`` (2 levers
from every signal), ``jdg-eval-*`` (3 comparable quality evals), ``jdg-served-*`` (4 parity from what
was served), ``jdg-disclose-*`` (5 truthful disclosure, every primary metric), ``jdg-prose-*`` (6 prose
by meaning), ``jdg-amdahl-*`` (7 unexplained deltas), ``jdg-test04-*`` (10 TEST04 for LLM serving).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from perfwarden.formats.records import QualityEval, write_json_atomic
from perfwarden.orchestrator.synth import (BASE_INFO, BASE_TPUT, CAND_TPUT, COHERENT_TEXTS, build_ab_run,
                                           fixture_builder_main, reps, write_fixture, write_jsonl)

CAND_INFO = {**BASE_INFO, "max_batch_size": 8, "port": 8101}
KERNEL_INFO = {**BASE_INFO, "port": 8101, "op_overrides": {"rmsnorm": "ops/rmsnorm_fused.py:rmsnorm"}}
KERNEL_CLAIM = {"lever": {"name": "rmsnorm_fused", "lever_class": "A", "kernel_ops": ["rmsnorm"]},
                "headline": {"metric": "output_throughput", "value": 10.0, "kind": "kernel"}}
QA_ITEMS = Path(__file__).resolve().parents[1] / "harness" / "quality_items.json"


@dataclass(frozen=True)
class Case:
    """One fixture: how to build it and its frozen answer."""

    build: Callable[[Path], Any]
    verdict: str | list[str]
    action: str | list[str] | None
    why: str
    include: list[str] = field(default_factory=list)
    include_any: list[list[str]] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------ raw helpers


def cand_reps(**kw) -> list[dict]:
    return reps("cand", CAND_TPUT, 1, **kw)


def base_reps(**kw) -> list[dict]:
    return reps("base", BASE_TPUT, 0, **kw)


SERVED_IDS = [f"p{i:02d}" for i in range(8)]
"""Prompt ids the synthetic reps serve: the first 8 of the parity dump's ids (``synth.write_leg``)."""


def served_text(i: int) -> str:
    """What a greedy server returns for prompt ``i`` under the bench's ``ignore_eos``: the parity dump's
    text (which stopped at EOS) followed by what the model says after it."""
    return COHERENT_TEXTS[i] + " It is worth remembering."


def with_served(lines: list[dict], texts: list[str], ids: list[str] = SERVED_IDS) -> list[dict]:
    """Give every rep the prompt ids and generated texts a real bench line carries."""
    for line in lines:
        n = len(line["errors"])
        line["prompt_ids"] = [ids[k % len(ids)] for k in range(n)]
        line["generated_texts"] = [texts[k % len(texts)] for k in range(n)]
    return lines


HONEST_SERVED = [served_text(i) for i in range(8)]


def stall_itls(lines: list[dict], factor: float) -> list[dict]:
    """One decode stall per request: its first gap ``factor``x, the others shorter by the same total,
    so e2e and TPOT do not move and the p99 ITL does (a batching stall a throughput headline hides)."""
    for line in lines:
        new = []
        for gaps in line["itls"]:
            if len(gaps) < 2:
                new.append(gaps)
                continue
            extra = gaps[0] * (factor - 1.0)
            new.append([gaps[0] + extra] + [g - extra / (len(gaps) - 1) for g in gaps[1:]])
        line["itls"] = new
        for key in ("median_itl_ms", "p99_itl_ms", "mean_itl_ms"):
            line.pop(key, None)
    return lines


def p99_itl_ms(lines: list[dict]) -> float:
    """Median over reps of the per-rep p99 of all ITL gaps (ms): the builder's own arithmetic."""
    return float(np.median([np.percentile(np.concatenate([np.asarray(g) for g in line["itls"]]) * 1000.0, 99)
                            for line in lines]))


def profile(run: Path, rmsnorm_us: float, rows: list[dict] | None = None) -> float:
    """Write a profile where rmsnorm takes ``rmsnorm_us`` of self time; returns its share."""
    rows = rows or [{"name": "aten::linear", "op": "linear", "self_time_us": 9000.0, "count": 300, "shapes": [[16, 576]]},
                    {"name": "aten::softmax", "op": "softmax", "self_time_us": 500.0, "count": 30, "shapes": [[16, 9, 9]]}]
    if rmsnorm_us:
        rows = [{"name": "rmsnorm", "op": "rmsnorm", "self_time_us": rmsnorm_us, "count": 100,
                 "shapes": [[16, 576]]}, *rows]
    write_jsonl(run / "profile" / "profile.jsonl", rows)
    return rmsnorm_us / sum(r["self_time_us"] for r in rows)


def items_sha256() -> str:
    return hashlib.sha256(QA_ITEMS.read_bytes()).hexdigest()


def harness_quality(run: Path, *, base_score: float, cand_score: float, base_leg: str = "base",
                    cand_leg: str = "cand", graded_against: str | None = None, base_items: str | None = None,
                    cand_items: str | None = None, stated_baseline: float | None = None,
                    write_baseline_file: bool = True) -> None:
    """Write ``pw-qa-exact-v1`` the way ``harness/quality.run_quality_pair`` does: one file per leg
    (``quality/<eval>@<leg>.json``) with the item set's digest, the baseline's score copied into the
    candidate's record. The keyword arguments let a case break exactly one of those properties."""
    digest = items_sha256()
    base = QualityEval(eval_id="pw-qa-exact-v1", leg=base_leg, n=40, score=base_score,
                       item_set_sha256=base_items or digest, items_sha256=base_items or digest)
    cand = QualityEval(eval_id="pw-qa-exact-v1", leg=cand_leg, n=40, score=cand_score,
                       baseline_score=base_score if stated_baseline is None else stated_baseline,
                       baseline_leg=graded_against or base_leg, item_set_sha256=cand_items or digest,
                       items_sha256=cand_items or digest)
    if write_baseline_file:
        write_json_atomic(run / "quality" / f"pw-qa-exact-v1@{base_leg}.json", base)
    write_json_atomic(run / "quality" / f"pw-qa-exact-v1@{cand_leg}.json", cand)


INT8_INFO = {**BASE_INFO, "port": 8101, "quantization": "int8_dynamic"}
INT8_CLAIM = {"lever": {"name": "int8", "lever_class": "B", "config_keys": ["quantization"]},
              "correctness": {"parity": "none", "quality_eval_id": "pw-qa-exact-v1"}}


def int8_case(**quality: Any) -> Callable[[Path], Any]:
    def build(run: Path) -> None:
        build_ab_run(run, cand_info=INT8_INFO, claim=INT8_CLAIM)
        harness_quality(run, **quality)
    return build


def report_case(text: str, base_info: dict | None = None, cand_info: dict | None = None) -> Callable[[Path], Any]:
    def build(run: Path) -> None:
        build_ab_run(run, base_info=base_info, cand_info=cand_info, claim={"report": "report.md"})
        (run / "report.md").write_text(text)
    return build


SGLANG_DECODE = ("[2026-11-22 10:00:{s:02d} TP0] Decode batch. #running-req: 8, #token: 1043, token usage: 0.01, "
                 "accept len: 2.41, gen throughput (token/s): 812.33, #queue-req: 0")
SGLANG_PLAIN = ("[2026-11-22 10:00:{s:02d} TP0] Decode batch. #running-req: 8, #token: 1043, token usage: 0.01, "
                "gen throughput (token/s): 512.10, #queue-req: 0")
VLLM_SPEC = ("(APIServer pid=347228) INFO 11-22 20:51:{s:02d} [metrics.py:120] SpecDecoding metrics: Mean acceptance "
             "length: 1.71, Accepted throughput: 0.12 tokens/s, Drafted throughput: 0.34 tokens/s, Accepted: 92 "
             "tokens, Drafted: 259 tokens, Per-position acceptance rate: 0.357, 0.000, Avg Draft acceptance rate: "
             "35.5%")


def log(template: str, n: int = 3) -> list[str]:
    return ["server ready"] + [template.format(s=s) for s in range(n)]


def test04_case(t04_values: list[float], **kw: Any) -> Callable[[Path], Any]:
    def build(run: Path) -> None:
        build_ab_run(run, extra_legs={"t04": ("caching_audit", CAND_INFO, reps("t04", t04_values, 40, **kw)),
                                      "t04c": ("caching_audit", CAND_INFO, reps("t04c", CAND_TPUT[:3], 41))},
                     claim={"legs": {"baseline": "base", "candidate": "cand", "caching_audit": "t04",
                                     "caching_control": "t04c"}})
    return build


# ---------------------------------------------------------------------------------------- cases
# Each builder must leave the run's raw consistent with the rationale; asserts below check the numbers
# a rationale quotes (the builder's own arithmetic, never the auditor's).


def _p99_itl_hidden(run: Path) -> None:
    base, cand = base_reps(), stall_itls(cand_reps(), 4.0)
    rise = p99_itl_ms(cand) / p99_itl_ms(base) - 1.0
    assert rise > 1.5, rise
    build_ab_run(run, base_reps=base, cand_reps=cand)


def _p99_itl_disclosed(run: Path) -> None:
    base, cand = base_reps(), stall_itls(cand_reps(), 4.0)
    rise = round((p99_itl_ms(cand) / p99_itl_ms(base) - 1.0) * 100.0, 1)
    build_ab_run(run, base_reps=base, cand_reps=cand,
                 claim={"headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e",
                                     "disclosed_regressions": {"p99_itl_ms": rise}}})


def _ttft_headline_hides_throughput(run: Path) -> None:
    build_ab_run(run, cand_reps=reps("cand", [v * 0.85 for v in BASE_TPUT], 1, ttft_ms=80.0),
                 claim={"headline": {"metric": "median_ttft_ms", "value": -20.0, "kind": "e2e"}})


def _amdahl(share_us: float, claim_extra: dict | None = None) -> Callable[[Path], Any]:
    def build(run: Path) -> None:
        share = profile(run, share_us)
        assert 0.0 <= share < 1.0
        build_ab_run(run, cand_info=KERNEL_INFO, cand_log=["server ready", "override rmsnorm engaged on 30 modules"],
                     claim={**KERNEL_CLAIM, **(claim_extra or {})})
    return build


def _dump_not_served(run: Path) -> None:
    """The candidate's parity dump is the baseline's (identical, coherent); what its server returned
    for the same prompts is different text."""
    other = [served_text((i + 3) % 12) for i in range(8)]
    build_ab_run(run, base_reps=with_served(base_reps(), HONEST_SERVED),
                 cand_reps=with_served(cand_reps(), other))


def _served_differ_dumps_agree(run: Path) -> None:
    """Both parity dumps agree, but no dumped prompt was served (the reps served prompts s00..s07), and
    every prompt both legs served returned other text from the candidate than from the baseline."""
    ids = [f"s{i:02d}" for i in range(8)]
    base_texts = [served_text(i) for i in range(8)]
    cand_texts = [t.upper() for t in base_texts]
    build_ab_run(run, base_reps=with_served(base_reps(), base_texts, ids),
                 cand_reps=with_served(cand_reps(), cand_texts, ids))


def _served_one_flip(run: Path) -> None:
    """Served texts agree across legs except one late token flip in one prompt (7/8 identical, within
    the batching allowance); dumps are prefixes of what was served."""
    cand = list(HONEST_SERVED)
    cand[5] = cand[5][:-3] + "ed."
    build_ab_run(run, base_reps=with_served(base_reps(), HONEST_SERVED), cand_reps=with_served(cand_reps(), cand))


CASES: dict[str, Case] = {
    # ---- rule 1: unknown knobs fail closed; the registry knows SGLang's and vLLM's numerics knobs
    "jdg-knob-unknown-declared": Case(
        lambda r: build_ab_run(r, cand_info={**BASE_INFO, "port": 8101, "turbo_mode": True},
                               claim={**KERNEL_CLAIM, "lever": {"name": "turbo", "lever_class": "A",
                                                                "config_keys": ["turbo_mode"]}}),
        "FLAG", "flag", "A declared knob the registry does not know, called class A by the producer, with exact parity: "
        "its class and losslessness are not taken on the producer's word, so the verdict is at least FLAG until the "
        "registry knows it.", include=["UNKNOWN_KNOB"], exclude=["CONDITIONS_DIFFER", "PARITY_MISMATCH"]),
    "jdg-knob-unknown-not-exact": Case(
        lambda r: build_ab_run(r, cand_info={**BASE_INFO, "port": 8101, "turbo_mode": True},
                               cand_outputs=COHERENT_TEXTS[:11] + ["The last answer differs late."],
                               claim={"lever": {"name": "turbo", "lever_class": "A", "config_keys": ["turbo_mode"]}}),
        "FAIL", "eject", "An unknown knob whose greedy outputs differ on 1 of 12 prompts: within the allowance a known "
        "lossless change gets, but an unclassified knob needs exact parity or a passing registered quality eval, and "
        "has neither.", include=["UNKNOWN_KNOB"], include_any=[["PARITY_MISMATCH", "QUALITY_EVAL_MISSING"]]),
    "jdg-knob-unknown-undeclared": Case(
        lambda r: build_ab_run(r, cand_info={**CAND_INFO, "spec_turbo_level": 3}),
        "FAIL", "eject", "A second, unknown knob differs beside the declared max_batch_size: a confound whatever it is.",
        include=["CONDITIONS_DIFFER"]),
    "jdg-knob-sglang-chunked-prefill": Case(
        lambda r: build_ab_run(r, base_info={**BASE_INFO, "chunked_prefill_size": 8192},
                               cand_info={**BASE_INFO, "port": 8101, "chunked_prefill_size": 4096},
                               claim={"lever": {"name": "chunked_prefill_size=4096", "lever_class": "B",
                                                "config_keys": ["chunked_prefill_size"]}}),
        "PASS", "pass", "SGLang's chunked_prefill_size is a known class-B scheduling knob, declared as such, lossless, "
        "with identical outputs and a real delta.", exclude=["UNKNOWN_KNOB", "CONDITIONS_DIFFER", "QUALITY_EVAL_MISSING"]),
    "jdg-knob-sglang-fp8-kv-no-eval": Case(
        lambda r: build_ab_run(r, base_info={**BASE_INFO, "kv_cache_dtype": "auto"},
                               cand_info={**BASE_INFO, "port": 8101, "kv_cache_dtype": "fp8_e5m2"},
                               claim={"lever": {"name": "fp8 kv", "lever_class": "B", "config_keys": ["kv_cache_dtype"]}}),
        "FAIL", "eject", "An fp8 KV cache is lossy (KV quantization); claimed supported with no quality eval.",
        include=["QUALITY_EVAL_MISSING"], exclude=["UNKNOWN_KNOB"]),
    "jdg-knob-vllm-torchao-no-eval": Case(
        lambda r: build_ab_run(r, base_info={**BASE_INFO, "torchao_config": ""},
                               cand_info={**BASE_INFO, "port": 8101, "torchao_config": "int8wo"},
                               claim={"lever": {"name": "torchao int8 weight-only", "lever_class": "B",
                                                "config_keys": ["torchao_config"]}}),
        "FAIL", "eject", "A torchao int8 weight-only config is quantization (lossy): it needs a quality eval.",
        include=["QUALITY_EVAL_MISSING"], exclude=["UNKNOWN_KNOB"]),
    # ---- rule 2: levers are read from every signal
    "jdg-signal-sglang-spec-in-log": Case(
        lambda r: build_ab_run(r, cand_info={**BASE_INFO, "port": 8101, "attention_backend": "triton"},
                               base_info={**BASE_INFO, "attention_backend": "flashinfer"},
                               base_log=log(SGLANG_PLAIN), cand_log=log(SGLANG_DECODE),
                               claim={"lever": {"name": "triton attention", "lever_class": "A",
                                                "config_keys": ["attention_backend"]},
                                      "headline": {"metric": "output_throughput", "value": 10.0, "kind": "kernel"}}),
        "FAIL", "eject", "The candidate's sglang decode log reports 'accept len: 2.41' (speculative decoding ran) while "
        "the claim declares only an attention backend and no speculative mechanism: an undisclosed class-B lever that "
        "differs between the legs is a confound, not a kernel win.",
        include_any=[["CONDITIONS_DIFFER", "ORTHOGONAL_LEVER"]]),
    "jdg-signal-response-cache-engaged": Case(
        lambda r: build_ab_run(r, cand_log=["server ready", "WARNING ENGAGED response_cache size=1024: identical "
                                            "requests are answered from memory"]),
        "FAIL", "eject", "The candidate's server log says a response cache engaged although server_info shows none: "
        "a cache measures the cache, not the server.", include=["CACHING_SUSPECTED"]),
    "jdg-signal-hidden-override": Case(
        lambda r: build_ab_run(r, cand_log=["server ready", "INFO ENGAGED op_override op='rmsnorm' first call"]),
        "FAIL", "eject", "A batching claim whose candidate log shows an rmsnorm override engaged: an undeclared kernel "
        "change beside the declared knob.", include=["CONDITIONS_DIFFER"]),
    "jdg-signal-vllm-spec-paperwork-missing": Case(
        lambda r: build_ab_run(r, base_info={**BASE_INFO, "speculative_config": None},
                               cand_info={**BASE_INFO, "port": 8101, "speculative_config": {"method": "ngram",
                                                                                           "num_speculative_tokens": 2}},
                               cand_log=log(VLLM_SPEC),
                               claim={"lever": {"name": "ngram spec decode", "lever_class": "B",
                                                "config_keys": ["speculative_config"]},
                                      "mechanism": {"name": "speculative_decoding", "variant": "ngram"}}),
        "PASS", "pass", "Declared ngram speculative decoding (class B, lossless, identical outputs); the claim omits the "
        "draft id and acceptance rate, but the server log carries the raw acceptance: missing paperwork is INFO.",
        exclude=["EVIDENCE_MISSING", "ORTHOGONAL_LEVER", "REPORTED_MISMATCH", "UNKNOWN_KNOB"]),
    "jdg-signal-acceptance-misreported": Case(
        lambda r: build_ab_run(r, base_info={**BASE_INFO, "speculative_config": None},
                               cand_info={**BASE_INFO, "port": 8101, "speculative_config": {"method": "ngram",
                                                                                           "num_speculative_tokens": 2}},
                               cand_log=log(VLLM_SPEC),
                               claim={"lever": {"name": "ngram spec decode", "lever_class": "B",
                                                "config_keys": ["speculative_config"]},
                                      "mechanism": {"name": "speculative_decoding", "variant": "ngram",
                                                    "draft_model_id": "ngram", "acceptance_rate": 0.9}}),
        "FLAG", ["flag", "downgrade_headline"], "The claim says 90% of drafts were accepted; the server log says 92 of "
        "259 (35.5%).", include=["REPORTED_MISMATCH"]),
    "jdg-signal-acceptance-honest": Case(
        lambda r: build_ab_run(r, base_info={**BASE_INFO, "speculative_config": None},
                               cand_info={**BASE_INFO, "port": 8101, "speculative_config": {"method": "ngram",
                                                                                           "num_speculative_tokens": 2}},
                               cand_log=log(VLLM_SPEC),
                               claim={"lever": {"name": "ngram spec decode", "lever_class": "B",
                                                "config_keys": ["speculative_config"]},
                                      "mechanism": {"name": "speculative_decoding", "variant": "ngram",
                                                    "draft_model_id": "ngram", "acceptance_rate": 0.36}}),
        "PASS", "pass", "The stated 36% acceptance matches the log's 92/259.",
        exclude=["REPORTED_MISMATCH", "EVIDENCE_MISSING", "ORTHOGONAL_LEVER"]),
    # ---- rule 3: quality evals are the harness's and comparable
    "jdg-eval-comparable": Case(int8_case(base_score=0.45, cand_score=0.44), "PASS", "pass",
                                "Both legs' harness records, same eval and item set, candidate graded against the compared "
                                "baseline leg: -0.01 is within the eval's tolerance.",
                                exclude=["QUALITY_EVAL_MISSING", "QUALITY_REGRESSION"]),
    "jdg-eval-self-graded": Case(int8_case(base_score=0.44, cand_score=0.44, graded_against="cand"), "FAIL", "eject",
                                 "The candidate's eval names itself as its baseline: no comparison was made.",
                                 include=["QUALITY_EVAL_MISSING"]),
    "jdg-eval-other-leg": Case(int8_case(base_score=0.44, cand_score=0.44, base_leg="aa"), "FAIL", "eject",
                               "The eval's baseline is leg 'aa', not the claim's baseline 'base'.",
                               include=["QUALITY_EVAL_MISSING"]),
    "jdg-eval-other-items": Case(int8_case(base_score=0.45, cand_score=0.44, base_items="0" * 64), "FAIL", "eject",
                                 "The baseline was scored on another item set: the scores are not comparable.",
                                 include=["QUALITY_EVAL_MISSING"]),
    "jdg-eval-baseline-score-forged": Case(int8_case(base_score=0.60, cand_score=0.44, stated_baseline=0.45), "FAIL",
                                           "eject", "The candidate record says the baseline scored 0.45; the baseline's "
                                           "own harness record says 0.60 (a real drop of 0.16).",
                                           include_any=[["QUALITY_EVAL_MISSING", "QUALITY_REGRESSION"]]),
    "jdg-eval-no-baseline-record": Case(int8_case(base_score=0.45, cand_score=0.44, write_baseline_file=False), "FAIL",
                                        "eject", "Only the candidate's record exists; its baseline score has no harness "
                                        "record behind it.", include=["QUALITY_EVAL_MISSING"]),
    # ---- rule 4: parity comes from what was served
    "jdg-served-dump-not-served": Case(_dump_not_served, "FAIL", "eject",
                                       "The candidate's parity dump says its outputs equal the baseline's, but the texts "
                                       "its server returned during the reps are other answers.",
                                       include=["PARITY_MISMATCH"]),
    "jdg-served-differ-dumps-agree": Case(_served_differ_dumps_agree, "FAIL", "eject",
                                          "The dumps agree, on prompts that were never served; every prompt both legs "
                                          "served returned different text from the candidate.",
                                          include=["PARITY_MISMATCH"]),
    "jdg-served-one-flip": Case(_served_one_flip, "PASS", "pass",
                                "7 of 8 served prompts identical across legs, the dumps are prefixes of what was served "
                                "(they stopped at EOS, the bench ignores EOS): within the allowance.",
                                exclude=["PARITY_MISMATCH"]),
    # ---- rule 5: truthful disclosure, every primary metric
    "jdg-disclose-inflated": Case(
        lambda r: build_ab_run(r, cand_reps=cand_reps(ttft_ms=130.0),
                               claim={"headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e",
                                                   "disclosed_regressions": {"median_ttft_ms": 200.0,
                                                                             "p99_ttft_ms": 30.0,
                                                                             "median_e2e_latency_ms": 4.2,
                                                                             "p99_e2e_latency_ms": 4.2}}}),
        "FLAG", "flag", "Median TTFT is 30% worse; the claim discloses 200% (the other regressions at their real "
        "size): an inflated disclosure does not cover the real regression.", include=["HIDDEN_LATENCY_REGRESSION"]),
    "jdg-disclose-blanket": Case(
        lambda r: build_ab_run(r, cand_reps=cand_reps(ttft_ms=130.0),
                               claim={"headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e",
                                                   "disclosed_regressions": {m: 500.0 for m in (
                                                       "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                                                       "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms",
                                                       "p99_e2e_latency_ms")}}}),
        "FLAG", "flag", "Every latency metric 'disclosed' at 500%: a blanket disclosure covers nothing.",
        include=["HIDDEN_LATENCY_REGRESSION"]),
    "jdg-disclose-truthful": Case(
        lambda r: build_ab_run(r, cand_reps=cand_reps(ttft_ms=130.0),
                               claim={"headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e",
                                                   "disclosed_regressions": {"median_ttft_ms": 30.0,
                                                                             "p99_ttft_ms": 30.0,
                                                                             "median_e2e_latency_ms": 4.2,
                                                                             "p99_e2e_latency_ms": 4.2}}}),
        "PASS", "pass", "TTFT +30% (median and p99) and so e2e +4.2% (720 -> 750 ms), each disclosed at its real size: "
        "stated trade-offs, not hidden.",
        exclude=["HIDDEN_LATENCY_REGRESSION"]),
    "jdg-disclose-ttft-headline-hides-throughput": Case(
        _ttft_headline_hides_throughput, "FLAG", "flag",
        "A TTFT headline (-20%) over a 15% output-throughput loss the claim never mentions.",
        include=["HIDDEN_LATENCY_REGRESSION"]),
    "jdg-disclose-p99-itl-hidden": Case(
        _p99_itl_hidden, "FLAG", "flag", "Throughput +10% with one decode stall per request: p99 ITL rises about 3x, "
        "undisclosed (median ITL, TPOT and e2e do not move).", include=["HIDDEN_LATENCY_REGRESSION"]),
    "jdg-disclose-p99-itl-disclosed": Case(
        _p99_itl_disclosed, "PASS", "pass", "The same stall, disclosed at its measured size.",
        exclude=["HIDDEN_LATENCY_REGRESSION"]),
    # ---- rule 6: prose tracing by meaning
    "jdg-prose-unrelated-match": Case(
        report_case("# Result\n\nOutput throughput rose 12.5% with max_batch_size 8.\n",
                    base_info={**BASE_INFO, "batch_wait_ms": 12.5},
                    cand_info={**CAND_INFO, "batch_wait_ms": 12.5}),
        "FAIL", "eject", "'rose 12.5%' is a throughput delta; the re-derived delta is +10.1%. 12.5 is the batching "
        "window in ms, an unrelated number.", include=["UNTRACED_CLAIM"]),
    "jdg-prose-percent-for-absolute": Case(
        report_case("# Result\n\nOutput throughput rose 110.1%.\n"), "FAIL", "eject",
        "110.1 is the candidate's throughput in tok/s, printed as a percent rise.", include=["UNTRACED_CLAIM"]),
    "jdg-prose-wrong-leg": Case(
        report_case("# Result\n\nThe baseline served 110.1 tok/s.\n"), "FAIL", "eject",
        "110.1 tok/s is the candidate's median, attributed to the baseline.", include=["UNTRACED_CLAIM"]),
    "jdg-prose-wrong-metric": Case(
        report_case("# Result\n\nMedian TTFT fell 10.1%.\n"), "FAIL", "eject",
        "10.1% is the throughput delta; median TTFT did not move.", include=["UNTRACED_CLAIM"]),
    "jdg-prose-honest-nonresults": Case(
        report_case("# SmolLM2-135M on torch 2.13.0 (Python 3.11), 2026-11-22\n\n"
                    "Our target was a 5% gain. Measured on Nov 22, 2026 over 5 reps of 8 prompts, with 40 items "
                    "in the quality set and max_batch_size 8: output throughput went from 100.0 to 110.1 tok/s "
                    "(+10.1%), and median TTFT stayed at 100.0 ms.\n\nThe goal for next quarter is 20%.\n"),
        "PASS", "pass", "Versions, dates, a model size, counts of items and 'target'/'goal' as nouns are not results; "
        "every measured number traces to the value it claims to be.", exclude=["UNTRACED_CLAIM"]),
    # ---- rule 7: unexplained deltas FAIL
    "jdg-amdahl-share-exceeded": Case(
        _amdahl(500.0), "FAIL", "eject", "rmsnorm is 5% of the profile: even removing it entirely gives at most +5.3%; "
        "+10% e2e is not the override's doing (no isolated speedup is claimed).", include=["UNEXPLAINED_DELTA"]),
    "jdg-amdahl-op-absent": Case(
        _amdahl(0.0), "FAIL", "eject", "The overridden op never appears in the run's profile: it cannot explain any "
        "e2e delta.", include=["UNEXPLAINED_DELTA"]),
    "jdg-amdahl-share-ok": Case(
        _amdahl(3000.0), "PASS", "pass", "rmsnorm is 24% of the profile: +10% is within the +31.6% an infinitely fast "
        "rmsnorm could give.", exclude=["UNEXPLAINED_DELTA", "IMPLAUSIBLE_SPEEDUP"]),
    # ---- rule 10: TEST04 for LLM serving
    "jdg-test04-decode-beat": Case(
        test04_case([111.0, 110.2, 109.0], tpot_ms=14.0), "FAIL", "eject",
        "The repeated-prompt leg decodes 30% faster per token than its same-length distinct-prompt control: decode "
        "time cannot be cached legitimately.", include=["CACHING_SUSPECTED"]),
    "jdg-test04-throughput-only": Case(
        test04_case([150.0, 152.0, 149.0]), "FLAG", "flag",
        "+36% throughput over the same-length control with the same TTFT and TPOT: unexplained, flagged for a look, "
        "not proof of caching.", include=["CACHING_SUSPECTED"]),
    "jdg-test04-prefill-only": Case(
        test04_case([122.0, 123.0, 121.5], ttft_ms=55.0), "PASS", "pass",
        "The repeated prompt's prefix is cached: TTFT halves and throughput rises 11%, decode per token is unchanged "
        "-- what prefix caching explains.", exclude=["CACHING_SUSPECTED"]),
}


def build_all(out: Path) -> list[str]:
    def answer(case) -> dict[str, Any]:
        fields = {"verdict": case.verdict, "action": case.action, "must_include": case.include,
                  "must_exclude": case.exclude}
        return {**fields, "must_include_any": case.include_any} if case.include_any else fields

    return [write_fixture(out, name, case.build, answer(case), frozen="2026-11-23",
                          provenance="hand-built by proof/build_judgement_cases.py (issue 9 judgement rules; synthetic raw)",
                          rationale=case.why)
            for name, case in CASES.items()]


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
