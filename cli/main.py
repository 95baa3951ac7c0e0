"""The ``perfwarden`` command line.

Exit codes are part of the contract (scripts and CI depend on them): see ``orchestrator/exit_codes.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from perfwarden.cli import audit as cli_audit
from perfwarden.cli import audit_bench as cli_audit_bench
from perfwarden.cli import backtest as cli_backtest
from perfwarden.cli import cluster as cli_cluster
from perfwarden.cli import measure as cli_measure
from perfwarden.cli import mlperf as cli_mlperf
from perfwarden.cli import redteam as cli_redteam
from perfwarden.cli import review as cli_review
from perfwarden.cli import run as cli_run
from perfwarden.orchestrator.exit_codes import ExitCode, disk_full, no_space_message
from perfwarden.orchestrator.render import print_error


app = typer.Typer(
    name="perfwarden",
    help="Optimize LLM serving and bank only what an independent auditor re-derives from raw data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)



def stops_on_full_disk(command: Callable[..., Any], doing: str, then: str) -> Callable[..., Any]:
    """``command`` with a full disk named as one, exit ``NO_SPACE``, wherever in it the disk filled (a
    write, the checkpoint's SQLite, the Optuna study's): never a traceback or another error's words."""

    @functools.wraps(command)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            full = disk_full(exc)
            if full is None:
                raise
            print_error(Console(stderr=True, soft_wrap=True, highlight=False), no_space_message(full, doing, then))
            raise typer.Exit(ExitCode.NO_SPACE) from None

    return guarded


_AGAIN = "free space, then run the command again"
app.command("run")(cli_run.run)  # names the run to resume itself (cli_run)
app.command("measure")(stops_on_full_disk(cli_measure.measure, "measuring the leg",
                                          f"{_AGAIN}: a rep whose line was written is not measured twice"))
app.command("audit")(stops_on_full_disk(cli_audit.audit, "auditing", f"{_AGAIN} (no verdict was saved)"))
app.command("audit-bench")(stops_on_full_disk(cli_audit_bench.audit_bench, "auditing the bench files", _AGAIN))
app.command("audit-mlperf")(stops_on_full_disk(cli_mlperf.audit_mlperf, "auditing", _AGAIN))
app.command("backtest")(stops_on_full_disk(cli_backtest.backtest, "backtesting", _AGAIN))
app.command("review")(stops_on_full_disk(cli_review.review, "writing the review", _AGAIN))
app.command("redteam")(stops_on_full_disk(cli_redteam.redteam, "running the red team", _AGAIN))
app.command("cluster")(cli_cluster.cluster)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
