"""Write only inside the run: the mirror of ``safe_read`` for every file perfwarden writes.

A run directory is input too: ``run --resume``, ``measure`` and ``audit --save`` write into a directory
someone else may have prepared. A link planted where a file (or a folder) belongs would make a plain
``open(path, "w")`` or ``mkdir(parents=True)`` write wherever it points; a FIFO would block it. So:

- every folder under the run root is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to its parent's
  descriptor (``dir_fd``) and created there when missing: a link (or a file) where a folder belongs
  is refused, and a folder swapped for a link meanwhile is never followed;
- a file is written as a temporary file created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` in that folder,
  then renamed over the target inside the same folder (a rename replaces a link, never its target);
  an append opens the file itself with ``O_NOFOLLOW | O_NONBLOCK`` and checks it is a regular file;
- a link, FIFO, device, socket or folder where a file belongs is refused (:class:`RefusedWrite`, an
  input error: exit 3) *before* anything is written; :func:`preflight` lets a command check every
  file it will write before it starts;
- a leg or claim name becomes a path component only through :func:`check_name`.

The run root itself is the user's choice (named on the command line), so links above and at it are
followed; everything below it is checked. Writers that know no root (a file outside any run) still
never follow a link at the file itself.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from perfwarden.formats.safe_read import RefusedInput, kind_of

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_FILE_FLAGS = _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+=-]{0,127}")
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""Files SQLite creates beside a database: checked with it."""


class RefusedWrite(RefusedInput):
    """A write that would leave the run, go through a link, or replace something that is not a file."""


def check_name(name: object, what: str = "name") -> str:
    """``name`` when it is one safe path component (a leg, a claim scope): letters, digits and
    ``_ . @ + = -``, starting with a letter or digit, at most 128 characters; else RefusedWrite."""
    if isinstance(name, str) and _NAME.fullmatch(name) and ".." not in name:
        return name
    raise RefusedWrite(str(name), "outside", f"{what} {name!r} is not a single safe path component (letters, "
                       "digits and _ . @ + = -, starting with a letter or digit, at most 128 characters, no '..')")


# --------------------------------------------------------------------------------------- locating


def _split(path: Path | str, root: Path | str | None) -> tuple[Path, list[str], str]:
    """(trusted base folder, folders under it, file name) of ``path``. With a root, ``path`` must lie
    under it (``..`` that leaves it is refused); links above the root are the user's and are followed."""
    absolute = Path(os.path.abspath(path))
    if root is None:
        return absolute.parent, [], absolute.name
    real_root = os.path.realpath(root)
    # Top-down, so the first ancestor that *is* the root wins (a link below the root back to it does not).
    for base in reversed([absolute, *absolute.parents]):
        if os.path.realpath(base) == real_root:
            parts = list(absolute.relative_to(base).parts)
            if not parts:
                break
            return base, parts[:-1], parts[-1]
    raise RefusedWrite(path, "outside", f"{str(path)!r} is not inside the run {str(root)!r}: not written")


def relative(path: Path | str, root: Path | str) -> str:
    """``path`` relative to ``root`` (POSIX), without resolving a link below the root."""
    _base, parts, name = _split(path, root)
    return "/".join([*parts, name])


def _shown(base: Path, parts: list[str]) -> str:
    return str(base.joinpath(*parts)) if parts else str(base)


def _refuse_slot(dfd: int, name: str, shown: str, want: str) -> None:
    """Raise RefusedWrite saying what is at ``name`` instead of a ``want`` (a file or a folder)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        found = kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else "a regular file"
    except OSError:
        found = "not usable"
    raise RefusedWrite(shown, "not_regular", f"{shown!r} is {found} where {want} belongs: nothing is written "
                       "through it (a run directory may hold only real folders and regular files)")


def _open_base(base: Path, create: bool) -> int | None:
    try:
        return os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        os.makedirs(base, exist_ok=True)
        return os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)


def _open_dirs(base: Path, parts: list[str], create: bool) -> int | None:
    """Descriptor of ``base/parts…``, each folder opened without following a link (created when
    ``create``); None when one is missing and ``create`` is false."""
    fd = _open_base(base, create)
    if fd is None:
        return None
    for i, part in enumerate(parts):
        try:
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST, errno.ENXIO):
                shown = _shown(base, parts[:i + 1])
                try:
                    _refuse_slot(fd, part, shown, "a folder")
                finally:
                    os.close(fd)
            os.close(fd)
            raise
        os.close(fd)
        fd = nfd
    return fd


@contextmanager
def _parent(path: Path | str, root: Path | str | None) -> Iterator[tuple[int, str, str]]:
    """(folder descriptor, file name, shown path) with the folders created and checked."""
    base, parts, name = _split(path, root)
    fd = _open_dirs(base, parts, create=True)
    assert fd is not None
    try:
        yield fd, name, _shown(base, [*parts, name])
    finally:
        os.close(fd)


def _check_slot(dfd: int, name: str, shown: str) -> bool:
    """Whether a regular file is at ``name``; RefusedWrite when something else is (nothing is absent)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        _refuse_slot(dfd, name, shown, "a file")
    return True


# ---------------------------------------------------------------------------------------- checks


