"""Open only what a reader should: a regular file inside its directory, of bounded size.

Every file the auditor, review and backtest read was handed over by someone else (an optimizing agent
wrote the run directory; a fixture or a verdict can come from anywhere). So a path is untrusted:

- a symlink can point out of the run directory (at a secret, or at evidence from another run);
- a FIFO blocks a plain ``open()`` forever, ``/dev/zero`` never ends, a socket or directory is not data;
- a regular file can be 100 GB, or one line of it can be.

The rules here are format-level and shared by the harness and the auditor (they compute no number):
a path is resolved (links followed) and must stay inside ``root`` when a root is given; it must be a
regular file, checked with ``os.stat`` *before* opening (so a FIFO is never opened) and again with
``fstat`` on the descriptor that is read (so a file swapped in between is caught). The descriptor is
opened with ``O_NOFOLLOW | O_NONBLOCK``: a last component swapped for a link fails instead of being
followed, and a FIFO swapped in is never waited on. On Linux the descriptor's own path
(``/proc/self/fd``) is checked against ``root`` too, which catches a parent directory swapped for a
link. Every size bound is in the error message.

Problems raise ``RefusedInput`` (an ``OSError``, so readers that already turn ``OSError`` into a clear
message or an evidence finding keep doing so), with a ``reason`` the caller maps to a finding code or an
exit code.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, Iterator, Literal

Reason = Literal["missing", "outside", "not_regular", "too_large", "unreadable"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# Bounds, one place. Each is generous for honest input and small enough that hostile input is refused
# before it costs real memory or time.
CLAIM_BYTES = 1 * MiB
"""A claim is a small JSON record (names, paths, a headline, a few reported numbers)."""
STRING_CHARS = 4096
"""One string field of a claim, verdict or answer key (names, paths, metrics are far shorter)."""
MESSAGE_CHARS = 64 * KiB
"""One string of a verdict (a finding message quoting names, a not-checked note, an excerpt)."""
RECORD_BYTES = 16 * MiB
"""Small JSON records read whole: leg.json, server_info.json, quality evals, run.json, answer keys."""
VERDICT_BYTES = 64 * MiB
"""A verdict or report.json (findings are bounded per gate, so real ones are well under a MiB)."""
TEXT_BYTES = 256 * MiB
"""A text file read whole into lines (a server log)."""
LOG_LINE_CHARS = 64 * KiB
"""One line of a server log (a logged request is a few KiB): the gates scan log lines with regexes, and
a longer line is not a log line."""
KEY_BYTES = 64 * KiB
"""A seal key file (``--key`` or the key store): a small JSON record or a line of hex digits."""
REPORT_BYTES = 8 * MiB
"""A producer's prose report whose numbers are traced."""
LINE_BYTES = 64 * MiB
"""One line of a JSONL or log file (outputs, opbench, events, LoadGen logs)."""
PROFILE_LINE_BYTES = 4 * MiB
"""One line of ``profile.jsonl``: one op's time and the distinct shapes it was served at (a few dozen;
real lines are under 1 KiB). Each shape decodes to a list of integers, ten times its bytes: at the
generic bound one line would hold over a gigabyte."""
BENCH_LINE_BYTES = 1 * GiB
"""One ``bench_runs.jsonl`` line: one rep's per-request arrays (a 400k-request rep is ~300 MB)."""

_KIND = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link"}
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class RefusedInput(OSError):
    """A file that must not be read: missing, outside its root, not a regular file, or too large."""

    def __init__(self, path: Path | str, reason: Reason, message: str):
        super().__init__(message)
        self.path = Path(path)
        self.reason: Reason = reason
        self.message = message

    def __str__(self) -> str:
        return self.message


