"""``perfwarden audit RUN_DIR --claim CLAIM.json [--key KEY] [--json] [--save]``."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path

import typer
from rich.console import Console

from perfwarden.auditor import registry
from perfwarden.auditor.claim_file import ClaimError, load_claim
from perfwarden.auditor.manifest import KeyFileError, read_operator_key
from perfwarden.cli.lock import hold_or_exit
from perfwarden.formats.safe_write import check_dir
from perfwarden.orchestrator.exit_codes import EXIT_BY_VERDICT, ExitCode, disk_full
from perfwarden.orchestrator.render import print_error, print_verdict


def audit(
    run_dir: Path = typer.Argument(..., help="Run directory holding the raw evidence (design §2)."),
    claim: Path = typer.Option(..., "--claim", help="Claim JSON to audit."),
    json_out: bool = typer.Option(False, "--json", help="Print the verdict JSON to stdout."),
    save: bool = typer.Option(False, "--save", help="Also write verdicts/<seq>-<scope>.json in the run."),
    quality_registry: Path | None = typer.Option(None, "--quality-registry", help="A JSON file of extra registered "
                                                 "quality evals ({\"evals\": {id: {metric, max_drop, min_n, "
                                                 "items_sha256, ...}}}); also PERFWARDEN_QUALITY_REGISTRY."),
    key: Path | None = typer.Option(None, "--key", help="The run's seal key (default: look it up in the key store, "
                                    "$PERFWARDEN_KEY_DIR or ~/.local/share/perfwarden/keys, by the run's seal id)."),
) -> None:
    """Audit one claim against the run's raw files. Exit 0 PASS, 10 FLAG, 20 FAIL, 3 invalid input."""
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    use_quality_registry(quality_registry, err)
    try:
        load_claim(claim)  # refuse a claim that is not one before the auditor (and its imports) start
    except ClaimError as exc:
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
    if key is not None:  # like the claim: a key that is not a small regular file is refused at once
        try:
            read_operator_key(key)
        except KeyFileError as exc:
            print_error(err, exc)
            raise typer.Exit(ExitCode.INVALID) from None
    # lazy: scipy: other commands start without the auditor's statistics
    from perfwarden.auditor.audit import audit_path, write_verdict

    with ExitStack() as held:
        if save:  # a writer: the run's writer lock from before the audit to the verdict written (design §2)
            hold_or_exit(held, err, Path(run_dir), create=False)
            try:  # before the audit: a link or FIFO where the verdict goes is invalid input, nothing written
                check_dir(Path(run_dir) / "verdicts", run_dir)
            except OSError as exc:
                print_error(err, f"cannot write the verdict into {str(run_dir)!r}: {exc}")
                raise typer.Exit(ExitCode.INVALID) from None
        try:
            verdict = audit_path(run_dir, claim, key=key)
        except ClaimError as exc:
            print_error(err, exc)
            raise typer.Exit(ExitCode.INVALID) from None
        if save:
            try:
                write_verdict(run_dir, verdict)
            except OSError as exc:
                if disk_full(exc) is not None:
                    raise  # named as a full disk by the command's guard (cli.py)
                print_error(err, f"cannot write the verdict into {str(run_dir)!r}: {exc}")
                raise typer.Exit(ExitCode.INVALID) from None
    if json_out:
        # ASCII-only JSON: a C1 control or a bidi override in a message is escaped, not printed raw.
        sys.stdout.write(json.dumps(json.loads(verdict.model_dump_json()), indent=2, ensure_ascii=True) + "\n")
    else:
        print_verdict(verdict, Console(highlight=False))
    raise typer.Exit(EXIT_BY_VERDICT[verdict.verdict])


def use_quality_registry(path: Path | None, err: Console) -> None:
    """Register the user's quality evals (``--quality-registry`` or the environment) and validate them
    before any audit: an unusable registry is invalid input (exit 3), not a degraded verdict."""
    import os

    if path is not None:
        os.environ[registry.QUALITY_REGISTRY_ENV] = str(path)
    try:
        registry.quality_evals()
    except registry.RegistryError as exc:
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
