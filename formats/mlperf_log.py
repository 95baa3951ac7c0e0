"""Readers for MLPerf LoadGen logs: ``mlperf_log_detail.txt`` and ``mlperf_log_summary.txt``.

Both readers are strict: a file that cannot be taken as LoadGen's own output raises
:class:`MlperfLogError` naming the file and (where there is one) the 1-based line, and never yields a
partial result that a caller could mistake for a measurement (no score of 0 for a missing line).

**Detail log** (``:::MLLOG {json}`` lines, as written by LoadGen's ``logging.cc``). Rules follow the
official ``tools/submission/log_parser.py`` (``MLPerfLog(strict=True)``):

- the first line must start with the marker (``:::MLLOG``; ``:::ENDPTS`` for endpoint logs);
- every line that starts with the marker must decode as a JSON object with a ``key`` and a ``value``;
  one that does not is an error that reports its line number (the official parser raises too);
- lines without the marker are ignored (counted in :attr:`DetailLog.other_lines`);
- when a key occurs more than once **the first occurrence wins**; unlike the official parser we keep
  every occurrence (:attr:`DetailLog.occurrences`) so that an auditor can see duplicates and, in
  particular, conflicting values (:meth:`DetailLog.conflicts`);
- a last line without a newline (a torn write) that does not decode is an error; one that decodes is
  kept and noted in :attr:`DetailLog.notes`;
- ``NaN``/``Infinity`` are rejected (LoadGen never writes them).

**Summary log** (human-readable ``key : value`` lines in sections separated by ``====`` rules). Every
line with a colon becomes a :class:`SummaryEntry` (bullets ``*`` stripped from the key); other lines
(section titles, ``No errors encountered during test.``, early-stopping prose) are kept as text.
First occurrence of a key wins here too, with all occurrences recorded. A summary without its
``MLPerf Results Summary`` header, or without the closing ``No errors encountered`` / ``N ERRORS``
line that LoadGen always writes last, is an error (not a summary / truncated).

Every record carries a :class:`perfwarden.formats.jsonl.LineRef` (file, line, byte offset, length) so
a finding can cite the exact raw line and its sha256.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfwarden.formats.jsonl import LineIssue, LineRef, iter_raw_lines
from perfwarden.formats.safe_read import RefusedInput, check_regular
from perfwarden.formats.strict_json import StrictJsonError, loads

DETAIL_FILENAME = "mlperf_log_detail.txt"
SUMMARY_FILENAME = "mlperf_log_summary.txt"
MLLOG_MARKER = ":::MLLOG"
ENDPTS_MARKER = ":::ENDPTS"
_MARKERS = (MLLOG_MARKER, ENDPTS_MARKER)
SUMMARY_TITLE = "MLPerf Results Summary"


class MlperfLogError(Exception):
    """A LoadGen log that cannot be read as LoadGen output (missing, unreadable, malformed).

    ``kind`` is ``missing`` (a file or a required key is absent) or ``corrupt`` (present but not
    decodable / not a valid value); ``path`` and ``line`` (1-based, ``None`` for the whole file)
    locate the problem.
    """

    def __init__(self, message: str, *, path: Path | None = None, line: int | None = None,
                 kind: str = "corrupt"):
        super().__init__(message)
        self.message = message
        self.path = Path(path) if path is not None else None
        self.line = line
        self.kind = kind

    def __str__(self) -> str:
        return self.message


def _open_check(path: Path, what: str, root: Path | None) -> None:
    """Stat, never open: a FIFO, a device or a link out of ``root`` is refused before it is read."""
    try:
        check_regular(path, root, what)
    except RefusedInput as exc:
        raise MlperfLogError(str(exc), path=path, kind="missing" if exc.reason in ("missing", "outside")
                             else "corrupt") from None


MLLOG_LINE_BYTES = 16 << 20
"""Longest unfinished last line of a detail log that is read (most ``:::MLLOG`` lines are under a
kilobyte; the longest in the shared corpora is 1.36 MB, a list of generated query samples)."""


def _read_lines(path: Path, what: str, root: Path | None) -> tuple[list[tuple[LineRef, bytes]], list[LineIssue], str, int]:
    """(complete lines, issues, sha256, size) in one pass; a line over the size bound is an error."""
    digest = hashlib.sha256()
    issues: list[LineIssue] = []
    try:
        lines = list(iter_raw_lines(path, issues, digest, root, cite=True))  # cited later without a re-read
        size = os.stat(path).st_size
    except OSError as exc:
        raise MlperfLogError(f"cannot read {what} {str(path)!r}: {exc}", path=path) from exc
    for issue in issues:
        if issue.kind == "corrupt" or (issue.kind == "torn_tail" and issue.sha256 is not None):
            raise MlperfLogError(f"{what}: {issue.message}", path=path, line=issue.ref.line)
    return lines, issues, digest.hexdigest(), size


def _decode_utf8(raw: bytes, path: Path, line: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MlperfLogError(f"line {line} of {str(path)!r} is not UTF-8 text: {exc}", path=path,
                             line=line) from exc


# ------------------------------------------------------------------------------------------ detail


@dataclass(frozen=True)
class MllogRecord:
    """One ``:::MLLOG`` line."""

    key: str
    """The MLLOG key, e.g. ``result_validity``."""
    value: Any
    """The decoded JSON value (int, float, str, bool, list, dict)."""
    ref: LineRef
    """Where the line is (file, 1-based line, byte offset, length)."""
    time_ms: float | None = None
    """LoadGen's ``time_ms`` (milliseconds since the logger started), if present."""
    is_error: bool = False
    """``metadata.is_error``."""
    is_warning: bool = False
    """``metadata.is_warning``."""

    @property
    def line(self) -> int:
        return self.ref.line


