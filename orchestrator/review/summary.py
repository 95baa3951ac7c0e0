"""Pure summaries of a verdict trail: what is banked per lever class, findings by gate and scope.

'Banked' follows the auditor's one banking rule (``auditor/banking.py``, which the graph and the bundle
audit use too): a PASS, or a FLAG whose action banks the change under the auditor's re-derived headline
(``downgrade_headline``), on sealed evidence.
The run's ``report.json`` (a typed, versioned record: orchestrator/report_record.py) says what the run
banked, so it is preferred -- but every entry is matched to its verdict file and any disagreement is shown, because a report
banking a FAIL is exactly the fake win this tool exists to catch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TypeVar

from perfwarden.agents.base import BankedChange
from perfwarden.orchestrator.review.model import RunReview, TrailRow, VerdictEntry

LEVER_CLASSES = {"A": "class A (kernel/implementation)", "B": "class B (orthogonal serving lever)",
                 None: "no lever (baseline/profile/harness)"}
SEVERITIES = ("FAIL", "FLAG", "INFO")


@dataclass
class BankedItem:
    """One banked result as the review lists it."""

    label: str
    """What is banked: ``<seq>-<scope>`` and the lever name when known."""
    lever_class: str | None
    entry: TrailRow | None
    """The verdict backing it (None: a report entry that matches no verdict)."""
    problem: str | None = None
    """Why this banking is not backed by its verdict, when it is not."""
    superseded_by: str | None = None
    """The later banked step that overwrote everything this one set (report.json): banked, yet not part of
    the final configuration."""

    @property
    def headline(self) -> str:
        """The number that may be banked: the re-derived one (never the producer's)."""
        return self.entry.headline if self.entry is not None else "-"

    @property
    def standing(self) -> str:
        """Whether the banked step is in the final configuration, as one short phrase ("" when it is)."""
        return f"superseded by {self.superseded_by}: not in the final configuration" if self.superseded_by else ""


@dataclass
class Banked:
    """Banked results grouped by lever class, plus where the list came from and what disagrees."""

    source: str
    items: list[BankedItem] = field(default_factory=list)
    unreported: list[TrailRow] = field(default_factory=list)
    """Bankable verdicts the report does not bank (shown for completeness)."""

    def by_class(self) -> dict[str | None, list[BankedItem]]:
        groups: dict[str | None, list[BankedItem]] = {"A": [], "B": [], None: []}
        for item in self.items:
            groups.setdefault(item.lever_class if item.lever_class in ("A", "B") else None, []).append(item)
        return groups

    @property
    def problems(self) -> list[str]:
        return [f"{item.label}: {item.problem}" for item in self.items if item.problem]


def entry_label(entry: VerdictEntry | TrailRow) -> str:
    name = entry.lever_name
    return f"{entry.key} {name!r}" if name else entry.key


def _ident(e: VerdictEntry | TrailRow) -> tuple[int, str, str]:
    """(seq, scope, claim) of a held verdict or of a trail row."""
    return (e.seq, e.scope, e.claim) if isinstance(e, TrailRow) else (e.verdict.claim_seq, e.verdict.scope,
                                                                     e.verdict.claim)


Entry = TypeVar("Entry", TrailRow, VerdictEntry)
"""A verdict of the trail as a summary row, or held whole: both name their verdict file (``path``)."""


def match_report_item(item: BankedChange, entries: list[Entry]) -> Entry | None:
    """The verdict a ``report.json`` banked entry names (its ``verdict`` file). None when no verdict of the
    run is that file (shown, never guessed)."""
    return next((e for e in entries if e.path == item.verdict), None)


def banked(review: RunReview) -> Banked:
    """Banked results of the run (report.json preferred, checked against the verdicts): every verdict
    of the trail, held whole or not."""
    entries = review.summary.rows
    if review.report_banked is None:
        return Banked("verdicts", [BankedItem(entry_label(e), e.lever_class, e) for e in entries if e.banked])
    out = Banked("report.json")
    matched: set[int] = set()
    for item in review.report_banked:
        entry = match_report_item(item, entries)
        if entry is None:
            out.items.append(BankedItem(f"{item.name!r} ({item.verdict!r})", item.lever_class, None,
                                        "no verdict in this run backs it"))
            continue
        matched.add(id(entry))
        problem = None if entry.banked else (
            f"the auditor's verdict is {entry.shown} with action {entry.action!r}"
            + (" (unsealed evidence is never banked)" if entry.seal != "sealed" else ""))
        if problem is None and _ident(entry)[2] != item.claim:
            problem = f"the report names the claim {item.claim!r}; its verdict answers {_ident(entry)[2]!r}"
        out.items.append(BankedItem(entry_label(entry), entry.lever_class, entry, problem, item.superseded_by))
    out.unreported = [e for e in entries if e.banked and id(e) not in matched]
    return out


def gates_of(entry: VerdictEntry) -> list[tuple[str, str, int]]:
    """(gate, worst severity, number of findings) for one verdict, in the order gates reported."""
    worst: dict[str, str] = {}
    count: Counter = Counter()
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    for f in entry.verdict.findings:
        gate = f.gate or "-"
        count[gate] += 1
        if gate not in worst or rank[f.severity] < rank[worst[gate]]:
            worst[gate] = f.severity
    return [(g, worst[g], count[g]) for g in worst]


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}%"
