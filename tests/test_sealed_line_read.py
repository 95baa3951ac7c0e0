"""A verified seal's line lengths let the bench reader read a long line in one read (no join of 1 MiB
pieces); the lengths are a read size and nothing more: whatever they say, the reader yields exactly
what it yields without them -- the same lines, references, digests and issues."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from perfwarden.formats import jsonl

CHUNK = jsonl._READ_CHUNK


def _line(rng: random.Random, size: int) -> bytes:
    """A JSON-ish line of about ``size`` bytes (the reader never decodes it)."""
    body = bytes(rng.choice(b"abcdefgh0123456789,:[]") for _ in range(min(size, 4096)))
    return b'{"x":"' + (body * (size // max(len(body), 1) + 1))[:size] + b'"}'


def _write(path: Path, lines: list[bytes], tail: bytes = b"") -> dict[int, int]:
    """Write the lines (each ended by a newline) and a torn ``tail``; their true ``{offset: length}``."""
    lengths, offset = {}, 0
    with open(path, "wb") as handle:
        for line in lines:
            handle.write(line + b"\n")
            lengths[offset] = len(line)
            offset += len(line) + 1
        handle.write(tail)
    return lengths


def _read(path: Path, lengths: dict[int, int] | None, max_line: int = 64 << 20) -> tuple:
    issues: list[jsonl.LineIssue] = []
    digest = hashlib.sha256()
    taken: list = []
    out = []
    for ref, raw in jsonl.iter_raw_lines(path, issues, digest, max_line=max_line, cite=True, keep_tail=True,
                                         taken=taken, line_lengths=lengths):
        if taken:
            ref = jsonl._with_digest(ref, taken)
        out.append((ref.line, ref.offset, ref.length, ref.digest, ref.head, raw))
    return out, [(i.kind, i.ref.line, i.ref.offset, i.ref.length, i.sha256) for i in issues], digest.hexdigest()


@pytest.fixture
def whole_reads(monkeypatch) -> list[int]:
    """The lengths of the lines the one-read path took (so a test can tell that it ran)."""
    taken: list[int] = []
    real = jsonl._read_whole_line

    def counting(handle, prefix, length, max_line):
        got = real(handle, prefix, length, max_line)
        if got is not None:
            taken.append(len(got[0][0]))
        return got

    monkeypatch.setattr(jsonl, "_read_whole_line", counting)
    return taken


def _mixed_lines(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    sizes = [10, 3 * CHUNK + 17, 5, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK - 40, 200, 4 * CHUNK + 3, 1]
    rng.shuffle(sizes)
    return [_line(rng, s) for s in sizes]


def test_true_lengths_read_each_long_line_once_and_change_nothing(tmp_path, whole_reads):
    path = tmp_path / "bench_runs.jsonl"
    lines = _mixed_lines(0) + [b"  ", _line(random.Random(9), 2 * CHUNK) + b"\r"]
    lengths = _write(path, lines, tail=b'{"torn')
    plain = _read(path, None)
    assert not whole_reads
    hinted = _read(path, lengths)
    assert hinted == plain
    assert plain[2] == hashlib.sha256(path.read_bytes()).hexdigest()
    # every line that runs past the chunk it starts in was read whole
    assert len(whole_reads) >= 4 and max(whole_reads) == 4 * CHUNK + 3 + 8


@pytest.mark.parametrize("lie", ["short", "long", "two_lines", "other_line", "beyond_file", "over_bound"])
def test_lying_lengths_change_nothing(tmp_path, whole_reads, lie):
    """A length that is not the line's (the chain verified, the file edited after; or a forged chain) is
    refused by the bytes, and the reader reads on in chunks: same lines, same issues, same digest."""
    path = tmp_path / "bench_runs.jsonl"
    lines = _mixed_lines(1)
    lengths = _write(path, lines, tail=b"")
    offsets = sorted(lengths)
    lies = dict(lengths)
    for k, off in enumerate(offsets):
        true = lengths[off]
        if lie == "short":
            lies[off] = true - 1
        elif lie == "long":
            lies[off] = true + 1
        elif lie == "two_lines" and k + 1 < len(offsets):
            lies[off] = true + 1 + lengths[offsets[k + 1]]
        elif lie == "other_line":
            lies[off] = lengths[offsets[(k + 1) % len(offsets)]]
        elif lie == "beyond_file":
            lies[off] = path.stat().st_size * 2
        elif lie == "over_bound":
            lies[off] = true
    max_line = 3 * CHUNK if lie == "over_bound" else 64 << 20
    assert _read(path, lies, max_line) == _read(path, None, max_line)
    if lie in ("short", "long", "two_lines", "beyond_file"):
        assert not whole_reads


def test_a_file_that_changes_under_the_reader_is_read_as_it_was_hashed(tmp_path, monkeypatch):
    """The bytes of a line already read (and hashed) before the one-read path starts must be the ones it
    reads again; a file rewritten in between is not read in one piece."""
    path = tmp_path / "bench_runs.jsonl"
    lines = [_line(random.Random(2), 100), _line(random.Random(3), 3 * CHUNK)]
    lengths = _write(path, lines)
    real = jsonl._read_whole_line
    calls: list[bool] = []

    def rewriting(handle, prefix, length, max_line):
        if prefix and not calls:
            calls.append(True)
            with open(path, "r+b") as other:  # the long line's first byte after the prefix's start
                other.seek(len(lines[0]) + 1)
                other.write(b"#")
        return real(handle, prefix, length, max_line)

    monkeypatch.setattr(jsonl, "_read_whole_line", rewriting)
    issues: list[jsonl.LineIssue] = []
    out = list(jsonl.iter_raw_lines(path, issues, hashlib.sha256(), line_lengths=lengths))
    assert calls and [raw[:1] for _, raw in out] == [b"{", b"{"]  # the long line as it was first read
