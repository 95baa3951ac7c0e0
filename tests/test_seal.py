"""Sealed evidence (issue 13 §4 manifest, §5 seal): the chain, every tamper attack, resume, the key.

Every attack test fails if the attack goes unnoticed: it asserts the finding (code, FAIL) that must
catch it, on a sealed run built fresh in the test (its own key), not on the shipped fixtures.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from perfwarden.auditor.audit import ClaimError, audit_path
from perfwarden.auditor.manifest import read_manifest, resolve_key
from perfwarden.formats import seal
from perfwarden.formats.records import RunDir
from perfwarden.harness.bench_writer import append_bench_line, rep_exists, reps_to_run
from perfwarden.orchestrator.synth import build_ab_run, make_rep
from perfwarden.proof.seal_cases import sealed_clean
from perfwarden.redteam import mutations

CLAIM = "claims/001-patch.json"


def _fixture(tmp_path: Path, name: str = "fx") -> Path:
    fixture = tmp_path / name
    fixture.mkdir()
    sealed_clean(fixture)
    return fixture


def _audit(fixture: Path, key: bool = True, claim: str = CLAIM):
    run = fixture / "run"
    return audit_path(run, run / claim, key=fixture / "seal.key" if key else None)


def _codes(verdict, severity: str = "FAIL") -> set[str]:
    return {f.code for f in verdict.findings if f.severity == severity}


def _manifest(fixture: Path):
    key = resolve_key(fixture / "run", fixture / "seal.key", None)
    return read_manifest(fixture / "run" / "evidence.jsonl", key.key, key.head)


# ------------------------------------------------------------------------------------------ chain


def test_every_write_is_sealed_and_the_chain_verifies_independently(tmp_path):
    fixture = _fixture(tmp_path)
    m = _manifest(fixture)
    assert m.verified and m.broken is None and m.torn_tail is None
    assert m.entries == len((fixture / "run" / "evidence.jsonl").read_bytes().splitlines())
    bench = m.files["legs/cand/bench_runs.jsonl"]
    assert [s.rep for s in bench.lines] == [0, 1, 2, 3, 4] and all(s.contention for s in bench.lines)
    for rel in ("legs/base/leg.json", "legs/base/server_info.json", "legs/base/server.log", "legs/cand/outputs.jsonl"):
        assert rel in m.files
    assert [mark.status for mark in m.legs["cand-broken"]] == ["ok", "failed"]
    assert "claims/001-patch.json" not in m.files and "run.json" not in m.files  # not the harness's
    verdict = _audit(fixture)
    assert verdict.verdict == "PASS", verdict.findings
    assert not any("unsealed" in n for n in verdict.not_checked)
    assert "evidence.jsonl" in verdict.input_digests


def test_key_lives_outside_the_run_private_and_never_in_any_run_file(tmp_path):
    run = tmp_path / "run"
    chain = seal.begin(run)
    seal.append_jsonl(run / "legs" / "a" / "bench_runs.jsonl", {"leg": "a", "rep": 0, "contention": {}})
    assert not chain.key_file.resolve().is_relative_to(run.resolve())
    assert chain.key_file.parent == Path(os.environ["PERFWARDEN_KEY_DIR"])
    assert (chain.key_file.stat().st_mode & 0o777) == 0o600
    secret = chain.key.hex().encode()
    for path in run.rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path
    assert seal.find_key_file(run) == chain.key_file


@pytest.mark.parametrize("where", ["key_dir", "key_file"])
def test_a_key_inside_the_run_is_refused(tmp_path, monkeypatch, where):
    run = tmp_path / "run"
    if where == "key_dir":
        monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(run / "keys"))
        with pytest.raises(seal.SealError, match="inside the run"):
            seal.begin(run)
    else:
        with pytest.raises(seal.SealError, match="inside the run"):
            seal.begin(run, key_file=run / "legs" / "seal.key")
    assert not (run / "keys").exists() and not (run / "legs" / "seal.key").exists()


def test_resume_continues_the_same_chain_and_cuts_an_unsealed_line(tmp_path):
    fixture = tmp_path / "fx"
    fixture.mkdir()
    run = fixture / "run"
    run.mkdir()
    seal.begin(run, key_file=fixture / "seal.key")
    build_ab_run(run)
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    rep5 = make_rep("cand", 5, throughput=111.0, started_at=1010.0)
    with open(bench, "ab") as handle:  # the process dies between writing and sealing this line
        handle.write((json.dumps(rep5, separators=(",", ":")) + "\n").encode())
    seal.forget(run)  # a new process
    seal.begin(run, key_file=fixture / "seal.key")
    assert append_bench_line(bench, rep5)  # the unsealed copy is not a rep that exists: measured again
    seal.forget(run)
    entries = [json.loads(line) for line in (run / "evidence.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in entries].count("open") == 1
    assert [e["seq"] for e in entries] == list(range(len(entries)))
    cut = [e for e in entries if e["kind"] == "cut"]
    assert len(cut) == 1 and cut[0]["file"] == "legs/cand/bench_runs.jsonl"
    assert (bench.with_name("bench_runs.jsonl.unsealed")).read_bytes().count(b"\n") == 1
    assert [json.loads(line)["rep"] for line in bench.read_text().splitlines()] == [0, 1, 2, 3, 4, 5]
    verdict = _audit(fixture)
    assert not _codes(verdict) and "EVIDENCE_TAMPERED" not in _codes(verdict, "FLAG")


def _run_with_an_unsealed_rep(tmp_path: Path) -> tuple[Path, Path]:
    """A sealed A/B run whose process wrote cand's rep 5 whole, then died before sealing it."""
    fixture = tmp_path / "fx"
    fixture.mkdir()
    run = fixture / "run"
    run.mkdir()
    seal.begin(run, key_file=fixture / "seal.key")
    build_ab_run(run)
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    with open(bench, "ab") as handle:
        handle.write((json.dumps(make_rep("cand", 5, throughput=111.0, started_at=1010.0),
                                 separators=(",", ":")) + "\n").encode())
    return fixture, bench


