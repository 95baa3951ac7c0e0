"""``perfwarden review RUN_DIR [--compare RUN_B] [--html FILE] [--format md|json|csv]``.

Shows a run's verdict trail (or one verdict file): the verdicts in seq order by gate and scope, what
is banked per lever class, and every FLAG/FAIL with its findings and evidence. A run with no saved
verdict has its claims audited on the spot (nothing is written) and the view says so.

Exit codes: 0 the review was produced, 3 unreadable input or an output file that cannot be written,
2 usage. The review reports verdicts; it does not re-judge them, so its exit code never depends on
them (``perfwarden audit`` is the command whose exit code is the verdict).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import typer
from rich.console import Console

from perfwarden.orchestrator.exit_codes import ExitCode
from perfwarden.orchestrator.render import print_error, safe_text
from perfwarden.orchestrator.review.compare import compare as pair_reviews
from perfwarden.orchestrator.review.export import ExportFormat, export_pieces
from perfwarden.orchestrator.review.model import ReviewError, load_review
from perfwarden.orchestrator.review.report_html import render_compare_html, render_review_html
from perfwarden.orchestrator.review.terminal import print_comparison, print_review


def write_text_atomic(path: Path, text: str) -> None:
    """Write the report so that a reader never sees half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def review(
    run_dir: Path = typer.Argument(..., help="Run directory (all verdicts/*.json), or one verdict JSON file."),
    compare: Path | None = typer.Option(None, "--compare", help="A second run directory or verdict file: "
                                        "pair its verdicts with RUN_DIR's, claim by claim."),
    html: Path | None = typer.Option(None, "--html", help="Also write one self-contained HTML report to this file."),
    fmt: ExportFormat | None = typer.Option(None, "--format", case_sensitive=False,
                                      help="Print the review as md, json or csv instead of the terminal view."),
) -> None:
    """Review audit verdicts: trail by gate and scope, banked results per lever class, every FLAG/FAIL
    with its findings and evidence. Exit 0 when the review is produced, 3 on unreadable input."""
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    try:
        first = load_review(run_dir)
        second = load_review(compare) if compare is not None else None
    except ReviewError as exc:
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
    comp = pair_reviews(first, second) if second is not None else None
    if fmt is not None:
        for piece in export_pieces(first, fmt.value, comp):
            sys.stdout.write(piece)
    else:
        out = Console(highlight=False)
        print_comparison(comp, out) if comp is not None else print_review(first, out)
    if html is not None:
        page = render_compare_html(comp) if comp is not None else render_review_html(first)
        try:
            write_text_atomic(html, page)
        except OSError as exc:
            print_error(err, f"cannot write the HTML report {str(html)!r}: {exc}")
            raise typer.Exit(ExitCode.INVALID) from None
        err.print(safe_text(f"wrote {str(html)!r} ({len(page.encode('utf-8')) / 1024:.0f} KiB)"))
