"""One writer per run: the run directory's writer lock (design §2).

Every command that writes into a run (``run``, ``run --resume``, ``measure``, ``audit --save``) holds
the lock from before its first write to its end; a second writer is refused at once (:class:`RunBusy`,
exit 3) with the holder named. Readers (``audit`` without ``--save``, ``review``, ``backtest``) never
take it: they read a consistent state through the seal chain instead (``auditor/snapshot.py``).

Why an OS lock and not a pid file: ``flock`` on ``<run>/writer.lock`` belongs to the open file
description, and the kernel drops it when the holder dies however it dies (``kill -9``, the OOM killer),
so a lock left by a dead process is simply free -- there is no pid to guess about. The descriptor is
close-on-exec, so a server or sandbox the writer starts never inherits it (it would keep the lock alive
after the writer died). The lock file is never removed (unlinking a lock file lets two processes lock
two different inodes) and its contents are never read.

Because ``flock`` cannot say who holds it, the holder describes itself in ``<run>/writer.json`` (pid,
host, command, start time), written atomically once it holds the lock. A refused writer reads that
description only to name the holder; on this host it checks the named process is alive (and is the same
process: its start time in ``/proc``), since the description can lag the lock by the instant between
taking the lock and writing it, or be a dead writer's.

Both files are input like any other in a run: opened without following a link, never a FIFO, device or
folder (``formats.safe_write``), never blocked on (``LOCK_NB``); a bad description is named as such.

A new run directory appears locked: :func:`hold` with ``create=True`` builds it in a hidden folder beside
it, takes the lock and writes the description there, then renames it into place -- no instant exists at
which another writer finds the directory unlocked.

Within one process the lock is re-entrant (keyed by the directory's device and inode, and by the pid, so
a forked child never believes it holds its parent's lock): the CLI takes it, and ``run_graph``, the
checkpoint and the search study (:func:`require`) find it held.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shlex
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfwarden.formats import safe_write
from perfwarden.formats.records import RunDir
from perfwarden.formats.safe_read import KiB, read_bytes

HOLDER_BYTES = 4 * KiB
"""A holder description is a few short fields; a bigger file is not one."""
COMMAND_CHARS = 400
"""How much of the holder's command line is kept (enough to recognize it)."""
DESCRIPTION_WAIT_S = 1.0
"""How long a refused writer waits for the holder to describe itself (it does so right after taking the
lock) before naming it as unknown; the lock is tried again meanwhile, so a holder that finishes in that
second lets the writer in."""
_POLL_S = 0.02


class LockHolder(BaseModel):
    """Who holds a run's writer lock (``writer.json``): enough for a person to find the process."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1] = 1
    """Format version."""
    pid: int = Field(ge=1, le=2**31 - 1)
    """The holder's process id on ``host``."""
    host: str = Field(max_length=255)
    """The host the holder runs on (``socket.gethostname()``)."""
    command: str = Field(max_length=COMMAND_CHARS)
    """The holder's command line, shortened (``perfwarden run --resume runs/x``)."""
    started_at: str = Field(max_length=40)
    """When it took the lock, UTC ISO 8601."""
    process_start: int | None = Field(default=None, ge=0, le=2**63 - 1)
    """The holder's start time in clock ticks since boot (``/proc/<pid>/stat``), so a reused pid is not
    taken for the holder; None where there is no ``/proc``."""


class RunBusy(Exception):
    """Another process holds the run's writer lock (exit 3: wait for it, or stop it)."""

    def __init__(self, run: Path, holder: LockHolder | None, note: str = ""):
        self.run, self.holder = run, holder
        if holder is not None:
            who = (f"pid {holder.pid} on host {holder.host!r}, {holder.command!r}, writing since "
                   f"{holder.started_at}")
        else:
            who = f"a process that has not described itself ({note})"
        super().__init__(
            f"the run {str(run)!r} is being written by another perfwarden command: {who}. One command writes a "
            "run at a time (readers -- audit without --save, review -- work meanwhile); wait for it to finish, "
            "or stop it and run this again")


class NotARunDirectory(Exception):
    """A writer was pointed at a directory that does not exist (exit 3)."""


# ------------------------------------------------------------------------------------- description


def command_line(argv: list[str] | None = None) -> str:
    """This process's command line as a person would type it (program name without its folder)."""
    args = list(sys.argv if argv is None else argv) or ["python"]
    text = shlex.join([os.path.basename(args[0]) or args[0], *args[1:]])
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 1] + "…"


def process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of ``/proc/<pid>/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read(4096).rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def describe_self(command: str | None = None) -> LockHolder:
    return LockHolder(pid=os.getpid(), host=socket.gethostname()[:255], command=command or command_line(),
                      started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      process_start=process_start(os.getpid()))


def is_alive(holder: LockHolder) -> bool | None:
    """Whether the described process still runs: None when it runs on another host (cannot tell)."""
    if holder.host != socket.gethostname()[:255]:
        return None
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    if holder.process_start is not None:
        now = process_start(holder.pid)
        if now is not None and now != holder.process_start:
            return False  # the pid was reused by another process
    return True


def read_holder(run: Path | str) -> tuple[LockHolder | None, str]:
    """The description in ``writer.json`` and, when there is none to trust, why."""
    path = RunDir(run).writer_holder
    try:
        return LockHolder.model_validate_json(read_bytes(path, run, limit=HOLDER_BYTES, what="lock holder")), ""
    except OSError as exc:
        return None, f"{path.name}: {exc}"
    except ValidationError as exc:
        return None, f"{path.name} is not a holder description ({exc.error_count()} problem(s))"