def test_a_line_written_but_never_sealed_is_not_a_rep_that_exists(tmp_path):
    """Issue 19: ``rep_exists`` counted it, so a resumed run never re-measured the rep and the audit said
    EVIDENCE_TAMPERED. Only sealed lines are reps, in the process that holds the chain and in a new one."""
    fixture, bench = _run_with_an_unsealed_rep(tmp_path)
    run = fixture / "run"
    assert not rep_exists(bench, "cand", 5) and rep_exists(bench, "cand", 4)
    assert reps_to_run(bench, "cand", range(7)) == [5, 6]
    seal.forget(run)  # a new process: opening the chain (resume) cuts the unsealed line aside
    seal.begin(run, key_file=fixture / "seal.key")
    assert not rep_exists(bench, "cand", 5)
    assert [json.loads(line)["rep"] for line in bench.read_text().splitlines()] == [0, 1, 2, 3, 4]
    assert bench.with_name("bench_runs.jsonl.unsealed").read_bytes().count(b"\n") == 1
    cut = [json.loads(line) for line in (run / "evidence.jsonl").read_text().splitlines()][-1]
    assert cut["kind"] == "cut" and cut["file"] == "legs/cand/bench_runs.jsonl"
    assert cut["offset"] == bench.stat().st_size
    seal.forget(run)
    verdict = _audit(fixture)
    assert not _codes(verdict) and "EVIDENCE_TAMPERED" not in _codes(verdict, "FLAG")


def test_an_unsealed_line_the_harness_never_cut_is_still_tampering(tmp_path):
    """The reader's tolerance is the harness's, never the auditor's: a line past the sealed end of a
    sealed file (an edit, or a crash nobody resumed) is refused by the audit."""
    fixture, _ = _run_with_an_unsealed_rep(tmp_path)
    seal.forget(fixture / "run")
    assert "EVIDENCE_TAMPERED" in _codes(_audit(fixture))


