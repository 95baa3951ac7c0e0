"""``perfwarden audit RUN_DIR --claim CLAIM.json [--key KEY] [--json] [--save]``."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from perfwarden.agents.auditor.audit import ClaimError, audit_path, write_verdict
from perfwarden.orchestrator.render import print_verdict

EXIT_BY_VERDICT = {"PASS": 0, "FLAG": 10, "FAIL": 20}
EXIT_INVALID = 3


def audit(
    run_dir: Path = typer.Argument(..., help="Run directory holding the raw evidence (design §2)."),
    claim: Path = typer.Option(..., "--claim", help="Claim JSON to audit."),
    json_out: bool = typer.Option(False, "--json", help="Print the verdict JSON to stdout."),
    save: bool = typer.Option(False, "--save", help="Also write verdicts/<seq>-<scope>.json in the run."),
    key: Path | None = typer.Option(None, "--key", help="The run's seal key (default: look it up in the key store, "
                                    "$PERFWARDEN_KEY_DIR or ~/.local/share/perfwarden/keys, by the run's seal id)."),
) -> None:
    """Audit one claim against the run's raw files. Exit 0 PASS, 10 FLAG, 20 FAIL, 3 invalid input."""
    err = Console(stderr=True, soft_wrap=True)
    try:
        verdict = audit_path(run_dir, claim, key=key)
    except ClaimError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(EXIT_INVALID) from None
    if save:
        try:
            write_verdict(run_dir, verdict)
        except OSError as exc:
            err.print(f"[red]error:[/red] cannot write the verdict into {str(run_dir)!r}: {exc}")
            raise typer.Exit(EXIT_INVALID) from None
    if json_out:
        sys.stdout.write(verdict.model_dump_json(indent=2) + "\n")
    else:
        print_verdict(verdict, Console())
    raise typer.Exit(EXIT_BY_VERDICT[verdict.verdict])
