"""Terminal rendering shared by every command: untrusted text made safe, and the verdict view.

Claim fields, leg names, file names, finding messages, log excerpts and model outputs are untrusted:
an optimizing agent wrote them. Every command's human output goes through ``printable`` (control and
format characters shown as escapes, so ESC/CSI/OSC sequences, ``\r`` and bidi overrides never reach
the terminal) and through rich ``Text`` objects, never markup (a ``[/red]`` in a log line is text).
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len, chop_cells
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from perfwarden.formats.records import Finding, Verdict, shown_verdict

VERDICT_STYLE = {"PASS": "bold green", "FLAG": "bold yellow", "FAIL": "bold red"}
SEVERITY_STYLE = {"INFO": "dim", "FLAG": "yellow", "FAIL": "red"}
_ESCAPED = ("Cc", "Cf", "Cs", "Zl", "Zp")
"""Control, format (bidi overrides, zero-width), lone surrogates (undecodable file-name bytes, which
cannot even be encoded to the terminal), line and paragraph separators."""


def printable(value: object) -> str:
    """Text safe for a terminal: control and format characters (ESC, CSI, OSC, ``\r``, bidi overrides,
    newlines) are shown as escapes instead of being interpreted; a tab becomes a space."""
    text = str(value)
    if text.isascii() and text.isprintable():
        return text
    out = []
    for ch in text:
        if ch == "\t":
            out.append(" ")
        elif unicodedata.category(ch) in _ESCAPED:
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


_MD_SPECIAL = "\\`*[]|#:@"
"""Backslash-escaped in markdown: code spans, emphasis, links and images, table pipes, headings, and the
``:`` and ``@`` that GitHub's autolinks (``https://…``, ``a@b.c``) start from."""
_WWW = re.compile(r"(?i)(www)\.")


