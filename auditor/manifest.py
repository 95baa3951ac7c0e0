"""Read a run's seal chain (``evidence.jsonl``) into a manifest, verify it, and look at the bytes on disk.

This is the auditor's own reader: it shares only *formats* with the harness (``SealEntry`` in
``formats/jsonl.py``, ``SealKey``/``SealHead`` and the key store location in ``formats/records.py``)
and recomputes every MAC and digest itself with ``hmac``/``hashlib``. If the harness's writer had a
bug, this reader would not share it.

Three steps, all streaming (memory follows the number of chain entries, never a file's size):

1. :func:`resolve_key` -- which key verifies this run: ``--key FILE`` (or the backtest's
   ``<fixture>/seal.key``), else the key store's key named by the chain, else the key store's key
   registered for this run directory (found even when the chain itself was deleted).
2. :func:`read_manifest` -- every entry decoded and linked (sequence, ``prev``), MACs checked when a key
   is known; what each file, leg and rep looks like as sealed.
3. :func:`observe` -- each listed file as it is on disk now: present, size, sha256 (the loader's digest
   is reused when the audit already read the file, so nothing is hashed twice), and for a sealed JSONL
   file whose bytes differ, the first line that breaks.

The findings are decided by the pure gate ``gates/integrity.py``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from perfwarden.formats.jsonl import DECODE_ERRORS, SEAL_ENTRY, LineIssue, SealEntry, decode_line, iter_raw_lines
from perfwarden.formats.records import SealHead, SealKey, key_store_dir, key_store_path
from perfwarden.formats.safe_read import KEY_BYTES, open_regular, read_bytes
from perfwarden.formats.strict_json import loads

EVIDENCE_FILE = "evidence.jsonl"
GENESIS_MAC = "0" * 64
_MAC_FIELD = b',"mac":"'
_MAC_TAIL = len(_MAC_FIELD) + 64 + 2  # ,"mac":"<64 hex>"}
MAX_ENTRIES = 200_000
"""A real run seals a few thousand entries; a chain beyond this is corrupt, decided in constant memory."""
_EXCERPT = 160
_KEY_ID_MESSAGE = b"perfwarden seal key id"


class KeyFileError(ValueError):
    """The key file the operator named cannot be used (unreadable, not a key): invalid input."""


# ---------------------------------------------------------------------------------------------- key


@dataclass(frozen=True)
class KeyChoice:
    """The key an audit verifies with, and where it came from."""

    key: bytes | None = None
    source: str = ""
    """``--key <path>``, ``key store (seal id …)``, ``key store (run directory)``; empty when none."""
    seal_id: str | None = None
    """The chain the key was made for (None for a bare hex key)."""
    head: SealHead | None = None
    """The last entry the harness sealed, from the head file beside the key, when present."""
    bound: bool = False
    """The key belongs to this run regardless of what the run directory says (named by the operator,
    or registered in the key store for this directory): a missing chain is then tampering."""
    note: str | None = None
    """Why a key that exists could not be used (key store only; an operator's bad key is an error)."""


def key_fingerprint(key: bytes) -> str:
    return hmac.new(key, _KEY_ID_MESSAGE, hashlib.sha256).hexdigest()[:16]


def _parse_key(path: Path) -> tuple[bytes, str | None]:
    """A key file read like a claim: a regular file of at most ``KEY_BYTES``, opened without blocking
    (a FIFO, ``/dev/zero``, a directory or a huge file is refused, never waited on or read whole)."""
    text = read_bytes(path, limit=KEY_BYTES, what="seal key").decode("utf-8").strip()
    if text.startswith("{"):
        record = SealKey.model_validate(loads(text, what="seal key"))
        key, seal_id = record.key, record.seal_id
    else:
        key, seal_id = text, None
    raw = bytes.fromhex(key)
    if len(raw) < 16:
        raise ValueError("a seal key has at least 16 bytes (32 hex digits)")
    return raw, seal_id


def read_operator_key(path: Path) -> tuple[bytes, str | None]:
    """The key the operator named (``--key``) and its seal id; :class:`KeyFileError` when unusable."""
    try:
        return _parse_key(Path(path))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot use seal key {str(path)!r}: {exc}") from None


def _head(path: Path) -> SealHead | None:
    head = path.with_suffix(".head")
    if not head.is_file():
        return None
    try:
        return SealHead.model_validate(loads(read_bytes(head, limit=KEY_BYTES, what="seal head"), what="seal head"))
    except (OSError, ValueError):
        return None


def resolve_key(run: Path, key_path: Path | None, chain_seal_id: str | None) -> KeyChoice:
    """The key that verifies ``run`` (see the module docstring). An operator's key file that cannot be
    read raises :class:`KeyFileError`; a bad key store entry is reported in ``note`` instead."""
    if key_path is not None:
        key, seal_id = read_operator_key(Path(key_path))
        return KeyChoice(key, f"--key {str(key_path)!r}", seal_id, _head(Path(key_path)), bound=True)
    store = key_store_dir()
    notes = []
    path = key_store_path(chain_seal_id)  # None for an id that is not one: the run never names a key's path
    if path is not None and path.is_file():
        try:
            key, seal_id = _parse_key(path)
            return KeyChoice(key, f"key store ({str(path)!r})", seal_id, _head(path))
        except (OSError, ValueError) as exc:
            notes.append(f"key store entry {str(path)!r} is unreadable: {exc}")
    if store.is_dir():
        here = str(Path(run).resolve())
        for path in sorted(store.glob("*.key")):
            try:
                record = SealKey.model_validate(loads(read_bytes(path, limit=KEY_BYTES, what="seal key"),
                                                      what="seal key"))
                if record.run_dir == here:
                    return KeyChoice(bytes.fromhex(record.key), f"key store, registered for this run directory "
                                     f"({str(path)!r})", record.seal_id, _head(path), bound=True)
            except (OSError, ValueError):
                continue
    return KeyChoice(note="; ".join(notes) or None)


# ----------------------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class ChainLink:
    """One entry of the chain, for citing: its line in ``evidence.jsonl`` and that line's digest."""

    line: int
    sha256: str
    excerpt: str


@dataclass(frozen=True)
class SealedLine:
    """One JSONL line as the harness sealed it."""

    line: int
    offset: int
    length: int
    sha256: str
    rep: int | None
    contention: bool | None
    link: ChainLink


@dataclass
class SealedFile:
    """A file as last sealed: appended lines, or a whole file."""

    path: str
    whole: bool
    size: int
    sha256: str | None
    link: ChainLink
    leg: str | None = None
    lines: list[SealedLine] = field(default_factory=list)
    gone: bool = False
    """The harness itself removed it (a ``gone`` entry)."""


@dataclass(frozen=True)
class LegMark:
    """A status the harness sealed for a leg (``leg.json`` as written)."""

    status: str
    link: ChainLink


BreakKind = Literal["undecodable", "no_mac", "not_open", "sequence", "mac", "wrong_key", "truncated", "forked",
                    "too_long", "inconsistent"]


@dataclass(frozen=True)
class ChainBreak:
    """The first place the chain stops being what the harness writes."""

    kind: BreakKind
    message: str
    link: ChainLink | None


@dataclass
class Manifest:
    """What the chain says the harness wrote."""

    sha256: str = ""
    seal_id: str | None = None
    run_id: str | None = None
    key_id: str | None = None
    entries: int = 0
    files: dict[str, SealedFile] = field(default_factory=dict)
    legs: dict[str, list[LegMark]] = field(default_factory=dict)
    """Every leg any entry names, with the statuses sealed for its ``leg.json`` (in order)."""
    broken: ChainBreak | None = None
    verified: bool = False
    """Every MAC checked with a key (and none failed)."""
    torn_tail: ChainLink | None = None
    """An unterminated last line: the harness died while sealing (not resumed since)."""

    def failed_mark(self, leg: str) -> LegMark | None:
        return next((m for m in self.legs.get(leg, []) if m.status != "ok"), None)


def _link(line: int, raw: bytes) -> ChainLink:
    return ChainLink(line, hashlib.sha256(raw).hexdigest(), raw[:_EXCERPT].decode("utf-8", "replace"))


class _Reader:
    """Applies entries one by one; remembers only the first break."""

    def __init__(self, key: bytes | None, head: SealHead | None):
        self.key, self.head = key, head
        self.m = Manifest(verified=key is not None)
        self.prev = GENESIS_MAC
        self.head_mac: str | None = None

    def broke(self, kind: BreakKind, message: str, link: ChainLink | None) -> None:
        if self.m.broken is None:
            self.m.broken = ChainBreak(kind, message, link)
        self.m.verified = False

    def entry(self, number: int, raw: bytes) -> None:
        link = _link(number, raw)
        try:  # strict: the harness's writer cannot repeat a key; a reader could take either value
            e = decode_line(SEAL_ENTRY, raw)
        except DECODE_ERRORS as exc:
            return self.broke("undecodable", f"chain line {number} does not decode as a seal entry: {exc}", link)
        if len(raw) < _MAC_TAIL or raw[-_MAC_TAIL:-66] != _MAC_FIELD or not raw.endswith(b'"}'):
            return self.broke("no_mac", f"chain line {number} does not end in its MAC", link)
        if number == 1 and (e.kind != "open" or e.prev != GENESIS_MAC):
            self.broke("not_open", "the chain does not start with its 'open' entry", link)
        if e.seq != self.m.entries or e.prev != self.prev:
            self.broke("sequence", f"chain line {number} (seq {e.seq}) does not follow entry {self.m.entries - 1}: an "
                       "entry was removed, reordered or inserted", link)
        if self.key is not None and self.m.broken is None:
            body = raw[:-_MAC_TAIL] + b"}"
            expected = hmac.new(self.key, e.prev.encode("ascii", "replace") + body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(expected, e.mac):
                if e.kind == "open":
                    self.broke("wrong_key", f"the chain was not made with this key (key id {key_fingerprint(self.key)!r}, "
                               f"chain's {e.key_id!r}): it was replaced, or the wrong key was given", link)
                else:
                    self.broke("mac", f"chain line {number} ({_what(e)}) fails its MAC: the entry was edited or "
                               "written without the key", link)
        if self.head is not None and e.seq == self.head.seq:
            self.head_mac = e.mac
        self.prev = e.mac
        self.m.entries += 1
        self.apply(e, link)

    def apply(self, e: SealEntry, link: ChainLink) -> None:
        m = self.m
        if e.kind == "open":
            m.seal_id, m.run_id, m.key_id = e.seal_id, e.run_id, e.key_id
            return
        if not e.file:
            return self.broke("inconsistent", f"chain line {link.line}: a {e.kind!r} entry names no file", link)
        if e.leg:
            m.legs.setdefault(e.leg, [])
        if e.kind == "line":
            f = m.files.get(e.file)
            if f is None or f.whole or f.gone:
                f = m.files[e.file] = SealedFile(e.file, False, 0, None, link, e.leg)
            if e.line != len(f.lines) + 1 or e.offset != f.size or e.size != (e.offset or 0) + (e.length or 0) + 1:
                self.broke("inconsistent", f"chain line {link.line} seals line {e.line} of {e.file!r} at byte {e.offset}"
                           f", which does not follow what was sealed before", link)
            f.lines.append(SealedLine(e.line or 0, e.offset or 0, e.length or 0, e.sha256 or "", e.rep, e.contention,
                                      link))
            f.size, f.sha256, f.link = e.size or 0, e.file_sha256, link
        elif e.kind == "file":
            m.files[e.file] = SealedFile(e.file, True, e.size or 0, e.sha256, link, e.leg)
            if e.leg and e.file.endswith("/leg.json"):
                m.legs[e.leg].append(LegMark(e.status or "unreadable", link))
        elif e.kind == "cut":
            f = m.files.get(e.file)
            if f is not None:
                if (e.offset or 0) < f.size and not f.whole:
                    self.broke("inconsistent", f"chain line {link.line} cuts {e.file!r} inside its sealed lines", link)
                f.link = link
        elif e.kind == "gone":
            f = m.files.get(e.file)
            if f is not None:
                f.gone, f.link = True, link

    def finish(self, last: ChainLink | None) -> Manifest:
        head = self.head
        if head is not None and self.key is not None:
            if self.m.seal_id is not None and head.seal_id != self.m.seal_id:
                self.broke("forked", f"the key's head is for seal {head.seal_id!r}, the chain is {self.m.seal_id!r}", last)
            elif head.seq >= self.m.entries:
                self.broke("truncated", f"the chain ends at entry {self.m.entries - 1} but the harness sealed up to entry "
                           f"{head.seq} (head kept beside the key): entries were cut off the end", last)
            elif self.head_mac is not None and not hmac.compare_digest(self.head_mac, head.mac):
                self.broke("forked", f"entry {head.seq} is not the one the harness sealed (head beside the key): the "
                           "chain was rewritten", last)
        return self.m


def _what(e: SealEntry) -> str:
    if e.kind == "line":
        return f"line {e.line} of {e.file!r}"
    return f"{e.kind} {e.file!r}" if e.file else e.kind


def read_manifest(path: Path, key: bytes | None, head: SealHead | None) -> Manifest:
    """Stream the chain once: decode, link, verify (with ``key``) and build the manifest.

    Raises ``OSError`` when the chain cannot be read (the caller fails closed)."""
    issues: list[LineIssue] = []
    digest = hashlib.sha256()
    reader = _Reader(key, head)
    last: ChainLink | None = None
    for ref, raw in iter_raw_lines(Path(path), issues, digest):
        if reader.m.entries >= MAX_ENTRIES:
            reader.broke("too_long", f"the chain has more than {MAX_ENTRIES} entries; no run writes that many", None)
            break
        reader.entry(ref.line, raw)
        last = _link(ref.line, raw)
    for issue in issues:
        if issue.kind == "torn_tail":
            reader.m.torn_tail = _link(issue.ref.line, issue.ref.raw())
        elif issue.kind == "empty_file":
            reader.broke("not_open", "the chain is empty", None)
    m = reader.finish(last)
    m.sha256 = digest.hexdigest()
    return m


# ------------------------------------------------------------------------------------------ observe


DifferenceKind = Literal["changed", "moved", "missing", "appended", "bytes"]


@dataclass(frozen=True)
class LineDifference:
    """The first place a sealed JSONL file's bytes stop matching its sealed lines."""

    kind: DifferenceKind
    line: int | None
    """Line of the data file where it shows (None when no single line can be named)."""
    line_sha256: str | None
    sealed: SealedLine | None
    message: str


@dataclass(frozen=True)
class FileState:
    """A listed file as it is on disk now."""

    path: str
    exists: bool
    size: int | None = None
    sha256: str | None = None
    difference: LineDifference | None = None
    torn_tail_only: bool = False
    """The sealed lines are intact; only an unterminated fragment follows them (crash residue)."""


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open_regular(path, what="sealed file") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def locate(path: Path, sealed: SealedFile) -> tuple[LineDifference | None, bool]:
    """Walk the file's lines against the sealed ones; the first mismatch, and whether an unterminated
    tail is all that differs. One line in memory at a time."""
    expected = sealed.lines
    by_sha = {s.sha256: s for s in expected}
    issues: list[LineIssue] = []
    i = 0
    for ref, raw in iter_raw_lines(path, issues):
        sha = hashlib.sha256(raw).hexdigest()
        if i < len(expected):
            s = expected[i]
            if ref.offset == s.offset and ref.length == s.length and sha == s.sha256:
                i += 1
                continue
            other = by_sha.get(sha)
            if other is s:
                return LineDifference("moved", ref.line, sha, s, f"sealed line {s.line}{_rep(s)} of {sealed.path!r} is "
                                      f"at byte {ref.offset}, not at byte {s.offset} where it was sealed: bytes were "
                                      "inserted or removed before it"), False
            if other is not None:
                return LineDifference("moved", ref.line, sha, s, f"line {ref.line} of {sealed.path!r} holds what was "
                                      f"sealed as line {other.line}, not sealed line {s.line}"
                                      f"{_rep(s)}: lines were deleted, reordered or inserted"), False
            return LineDifference("changed", ref.line, sha, s, f"line {ref.line} of {sealed.path!r} is not the line "
                                  f"sealed there (sealed line {s.line}{_rep(s)}, sha256 {s.sha256[:12]}…): it was "
                                  "edited, or a line was inserted before it"), False
        return LineDifference("appended", ref.line, sha, None, f"line {ref.line} of {sealed.path!r} follows the last "
                              f"sealed line ({len(expected)}): it was added after the harness sealed the file"), False
    if i < len(expected):
        s = expected[i]
        return LineDifference("missing", s.line, None, s, f"sealed line {s.line}{_rep(s)} of {sealed.path!r} is gone: "
                              "the file ends before it"), False
    torn = any(issue.kind == "torn_tail" for issue in issues)
    if torn:
        return None, True
    return LineDifference("bytes", None, None, None, f"the bytes of {sealed.path!r} differ from what was sealed "
                          "although every sealed line is in place (blank lines or line endings changed)"), False


def _rep(s: SealedLine) -> str:
    return f", rep {s.rep}" if s.rep is not None else ""


def observe(run: Path, manifest: Manifest, known: dict[str, str]) -> dict[str, FileState]:
    """Every file the manifest lists (not removed by the harness), as it is on disk. ``known`` maps a
    relative path to the sha256 the loader already computed while reading it."""
    out: dict[str, FileState] = {}
    root = Path(run)
    for rel, sealed in manifest.files.items():
        if sealed.gone or rel == EVIDENCE_FILE:
            continue
        path = root / rel
        try:
            if not _inside(path, root) or not path.is_file():
                out[rel] = FileState(rel, False)
                continue
            size = path.stat().st_size
            sha = known.get(rel) or _hash(path)
        except (OSError, ValueError):  # unreadable, or a name no file can have (NUL): not there to check
            out[rel] = FileState(rel, False)
            continue
        if sha == sealed.sha256 and size == sealed.size:
            out[rel] = FileState(rel, True, size, sha)
            continue
        difference, torn_only = (None, False)
        if not sealed.whole:
            difference, torn_only = locate(path, sealed)
        out[rel] = FileState(rel, True, size, sha, difference, torn_only)
    return out


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, ValueError):
        return False