@pytest.mark.integration
def test_graph_run_resumed_after_a_crash_keeps_one_verified_chain(tmp_path):
    from perfwarden.orchestrator.runner import run_graph
    from perfwarden.orchestrator.settings import RunSettings
    from perfwarden.orchestrator.simlab import SyntheticLab

    run = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        run_graph(run, RunSettings(target="synthetic"), SyntheticLab(crash_after=20))
    seal.forget(run)
    state = run_graph(run, RunSettings(target="synthetic"), SyntheticLab(), resume=True)
    kinds = [json.loads(line)["kind"] for line in (run / "evidence.jsonl").read_text().splitlines()]
    assert kinds.count("open") == 1
    key = resolve_key(run, None, None)
    assert key.key is not None and key.bound  # found in the key store, registered for this directory
    m = read_manifest(run / "evidence.jsonl", key.key, key.head)
    assert m.verified and m.broken is None
    for summary in state["verdicts"]:
        verdict = json.loads((run / summary.path).read_text())
        assert not any("unsealed" in n for n in verdict["not_checked"]), verdict["not_checked"]
        assert not any(f["code"] == "EVIDENCE_TAMPERED" for f in verdict["findings"])


def test_the_harness_refuses_to_extend_an_edited_file_or_chain(tmp_path):
    fixture = _fixture(tmp_path)
    run = fixture / "run"
    bench = run / "legs" / "base" / "bench_runs.jsonl"
    data = bench.read_bytes()
    bench.write_bytes(data.replace(b'"rep":0', b'"rep":7', 1))
    seal.begin(run, key_file=fixture / "seal.key")
    with pytest.raises(seal.SealError, match="changed since it was sealed"):
        seal.append_jsonl(bench, make_rep("base", 5, throughput=100.0))
    seal.forget(run)
    chain = run / "evidence.jsonl"
    chain.write_bytes(chain.read_bytes().replace(b'"status":"failed"', b'"status":"ok"'))
    with pytest.raises(seal.SealError, match="does not verify"):
        seal.begin(run, key_file=fixture / "seal.key")


def test_concurrent_writers_serialize_on_the_chain(tmp_path):
    run = tmp_path / "run"
    seal.begin(run)

    def writer(i: int) -> None:
        for k in range(10):
            seal.append_jsonl(run / "legs" / f"l{i}" / "bench_runs.jsonl", {"leg": f"l{i}", "rep": k})
            seal.write_json(run / "legs" / f"l{i}" / "leg.json", {"leg": f"l{i}", "status": "ok", "k": k})

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    key = resolve_key(run, None, None)
    m = read_manifest(run / "evidence.jsonl", key.key, key.head)
    assert m.verified and m.broken is None and m.entries == 1 + 6 * 20
    assert all(len(m.files[f"legs/l{i}/bench_runs.jsonl"].lines) == 10 for i in range(6))


def test_a_run_with_evidence_from_before_sealing_stays_unsealed(tmp_path):
    run = tmp_path / "legacy"
    build_ab_run(run)  # no chain: plain writes
    assert not (run / "evidence.jsonl").exists()
    assert seal.begin(run) is None
    seal.append_jsonl(run / "legs" / "cand" / "bench_runs.jsonl", make_rep("cand", 5, throughput=110.0))
    assert not (run / "evidence.jsonl").exists()
    verdict = audit_path(run, run / CLAIM)
    assert any(n.startswith("unsealed: no manifest") for n in verdict.not_checked)
    assert "EVIDENCE_TAMPERED" not in _codes(verdict)


# ---------------------------------------------------------------------------------------- attacks


@pytest.mark.parametrize("mutation", mutations.SEAL_MUTATIONS, ids=lambda m: m.name)
def test_every_seal_mutation_is_caught(tmp_path, mutation):
    """Each documented attack, on a freshly sealed run: the answer its table gives, and its codes."""
    clean = _fixture(tmp_path, "clean")
    fixture = mutations.mutate(clean, tmp_path / "out", mutation)
    verdict = _audit(fixture)
    assert verdict.verdict == mutation.verdict, [(f.code, f.severity, f.message) for f in verdict.findings]
    raised = {f.code for f in verdict.findings if f.severity != "INFO"}
    assert set(mutation.must_include) <= raised, raised
    assert not set(mutation.must_exclude) & raised, raised
    if mutation.verdict == "FAIL":
        assert verdict.action == "eject"


