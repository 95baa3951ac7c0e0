"""``perfwarden audit RUN_DIR --claim CLAIM.json [--json] [--save]``."""

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
    quality_registry: Path | None = typer.Option(None, "--quality-registry", help="A JSON file of extra registered "
                                                 "quality evals ({\"evals\": {id: {metric, max_drop, min_n, "
                                                 "items_sha256, ...}}}); also PERFWARDEN_QUALITY_REGISTRY."),
) -> None:
    """Audit one claim against the run's raw files. Exit 0 PASS, 10 FLAG, 20 FAIL, 3 invalid input."""
    err = Console(stderr=True, soft_wrap=True)
    use_quality_registry(quality_registry, err)
    try:
        verdict = audit_path(run_dir, claim)
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


def use_quality_registry(path: Path | None, err: Console) -> None:
    """Register the user's quality evals (``--quality-registry`` or the environment) and validate them
    before any audit: an unusable registry is invalid input (exit 3), not a degraded verdict."""
    import os

    from perfwarden.agents.auditor import registry

    if path is not None:
        os.environ[registry.QUALITY_REGISTRY_ENV] = str(path)
    try:
        registry.quality_evals()
    except registry.RegistryError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        raise typer.Exit(EXIT_INVALID) from None
