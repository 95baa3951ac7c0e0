"""A reader audits one state of a run another process is writing (``auditor/snapshot.py``, design §2).

Each test writes into the run at the worst instant -- after the auditor read the seal chain, before it
compared the files with it -- exactly as the harness writes (a rep line appended and sealed, a whole file
replaced and sealed, a writer paused between renaming a file in and sealing it), and the verdict must be
the one the run gives when nobody writes: the writes touch legs the claim does not rest on.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from perfwarden.auditor import audit as audit_module
from perfwarden.formats import safe_write, seal
from perfwarden.harness.bench_writer import append_bench_line
from perfwarden.orchestrator.runner import run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab
from perfwarden.orchestrator.synth import make_rep

pytestmark = pytest.mark.slow  # a synthetic run recorded once (seconds), then audits racing writers


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path]:
    keys = tmp_path_factory.mktemp("keys")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFWARDEN_KEY_DIR", str(keys))
        run = tmp_path_factory.mktemp("snapshot") / "run"
        run_graph(run, RunSettings(target="synthetic", levers=["batch_wait_ms"]), SyntheticLab())
    return run, keys


@pytest.fixture
def run(recorded, monkeypatch) -> Path:
    run, keys = recorded
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(keys))
    seal.forget(run)
    yield run
    seal.forget(run)


def _claim(run: Path) -> Path:
    return sorted((run / "claims").glob("*-patch.json"))[0]


def _other_leg(run: Path, claim: Path) -> str:
    """A candidate leg of another step: the claim neither rests on it nor shares its configuration."""
    named: set[str] = set()
    for value in json.loads(claim.read_text())["legs"].values():
        named.update(value if isinstance(value, list) else [value] if value else [])
    return next(p.parent.name for p in sorted((run / "legs").glob("*-cand/bench_runs.jsonl"))
                if p.parent.name not in named)


def _key(verdict) -> tuple:
    return (verdict.verdict, verdict.action, sorted(f.code for f in verdict.findings), verdict.headline_rederived,
            verdict.seal)


def _write_after_the_chain_is_read(monkeypatch, write, times: int = 1) -> list[int]:
    """Call ``write()`` right after the auditor read the chain, the first ``times`` times."""
    calls: list[int] = []
    original = audit_module._read_chain

    def hooked(a, key):
        result = original(a, key)
        calls.append(1)
        if len(calls) <= times:
            write()
        return result

    monkeypatch.setattr(audit_module, "_read_chain", hooked)
    return calls


def _append_rep(run: Path, leg: str, rep: int) -> None:
    append_bench_line(run / "legs" / leg / "bench_runs.jsonl",
                      make_rep(leg, rep, throughput=100.0, ttft_ms=80.0, n_requests=16, output_len=16))


def test_a_rep_appended_and_sealed_mid_audit_is_not_tampering(run, monkeypatch):
    claim = _claim(run)
    reference = audit_module.audit_path(run, claim)
    leg = _other_leg(run, claim)
    calls = _write_after_the_chain_is_read(monkeypatch, lambda: _append_rep(run, leg, 90))
    got = audit_module.audit_path(run, claim)
    assert _key(got) == _key(reference), [f.message for f in got.findings]
    assert len(calls) == 2  # the audit that overlapped the write was done again


def test_a_file_replaced_and_sealed_mid_audit_is_not_tampering(run, monkeypatch):
    claim = _claim(run)
    reference = audit_module.audit_path(run, claim)
    info = run / "legs" / _other_leg(run, claim) / "server_info.json"

    def rewrite() -> None:
        seal.write_json(info, {**json.loads(info.read_text()), "note": "written again"})

    _write_after_the_chain_is_read(monkeypatch, rewrite)
    got = audit_module.audit_path(run, claim)
    assert _key(got) == _key(reference), [f.message for f in got.findings]


@pytest.mark.parametrize("what", ["a file renamed in", "half a rep line"])
def test_a_writer_caught_between_writing_and_sealing_is_waited_out(run, monkeypatch, what):
    """The harness writes evidence and seals it inside one hold of the chain's lock (a line appended, a whole
    file renamed in): a reader that saw the bytes before their seal -- a whole new file, or a torn line --
    finds the chain changed once that hold ends, and audits again."""
    claim = _claim(run)
    reference = audit_module.audit_path(run, claim)
    leg = _other_leg(run, claim)
    chain = seal.begin(run)
    written = threading.Event()

    def slow_writer() -> None:
        with chain._locked() as fd:
            if what == "a file renamed in":
                path = run / "legs" / leg / "server_info.json"
                data = (json.dumps({**json.loads(path.read_text()), "note": "slow"}) + "\n").encode()
                safe_write.write_bytes(path, data, run)
                fields = {"kind": "file", "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            else:
                path = run / "legs" / leg / "bench_runs.jsonl"
                line = (json.dumps(make_rep(leg, 70, throughput=100.0, n_requests=16, output_len=16)) + "\n").encode()
                offset = path.stat().st_size
                with open(path, "ab") as handle:
                    handle.write(line[:len(line) // 2])
                    handle.flush()
                    written.set()
                    time.sleep(0.5)
                    handle.write(line[len(line) // 2:])
                running = hashlib.sha256(path.read_bytes())
                fields = {"kind": "line", "line": chain._files[chain.rel(path)].lines + 1, "offset": offset,
                          "length": len(line) - 1, "sha256": hashlib.sha256(line[:-1]).hexdigest(),
                          "size": offset + len(line), "file_sha256": running.hexdigest()}
            written.set()
            time.sleep(0.5)  # the seal is not written yet
            chain._append(fd, {**fields, "file": chain.rel(path), **chain._meta(chain.rel(path), path)})
        seal.forget(run)  # this hand-made entry bypassed the chain's own bookkeeping

    threads: list[threading.Thread] = []

    def start() -> None:
        threads.append(threading.Thread(target=slow_writer))
        threads[0].start()
        assert written.wait(10)

    _write_after_the_chain_is_read(monkeypatch, start)
    got = audit_module.audit_path(run, claim)
    threads[0].join()
    assert _key(got) == _key(reference), [f.message for f in got.findings]


def test_review_reads_verdicts_being_rewritten_whole(run):
    """A verdict is replaced by rename (``audit --save``, the graph's auditor): a review sees the old file or
    the new one, never a part of one."""
    from perfwarden.auditor.audit import write_verdict
    from perfwarden.orchestrator.review.model import load_review

    claim = _claim(run)
    first = audit_module.audit_path(run, claim)
    second = first.model_copy(update={"verdict": "FAIL", "action": "eject"})
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            for verdict in (first, second):
                write_verdict(run, verdict)

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        seen = set()
        for _ in range(15):
            review = load_review(run)
            seen |= {e.verdict.verdict for e in review.entries if e.verdict.claim_seq == first.claim_seq}
    finally:
        stop.set()
        writer.join()
        write_verdict(run, first)
    assert seen <= {first.verdict, "FAIL"} and seen


def test_a_writer_faster_than_the_audit_is_held_off_for_one_last_audit(run, monkeypatch):
    from perfwarden.auditor import snapshot

    claim = _claim(run)
    reference = audit_module.audit_path(run, claim)
    leg = _other_leg(run, claim)
    threads: list[threading.Thread] = []

    def write_from_another_thread() -> None:  # blocks while the reader holds the chain: not in this thread
        thread = threading.Thread(target=_append_rep, args=(run, leg, 80 + len(threads)))
        threads.append(thread)
        thread.start()
        thread.join(0.3)

    calls = _write_after_the_chain_is_read(monkeypatch, write_from_another_thread, times=snapshot.ATTEMPTS + 1)
    got = audit_module.audit_path(run, claim)
    for thread in threads:
        thread.join()
    assert len(calls) == snapshot.ATTEMPTS + 1
    assert _key(got) == _key(reference), [f.message for f in got.findings]
    assert not any("stayed locked" in note for note in got.not_checked)


def test_a_chain_locked_forever_never_blocks_the_reader(run, monkeypatch):
    """Someone holds the chain's lock and never lets go: the audit ends, and says it read a run being written."""
    from perfwarden.auditor import snapshot

    monkeypatch.setattr(snapshot, "WAIT_S", 0.3)
    claim = _claim(run)
    reference = audit_module.audit_path(run, claim)
    with open(run / "evidence.jsonl", "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        started = time.monotonic()
        got = audit_module.audit_path(run, claim)
        assert time.monotonic() - started < 30
    assert _key(got) == _key(reference)
    assert any("stayed locked by a writer" in note for note in got.not_checked)
