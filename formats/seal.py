"""Seal what the harness writes, as it writes it: a manifest and a seal chain.

A run recorded by the harness carries ``<run>/evidence.jsonl``: one entry per line or file the harness
wrote, in order, each chained to the previous one by an HMAC-SHA256 keyed with a per-run secret
(format: ``perfwarden.formats.jsonl.SealEntry``). The same file is the run's *manifest* (every leg,
rep and file the harness wrote, and which legs it marked failed) and its *seal* (nobody without the
key can change, drop, reorder or add to what it lists without breaking a link).

The key is made when the chain is opened and kept **outside** the run directory, in the key store
(``$PERFWARDEN_KEY_DIR``, default ``~/.local/share/perfwarden/keys/<seal_id>.key``, mode 0600), with
a ``.head`` file beside it naming the last entry sealed (so cutting entries off the end of the chain is
detectable too). Only the auditor is handed the key (``perfwarden audit --key``, the orchestrator's
auditor node, the backtest's ``<fixture>/seal.key``).

How writers use it -- one obvious place, so a new writer cannot forget:

- a lab or CLI that records evidence calls :func:`begin` on the run directory first (opens the chain,
  or continues it on resume; a run that already holds unsealed evidence from before sealing existed
  stays unsealed rather than getting a chain that covers half of it);
- every harness write goes through :func:`write_json`, :func:`write_text`, :func:`append_jsonl`,
  :func:`seal_file` (a file another process or library wrote: ``server.log``, LoadGen logs, a file
  replaced atomically) or :func:`unlink`. Inside a run with a chain they seal; anywhere else (a bench
  file written outside any run, unit tests) they are plain writes.

Not sealed, because they are not the harness's evidence: claims and verdicts (what producers and the
auditor say), ``events.jsonl``, ``settings.json``, ``run.json``, reports, checkpoints, scratch files.

Threat boundary: anyone who can read the key store can seal anything. The sandbox that runs generated
code and servers (``harness/sandbox.py``) binds only what it needs, and where the key store lies inside
a bound tree it covers it with an empty tmpfs, so confined code cannot read a key.

Crash safety: data is written first, then sealed. A line written but not sealed (the process died in
between) is cut off and kept beside the file (``<file>.unsealed``), with a ``cut`` entry saying so, when a
process next opens the chain (``run --resume``) or the harness next writes to that file; until then
readers count only the sealed bytes (:func:`sealed_size`) -- so a resumed run re-measures that rep
instead of banking bytes nobody sealed. Concurrent writers (threads starting servers together, a cluster's
streams on the head) serialize on a thread lock plus ``flock`` on the chain file; one process at a time
writes a run at all (``harness/run_lock.py``).

Readers: a line is appended and sealed, and a whole file renamed into place and sealed, inside one hold of
that ``flock``, so the chain changes whenever evidence it covers does; a reader that finds the chain
unchanged (after waiting out the operation in flight) across its reads saw one state
(``auditor/snapshot.py``). Files another program writes (a server's log, LoadGen's logs) are sealed when
it is done with them.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from perfwarden.formats import safe_write
from perfwarden.formats.jsonl import DECODE_ERRORS, SEAL_ENTRY, SealEntry, chain_seal_id, decode_line
from perfwarden.formats.records import (EVIDENCE_DIRS, EVIDENCE_FILE, RUN_SEARCH_DEPTH, SealHead, SealKey,
                                        jsonl_text, key_store_dir, key_store_path, write_json_atomic)
from perfwarden.formats.safe_read import KEY_BYTES, RECORD_BYTES, open_regular, read_bytes
from perfwarden.formats.strict_json import loads

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
GENESIS_MAC = "0" * 64
MAC_FIELD = b',"mac":"'
_HASH_CHUNK = 1 << 20


class SealError(RuntimeError):
    """The chain cannot be opened or extended honestly (key missing, chain or a sealed file changed)."""


# ------------------------------------------------------------------------------------------- format


def key_id(key: bytes) -> str:
    """A public fingerprint of a key (says which key made a chain without revealing it)."""
    return hmac.new(key, b"perfwarden seal key id", hashlib.sha256).hexdigest()[:16]


def entry_mac(key: bytes, prev: str, body: bytes) -> str:
    """MAC of one entry: HMAC-SHA256(key, prev_mac ‖ body)."""
    return hmac.new(key, prev.encode("ascii") + body, hashlib.sha256).hexdigest()


def encode_entry(entry: dict[str, Any], key: bytes) -> tuple[bytes, str]:
    """The entry's line (newline included) and its MAC. ``body`` is canonical JSON (sorted keys, no
    spaces, ASCII) without ``mac``; the line is ``body`` with ``,"mac":"…"`` spliced in before the
    closing brace, so a verifier recovers ``body`` from the raw bytes without re-serializing."""
    body = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
    mac = entry_mac(key, entry["prev"], body)
    return body[:-1] + MAC_FIELD + mac.encode() + b'"}\n', mac


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60] or "run"


def _file_sha256(path: Path, limit: int | None = None) -> tuple[str, int]:
    """sha256 and size of ``path`` (of its first ``limit`` bytes when given), streamed."""
    digest = hashlib.sha256()
    size = 0
    with open_regular(path, what="sealed file") as handle:
        while True:
            want = _HASH_CHUNK if limit is None else min(_HASH_CHUNK, limit - size)
            if want <= 0:
                break
            chunk = handle.read(want)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _prefix_hasher(path: Path, size: int) -> tuple[Any, int]:
    digest = hashlib.sha256()
    read = 0
    if size:
        with open_regular(path, what="sealed file") as handle:
            while read < size:
                chunk = handle.read(min(_HASH_CHUNK, size - read))
                if not chunk:
                    break
                digest.update(chunk)
                read += len(chunk)
    return digest, read


# ---------------------------------------------------------------------------------------- key store


def _write_private(path: Path, text: str, *, exclusive: bool) -> None:
    """Write a 0600 file: exclusively (a key is never overwritten) or atomically (the head)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if exclusive:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        target = None
    else:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        target = tmp
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    if target is not None:
        os.replace(target, path)