def _break_chain(run: Path, how: str) -> None:
    chain = run / "evidence.jsonl"
    lines = chain.read_bytes().splitlines(keepends=True)
    if how == "swap":
        lines[3], lines[4] = lines[4], lines[3]
    elif how == "drop-middle":
        del lines[5]
    elif how == "duplicate":
        lines.insert(6, lines[5])
    elif how == "garbage":
        lines.insert(2, b"\x00\xff not json at all\n")
    elif how == "huge-line":
        lines.append(b'{"v":1,"seq":' + b"9" * 5000 + b"}\n")
    chain.write_bytes(b"".join(lines))


@pytest.mark.parametrize("how", ["swap", "drop-middle", "duplicate", "garbage", "huge-line"])
def test_chain_edits_are_tampering_even_without_the_key(tmp_path, how):
    fixture = _fixture(tmp_path)
    _break_chain(fixture / "run", how)
    for key in (True, False):
        verdict = _audit(fixture, key=key)
        tampered = [f for f in verdict.findings if f.code == "EVIDENCE_TAMPERED" and f.severity == "FAIL"]
        assert tampered, (how, key, verdict.findings)
        assert tampered[0].evidence[0].file == "evidence.jsonl"


@pytest.mark.parametrize("edit", ["blank-line", "crlf", "leg-json-byte"])
def test_byte_level_edits_are_tampering(tmp_path, edit):
    fixture = _fixture(tmp_path)
    run = fixture / "run"
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    if edit == "blank-line":
        lines = bench.read_bytes().splitlines(keepends=True)
        bench.write_bytes(lines[0] + b"\n" + b"".join(lines[1:]))
    elif edit == "crlf":
        bench.write_bytes(bench.read_bytes().replace(b"\n", b"\r\n"))
    else:
        spec = run / "legs" / "cand" / "leg.json"
        spec.write_bytes(spec.read_bytes().replace(b"candidate leg", b"candidate legs"))
    verdict = _audit(fixture)
    assert "EVIDENCE_TAMPERED" in _codes(verdict), verdict.findings


def test_tampering_names_the_first_broken_link(tmp_path):
    fixture = _fixture(tmp_path)
    mutations.edit_one_byte(fixture / "run", mutations.Claim.model_validate_json(
        (fixture / "run" / CLAIM).read_text()))
    verdict = _audit(fixture)
    f = next(f for f in verdict.findings if f.code == "EVIDENCE_TAMPERED")
    assert f.evidence[0].file == "legs/cand/bench_runs.jsonl" and f.evidence[0].line == 1
    assert f.evidence[1].file == "evidence.jsonl" and f.evidence[1].line is not None
    assert "line 1" in f.message


def test_another_runs_key_does_not_verify(tmp_path):
    a, b = _fixture(tmp_path, "a"), _fixture(tmp_path, "b")
    run = a / "run"
    verdict = audit_path(run, run / CLAIM, key=b / "seal.key")
    assert "EVIDENCE_TAMPERED" in _codes(verdict)


def test_key_store_lookup_verifies_without_key_and_catches_a_deleted_chain(tmp_path):
    run = tmp_path / "run"
    seal.begin(run)
    build_ab_run(run)
    seal.forget(run)
    verdict = audit_path(run, run / CLAIM)  # no --key: the key store holds it by seal id
    assert verdict.verdict == "PASS" and not any("unsealed" in n for n in verdict.not_checked)
    (run / "evidence.jsonl").unlink()
    verdict = audit_path(run, run / CLAIM)  # the key store still knows this directory was sealed
    assert "EVIDENCE_TAMPERED" in _codes(verdict)


def test_without_a_key_the_verdict_says_unsealed_and_completeness_still_runs(tmp_path):
    fixture = _fixture(tmp_path)
    verdict = _audit(fixture, key=False)
    assert verdict.verdict == "PASS"
    assert any(n.startswith("unsealed: the seal chain") for n in verdict.not_checked)
    (fixture / "run" / "legs" / "cand" / "server.log").unlink()
    verdict = _audit(fixture, key=False)
    assert "EVIDENCE_MISSING" in _codes(verdict)


def test_an_unusable_key_file_is_invalid_input(tmp_path):
    fixture = _fixture(tmp_path)
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    with pytest.raises(ClaimError, match="cannot use seal key"):
        audit_path(fixture / "run", fixture / "run" / CLAIM, key=bad)
    with pytest.raises(ClaimError, match="cannot use seal key"):
        audit_path(fixture / "run", fixture / "run" / CLAIM, key=tmp_path / "absent.key")