def size_text(n: int) -> str:
    """``1,048,576 bytes (1 MiB)``: exact bytes, with a readable unit for the big ones."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n:,} bytes ({n / size:.3g} {unit})"
    return f"{n:,} bytes"


def _shown(path: Path | str, root: Path | str | None) -> str:
    if root is not None:
        try:
            return str(Path(os.path.abspath(path)).relative_to(os.path.abspath(root)))
        except ValueError:
            pass
    return str(path)


def _inside(real: str, real_root: str) -> bool:
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    return _KIND.get(stat.S_IFMT(mode), "not a regular file")


def resolve_inside(path: Path | str, root: Path | str | None, what: str = "file") -> str:
    """The path with every link resolved; ``RefusedInput('outside')`` when it leaves ``root``."""
    path = Path(path)
    real = os.path.realpath(path)
    if root is not None and not _inside(real, os.path.realpath(root)):
        raise RefusedInput(path, "outside", f"{what} {_shown(path, root)!r} resolves outside {str(root)!r} "
                           f"(to {real!r}): a link out of the directory is not read")
    return real


def check_regular(path: Path | str, root: Path | str | None = None, what: str = "file") -> os.stat_result:
    """Stat (never open) ``path``: it must exist, resolve inside ``root`` and be a regular file."""
    real = resolve_inside(path, root, what)
    shown = _shown(Path(path), root)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise RefusedInput(path, "missing", f"{what} {shown!r} does not exist") from None
    except OSError as exc:
        raise RefusedInput(path, "unreadable", f"cannot stat {what} {shown!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RefusedInput(path, "not_regular", f"{what} {shown!r} is {kind_of(st.st_mode)}, not a regular "
                           "file: not read")
    return st


def is_regular(path: Path | str, root: Path | str | None = None) -> bool:
    """True when ``path`` is a regular file inside ``root`` (never opens, never raises)."""
    try:
        check_regular(path, root)
    except OSError:
        return False
    return True


def exists(path: Path | str) -> bool:
    """True when anything is at ``path`` (a dangling or outward link included): such a file was
    handed over and must be judged, not treated as absent."""
    return os.path.lexists(path)


REOPEN_TRIES = 16
"""How often a file replaced by another regular file between its stat and its open is looked at again. A
writer that renames a new version in a tight loop (the graph's auditor saving verdicts while a review reads
them) wins three races in a row on a busy 2-core machine; each further try halves the odds that it wins all."""


def open_regular(path: Path | str, root: Path | str | None = None, what: str = "file",
                 limit: int | None = None) -> BinaryIO:
    """Open ``path`` for binary reading under the rules above; ``limit`` bounds its size. A writer replaces
    a file by renaming a new one over it (a verdict, a report, a sealed file): when that lands between the
    stat and the open, the new file is checked and opened afresh (``REOPEN_TRIES`` times), so a reader gets
    the old file or the new one -- and never a descriptor that did not pass every check."""
    for attempt in range(REOPEN_TRIES):
        st = check_regular(path, root, what)
        fd = _open_checked(path, root, what, limit, st, replaced_ok=attempt + 1 < REOPEN_TRIES)
        if fd is not None:
            return os.fdopen(fd, "rb")
    raise AssertionError("unreachable: the last try raises or returns")  # pragma: no cover


def _open_checked(path: Path | str, root: Path | str | None, what: str, limit: int | None, st: os.stat_result,
                  replaced_ok: bool) -> int | None:
    """The descriptor of the file ``st`` describes; None when it was replaced by another regular file
    meanwhile and ``replaced_ok`` (the caller looks again)."""
    real = os.path.realpath(path)
    shown = _shown(Path(path), root)
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as exc:
        raise RefusedInput(path, "unreadable", f"cannot open {what} {shown!r}: {exc.strerror or exc}") from None
    try:
        fst = os.fstat(fd)
        if replaced_ok and stat.S_ISREG(fst.st_mode) and (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            return None
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise RefusedInput(path, "not_regular", f"{what} {shown!r} changed while it was being opened "
                               f"(now {kind_of(fst.st_mode) if not stat.S_ISREG(fst.st_mode) else 'another file'}): "
                               "not read")
        if root is not None:
            _check_fd_inside(fd, path, root, what)
        if limit is not None and fst.st_size > limit:
            raise RefusedInput(path, "too_large", f"{what} {shown!r} is {size_text(fst.st_size)}, over the "
                               f"{size_text(limit)} bound: not read")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _check_fd_inside(fd: int, path: Path | str, root: Path | str, what: str) -> None:
    """Where the kernel says the open descriptor is (Linux); skipped where /proc is absent."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    if not _inside(real, os.path.realpath(root)):
        raise RefusedInput(path, "outside", f"{what} {_shown(Path(path), root)!r} was opened outside "
                           f"{str(root)!r} (at {real!r}; a directory was swapped for a link): not read")


def read_bytes(path: Path | str, root: Path | str | None = None, *, limit: int, what: str = "file") -> bytes:
    """The whole file, at most ``limit`` bytes (a file that grows past the bound while read is refused)."""
    with open_regular(path, root, what, limit) as handle:
        # Read what the file holds (+1 to see growth), never ``limit`` bytes up front: CPython allocates a
        # read's whole size before reading, so a 256 MiB bound on a 2 KB log would cost 256 MiB.
        size = os.fstat(handle.fileno()).st_size
        chunks, total = [], 0
        while total <= limit:
            chunk = handle.read(min(limit + 1 - total, max(size - total + 1, 1 << 16)))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
    if len(data) > limit:
        raise RefusedInput(path, "too_large", f"{what} {_shown(Path(path), root)!r} grew past the "
                           f"{size_text(limit)} bound while it was read: not read")
    return data



def iter_chunks(path: Path | str, root: Path | str | None = None, *, limit: int, what: str = "file",
                chunk: int = 1 * MiB) -> Iterator[bytes]:
    """The file's bytes in pieces of at most ``chunk``, under ``read_bytes``' rules (one piece in memory
    at a time: a reader that streams a 256 MiB log never holds it). A file that grows past ``limit``
    while read raises ``RefusedInput`` after the pieces already yielded: a caller keeps nothing from a
    refused file."""
    total = 0
    with open_regular(path, root, what, limit) as handle:
        while piece := handle.read(min(chunk, limit + 1 - total)):
            total += len(piece)
            if total > limit:
                raise RefusedInput(path, "too_large", f"{what} {_shown(Path(path), root)!r} grew past the "
                                   f"{size_text(limit)} bound while it was read: not read")
            yield piece


def long_string(obj: object, limit: int = STRING_CHARS) -> tuple[str, int] | None:
    """(location, length) of the first string (key or value) longer than ``limit`` in a decoded JSON
    value, or None. Iterative, so a deeply nested value cannot exhaust the stack."""
    stack: list[tuple[str, object]] = [("", obj)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if len(value) > limit:
                return where or "the top level", len(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                name = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and len(key) > limit:
                    return f"a key under {where or 'the top level'!r}", len(key)
                stack.append((name[:80], item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
    return None
