"""A full disk is named as a full disk (exit 4), wherever it strikes, and loses nothing.

A disk fills under a run as an ``OSError`` (``ENOSPC``) from a plain write, as SQLite's "database or disk
is full" from the checkpoint, and inside Optuna's ``StorageInternalError`` ("invalid data in the
commit") from the study: each is found in the error's chain. The end-to-end tests fill a real small
tmpfs (they need the right to mount one: root, as in CI's container; skipped elsewhere).
"""

from __future__ import annotations

import errno
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from perfwarden.orchestrator.exit_codes import ExitCode, disk_full, no_space_message

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
PERFWARDEN = [sys.executable, "-m", "perfwarden.cli.main"]


def _sqlite_full(tmp_path: Path) -> sqlite3.OperationalError:
    """SQLite's own SQLITE_FULL, from a database capped at two pages."""
    db = sqlite3.connect(tmp_path / "full.sqlite")
    db.execute("PRAGMA max_page_count = 2")
    try:
        db.execute("CREATE TABLE t (x TEXT)")
        db.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        db.close()
    raise AssertionError("SQLite did not fill")


def test_a_full_disk_is_found_however_it_is_wrapped(tmp_path):
    import optuna
    import sqlalchemy.exc

    full = _sqlite_full(tmp_path)
    assert disk_full(full) is full
    try:  # how Optuna's RDB storage reports it: SQLAlchemy's error, then its own "invalid data"
        try:
            raise sqlalchemy.exc.OperationalError("INSERT INTO trials ...", {}, full)
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit. This "
                                                         "typically happens due to invalid data in the commit") from exc
    except optuna.exceptions.StorageInternalError as wrapped:
        assert disk_full(wrapped) is full
    enospc = OSError(errno.ENOSPC, "No space left on device")
    assert disk_full(RuntimeError("database or disk is full")) is None  # the words alone are not SQLite's error
    assert disk_full(enospc) is enospc and disk_full(OSError(errno.EACCES, "Permission denied")) is None
    assert "No space left on device" in no_space_message(enospc, "running", "free space")


@pytest.fixture
def small_disk(tmp_path):
    """A 500 KiB tmpfs (a synthetic run with an Optuna study fills it in its study or its checkpoint)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=500k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.slow
def test_a_run_on_a_full_disk_says_so_and_resumes_when_space_is_freed(small_disk):
    run = small_disk / "run"
    args = ["run", "--target", "synthetic", "--levers", "max_batch_size=2,batch_wait_ms=1", "--no-kernels",
            "--sampler", "tpe"]
    stopped = subprocess.run([*PERFWARDEN, *args, "--out", str(run)], capture_output=True, text=True, timeout=600)
    assert stopped.returncode == ExitCode.NO_SPACE, stopped.stderr[-2000:]
    assert "the disk is full" in stopped.stderr and f"run --resume {run}" in stopped.stderr
    assert "Traceback" not in stopped.stderr and "invalid data" not in stopped.stderr
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = subprocess.run([*PERFWARDEN, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "report.json").read_text())["report_version"] >= 1


@pytest.mark.slow
def test_a_verdict_that_cannot_be_saved_on_a_full_disk_says_so(small_disk):
    run = small_disk / "run"
    shutil.copytree(FIXTURES / "rec-response-cache" / "run", run)
    with open(small_disk / "filler", "wb", buffering=0) as filler:  # every byte left, taken
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    audit = subprocess.run([*PERFWARDEN, "audit", str(run), "--claim", str(run / "claims" / "001-patch.json"), "--save"],
                           capture_output=True, text=True, timeout=300)
    assert audit.returncode == ExitCode.NO_SPACE, audit.stderr[-2000:]
    assert "the disk is full" in audit.stderr and "no verdict was saved" in audit.stderr
    assert not (run / "verdicts").exists() or not list((run / "verdicts").glob("*.json"))