@dataclass
class DetailLog:
    """A parsed ``mlperf_log_detail.txt``."""

    path: Path
    sha256: str
    """sha256 of the whole file."""
    size: int
    """File size in bytes."""
    marker: str
    """``:::MLLOG`` or ``:::ENDPTS``."""
    records: list[MllogRecord] = field(default_factory=list)
    """Every marker line, in file order."""
    first: dict[str, MllogRecord] = field(default_factory=dict)
    """Key -> first occurrence (the one the official parser uses)."""
    occurrences: dict[str, list[MllogRecord]] = field(default_factory=dict)
    """Key -> every occurrence, in file order."""
    other_lines: int = 0
    """Non-blank lines without the marker (ignored, as the official parser does)."""
    notes: list[str] = field(default_factory=list)
    """Things worth knowing that did not stop the read (e.g. a missing final newline)."""

    def __contains__(self, key: str) -> bool:
        return key in self.first

    def get(self, key: str, default: Any = None) -> Any:
        """Value of the first occurrence of ``key`` (``default`` when absent)."""
        rec = self.first.get(key)
        return default if rec is None else rec.value

    def record(self, key: str) -> MllogRecord | None:
        return self.first.get(key)

    def duplicates(self) -> dict[str, list[MllogRecord]]:
        """Keys that occur more than once."""
        return {k: v for k, v in self.occurrences.items() if len(v) > 1}

    def conflicts(self) -> dict[str, list[MllogRecord]]:
        """Keys that occur more than once with different values (first wins, but they disagree)."""
        out = {}
        for key, recs in self.duplicates().items():
            first = json.dumps(recs[0].value, sort_keys=True)
            if any(json.dumps(r.value, sort_keys=True) != first for r in recs[1:]):
                out[key] = recs
        return out

    def errors(self) -> list[MllogRecord]:
        """Records LoadGen flagged as errors (``metadata.is_error``)."""
        return [r for r in self.records if r.is_error]

    def warnings(self) -> list[MllogRecord]:
        """Records LoadGen flagged as warnings (``metadata.is_warning``)."""
        return [r for r in self.records if r.is_warning]

    def num_errors(self) -> int:
        """``num_errors`` when logged (LoadGen >= 5.0), else the count of ``is_error`` records, as
        the official parser does."""
        if "num_errors" in self.first and isinstance(self.first["num_errors"].value, int):
            return int(self.first["num_errors"].value)
        return len(self.errors())

    def messages(self, key: str) -> list[str]:
        """String values of every occurrence of ``key`` (e.g. ``warning_generic_message``)."""
        return [r.value for r in self.occurrences.get(key, []) if isinstance(r.value, str)]


