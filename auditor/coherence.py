"""Is a set of model outputs coherent text? A cheap, deterministic check that needs no LLM.

Why it exists: parity between a baseline and a candidate is only evidence when the baseline itself says
something. A reference that emits gibberish (broken weights, a bad kernel, a wrong tokenizer) makes every
later "exact match" meaningless, so the baseline gate checks the reference first (NONCOHERENT_REFERENCE).

How: each text gets a few plain statistics, combined into one score in [0, 1]:

    score = lexical_coverage * (1 - repetition) * (1 - garbage_fraction) * entropy_factor

- ``lexical_coverage``: fraction of its words that are common English words (a project-written list
  shipped as package data, with simple inflections stripped). Real English sits around 0.6-0.9; sampled
  sub-word soup and runs of rare tokens sit far lower.
- ``repetition``: the larger of (a) the fraction of word trigrams that repeat an earlier trigram and (b)
  the fraction of words equal to the word before. Random-weight models decode greedily into one token
  repeated ("FBI FBI FBI ...").
- ``garbage_fraction``: fraction of non-space characters that are non-ASCII, control characters or the
  Unicode replacement character (byte soup decodes to these).
- ``entropy_factor``: the character entropy mapped linearly from 0 at ``ENTROPY_LOW`` bits to 1 at
  ``ENTROPY_HIGH`` bits; "\\r\\n\\r\\n..." or "ockockock" have very low character entropy.

The set's score is the median of the per-text scores (a few degenerate loops from a real small model do
not condemn the set; a mostly-gibberish set cannot hide behind a few good texts). Texts shorter than
``MIN_CHARS`` characters ("", "Paris.", " for") are too short to judge: they are counted and reported,
but not scored. Long texts without a single word (newline runs, byte soup) *are* judged, and score 0.
A set with fewer than ``MIN_JUDGED`` judgeable texts is *not* coherent (no evidence is not evidence of
coherence) and says so in ``reasons``.

The threshold comes from a real calibration (``proof/calibration/coherence.md``): greedy outputs of the
real SmolLM2 weights against the same architecture with random weights, plus degenerate strings.
"""

from __future__ import annotations

import hashlib
import math
import operator
import re
import statistics
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from importlib import resources

import numpy as np

from pydantic import BaseModel, ConfigDict

COHERENCE_VERSION = 1
"""Bump when the statistics or the formula change (recorded calibrations name the version they used)."""
THRESHOLD = 0.47
"""Per-text and set-level threshold: the midpoint (rounded down) between the lowest real-weight chat
output (0.650) and the highest negative (0.293, uniformly random tokens) in the recorded calibration,
``proof/calibration/coherence.md``; margin ~0.18 on both sides."""
MIN_CHARS = 16
"""Texts with fewer characters than this are too short to judge (whitespace counts: a long run of
newlines is a judgeable, degenerate output)."""
MIN_JUDGED = 3
"""A set needs this many judged texts (or all of them, when it has fewer) to be called coherent."""
ENTROPY_LOW = 2.5
"""Character entropy (bits) at and below which the entropy factor is 0."""
ENTROPY_HIGH = 3.5
"""Character entropy (bits) at and above which the entropy factor is 1."""

_WORD_RE = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


class TextStats(BaseModel):
    """Statistics of one text and its score."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    index: int
    """Position of the text in the input list."""
    n_chars: int
    """Characters in the text."""
    n_words: int
    """Alphabetic words found (``[A-Za-z]+`` with an optional apostrophe part)."""
    judged: bool
    """False when the text has fewer than ``MIN_CHARS`` characters (then ``score`` is None)."""
    lexical_coverage: float | None
    """Fraction of words that are common English words (None without words)."""
    repeated_trigram_ratio: float | None
    """Fraction of word trigrams that repeat an earlier trigram (None with fewer than 3 words)."""
    adjacent_repeat_ratio: float | None
    """Fraction of words equal to the previous word (None with fewer than 2 words)."""
    char_entropy_bits: float | None
    """Shannon entropy of the character distribution, in bits (None for an empty text)."""
    compression_ratio: float | None
    """zlib-compressed size / UTF-8 size (None for an empty text); recorded, not scored (short texts
    compress badly whatever they say)."""
    garbage_fraction: float | None
    """Fraction of non-space characters that are non-ASCII, control or U+FFFD (None if no such chars)."""
    score: float | None
    """Per-text score in [0, 1], None when not judged."""
    is_coherent: bool | None
    """``score >= threshold``, None when not judged."""


class CoherenceResult(BaseModel):
    """The verdict on a set of texts."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    version: int = COHERENCE_VERSION
    """Version of the statistics and formula."""
    score: float | None
    """Median per-text score over judged texts; None when no text could be judged."""
    threshold: float
    """Threshold the set's score is compared to."""
    is_coherent: bool
    """True only when enough texts were judged (``MIN_JUDGED``) and ``score >= threshold``."""
    n_texts: int
    """Texts given."""
    n_judged: int
    """Texts long enough to judge (``MIN_CHARS``)."""
    n_empty: int
    """Texts that are empty or whitespace only."""
    coherent_fraction: float | None
    """Fraction of judged texts whose own score reaches the threshold."""
    per_text: list[TextStats]
    """Statistics of every text, in input order."""
    reasons: list[str]
    """Why the set is (not) coherent, one line each, for findings and humans."""


