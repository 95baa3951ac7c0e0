"""Pure summaries of a verdict trail: what is banked per lever class, findings by gate and scope.

'Banked' follows the auditor's one banking rule (``auditor/banking.py``, which the graph and the bundle
audit use too): a PASS, or a FLAG whose action banks the change under the auditor's re-derived headline
(``downgrade_headline``), on sealed evidence.
When the run's ``report.json`` carries a ``banked`` list it is what the run says it banked, so it is
preferred -- but every entry is matched to its verdict and any disagreement is shown, because a report
banking a FAIL is exactly the fake win this tool exists to catch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from perfwarden.orchestrator.review.model import (HEADLINE_KEEPING_ACTIONS, RunReview, TrailRow,  # noqa: F401
                                                  VerdictEntry, is_banked)

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

    @property
    def headline(self) -> str:
        """The number that may be banked: the re-derived one (never the producer's)."""
        return self.entry.headline if self.entry is not None else "-"


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


def match_report_item(item: Any, entries: list[TrailRow] | list[VerdictEntry]) -> TrailRow | VerdictEntry | None:
    """The verdict a ``report.json`` banked entry refers to: a string naming the verdict file, the
    claim file, ``<seq>-<scope>`` or the lever; or an object with ``verdict``/``claim``/``seq``+``scope``
    /``lever`` keys. None when nothing matches (shown, never guessed)."""
    if isinstance(item, dict):
        for key in ("verdict", "claim", "key", "lever", "name"):
            value = item.get(key)
            if isinstance(value, str):
                found = match_report_item(value, entries)
                if found is not None:
                    return found
        seq, scope = item.get("seq", item.get("claim_seq")), item.get("scope")
        if isinstance(seq, int) and isinstance(scope, str):
            return next((e for e in entries if _ident(e)[:2] == (seq, scope)), None)
        return None
    if not isinstance(item, str):
        return None
    for e in entries:
        if item in (e.path, _ident(e)[2], e.key, f"verdicts/{e.key}.json", f"claims/{e.key}.json"):
            return e
    return next((e for e in entries if e.lever_name == item), None)


def _report_item_label(item: Any) -> str:
    if isinstance(item, str):
        return repr(item)
    if isinstance(item, dict):
        for key in ("claim", "verdict", "key", "lever", "name"):
            if isinstance(item.get(key), str):
                return repr(item[key])
    text = repr(item)
    return text if len(text) <= 60 else text[:59] + "…"


def banked(review: RunReview) -> Banked:
    """Banked results of the run (report.json preferred, checked against the verdicts): every verdict
    of the trail, held whole or not."""
    entries = review.summary.rows
    if review.report_banked is None:
        return Banked("verdicts", [BankedItem(entry_label(e), e.lever_class, e) for e in entries if e.banked])
    out = Banked("report.json")
    matched: set[int] = set()
    for raw in review.report_banked:
        entry = match_report_item(raw, entries)
        if entry is None:
            cls = raw.get("lever_class") if isinstance(raw, dict) else None
            out.items.append(BankedItem(_report_item_label(raw), cls if cls in ("A", "B") else None, None,
                                        "no verdict in this run backs it"))
            continue
        matched.add(id(entry))
        problem = None if entry.banked else (
            f"the auditor's verdict is {entry.shown} with action {entry.action!r}"
            + (" (unsealed evidence is never banked)" if entry.seal != "sealed" else ""))
        out.items.append(BankedItem(entry_label(entry), entry.lever_class, entry, problem))
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


def fmt_value(value: Any, width: int = 40) -> str:
    """A measured value or threshold in one short line (dicts and lists as compact JSON)."""
    import json

    if value is None:
        return "-"
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        try:
            text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}%"
