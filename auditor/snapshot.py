"""Audit a run another process may be writing: one consistent state, without waiting on its writer.

A reader (``audit`` without ``--save``, ``review``, ``backtest``) never takes the run's writer lock
(``harness/run_lock.py``): a run can take hours and its user wants to look at it meanwhile. What it can
observe mid-write is settled by the seal chain: the harness appends a line and seals it, or renames a
whole file into place and seals it, inside one hold of an exclusive ``flock`` on ``evidence.jsonl``
(``formats/seal.py``), so evidence the chain covers never changes without the chain changing with it.
Claims, verdicts and reports are unsealed but replaced by rename: a reader sees the old file or the new.

So the audit is bracketed by the chain's identity and size, each taken under a *shared* ``flock`` (which
waits out the one chain operation in flight, if any -- milliseconds, bounded by ``WAIT_S``): unchanged
across the audit means every file the chain covers was read in one state -- the state as of that chain.
Changed means a writer sealed something meanwhile (a file may have been read half before, half after),
and the audit runs again. A writer that writes faster than an audit reads gets, after ``ATTEMPTS``
tries, one last audit under a shared ``flock`` held throughout: its next seal waits for that one audit.

Shares with the harness only the chain's file name and its locking convention, as it shares formats.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from perfwarden.formats.safe_read import open_regular

EVIDENCE_FILE = "evidence.jsonl"
ATTEMPTS = 3
"""Audits bracketed by an unchanged chain tried before the last one that holds writers off."""
WAIT_S = 2.0
"""The longest a reader waits for the chain operation in flight (hashing one sealed file; a chain
locked longer is someone else's doing, and the audit goes on without the lock, saying so)."""
_POLL_S = 0.005

Result = TypeVar("Result")
Stamp = tuple[int, int, int, int] | str
"""(device, inode, size, mtime ns) of the chain, or why there is none to take (``absent``,
``unreadable``, ``busy``: locked past ``WAIT_S``)."""


def _lock_shared(fd: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)


@contextmanager
def _chain_held(run: Path, wait_s: float) -> Iterator[tuple[int | None, str]]:
    """(descriptor with a shared lock on the chain, "") while the block runs; (None, why) when there is
    no chain to hold or it stayed locked past ``wait_s``."""
    path = Path(run) / EVIDENCE_FILE
    if not os.path.lexists(path):
        yield None, "absent"
        return
    try:
        handle = open_regular(path, run, what="seal chain")  # a FIFO or link here is never waited on
    except OSError:
        yield None, "unreadable"
        return
    with handle:
        if not _lock_shared(handle.fileno(), wait_s):
            yield None, "busy"
            return
        yield handle.fileno(), ""  # closing the handle releases the lock


def chain_stamp(run: Path) -> Stamp:
    """The chain as it is once the operation in flight is done."""
    with _chain_held(run, WAIT_S) as (fd, why):
        if fd is None:
            return why
        st = os.fstat(fd)
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def consistent(run: Path, audit_once: Callable[[], Result]) -> tuple[Result, str | None]:
    """``audit_once()`` over one state of ``run`` and, when none could be had, a note saying so."""
    for _ in range(ATTEMPTS):
        before = chain_stamp(run)
        if before == "busy":
            break
        result = audit_once()
        if chain_stamp(run) == before:
            return result, None
    with _chain_held(run, WAIT_S) as (fd, why):
        result = audit_once()
    if fd is None and why == "busy":
        return result, (f"the run's seal chain stayed locked by a writer for over {WAIT_S:g} s, so this audit read "
                        "the run while it was being written: a file being written may show as changed; audit again "
                        "when the writer is done")
    return result, None