def _decode_mllog(text: str, marker: str, ref: LineRef, path: Path) -> MllogRecord:
    payload = text[len(marker):]
    try:
        obj = loads(payload, what=f"{marker} payload")  # LoadGen's seeds are uint64: inside the one range
    except StrictJsonError as exc:
        raise MlperfLogError(f"line {ref.line} of {str(path)!r} is a {marker} line whose JSON does not "
                             f"decode: {exc}", path=path, line=ref.line) from exc
    if not isinstance(obj, dict):
        raise MlperfLogError(f"line {ref.line} of {str(path)!r}: {marker} payload is a "
                             f"{type(obj).__name__}, not a JSON object", path=path, line=ref.line)
    if "key" not in obj or "value" not in obj:
        missing = [k for k in ("key", "value") if k not in obj]
        raise MlperfLogError(f"line {ref.line} of {str(path)!r}: {marker} record lacks "
                             f"{', '.join(map(repr, missing))}", path=path, line=ref.line)
    key = obj["key"]
    if not isinstance(key, str) or not key:
        raise MlperfLogError(f"line {ref.line} of {str(path)!r}: {marker} key {key!r} is not a "
                             "non-empty string", path=path, line=ref.line)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    time_ms = obj.get("time_ms")
    return MllogRecord(
        key=key,
        value=obj["value"],
        ref=ref,
        time_ms=float(time_ms) if isinstance(time_ms, (int, float)) and not isinstance(time_ms, bool)
        else None,
        is_error=bool(meta.get("is_error", False)),
        is_warning=bool(meta.get("is_warning", False)),
    )


def read_detail(path: Path | str, root: Path | str | None = None) -> DetailLog:
    """Parse a LoadGen detail log (a regular file, inside ``root`` when given); raise
    :class:`MlperfLogError` on anything malformed."""
    path, root = Path(path), None if root is None else Path(root)
    _open_check(path, "detail log", root)
    lines, issues, sha, size = _read_lines(path, "detail log", root)
    empty = [i for i in issues if i.kind == "empty_file"]
    torn = [i for i in issues if i.kind == "torn_tail"]
    if empty or (not lines and not torn):
        raise MlperfLogError(f"detail log {str(path)!r} is empty", path=path, kind="missing")

    log = DetailLog(path=path, sha256=sha, size=size, marker="")
    entries: list[tuple[LineRef, bytes, bool]] = [(ref, raw, False) for ref, raw in lines]
    if torn:
        ref = torn[0].ref
        if ref.length > MLLOG_LINE_BYTES:  # NUL padding or garbage after a crash: never read into memory
            raise MlperfLogError(f"detail log {str(path)!r} is truncated: its last line {ref.line} has no newline and "
                                 f"is {ref.length:,} bytes, over the {MLLOG_LINE_BYTES:,}-byte bound for one LoadGen "
                                 "line", path=path, line=ref.line)
        entries.append((ref, ref.raw().rstrip(b"\r"), True))

    for idx, (ref, raw, is_torn) in enumerate(entries):
        text = _decode_utf8(raw, path, ref.line)
        if idx == 0:
            marker = next((m for m in _MARKERS if text.startswith(m)), None)
            if marker is None:
                raise MlperfLogError(f"line {ref.line} of {str(path)!r} does not start with "
                                     f"{MLLOG_MARKER!r}: not a LoadGen detail log (starts "
                                     f"{text[:40]!r})", path=path, line=ref.line)
            log.marker = marker
        if not text.startswith(log.marker):
            log.other_lines += 1
            continue
        try:
            rec = _decode_mllog(text, log.marker, ref, path)
        except MlperfLogError as exc:
            if is_torn:
                raise MlperfLogError(
                    f"detail log {str(path)!r} is truncated: its last line {ref.line} has no newline "
                    f"and does not decode ({exc.message.split(': ', 1)[-1]})", path=path, line=ref.line
                ) from exc
            raise
        if is_torn:
            log.notes.append(f"last line {ref.line} of {str(path)!r} has no final newline "
                             "(it decodes, so it is kept)")
        log.records.append(rec)
        log.occurrences.setdefault(rec.key, []).append(rec)
        log.first.setdefault(rec.key, rec)
    return log