# ------------------------------------------------------------------------------------------ words


@lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    """The shipped common-word list (lowercase)."""
    text = resources.files("perfwarden.auditor").joinpath("data/english_words.txt").read_text(
        encoding="utf-8"
    )
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def _candidates(word: str) -> list[str]:
    """Base forms to try for an inflected word (cheap rules; good enough to count common words)."""
    out = [word]
    if word.endswith("'s"):
        out.append(word[:-2])
    for suffix, repl in (
        ("ies", "y"), ("ied", "y"), ("ier", "y"), ("iest", "y"), ("ily", "y"),
        ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("ing", ""), ("ing", "e"),
        ("ly", ""), ("er", ""), ("er", "e"), ("est", ""), ("est", "e"),
        ("ness", ""), ("ment", ""), ("ful", ""), ("less", ""), ("able", ""), ("ation", "e"),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            stem = word[: -len(suffix)] + repl
            out.append(stem)
            if repl == "" and len(stem) >= 3 and stem[-1] == stem[-2]:
                out.append(stem[:-1])  # stopped -> stop, running -> run
    return out


def is_common_word(word: str) -> bool:
    """Whether ``word`` (any case) or a simple base form of it is in the common-word list."""
    return _common_lower(word.lower().replace("\u2019", "'"))


def words_of(text: str) -> list[str]:
    """Alphabetic words of a text (curly apostrophes normalized)."""
    return _WORD_RE.findall(text.replace("\u2019", "'"))


# ------------------------------------------------------------------------------------- statistics


def lexical_coverage(words: list[str]) -> float | None:
    """Fraction of ``words`` that are common English words."""
    if not words:
        return None
    return sum(is_common_word(w) for w in words) / len(words)


def repeated_ngram_ratio(words: list[str], n: int = 3) -> float | None:
    """Fraction of word n-grams (lowercased) that already occurred earlier in the text."""
    if len(words) < n:
        return None
    grams = [tuple(w.lower() for w in words[i : i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams)


def adjacent_repeat_ratio(words: list[str]) -> float | None:
    """Fraction of words equal (case-insensitively) to the word right before them."""
    if len(words) < 2:
        return None
    lower = [w.lower() for w in words]
    return sum(a == b for a, b in zip(lower, lower[1:], strict=False)) / (len(lower) - 1)


def char_entropy(text: str) -> float | None:
    """Shannon entropy of the characters of ``text``, in bits."""
    return entropy_of_counts(Counter(text).values(), len(text))


def entropy_of_counts(counts: Iterable[int], total: int) -> float | None:
    """Shannon entropy, in bits, of characters seen ``counts`` times each out of ``total``."""
    if not total:
        return None
    return max(0.0, -sum(c / total * math.log2(c / total) for c in counts))  # no "-0.0"


def compression_ratio(text: str) -> float | None:
    """zlib-compressed size over UTF-8 size (lower = more repetitive)."""
    raw = text.encode("utf-8")
    if not raw:
        return None
    return len(zlib.compress(raw, 9)) / len(raw)


def garbage_fraction(text: str) -> float | None:
    """Fraction of non-whitespace characters that are non-ASCII, control, or the replacement char."""
    return garbage_of_counts(Counter(text))


def garbage_of_counts(counts: Mapping[str, int]) -> float | None:
    """``garbage_fraction`` of a text whose characters occur ``counts`` times each."""
    visible = sum(n for ch, n in counts.items() if not ch.isspace())
    if not visible:
        return None
    bad = sum(n for ch, n in counts.items() if not ch.isspace() and (ord(ch) > 126 or ord(ch) < 32 or ch == "\ufffd"))
    return bad / visible


def entropy_factor(bits: float | None) -> float:
    """Map character entropy linearly onto [0, 1] between ``ENTROPY_LOW`` and ``ENTROPY_HIGH``."""
    if bits is None:
        return 0.0
    return min(1.0, max(0.0, (bits - ENTROPY_LOW) / (ENTROPY_HIGH - ENTROPY_LOW)))


PIECE_CHARS = 1 << 18
"""Characters of one text read at a time by :class:`_Tally`: a text's statistics cost a few pieces of
memory beyond the text itself, whatever its length (the word lists, n-gram tuples and character lists of
a whole text would hold over 100 times its size)."""
_NOT_WORD = re.compile(r"[^A-Za-z'\u2019]")
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9], dtype=np.uint64)
"""Odd multipliers that combine three word digests into one trigram digest (wrapping uint64)."""


@lru_cache(maxsize=1 << 16)
def _common_lower(word: str) -> bool:
    """``is_common_word`` of a word already lowercased with straight apostrophes (cached: a long text
    repeats its words)."""
    return any(c in common_words() for c in _candidates(word))


def _word_digest(word: str) -> int:
    """A fixed 64-bit digest of a word: the same in every process, unlike ``hash``."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")


class _Tally:
    """The statistics of one text, read piece by piece (``PIECE_CHARS``), each exactly what the whole-text
    functions above give. A piece ends just after a character no word holds, so no word is cut. Repeated
    trigrams are counted by 64-bit digests (kept once per distinct trigram, 8 bytes each): two distinct
    trigrams could share a digest only by a collision, which would count one more repeat (a lower score,
    never a kinder one)."""

    def __init__(self) -> None:
        self.n_chars = 0
        self.n_words = 0
        self.common = 0
        self.adjacent = 0
        self.tail: list[str] = []
        """The last two words read (their pairs and trigrams cross into the next piece)."""
        self.trigrams: list[np.ndarray] = []
        self.chars: dict[str, int] = {}
        self.zlib = zlib.compressobj(9)
        self.compressed = 0
        self.encoded = 0

    def add(self, piece: str) -> None:
        self.n_chars += len(piece)
        self._characters(piece)
        raw = piece.encode("utf-8")
        self.encoded += len(raw)
        self.compressed += len(self.zlib.compress(raw))
        words = words_of(piece)
        if not words:
            return
        lower = " ".join(words).lower().split(" ")
        self.n_words += len(lower)
        self.common += sum(n for word, n in Counter(lower).items() if _common_lower(word))
        pairs = self.tail[-1:] + lower
        self.adjacent += sum(map(operator.eq, pairs, pairs[1:]))
        seq = self.tail + lower
        if len(seq) >= 3:
            digest = {word: _word_digest(word) for word in set(seq)}
            digests = np.fromiter(map(digest.__getitem__, seq), dtype=np.uint64, count=len(seq))
            grams = digests[:-2] * _MIX[0] + digests[1:-1] * _MIX[1] + digests[2:] * _MIX[2]
            self.trigrams.append(np.unique(grams))
        self.tail = seq[-2:]

    def _characters(self, piece: str) -> None:
        """Character counts in first-seen order (the order ``Counter(text)`` keeps, so the entropy's sum
        runs in the same order and gives the same float)."""
        if piece.isascii():
            counts = np.bincount(np.frombuffer(piece.encode("ascii"), dtype=np.uint8), minlength=128)
            present = [chr(code) for code in np.flatnonzero(counts)]
            # new characters in the order they first occur (a C search each, at most 128)
            present.sort(key=lambda char: -1 if char in self.chars else piece.find(char))
            seen = iter([(char, int(counts[ord(char)])) for char in present])
        else:
            seen = iter(Counter(piece).items())
        chars = self.chars
        for char, n in seen:
            chars[char] = chars.get(char, 0) + n

    def distinct_trigrams(self) -> int:
        """Distinct trigram digests, sorted a slice of the digest range at a time (bounded scratch)."""
        total = 0
        for part in range(16):
            total += np.unique(np.concatenate([g[(g >> np.uint64(60)) == part] for g in self.trigrams])).size
        return total

    def stats(self, index: int, threshold: float) -> TextStats:
        n_words, n_chars = self.n_words, self.n_chars
        coverage = self.common / n_words if n_words else None
        n_grams = n_words - 2
        trigram = 1.0 - self.distinct_trigrams() / n_grams if n_grams > 0 else None
        adjacent = self.adjacent / (n_words - 1) if n_words >= 2 else None
        entropy = entropy_of_counts(self.chars.values(), n_chars)
        garbage = garbage_of_counts(self.chars)
        self.compressed += len(self.zlib.flush())
        judged = n_chars >= MIN_CHARS
        score: float | None = None
        if judged:
            repetition = max(trigram or 0.0, adjacent or 0.0)  # None (too few words) = no repetition seen
            score = (coverage or 0.0) * (1.0 - repetition) * (1.0 - (garbage or 0.0)) * entropy_factor(entropy)
        return TextStats(
            index=index, n_chars=n_chars, n_words=n_words, judged=judged, lexical_coverage=coverage,
            repeated_trigram_ratio=trigram, adjacent_repeat_ratio=adjacent, char_entropy_bits=entropy,
            compression_ratio=self.compressed / self.encoded if self.encoded else None, garbage_fraction=garbage,
            score=score, is_coherent=None if score is None else score >= threshold)


def pieces(text: str, size: int) -> Iterator[str]:
    """``text`` in pieces of about ``size`` characters, each ending just after a character that is not
    part of any word (a word longer than a piece stays whole)."""
    start = 0
    while start < len(text):
        end = start + size
        if end < len(text):
            cut = _NOT_WORD.search(text, end - 1)
            end = cut.end() if cut else len(text)
        yield text[start:end]
        start = end


def text_stats(index: int, text: str, threshold: float = THRESHOLD) -> TextStats:
    """All statistics of one text and its score (None when too short to judge), in memory that does not
    grow with the text (:class:`_Tally`)."""
    tally = _Tally()
    for piece in pieces(text, PIECE_CHARS):
        tally.add(piece)
    return tally.stats(index, threshold)


def _reasons(stats: list[TextStats], score: float | None, threshold: float) -> list[str]:
    """One line per notable property of the set, worst first."""
    n = len(stats)
    judged = [s for s in stats if s.judged]
    reasons: list[str] = []
    if n == 0:
        return ["no texts given: coherence cannot be established"]
    if not judged:
        reasons.append(f"none of {n} texts has at least {MIN_CHARS} characters: nothing to judge")
        return reasons
    needed = min(MIN_JUDGED, n)
    if len(judged) < needed:
        reasons.append(f"only {len(judged)} of {n} texts are long enough to judge (need {needed})")
    verdict = ">=" if score is not None and score >= threshold else "<"
    reasons.append(f"median score {score:.3f} {verdict} threshold {threshold:.3f} over {len(judged)} judged texts")
    empty = sum(1 for s in stats if s.n_words == 0)
    if empty:
        reasons.append(f"{empty} of {n} texts have no words (empty, whitespace or symbols)")
    if len(judged) < n:
        reasons.append(f"{n - len(judged)} of {n} texts are too short to judge (< {MIN_CHARS} characters)")

    def median_of(field: str) -> float:
        return statistics.median(getattr(s, field) or 0.0 for s in judged)

    coverage = median_of("lexical_coverage")
    if coverage < 0.5:
        reasons.append(f"median lexical coverage {coverage:.2f}: most words are not common English")
    repetition = statistics.median(
        max(s.repeated_trigram_ratio or 0.0, s.adjacent_repeat_ratio or 0.0) for s in judged
    )
    if repetition > 0.3:
        reasons.append(f"median repetition {repetition:.2f}: outputs loop or stutter")
    garbage = median_of("garbage_fraction")
    if garbage > 0.05:
        reasons.append(f"median garbage fraction {garbage:.2f}: non-ASCII/control characters")
    low_entropy = sum(1 for s in judged if (s.char_entropy_bits or 0.0) < ENTROPY_HIGH)
    if low_entropy:
        reasons.append(f"{low_entropy} of {len(judged)} judged texts have character entropy < {ENTROPY_HIGH} bits")
    return reasons


def coherence_score(texts: list[str], threshold: float = THRESHOLD) -> CoherenceResult:
    """Score a set of texts (e.g. a reference leg's greedy outputs) for coherence.

    Pure and deterministic: same texts, same result. The caller decides what an incoherent set means
    (for the baseline gate: NONCOHERENT_REFERENCE, parity unverifiable).
    """
    stats = [text_stats(i, t, threshold) for i, t in enumerate(texts)]
    judged_scores = [s.score for s in stats if s.score is not None]
    score = statistics.median(judged_scores) if judged_scores else None
    return CoherenceResult(
        score=score,
        threshold=threshold,
        is_coherent=score is not None and score >= threshold and len(judged_scores) >= min(MIN_JUDGED, len(texts)),
        n_texts=len(texts),
        n_judged=len(judged_scores),
        n_empty=sum(1 for t in texts if not t.strip()),
        coherent_fraction=(
            sum(1 for x in judged_scores if x >= threshold) / len(judged_scores) if judged_scores else None
        ),
        per_text=stats,
        reasons=_reasons(stats, score, threshold),
    )
