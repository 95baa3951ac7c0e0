"""Hand-built fixtures for "the registry says which keys each target reports and fails closed on the
rest".

Each case is the witnessed light A/B run of ``build_witness`` whose two legs hold a key EQUAL in both,
where the conditions diff sees nothing: a key no target reports, a case variant and a confusable
(Cyrillic) variant of a known knob, a key of another target (SGLang's ``mem_fraction_static`` on the
embedded target), and a run whose run.json names a target the registry does not list. The near misses
must PASS: an embedded run whose server_info is what the embedded server writes, and the same with the
candidate's keys in another order. Every answer is in the CASES table below, written before the auditor
was run on them.

    python -m perfwarden.proof.build_target_keys [--out proof/fixtures]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from perfwarden.harness.target_config import EmbeddedConfig
from perfwarden.orchestrator.synth import fixture_builder_main, write_case_table, write_manifest
from perfwarden.proof.build_integrity import QUIET
from perfwarden.proof.build_witness import build_infos, infos

_FLAGGED = ["UNKNOWN_KNOB"]
_NOT_A_CONFOUND = ["CONDITIONS_DIFFER", "CONDITIONS_MISREPORTED", "EVIDENCE_CORRUPT", "EVIDENCE_MISSING"]


def embedded_shape(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` (build_witness's leg) as the embedded server reports itself (harness/embedded_server.py
    ``server_info``): every knob, the model's provenance and versions, the process record; the fixture
    builder's own ``host``/``port`` live in ``process`` there."""
    knobs = {**EmbeddedConfig.defaults(), "threads": 2, "max_batch_size": info["max_batch_size"]}
    return {**knobs, "model": "SmolLM2-135M-Instruct", "served_model_name": "SmolLM2-135M-Instruct",
            "model_path": "/models/smollm2", "weights_digest": info["weights_digest"], "source_gguf_sha256": None,
            "tokenizer": "smollm2-bpe", "torch_version": info["torch_version"], "transformers_version": "4.57.0",
            "python_version": "3.12.3", "version": "0.1.0", "torch_num_threads": 2, "torch_num_interop_threads": 1,
            "stop_token_ids": [2], "op_overrides_detail": {}, "explicit_knobs": ["max_batch_size", "threads"],
            "device_name": "Intel(R) Xeon(R) CPU", "process": info["process"],
            "process_conditions": info["process_conditions"]}


def case(both: dict[str, Any] | None = None, target: str | None = None, shape: Callable[[dict], dict] | None = None,
         reorder: bool = False) -> Callable[[Path], None]:
    """The clean witnessed run, each leg's server_info reshaped by ``shape``, ``both`` added to both legs
    (equal values), the candidate's keys reversed when ``reorder``; run.json naming ``target``."""
    def builder(run: Path) -> None:
        b, c = ((shape(x) if shape else x) for x in infos())
        b, c = {**b, **(both or {})}, {**c, **(both or {})}
        build_infos(run, b, dict(reversed(list(c.items()))) if reorder else c)
        if target is not None:
            write_manifest(run, target=target)
    return builder


# name -> (builder, verdict, action, must_include, must_exclude, rationale)
CASES: dict[str, tuple[Callable[[Path], Any], str, str, list[str], list[str], str]] = {
    "keys-unknown-equal": (
        case(both={"kv_turbo": 1}), "FLAG", "flag", _FLAGGED, _NOT_A_CONFOUND,
        "Both legs report kv_turbo=1, a key no target reports and the registry cannot classify: equal in both "
        "legs it is no confound, but nothing shows it inert or what it does to the A/B, so it cannot PASS."),
    "keys-case-variant-equal": (
        case(both={"Threads": 1}), "FLAG", "flag", _FLAGGED, _NOT_A_CONFOUND,
        "Both legs report 'Threads' (a case variant of the threads knob) equal: no target reports it."),
    "keys-confusable-equal": (
        case(both={"prompt_lookuр": True}), "FLAG", "flag", _FLAGGED, _NOT_A_CONFOUND,
        "Both legs report 'prompt_lookuр' (its last letter Cyrillic), a confusable of the speculative "
        "prompt_lookup knob, equal: no target reports it."),
    "keys-other-target-equal": (
        case(both={"mem_fraction_static": 0.5}, target="embedded", shape=embedded_shape), "FLAG", "flag", _FLAGGED,
        _NOT_A_CONFOUND,
        "An embedded run whose legs both report SGLang's mem_fraction_static: the embedded server never writes it."),
    "keys-target-not-listed": (
        case(target="tgi"), "FLAG", "flag", _FLAGGED, _NOT_A_CONFOUND,
        "run.json names target 'tgi', which the registry does not list: no key of either leg's server_info can "
        "be attributed to a target that reports it."),
    "keys-near-embedded-honest": (
        case(target="embedded", shape=embedded_shape), "PASS", "pass", [], [*QUIET, "UNKNOWN_KNOB"],
        "Near miss: an embedded run whose server_info holds exactly what the embedded server and the harness write."),
    "keys-near-embedded-reordered": (
        case(target="embedded", shape=embedded_shape, reorder=True), "PASS", "pass", [], [*QUIET, "UNKNOWN_KNOB"],
        "Near miss: the honest embedded run with the candidate's server_info keys in reverse order."),
}


def build_all(out: Path) -> list[str]:
    return write_case_table(out, CASES, frozen="2026-11-26", builder="proof/build_target_keys.py")


def main() -> None:
    fixture_builder_main(__doc__, build_all, Path(__file__).parent / "fixtures")


if __name__ == "__main__":
    main()
