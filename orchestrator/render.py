"""Terminal rendering shared by every command: untrusted text made safe, and the verdict view.

Claim fields, leg names, file names, finding messages, log excerpts and model outputs are untrusted:
an optimizing agent wrote them. Every command's human output goes through ``printable`` (control and
format characters shown as escapes, so ESC/CSI/OSC sequences, ``\r`` and bidi overrides never reach
the terminal) and through rich ``Text`` objects, never markup (a ``[/red]`` in a log line is text).
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfwarden.harness.records import Verdict, shown_verdict

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


def findings_table(verdict: Verdict) -> Table:
    table = Table(show_lines=False, expand=False, title=None, pad_edge=False)
    table.add_column("sev", no_wrap=True)
    table.add_column("code", no_wrap=True)
    table.add_column("measured / threshold", overflow="fold")
    table.add_column("evidence", overflow="fold")
    table.add_column("message", overflow="fold", ratio=1)
    for f in verdict.findings:
        ev = ", ".join(f"{e.file}:{e.line}" if e.line else e.file for e in f.evidence[:2]) or "-"
        table.add_row(Text(f.severity, style=SEVERITY_STYLE[f.severity]), safe_text(f.code),
                      Text(f"{short(f.measured)} / {short(f.threshold)}"), safe_text(ev), safe_text(f.message))
    return table


def print_verdict(verdict: Verdict, console: Console | None = None) -> None:
    console = console or Console()
    head = safe_text((shown_verdict(verdict.verdict, verdict.seal), VERDICT_STYLE[verdict.verdict]),
                     f"  action={verdict.action}",
                     f"  scope={verdict.scope}  claim={verdict.claim}")
    console.print(head)
    if verdict.headline_rederived is not None or verdict.headline_claimed is not None:
        console.print(Text(f"headline: claimed {short(verdict.headline_claimed)}  re-derived "
                           f"{short(verdict.headline_rederived)}"))
    if verdict.lever_declared or verdict.lever_detected:
        console.print(safe_text(f"lever: declared {verdict.lever_declared or '-'}  detected "
                                f"{verdict.lever_detected or '-'}"))
    if verdict.findings:
        console.print(findings_table(verdict))
    for item in verdict.not_checked:
        console.print(safe_text((f"not checked: {item}", "dim")))
    if verdict.degraded:
        console.print(safe_text((f"degraded: {'; '.join(verdict.degraded_reasons)}", "yellow")))
