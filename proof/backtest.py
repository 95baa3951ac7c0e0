"""Backtest the auditor on fixtures with frozen answer keys.

The auditor runs blind: each fixture's claims are audited first, and its ``answer_key.json`` is read
only afterwards, for scoring. A fixture agrees when the verdict and action match and every
``must_include`` code is raised and no ``must_exclude`` code is (INFO findings don't count as raised),
and every ``must_note`` string appears in one of the verdict's ``not_checked`` entries (a check the
auditor must say it could not make, e.g. ``"unsealed"``).

A fixture whose run was sealed by the harness ships its key beside (never inside) the run directory,
``<fixture>/seal.key``: the backtest hands it to the auditor as an operator would with ``--key``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from perfwarden.agents.auditor.audit import ClaimError, audit_path

LABELS = ("PASS", "FLAG", "FAIL")


@dataclass
class CaseResult:
    """One audited claim and how it compares with its answer."""

    fixture: str
    claim: str
    verdict: str
    action: str
    codes: list[str]
    expected_verdict: str | None = None
    expected_actions: list[str] = field(default_factory=list)
    must_include: list[str] = field(default_factory=list)
    must_exclude: list[str] = field(default_factory=list)
    must_note: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    kind: str = "run"
    verdict_record: Any = field(default=None, repr=False, compare=False)
    """The verdict object the auditor produced for this case, kept so ``backtest --html`` can drill
    down to findings and evidence; never used in scoring (None when the claim was unreadable)."""

    @property
    def agrees(self) -> bool:
        return not self.problems


def find_fixtures(roots: list[Path]) -> list[Path]:
    """Every directory holding an answer_key.json under the given roots (sorted, deterministic)."""
    found: set[Path] = set()
    for root in roots:
        root = Path(root)
        if (root / "answer_key.json").is_file():
            found.add(root)
        elif root.is_dir():
            found.update(p.parent for p in root.rglob("answer_key.json"))
    return sorted(found)


def _audit_blind(fixture: Path) -> list[tuple[str, Any]]:
    """Audit every claim of the fixture's run without looking at its answer key."""
    run = fixture / "run"
    key = fixture / "seal.key" if (fixture / "seal.key").is_file() else None
    out = []
    for claim in sorted((run / "claims").glob("*.json")):
        rel = str(claim.relative_to(run))
        try:
            out.append((rel, audit_path(run, claim, key=key)))
        except ClaimError as exc:
            out.append((rel, exc))
    return out


def score_fixture(fixture: Path) -> list[CaseResult]:
    audited = _audit_blind(fixture)
    key = json.loads((fixture / "answer_key.json").read_text("utf-8"))  # read only after auditing
    answers = {a["claim"]: a for a in key.get("answers", [])}
    results = []
    for rel, verdict in audited:
        if isinstance(verdict, ClaimError):
            res = CaseResult(fixture.name, rel, "error", "error", [])
        else:
            res = CaseResult(fixture.name, rel, verdict.verdict, verdict.action,
                             sorted({f.code for f in verdict.findings if f.severity != "INFO"}),
                             not_checked=list(verdict.not_checked), verdict_record=verdict)
        answer = answers.pop(rel, None)
        if answer is None:
            res.problems.append("no answer for this claim in the key")
        else:
            _compare(res, answer)
        results.append(res)
    for rel in answers:
        results.append(CaseResult(fixture.name, rel, "missing", "missing", [], problems=["claim file missing"]))
    return results


def _compare(res: CaseResult, answer: dict[str, Any]) -> None:
    res.expected_verdict = answer["verdict"]
    actions = answer.get("action")
    res.expected_actions = actions if isinstance(actions, list) else [actions] if actions else []
    res.must_include = list(answer.get("must_include", []))
    res.must_exclude = list(answer.get("must_exclude", []))
    res.must_note = list(answer.get("must_note", []))
    if res.verdict != res.expected_verdict:
        res.problems.append(f"verdict {res.verdict} != expected {res.expected_verdict}")
    if res.expected_actions and res.action not in res.expected_actions:
        res.problems.append(f"action {res.action} not in {res.expected_actions}")
    missing = [c for c in res.must_include if c not in res.codes]
    if missing:
        res.problems.append(f"missing codes {missing}")
    extra = [c for c in res.must_exclude if c in res.codes]
    if extra:
        res.problems.append(f"forbidden codes raised {extra}")
    unsaid = [n for n in res.must_note if not any(n in item for item in res.not_checked)]
    if unsaid:
        res.problems.append(f"not_checked does not say {unsaid}")


@dataclass
class Report:
    results: list[CaseResult]

    @property
    def agreement(self) -> float:
        return sum(r.agrees for r in self.results) / len(self.results) if self.results else 0.0

    def confusion(self) -> dict[str, dict[str, int]]:
        """expected -> actual -> count, over PASS/FLAG/FAIL (plus 'error' where it occurs)."""
        table: dict[str, Counter] = defaultdict(Counter)
        for r in self.results:
            if r.expected_verdict:
                table[r.expected_verdict][r.verdict] += 1
        return {k: dict(v) for k, v in sorted(table.items())}

    def per_code(self) -> dict[str, dict[str, Any]]:
        """Per finding code: true positives (required and raised), false negatives (required, not
        raised), false positives (forbidden but raised), precision and recall."""
        stats: dict[str, Counter] = defaultdict(Counter)
        for r in self.results:
            for c in r.must_include:
                stats[c]["tp" if c in r.codes else "fn"] += 1
            for c in r.must_exclude:
                stats[c]["fp" if c in r.codes else "tn"] += 1
        out = {}
        for code, s in sorted(stats.items()):
            tp, fp, fn = s["tp"], s["fp"], s["fn"]
            out[code] = {"tp": tp, "fp": fp, "fn": fn, "tn": s["tn"],
                         "precision": tp / (tp + fp) if tp + fp else None,
                         "recall": tp / (tp + fn) if tp + fn else None}
        return out

    def action_agreement(self) -> float:
        scored = [r for r in self.results if r.expected_actions]
        return sum(r.action in r.expected_actions for r in scored) / len(scored) if scored else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"n": len(self.results), "agreement": self.agreement, "action_agreement": self.action_agreement(),
                "confusion": self.confusion(), "per_code": self.per_code(),
                "results": [{**{k: v for k, v in r.__dict__.items() if k != "verdict_record"}, "agrees": r.agrees}
                            for r in self.results]}


def run_backtest(roots: list[Path], extra: list[Callable[[], list[CaseResult]]] | None = None) -> Report:
    results: list[CaseResult] = []
    for fixture in find_fixtures(roots):
        results.extend(score_fixture(fixture))
    for source in extra or []:
        results.extend(source())
    return Report(results)
