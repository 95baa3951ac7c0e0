"""One batch of log lines as one text, so a pattern is run once over the batch in C instead of once per
line in Python, and its matches are mapped back to line numbers.

Lines come from ``str.splitlines`` and so hold no line break; they are joined with ``\\n``. A pattern
whose matches cannot hold a ``\\n`` (:func:`confined`) then matches the joined text exactly where it
matches each line alone: ``\\b`` sees the ``\\n`` before and after a line as it sees the line's ends,
and no match runs from one line into the next, so the first match ``finditer`` gives in a line is the
first match ``search`` gives on that line.
"""

from __future__ import annotations

import re
from typing import AnyStr, Callable, Sequence

import numpy as np
import numpy.typing as npt

Lines = npt.NDArray[np.int64]
"""Indices of lines in a batch, ascending."""

_ALLOWED_NEWLINE_CLASS = "[^\\n]"
_UNCONFINABLE = re.compile(r"\\[WDAZn\\]|\(\?<|\^|\$|\[[^\]]*\\s")
"""What can match or assert across a ``\\n`` and is not rewritten (a class holding ``\\s`` included)."""


def confined(pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    """``pattern`` with ``\\s`` kept off ``\\n``: on a line (which holds no line break) the same pattern,
    on joined lines one whose matches stay in one line. None when that cannot be told from the source
    (a negated class other than ``[^\\n]``, anchors, look-behind, ``\\W``, ``\\D``, ``DOTALL``...): the
    caller reads those lines one by one."""
    source = pattern.pattern
    if pattern.flags & (re.DOTALL | re.MULTILINE | re.VERBOSE):
        return None
    if _UNCONFINABLE.search(source.replace(_ALLOWED_NEWLINE_CLASS, "")):
        return None
    return re.compile(_literal_first(source.replace("\\s", "[^\\S\\n]")), pattern.flags)


_BOUNDARY_WORD = re.compile(r"\\b(\w+)")


def _literal_first(source: str) -> str:
    """``\\bword...`` as ``word(?<=\\bword)...``: the same matches, but ``re`` finds candidates with its
    fast literal search instead of trying the pattern at every position of a megabyte of text."""
    m = _BOUNDARY_WORD.match(source)
    if m is None:
        return source
    word = m.group(1)
    if source[m.end():m.end() + 1] in ("?", "*", "+", "{"):
        word = word[:-1]  # the last letter is quantified: not part of the literal
    if not word:
        return source
    return f"{word}(?<=\\b{word}){source[2 + len(word):]}"


class BatchLines:
    """Lines joined by ``\\n``, with the offset each starts at; ``fold`` gives the text a case-folded
    twin pattern runs on (character for character the same positions, line breaks untouched)."""

    def __init__(self, parts: list[str], fold: Callable[[str], str], text: str | None = None):
        self.parts = parts
        self.text = "\n".join(parts) if text is None else text
        self.starts = line_starts(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)))
        self._fold = fold
        self._folded: str | None = None

    @property
    def folded(self) -> str:
        if self._folded is None:
            self._folded = self._fold(self.text)
            if len(self._folded) != len(self.text):  # cannot happen (fold is per character); never misalign
                raise ValueError("folding changed the batch's length")
        return self._folded

    def line_of(self, positions: npt.NDArray[np.int64]) -> Lines:
        return np.searchsorted(self.starts, positions, side="right").astype(np.int64) - 1

    def first_matches(self, pattern: re.Pattern[str], folded: bool) -> tuple[Lines, list[re.Match[str]]]:
        """The lines ``pattern`` (a :func:`confined` one) matches, and its first match in each."""
        matches = list(pattern.finditer(self.folded if folded else self.text))
        if not matches:
            return np.zeros(0, dtype=np.int64), []
        lines = self.line_of(np.fromiter(map(re.Match.start, matches), dtype=np.int64, count=len(matches)))
        first = np.flatnonzero(np.diff(lines, prepend=-1))
        return lines[first], [matches[j] for j in first.tolist()]

    def holding(self, patterns: list[re.Pattern[str]], folded: bool) -> Lines:
        """The lines one of ``patterns`` (:func:`confined` ones) matches somewhere (one pattern a literal
        or starting with one each: an alternation of literals makes ``re`` try every position)."""
        return np.unique(np.concatenate([np.zeros(0, dtype=np.int64)]
                                        + [self.first_matches(p, folded)[0] for p in patterns]))


def bigrams(data: bytes) -> npt.NDArray[np.uint16]:
    """Each pair of adjacent bytes of ``data`` as one number."""
    raw = np.frombuffer(data, dtype=np.uint8)
    return ((raw[:-1].astype(np.uint16) << 8) | raw[1:]).astype(np.uint16, copy=False)


def present_literals(text: bytes, literals: Sequence[bytes],
                     pairs: Sequence[npt.NDArray[np.uint16]] | None = None) -> tuple[bytes, ...]:
    """The ``literals`` that occur in ``text``. A literal one of whose byte pairs ``text`` lacks cannot
    occur, and is ruled out without a search: a batch of a few line shapes has a few hundred of the 65,536
    pairs, so most of dozens of literals cost one table lookup instead of a scan of the batch each."""
    seen = np.zeros(1 << 16, dtype=bool)
    seen[bigrams(text)] = True
    pairs = [bigrams(n) for n in literals] if pairs is None else pairs  # ``bigrams`` of each literal
    return tuple(n for n, p in zip(literals, pairs) if seen[p].all() and n in text)


def line_starts(lengths: npt.NDArray[np.int64]) -> Lines:
    """Where each line starts in the lines of these lengths joined by one separator each."""
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1] + 1, out=starts[1:])
    return starts


def holding_literal(text: AnyStr, starts: Lines, literal: AnyStr) -> npt.NDArray[np.bool_]:
    """Which lines of ``text`` (lines joined by ``\\n``, starting at ``starts``) hold ``literal`` (which
    holds no ``\\n``). ``split`` finds the occurrences left to right in C and the lengths of the pieces
    between them say where each starts: the cost follows the occurrences, not the lines. An occurrence
    the scan steps over overlaps one found just before it, in the same line."""
    held = np.zeros(len(starts), dtype=bool)
    pieces = text.split(literal)
    if len(pieces) > 1:
        gaps = np.fromiter(map(len, pieces[:-1]), dtype=np.int64, count=len(pieces) - 1)
        at = np.cumsum(gaps + len(literal)) - len(literal)
        held[np.searchsorted(starts, at, side="right") - 1] = True
    return held
