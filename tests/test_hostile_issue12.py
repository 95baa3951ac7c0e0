"""Issue 12's reading-side findings, one regression test each (§2 readers, §4 terminal, §5 resume).

Each test was run against the code before the fix and failed there (a hang bounded by a timeout, a
traceback, a PASS, raw escape sequences, a silent exit 0), and passes after. Commands that hung or ate
memory before run in a subprocess with a timeout and an address-space limit, so that a regression
fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import unicodedata
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from perfwarden.auditor.audit import ClaimError, audit_path, load_claim
from perfwarden.cli.main import app
from perfwarden.formats import jsonl
from perfwarden.formats.records import write_json_atomic
from perfwarden.formats.safe_read import CLAIM_BYTES, RefusedInput, read_bytes
from perfwarden.orchestrator.paths import default_fixture_roots
from perfwarden.orchestrator.settings import RunSettings

FIXTURES = default_fixture_roots()[0]
CLEAN = FIXTURES / "syn-clean-patch-win"  # its one patch claim PASSes intact
REPORT = FIXTURES / "syn-report-clean"  # a patch claim with a prose report, PASS intact
PATCH = "claims/001-patch.json"
MLPERF = Path(__file__).parent / "data" / "mlperf" / "test04_e01_v41_offline_resnet50_cisco"
runner = CliRunner()

# ESC CSI (colour, clear screen, erase line), OSC (window title, hyperlink), 8-bit CSI, a bare CR that
# overwrites the line, BEL, and a bidi override: none may reach a terminal raw.
ESCAPES = "\x1b[31mRED\x1b[0m\x1b[2J\x1b]0;owned\x07\x1b]8;;http://x\x1b\\\x9b2K\rFAKE PASS\u202e"


def raw_controls(text: str) -> list[str]:
    """Control and format characters a terminal would interpret (newlines are layout, allowed)."""
    return sorted({repr(c) for c in text if unicodedata.category(c) in ("Cc", "Cf") and c != "\n"})


def cli(*args: str, timeout: float = 60, memory_gib: float = 3.0) -> subprocess.CompletedProcess:
    """The installed CLI in a subprocess, bounded in time and address space."""
    def limit() -> None:
        cap = int(memory_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run([sys.executable, "-m", "perfwarden.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=limit)


@contextmanager
def deadline(seconds: int):
    """Fail (instead of hanging) when an in-process call takes longer than ``seconds``."""
    def expire(signum, frame):
        raise TimeoutError(f"took longer than {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def run(tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(CLEAN / "run", dst)
    return dst


def codes(verdict, severity: str = "FAIL") -> set[str]:
    return {f.code for f in verdict.findings if f.severity == severity}


# --------------------------------------------------------------------------- §2: /dev/zero, FIFOs


def test_claim_from_dev_zero_is_exit_3_at_once(run):
    started = time.monotonic()
    done = cli("audit", str(run), "--claim", "/dev/zero", timeout=30)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "character device" in done.stderr and "Traceback" not in done.stderr
    # in process, the refusal is a stat: no byte is read
    t0 = time.monotonic()
    with pytest.raises(ClaimError, match="not a regular file"):
        load_claim(Path("/dev/zero"))
    assert time.monotonic() - t0 < 0.5
    print(f"audit --claim /dev/zero: exit 3 in {time.monotonic() - started:.2f} s (interpreter start included)")


def test_claim_that_is_a_fifo_does_not_block(run, tmp_path):
    fifo = tmp_path / "claim.json"
    os.mkfifo(fifo)
    done = cli("audit", str(run), "--claim", str(fifo), timeout=30)
    assert done.returncode == 3 and "FIFO" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("rel", ["legs/cand/bench_runs.jsonl", "legs/base/server_info.json", "legs/cand/outputs.jsonl",
                                 "legs/base/leg.json", "legs/cand/server.log"])
def test_evidence_that_is_a_fifo_is_corrupt_not_a_hang(run, rel):
    (run / rel).unlink()
    os.mkfifo(run / rel)
    with deadline(30):
        verdict = audit_path(run, run / PATCH)
    assert verdict.verdict == "FAIL" and "EVIDENCE_CORRUPT" in codes(verdict), [f.message for f in verdict.findings]
    assert any("FIFO" in f.message for f in verdict.findings)


def test_a_fifo_verdict_answer_key_or_events_file_does_not_block(run, tmp_path):
    (run / "verdicts").mkdir()
    os.mkfifo(run / "verdicts" / "001-patch.json")
    done = cli("review", str(run), timeout=30)
    assert done.returncode == 3 and "FIFO" in done.stderr, (done.returncode, done.stderr[-2000:])
    fixture = tmp_path / "fx"
    shutil.copytree(CLEAN, fixture)
    (fixture / "answer_key.json").unlink()
    os.mkfifo(fixture / "answer_key.json")
    done = cli("backtest", str(fixture), "--no-mlperf", timeout=60)
    # find_fixtures sees no regular answer key there: exit 3 either way, never a hang
    assert done.returncode == 3 and "Traceback" not in done.stderr, (done.returncode, done.stderr[-2000:])


# ----------------------------------------------------------------------------------- §2: links out


@pytest.mark.parametrize("rel", ["legs/cand/bench_runs.jsonl", "legs/base/bench_runs.jsonl", "legs/cand/server_info.json",
                                 "legs/base/outputs.jsonl", "legs/cand/leg.json"])
def test_evidence_linked_out_of_the_run_is_not_read(run, tmp_path, rel):
    """The link points at a byte-identical copy outside the run: still not trusted (before: PASS)."""
    outside = tmp_path / "elsewhere" / Path(rel).name
    outside.parent.mkdir()
    shutil.move(run / rel, outside)
    (run / rel).symlink_to(outside)
    verdict = audit_path(run, run / PATCH)
    assert verdict.verdict == "FAIL", [f.message for f in verdict.findings]
    assert "EVIDENCE_MISSING" in codes(verdict) and any("outside" in f.message for f in verdict.findings)
    assert str(outside.parent) not in json.dumps(verdict.input_digests)  # never read, so never digested


def test_a_leg_directory_linked_out_is_not_read(run, tmp_path):
    shutil.move(run / "legs" / "cand", tmp_path / "cand")
    (run / "legs" / "cand").symlink_to(tmp_path / "cand", target_is_directory=True)
    verdict = audit_path(run, run / PATCH)
    assert verdict.verdict == "FAIL" and "EVIDENCE_MISSING" in codes(verdict)


def test_a_report_linked_to_a_secret_is_not_read(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REPORT / "run", run)
    secret = tmp_path / "secret.md"
    secret.write_text("OPENAI_API_KEY=sk-123 gives 10.1 tok/s\n")
    (run / "report.md").unlink()
    (run / "report.md").symlink_to(secret)
    verdict = audit_path(run, run / PATCH)
    assert verdict.verdict == "FAIL" and "EVIDENCE_MISSING" in codes(verdict)
    assert "sk-123" not in verdict.model_dump_json()


def test_claims_and_verdicts_linked_out_are_input_errors(run, tmp_path):
    outside = tmp_path / "outside-claim.json"
    shutil.copy(run / PATCH, outside)
    (run / PATCH).unlink()
    (run / PATCH).symlink_to(outside)
    result = runner.invoke(app, ["review", str(run)])  # no saved verdict: the claims are audited now
    assert result.exit_code == 3 and "outside" in result.output, result.output
    fixture = tmp_path / "fx"
    shutil.copytree(CLEAN, fixture)
    (fixture / "run" / PATCH).unlink()
    (fixture / "run" / PATCH).symlink_to(outside)
    result = runner.invoke(app, ["backtest", str(fixture), "--no-mlperf"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 3 and "outside" in result.output, result.output


# ------------------------------------------------------------------------------ §2: size bounds


def test_a_50_mb_string_in_a_claim_is_refused_fast(run):
    claim = json.loads((run / PATCH).read_text())
    claim["headline"]["metric"] = "A" * 50_000_000  # before: > 2 minutes and ~1.5 GB, then killed
    big = run / "claims" / "big.json"
    big.write_text(json.dumps(claim))
    t0 = time.monotonic()
    done = cli("audit", str(run), "--claim", str(big), timeout=60)
    assert done.returncode == 3 and "bound" in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - t0 < 30
    # under the file bound, a long string field is refused by the string bound, naming it
    claim["headline"]["metric"] = "A" * 100_000
    big.write_text(json.dumps(claim))
    with pytest.raises(ClaimError, match=r"headline\.metric.*100,000 characters.*4,096"):
        load_claim(big)


@pytest.mark.slow
def test_a_report_with_100000_numbers_is_bounded_in_time_and_findings(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REPORT / "run", run)
    (run / "report.md").write_text("# Result\n\n" + "\n".join(f"{100 + i * 0.37:.2f} tok/s" for i in range(100_000))
                                   + "\n")
    with deadline(60):  # before: 190 s
        verdict = audit_path(run, run / PATCH)
    untraced = [f for f in verdict.findings if f.code == "UNTRACED_CLAIM"]
    assert verdict.verdict == "FAIL" and len(untraced) == 26, len(untraced)
    summary = [f for f in untraced if f.omitted]
    assert len(summary) == 1 and summary[0].severity == "FAIL" and summary[0].action == "eject"
    assert summary[0].omitted + 25 >= 99_990 and "not listed" in summary[0].message
    assert summary[0].evidence and summary[0].evidence[0].sha256  # it still cites a line
    assert len(verdict.model_dump_json()) < 200_000  # before: 72 MB


def test_lines_and_files_over_their_bound_are_refused_without_being_held(tmp_path):
    import tracemalloc

    path = tmp_path / "bench_runs.jsonl"
    with open(path, "wb") as handle:  # 256 MB, sparse: one line with no newline, mostly NUL bytes
        handle.write(b'{"leg": "base", "rep": 0, "x": "')
        handle.truncate(256 << 20)
    issues: list = []
    tracemalloc.start()
    try:
        lines = list(jsonl.iter_raw_lines(path, issues, max_line=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [] and issues[0].kind == "torn_tail" and "bound" in issues[0].message
    assert issues[0].sha256 is not None  # hashed while skipped, so the finding can still cite it
    assert peak < 8 << 20, peak  # a few read chunks, never the line
    with pytest.raises(RefusedInput, match="bound"):
        read_bytes(path, tmp_path, limit=CLAIM_BYTES, what="claim")


def test_server_log_over_its_bound_is_corrupt_evidence(run):
    log = run / "legs" / "cand" / "server.log"
    with open(log, "ab") as handle:
        handle.truncate(300 << 20)  # sparse 300 MB: over the 256 MiB bound, refused by its size
    verdict = audit_path(run, run / PATCH)
    assert verdict.verdict == "FAIL" and "EVIDENCE_CORRUPT" in codes(verdict)
    assert any("bound" in f.message for f in verdict.findings)


def test_invalid_utf8_in_a_key_mid_file_is_reported(run):
    path = run / "legs" / "cand" / "bench_runs.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:1] + b'"pw_\xff_note": 1, ' + lines[1][1:]  # an unknown key: msgspec skips it unchecked
    path.write_bytes(b"\n".join(lines))
    verdict = audit_path(run, run / PATCH)
    assert verdict.verdict == "FAIL" and "EVIDENCE_CORRUPT" in codes(verdict)
    assert any("UTF-8" in f.message and f.evidence[0].line == 2 for f in verdict.findings)


# ---------------------------------------------------------------- §2: damaged inputs of the CLI


@pytest.mark.parametrize("body", [b'{"answers": [', b"[1]", b'{"answers": [{"claim": "claims/001-patch.json"}]}',
                                  b'{"answers": "x"}', b"\xff\xfe", b'{"answers": [{"claim": 1, "verdict": "PASS"}]}',
                                  b'{"answers": [{"claim": "claims/001-patch.json", "verdict": "PASS", '
                                  b'"must_include": "EVIDENCE_MISSING"}]}'])
def test_backtest_on_a_damaged_answer_key_is_an_input_error(tmp_path, body):
    fixture = tmp_path / "fx"
    shutil.copytree(CLEAN, fixture)
    (fixture / "answer_key.json").write_bytes(body)
    result = runner.invoke(app, ["backtest", str(fixture), "--no-mlperf"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 3 and "Traceback" not in result.output, result.output
    assert "answer key" in result.output and "answer_key.json" in result.output


@pytest.mark.parametrize("body", [b'{"scope": "patch", "claim": "c", "verdict": "PASS", "action": "pass"',
                                  b'{"scope": "patch", "claim": "' + b"x" * 70_000 + b'", "verdict": "PASS", '
                                  b'"action": "pass"}', b"[" * 100_000 + b"]" * 100_000, b"\xff"])
def test_review_of_a_damaged_verdict_is_an_input_error(run, body):
    (run / "verdicts").mkdir()
    (run / "verdicts" / "001-patch.json").write_bytes(body)
    result = runner.invoke(app, ["review", str(run)])
    assert result.exit_code == 3 and "Traceback" not in result.output, (result.exit_code, result.output[-2000:])


# ------------------------------------------------------------------- §4: nothing raw on a terminal


def _evil_claim(run: Path) -> Path:
    claim = json.loads((run / PATCH).read_text())
    claim["lever"]["name"] = ESCAPES
    claim["producer"] = ESCAPES
    claim["legs"]["candidate"] = "cand" + ESCAPES  # a leg name: quoted in findings and evidence paths
    claim["reported"] = {ESCAPES: 1.0}
    path = run / "claims" / ("evil" + ESCAPES.replace("/", "") + ".json")
    path.write_text(json.dumps(claim))
    return path


@pytest.mark.parametrize("as_json", [False, True])
def test_audit_shows_escape_sequences_as_text(run, as_json):
    claim = _evil_claim(run)
    result = runner.invoke(app, ["audit", str(run), "--claim", str(claim)] + (["--json"] if as_json else []))
    assert result.exit_code == 20, result.output
    assert raw_controls(result.output) == [], raw_controls(result.output)
    if not as_json:
        assert "\\x1b[31m" in result.output  # shown, not interpreted


def test_audit_error_messages_show_escape_sequences_as_text(run):
    bad = run / ("bad" + ESCAPES.replace("/", "") + ".json")
    # invalid: the error names the file and the location of the bad value, a key holding ESC
    bad.write_text(json.dumps({"scope": "patch", "headline": {"disclosed_regressions": {ESCAPES: "x"}}}))
    result = runner.invoke(app, ["audit", str(run), "--claim", str(bad)])
    assert result.exit_code == 3 and raw_controls(result.output) == [], raw_controls(result.output)
    assert "disclosed_regressions.\\x1b[31m" in result.output.replace("\n", ""), result.output


def test_audit_evidence_text_with_escapes(run):
    """A leg name and an error string inside the raw evidence reach findings: still shown as text."""
    path = run / "legs" / "cand" / "bench_runs.jsonl"
    lines = path.read_text().splitlines()
    obj = json.loads(lines[0])
    obj["leg"] = ESCAPES
    lines[0] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    (run / "legs" / "cand" / "server.log").write_text("Traceback " + ESCAPES + "\nCUDA error: " + ESCAPES + "\n")
    result = runner.invoke(app, ["audit", str(run), "--claim", str(run / PATCH)])
    assert result.exit_code == 20 and raw_controls(result.output) == [], raw_controls(result.output)


def test_review_backtest_and_run_show_escape_sequences_as_text(run, tmp_path):
    claim = _evil_claim(run)
    (run / PATCH).unlink()
    result = runner.invoke(app, ["audit", str(run), "--claim", str(claim), "--save"])
    assert result.exit_code == 20
    for fmt in ([], ["--format", "md"], ["--format", "csv"], ["--format", "json"]):
        result = runner.invoke(app, ["review", str(run), *fmt])
        assert result.exit_code == 0, result.output
        assert raw_controls(result.output) == [], (fmt, raw_controls(result.output))
    fixture = tmp_path / ("fx" + ESCAPES.replace("/", ""))
    shutil.copytree(CLEAN, fixture)
    key = json.loads((fixture / "answer_key.json").read_text())
    key["answers"][0]["must_include"] = [ESCAPES]
    (fixture / "answer_key.json").write_text(json.dumps(key))
    result = runner.invoke(app, ["backtest", str(fixture), "--no-mlperf"])
    # The answer key names a code that is not in the catalog: strict answer keys make that an input error.
    assert result.exit_code == 3 and raw_controls(result.output) == [], raw_controls(result.output)
    assert "not in the catalog" in result.output
    out = tmp_path / ("run" + ESCAPES.replace("/", ""))
    result = runner.invoke(app, ["run", "--target", "synthetic", "--levers", "max_batch_size", "--no-kernels",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert raw_controls(result.output) == [], raw_controls(result.output)


def test_audit_mlperf_shows_escape_sequences_as_text(tmp_path):
    ref, comp = tmp_path / "ref", tmp_path / "comp"
    shutil.copytree(MLPERF / "reference", ref)
    shutil.copytree(MLPERF / "compliance", comp)
    detail = comp / "mlperf_log_detail.txt"
    lines = detail.read_text().splitlines()
    lines.insert(3, ':::MLLOG {"key": "error_invalid_config", "value": "' + "\\u001b[2J\\r" + ESCAPES.encode(
        "unicode_escape").decode().replace('"', "") + '", "time_ms": 1.0, "namespace": "mlperf::logging", '
        '"event_type": "POINT_IN_TIME", "metadata": {"is_error": true, "is_warning": false}}')
    detail.write_text("\n".join(lines) + "\n")
    for extra in ([], ["--json"]):
        result = runner.invoke(app, ["audit-mlperf", "--reference", str(ref), "--compliance", str(comp), *extra])
        assert result.exit_code in (0, 10, 20, 3) and raw_controls(result.output) == [], raw_controls(result.output)
    (ref / "mlperf_log_summary.txt").write_text("garbage " + ESCAPES + "\n")
    result = runner.invoke(app, ["audit-mlperf", "--reference", str(ref), "--compliance", str(comp)])
    assert result.exit_code == 3 and raw_controls(result.output) == [], raw_controls(result.output)


def test_measure_progress_and_failure_show_escape_sequences_as_text(tmp_path, monkeypatch):
    """``measure`` needs the real model; its rendering is checked with a lab that reports hostile text."""
    import perfwarden.harness.labs.embedded as embedded_lab

    class HostileLab:
        def __init__(self, on_rep=None, **kw):
            self.on_rep = on_rep

        def measure(self, run, legs, reps):
            self.on_rep(legs[0].leg, 0, ESCAPES)
            return {legs[0].leg: "failed: " + ESCAPES}

    monkeypatch.setattr(embedded_lab, "EmbeddedLab", HostileLab)
    result = runner.invoke(app, ["measure", "--out", str(tmp_path / "m"), "--leg", "leg", "--reps", "1"])
    assert result.exit_code == 1, result.output
    assert raw_controls(result.output) == [], raw_controls(result.output)
    # A leg named with escape sequences is no path component (issue 16): refused, and shown as text.
    result = runner.invoke(app, ["measure", "--out", str(tmp_path / "m"), "--leg", "leg" + ESCAPES.replace("/", ""),
                                 "--reps", "1"])
    assert result.exit_code == 3, result.output
    assert raw_controls(result.output) == [], raw_controls(result.output)


# ---------------------------------------------------------------------------- §5: silent resume


@pytest.mark.parametrize("sqlite_state", ["empty_file", "tables_no_checkpoint"])
def test_resume_of_a_run_killed_right_after_its_checkpoint_file_was_created(tmp_path, sqlite_state):
    """What SIGKILL leaves right after ``sqlite3.connect`` created the file: settings.json and a
    checkpoint file holding no checkpoint. Before: ``--resume`` exited 0 silently with no report."""
    run = tmp_path / "run"
    run.mkdir()
    write_json_atomic(run / "settings.json", RunSettings(target="synthetic", levers=["max_batch_size"], kernels=False))
    conn = sqlite3.connect(run / "checkpoints.sqlite")
    if sqlite_state == "tables_no_checkpoint":
        from langgraph.checkpoint.sqlite import SqliteSaver

        SqliteSaver(conn).setup()
    conn.close()
    result = runner.invoke(app, ["run", "--resume", str(run)])
    assert result.exit_code == 0, result.output
    report = json.loads((run / "report.json").read_text())
    banked = [b["name"] for b in report["banked"]]  # the search's steps on the one knob named
    assert banked and all(name.startswith("cfg-max_batch_size=") for name in banked), banked
    assert (run / "report.md").is_file()


def test_resume_of_a_directory_that_is_not_a_run_says_why(tmp_path):
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["run", "--resume", str(tmp_path / "empty")])
    assert result.exit_code == 3 and "not a perfwarden run directory" in result.output, result.output


# ------------------------------------------------------------------- findings bounded per gate


@pytest.mark.slow
def test_a_bench_file_with_thousands_of_corrupt_lines_gives_a_bounded_verdict(run):
    path = run / "legs" / "cand" / "bench_runs.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + b"not json\n" * 20_000 + good)
    verdict = audit_path(run, run / PATCH)
    corrupt = [f for f in verdict.findings if f.code == "EVIDENCE_CORRUPT" and f.gate == "evidence"]
    assert verdict.verdict == "FAIL" and len(corrupt) == 26, len(corrupt)
    assert sum(f.omitted or 0 for f in corrupt) + 25 >= 20_000
    assert len(verdict.model_dump_json()) < 300_000


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.sampled_from(["g1", "g2"]), st.sampled_from(["EVIDENCE_CORRUPT", "UNTRACED_CLAIM"]),
                          st.sampled_from(["INFO", "FLAG", "FAIL"]),
                          st.sampled_from([None, "eject", "remeasure", "downgrade_headline", "flag"])),
                max_size=60), st.integers(1, 5))
def test_bounding_findings_never_changes_the_verdict_or_the_action(items, cap):
    """However many findings are summarized, the verdict and the action are those of the full list."""
    from perfwarden.auditor.findings import Findings, choose_action, verdict_label

    full, bounded, nested = Findings(cap=10**9), Findings(cap=cap), Findings(cap=cap)
    inner = Findings(cap=cap)
    for i, (gate, code, severity, action) in enumerate(items):
        for f in (full, bounded):
            f.add(code, severity, f"finding {i}", gate=gate, action=action)
        inner.add(code, severity, f"finding {i}", gate=gate, action=action)
    nested.extend(inner.items)  # a bounded collection handed to another one (a rig audited inside a patch)
    for f in (bounded, nested):
        assert verdict_label(f.items) == verdict_label(full.items)
        assert choose_action(f.items, verdict_label(f.items)) == choose_action(full.items, verdict_label(full.items))
        counted = sum(1 + (x.omitted or 0) - (1 if x.omitted else 0) for x in f.items)
        assert counted == len(full.items)
        assert all(sum(1 for x in f.items if (x.gate, x.code) == key) <= cap + 1
                   for key in {(x.gate, x.code) for x in f.items})
