"""``report.json`` as a typed, versioned record: what ``orchestrator/report.py`` writes and the review reads.

The review used to guess the report's shape from its keys (a banked entry could be a string or an object
with any of five keys). Now the file is a ``ReportRecord`` with a ``report_version``, and a reader brings
an older one forward through the same migration chain as the harness records (``records.migrate``):

- version 1: the unversioned report written before (no ``report_version`` key): the same fields as
  version 2 -- the absence of the key is the one thing that says "version 1";
- version 2: the same fields, named with their version;
- version 3: a banked step says when a later step superseded it (``superseded_by``), and the final
  configuration lists only what differs from the true baseline; a version-2 report reads with every step
  standing (``superseded_by`` None) and its final configuration as written;
- version 4: this record. Every verdict summary (``verdicts``, ``bundle``) carries the run's acceptance
  decision on it (``acceptance``, made by ``auditor/acceptance.py`` when the verdict was audited); a
  version-3 report reads with no decision recorded (``acceptance`` None), and a reader says so.

A newer version, or a report that is not this record (a missing field, a field of the wrong type, a field
the record does not have), is a ``ReportError`` naming what is wrong; the review exits 3 on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfwarden.agents.base import BankedChange, ProposalKind, ProposalStatus, Rejection
from perfwarden.harness.jsonl import repeated_key
from perfwarden.harness.records import LeverClass, Migration, SchemaVersionError, migrate
from perfwarden.harness.safe_read import MAX_DEPTH, VERDICT_BYTES, read_bytes, too_deep
from perfwarden.harness.verdict_summary import VerdictSummary

REPORT_VERSION = 4
"""Version of ``report.json`` this perfwarden writes (the history is in the module docstring)."""


def _from_unversioned(record_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """1 -> 2: the fields did not change; version 2 only names its version."""
    return data


def _from_v2(record_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """2 -> 3: the fields version 3 adds have defaults that read a version-2 report as it was written."""
    return data


def _from_v3(record_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """3 -> 4: a version-3 report recorded no acceptance decision; its summaries read with none."""
    return data


REPORT_MIGRATIONS: dict[int, Migration] = {1: _from_unversioned, 2: _from_v2, 3: _from_v3}
"""``REPORT_MIGRATIONS[n]`` turns a version-``n`` report into version n+1."""


class ReportError(ValueError):
    """``report.json`` cannot be read as a report this perfwarden knows; the message says why (exit 3)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Headline(_Strict):
    """One banked change under its lever class."""

    change: str
    against: dict[str, Any]
    output_throughput_delta_pct: float | None
    verdict: str
    disclosed_regressions: dict[str, float]
    superseded_by: str | None = None
    """The later banked step that overwrote everything this one set (None: it is in the final configuration)."""
    headline_note: str | None = None
    """Why the banked figure is not the delta against the step's own baseline (its verdict's note)."""


class SearchHistoryRow(_Strict):
    """One finished config trial as the report's plot shows it (``agents/search.history``)."""

    number: int
    value: float | None
    """Throughput as a factor of the true baseline (None: no audited number)."""
    feasible: bool
    """The auditor passed it and it was banked."""
    best: float
    """The best banked factor after this trial."""


class SearchStep(_Strict):
    """One change tried, in order, and how it ended."""

    step: int
    change: str
    kind: ProposalKind
    set: dict[str, Any]
    """The knobs it changed (a kernel: its ``op_overrides`` entry)."""
    against: dict[str, Any]
    status: ProposalStatus
    audits: int
    verdict: str | None
    verdict_file: str | None
    output_throughput_delta_pct: float | None
    claimed_delta_pct: float | None = None
    """What the producer's claim stated (its own figure); None in reports written before producers did."""
    codes: list[str]


class FinalKnob(_Strict):
    """One knob of the final configuration against the true baseline."""

    knob: str
    baseline: Any
    final: Any
    lever_class: LeverClass | None
    lossless: bool | None


class Refusal(_Strict):
    """A patch verdict that did not bank as claimed."""

    claim: str
    change: str | None
    verdict: str
    action: str
    codes: list[str]


class AttackVerdict(_Strict):
    claim: str
    verdict: str
    codes: list[str]


class RedTeam(_Strict):
    """``--red-team``: the attack claims and any that passed."""

    attacks: int
    passed: list[str]
    verdicts: list[AttackVerdict]


class ProposalTrail(_Strict):
    id: str
    status: ProposalStatus
    history: list[str]


class LLMUsage(_Strict):
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    invalid_outputs: int
    unavailable: int
    fallbacks: dict[str, int]


class ReportRecord(_Strict):
    """``RUN/report.json``: every number copied from a verdict (re-derived by the auditor)."""

    report_version: Literal[4] = REPORT_VERSION
    run_dir: str | None
    banked: list[BankedChange]
    """What the run banked, in order (the graph's one banking rule decided it)."""
    rejected: list[Rejection]
    headlines: dict[LeverClass, list[Headline]]
    search_path: list[SearchStep]
    search_history: list[SearchHistoryRow] = Field(default_factory=list)
    """The study's trials for the plot (reports written before the study have none)."""
    final_configuration: list[FinalKnob]
    """The final configuration's difference from the true baseline: a knob a later step set back to its
    baseline value is not listed (``agents/integrator.net_changes``)."""
    bundle: VerdictSummary | None
    """The bundle's verdict with the run's decision on it: whether the net change stands."""
    refused_or_reclassified: list[Refusal]
    red_team: RedTeam | None
    verdicts: list[VerdictSummary]
    """Every verdict, in sequence order, each with the run's acceptance decision on it (read, never re-derived,
    by the report's text and the review)."""
    proposals: list[ProposalTrail]
    llm: LLMUsage | None
    notes: list[str] = Field(default_factory=list)


def parse_report(data: Any) -> ReportRecord:
    """A decoded ``report.json`` as this version's record: migrated when older, ``ReportError`` when newer,
    not an object, or not the record."""
    if not isinstance(data, dict):
        raise ReportError(f"report.json is a JSON {type(data).__name__}, not a report object")
    if "report_version" not in data:
        data = {**data, "report_version": 1}  # written before reports were versioned
    try:
        data = migrate("report.json", data, field="report_version", current=REPORT_VERSION,
                       migrations=REPORT_MIGRATIONS)
        return ReportRecord.model_validate(data)
    except SchemaVersionError as exc:
        raise ReportError(str(exc)) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "report"
        raise ReportError(f"report.json is not a version-{REPORT_VERSION} report: {where[:200]}: {err['msg']} "
                          f"({exc.error_count()} problem(s))") from None


def _non_finite(name: str) -> Any:
    raise ValueError(f"non-finite constant {name!r} (report.json is written without NaN or infinity)")


def read_report(path: Path, root: Path) -> ReportRecord:
    """Read ``report.json`` as hostile input (``safe_read``: a regular file inside the run, bounded)."""
    try:
        raw = read_bytes(path, root, limit=VERDICT_BYTES, what="report.json")
        obj = json.loads(raw, parse_constant=_non_finite)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ReportError(f"report.json is unreadable: {exc}") from None
    repeated = repeated_key(raw)
    if repeated is not None:
        raise ReportError(f"report.json repeats the key {repeated[:100]!r}: which value counts is a guess")
    if too_deep(obj):
        raise ReportError(f"report.json nests deeper than {MAX_DEPTH} levels")
    return parse_report(obj)
