"""Counters witness mechanisms (issue 27 §4): what a server reports of its configuration is held against its
own counters; a mechanism its counters show while its configuration says off is a misreport and a lever."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.gates import lever
from perfwarden.auditor.model import mechanisms
from perfwarden.auditor.model.schema import evidence_model

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "proof" / "fixtures" / "seal-rec-clean" / "run"
SPEC = evidence_model().mechanisms


@pytest.mark.parametrize("info,expected", [
    ({"prompt_lookup": False}, False), ({"prompt_lookup": True}, True), ({"threads": 2}, None),
    ({"speculative_method": None, "num_speculative_tokens": None}, False),
    ({"speculative_method": "ngram", "num_speculative_tokens": 3}, True),
    ({"speculative_config": {"method": "eagle"}}, True), (None, None)])
def test_what_the_configuration_says_of_speculative_decoding(info, expected):
    assert mechanisms.configured(info, SPEC["spec_decode"]) is expected


def test_an_empty_override_table_is_off_and_a_named_override_is_on():
    assert mechanisms.configured({"op_overrides": {}}, SPEC["kernel_override"]) is False
    assert mechanisms.configured({"op_overrides": {"rmsnorm": "m:f"}}, SPEC["kernel_override"]) is True


def _leg(tmp_path: Path, leg: str, **state) -> tuple[Path, object]:
    run = tmp_path / "run"
    if not run.exists():
        shutil.copytree(RECORDED, run)
    path = run / "legs" / leg / "bench_runs.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        line["server_info"]["internal_states"][0].update(state)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run, RunLoader(run).leg(leg)


def test_a_recording_at_rest_shows_no_mechanism(tmp_path):
    run, leg = _leg(tmp_path, "base")
    assert mechanisms.check_mechanisms(run, leg).findings == [] and mechanisms.counter_signals(leg) == []


@pytest.mark.parametrize("state,mechanism", [
    ({"spec_drafted": 40, "spec_verify_steps": 10}, "spec_decode"),
    ({"avg_spec_accept_length": 2.5}, "spec_decode"),
    ({"response_cache_hits": 3}, "response_cache"),
    ({"op_override_calls": {"rmsnorm": 12}}, "kernel_override")])
def test_counters_that_show_a_mechanism_the_configuration_denies_are_a_misreport(tmp_path, state, mechanism):
    run, leg = _leg(tmp_path, "base", **state)
    found = mechanisms.check_mechanisms(run, leg).findings
    assert [(f.code, f.severity) for f in found] == [("CONDITIONS_MISREPORTED", "FAIL")]
    assert mechanism in found[0].message and found[0].evidence
    assert [s.family for s in lever.raw_signals(leg)] == [mechanism]


def test_counters_of_a_mechanism_the_configuration_switches_on_are_no_misreport(tmp_path):
    run, leg = _leg(tmp_path, "base", spec_drafted=40)
    info_path = run / "legs" / "base" / "server_info.json"
    info_path.write_text(json.dumps({**json.loads(info_path.read_text()), "prompt_lookup": True}))
    leg = RunLoader(run).leg("base")
    assert mechanisms.check_mechanisms(run, leg).findings == []
