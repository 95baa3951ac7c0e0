"""A bounded, seeded fuzz of every command and reader over mutated real fixtures (issue 12 §6).

The engine and its oracle are ``fuzzing.fuzz`` (its docstring says what counts as damaged
evidence). Here hypothesis draws the choices, so a failure shrinks to the fewest, smallest mutations
and replays from the printed choices; ``derandomize`` makes the suite run the same inputs every time.
``benchmarks/fuzz.py`` runs the same engine over >= 10,000 inputs in parallel processes. Set
``PERFWARDEN_FUZZ_SCALE=10`` for a deeper (randomized) hunt here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from fuzzing.fuzz import (Fuzzer, HypothesisChooser, evidence_damage, file_damage, fixture_seeds,
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


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_fuzz_audit(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "audit"))


@pytest.mark.slow
@pytest.mark.skipif(not mlperf_seeds(), reason="needs ../shared/corpus/mlperf beside the checkout (the MLPerf seeds)")
@settings(FUZZ, max_examples=30 * SCALE)
@given(data=st.data())
def test_fuzz_audit_mlperf(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "audit-mlperf"))


@pytest.mark.slow
@settings(FUZZ, max_examples=30 * SCALE)
@given(data=st.data())
def test_fuzz_backtest(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "backtest"))


@pytest.mark.slow
@settings(FUZZ, max_examples=30 * SCALE)
@given(data=st.data())
def test_fuzz_review(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "review"))


@pytest.mark.slow
@settings(FUZZ, max_examples=40 * SCALE)
@given(data=st.data())
def test_fuzz_readers(fuzzer, data):
    check(fuzzer.run_one(HypothesisChooser(data), "readers"))


# ------------------------------------------------------------------------- the oracle itself


@pytest.mark.slow
def test_the_seeds_are_real_and_the_oracle_finds_no_damage_in_them():
    """Every shipped fixture's evidence is well-formed by the oracle's rules, except the fixtures built
    to be damaged (their answer keys say FAIL or FLAG, so 'must not PASS' agrees with them)."""
    import json

    seeds = fixture_seeds()
    if not mlperf_seeds():
        pytest.skip("needs ../shared/corpus/mlperf beside the checkout (the MLPerf seeds)")
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
    for body, damaged in [(b'{"rep": 0}\n', False),
                          # another tool's whole last object needs no newline (vLLM's file has none); the
                          # harness's own line and a cut object are torn without one
                          (b'{"rep": 0}', False), (b'{"rep": 0, "schema_version": 3}', True), (b'{"rep": 0', True), (b'{"rep": NaN}\n', True),
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
    from perfwarden.formats.records import Claim

    patch = must_read(Claim(scope="patch", legs={"baseline": "b", "candidate": "c"}))
    assert patch["legs/b/bench_runs.jsonl"] == ("bench", True) and patch["legs/c/server_info.json"] == ("server_info", True)
    assert patch["legs/c/outputs.jsonl"] == ("outputs", False)
    no_parity = must_read(Claim(scope="patch", legs={"baseline": "b", "candidate": "c"}, correctness={"parity": "none"}))
    assert "legs/c/outputs.jsonl" not in no_parity
    assert must_read(Claim(scope="profile")) == {"profile/profile.jsonl": ("profile", True)}
    assert "<outside>" in must_read(Claim(scope="baseline", legs={"baseline": "../x"}))


# --------------------------------------------------------- what benchmarks/fuzz.py found (seed 0)


CLEAN = Path(__file__).resolve().parents[1] / "proof" / "fixtures" / "syn-clean-patch-win"


@pytest.fixture
def run(tmp_path) -> Path:
    shutil.copytree(CLEAN / "run", tmp_path / "run")
    return tmp_path / "run"


def test_server_info_nested_900_deep_is_corrupt_not_a_serializer_crash(run):
    """Inputs 1202, 1482, 4529, ...: json parses 900 levels, pydantic then failed to serialize the verdict."""
    from perfwarden.auditor.audit import audit_path

    (run / "legs" / "cand" / "server_info.json").write_text('{"threads": ' + "[" * 900 + "1" + "]" * 900 + "}")
    verdict = audit_path(run, run / "claims" / "001-patch.json")
    assert verdict.verdict == "FAIL" and any("nests" in f.message and "deep" in f.message for f in verdict.findings)
    verdict.model_dump_json()


def test_a_verdict_nested_900_deep_is_an_input_error_for_review(run):
    """Input 4564: the review loaded it, then its JSON export failed."""
    from typer.testing import CliRunner

    from perfwarden.cli.main import app

    (run / "verdicts").mkdir()
    (run / "verdicts" / "001-patch.json").write_text(
        '{"scope": "patch", "claim": "c", "verdict": "PASS", "action": "pass", "legs": {"x": '
        + "{\"a\": " * 900 + "1" + "}" * 900 + "}}")
    result = CliRunner().invoke(app, ["review", str(run), "--format", "json"])
    assert result.exit_code == 3 and "nests deeper" in result.output, result.output


def test_a_huge_integer_in_a_loadgen_log_is_corrupt_not_an_internal_error(tmp_path):
    """Input 3906: ``float(10**400)`` raised OverflowError inside the reader (an internal error, exit 3
    marked degraded); now the line is a malformed LoadGen line like any other."""
    from perfwarden.formats.mlperf_log import MlperfLogError, read_detail

    src = Path(__file__).parent / "data" / "mlperf" / "test04_e01_v41_offline_resnet50_cisco" / "reference"
    detail = tmp_path / "mlperf_log_detail.txt"
    lines = (src / "mlperf_log_detail.txt").read_text().splitlines()
    lines[3] = lines[3].replace('"time_ms": ', '"time_ms": 1' + "0" * 400 + ", \"was\": ", 1)
    detail.write_text("\n".join(lines) + "\n")
    with pytest.raises(MlperfLogError, match="64-bit range"):
        read_detail(detail)


def test_a_70_mb_log_line_is_refused_fast(run):
    """Inputs 3167, 4474, ...: a sparse 70 MB server log (one line of NUL bytes) took 23 s of regex scans."""
    import time

    from perfwarden.auditor.audit import audit_path

    with open(run / "legs" / "cand" / "server.log", "r+b") as handle:
        handle.truncate(70 << 20)
    started = time.monotonic()
    verdict = audit_path(run, run / "claims" / "001-patch.json")
    assert verdict.verdict == "FAIL" and any("bound for one log line" in f.message for f in verdict.findings)
    assert time.monotonic() - started < 10


def test_the_crash_pattern_is_linear_on_repeated_worker_lines():
    """``Worker .* died`` was quadratic: 112 KB of "Worker " took 3.6 s per line scanned."""
    import time

    from perfwarden.auditor.gates.measurement import FATAL_PATTERNS

    started = time.monotonic()
    assert FATAL_PATTERNS.search("Worker " * 16000) is None
    assert time.monotonic() - started < 1.0
    assert FATAL_PATTERNS.search("Worker 3 (pid 1234) died unexpectedly")


def test_a_number_beyond_any_float_in_server_info_is_compared_not_a_gate_crash(run):
    """benchmarks/fuzz.py (seed 0, input 1605): threads=10**400 in one leg's server_info crashed the
    conditions gate (int too large for float), so the verdict was degraded instead of decided. Such a
    number is outside the one integer range (``formats/strict_json.py``): corrupt evidence, decided; the
    largest integer inside it still reaches the gate and is compared."""
    from perfwarden.auditor.audit import audit_path

    info_path = run / "legs" / "base" / "server_info.json"
    text = info_path.read_text()
    info_path.write_text(text.replace('"threads": 2', '"threads": 1' + "0" * 400, 1))
    assert '"threads": 1000' in info_path.read_text()
    verdict = audit_path(run, run / "claims" / "001-patch.json")
    assert not verdict.degraded and verdict.verdict == "FAIL"
    assert any(f.code == "EVIDENCE_CORRUPT" and "64-bit range" in f.message for f in verdict.findings)
    info_path.write_text(text.replace('"threads": 2', f'"threads": {2**64 - 1}', 1))
    verdict = audit_path(run, run / "claims" / "001-patch.json")
    assert not verdict.degraded and verdict.verdict == "FAIL"
    assert any(f.code == "CONDITIONS_DIFFER" and "threads" in f.message for f in verdict.findings)


def test_a_detail_log_ending_in_60_mb_of_nul_bytes_is_refused_without_reading_them(tmp_path):
    """benchmarks/fuzz.py (seed 0, inputs 306 and 2148): an unfinished last line of 60 MB of NUL bytes
    (under the 64 MiB line bound) was read and decoded, peaking at 7.5 GB; it is refused with the bound
    in the message."""
    import resource

    from perfwarden.formats.mlperf_log import MLLOG_LINE_BYTES, MlperfLogError, read_detail

    path = tmp_path / "mlperf_log_detail.txt"
    with open(path, "wb") as handle:
        handle.write(b':::MLLOG {"key": "x", "value": 1}\n:::MLLOG {"key": "y", "value"')
        handle.truncate(60 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(MlperfLogError, match=f"{MLLOG_LINE_BYTES:,}-byte bound"):
        read_detail(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 << 10  # KiB: far below 300 MB


def test_a_copy_of_the_conditions_beyond_any_float_is_a_misreport_not_a_gate_crash(tmp_path):
    """benchmarks/fuzz.py (seed 0, input 5756): max_seq_len=10**29... in server_info.json against 2048 in
    the bench lines' copies crashed the copy comparison (int too large for float). Beyond the one integer
    range it is corrupt evidence; the largest integer inside it is a misreport."""
    from perfwarden.auditor.audit import audit_path

    fixtures = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
    run = tmp_path / "run"
    shutil.copytree(fixtures / "rec-batching-undisclosed" / "run", run)
    info = run / "legs" / "mbs4" / "server_info.json"
    text = info.read_text()
    info.write_text(text.replace('"max_seq_len": 2048', '"max_seq_len": 1' + "0" * 400, 1))
    assert '"max_seq_len": 1000' in info.read_text()
    verdict = audit_path(run, run / "claims" / "001-patch.json")
    assert not verdict.degraded and verdict.verdict == "FAIL"
    assert any(f.code == "EVIDENCE_CORRUPT" and "64-bit range" in f.message for f in verdict.findings)
    info.write_text(text.replace('"max_seq_len": 2048', f'"max_seq_len": {2**64 - 1}', 1))
    verdict = audit_path(run, run / "claims" / "001-patch.json")
    assert not verdict.degraded and verdict.verdict == "FAIL"
    assert any(f.code == "CONDITIONS_MISREPORTED" and "max_seq_len" in f.message for f in verdict.findings)


# ------------------------------------------------- run directories as input (issue 16 §7)


@pytest.fixture(scope="module")
def rundir_fuzzer(tmp_path_factory):
    from fuzzing.fuzz_rundir import RundirFuzzer

    # devices=False: no /dev/zero or 2 GiB --key here (no address-space limit in the suite).
    return RundirFuzzer(tmp_path_factory.mktemp("fuzz-rundir"), timeout_s=20, devices=False)


@pytest.mark.slow
@settings(FUZZ, max_examples=40 * SCALE)
@given(data=st.data())
def test_fuzz_run_directories(rundir_fuzzer, data):
    """run --resume, measure and audit --save on mutated run directories: nothing planted runs, nothing
    outside the run changes, no traceback, hang or injected markup, exit codes within the contract."""
    check(rundir_fuzzer.run_one(HypothesisChooser(data)))


def test_every_planted_payload_runs_under_a_permissive_loader(tmp_path):
    """The canaries are live: the library's default (permissive) deserializer constructs each planted
    extension object, so a fuzz that counts 0 markers proves the loader refused them."""
    import itertools

    import ormsgpack
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from fuzzing.fuzz import RandomChooser
    from fuzzing.fuzz_rundir import CALLABLES, EXT_SHAPES, RawExt, pack

    loader = JsonPlusSerializer(allowed_msgpack_modules=True)
    for n, ((module, name, args), code) in enumerate(itertools.product(CALLABLES, sorted(EXT_SHAPES))):
        marker = tmp_path / f"m{n}"
        if EXT_SHAPES[code] not in args(str(marker)):
            continue
        ext = RawExt(code, pack([module, name, args(str(marker))[EXT_SHAPES[code]]] + ([None] if code == 5 else [])))
        loader.loads_typed(("msgpack", pack([RawExt(7, pack(ext)) if n % 2 else ext])))
        assert marker.exists(), (module, name, code)
    assert isinstance(ormsgpack.Ext, type) and RandomChooser(0).pick([1], "x") == 1


def test_the_oracle_sees_a_write_through_a_link_and_markup_in_a_report(tmp_path):
    from perfwarden.orchestrator.review.export import md_cell
    from fuzzing.fuzz_rundir import HOSTILE_TEXT, Box, RunSeed, injected, snapshot

    box = Box(tmp_path, RunSeed("x", tmp_path), "resume")
    for d in (box.run, box.outside, box.markers):
        d.mkdir(parents=True)
    (box.outside / "target").write_text("before\n")
    (box.run / "events.jsonl").symlink_to(box.outside / "target")
    before = snapshot(box)
    (box.run / "report.md").write_text("untouched\n")  # inside the run: not a change outside
    assert snapshot(box) == before
    with open(box.run / "events.jsonl", "a") as handle:
        handle.write("through the link\n")
    assert snapshot(box) != before
    report = box.run / "report.md"
    for text in HOSTILE_TEXT:
        report.write_text(f"# perfwarden run report\n\n- note: {text}\n")
        assert injected(report), text
        report.write_text(f"# perfwarden run report\n\n- note: {md_cell(text)}\n")
        assert not injected(report), md_cell(text)


def test_measure_into_a_run_whose_seal_chain_it_cannot_continue_is_an_input_error(tmp_path, monkeypatch):
    """benchmarks/fuzz.py --rundir (seed 0, inputs 5439, 7214, 9020, 9283, 9868): ``measure`` into a run whose
    seal chain cannot be continued (its key is not in this key store: a colleague's run; or the chain names
    a seal id that is a path) ended in a SealError traceback; it is exit 3 naming the reason, before any
    server starts."""
    from typer.testing import CliRunner

    from perfwarden.cli.main import app
    from perfwarden.formats import seal

    run = tmp_path / "run"
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path / "their-keys"))
    seal.begin(run)
    seal.forget(run)
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path / "my-keys"))
    result = CliRunner().invoke(app, ["measure", "--out", str(run), "--leg", "m1", "--reps", "1"])
    assert isinstance(result.exception, (SystemExit, type(None))), repr(result.exception)
    assert result.exit_code == 3 and "key store" in result.output, result.output
    assert not (run / "legs").exists()


def test_measure_with_an_unknown_role_is_a_usage_error_before_anything_is_written(tmp_path):
    """A ``--role`` that is no leg role was a pydantic traceback after run.json was written; it is exit 2
    naming the roles, and the run directory is not made."""
    from typer.testing import CliRunner

    from perfwarden.cli.main import app

    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["measure", "--target", "synthetic", "--out", str(run), "--leg", "m1",
                                      "--role", "bogus"])
    assert isinstance(result.exception, (SystemExit, type(None))), repr(result.exception)
    assert result.exit_code == 2 and "baseline|candidate" in result.output, result.output
    assert not run.exists()


@pytest.mark.integration
def test_resuming_a_run_whose_seal_chain_it_cannot_continue_is_an_input_error(tmp_path, monkeypatch):
    """benchmarks/fuzz.py --rundir (seed 0, input 4292): a resume whose auditor node looks the run's key up
    when the chain names a seal id that is a path (refused: no key is looked up by it) ended exit 1 "the
    run stopped on SealError"; it is a bad run directory: exit 3 naming why."""
    import json

    from typer.testing import CliRunner

    from perfwarden.cli.main import app
    from fuzzing.fuzz_rundir import SEED_SETTINGS, _fork_run

    run = tmp_path / "run"
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path / "keys"))
    _fork_run(run, "after:auditor", SEED_SETTINGS)  # killed before the auditor's checkpoint: it runs again
    lines = (run / "evidence.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    (run / "evidence.jsonl").write_text("\n".join([json.dumps({**first, "seal_id": "../evil"}), *lines[1:]]) + "\n")
    result = CliRunner().invoke(app, ["run", "--resume", str(run)])
    assert result.exit_code == 3 and "seal id" in result.output, result.output


def test_resuming_a_run_whose_pending_claim_is_gone_is_an_input_error(tmp_path, monkeypatch):
    """benchmarks/fuzz.py --rundir (seed 0, inputs 7510, 66, 245, ...): the claim the checkpoint says is
    waiting for the auditor is missing, a folder, or named outside the run; the auditor node's ClaimError
    ended exit 1 "the run stopped on ClaimError"; it is a bad run directory: exit 3 naming the claim."""
    from typer.testing import CliRunner

    from perfwarden.cli.main import app
    from fuzzing.fuzz_rundir import SEED_SETTINGS, _fork_run

    run = tmp_path / "run"
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path / "keys"))
    _fork_run(run, "after:auditor", SEED_SETTINGS)  # killed before the auditor's checkpoint: it runs again
    (run / "claims" / "001-baseline.json").unlink()
    result = CliRunner().invoke(app, ["run", "--resume", str(run)])
    assert result.exit_code == 3 and "001-baseline.json" in result.output, result.output