# ------------------------------------------------------------------------------------------- locking


@dataclass
class RunLock:
    """This process's hold on one run's writer lock."""

    run: Path
    fd: int
    holder: LockHolder
    created: bool = False
    """Whether :func:`hold` created the run directory (it did not exist)."""
    key: tuple[int, int] = (0, 0)
    pid: int = field(default_factory=os.getpid)
    depth: int = 1


_HELD: dict[tuple[int, int], RunLock] = {}
_HELD_LOCK = threading.RLock()


def _dir_key(run: Path) -> tuple[int, int]:
    st = os.stat(run)
    return st.st_dev, st.st_ino


def _held_here(key: tuple[int, int]) -> RunLock | None:
    lock = _HELD.get(key)
    return lock if lock is not None and lock.pid == os.getpid() else None


def holds(run: Path | str) -> bool:
    """Whether this process holds ``run``'s writer lock."""
    try:
        key = _dir_key(Path(run))
    except OSError:
        return False
    with _HELD_LOCK:
        return _held_here(key) is not None


def require(run: Path | str, what: str) -> None:
    """Raise unless this process holds ``run``'s writer lock: ``what`` (the checkpoint, the search study)
    is opened for writing only by the lock holder. A caller that gets here without the lock is our bug."""
    if not holds(run):
        raise RuntimeError(f"internal: {what} of the run {str(run)!r} opened by a process that does not hold "
                           "the run's writer lock (harness/run_lock.py)")


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def _lock_fd(run: Path) -> int:
    """A descriptor on ``writer.lock`` (created when missing), never through a link, never a FIFO."""
    return safe_write.open_fd(RunDir(run).writer_lock, os.O_RDONLY | os.O_CREAT, run)


def _take(run: Path, command: str | None) -> tuple[int, LockHolder]:
    """Lock ``run`` (an existing directory) and describe this process; RunBusy when another holds it."""
    fd = _lock_fd(run)
    try:
        deadline = time.monotonic() + DESCRIPTION_WAIT_S
        while not _try_flock(fd):
            holder, why = read_holder(run)
            if holder is not None and is_alive(holder) is not False:
                raise RunBusy(run, holder)
            if time.monotonic() >= deadline:
                if holder is not None:
                    why = f"{RunDir(run).writer_holder.name} names pid {holder.pid}, which has exited"
                raise RunBusy(run, None, why or "no description")
            time.sleep(_POLL_S)
        me = describe_self(command)
        safe_write.write_json(RunDir(run).writer_holder, me, run)
        return fd, me
    except BaseException:
        os.close(fd)  # releases the lock if it was taken
        raise


def _create_locked(run: Path, command: str | None,
                   populate: Callable[[Path], None] | None) -> tuple[int, LockHolder] | None:
    """Build ``run`` locked in a hidden folder beside it (``populate`` writes its first files there) and
    rename it into place; None when ``run`` appeared meanwhile (the caller locks that one instead)."""
    run.parent.mkdir(parents=True, exist_ok=True)
    staged = run.parent / f".{run.name}.creating-{secrets.token_hex(6)}"
    os.mkdir(staged)
    fd: int | None = None
    try:
        fd, me = _take(staged, command)
        if populate is not None:
            populate(staged)
        os.rename(staged, run)  # atomic; refused when another process made a non-empty ``run`` meanwhile
    except BaseException as exc:
        if fd is not None:
            os.close(fd)
        shutil.rmtree(staged, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in _APPEARED and os.path.lexists(run):
            return None
        raise
    return fd, me


_APPEARED = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR)
"""What ``rename`` says when the target appeared meanwhile."""


@contextmanager
def hold(run: Path | str, command: str | None = None, *, create: bool = False,
         populate: Callable[[Path], None] | None = None) -> Iterator[RunLock]:
    """Hold ``run``'s writer lock for the block (re-entrant in this process). ``create``: a missing run is
    made, locked before it appears, with ``populate(folder)`` writing its first files; otherwise a missing
    run is :class:`NotARunDirectory`. Raises :class:`RunBusy` when another process holds it, and
    ``safe_write.RefusedWrite`` when its lock file is a link, FIFO, device or folder."""
    run = Path(run)
    lock = _enter(run, command, create, populate)
    try:
        yield lock
    finally:
        with _HELD_LOCK:
            lock.depth -= 1
            if lock.depth == 0:
                _HELD.pop(lock.key, None)
                os.close(lock.fd)  # releases the flock


def _enter(run: Path, command: str | None, create: bool, populate: Callable[[Path], None] | None) -> RunLock:
    # Under the registry's lock throughout: two threads of this process never both try the flock (the
    # second would find this process holding it and name it as another writer).
    with _HELD_LOCK:
        if create and not os.path.lexists(run):
            made = _create_locked(run, command, populate)
            if made is not None:
                return _register(RunLock(run, made[0], made[1], created=True))
        if not os.path.isdir(run):
            raise NotARunDirectory(f"{str(run)!r} is not a directory: there is no run to write into")
        mine = _held_here(_dir_key(run))
        if mine is not None:
            mine.depth += 1
            return mine
        fd, me = _take(run, command)
        return _register(RunLock(run, fd, me))


def _register(lock: RunLock) -> RunLock:
    lock.key = _dir_key(lock.run)
    _HELD[lock.key] = lock
    return lock
