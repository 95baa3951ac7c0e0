"""The seal across nodes: evidence a worker writes is streamed to the head and sealed
there, as it arrives.

A worker node never holds a run's key. Its lab writes into a scratch copy of the legs it measures;
every harness write there goes through ``formats/seal.py`` as always, but the scratch run's "chain" is a
:class:`StreamChain`: it writes the bytes locally (so the lab reads back what it wrote, e.g. which reps
exist) and sends each write to the head's :class:`EvidenceSink` -- a bench line as its record, a whole
file as its bytes, a removal as its name -- which writes it into the real run and seals it with the
key that stays on the head. What the sink refuses: anything outside the run's evidence folders
(``legs/``, ``quality/``, ``profile/``, ``opbench/``), the chain itself, a name that is not a plain
relative path, and a whole-file write over a file sealed line by line. A worker that edits evidence after
streaming it (on a shared file system, or its own scratch) changes nothing the head sealed: the head's
file no longer matches its seal and the auditor says EVIDENCE_TAMPERED.

Transport is a callable ``send(op, rel, payload)``; orchestrator/cluster.py passes a Ray actor's method,
the unit tests a plain object.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from perfwarden.formats import safe_write, seal
from perfwarden.formats.records import EVIDENCE_DIRS, EVIDENCE_FILE
from perfwarden.formats.records import append_unsealed_jsonl as plain_append_jsonl

Send = Callable[[str, str, Any], None]
STREAM_DIRS = EVIDENCE_DIRS
MAX_FILE_BYTES = 256 << 20
"""The largest whole file a worker may stream (a server log's bound)."""


class StreamRefused(ValueError):
    """The head refuses what a worker sent (the message names it)."""


def check_rel(rel: str) -> str:
    """A streamed name: a relative POSIX path of plain components inside an evidence folder."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel:
        raise StreamRefused(f"streamed name {rel!r} is not a relative path")
    parts = PurePosixPath(rel).parts
    if len(parts) < 2 or parts[0] not in STREAM_DIRS:
        raise StreamRefused(f"streamed name {rel!r} is not inside an evidence folder {list(STREAM_DIRS)!r}")
    for part in parts:
        try:
            safe_write.check_name(part, "streamed path component")
        except OSError as exc:
            raise StreamRefused(str(exc)) from None
    return rel


class EvidenceSink:
    """The head's end: writes what workers stream into ``run`` and seals it there."""

    def __init__(self, run: Path | str):
        self.run = Path(run).resolve()
        chain = seal.begin(self.run)
        if chain is None:
            raise StreamRefused(f"{str(self.run)!r} holds unsealed evidence: streamed evidence would be sealed "
                                "beside it")
        self.chain: seal.Chain = chain
        self._lock = threading.Lock()

    def receive(self, op: str, rel: str, payload: Any) -> None:
        """One streamed write: ``line`` (a JSON record appended), ``file`` (whole bytes) or ``gone``."""
        path = self.run / check_rel(rel)
        with self._lock:
            if op == "line":
                if not isinstance(payload, dict):
                    raise StreamRefused(f"a streamed line of {rel!r} is not a JSON object")
                safe_write.make_dirs(path.parent, self.run)
                self.chain.append_line(path, payload)
            elif op == "file":
                if not isinstance(payload, bytes) or len(payload) > MAX_FILE_BYTES:
                    raise StreamRefused(f"a streamed file {rel!r} is not bytes of at most {MAX_FILE_BYTES}")
                if path.name == "bench_runs.jsonl":
                    raise StreamRefused(f"{rel!r} is sealed line by line; a worker cannot replace it whole")
                safe_write.make_dirs(path.parent, self.run)
                self.chain.write_file(path, payload)
            elif op == "gone":
                self.chain.unlink(path)
            else:
                raise StreamRefused(f"unknown stream operation {op!r}")

    def snapshot(self, legs: list[str]) -> dict[str, bytes]:
        """The sealed bytes of these legs' files, for a worker that continues them (a re-measure adds reps
        to legs measured before): rel -> bytes, only what the chain sealed."""
        out: dict[str, bytes] = {}
        for leg in legs:
            folder = self.run / "legs" / safe_write.check_name(leg, "leg name")
            if not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                if not path.is_file() or path.is_symlink():
                    continue
                size = self.chain.sealed_size(path)
                if path.name != "bench_runs.jsonl" and not self.chain.is_current(path):
                    continue
                data = path.read_bytes()
                out[f"legs/{leg}/{path.name}"] = data[:size] if path.name == "bench_runs.jsonl" else data
        return out


class StreamChain:
    """The worker's stand-in for a seal chain: local writes plus a stream to the head; it has no key."""

    def __init__(self, root: Path | str, send: Send):
        self.root = Path(root).resolve()
        self.path = self.root / EVIDENCE_FILE  # never written: the real chain is on the head
        self.send = send
        self._sent: dict[str, tuple[int, str]] = {}
        self._lock = threading.RLock()

    def rel(self, path: Path) -> str:
        return safe_write.relative(path, self.root)

    def preload(self, files: dict[str, bytes]) -> None:
        """Lay down what the head already sealed (a continued leg) as already streamed."""
        for rel, data in files.items():
            path = self.root / check_rel(rel)
            safe_write.make_dirs(path.parent, self.root)
            safe_write.write_bytes(path, data, self.root)
            self._sent[rel] = (len(data), hashlib.sha256(data).hexdigest())

    def append_line(self, path: Path, record: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            rel = self.rel(Path(path))
            plain_append_jsonl(Path(path), record, self.root)
            self.send("line", rel, record)
            data = Path(path).read_bytes()
            self._sent[rel] = (len(data), hashlib.sha256(data).hexdigest())
            return {"file": rel}

    def write_file(self, path: Path, data: bytes) -> dict[str, Any]:
        with self._lock:
            safe_write.write_bytes(path, data, self.root)
            return self.seal_file(path)

    def seal_file(self, path: Path) -> dict[str, Any]:
        with self._lock:
            rel = self.rel(Path(path))
            data = Path(path).read_bytes()
            self.send("file", rel, data)
            self._sent[rel] = (len(data), hashlib.sha256(data).hexdigest())
            return {"file": rel}

    def is_current(self, path: Path) -> bool:
        with self._lock:
            sent = self._sent.get(self.rel(Path(path)))
            if sent is None or not Path(path).is_file():
                return False
            data = Path(path).read_bytes()
            return (len(data), hashlib.sha256(data).hexdigest()) == sent

    def sealed_size(self, path: Path) -> int:
        with self._lock:
            return self._sent.get(self.rel(Path(path)), (0, ""))[0]

    def cut_unsealed_tail(self, path: Path) -> bytes:
        """Bytes past what was streamed are no evidence: cut them (kept nowhere: the head never had them)."""
        with self._lock:
            path = Path(path)
            size = self.sealed_size(path)
            if not path.is_file() or path.stat().st_size <= size:
                return b""
            data = path.read_bytes()
            safe_write.write_bytes(path, data[:size], self.root)
            return data[size:]

    def unlink(self, path: Path) -> None:
        with self._lock:
            rel = self.rel(Path(path))
            safe_write.unlink(path, self.root)
            if self._sent.pop(rel, None) is not None:
                self.send("gone", rel, None)
