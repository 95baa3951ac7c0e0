"""Goodput re-derived at an SLO from per-request arrays, held against what vLLM's own benchmark computed
(``request_goodput`` in the recorded result files), and the SLO's two spellings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from perfwarden.auditor import goodput
from perfwarden.cli.main import app
from perfwarden.formats.slo import GoodputSlo, SloError, parse_slo

REC = Path(__file__).parents[1] / "proof" / "recordings" / "vllm-max-num-seqs"
RESULTS = sorted(REC.glob("*-rep*.json"))
runner = CliRunner()


def arrays(record: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ok = np.array([not e for e in record["errors"]])
    return (np.asarray(record["ttfts"])[ok], np.asarray(record["latencies"])[ok],
            np.asarray(record["output_lens"], dtype=float)[ok])


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_vllms_own_goodput_is_reproduced_at_the_slo_it_was_benchmarked_under(path):
    record = json.loads(path.read_bytes())
    slo = parse_slo(record["goodput"])
    good = goodput.good_requests(*arrays(record), slo)
    assert goodput.reproduces(record["request_goodput"], good, record["duration"])
    assert goodput.goodput(good, record["duration"]) == record["request_goodput"]  # the same float, bit for bit


def test_another_slo_does_not_reproduce_it():
    differ = 0
    for path in RESULTS:
        record = json.loads(path.read_bytes())
        good = goodput.good_requests(*arrays(record), GoodputSlo(ttft_ms=1000.0))
        differ += not goodput.reproduces(record["request_goodput"], good, record["duration"])
    assert differ == len(RESULTS)


def test_tpot_of_a_one_token_output_counts_as_zero_and_e2el_is_its_latency():
    ttfts, latencies, lens = np.array([0.1, 0.1]), np.array([0.1, 2.0]), np.array([1.0, 2.0])
    assert goodput.good_requests(ttfts, latencies, lens, GoodputSlo(tpot_ms=0.0)) == 1
    assert goodput.good_requests(ttfts, latencies, lens, GoodputSlo(e2el_ms=1000.0)) == 1
    assert goodput.good_requests(ttfts, latencies, lens, GoodputSlo(ttft_ms=100.0)) == 2  # <= the limit is good


@pytest.mark.parametrize("text, limits", [("ttft:500 tpot:100", {"ttft_ms": 500, "tpot_ms": 100}),
                                          ("ttft_ms=500,tpot_ms=100", {"ttft_ms": 500, "tpot_ms": 100}),
                                          ("e2el:1e3", {"e2el_ms": 1000})])
def test_both_spellings_parse(text, limits):
    assert parse_slo(text).limits() == limits


@pytest.mark.parametrize("text", ["", "ttft:-1", "ttft:nan", "ttft:inf", "speed:1", "ttft:1 ttft:2", "ttft:2e9",
                                  "x" * 300])
def test_malformed_slos_are_refused(text):
    with pytest.raises(SloError):
        parse_slo(text)


@pytest.mark.parametrize("slo", [{"ttft_ms": -5}, {}, {"tpot_ms": 1e12}])
def test_a_claim_with_a_malformed_slo_is_invalid_input(tmp_path, slo):
    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps({"scope": "baseline", "legs": {"baseline": "a"},
                                 "headline": {"metric": "request_goodput", "slo": slo}}))
    result = runner.invoke(app, ["audit", str(tmp_path), "--claim", str(claim)])
    assert result.exit_code == 3 and "slo" in result.stderr


def test_audit_of_a_foreign_vllm_file_rederives_goodput_at_the_slo_it_records_and_says_so(tmp_path):
    leg = tmp_path / "legs" / "a"
    leg.mkdir(parents=True)
    (leg / "bench_runs.jsonl").write_bytes(b"\n".join(p.read_bytes() for p in sorted(REC.glob("candidate-rep*.json"))))
    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps({"scope": "baseline", "legs": {"baseline": "a"}}))
    result = runner.invoke(app, ["audit", str(tmp_path), "--claim", str(claim), "--json"])
    verdict = json.loads(result.stdout)
    assert verdict["goodput"]["source"] == "recorded" and verdict["goodput"]["slo"]["tpot_ms"] == 250.0
    assert verdict["legs"]["a"]["request_goodput"]["values"] == pytest.approx(
        [json.loads(p.read_bytes())["request_goodput"] for p in sorted(REC.glob("candidate-rep*.json"))])
    shown = runner.invoke(app, ["audit", str(tmp_path), "--claim", str(claim)])
    assert "goodput re-derived from the per-request arrays at ttft <= 5000 ms, tpot <= 250 ms (the SLO the bench " \
           "files record)" in " ".join(shown.stdout.split())


def test_goodput_claimed_at_an_slo_the_files_do_not_record_is_refused(tmp_path):
    leg = tmp_path / "legs" / "a"
    leg.mkdir(parents=True)
    shutil.copy(REC / "baseline-rep1.json", leg / "bench_runs.jsonl")
    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps({"scope": "baseline", "legs": {"baseline": "a"},
                                 "headline": {"metric": "request_goodput", "slo": {"ttft_ms": 9000}}}))
    verdict = json.loads(runner.invoke(app, ["audit", str(tmp_path), "--claim", str(claim), "--json"]).stdout)
    assert verdict["verdict"] == "FAIL" and "goodput" not in verdict
    assert any(f["code"] == "CONDITIONS_MISREPORTED" and "ttft_ms=9000" in f["message"] for f in verdict["findings"])
