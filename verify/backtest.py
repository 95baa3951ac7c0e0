"""Backtest the auditor on fixtures with frozen answer keys.

The auditor runs blind: each fixture's claims are audited first, and its ``answer_key.json`` is read
only afterwards, for scoring. A fixture agrees when the verdict and action are among the allowed ones, every
``must_include`` code and one code of each ``must_include_any`` group is raised, no ``must_exclude`` code
is (INFO findings don't count as raised), and every ``must_note`` string appears in one of the verdict's
``not_checked`` entries (a check the auditor must say it could not make, e.g. ``"unsealed"``). The
key's format: ``verify/answer_key.py``.

A fixture whose run was sealed by the harness ships its key beside (never inside) the run directory,
``<fixture>/seal.key``: the backtest hands it to the auditor as an operator would with ``--key``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from perfwarden.auditor import banking
from perfwarden.auditor.audit import ClaimError, audit_path
from perfwarden.formats.records import Verdict
from perfwarden.verify.answer_key import (ANSWER_KEY_NAME, Answer, AnswerKeyError, answer_problems,
                                          load_answer_key)

__all__ = ["AnswerKeyError", "CaseResult", "Report", "find_fixtures", "run_backtest", "score_fixture"]

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
    must_include_any: list[list[str]] = field(default_factory=list)
    must_note: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    kind: str = "run"
    verdict_record: Verdict | None = field(default=None, repr=False, compare=False)
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


def _audit_blind(fixture: Path) -> list[tuple[str, Verdict | ClaimError]]:
    """Audit every claim of the fixture's run without looking at its answer key: each claim's verdict,
    or the error that made the claim unreadable."""
    run = fixture / "run"
    key = fixture / "seal.key" if (fixture / "seal.key").is_file() else None
    out: list[tuple[str, Verdict | ClaimError]] = []
    for claim in sorted((run / "claims").glob("*.json")):
        rel = str(claim.relative_to(run))
        try:
            out.append((rel, audit_path(run, claim, claim_root=run, key=key)))
        except ClaimError as exc:
            out.append((rel, exc))
    return out


def score_fixture(fixture: Path) -> list[CaseResult]:
    """Audit the fixture blind, then score it (raises :class:`AnswerKeyError` for a damaged key)."""
    audited = _audit_blind(fixture)
    try:
        key = load_answer_key(fixture / ANSWER_KEY_NAME, root=fixture)  # read only after auditing
    except AnswerKeyError as exc:
        # An input error, reported beside the other fixtures' scores (the CLI exits 3), never a traceback.
        problem = [f"answer key unusable: {exc}"]
        return [CaseResult(fixture.name, rel, "error" if isinstance(v, ClaimError) else v.verdict,
                           "error" if isinstance(v, ClaimError) else v.action, [], kind="input_error",
                           problems=problem) for rel, v in audited] or [
            CaseResult(fixture.name, ANSWER_KEY_NAME, "error", "error", [], kind="input_error", problems=problem)]
    answers = {a.claim: a for a in key.answers}
    results = []
    for rel, verdict in audited:
        if isinstance(verdict, ClaimError):
            res = CaseResult(fixture.name, rel, "error", "error", [], kind="input_error",
                             problems=[f"claim unreadable: {verdict}"])
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


def _compare(res: CaseResult, answer: Answer) -> None:
    res.expected_verdict = "|".join(answer.verdict)
    res.expected_actions = list(answer.action)
    res.must_include = list(answer.must_include)
    res.must_include_any = [list(g) for g in answer.must_include_any]
    res.must_exclude = list(answer.must_exclude)
    res.must_note = list(answer.must_note)
    v = res.verdict_record
    banks = banking.kept_as(v.verdict, banking.verdict_actions(v)) is not None if v is not None else None
    headline = v.headline_rederived if v is not None else None
    res.problems.extend(answer_problems(answer, res.verdict, res.action, set(res.codes), res.not_checked,
                                        banks, headline))


@dataclass
class Report:
    results: list[CaseResult]

    @property
    def input_errors(self) -> list[str]:
        """Damaged inputs (claims, answer keys): the backtest cannot score them (exit 3)."""
        return [f"{r.fixture}/{r.claim}: {'; '.join(r.problems)}" for r in self.results if r.kind == "input_error"]

    @property
    def agreement(self) -> float:
        return sum(r.agrees for r in self.results) / len(self.results) if self.results else 0.0

    def confusion(self) -> dict[str, dict[str, int]]:
        """expected -> actual -> count, over PASS/FLAG/FAIL (plus 'error' where it occurs). A set of
        allowed verdicts is its own row (e.g. ``FLAG|FAIL``)."""
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


def run_backtest(roots: list[Path], extra: list[Callable[[], list[CaseResult]]] | None = None,
                 fan_out: Callable[[Callable[[Path], list[CaseResult]], list[Path]], list[list[CaseResult]]]
                 | None = None) -> Report:
    """Score every fixture under ``roots`` (and the ``extra`` sources). ``fan_out``: how the fixtures are
    mapped (``perfwarden backtest --cluster``: one Ray task per fixture); each is independent, so the
    report is the same."""
    fixtures = find_fixtures(roots)
    scored = fan_out(score_fixture, fixtures) if fan_out else [score_fixture(f) for f in fixtures]
    results: list[CaseResult] = [r for one in scored for r in one]
    for source in extra or []:
        results.extend(source())
    return Report(results)
