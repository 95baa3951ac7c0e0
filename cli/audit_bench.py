"""``perfwarden audit-bench``: audit an A/B from benchmark result files a person already has.

Lays out a run directory from the files (``orchestrator/bench_import.py``), writes the patch claim, audits
it with the real auditor and prints the verdict as ``perfwarden audit`` does (exit 0 PASS, 10 FLAG, 20
FAIL, 3 bad input). The evidence is foreign, so it is unsealed: the best verdict is ``PASS (unsealed)``,
which is never banked. Without ``--out`` the run directory goes to a new temporary directory, which is
kept (its path is printed) so that ``perfwarden review`` can read the verdict trail; with ``--out`` it is
that new directory. On bad input nothing is kept: the directory this command created is removed.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import typer
from rich.console import Console

from perfwarden.auditor.rederive import METRICS
from perfwarden.formats.slo import GoodputSlo, SloError, parse_slo
from perfwarden.orchestrator.bench_import import BenchImport, BenchInputError, Engine, lay_out
from perfwarden.orchestrator.exit_codes import EXIT_BY_VERDICT, ExitCode
from perfwarden.orchestrator.render import print_error, print_verdict, printable

_DELTA = re.compile(r"^([+-]?\d+(?:\.\d+)?)\s*%?$")


def audit_bench(
    baseline: list[Path] = typer.Option(..., "--baseline", help="A baseline result file (repeat for each rep): "
                                        "vllm bench serve --save-result --save-detailed, or sglang.bench_serving "
                                        "--output-details."),
    candidate: list[Path] = typer.Option(..., "--candidate", help="A candidate result file (repeat for each rep)."),
    engine: str = typer.Option("vllm", "--engine", help="The serving engine the files measured: vllm or sglang "
                               "(its knobs are what server_info keys are attributed to)."),
    server_info: tuple[Path, Path] | None = typer.Option(None, "--server-info", help="Two JSON files, baseline then "
                                                         "candidate: what each server reported of its configuration."),
    server_log: tuple[Path, Path] | None = typer.Option(None, "--server-log", help="Two server logs, baseline then "
                                                        "candidate (vLLM: its launch arguments become server_info "
                                                        "when --server-info is not given)."),
    change: list[str] = typer.Option([], "--change", help="A knob the candidate changes, under the engine's own "
                                     "name (repeatable): the declared change; anything else that differs is a "
                                     "confound."),
    claim_delta: str | None = typer.Option(None, "--claim-delta", help="The stated headline delta, e.g. +12.5%."),
    metric: str = typer.Option("output_throughput", "--metric", help="Headline metric (request_goodput: goodput "
                               "at the SLO the files record)."),
    slo: str | None = typer.Option(None, "--slo", help="The goodput SLO the claim states, ttft_ms=...,tpot_ms=..."),
    out: Path | None = typer.Option(None, "--out", help="New directory for the run (default: a new temporary "
                                    "directory, kept and printed)."),
    json_out: bool = typer.Option(False, "--json", help="Print the verdict JSON to stdout."),
) -> None:
    """Lay out a run directory from benchmark result files, write the claim, audit it, print the verdict."""
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    spec = _spec(err, baseline, candidate, engine, server_info, server_log, change, claim_delta, metric, slo)
    run = _new_run_dir(err, out)
    try:
        claim = lay_out(run, spec)
    except (BenchInputError, OSError) as exc:
        shutil.rmtree(run, ignore_errors=True)  # this command made it: nothing in it is anyone else's
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
    # lazy: the auditor's statistics stack loads only once the input was accepted
    from perfwarden.auditor.audit import audit_path, write_verdict
    from perfwarden.auditor.claim_file import ClaimError

    try:
        verdict = audit_path(run, claim, claim_root=run)
        write_verdict(run, verdict)
    except (ClaimError, OSError) as exc:
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
    if json_out:
        sys.stdout.write(json.dumps(json.loads(verdict.model_dump_json()), indent=2, ensure_ascii=True) + "\n")
    else:
        console = Console(highlight=False)
        print_verdict(verdict, console)
    err.print(f"run directory: {printable(str(run))} (kept; perfwarden review {printable(str(run))})")
    raise typer.Exit(EXIT_BY_VERDICT[verdict.verdict])


def _spec(err: Console, baseline: list[Path], candidate: list[Path], engine: str,
          server_info: tuple[Path, Path] | None, server_log: tuple[Path, Path] | None, change: list[str],
          claim_delta: str | None, metric: str, slo: str | None) -> BenchImport:
    """The arguments as a ``BenchImport``; a bad value is a usage error (exit 2) or bad input (exit 3)."""
    if engine not in ("vllm", "sglang"):
        _usage(err, f"unknown engine {engine!r} (vllm, sglang)")
    if metric not in METRICS:
        _usage(err, f"unknown metric {metric!r} (one of {', '.join(METRICS)})")
    delta = None
    if claim_delta is not None:
        match = _DELTA.match(claim_delta.strip())
        if match is None:
            _usage(err, f"--claim-delta {claim_delta!r} is not a percentage such as +12.5%")
        delta = float(match.group(1)) if match else None
    goodput_slo: GoodputSlo | None = None
    if slo is not None:
        try:
            goodput_slo = parse_slo(slo)
        except SloError as exc:
            _usage(err, f"--slo: {exc}")
    engine_name: Engine = "vllm" if engine == "vllm" else "sglang"
    return BenchImport(baseline=list(baseline), candidate=list(candidate), engine=engine_name,
                       server_info=server_info, server_log=server_log, change=list(change), metric=metric,
                       delta_pct=delta, slo=goodput_slo)


def _usage(err: Console, message: str) -> None:
    print_error(err, message)
    raise typer.Exit(ExitCode.USAGE)


def _new_run_dir(err: Console, out: Path | None) -> Path:
    """``--out`` created new (an existing path is refused: nothing of someone else's is written into or
    removed), else a new temporary directory."""
    if out is None:
        return Path(tempfile.mkdtemp(prefix="perfwarden-audit-bench-"))
    try:
        out.mkdir(parents=True)
    except FileExistsError:
        print_error(err, f"--out {str(out)!r} exists; audit-bench writes a new directory")
        raise typer.Exit(ExitCode.INVALID) from None
    except OSError as exc:
        print_error(err, f"--out {str(out)!r}: {exc}")
        raise typer.Exit(ExitCode.INVALID) from None
    return out
