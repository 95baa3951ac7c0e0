"""A benchmark's figures into ``docs/benchmarks.md``: one block per script, one row per figure.

A script that measures something worth keeping takes ``--record [DOC]`` (``add_flag``) and, at the end of
its ``main``, hands its figures to ``record``; without the flag nothing is written, so a casual run never
edits the docs. Each row says what it measures, the figure, and where it came from: the date (UTC), the
machine (CPU model, cores, memory), the load averages when the figures were taken (a shared machine's
figures are only comparable at a comparable load) and the command that reproduces it.

The script's block sits between two HTML comments naming the script; a run replaces the rows whose
``measures`` it measured again and keeps the others (a script with several modes, such as ``fuzz.py``,
keeps one row per mode). A script without a block gets one appended under its own heading. Everything
outside the blocks is prose written by hand and never touched. A document whose markers are broken (an
end without a begin, two blocks for one script) is refused with the line that breaks it, exit 3: the
figures printed above it are not lost, only not recorded.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
MAX_DOC_BYTES = 4 << 20
"""The document is prose and tables written by people and scripts: anything larger is not it."""
EXIT_BAD_INPUT = 3
"""The project's exit code for unreadable or invalid input (``orchestrator/exit_codes.py``)."""

COLUMNS = ("measures", "figure", "date", "machine", "load (1/5/15 min)", "command")
HEADER = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"


class RecordError(ValueError):
    """The document cannot take the rows (its markers are broken, or it is not the document)."""


@dataclass(frozen=True)
class Figure:
    """One measured figure of a script's run."""

    measures: str
    """What is measured, with the parameters that make it a different measurement (sizes, seeds, modes):
    the row's key in the script's block."""
    value: str
    """The figure as measured, units and the comparison it rests on included."""


@dataclass(frozen=True)
class Context:
    """Where and when the figures were measured."""

    date: str
    machine: str
    load: str
    command: str


@dataclass(frozen=True)
class Row:
    """One row of a script's block."""

    measures: str
    value: str
    date: str
    machine: str
    load: str
    command: str

    def cells(self) -> tuple[str, ...]:
        return (self.measures, self.value, self.date, self.machine, self.load, self.command)


def add_flag(parser: argparse.ArgumentParser) -> None:
    """``--record [DOC]``: write the run's figures into ``DOC`` (default ``docs/benchmarks.md``)."""
    parser.add_argument("--record", nargs="?", const=DOC, default=None, type=Path, metavar="DOC",
                        help="write this run's figures into DOC (default docs/benchmarks.md): its rows in the "
                             "script's block are replaced, other rows are kept; off by default")


def record(script: str, figures: Sequence[Figure], doc: Path | None) -> None:
    """Add or replace ``script``'s rows for ``figures`` in ``doc``; nothing when ``doc`` is None (no
    ``--record``). A broken document is one line on stderr and exit 3."""
    if doc is None:
        return
    try:
        write_rows(doc, script, [row_of(f, this_run(script)) for f in figures])
    except (RecordError, OSError) as exc:
        print(f"--record: the figures above were not recorded in {str(doc)!r}: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    print(f"recorded {len(figures)} figure(s) of {script} in {doc}")


# ------------------------------------------------------------------------------------------ the run


def this_run(script: str, argv: Sequence[str] | None = None) -> Context:
    """The date, machine, load and command of the running process."""
    now = datetime.datetime.now(datetime.timezone.utc)
    load = os.getloadavg()
    return Context(date=now.strftime("%Y-%m-%d"), machine=machine(),
                   load=f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}",
                   command=command_line(script, sys.argv[1:] if argv is None else argv))


def command_line(script: str, args: Sequence[str]) -> str:
    """The command that measures the same figures again: the script and its arguments, without
    ``--record`` and its document."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            if not arg.startswith("-"):
                continue
        if arg == "--record":
            skip_value = True
            continue
        if arg.startswith("--record="):
            continue
        kept.append(arg)
    return shlex.join(["python", f"benchmarks/{script}", *kept])


def machine() -> str:
    """CPU model, core count and memory: enough to tell two machines' figures apart."""
    cpu = platform.processor() or platform.machine()
    memory = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
        with open("/proc/meminfo", encoding="utf-8", errors="replace") as info:
            kib = next((int(line.split()[1]) for line in info if line.startswith("MemTotal:")), 0)
        memory = f", {kib / (1 << 20):.0f} GiB" if kib else ""
    except (OSError, ValueError, IndexError):
        pass  # not Linux: the model and core count still tell machines apart
    return f"{cpu}, {os.cpu_count()} cores{memory}"


def git_commit() -> str:
    """The checkout's short commit (``-dirty`` when the work tree differs from it), or '-' outside a git
    checkout: the figure belongs to the code that was measured."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=7"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "-"
    return done.stdout.strip() or "-"


def row_of(figure: Figure, context: Context) -> Row:
    return Row(measures=figure.measures, value=figure.value, date=f"{context.date} ({git_commit()})",
               machine=context.machine, load=context.load, command=f"`{context.command}`")


# ------------------------------------------------------------------------------------------ the document


def begin_marker(script: str) -> str:
    return f"<!-- begin benchmarks/{script}: rows written by its --record; edit the script, not the rows -->"


def end_marker(script: str) -> str:
    return f"<!-- end benchmarks/{script} -->"


_MARKER = re.compile(r"^<!-- (begin|end) benchmarks/([A-Za-z0-9_.-]+)[ :]")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def cell(text: str) -> str:
    """``text`` as one table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def render_row(row: Row) -> str:
    return "| " + " | ".join(cell(c) for c in row.cells()) + " |"


