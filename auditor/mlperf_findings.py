"""MLPerf findings: the codes the MLPerf auditor uses and evidence pointing at raw LoadGen lines.

``mlperf.py`` composes these rules into one audit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from perfwarden.auditor.findings import finding
from perfwarden.formats.jsonl import LineRef
from perfwarden.formats.records import EvidenceRef, Finding, Severity

# ------------------------------------------------------------------------------------------ codes

EVIDENCE_MISSING = "EVIDENCE_MISSING"
EVIDENCE_CORRUPT = "EVIDENCE_CORRUPT"
REPORTED_MISMATCH = "REPORTED_MISMATCH"
CONDITIONS_DIFFER = "CONDITIONS_DIFFER"
CACHING_SUSPECTED = "CACHING_SUSPECTED"
MLPERF_THRESHOLD = "MLPERF_THRESHOLD"
MLPERF_INVALID_RESULT = "MLPERF_INVALID_RESULT"
MLPERF_SAME_RUN = "MLPERF_SAME_RUN"
MLPERF_AUDIT_SETTINGS = "MLPERF_AUDIT_SETTINGS"
MLPERF_LOG_ERRORS = "MLPERF_LOG_ERRORS"
MLPERF_DUPLICATE_KEY = "MLPERF_DUPLICATE_KEY"
MLPERF_LOADGEN_VERSION = "MLPERF_LOADGEN_VERSION"

CODES = (
    EVIDENCE_MISSING, EVIDENCE_CORRUPT, REPORTED_MISMATCH, CONDITIONS_DIFFER, CACHING_SUSPECTED,
    MLPERF_THRESHOLD, MLPERF_INVALID_RESULT, MLPERF_SAME_RUN, MLPERF_AUDIT_SETTINGS,
    MLPERF_LOG_ERRORS, MLPERF_DUPLICATE_KEY, MLPERF_LOADGEN_VERSION,
)


# --------------------------------------------------------------------------------------- evidence


def evidence(ref: LineRef | None) -> EvidenceRef | None:
    """Evidence for one raw line: file, 1-based line, sha256 of the line's bytes, an excerpt."""
    if ref is None:
        return None
    try:
        raw = ref.raw()
    except OSError:
        return EvidenceRef(file=str(ref.path), line=ref.line)
    return EvidenceRef(file=str(ref.path), line=ref.line, sha256=hashlib.sha256(raw).hexdigest(),
                       excerpt=raw[:200].decode("utf-8", "replace"))


def file_evidence(path: Path, sha256: str | None) -> EvidenceRef:
    """Evidence for a whole file (line None; sha256 is the file's)."""
    return EvidenceRef(file=str(path), line=None, sha256=sha256)


def _evs(refs: Iterable[LineRef | None]) -> list[EvidenceRef]:
    out = []
    seen = set()
    for ref in refs:
        if ref is None or (str(ref.path), ref.line) in seen:
            continue
        seen.add((str(ref.path), ref.line))
        ev = evidence(ref)
        if ev is not None:
            out.append(ev)
    return out


def _finding(code: str, severity: Severity, gate: str, message: str, *, measured: Any = None,
             threshold: Any = None, refs: Iterable[LineRef | None] = (),
             extra_evidence: Iterable[EvidenceRef] = ()) -> Finding:
    """A finding through the shared constructor (its code must be in ``codes.CATALOG``)."""
    return finding(code, severity, message, measured=measured, threshold=threshold,
                   evidence=[*extra_evidence, *_evs(refs)], gate=gate,
                   action=None if severity == "INFO" else ("flag" if severity == "FLAG" else "eject"))
