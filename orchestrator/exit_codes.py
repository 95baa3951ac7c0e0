"""The ``perfwarden`` command line's exit codes, in one place (scripts and CI depend on them).

A FAIL never exits 0; unreadable or invalid input is 3, never a traceback. The embedded server process
has its own codes (``harness/embedded_server.py``): they are the server's contract with the lab, not the
CLI's with its users.
"""

from __future__ import annotations

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
    FLAG = 10
    """``audit``/``audit-mlperf``: the verdict is FLAG."""
    FAIL = 20
    """``audit``/``audit-mlperf``: the verdict is FAIL."""
    INTERRUPTED = 130
    """``run``: interrupted (Ctrl-C); ``--resume`` continues it."""


EXIT_BY_VERDICT: dict[str, ExitCode] = {"PASS": ExitCode.OK, "FLAG": ExitCode.FLAG, "FAIL": ExitCode.FAIL,
                                        "error": ExitCode.INVALID}
"""Verdict label -> exit code (``error``: an audit-mlperf input that could not be read)."""
