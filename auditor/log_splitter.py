"""A server log's decoded text, fed in pieces, cut into the lines ``str.splitlines`` gives for the whole
text, handed on in batches; the first line over the bound ends the reading."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""What ``str.splitlines`` breaks at (``\r\n`` is one break): line numbers are the ones the gates
always cited."""
_BREAK = re.compile(f"[{re.escape(LINE_BREAKS)}]")


@dataclass(frozen=True)
class LongLine:
    """The first line over the per-line bound: the log is not read past it."""

    line: int
    chars: int
    sha256: str
    excerpt: str


@dataclass
class _Open:
    """An over-long line being read to its end: its number, its first ``bound`` characters, the sha256
    and the count of its characters so far."""

    line: int
    head: str
    digest: Any
    chars: int


class Splitter:
    """Cuts decoded text, fed in pieces, into the lines ``str.splitlines`` gives for the whole text, and
    stops at the first line over ``bound`` characters (kept cut at the bound, as the gates always saw
    it), hashing that line whole without holding it."""

    def __init__(self, sink: Callable[[int, list[str]], None], bound: int, excerpt: int):
        self.sink, self.bound, self.excerpt = sink, bound, excerpt
        self.carry = ""
        self.skip_lf = False
        self.line_no = 0
        self.long: _Open | None = None
        self.done = False
        self.long_line: LongLine | None = None
        """The first line over ``bound``, once read to its end."""

    def feed(self, text: str, final: bool = False) -> None:
        if self.done:
            return
        if self.long is not None:
            self._long_tail(self.long, text, final)
            return
        if self.skip_lf and text:
            self.skip_lf = False
            text = text[1:] if text[0] == "\n" else text
        text = self.carry + text if self.carry else text
        parts = text.splitlines()
        if text and text[-1] in LINE_BREAKS:
            self.carry, self.skip_lf = "", text[-1] == "\r"
        elif parts and not final:
            self.carry = parts.pop()
        else:
            self.carry = ""
        if self.bound and parts and max(map(len, parts)) > self.bound:
            k = next(k for k, p in enumerate(parts) if len(p) > self.bound)
            self._emit(parts[:k])
            self._long_end(self._long_start(parts[k]))
            return
        self._emit(parts)
        if self.bound and len(self.carry) > self.bound:
            long = self._long_start(self.carry)
            self.carry = ""
            if final:
                self._long_end(long)

    def _emit(self, parts: list[str]) -> None:
        self.sink(self.line_no + 1, parts)
        self.line_no += len(parts)

    def _long_start(self, text: str) -> _Open:
        self.long = _Open(self.line_no + 1, text[:self.bound], hashlib.sha256(text.encode("utf-8")), len(text))
        return self.long

    def _long_tail(self, long: _Open, text: str, final: bool) -> None:
        m = _BREAK.search(text)
        piece = text if m is None else text[:m.start()]
        long.digest.update(piece.encode("utf-8"))
        long.chars += len(piece)
        if m is not None or final:
            self._long_end(long)

    def _long_end(self, long: _Open) -> None:
        self.long_line = LongLine(long.line, long.chars, long.digest.hexdigest(), long.head[:self.excerpt])
        self.sink(long.line, [long.head])
        self.line_no = long.line
        self.done = True
