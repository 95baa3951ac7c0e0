"""``report.json`` as a typed, versioned record: what ``orchestrator/report.py`` writes and the review reads.

A reader that guessed the report's shape from its keys would misread it (a banked entry could be a string
or an object with any of five keys), so the file is a ``ReportRecord`` with a ``report_version``, and a reader brings
an older one forward through the same migration chain as the harness records (``records.migrate``):

- version 1: the unversioned report written before (no ``report_version`` key): the same fields as
  version 2 -- the absence of the key is the one thing that says "version 1";
- version 2: the same fields, named with their version;
- version 3: a banked step says when a later step superseded it (``superseded_by``), and the final
  configuration lists only what differs from the true baseline; a version-2 report reads with every step
  standing (``superseded_by`` None) and its final configuration as written;
- version 4: the run's objective (``objective``: what every step's headline states, and its goodput SLO),
  and a step's delta is its headline's (``headline_delta_pct``: the objective's metric); a version-3 report
  was a throughput run, its ``output_throughput_delta_pct`` that delta;
- version 5: this record. Every verdict summary (``verdicts``, ``bundle``) carries the run's acceptance
  decision on it (``acceptance``, made by ``auditor/acceptance.py`` when the verdict was audited); a
  version-4 report reads with no decision recorded (``acceptance`` None), and a reader says so.

A newer version, or a report that is not this record (a missing field, a field of the wrong type, a field
the record does not have), is a ``ReportError`` naming what is wrong; the review exits 3 on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfwarden.agents.base import BankedChange, ProposalKind, ProposalStatus, Rejection
from perfwarden.formats.objective import Objective, RunObjective
from perfwarden.formats.records import LeverClass, Migration, SchemaVersionError, migrate
from perfwarden.formats.safe_read import VERDICT_BYTES, read_bytes
from perfwarden.formats.strict_json import StrictJsonError, loads
from perfwarden.formats.verdict_summary import VerdictSummary

REPORT_VERSION: Final = 5
"""Version of ``report.json`` this perfwarden writes (the history is in the module docstring)."""


def _from_unversioned(record_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """1 -> 2: the fields did not change; version 2 only names its version."""
    return data


def _from_v2(record_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """2 -> 3: the fields version 3 adds have defaults that read a version-2 report as it was written."""
    return data


def _from_v3(record_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """3 -> 4: a version-3 run optimized output throughput: its steps' throughput delta is their headline's."""
    def renamed(entry: Any) -> Any:
        if isinstance(entry, dict) and "output_throughput_delta_pct" in entry:
            entry = {("headline_delta_pct" if k == "output_throughput_delta_pct" else k): v for k, v in entry.items()}
        return entry

    out = dict(data)
    if isinstance(out.get("headlines"), dict):
        out["headlines"] = {k: [renamed(e) for e in v] if isinstance(v, list) else v
                            for k, v in out["headlines"].items()}
    if isinstance(out.get("search_path"), list):
        out["search_path"] = [renamed(e) for e in out["search_path"]]
    out.setdefault("objective", ReportObjective().model_dump(mode="json"))
    return out


def _from_v4(record_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """4 -> 5: a version-4 report recorded no acceptance decision; its summaries read with none."""
    return data


REPORT_MIGRATIONS: dict[int, Migration] = {1: _from_unversioned, 2: _from_v2, 3: _from_v3, 4: _from_v4}
"""``REPORT_MIGRATIONS[n]`` turns a version-``n`` report into version n+1."""


class ReportError(ValueError):
    """``report.json`` cannot be read as a report this perfwarden knows; the message says why (exit 3)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReportObjective(_Strict):
    """What the run optimized, as it sealed it at its start (``objective.json``)."""

    objective: Objective = "throughput"
    metric: str = "output_throughput"
    """The bench metric every step's headline states."""
    higher_is_better: bool = True
    slo: dict[str, float] | None = None
    """The goodput SLO's limits in ms (``ttft_ms``, ``tpot_ms``, ``e2el_ms``); None for any other objective."""

    @classmethod
    def of(cls, run: RunObjective) -> "ReportObjective":
        return cls(objective=run.objective, metric=run.metric, higher_is_better=run.higher_is_better,
                   slo=run.slo.limits() if run.slo is not None else None)


class Headline(_Strict):
    """One banked change under its lever class."""

    change: str
    against: dict[str, Any]
    headline_delta_pct: float | None
    """The delta of the run's objective metric the auditor re-derived, against ``against`` (percent)."""
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
    """The objective metric as a factor of the true baseline (None: no audited number)."""
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
    headline_delta_pct: float | None
    """The re-derived delta of the step's headline (the run's objective metric), percent."""
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

    report_version: Literal[5] = REPORT_VERSION
    run_dir: str | None
    objective: ReportObjective = Field(default_factory=ReportObjective)
    """What the run optimized (every step's headline, the study's direction, the goodput SLO)."""
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


def read_report(path: Path, root: Path) -> ReportRecord:
    """Read ``report.json`` as hostile input (``safe_read``: a regular file inside the run, bounded)."""
    try:
        obj = loads(read_bytes(path, root, limit=VERDICT_BYTES, what="report.json"), what="report.json")
    except (OSError, StrictJsonError) as exc:
        raise ReportError(f"report.json is unreadable: {exc}") from None
    return parse_report(obj)