def test_cli_audit_with_key(tmp_path):
    from typer.testing import CliRunner

    from perfwarden.cli.main import app

    fixture = _fixture(tmp_path)
    run = fixture / "run"
    args = ["audit", str(run), "--claim", str(run / CLAIM), "--json"]
    ok = CliRunner().invoke(app, args + ["--key", str(fixture / "seal.key")])
    assert ok.exit_code == 0, ok.output
    mutations.delete_chain(run, None)
    bad = CliRunner().invoke(app, args + ["--key", str(fixture / "seal.key")])
    assert bad.exit_code == 20 and "EVIDENCE_TAMPERED" in bad.stdout
    garbage = tmp_path / "garbage.key"
    garbage.write_text("{")
    invalid = CliRunner().invoke(app, args + ["--key", str(garbage)])
    assert invalid.exit_code == 3 and "Traceback" not in invalid.output


def test_harness_and_profile_scopes_read_sealed_files_too(tmp_path):
    from perfwarden.orchestrator.simlab import SyntheticLab

    run = tmp_path / "run"
    lab = SyntheticLab()
    profile = lab.profile(run, {})
    opbench = lab.opbench(run, "rmsnorm", ["alt/rmsnorm_fast.py:impl"], [[8, 576]])
    (run / "claims").mkdir()
    (run / "claims" / "001-profile.json").write_text(json.dumps({"scope": "profile", "seq": 1, "op": "rmsnorm"}))
    (run / "claims" / "002-harness.json").write_text(json.dumps({
        "scope": "harness", "seq": 2, "op": "rmsnorm", "opbench": str(opbench.relative_to(run)),
        "isolated_speedup": {"value": 2.0, "op": "rmsnorm", "baseline_backend": "reference",
                             "candidate_backend": "alt/rmsnorm_fast.py:impl"}}))
    for claim in ("claims/001-profile.json", "claims/002-harness.json"):
        assert "EVIDENCE_TAMPERED" not in _codes(audit_path(run, run / claim))
    profile.write_text(profile.read_text().replace("5000.0", "50.0"))
    opbench.write_text(opbench.read_text().replace('"times_ms": [1.0', '"times_ms": [0.1'))
    for claim in ("claims/001-profile.json", "claims/002-harness.json"):
        assert "EVIDENCE_TAMPERED" in _codes(audit_path(run, run / claim)), claim


def test_an_unsealed_file_added_to_a_sealed_run_is_tampering(tmp_path):
    from perfwarden.orchestrator.simlab import SyntheticLab

    run = tmp_path / "run"
    SyntheticLab().profile(run, {})
    (run / "quality").mkdir()
    (run / "quality" / "pw-qa-exact-v1@cand.json").write_text(json.dumps({
        "eval_id": "pw-qa-exact-v1", "leg": "cand", "n": 40, "score": 0.5}))
    build_ab_run(run, claim={"correctness": {"quality_eval_id": "pw-qa-exact-v1"},
                             "mechanism": {"name": "kv_quantization", "variant": "int8"}})
    verdict = audit_path(run, run / CLAIM)
    tampered = [f for f in verdict.findings if f.code == "EVIDENCE_TAMPERED"]
    assert tampered and "pw-qa-exact-v1@cand.json" in tampered[0].message


def test_sealed_run_copied_elsewhere_verifies_with_its_key(tmp_path):
    """Auditing on another machine: the run directory and its key travel separately."""
    fixture = _fixture(tmp_path)
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(fixture / "run", moved)
    key = tmp_path / "handed-over.key"
    shutil.copy(fixture / "seal.key", key)
    shutil.copy(fixture / "seal.head", key.with_suffix(".head"))
    verdict = audit_path(moved, moved / CLAIM, key=key)
    assert verdict.verdict == "PASS" and not any("unsealed" in n for n in verdict.not_checked)


def test_resume_rewrites_a_file_written_but_never_sealed(tmp_path):
    run = tmp_path / "run"
    seal.begin(run)
    out = RunDir(run).outputs("base")
    seal.write_text(out, "a\n")
    assert seal.is_current(out)
    out.write_text("b\n")  # e.g. replaced just before a crash, never sealed
    assert not seal.is_current(out)


