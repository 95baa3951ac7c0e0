"""Collecting findings and turning them into a verdict label and an action.

Rules (design §3): a FAIL finding makes the verdict FAIL; otherwise a FLAG finding makes it FLAG; INFO
never changes it. The action is the most decisive one any deciding finding asks for, so an objective
gate's FAIL (eject) outranks a headline FLAG (downgrade).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, Sequence, TypeVar

from perfwarden.auditor.codes import known
from perfwarden.formats.records import Action, EvidenceRef, Finding, Seal, Severity, VerdictLabel, shown_verdict

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


MAX_LISTED = 25
"""Findings listed per (gate, code). A report with 100,000 untraced numbers or a file with 100,000
corrupt lines must not make a 72 MB verdict: the rest are summarized in one finding that counts them
and carries their most severe severity and most decisive action, so the verdict and its action are
exactly what they would be with every finding listed."""

_SEVERITY_RANK = {"INFO": 0, "FLAG": 1, "FAIL": 2}


@dataclass
class _Overflow:
    """Findings of one (gate, code) beyond ``MAX_LISTED``: counted, never held."""

    gate: str
    code: str
    count: int = 0
    severity: Severity = "INFO"
    actions: set[Action] = field(default_factory=set)
    evidence: list[EvidenceRef] = field(default_factory=list)

    def add(self, f: Finding, weight: int) -> None:
        self.count += weight - 1
        self.note(f.severity, f.action, f.evidence)

    def note(self, severity: Severity, action: Action | None, evidence: list[EvidenceRef] | None) -> None:
        """Count one more finding of this key."""
        self.count += 1
        if _SEVERITY_RANK[severity] > _SEVERITY_RANK[self.severity]:
            self.severity, self.actions = severity, set()
        if severity == self.severity:
            self.actions.add(action or _DEFAULT_ACTION[severity])
        if not self.evidence and evidence:
            self.evidence = list(evidence[:1])

    def summary(self, cap: int) -> Finding:
        action = next((a for a in ACTION_PRECEDENCE if a in self.actions), _DEFAULT_ACTION[self.severity])
        return Finding(code=self.code, severity=self.severity, gate=self.gate, action=action, evidence=self.evidence,
                       measured=self.count, threshold=cap, omitted=self.count,
                       message=f"{self.count:,} more {self.code} finding(s) of gate {self.gate!r} are not listed (at "
                               f"most {cap} are, per gate and code); the most severe of them is {self.severity}")


class Findings:
    """An ordered list of findings with a small builder API (one line per rule in the gates).

    At most ``cap`` findings are listed per (gate, code); the rest become one summary finding in the
    place where the first of them would have been (see ``MAX_LISTED``)."""

    def __init__(self, cap: int = MAX_LISTED) -> None:
        self.cap = cap
        self._listed: list[Finding | tuple[str, str]] = []
        """Findings in order; a (gate, code) tuple marks where that key's summary goes."""
        self._counts: dict[tuple[str, str], int] = {}
        self._over: dict[tuple[str, str], _Overflow] = {}

    @property
    def items(self) -> list[Finding]:
        """The listed findings, summaries in place (a new list: add findings with ``add``/``extend``)."""
        return [self._over[f].summary(self.cap) if isinstance(f, tuple) else f for f in self._listed]

    def full(self, gate: str, code: str) -> bool:
        """Whether a further finding of (gate, code) would only be counted: a gate can then skip
        building its evidence."""
        return self._counts.get((gate, code), 0) >= self.cap

    def _append(self, f: Finding) -> None:
        key = (f.gate, f.code)
        weight = f.omitted or 1  # a summary from another collection stands for the findings it omitted
        seen = self._counts.get(key, 0)
        self._counts[key] = seen + weight
        if seen < self.cap and not f.omitted:
            self._listed.append(f)
            return
        if key not in self._over:
            self._over[key] = _Overflow(f.gate, f.code)
            self._listed.append(key)
        self._over[key].add(f, weight)

    def add(self, code: str, severity: Severity, message: str, *, measured: Any = None,
            threshold: Any = None, evidence: list[EvidenceRef] | None = None, action: Action | None = None,
            gate: str = "") -> Finding | None:
        """Add one finding; returns it, or None when it was only counted (its (gate, code) is full)."""
        key = (gate, code)
        if self._counts.get(key, 0) >= self.cap and known(code):
            # Counted without building it: 100,000 findings cost a counter, not 100,000 records.
            self._counts[key] += 1
            if key not in self._over:
                self._over[key] = _Overflow(gate, code)
                self._listed.append(key)
            self._over[key].note(severity, action, evidence)
            return None
        made = finding(code, severity, message, measured=measured, threshold=threshold, evidence=evidence,
                       action=action, gate=gate)
        self._append(made)
        return made

    def extend(self, other: list[Finding]) -> None:
        for f in other:
            self._append(f)

    def codes(self) -> set[str]:
        return {f.code for f in self.items if f.severity != "INFO"}

    def has(self, code: str, severity: Severity | None = None) -> bool:
        return any(f.code == code and (severity is None or f.severity == severity) for f in self.items)


def verdict_label(findings: Sequence[Asking]) -> VerdictLabel:
    severities = {f.severity for f in findings}
    if "FAIL" in severities:
        return "FAIL"
    if "FLAG" in severities:
        return "FLAG"
    return "PASS"


class Asking(Protocol):
    """What deciding a verdict reads of a finding (a ``Finding``, or the graph's summary of one)."""

    @property
    def severity(self) -> Severity: ...

    @property
    def action(self) -> Action | None: ...


def deciding_actions(findings: Sequence[Asking], label: VerdictLabel | str) -> list[Action]:
    """Every action the findings that decide the label ask for, most decisive first (none for a PASS).

    The verdict's one ``action`` is the first of them; banking asks all of them (``auditor/banking.py``),
    so that no finding's ask is swallowed by another's: a downgraded headline beside an undisclosed
    latency regression still asks for the disclosure."""
    if label == "PASS":
        return []
    asked = {f.action or _DEFAULT_ACTION[f.severity] for f in findings if f.severity == label}
    return [a for a in ACTION_PRECEDENCE if a in asked]


def choose_action(findings: list[Finding], label: VerdictLabel) -> Action:
    """Most decisive action among the findings that decide the label."""
    if label == "PASS":
        return "pass"
    return next(iter(deciding_actions(findings, label)), _DEFAULT_ACTION[label])


def decide(findings: list[Finding], degraded: bool = False) -> tuple[VerdictLabel, Action]:
    """The verdict rule (design §3), the one every audit uses -- claims of every scope and MLPerf
    compliance pairs: the label from the findings' severities, the most decisive action of the deciding
    findings, and never a PASS from an audit that could not run a part of itself."""
    label = verdict_label(findings)
    action = choose_action(findings, label)
    if degraded and label == "PASS":  # unreachable for gates (a degraded gate adds a FLAG); kept as a guard
        return "FLAG", "flag"
    return label, action


def unsealed_refusal(verdict: VerdictLabel, seal: Seal) -> str | None:
    """Why a verdict cannot bank because its evidence is unsealed, else None: the one seal
    condition of the one banking rule (``auditor/banking.py``: the graph's step, the bundle audit, the review).
    The verdict and action stand; only banking is refused, since an edit or deletion after writing could
    not have been detected."""
    if seal == "sealed":
        return None
    return (f"evidence unsealed: {shown_verdict(verdict, seal)} is not banked -- the run's seal chain is absent "
            "or was not verified with its key, so an edit after writing could not have been detected")
