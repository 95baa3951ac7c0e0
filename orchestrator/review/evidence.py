"""Re-read the raw lines findings cite, and say whether each is still the line the auditor hashed.

A verdict carries ``file:line``, the sha256 of that line and a 200-character excerpt. The review
quotes the line as it is *now* in the run directory and compares its hash with the recorded one, so a
reviewer sees both what the auditor read and whether the evidence changed since.

Lines of a ``bench_runs.jsonl`` can be tens of MB (one rep of 100k requests), so a line is located
by scanning for newlines in a memory map (C-speed ``find``, never a Python loop over bytes), only up
to the highest line asked for, and the scan is cached per file.
"""

from __future__ import annotations

import hashlib
import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from perfwarden.formats.records import EvidenceRef
from perfwarden.formats.safe_read import open_regular, read_bytes
from perfwarden.orchestrator.review.model import inside

EXCERPT = 200
"""Characters quoted, as the auditor's ``EvidenceRef.excerpt``."""

Status = Literal["verified", "changed", "no_hash", "missing", "whole_file", "outside", "unreadable"]
STATUS_TEXT: dict[str, str] = {
    "verified": "sha256 matches the line in the run",
    "changed": "the line in the run no longer matches the recorded sha256",
    "no_hash": "no sha256 was recorded; the line is quoted as it is now",
    "missing": "file or line not in the run; recorded excerpt shown",
    "whole_file": "the finding is about the whole file",
    "outside": "path is outside the run directory; not read",
    "unreadable": "file could not be read; recorded excerpt shown",
}


@dataclass(frozen=True)
class Quote:
    """One evidence reference, resolved against the run directory."""

    ref: EvidenceRef
    status: Status
    excerpt: str | None
    """The line as re-read (first ``EXCERPT`` characters), else the recorded excerpt."""

    @property
    def location(self) -> str:
        return f"{self.ref.file}:{self.ref.line}" if self.ref.line else self.ref.file


def _line_hashes(raw: bytes) -> set[str]:
    """Hashes under which the auditor may have recorded this line: the raw bytes (JSONL readers),
    without a trailing CR, or the UTF-8 text after replacement decoding (text-file readers)."""
    variants = {raw, raw.rstrip(b"\r"), raw.decode("utf-8", "replace").encode("utf-8")}
    return {hashlib.sha256(v).hexdigest() for v in variants}


TEXT_FILE_LIMIT = 32 << 20
"""Small non-JSONL files (logs, pretty-printed JSON) are read whole, as the auditor reads them."""


def _is_text_file(path: Path) -> bool:
    try:
        return path.suffix != ".jsonl" and path.stat().st_size <= TEXT_FILE_LIMIT
    except OSError:
        return False


class LineReader:
    """Finds line N of files under one run directory, remembering where lines start."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._starts: dict[Path, list[int]] = {}
        self._done: set[Path] = set()
        self._text: dict[Path, list[str]] = {}

    def line(self, path: Path, number: int) -> bytes | None:
        """Bytes of 1-based line ``number`` without its newline; None past the end of the file."""
        if number < 1:
            return None
        with open_regular(path, self.root, "evidence file") as handle:
            size = handle.seek(0, 2)
            if size == 0:
                return None
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                starts = self._starts.setdefault(path, [0])
                while len(starts) < number and path not in self._done:
                    nl = mm.find(b"\n", starts[-1])
                    if nl < 0 or nl + 1 >= size:
                        self._done.add(path)
                        break
                    starts.append(nl + 1)
                if number > len(starts):
                    return None
                begin = starts[number - 1]
                end = mm.find(b"\n", begin)
                return mm[begin: size if end < 0 else end]

    def text_line(self, path: Path, number: int) -> bytes | None:
        """Line ``number`` as the auditor's ``TextFile`` numbers it (``str.splitlines`` on the
        replacement-decoded text), so that logs with a stray form feed or CR still line up."""
        if path not in self._text:
            data = read_bytes(path, self.root, limit=TEXT_FILE_LIMIT, what="evidence file")
            self._text[path] = data.decode("utf-8", "replace").splitlines()
        lines = self._text[path]
        return lines[number - 1].encode("utf-8") if 1 <= number <= len(lines) else None

    def quote(self, ref: EvidenceRef) -> Quote:
        """Resolve one reference (never raises: a problem becomes the quote's status)."""
        path = inside(self.root, ref.file)
        if path is None:
            return Quote(ref, "outside", ref.excerpt)
        if ref.line is None:
            return Quote(ref, "whole_file" if path.is_file() else "missing", ref.excerpt)
        if not path.is_file():
            return Quote(ref, "missing", ref.excerpt)
        try:
            raw = self.text_line(path, ref.line) if _is_text_file(path) else self.line(path, ref.line)
        except (OSError, ValueError):
            return Quote(ref, "unreadable", ref.excerpt)
        if raw is None:
            return Quote(ref, "missing", ref.excerpt)
        excerpt = raw[: EXCERPT * 4].decode("utf-8", "replace")[:EXCERPT]
        if ref.sha256 is None:
            return Quote(ref, "no_hash", excerpt)
        return Quote(ref, "verified" if ref.sha256 in _line_hashes(raw) else "changed", excerpt)
