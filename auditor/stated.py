"""A quantity as one source states it: the unit the second-witness rules compare (``auditor/model/compare.py``).

Its own module so that the loader's readers (``loadgen_logs.py``) can state quantities without
importing the gates that judge them (no cycle between the auditor's modules)."""

from __future__ import annotations

from dataclasses import dataclass

from perfwarden.formats.records import EvidenceRef


@dataclass(frozen=True)
class Stated:
    """One source's statement of a quantity."""

    source: str
    """Human name of the source, e.g. ``"bench line 3 (duration)"``."""
    value: float | int | None
    evidence: EvidenceRef | None = None
