"""The ``perfwarden`` command line's exit codes, in one place (scripts and CI depend on them).

A FAIL never exits 0; unreadable or invalid input is 3, never a traceback. The embedded server process
has its own codes (``harness/embedded_server.py``): they are the server's contract with the lab, not the
CLI's with its users.
"""

from __future__ import annotations

import errno
import sqlite3
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    """Done; for ``audit``: the verdict is PASS."""
    NOT_OK = 1
    """``measure``: the leg failed; ``backtest``: a fixture disagrees with its answer key."""
    USAGE = 2
    """Bad arguments (unknown target, bad option value)."""
    INVALID = 3
    """Unreadable or invalid input: a bad run directory, claim, knob or log."""
    NO_SPACE = 4
    """The disk (or the user's quota) is full: what was written before is kept; free space and run the command
    again (``run --resume`` continues a run where it stopped)."""
    FLAG = 10
    """``audit``/``audit-mlperf``: the verdict is FLAG."""
    FAIL = 20
    """``audit``/``audit-mlperf``: the verdict is FAIL."""
    INTERRUPTED = 130
    """``run``: interrupted (Ctrl-C); ``--resume`` continues it."""


EXIT_BY_VERDICT: dict[str, ExitCode] = {"PASS": ExitCode.OK, "FLAG": ExitCode.FLAG, "FAIL": ExitCode.FAIL,
                                        "error": ExitCode.INVALID}
"""Verdict label -> exit code (``error``: an audit-mlperf input that could not be read)."""


_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = "database or disk is full"
"""SQLite's message for SQLITE_FULL (the checkpoint's and the Optuna study's database)."""


def disk_full(exc: BaseException) -> BaseException | None:
    """The error that says the disk is full, found anywhere in ``exc``'s chain, or None. A full disk reaches
    the command wrapped: as an ``OSError`` (``ENOSPC``, ``EDQUOT``) from a plain write, as SQLite's
    ``database or disk is full`` from the checkpoint, and that one again inside SQLAlchemy's error (``.orig``)
    inside Optuna's ``StorageInternalError`` ("invalid data in the commit"), which names no disk at all."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        error = stack.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
            return error
        if isinstance(error, sqlite3.Error) and _SQLITE_FULL in str(error).lower():
            return error
        stack.extend(e for e in (error.__cause__, error.__context__, getattr(error, "orig", None))
                     if isinstance(e, BaseException))
    return None


def no_space_message(full: BaseException, what: str, then: str) -> str:
    """One line for a command that stopped on a full disk: what it was doing, that nothing written before
    was lost, and how to go on."""
    said = full.strerror if isinstance(full, OSError) and full.strerror else str(full).splitlines()[0][:120]
    return f"the disk is full ({said}) while {what}: what was written before is kept; {then}"