def head_path(key_file: Path) -> Path:
    """The head file beside a key: ``x.key`` -> ``x.head``."""
    return Path(key_file).with_suffix(".head")


def read_key_file(path: Path) -> SealKey:
    """A key file, read like any input: a regular file of at most ``KEY_BYTES``, never blocking."""
    try:
        return SealKey.model_validate(loads(read_bytes(path, limit=KEY_BYTES, what="seal key"), what="seal key"))
    except (OSError, ValueError) as exc:
        raise SealError(f"cannot read seal key {str(path)!r}: {exc}") from None


def _inside(path: Path, root: Path) -> bool:
    return Path(os.path.abspath(path)).resolve().is_relative_to(root.resolve())


def find_key_file(run: Path | str) -> Path | None:
    """The key file of ``run``'s chain: the one this process sealed with, else the key store's key
    named by the chain's first entry, else the key store's key registered for this directory (which
    still finds the key when the chain itself was deleted). None when there is none."""
    root = Path(run).resolve()
    with _REGISTRY_LOCK:
        cached = _CHAINS.get(root)
    if cached is not None:
        return cached.key_file
    store = key_store_dir()
    by_id = key_store_path(chain_seal_id(root / EVIDENCE_FILE))  # None for an id that is not one
    if by_id is not None and by_id.is_file():
        return by_id
    if store.is_dir():
        for candidate in sorted(store.glob("*.key")):
            try:
                if read_key_file(candidate).run_dir == str(root):
                    return candidate
            except SealError:
                continue
    return None


# -------------------------------------------------------------------------------------------- chain


@dataclass
class _FileState:
    """What the chain has sealed of one file so far."""

    whole: bool = False
    """Sealed as a whole file (else as appended lines)."""
    lines: int = 0
    size: int = 0
    sha256: str | None = None
    """Digest of the first ``size`` bytes as sealed."""
    hasher: Any = None
    """Running sha256 of the first ``size`` bytes, when this process knows it (else re-hashed)."""


