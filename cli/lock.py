"""The commands' side of the run's writer lock (``harness/run_lock.py``): hold it, or exit 3 saying why."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import typer
from rich.console import Console

from perfwarden.harness import run_lock
from perfwarden.orchestrator.exit_codes import ExitCode, disk_full
from perfwarden.orchestrator.render import print_error


def hold_or_exit(stack: ExitStack, err: Console, run: Path, *, create: bool) -> run_lock.RunLock:
    """Hold ``run``'s writer lock until ``stack`` closes; exit 3 when another command holds it (the message
    names it), when the run directory is missing (and not ``create``), or when its lock file is unusable."""
    try:
        return stack.enter_context(run_lock.hold(run, create=create))
    except (run_lock.RunBusy, run_lock.NotARunDirectory) as exc:
        print_error(err, exc)
    except OSError as exc:  # a link, FIFO or folder at writer.lock; a read-only folder
        if disk_full(exc) is not None:
            raise  # the command's full-disk handler names it and exits NO_SPACE
        print_error(err, f"cannot take the writer lock of the run {str(run)!r}: {exc}")
    raise typer.Exit(ExitCode.INVALID)
