"""The config-tuner's search as pure functions: coordinate descent over the config model, one rung at a
time, never back to a value that lost, a refused step retried only against a new best (bounded)."""

from __future__ import annotations

import pytest

from perfwarden.agents import config_tuner as T
from perfwarden.agents.base import Proposal
from perfwarden.formats.verdict_summary import FindingSummary, VerdictSummary
from perfwarden.harness.target_config import ConfigError, EmbeddedConfig

BASE = EmbeddedConfig.defaults()
SPACE = T.parse_levers(EmbeddedConfig, None)


def tried(knob, value, against, banked):
    return T.Tried(knob=knob, value=value, against=against, banked=banked)


def step(best, history):
    s = T.next_step(EmbeddedConfig, SPACE, BASE, best, history)
    return None if s is None else (s.knob, s.value)


def test_default_space_is_the_models_default_search():
    assert SPACE == {"max_batch_size": (1, 2, 4, 8, 16), "attn_implementation": ("eager", "sdpa")}


def test_ordinal_knob_climbs_one_rung_at_a_time_from_the_best():
    assert step({}, []) == ("max_batch_size", 2)
    h = [tried("max_batch_size", 2, {}, True)]
    assert step({"max_batch_size": 2}, h) == ("max_batch_size", 4)  # 1 lost to 2: never tried again
    h.append(tried("max_batch_size", 4, {"max_batch_size": 2}, False))
    assert step({"max_batch_size": 2}, h) == ("attn_implementation", "eager")  # refused up, down (1) lost
    h.append(tried("attn_implementation", "eager", {"max_batch_size": 2}, False))
    assert step({"max_batch_size": 2}, h) is None  # converged


def test_a_refused_step_is_retried_only_against_a_new_best_and_only_max_tries_times():
    h = [tried("max_batch_size", 2, {}, False), tried("attn_implementation", "eager", {}, True)]
    best = {"attn_implementation": "eager"}
    assert step(best, h) == ("max_batch_size", 2)  # the best changed: coordinate descent's next pass
    h.append(tried("max_batch_size", 2, best, False))
    assert step(best, h) is None
    h = [tried("max_batch_size", 2, {}, False), tried("max_batch_size", 2, {"x": 1}, False)]
    assert step({"y": 1}, h) == ("attn_implementation", "eager")  # two tries of 2 already: no third


def test_levers_name_knobs_or_single_values():
    assert T.parse_levers(EmbeddedConfig, ["max_batch_size=4", "response_cache"]) == {
        "max_batch_size": (4,), "response_cache": (False, True)}
    assert T.parse_levers(EmbeddedConfig, ["batch_wait_ms=40"]) == {"batch_wait_ms": (40.0,)}
    with pytest.raises(ConfigError, match="'warp'"):
        T.parse_levers(EmbeddedConfig, ["warp"])
    with pytest.raises(ConfigError, match="max_batch_size"):
        T.parse_levers(EmbeddedConfig, ["max_batch_size=lots"])


def test_a_step_from_an_llm_is_checked_and_normalized():
    space = T.parse_levers(EmbeddedConfig, ["batch_wait_ms"])
    s, problem = T.check_step(EmbeddedConfig, space, T.KnobStep(knob="batch_wait_ms", value=40))
    assert problem is None and s.value == 40.0
    assert T.check_step(EmbeddedConfig, space, T.KnobStep(knob="batch_wait_ms", value=7))[1]
    assert T.check_step(EmbeddedConfig, space, T.KnobStep(knob="threads", value=1))[1]


def test_step_proposals_carry_the_models_beliefs():
    p = T.step_proposal(EmbeddedConfig, T.KnobStep(knob="quantization", value="int8_dynamic"), {"max_batch_size": 4},
                        reps=3, attempt=2)
    assert (p.id, p.believed_class, p.lossless, p.against) == ("cfg-quantization=int8_dynamic-t2", "B", False,
                                                                {"max_batch_size": 4})
    spec = T.step_proposal(EmbeddedConfig, T.KnobStep(knob="prompt_lookup", value=True), {}, reps=3, attempt=1)
    assert spec.mechanism == "speculative_decoding"


def verdict(codes, action="eject", message="x"):
    return VerdictSummary(seq=1, scope="patch", verdict="FAIL", action=action, path="v", claim="c",
                          findings=[FindingSummary(code=c, severity="FAIL", message=message) for c in codes])


def test_fix_decisions_read_codes_never_message_text():
    p = Proposal(id="x", kind="config", producer="config_tuner", config={"max_batch_size": 2})
    assert T.fix(p, verdict(["CACHING_SUSPECTED"]), 7).action == "drop"
    assert T.fix(p, verdict(["ORTHOGONAL_LEVER"]), 7).action == "reclassify"
    assert T.fix(p, verdict(["QUALITY_EVAL_MISSING"]), 7).action == "run_quality_eval"
    # a message that talks about speculative decoding or caching changes nothing
    assert T.fix(p, verdict(["DELTA_NOT_SIGNIFICANT"], message="speculative response cache"), 7).action == "drop"
    assert T.fix(p, verdict(["CONTENDED_LEG"], action="remeasure", message="cache hit"), 7).action == "remeasure"
    info_only = verdict([])
    info_only.findings.append(FindingSummary(code="CACHING_SUSPECTED", severity="INFO", message="x"))
    assert "CACHING_SUSPECTED" not in info_only.codes()


def test_the_op_benchmarker_does_not_send_a_slower_candidate_to_an_a_b(tmp_path):
    import json

    from perfwarden.agents.op_benchmarker import pick_winner

    def row(backend, ms, ref=False, correct=True):
        return {"op": "rotary", "backend": backend, "shape": [8, 64], "trial": 0, "times_ms": [ms, ms, ms],
                "correct": correct, "is_reference": ref, "raised": None}

    path = tmp_path / "opbench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [row("reference", 1.0, ref=True), row("slow", 1.5),
                                                           row("wrong", 0.2, correct=False)]))
    assert pick_winner(path) == (None, None, "reference")
    path.write_text(path.read_text() + json.dumps(row("fast", 0.5)) + "\n")
    assert pick_winner(path) == ("fast", 2.0, "reference")
