"""Fixtures for claims measured on random weights: performance-only runs whose correctness
cannot be verified.

A target can serve its architecture with seeded random weights (the embedded target's
``--set weights=random``; SGLang/vLLM's ``load_format=dummy``) on a host where the real weights cannot be
installed. Timings from such a run are real; correctness is not: the reference outputs are noise by
construction, so coherence cannot be judged, and parity or a quality eval on them cannot show that the
change keeps the *model* correct. The rule (written before the gate): a claim any of whose legs' server
reports random weights is at most FLAG with ``CORRECTNESS_UNVERIFIABLE``, never PASS; the reference is not
held to the coherence check (it is noise by construction, not a broken server); a lossless change must
still reproduce the random model's greedy outputs (a deterministic function of the same weights), so a
parity failure stays a FAIL; and weights that differ between the legs are a confound like any other.

    python -m perfwarden.proof.build_random_weights [--out proof/fixtures]

Answers are in ``CASES`` below, written from that rule before the auditor ran on the cases.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from perfwarden.formats.records import write_json_atomic
from perfwarden.orchestrator.synth import (BASE_INFO, BASE_TPUT, COHERENT_TEXTS, GIBBERISH_TEXTS, build_ab_run,
                                           fixture_builder_main, reps, write_claim, write_leg, write_manifest,
                                           write_quality_pair)

PRETRAINED = {**BASE_INFO, "device": "cpu", "weights": "pretrained"}
RANDOM = {**BASE_INFO, "device": "cpu", "weights": "random", "weights_digest": "sha256:" + "7" * 64,
          "source_gguf_sha256": None, "tokenizer": "smollm2-bpe"}
"""What the embedded server reports with ``--set weights=random``: the knob, and the digest of the
seeded random tensors it serves."""
KERNEL = {"op_overrides": {"rmsnorm": "ops/rmsnorm_fused.py:rmsnorm"}, "port": 8101}
KERNEL_CLAIM = {"producer": "kernel_extractor",
                "lever": {"name": "rmsnorm_fused", "lever_class": "A", "kernel_ops": ["rmsnorm"]},
                "headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e"}}
SGLANG_DUMMY = {"model_path": "/models/Llama-3.1-8B-Instruct", "load_format": "dummy", "dtype": "bfloat16",
                "tp_size": 1, "mem_fraction_static": 0.85, "attention_backend": "flashinfer",
                "cuda_graph_max_bs": 160, "disable_cuda_graph": False, "port": 30000, "host": "127.0.0.1"}
"""An SGLang server launched with ``--load-format dummy`` (random weights, for performance runs)."""
SGLANG_BACKEND_CLAIM = {"producer": "config_tuner",
                        "lever": {"name": "attention_backend=fa3", "lever_class": "A",
                                  "config_keys": ["attention_backend"]},
                        "headline": {"metric": "output_throughput", "value": 10.0, "kind": "e2e"}}
NOISE = GIBBERISH_TEXTS
"""What a random-weight model says: token noise."""


@dataclass(frozen=True)
class Case:
    build: Callable[[Path], Any]
    claim: str
    verdict: str | list[str]
    action: str | list[str] | None
    why: str
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    note: list[str] = field(default_factory=list)


def _kernel(base: dict, cand_extra: dict | None = None, cand_outputs: list[str] | None = None,
            base_outputs: list[str] = COHERENT_TEXTS) -> Callable[[Path], Any]:
    """A kernel claim (rmsnorm override, engaged, +10%) on servers reporting ``base``."""
    def build(run: Path) -> None:
        build_ab_run(run, base_info=base, cand_info={**base, **KERNEL, **(cand_extra or {})},
                     base_outputs=base_outputs, cand_outputs=cand_outputs if cand_outputs is not None else base_outputs,
                     cand_log=["server ready", "override rmsnorm engaged on 30 modules"], claim=KERNEL_CLAIM)
    return build


def _sglang_backend(run: Path) -> None:
    build_ab_run(run, base_info=SGLANG_DUMMY, cand_info={**SGLANG_DUMMY, "attention_backend": "fa3", "port": 30001},
                 base_outputs=NOISE, cand_outputs=NOISE, claim=SGLANG_BACKEND_CLAIM)


def _int8_on_random(run: Path) -> None:
    build_ab_run(run, base_info=RANDOM, cand_info={**RANDOM, "port": 8101, "quantization": "int8_dynamic"},
                 base_outputs=NOISE, cand_outputs=NOISE[:6] + NOISE[6:][::-1],
                 claim={"lever": {"name": "int8", "lever_class": "B", "config_keys": ["quantization"]},
                        "correctness": {"parity": "none", "quality_eval_id": "pw-qa-exact-v1"}})
    write_quality_pair(run, base_score=0.0, cand_score=0.0)  # a random model answers nothing right


def _baseline(info: dict, outputs: list[str]) -> Callable[[Path], Any]:
    def build(run: Path) -> None:
        write_manifest(run)
        write_leg(run, "base", "baseline", info, reps("base", BASE_TPUT, 0), outputs=outputs)
        write_claim(run, {"scope": "baseline", "seq": 1, "producer": "integrator", "legs": {"baseline": "base"},
                          "headline": {"metric": "output_throughput", "value": 100.0, "kind": "e2e"}})
    return build


CASES: dict[str, Case] = {
    "rw-kernel-random-weights": Case(
        _kernel(RANDOM, base_outputs=NOISE), "claims/001-patch.json", "FLAG", "flag",
        "A kernel win (+10%, significant, engaged, exact parity) measured on seeded random weights: the timing is "
        "real, but the reference outputs are noise by construction, so identical noise proves the kernel "
        "reproduces this random model, not that the served model stays correct. Correctness is unverifiable: FLAG, "
        "never PASS; the noise is not a broken reference (no NONCOHERENT_REFERENCE) and parity held.",
        include=["CORRECTNESS_UNVERIFIABLE"], exclude=["NONCOHERENT_REFERENCE", "PARITY_MISMATCH", "CONDITIONS_DIFFER"],
        note=["coherence"]),
    "rw-kernel-pretrained": Case(
        _kernel(PRETRAINED), "claims/001-patch.json", "PASS", "pass",
        "Near miss: the same kernel claim on the pretrained weights, with coherent identical outputs: parity "
        "against a coherent reference verifies it.",
        exclude=["CORRECTNESS_UNVERIFIABLE", "PARITY_MISMATCH", "NONCOHERENT_REFERENCE"]),
    "rw-kernel-random-parity-broken": Case(
        _kernel(RANDOM, base_outputs=NOISE, cand_outputs=NOISE[::-1]), "claims/001-patch.json", "FAIL", "eject",
        "Random weights do not excuse parity: a lossless kernel must reproduce the same deterministic model's "
        "greedy outputs, and every one of the 12 differs. Random weights are not a way around the parity check.",
        include=["PARITY_MISMATCH"]),
    "rw-weights-differ": Case(
        _kernel(PRETRAINED, cand_extra={k: RANDOM[k] for k in ("weights", "weights_digest", "source_gguf_sha256",
                                                                "tokenizer")},
                cand_outputs=NOISE),
        "claims/001-patch.json", "FAIL", "eject",
        "The baseline served the pretrained weights, the candidate random ones, and the claim declares only the "
        "kernel: an undeclared difference in the weights is a confound (and the candidate's noise does not match "
        "the baseline's text).", include=["CONDITIONS_DIFFER"]),
    "rw-int8-eval-on-random": Case(
        _int8_on_random, "claims/001-patch.json", "FLAG", "flag",
        "A lossy change (int8) with a completed registered quality eval that shows no drop -- because a random "
        "model scores 0 on both legs. A quality eval on random weights measures nothing: correctness is "
        "unverifiable, so FLAG, not PASS.", include=["CORRECTNESS_UNVERIFIABLE"],
        exclude=["QUALITY_EVAL_MISSING", "QUALITY_REGRESSION", "NONCOHERENT_REFERENCE"]),
    "rw-baseline-random": Case(
        _baseline(RANDOM, NOISE), "claims/001-baseline.json", "FLAG", "flag",
        "A quiet baseline on random weights: its noise outputs are expected, not a broken server (no "
        "NONCOHERENT_REFERENCE), but no later parity check against them can verify correctness, which the "
        "verdict must say.", include=["CORRECTNESS_UNVERIFIABLE"], exclude=["NONCOHERENT_REFERENCE"]),
    "rw-baseline-noise-undisclosed": Case(
        _baseline(PRETRAINED, NOISE), "claims/001-baseline.json", "FAIL", "eject",
        "Near miss: the server says it serves the pretrained weights but its reference outputs are noise -- a "
        "broken reference, not a declared performance-only run. Only a server that reports random weights is "
        "excused from the coherence check.", include=["NONCOHERENT_REFERENCE"], exclude=["CORRECTNESS_UNVERIFIABLE"]),
    "rw-sglang-dummy-load-format": Case(
        _sglang_backend, "claims/001-patch.json",
        "FLAG", "flag",
        "SGLang launched with --load-format dummy serves random weights (the same performance-only mode under "
        "SGLang's own name): the attention backend's win may be real, its correctness is unverifiable.",
        include=["CORRECTNESS_UNVERIFIABLE"], exclude=["NONCOHERENT_REFERENCE", "PARITY_MISMATCH"]),
}


def build_all(out: Path) -> list[str]:
    built = []
    for name, case in CASES.items():
        dest = Path(out) / name
        if dest.exists():
            shutil.rmtree(dest)
        run = dest / "run"
        run.mkdir(parents=True)
        case.build(run)
        answer: dict[str, Any] = {"claim": case.claim, "verdict": case.verdict, "action": case.action,
                                  "must_include": case.include, "must_exclude": case.exclude}
        if case.note:
            answer["must_note"] = case.note
        write_json_atomic(dest / "answer_key.json", {
            "schema_version": 1, "frozen": "2026-11-23", "answers": [answer],
            "provenance": "hand-built by proof/build_random_weights.py (issue 10 §3: performance-only runs on "
                          "random weights; synthetic raw in the embedded target's and SGLang's server_info format)",
            "rationale": case.why})
        built.append(name)
    return built


if __name__ == "__main__":
    fixture_builder_main(__doc__, build_all, Path(__file__).resolve().parent / "fixtures")
