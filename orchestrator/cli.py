"""The ``perfwarden`` command line.

Exit codes are part of the contract (scripts and CI depend on them): see ``exit_codes.py``.
"""

from __future__ import annotations

import typer

from perfwarden.orchestrator import (cli_audit, cli_backtest, cli_cluster, cli_measure, cli_mlperf, cli_redteam, cli_review,
                                     cli_run)


app = typer.Typer(
    name="perfwarden",
    help="Optimize LLM serving and bank only what an independent auditor re-derives from raw data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

app.command("run")(cli_run.run)
app.command("measure")(cli_measure.measure)
app.command("audit")(cli_audit.audit)
app.command("audit-mlperf")(cli_mlperf.audit_mlperf)
app.command("backtest")(cli_backtest.backtest)
app.command("review")(cli_review.review)
app.command("redteam")(cli_redteam.redteam)
app.command("cluster")(cli_cluster.cluster)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