def parse_row(line: str, where: str) -> Row:
    """A table row of a block (the inverse of ``render_row``)."""
    parts = _CELL_SPLIT.split(line.strip())
    if len(parts) != len(COLUMNS) + 2 or parts[0] or parts[-1]:
        raise RecordError(f"{where}: a row of {len(COLUMNS)} cells expected, got {line.strip()[:120]!r}")
    cells = [part.strip().replace("\\|", "|") for part in parts[1:-1]]
    return Row(*cells)


def find_block(lines: Sequence[str], script: str) -> tuple[int, int] | None:
    """The line numbers of ``script``'s begin and end markers, or None when it has no block. Every marker in
    the document is checked: blocks do not nest, each is closed, and a script has at most one."""
    spans: dict[str, tuple[int, int]] = {}
    open_at: tuple[str, int] | None = None
    for number, line in enumerate(lines):
        match = _MARKER.match(line)
        if not match:
            continue
        kind, name = match.group(1), match.group(2)
        if kind == "begin":
            if open_at is not None:
                raise RecordError(f"line {number + 1}: a block for {name} begins inside the block of {open_at[0]}")
            if name in spans:
                raise RecordError(f"line {number + 1}: a second block for {name}")
            open_at = (name, number)
        else:
            if open_at is None or open_at[0] != name:
                raise RecordError(f"line {number + 1}: the end of a block for {name} that did not begin")
            spans[name] = (open_at[1], number)
            open_at = None
    if open_at is not None:
        raise RecordError(f"line {open_at[1] + 1}: the block for {open_at[0]} never ends")
    return spans.get(script)


def block_rows(lines: Sequence[str], span: tuple[int, int]) -> list[Row]:
    """The rows between a block's markers (its header and separator lines are not rows)."""
    rows = []
    for number in range(span[0] + 1, span[1]):
        text = lines[number].strip()
        if not text or text == HEADER.splitlines()[0] or set(text) <= set("|-: "):
            continue
        rows.append(parse_row(text, f"line {number + 1}"))
    return rows


def same_measure(text: str) -> str:
    """A row's key: its ``measures`` as a cell shows it (whitespace runs are one space)."""
    return " ".join(text.split())


def merged(old: Sequence[Row], new: Sequence[Row]) -> list[Row]:
    """``old`` with every row ``new`` measures again replaced in place, then the rows it adds."""
    by_measure = {same_measure(row.measures): row for row in new}
    kept = [by_measure.pop(same_measure(row.measures), row) for row in old]
    return kept + [row for row in new if same_measure(row.measures) in by_measure]


def render_block(script: str, rows: Sequence[Row]) -> list[str]:
    return [begin_marker(script), *HEADER.splitlines(), *(render_row(r) for r in rows), end_marker(script)]


def updated(text: str, script: str, rows: Sequence[Row]) -> str:
    """The document with ``script``'s block holding ``rows`` merged into it."""
    if len({same_measure(row.measures) for row in rows}) != len(rows):
        raise RecordError("two figures of one run measure the same thing: name what differs in 'measures'")
    lines = text.splitlines()
    span = find_block(lines, script)
    if span is None:
        tail = ["", f"## benchmarks/{script}", "", *render_block(script, rows)]
        return "\n".join([*lines, *tail]).lstrip("\n") + "\n"
    block = render_block(script, merged(block_rows(lines, span), rows))
    return "\n".join([*lines[:span[0]], *block, *lines[span[1] + 1:]]) + "\n"


def write_rows(doc: Path, script: str, rows: Sequence[Row]) -> None:
    """Merge ``rows`` into ``doc`` under a lock on its folder (two benchmarks recording at once each keep
    their rows), written to a temporary file and renamed over it (a reader sees the old or the new)."""
    folder = doc.parent
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        text = read_doc(doc)
        new = updated(text, script, rows)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder, prefix=f".{doc.name}.",
                                         delete=False) as out:
            out.write(new)
        os.chmod(out.name, 0o644)
        os.replace(out.name, doc)
    finally:
        os.close(handle)


def read_doc(doc: Path) -> str:
    """The document's text ('' when it does not exist yet); a link, a folder or an oversized file is
    not the document."""
    if not doc.exists() and not doc.is_symlink():
        return ""
    if doc.is_symlink() or not doc.is_file():
        raise RecordError(f"{str(doc)!r} is not a regular file")
    if doc.stat().st_size > MAX_DOC_BYTES:
        raise RecordError(f"{str(doc)!r} is over {MAX_DOC_BYTES >> 20} MiB: not the benchmarks document")
    try:
        return doc.read_text("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{str(doc)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
