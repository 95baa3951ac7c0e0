"""Collecting findings and turning them into a verdict label and an action.

Rules (design §3): a FAIL finding makes the verdict FAIL; otherwise a FLAG finding makes it FLAG; INFO
never changes it. The action is the most decisive one any deciding finding asks for, so an objective
gate's FAIL (eject) outranks a headline FLAG (downgrade).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from perfwarden.agents.auditor.codes import known
from perfwarden.harness.records import Action, EvidenceRef, Finding, Severity, VerdictLabel

# Most decisive first.
ACTION_PRECEDENCE: tuple[Action, ...] = (
    "eject",
    "redo_harness",
    "remeasure",
    "replace_headline_with_e2e",
    "downgrade_headline",
    "flag",
    "pass",
)
_DEFAULT_ACTION: dict[str, Action] = {"FAIL": "eject", "FLAG": "flag", "INFO": "pass"}


T = TypeVar("T")


def finding(code: str, severity: Severity, message: str, *, measured: Any = None, threshold: Any = None,
            evidence: list[EvidenceRef] | None = None, action: Action | None = None, gate: str = "") -> Finding:
    """One finding, its code checked against the catalog. Pure gates build their results with this."""
    if not known(code):
        raise ValueError(f"unknown finding code {code!r}: add it to codes.CATALOG first")
    return Finding(code=code, severity=severity, message=message, measured=measured, threshold=threshold,
                   evidence=evidence or [], action=action, gate=gate)


@dataclass(frozen=True)
class GateResult(Generic[T]):
    """What a pure gate returns: its findings, the checks it could not make (with why), and a value
    other gates may use (e.g. the server_info diff). Gates never mutate shared state; ``Audit.gate``
    collects these."""

    findings: list[Finding] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    value: T | None = None


class Findings:
    """An ordered list of findings with a small builder API (one line per rule in the gates)."""

    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(self, code: str, severity: Severity, message: str, *, measured: Any = None,
            threshold: Any = None, evidence: list[EvidenceRef] | None = None, action: Action | None = None,
            gate: str = "") -> Finding:
        made = finding(code, severity, message, measured=measured, threshold=threshold, evidence=evidence,
                       action=action, gate=gate)
        self.items.append(made)
        return made

    def extend(self, other: list[Finding]) -> None:
        self.items.extend(other)

    def codes(self) -> set[str]:
        return {f.code for f in self.items if f.severity != "INFO"}

    def has(self, code: str, severity: Severity | None = None) -> bool:
        return any(f.code == code and (severity is None or f.severity == severity) for f in self.items)


def verdict_label(findings: list[Finding]) -> VerdictLabel:
    severities = {f.severity for f in findings}
    if "FAIL" in severities:
        return "FAIL"
    if "FLAG" in severities:
        return "FLAG"
    return "PASS"


def choose_action(findings: list[Finding], label: VerdictLabel) -> Action:
    """Most decisive action among the findings that decide the label."""
    if label == "PASS":
        return "pass"
    deciding = [f for f in findings if f.severity == label]
    actions = {f.action or _DEFAULT_ACTION[f.severity] for f in deciding}
    for action in ACTION_PRECEDENCE:
        if action in actions:
            return action
    return _DEFAULT_ACTION[label]