def test_a_hostile_manifest_is_never_read_outside_the_run_and_never_crashes(tmp_path):
    """Entries naming files outside the run (or impossible names) are linked correctly but forged
    (no key): the auditor reads nothing outside the run, does not degrade, and fails closed."""
    from perfwarden.formats.seal import encode_entry

    fixture = _fixture(tmp_path)
    (fixture / "seal.key").unlink()  # audited without the key: only the chain's structure is checked
    chain = fixture / "run" / "evidence.jsonl"
    lines = chain.read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])
    prev, seq, out = last["mac"], last["seq"], []
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the run\n")
    for name in (str(secret), "../secret.txt", "legs/cand/\u0000bad", "legs/cand/" + "x" * 5000):
        seq += 1
        line, prev = encode_entry({"v": 1, "seq": seq, "prev": prev, "kind": "file", "file": name,
                                   "sha256": "0" * 64, "size": 1}, os.urandom(32))
        out.append(line)
    chain.write_bytes(b"".join(lines + out))
    verdict = _audit(fixture, key=False)
    assert not verdict.degraded, verdict.degraded_reasons
    missing = [f for f in verdict.findings if f.code == "EVIDENCE_MISSING" and f.severity == "FAIL"]
    assert missing and verdict.verdict == "FAIL"
    assert str(secret) not in verdict.input_digests


@pytest.mark.timeout(120)
@pytest.mark.parametrize("after_s", [0.3, 0.55, 0.8])
def test_sigkill_while_sealing_then_resume_verifies(tmp_path, after_s):
    """A writer process is SIGKILLed at an arbitrary point (mid-line, between a line and its seal, mid
    chain entry); the next writer cuts what was never sealed, continues the chain, and it verifies."""
    import signal
    import subprocess
    import sys
    import time

    from perfwarden.auditor.manifest import observe

    run = tmp_path / "run"
    script = ("import sys, itertools\nfrom perfwarden.formats import seal\nrun = sys.argv[1]\nseal.begin(run)\n"
              "for k in itertools.count():\n"
              "    seal.append_jsonl(run + '/legs/a/bench_runs.jsonl', {'leg': 'a', 'rep': k, 'pad': 'x' * 4000})\n"
              "    seal.write_json(run + '/legs/a/leg.json', {'leg': 'a', 'status': 'ok', 'k': k})\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(run)])
    deadline = time.time() + 30
    while not (run / "legs" / "a" / "bench_runs.jsonl").exists() and time.time() < deadline:
        time.sleep(0.01)
    # A writer that never started (it could not import the seal) would leave this test nothing to check.
    assert (run / "legs" / "a" / "bench_runs.jsonl").exists() and proc.poll() is None, proc.poll()
    time.sleep(after_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    bench = run / "legs" / "a" / "bench_runs.jsonl"
    seal.begin(run)  # resume: continues the chain (cutting a torn chain entry aside)
    seal.cut_unsealed_tail(bench)
    seal.append_jsonl(bench, {"leg": "a", "rep": -1})
    seal.write_json(run / "legs" / "a" / "leg.json", {"leg": "a", "status": "ok", "k": "final"})
    key = resolve_key(run, None, None)
    m = read_manifest(run / "evidence.jsonl", key.key, key.head)
    assert m.verified and m.broken is None and m.torn_tail is None
    states = observe(run, m, {})
    assert all(s.exists and s.sha256 == m.files[rel].sha256 for rel, s in states.items()), states
    assert [e for e in (json.loads(x) for x in (run / "evidence.jsonl").read_text().splitlines())
            if e["kind"] == "open"].__len__() == 1


def test_a_producers_report_in_a_sealed_run_is_not_harness_evidence(tmp_path):
    fixture = _fixture(tmp_path)
    run = fixture / "run"
    (run / "report.md").write_text("Batching to 8 sequences raised throughput.\n")
    claim = json.loads((run / CLAIM).read_text())
    claim["report"] = "report.md"
    (run / CLAIM).write_text(json.dumps(claim))
    verdict = _audit(fixture)
    assert "report.md" in verdict.input_digests  # read by the prose gate ...
    assert "EVIDENCE_TAMPERED" not in _codes(verdict)  # ... but never required to be sealed
