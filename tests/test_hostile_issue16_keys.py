"""Issue 16, item 4: a seal key comes only from ``--key`` (read like ``--claim``) or the key store.

Before the fix ``audit --key FIFO`` blocked until killed, ``--key /dev/zero`` grew without bound, and a
chain whose first entry named the seal id ``"../run/evil"`` made ``find_key_file`` (the graph's auditor
node) and the writer's ``begin`` use a key file inside the run: whoever wrote the run chose the key its
evidence is verified with. Each test failed before the fix.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfwarden.auditor.manifest import KeyFileError, resolve_key
from perfwarden.formats import seal
from perfwarden.formats.records import key_store_dir
from perfwarden.orchestrator.paths import default_fixture_roots

from test_hostile_issue12 import deadline  # noqa: E402 - one alarm helper for the hostile-input tests

CLEAN = default_fixture_roots()[0] / "syn-clean-patch-win" / "run"  # its one patch claim PASSes intact


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """The CLI in a subprocess under a 3 GiB address-space cap (an unbounded read fails, not the machine)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run([sys.executable, "-m", "perfwarden.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=limit, stdin=subprocess.DEVNULL)


def hostile_key(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A ``--key`` that is not a small regular file, and the words the refusal must use."""
    path = tmp_path / f"key-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
        return path, "is a FIFO (named pipe), not a regular file"
    if kind == "directory":
        path.mkdir()
        return path, "is a directory, not a regular file"
    if kind == "huge":
        with open(path, "wb") as handle:
            handle.truncate(200 << 20)  # sparse: no disk used
        return path, "over the 65,536 bytes (64 KiB) bound"
    return Path("/dev/zero"), "is a character device, not a regular file"


@pytest.mark.parametrize("kind", ["fifo", "directory", "huge"])  # /dev/zero: in a capped subprocess below
def test_a_key_that_is_not_a_small_regular_file_is_refused_at_once(tmp_path, kind):
    path, says = hostile_key(tmp_path, kind)
    started = time.monotonic()
    with deadline(3), pytest.raises(KeyFileError) as info:
        resolve_key(CLEAN, path, None)
    assert says in str(info.value) and time.monotonic() - started < 1.0


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_audit_key_fifo_or_dev_zero_exits_3_in_seconds(tmp_path, kind):
    path, says = hostile_key(tmp_path, kind)
    started = time.monotonic()
    try:
        done = cli("audit", str(CLEAN), "--claim", str(CLEAN / "claims" / "001-patch.json"), "--key", str(path),
                   timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"audit --key {kind} did not end within 20 s")
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done.stderr[-2000:]
    assert says in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    assert elapsed < 10, elapsed
    print(f"audit --key {kind}: exit 3 in {elapsed:.2f} s (interpreter start included)")


# -------------------------------------------------------------------------------------------- seal ids


def plant_chain(run: Path, seal_id: str) -> Path:
    """A chain whose open entry names ``seal_id``, MAC'd with a key the run's author made and left in
    the run (``<run>/evil.key``): consistent, so only the seal id can give it away."""
    key = bytes(range(32))
    run.mkdir(parents=True, exist_ok=True)
    entry = {"v": seal.FORMAT_VERSION, "seq": 0, "prev": seal.GENESIS_MAC, "kind": "open", "seal_id": seal_id,
             "run_id": "run", "key_id": seal.key_id(key), "created_at": "2026-01-01T00:00:00Z"}
    line, _ = seal.encode_entry(entry, key)
    (run / seal.EVIDENCE_FILE).write_bytes(line)
    evil = run / "evil.key"
    evil.write_text(json.dumps({"schema_version": 1, "seal_id": seal_id, "run_dir": str(run), "key": key.hex(),
                                "created_at": "2026-01-01T00:00:00Z"}))
    return evil


def traversing_id(run: Path) -> str:
    """The seal id that, joined to the key store, names ``<run>/evil.key`` (``../run/evil`` here)."""
    return os.path.relpath(run / "evil", key_store_dir())


def test_a_chain_naming_a_path_as_its_seal_id_never_picks_a_key_inside_the_run(tmp_path):
    run = tmp_path / "run"
    evil_id = traversing_id(run)
    assert ".." in evil_id and (key_store_dir() / f"{evil_id}.key").resolve() == (run / "evil.key").resolve()
    plant_chain(run, evil_id)
    found = seal.find_key_file(run)  # what the graph's auditor node hands the auditor as the run's key
    assert found is None or not found.resolve().is_relative_to(run.resolve()), found
    assert resolve_key(run, None, evil_id).key is None  # the auditor's own lookup: no key either


def test_the_writer_refuses_to_continue_a_chain_whose_seal_id_is_a_path(tmp_path):
    """``begin`` on resume continued the chain with the key the run named (and wrote its head beside it)."""
    run = tmp_path / "run"
    plant_chain(run, traversing_id(run))
    try:
        with pytest.raises(seal.SealError, match="not an identifier"):
            seal.begin(run)
    finally:
        seal.forget(run)
    assert not (run / "evil.head").exists()


@pytest.mark.parametrize("run_id", ["../../etc/x", ".hidden", "-dash", "a" * 300, "ünïcode/..", ""])
def test_the_writer_makes_only_seal_ids_the_reader_accepts(tmp_path, run_id):
    """One pattern for both sides: whatever a run is called, the id the writer makes is one the reader
    (``records.is_seal_id``, ``key_store_path``) accepts, and its key lies in the store."""
    from perfwarden.formats.records import is_seal_id, key_store_path

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"id": run_id}))
    try:
        chain = seal.begin(run)
        assert chain is not None and is_seal_id(chain.seal_id), chain.seal_id
        assert chain.key_file == key_store_path(chain.seal_id) and chain.key_file.parent == key_store_dir()
        assert seal.find_key_file(run) == chain.key_file
    finally:
        seal.forget(run)
    for bad in ("../run/evil", "/abs/evil", "a/b", ".hidden", "-x", "", "x\n", "x" * 200, None, 7):
        assert not is_seal_id(bad) and key_store_path(bad) is None, bad