# ----------------------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class SummaryEntry:
    """One ``key : value`` line of a summary log."""

    key: str
    """Key with surrounding whitespace and a leading ``*`` bullet removed."""
    value: str
    """Text after the first colon, stripped (may be empty, e.g. ``Early Stopping Result:``)."""
    ref: LineRef
    """Where the line is."""
    section: str
    """Title of the section it is in (``MLPerf Results Summary``, ``Additional Stats``, ...)."""

    @property
    def line(self) -> int:
        return self.ref.line


_RULE = re.compile(r"^=+$")
_ERRORS_LINE = re.compile(r"^(\d+) ERRORS?\b", re.IGNORECASE)
_WARNINGS_LINE = re.compile(r"^(\d+) WARNINGS?\b", re.IGNORECASE)


@dataclass
class SummaryLog:
    """A parsed ``mlperf_log_summary.txt``."""

    path: Path
    sha256: str
    """sha256 of the whole file."""
    size: int
    """File size in bytes."""
    entries: list[SummaryEntry] = field(default_factory=list)
    """Every ``key : value`` line, in file order."""
    first: dict[str, SummaryEntry] = field(default_factory=dict)
    """Key -> first occurrence."""
    occurrences: dict[str, list[SummaryEntry]] = field(default_factory=dict)
    """Key -> every occurrence."""
    text: list[tuple[LineRef, str]] = field(default_factory=list)
    """Lines that are not ``key : value`` and not rules (titles, prose)."""
    errors_reported: int | None = None
    """``N ERROR(s) encountered`` -> N; ``No errors encountered`` -> 0; None when not stated."""
    warnings_reported: int | None = None
    """``N warning(s) encountered`` -> N; ``No warnings encountered`` -> 0; None when not stated."""
    errors_ref: LineRef | None = None
    """Line stating the error count."""
    notes: list[str] = field(default_factory=list)
    """Things worth knowing that did not stop the read."""

    def __contains__(self, key: str) -> bool:
        return key in self.first

    def get(self, key: str, default: str | None = None) -> str | None:
        ent = self.first.get(key)
        return default if ent is None else ent.value

    def entry(self, key: str) -> SummaryEntry | None:
        return self.first.get(key)

    def find(self, pattern: str | re.Pattern[str]) -> list[tuple[re.Match[str], SummaryEntry]]:
        """Entries whose key fully matches ``pattern``, in file order (first occurrences only)."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        out = []
        for key, ent in self.first.items():
            m = rx.fullmatch(key)
            if m:
                out.append((m, ent))
        return out


def read_summary(path: Path | str, root: Path | str | None = None) -> SummaryLog:
    """Parse a LoadGen summary log (a regular file, inside ``root`` when given); raise
    :class:`MlperfLogError` when it is not one."""
    path, root = Path(path), None if root is None else Path(root)
    _open_check(path, "summary log", root)
    lines, issues, sha, size = _read_lines(path, "summary log", root)
    if any(i.kind == "empty_file" for i in issues) or (not lines and not issues):
        raise MlperfLogError(f"summary log {str(path)!r} is empty", path=path, kind="missing")
    log = SummaryLog(path=path, sha256=sha, size=size)
    entries = [(ref, raw) for ref, raw in lines]
    for issue in issues:
        if issue.kind == "torn_tail":
            # The summary is text; a missing final newline does not lose a field, but say so.
            entries.append((issue.ref, issue.ref.raw().rstrip(b"\r")))
            log.notes.append(f"last line {issue.ref.line} of {str(path)!r} has no final newline")

    section = ""
    prev_rule = False
    saw_title = False
    for ref, raw in entries:
        text = _decode_utf8(raw, path, ref.line).rstrip()
        stripped = text.strip()
        if _RULE.match(stripped):
            prev_rule = True
            continue
        if prev_rule and ":" not in stripped:
            section = stripped
            saw_title = saw_title or stripped == SUMMARY_TITLE
            prev_rule = False
            log.text.append((ref, stripped))
            continue
        prev_rule = False
        low = stripped.lower()
        m = _ERRORS_LINE.match(stripped)
        if m or low.startswith("no errors encountered"):
            log.errors_reported = int(m.group(1)) if m else 0
            log.errors_ref = ref
            log.text.append((ref, stripped))
            continue
        m = _WARNINGS_LINE.match(stripped)
        if m or low.startswith("no warnings encountered"):
            log.warnings_reported = int(m.group(1)) if m else 0
            log.text.append((ref, stripped))
            continue
        if ":" in stripped:
            key, value = stripped.split(":", 1)
            key = key.strip()
            if key.startswith("*"):
                key = key[1:].strip()
            if key:
                ent = SummaryEntry(key=key, value=value.strip(), ref=ref, section=section)
                log.entries.append(ent)
                log.occurrences.setdefault(key, []).append(ent)
                log.first.setdefault(key, ent)
                continue
        log.text.append((ref, stripped))
    if not saw_title:
        raise MlperfLogError(f"summary log {str(path)!r} has no {SUMMARY_TITLE!r} header: not a "
                             "LoadGen summary", path=path)
    if log.errors_reported is None:
        # LoadGen ends every summary with "No errors encountered during test." or "N ERROR(s) ...".
        raise MlperfLogError(f"summary log {str(path)!r} has no closing 'errors encountered' line: "
                             "the file is truncated", path=path, kind="corrupt")
    return log


# ------------------------------------------------------------------------------------------ values


def parse_number(text: str) -> float | int | None:
    """Parse a summary value as a number (``int`` when it is integral text); None if not numeric or
    not finite."""
    t = text.strip()
    if re.fullmatch(r"[+-]?\d+", t):
        return int(t)
    try:
        v = float(t)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def find_logs(directory: Path | str) -> tuple[Path, Path]:
    """Locate ``(summary, detail)`` for a run directory.

    Accepts the directory that holds the two files, a path to one of them, or an MLPerf submission
    directory whose files are under ``performance/run_1/`` (the layout of ``results/.../<scenario>``
    and ``compliance/.../TEST0x``). Raises :class:`MlperfLogError` (``missing``) when not found.
    """
    p = Path(directory)
    if p.is_file() and p.name in (SUMMARY_FILENAME, DETAIL_FILENAME):
        p = p.parent
    if not p.exists():
        raise MlperfLogError(f"directory {str(p)!r} does not exist", path=p, kind="missing")
    if not p.is_dir():
        raise MlperfLogError(f"{str(p)!r} is not a directory of LoadGen logs", path=p, kind="missing")
    candidates = [p, p / "performance" / "run_1"]
    for cand in candidates:
        if (cand / SUMMARY_FILENAME).exists() or (cand / DETAIL_FILENAME).exists():
            summary, detail = cand / SUMMARY_FILENAME, cand / DETAIL_FILENAME
            for f in (summary, detail):
                if not f.exists():
                    raise MlperfLogError(f"{f.name!r} is missing from {str(cand)!r}", path=f,
                                         kind="missing")
            return summary, detail
    raise MlperfLogError(f"no {SUMMARY_FILENAME!r} / {DETAIL_FILENAME!r} in {str(p)!r}", path=p,
                         kind="missing")
