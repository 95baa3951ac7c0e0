"""A bounded, seeded fuzz of every command and reader over mutated real fixtures (issue 12 §6).

The engine and its oracle are ``perfwarden.proof.fuzz`` (its docstring says what counts as damaged
evidence). Here hypothesis draws the choices, so a failure shrinks to the fewest, smallest mutations
and replays from the printed choices; ``derandomize`` makes the suite run the same inputs every time.
``benchmarks/fuzz.py`` runs the same engine over >= 10,000 inputs in parallel processes. Set
``PERFWARDEN_FUZZ_SCALE=10`` for a deeper (randomized) hunt here.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from perfwarden.proof.fuzz import (Fuzzer, HypothesisChooser, evidence_damage, file_damage, fixture_seeds,
                                   mlperf_seeds, must_read)

SCALE = int(os.environ.get("PERFWARDEN_FUZZ_SCALE", "1"))
FUZZ = settings(max_examples=60 * SCALE, deadline=None, derandomize=SCALE == 1, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory) -> Fuzzer:
    return Fuzzer(tmp_path_factory.mktemp("fuzz"), timeout_s=30, memory_limit=3 << 30)


def check(outcome) -> None:
    note(f"{outcome.target} {outcome.seed}: {outcome.mutations} -> exit {outcome.exit_code}, damaged {outcome.damaged}")
    assert not outcome.problems, outcome
    assert not outcome.degraded, f"a gate crashed and failed open: {outcome}"


@FUZZ
@given(data=st.data())
def test_fuzz_audit(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "audit"))


@settings(FUZZ, max_examples=30 * SCALE)
@given(data=st.data())
def test_fuzz_audit_mlperf(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "audit-mlperf"))


@settings(FUZZ, max_examples=30 * SCALE)
@given(data=st.data())
def test_fuzz_backtest(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "backtest"))


@settings(FUZZ, max_examples=30 * SCALE)
@given(data=st.data())
def test_fuzz_review(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "review"))


@settings(FUZZ, max_examples=40 * SCALE)
@given(data=st.data())
def test_fuzz_readers(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "readers"))


# ------------------------------------------------------------------------- the oracle itself


def test_the_seeds_are_real_and_the_oracle_finds_no_damage_in_them():
    """Every shipped fixture's evidence is well-formed by the oracle's rules, except the fixtures built
    to be damaged (their answer keys say FAIL or FLAG, so 'must not PASS' agrees with them)."""
    import json

    seeds = fixture_seeds()
    assert len(seeds) >= 80 and len(mlperf_seeds()) >= 7
    damaged = {}
    for fixture, claim in seeds:
        found = evidence_damage(fixture / "run", fixture / "run" / claim)
        if found:
            damaged[fixture.name] = found
    keys = {name: json.loads((next(f for f, _ in seeds if f.name == name) / "answer_key.json").read_text())
            for name in damaged}
    for name, key in keys.items():
        assert all(a["verdict"] != "PASS" for a in key["answers"]), (name, damaged[name])
    assert set(damaged) >= {"syn-corrupt-mid-file", "syn-torn-tail", "syn-evidence-missing"}, damaged


def test_oracle_rules(tmp_path):
    run = tmp_path / "run"
    (run / "legs" / "a").mkdir(parents=True)
    bench = run / "legs" / "a" / "bench_runs.jsonl"
    for body, damaged in [(b'{"rep": 0}\n', False), (b'{"rep": 0}', True), (b'{"rep": NaN}\n', True),
                          (b'{"rep": 1.5}\n', True), (b'{"x\xff": 1}\n', True), (b"[]\n", True), (b"", True),
                          (b'{"rep": 0}\n\n{"rep": 1}\r\n', False), (b'{"unknown": [1, "x"]}\n', False),
                          (b'{"ttfts": [1e400]}\n', True), (b'{"rep": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", True)]:
        bench.write_bytes(body)
        assert bool(file_damage(bench, run, "bench", True)) == damaged, body[:40]
    bench.unlink()
    assert file_damage(bench, run, "bench", True) == "missing" and file_damage(bench, run, "bench", False) is None
    bench.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(b'{"rep": 0}\n')
    assert "outside" in file_damage(bench, run, "bench", False)
    bench.unlink()
    os.mkfifo(bench)
    assert "regular" in file_damage(bench, run, "fs", False)


def test_must_read_follows_the_scope():
    from perfwarden.harness.records import Claim

    patch = must_read(Claim(scope="patch", legs={"baseline": "b", "candidate": "c"}))
    assert patch["legs/b/bench_runs.jsonl"] == ("bench", True) and patch["legs/c/server_info.json"] == ("server_info", True)
    assert patch["legs/c/outputs.jsonl"] == ("outputs", False)
    no_parity = must_read(Claim(scope="patch", legs={"baseline": "b", "candidate": "c"}, correctness={"parity": "none"}))
    assert "legs/c/outputs.jsonl" not in no_parity
    assert must_read(Claim(scope="profile")) == {"profile/profile.jsonl": ("profile", True)}
    assert "<outside>" in must_read(Claim(scope="baseline", legs={"baseline": "../x"}))