def md_cell(value: object) -> str:
    """Untrusted text safe anywhere in a markdown line (a table cell, a list item, after a label): HTML
    entity-escaped (renderers pass raw HTML through), control characters shown as escapes, newlines
    flattened, and heading, link, image, code, emphasis, pipe and autolink syntax backslash-escaped. The
    report (``report.md``) and ``review --format md`` both use it: one place for what markdown may
    interpret."""
    text = html.escape(printable(" ".join(str(value).splitlines())), quote=False)
    return _WWW.sub(r"\1\\.", "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in text))


def safe_text(*parts: object | tuple[object, str]) -> Text:
    """``Text.assemble`` over printable parts: a part is a value, or ``(value, style)``."""
    return Text.assemble(*[(printable(p[0]), p[1]) if isinstance(p, tuple) else printable(p) for p in parts])


def print_error(console: Console, message: object, label: str = "error") -> None:
    """``error: <message>`` with the message shown as text (it quotes untrusted names and paths)."""
    console.print(safe_text((f"{label}: ", "red"), message))


def short(value: Any, width: int = 28) -> str:
    if value is None:
        return "-"
    text = printable(f"{value:.4g}" if isinstance(value, float) else str(value))
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_value(value: Any, width: int = 40, spaced: bool = False) -> str:
    """A measured value or threshold in one short line (dicts and lists as compact JSON; ``spaced`` puts
    a space after each separator, so a terminal wraps a long value between items, not inside one)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        try:
            text = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":"), sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


class Clipped:
    """``text`` laid out in the width rich gives it, in at most ``max_lines`` lines.

    A text that needs more lines keeps its start and its end around an ellipsis and is folded at
    character boundaries (word wrapping could spill the cut text onto one more line): the end of a path
    holds the file name and line number, the start of a JSON value its first keys. Every field of a
    finding but its message is shown this way, so a hostile 10,000-character file name or threshold
    costs a reader three lines, never a screenful.
    """

    def __init__(self, text: Text, max_lines: int = 3, tail_share: float = 0.5) -> None:
        self.text = text
        self.max_lines = max_lines
        self.tail_share = tail_share

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.lines(console, max(1, options.max_width))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        # at least 12 cells when it can: a grid squeezing a long value to a sliver would clip it to nothing
        return Measurement(min(self.text.cell_len, options.max_width, 12), min(self.text.cell_len, options.max_width))

    def lines(self, console: Console, width: int) -> list[Text]:
        wrapped = list(self.text.wrap(console, width, overflow="fold"))
        if len(wrapped) <= self.max_lines:
            return wrapped
        return fold_cells(clip_middle(self.text, self.max_lines * width - 1, self.tail_share), width)


def clip_middle(text: Text, cells: int, tail_share: float = 0.5) -> Text:
    """``text`` cut to at most ``cells`` cells plus one for the ellipsis: its start and its end, the end
    taking ``tail_share`` of the cells."""
    head_budget = cells - round(cells * tail_share)
    head = _prefix_chars(text.plain, head_budget)
    tail = _prefix_chars(text.plain[::-1], cells - head_budget)
    return Text.assemble(text[:head], ("…", "dim"), text[len(text.plain) - tail:] if tail else "")


def _prefix_chars(plain: str, cells: int) -> int:
    """How many leading characters of ``plain`` fit in ``cells`` terminal cells."""
    used = 0
    for count, ch in enumerate(plain):
        used += cell_len(ch)
        if used > cells:
            return count
    return len(plain)


def fold_cells(text: Text, width: int) -> list[Text]:
    """``text`` cut into lines of at most ``width`` cells at character boundaries (wide characters kept
    whole)."""
    offsets, at = [], 0
    for chunk in chop_cells(text.plain, width)[:-1]:
        at += len(chunk)
        offsets.append(at)
    return list(text.divide(offsets))


MAX_VALUE_CHARS = 2000
"""Characters of a measured value or threshold formatted before ``Clipped`` cuts it to the screen: a
bound on the work a hostile value costs, far above three lines of any terminal."""


EVIDENCE_LINES = 3
"""Evidence lines a finding block shows: all of them up to this many, else the first ones and a count."""


def evidence_lines(finding: Finding) -> list[Text]:
    """``file:line`` of each evidence reference a finding cites."""
    return [safe_text(f"{e.file}:{e.line}" if e.line else e.file) for e in finding.evidence]


def finding_block(finding: Finding, evidence: Sequence[Text]) -> Group:
    """One finding as a block a person reads at 80 columns: severity, code, gate and the action it asks
    on one line; the message as a paragraph; then measured, threshold and evidence, each in at most
    three lines (``Clipped``) under a label. ``evidence`` is one line per reference (the review adds
    whether each line still hashes as the auditor read it)."""
    head = safe_text((finding.severity, SEVERITY_STYLE[finding.severity]), " ", (finding.code, "bold"),
                     (f"  gate {finding.gate}" if finding.gate else "", "dim"),
                     (f"  asks {finding.action}" if finding.action else "", "dim"))
    fields = Table.grid(padding=(0, 1))
    fields.add_column(style="dim", no_wrap=True)
    fields.add_column(ratio=1)
    if finding.measured is not None or finding.threshold is not None:
        fields.add_row("measured", Clipped(safe_text(fmt_value(finding.measured, MAX_VALUE_CHARS, spaced=True))))
        fields.add_row("threshold", Clipped(safe_text(fmt_value(finding.threshold, MAX_VALUE_CHARS, spaced=True))))
    shown = list(evidence) if len(evidence) <= EVIDENCE_LINES else [
        *evidence[:EVIDENCE_LINES - 1], Text(f"… and {len(evidence) - EVIDENCE_LINES + 1} more", style="dim")]
    for i, line in enumerate(shown):
        fields.add_row("evidence" if i == 0 else "", Clipped(line, max_lines=1, tail_share=0.75))
    return Group(Clipped(head), Padding(Group(safe_text(finding.message), fields), (0, 0, 0, 4), expand=False))


def print_verdict(verdict: Verdict, console: Console | None = None) -> None:
    """``perfwarden audit``'s human view: the verdict line, headline and lever, each finding as a block
    (``finding_block``), then what was not checked and why the verdict is degraded, as indented
    paragraphs."""
    console = console or Console()
    console.print(Clipped(safe_text((shown_verdict(verdict.verdict, verdict.seal), VERDICT_STYLE[verdict.verdict]),
                                    f"  action={verdict.action}", f"  scope={verdict.scope}  claim={verdict.claim}")))
    if verdict.headline_rederived is not None or verdict.headline_claimed is not None:
        console.print(Text(f"headline: claimed {short(verdict.headline_claimed)}  re-derived "
                           f"{short(verdict.headline_rederived)}"))
    if verdict.goodput is not None:
        console.print(safe_text(verdict.goodput.describe()))
    if verdict.lever_declared or verdict.lever_detected:
        console.print(safe_text(f"lever: declared {verdict.lever_declared or '-'}  detected "
                                f"{verdict.lever_detected or '-'}"))
    if verdict.findings:
        console.print(Text(f"findings ({len(verdict.findings)}):", style="bold"))
    for finding in verdict.findings:
        console.print(Padding(finding_block(finding, evidence_lines(finding)), (0, 0, 0, 2), expand=False))
    print_notes(console, "not checked", verdict.not_checked, "dim")
    if verdict.degraded:
        print_notes(console, "degraded", verdict.degraded_reasons, "yellow")


def print_notes(console: Console, label: str, notes: Sequence[str], style: str) -> None:
    """``label:`` then each note as a paragraph under a dash, its wrapped lines indented under its first."""
    if not notes:
        return
    console.print(Text(f"{label}:", style=style))
    for note in notes:
        console.print(hanging("- ", safe_text((note, style)), indent=2))


def hanging(marker: str, body: Text, indent: int) -> RenderableType:
    """``marker`` then ``body`` wrapped so that every line after the first starts under the body."""
    grid = Table.grid()
    grid.add_column(width=len(marker) + indent, no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row(Text(" " * indent + marker), body)
    return grid