class Chain:
    """One run's seal chain, opened by :func:`begin`. Thread-safe; processes serialize on flock."""

    def __init__(self, root: Path, key: bytes, key_file: Path, seal_id: str):
        self.root = root
        self.path = root / EVIDENCE_FILE
        self.key = key
        self.key_file = key_file
        self.seal_id = seal_id
        self._lock = threading.RLock()
        self._seq = -1
        self._prev = GENESIS_MAC
        self._read_to = 0
        self._files: dict[str, _FileState] = {}

    # ---------------------------------------------------------------- internals
    def rel(self, path: Path) -> str:
        """``path`` inside the run, as the chain names it (a link below the root is not resolved: the
        write through it is refused by ``safe_write``)."""
        try:
            return safe_write.relative(path, self.root)
        except safe_write.RefusedWrite:
            raise SealError(f"{str(path)!r} is not inside the sealed run {str(self.root)!r}") from None

    @contextmanager
    def _locked(self) -> Iterator[int]:
        with self._lock:
            fd = safe_write.open_fd(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, self.root)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._refresh(fd)
                yield fd
            finally:
                os.close(fd)  # releases the flock

    def _refresh(self, fd: int) -> None:
        """Apply entries other writers appended since we last looked; cut a torn tail (a writer died
        mid-entry); refuse a chain that shrank or whose links do not verify."""
        size = os.fstat(fd).st_size
        if size < self._read_to:
            raise SealError(f"the seal chain {str(self.path)!r} shrank since it was last written "
                            f"({size} < {self._read_to} bytes): it was truncated or replaced")
        if size == self._read_to:
            return
        data = os.pread(fd, size - self._read_to, self._read_to)
        end = data.rfind(b"\n") + 1
        for raw in data[:end].splitlines():
            self._accept(raw)
        self._read_to += end
        if end < len(data):  # torn tail: a writer died mid-entry; keep it aside, never extend it
            fragment = data[end:]
            safe_write.append_line(self.path.with_name(EVIDENCE_FILE + ".torn"), fragment + b"\n", self.root)
            os.ftruncate(fd, self._read_to)
            os.fsync(fd)
            self._append(fd, {"kind": "cut", "file": EVIDENCE_FILE, "offset": self._read_to,
                              "dropped_bytes": len(fragment),
                              "dropped_sha256": hashlib.sha256(fragment).hexdigest()})

    def _accept(self, raw: bytes) -> None:
        try:
            entry = decode_line(SEAL_ENTRY, raw)
        except DECODE_ERRORS as exc:
            raise SealError(f"entry {self._seq + 2} of {str(self.path)!r} does not decode: {exc}") from None
        if len(raw) < len(MAC_FIELD) + 66 or raw[-(len(MAC_FIELD) + 66):-66] != MAC_FIELD:
            raise SealError(f"entry {self._seq + 2} of {str(self.path)!r} has no MAC where it belongs")
        body = raw[:-(len(MAC_FIELD) + 66)] + b"}"
        if (entry.seq != self._seq + 1 or entry.prev != self._prev
                or not hmac.compare_digest(entry_mac(self.key, entry.prev, body), entry.mac)):
            raise SealError(f"entry {entry.seq} of {str(self.path)!r} does not verify under this run's key: "
                            "the chain was edited; refusing to extend it")
        self._seq, self._prev = entry.seq, entry.mac
        self._apply(entry)

    def _apply(self, entry: SealEntry) -> None:
        if entry.kind == "line" and entry.file:
            # Written by another process: this one's running hash no longer covers the file.
            self._files[entry.file] = _FileState(lines=entry.line or 0, size=entry.size or 0,
                                                 sha256=entry.file_sha256)
        elif entry.kind == "file" and entry.file:
            self._files[entry.file] = _FileState(whole=True, size=entry.size or 0, sha256=entry.sha256)
        elif entry.kind == "cut" and entry.file and entry.file in self._files:
            st = self._files[entry.file]
            st.size = entry.offset or 0
        elif entry.kind == "gone" and entry.file:
            self._files.pop(entry.file, None)

    def _append(self, fd: int, fields: dict[str, Any]) -> dict[str, Any]:
        entry = {"v": FORMAT_VERSION, "seq": self._seq + 1, "prev": self._prev,
                 **{k: v for k, v in fields.items() if v is not None}}
        line, mac = encode_entry(entry, self.key)
        view = memoryview(line)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
        self._seq, self._prev = entry["seq"], mac
        self._read_to += len(line)
        _write_private(head_path(self.key_file), SealHead(seal_id=self.seal_id, seq=self._seq, mac=mac)
                       .model_dump_json() + "\n", exclusive=False)
        return entry

    def _meta(self, rel: str, path: Path) -> dict[str, Any]:
        """Which leg (and rep) a file belongs to, and a leg spec's status."""
        parts = rel.split("/")
        meta: dict[str, Any] = {}
        if len(parts) >= 3 and parts[0] == "legs":
            meta["leg"] = parts[1]
            rep = next((p[4:] for p in parts[2:] if p.startswith("rep-") and p[4:].isdigit()), None)
            if rep is not None:
                meta["rep"] = int(rep)
            if parts[2:] == ["leg.json"]:
                try:
                    status = loads(read_bytes(path, self.root, limit=RECORD_BYTES, what="leg spec"),
                                   what="leg spec").get("status", "ok")
                except (OSError, ValueError, AttributeError):
                    status = None
                meta["status"] = status if isinstance(status, str) else "unreadable"
        return meta

    def _cut(self, fd: int, path: Path, rel: str, st: _FileState, actual: int) -> bytes:
        """Move bytes past the sealed end of ``path`` aside (``<file>.unsealed``) and record it."""
        with safe_write.open_update(path, self.root) as handle:
            handle.seek(st.size)
            dropped = handle.read(actual - st.size)
            safe_write.append_line(path.with_name(path.name + ".unsealed"),
                                   dropped if dropped.endswith(b"\n") else dropped + b"\n", self.root)
            handle.truncate(st.size)
            handle.flush()
            os.fsync(handle.fileno())
        self._append(fd, {"kind": "cut", "file": rel, "offset": st.size, "dropped_bytes": len(dropped),
                          "dropped_sha256": hashlib.sha256(dropped).hexdigest(), **self._meta(rel, path)})
        return dropped

    def _checked_hasher(self, path: Path, rel: str, st: _FileState) -> Any:
        """Running hash of the sealed prefix; re-hashed from disk (and checked against the seal) when
        this process does not hold it, so an edit made meanwhile is never laundered into the seal."""
        if st.hasher is not None:
            return st.hasher
        digest, read = _prefix_hasher(path, st.size)
        if read != st.size or (st.size and digest.hexdigest() != st.sha256):
            raise SealError(f"sealed file {rel!r} changed since it was sealed; refusing to extend it")
        st.hasher = digest
        return digest

    def _reconcile(self, fd: int, path: Path, rel: str, st: _FileState) -> bytes:
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            actual = 0
            if st.size:
                raise SealError(f"sealed file {rel!r} is gone; refusing to write it again") from None
        if actual < st.size:
            raise SealError(f"sealed file {rel!r} shrank ({actual} < {st.size} bytes) since it was sealed")
        return self._cut(fd, path, rel, st, actual) if actual > st.size else b""

    # ---------------------------------------------------------------- writers
    def append_line(self, path: Path, record: dict[str, Any]) -> dict[str, Any]:
        """Append one JSON line to ``path`` and seal it (bench lines carry leg, rep, contention)."""
        path = Path(path)
        data = jsonl_text(record).encode("utf-8")
        with self._locked() as fd:
            rel = self.rel(path)
            st = self._files.get(rel)
            if st is not None and st.whole:
                raise SealError(f"{rel!r} was sealed as a whole file; lines cannot be appended to it")
            st = st or _FileState()
            self._reconcile(fd, path, rel, st)
            hasher = self._checked_hasher(path, rel, st)
            with safe_write.open_append(path, self.root) as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            hasher.update(data)
            meta = self._meta(rel, path)
            if path.name == "bench_runs.jsonl":
                rep = record.get("rep")
                meta.update(rep=rep if isinstance(rep, int) and not isinstance(rep, bool) else None,
                            contention=record.get("contention") is not None)
            entry = self._append(fd, {"kind": "line", "file": rel, "line": st.lines + 1, "offset": st.size,
                                      "length": len(data) - 1, "sha256": hashlib.sha256(data[:-1]).hexdigest(),
                                      "size": st.size + len(data), "file_sha256": hasher.copy().hexdigest(), **meta})
            st.lines, st.size, st.sha256, st.hasher = st.lines + 1, st.size + len(data), entry["file_sha256"], hasher
            self._files[rel] = st
            return entry

    def write_file(self, path: Path, data: bytes) -> dict[str, Any]:
        """Replace ``path`` with ``data`` and seal it, both in one hold of the chain's lock: a reader that
        finds the chain unchanged across its reads never saw the new bytes without their seal
        (``auditor/snapshot.py``)."""
        path = Path(path)
        with self._locked() as fd:
            rel = self.rel(path)
            safe_write.write_bytes(path, data, self.root)
            entry = self._append(fd, {"kind": "file", "file": rel, "sha256": hashlib.sha256(data).hexdigest(),
                                      "size": len(data), **self._meta(rel, path)})
            self._files[rel] = _FileState(whole=True, size=len(data), sha256=entry["sha256"])
            return entry

    def seal_file(self, path: Path) -> dict[str, Any]:
        """Seal ``path`` as a whole, as it is now (supersedes an earlier seal of the same file)."""
        path = Path(path)
        with self._locked() as fd:
            rel = self.rel(path)
            try:
                sha, size = _file_sha256(path)
            except OSError as exc:
                raise SealError(f"cannot seal {rel!r}: {exc}") from None
            entry = self._append(fd, {"kind": "file", "file": rel, "sha256": sha, "size": size,
                                      **self._meta(rel, path)})
            self._files[rel] = _FileState(whole=True, size=size, sha256=sha)
            return entry

    def is_current(self, path: Path) -> bool:
        """Whether ``path`` exists with exactly the bytes last sealed for it."""
        path = Path(path)
        with self._locked():
            st = self._files.get(self.rel(path))
            if st is None or not path.is_file():
                return False
            sha, size = _file_sha256(path)
            return size == st.size and sha == st.sha256

    def sealed_size(self, path: Path) -> int:
        """How many leading bytes of ``path`` the chain sealed (0 when it sealed none): only they are
        evidence; a line past them was written but never sealed (the writer died in between)."""
        with self._locked():
            st = self._files.get(self.rel(Path(path)))
            return st.size if st is not None else 0

    def _cut_unsealed_tails(self, fd: int) -> None:
        """On opening an existing chain (a resume): cut whatever follows the last sealed line of every
        line-sealed file, as the next append to it would. Under the chain's lock no live writer is
        between writing a line and sealing it, so such bytes are a dead writer's (or someone else's):
        they are kept in ``<file>.unsealed`` and the chain records the cut."""
        for rel, st in sorted(self._files.items()):
            if st.whole:
                continue
            path = self.root / rel
            try:
                actual = path.lstat().st_size if path.is_file() and not path.is_symlink() else None
            except OSError:
                actual = None
            if actual is not None and actual > st.size:  # shrunk or gone: left to writers and the auditor
                dropped = self._cut(fd, path, rel, st, actual)
                log.warning("cut %d unsealed bytes off %r (written, never sealed) into %r", len(dropped), rel,
                            rel + ".unsealed")

    def cut_unsealed_tail(self, path: Path) -> bytes:
        """Cut whatever follows the last sealed line of ``path`` (torn or complete but unsealed)."""
        path = Path(path)
        with self._locked() as fd:
            rel = self.rel(path)
            st = self._files.get(rel)
            if st is not None and st.whole:
                return b""
            return self._reconcile(fd, path, rel, st or _FileState())

    def unlink(self, path: Path) -> None:
        """Remove ``path``; when it was sealed, record that the harness removed it."""
        path = Path(path)
        with self._locked() as fd:
            rel = self.rel(path)
            existed = safe_write.unlink(path, self.root)
            if rel in self._files or existed:
                self._append(fd, {"kind": "gone", "file": rel, **self._meta(rel, path)})
                self._files.pop(rel, None)

    def adopt_lines(self, path: Path, meta: Callable[[bytes], dict[str, Any]] | None = None) -> int:
        """Seal every line of a file a *builder* just wrote in one go (synthetic fixtures, the
        throughput benchmark's 700 MB file). The harness itself never adopts: it seals as it writes.
        Returns the number of lines sealed."""
        path = Path(path)
        with self._locked() as fd:
            rel = self.rel(path)
            if rel in self._files:
                raise SealError(f"{rel!r} is already sealed; adopt only a freshly written file")
            st = _FileState()
            running = hashlib.sha256()
            base = self._meta(rel, path)
            for offset, line in _raw_lines(path):
                running.update(line + b"\n")
                fields = {"kind": "line", "file": rel, "line": st.lines + 1, "offset": offset, "length": len(line),
                          "sha256": hashlib.sha256(line).hexdigest(), "size": offset + len(line) + 1,
                          "file_sha256": running.copy().hexdigest(), **base, **(meta(line) if meta else {})}
                self._append(fd, fields)
                st.lines, st.size = st.lines + 1, offset + len(line) + 1
            st.sha256, st.hasher = running.hexdigest(), running
            self._files[rel] = st
            return st.lines


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes without newline) of every complete line; refuses an unterminated last line."""
    offset = 0
    pieces: list[bytes] = []
    with open_regular(path, what="sealed file") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            start = 0
            while (nl := chunk.find(b"\n", start)) >= 0:
                if pieces:
                    pieces.append(chunk[start:nl])
                    line = b"".join(pieces)
                    pieces = []
                else:
                    line = chunk[start:nl]
                yield offset, line
                offset += len(line) + 1
                start = nl + 1
            if start < len(chunk):
                pieces.append(chunk[start:])
    if pieces:
        raise SealError(f"{str(path)!r} ends in an unterminated line; only complete lines can be sealed")


class _BenchKey(msgspec.Struct):
    rep: int | None = None
    contention: dict[str, Any] | None = None


_BENCH_KEY = msgspec.json.Decoder(_BenchKey)


def bench_meta(line: bytes) -> dict[str, Any]:
    """rep and contention presence of a bench line (for :meth:`Chain.adopt_lines`)."""
    try:
        key = decode_line(_BENCH_KEY, line)
    except DECODE_ERRORS:
        return {}
    return {"rep": key.rep, "contention": key.contention is not None}


# ------------------------------------------------------------------------------------- registry

_REGISTRY_LOCK = threading.RLock()
_CHAINS: dict[Path, Chain] = {}


def _holds_evidence(root: Path) -> bool:
    return any(d.is_dir() and any(p.is_file() for p in d.rglob("*")) for d in (root / n for n in EVIDENCE_DIRS))


def begin(run: Path | str, *, key_file: Path | str | None = None) -> Chain | None:
    """Open ``run``'s chain before the harness writes evidence into it: create it (and its key) for a
    fresh run, continue it when it exists (resume). A run that already holds evidence written before
    sealing existed is left unsealed (returns None, logged): a chain covering half of a run would
    make the unsealed half look inserted. ``key_file`` puts the key somewhere other than the key
    store (a fixture's ``seal.key`` beside its run); it may never lie inside the run."""
    root = Path(run).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with _REGISTRY_LOCK:
        cached = _CHAINS.get(root)
        if cached is not None:
            if not isinstance(cached, Chain) or cached.path.is_file():  # an attached stream has no file here
                return cached
            del _CHAINS[root]  # the run directory was replaced: start over
        path = root / EVIDENCE_FILE
        if path.is_file():
            chain = _open_existing(root, Path(key_file) if key_file else None)
        elif _holds_evidence(root):
            log.warning("run %r already holds evidence written without a seal; it stays unsealed", str(root))
            return None
        else:
            chain = _create(root, Path(key_file) if key_file else None)
        _CHAINS[root] = chain
        return chain


def _run_id(root: Path) -> str:
    try:
        value = loads(read_bytes(root / "run.json", root, limit=RECORD_BYTES, what="run.json"),
                      what="run.json").get("id")
    except (OSError, ValueError, AttributeError):
        value = None
    return value if isinstance(value, str) and value else root.name


def _create(root: Path, key_file: Path | None) -> Chain:
    run_id = _run_id(root)
    seal_id = f"{_safe(run_id).lstrip('.-')[:60] or 'run'}-{secrets.token_hex(6)}"
    stored = key_store_path(seal_id)
    if stored is None:  # cannot happen (``_safe``); the reader refuses any other id
        raise SealError(f"internal: {seal_id!r} is not a seal id")
    key_file = Path(os.path.abspath(key_file)) if key_file else stored
    if _inside(key_file, root):
        raise SealError(f"the seal key {str(key_file)!r} would lie inside the run {str(root)!r}: a key beside "
                        "the evidence proves nothing; point PERFWARDEN_KEY_DIR elsewhere")
    key = secrets.token_bytes(32)
    try:
        _write_private(key_file, SealKey(seal_id=seal_id, run_dir=str(root), key=key.hex(),
                                         created_at=_now_iso()).model_dump_json(indent=2) + "\n", exclusive=True)
    except FileExistsError:
        raise SealError(f"seal key {str(key_file)!r} already exists; a key seals one run only") from None
    chain = Chain(root, key, key_file, seal_id)
    with chain._locked() as fd:
        if chain._seq >= 0:  # another process created the chain first
            raise SealError(f"{str(chain.path)!r} was created concurrently by another writer")
        chain._append(fd, {"kind": "open", "seal_id": seal_id, "run_id": run_id, "key_id": key_id(key),
                           "created_at": _now_iso()})
    return chain


def _open_existing(root: Path, key_file: Path | None) -> Chain:
    path = root / EVIDENCE_FILE
    seal_id = chain_seal_id(path)
    if seal_id is None:
        raise SealError(f"{str(path)!r} does not start with an 'open' entry; it cannot be continued")
    stored = key_store_path(seal_id)  # None for a value that is not a seal id
    if stored is None:
        raise SealError(f"the seal chain of {str(root)!r} names the seal id {seal_id[:200]!r}, which is not an "
                        "identifier (letters, digits, '_', '.', '-'): no key is looked up by it")
    key_file = key_file or stored
    if not key_file.is_file():
        raise SealError(f"cannot continue the seal chain of {str(root)!r}: its key {str(key_file)!r} is not in the "
                        f"key store (set PERFWARDEN_KEY_DIR to the store that holds seal {seal_id!r})")
    sealed = read_key_file(key_file)
    if sealed.seal_id != seal_id:
        raise SealError(f"key {str(key_file)!r} is for seal {sealed.seal_id!r}, the chain is {seal_id!r}")
    chain = Chain(root, bytes.fromhex(sealed.key), key_file, seal_id)
    with chain._locked() as fd:  # reads and verifies every entry, rebuilding what is sealed
        chain._cut_unsealed_tails(fd)
    return chain


@contextmanager
def held(run: Path | str) -> Iterator[None]:
    """Hold the run's writers off (a shared ``flock`` on the chain) while a reader takes one consistent view:
    the head audits a step while cluster workers' evidence streams into the same run. Never used around a
    write by the same process (its own writers take the lock exclusively)."""
    path = Path(run) / EVIDENCE_FILE
    if not path.is_file():
        yield
        return
    fd = safe_write.open_fd(path, os.O_RDONLY, run)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def attach(run: Path | str, chain: Any) -> None:
    """Make ``chain`` the chain of ``run`` in this process (a cluster worker's scratch run: its writes stream
    to the head, formats/seal_stream.py ``StreamChain``); :func:`begin` and every writer then use it."""
    with _REGISTRY_LOCK:
        _CHAINS[Path(run).resolve()] = chain


def chain_for(path: Path | str) -> Chain | None:
    """The open chain of the run ``path`` lies in (nearest ancestor holding ``evidence.jsonl``)."""
    absolute = Path(os.path.abspath(path))
    parents = list(absolute.parents)[:RUN_SEARCH_DEPTH]
    with _REGISTRY_LOCK:
        for parent in parents:
            cached = _CHAINS.get(parent)
            if cached is not None:
                return cached
    for parent in parents:
        if (parent / EVIDENCE_FILE).is_file():
            return begin(parent)
    return None


def forget(run: Path | str) -> None:
    """Drop this process's handle on a run's chain (tests that rebuild a run in place)."""
    with _REGISTRY_LOCK:
        _CHAINS.pop(Path(run).resolve(), None)


# ----------------------------------------------------------------------------------- writers


def write_json(path: Path | str, payload: Any, root: Path | str | None = None) -> None:
    """Write JSON atomically; in a sealed run, replaced and sealed in one hold of the chain's lock
    (``Chain.write_file``). Nothing below the run's root (the chain's, else ``root``) is written through a
    link (``formats.safe_write``)."""
    chain = chain_for(path)
    if chain is None:
        write_json_atomic(Path(path), payload, root)
    else:
        chain.write_file(Path(path), safe_write.json_text(payload).encode("utf-8"))


def write_text(path: Path | str, text: str, root: Path | str | None = None) -> None:
    """Write a text file atomically; in a sealed run, replaced and sealed in one hold of the chain's lock."""
    path = Path(path)
    chain = chain_for(path)
    if chain is None:
        safe_write.write_text(path, text, root)
    else:
        chain.write_file(path, text.encode("utf-8"))


def append_jsonl(path: Path | str, record: dict[str, Any], root: Path | str | None = None) -> None:
    """Append one JSON line of evidence: the one evidence appender. Sealed when ``path`` lies in a sealed
    run; a plain append elsewhere (a bench file outside any run, unit tests). The newline is written with
    the record, so a crash leaves a torn tail readers detect."""
    chain = chain_for(path)
    if chain is None:
        safe_write.append_line(Path(path), jsonl_text(record).encode("utf-8"), root)
    else:
        chain.append_line(Path(path), record)


def seal_file(*paths: Path | str) -> None:
    """Seal files written by someone else (a server's log, LoadGen, an atomic replace) as they are now."""
    for path in paths:
        chain = chain_for(path)
        if chain is not None:
            chain.seal_file(Path(path))


def is_current(path: Path | str) -> bool:
    """Whether a harness file is done: it exists and, in a sealed run, holds what was sealed (a file
    written just before a crash but never sealed is written again on resume)."""
    chain = chain_for(path)
    return Path(path).is_file() if chain is None else chain.is_current(Path(path))


def cut_unsealed_tail(path: Path | str) -> bytes | None:
    """In a sealed run: cut whatever follows the last sealed line of ``path`` (returns the bytes
    moved aside); None when ``path`` is not in a sealed run (the caller handles torn tails itself)."""
    chain = chain_for(path)
    return None if chain is None else chain.cut_unsealed_tail(Path(path))


def sealed_size(path: Path | str) -> int | None:
    """In a sealed run: how many leading bytes of ``path`` are sealed (readers count only those as
    evidence); None when ``path`` is not in a sealed run."""
    chain = chain_for(path)
    return None if chain is None else chain.sealed_size(Path(path))


def unlink(path: Path | str) -> None:
    """Remove a file; in a sealed run, record that the harness removed it."""
    chain = chain_for(path)
    if chain is None:
        safe_write.unlink(path)
    else:
        chain.unlink(Path(path))


def root_of(path: Path | str) -> Path | None:
    """The root of the sealed run ``path`` lies in (writers check every folder below it), else None."""
    chain = chain_for(path)
    return chain.root if chain else None