def check_file(path: Path | str, root: Path | str | None = None) -> None:
    """Refuse (RefusedWrite) when writing ``path`` would go through a link or replace a non-file;
    writes nothing (a missing file or folder is fine: it would be created)."""
    base, parts, name = _split(path, root)
    fd = _open_dirs(base, parts, create=False)
    if fd is not None:
        try:
            _check_slot(fd, name, _shown(base, [*parts, name]))
        finally:
            os.close(fd)


def check_dir(path: Path | str, root: Path | str | None = None) -> None:
    """Refuse when ``path`` or a folder above it (below the root) is not a real folder."""
    base, parts, name = _split(path, root)
    fd = _open_dirs(base, [*parts, name], create=False)
    if fd is not None:
        os.close(fd)


def preflight(root: Path | str, files: Iterable[Path | str] = (), dirs: Iterable[Path | str] = ()) -> None:
    """Check every file and folder a command will write under ``root`` before it writes any."""
    for d in dirs:
        check_dir(d, root)
    for f in files:
        check_file(f, root)


def check_files_in(folder: Path | str, root: Path | str, limit: int = 10_000) -> None:
    """Every entry of ``folder`` (claims/, verdicts/: files a command may write again) is a regular file:
    a link or FIFO among them is refused before anything is written (at most ``limit`` entries looked at)."""
    check_dir(folder, root)
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder))[:limit]:
            check_file(Path(folder) / name, root)


def check_sqlite(path: Path | str, root: Path | str | None = None) -> None:
    """A SQLite database and the files SQLite keeps beside it: regular files or absent, checked before
    ``sqlite3.connect`` (which follows links) is called."""
    path = Path(path)
    for suffix in ("", *SQLITE_SIDE_FILES):
        check_file(path.with_name(path.name + suffix), root)


# --------------------------------------------------------------------------------------- writers


def make_dirs(path: Path | str, root: Path | str | None = None) -> Path:
    """``mkdir -p`` under ``root`` without following a link; returns ``path``."""
    base, parts, name = _split(path, root)
    fd = _open_dirs(base, [*parts, name], create=True)
    assert fd is not None
    os.close(fd)
    return Path(path)


def write_bytes(path: Path | str, data: bytes, root: Path | str | None = None) -> None:
    """Replace ``path`` atomically (readers see the old file or the whole new one) inside ``root``."""
    with _parent(path, root) as (dfd, name, shown):
        _check_slot(dfd, name, shown)
        tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise


def write_text(path: Path | str, text: str, root: Path | str | None = None) -> None:
    write_bytes(path, text.encode("utf-8"), root)


def json_text(payload: Any) -> str:
    """A record (pydantic model) or plain value as the indented JSON perfwarden writes."""
    from pydantic import BaseModel

    if isinstance(payload, BaseModel):
        return payload.model_dump_json(indent=2) + "\n"
    return json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_json(path: Path | str, payload: Any, root: Path | str | None = None) -> None:
    write_text(path, json_text(payload), root)


def open_fd(path: Path | str, flags: int, root: Path | str | None = None, mode: int = 0o644) -> int:
    """A descriptor on the regular file ``path`` (``O_CREAT`` creates it), never through a link and
    never a FIFO or device; the caller closes it."""
    with _parent(path, root) as (dfd, name, shown):
        _check_slot(dfd, name, shown)
        try:
            fd = os.open(name, flags | _FILE_FLAGS, mode, dir_fd=dfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
                _refuse_slot(dfd, name, shown, "a file")
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            _refuse_slot(dfd, name, shown, "a file")
        return fd


def open_append(path: Path | str, root: Path | str | None = None, *, text: bool = False,
                buffering: int = -1) -> Any:
    """``open(path, "ab")`` (or ``"a"`` as UTF-8 text) under the rules above."""
    fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, root)
    if text:
        return os.fdopen(fd, "a", encoding="utf-8", errors="replace", buffering=buffering)
    return os.fdopen(fd, "ab", buffering=buffering)


def append_line(path: Path | str, line: bytes, root: Path | str | None = None) -> None:
    """Append one whole line (newline included) and fsync it."""
    with open_append(path, root) as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def open_update(path: Path | str, root: Path | str | None = None) -> BinaryIO:
    """``open(path, "rb+")`` of an existing regular file under the rules above."""
    return os.fdopen(open_fd(path, os.O_RDWR, root), "rb+")


def unlink(path: Path | str, root: Path | str | None = None) -> bool:
    """Remove ``path`` (a link is removed itself, never its target); True when something was removed."""
    base, parts, name = _split(path, root)
    fd = _open_dirs(base, parts, create=False)
    if fd is None:
        return False
    try:
        os.unlink(name, dir_fd=fd)
        return True
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        _refuse_slot(fd, name, _shown(base, [*parts, name]), "a file")
        raise
    finally:
        os.close(fd)


def replace(src: Path | str, dst: Path | str, root: Path | str | None = None) -> None:
    """Rename ``src`` over ``dst`` (same folder) after checking ``dst`` is a file or absent."""
    src, dst = Path(src), Path(dst)
    with _parent(dst, root) as (dfd, name, shown):
        _check_slot(dfd, name, shown)
        if not _check_slot(dfd, src.name, str(src)):
            raise FileNotFoundError(errno.ENOENT, "no such file", str(src))
        os.replace(src.name, name, src_dir_fd=dfd, dst_dir_fd=dfd)
