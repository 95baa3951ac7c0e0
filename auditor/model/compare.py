"""Holding one statement of a quantity against another: the comparison every witness relation of the
evidence model uses. Pure: it judges values already loaded, it reads nothing.

A ``Stated`` is one source's statement of a quantity (the bench line's duration, LoadGen's own
samples-per-second, the server's counter delta), with the evidence that cites it. ``compare`` holds
two of them to a relation within a stated ``Tolerance`` and returns a finding when they disagree
(EVIDENCE_CORRUPT, FAIL by default: two records of one measurement that contradict each other mean
one of them was edited), else None. A value that is not a finite number where a number is stated is a
disagreement too: a witness that cannot be read is not a witness that agrees.

The witness engine (``auditor/model/witnesses.py``) and any gate that holds two records of one quantity
build two ``Stated`` and a tolerance and call ``compare``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from perfwarden.auditor.findings import finding
from perfwarden.auditor.stated import Stated  # noqa: F401 - re-exported: gates build statements here
from perfwarden.formats.records import Action, Finding, Severity

Relation = Literal["equal", "at_most", "at_least"]
"""``a`` equal to ``b``, at most ``b`` or at least ``b``, each within the tolerance."""


@dataclass(frozen=True)
class Tolerance:
    """How far two statements may differ: ``max(abs, rel * |b|)`` in the quantity's unit."""

    abs: float = 0.0
    rel: float = 0.0
    why: str = ""
    """Where the slack comes from (rounding, two clocks read at different instants)."""

    def limit(self, reference: float) -> float:
        return max(self.abs, self.rel * abs(reference))

    def describe(self) -> str:
        parts = [f"{self.abs:g}" if self.abs else "", f"{self.rel:.3g} relative" if self.rel else ""]
        shown = " or ".join(p for p in parts if p) or "exact"
        return f"{shown} ({self.why})" if self.why else shown


EXACT = Tolerance(why="a count")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def agrees(a: float, b: float, tolerance: Tolerance, relation: Relation = "equal") -> bool:
    """Whether ``a`` stands in ``relation`` to ``b`` within ``tolerance``."""
    slack = tolerance.limit(b)
    if relation == "at_most":
        return a <= b + slack
    if relation == "at_least":
        return a >= b - slack
    return abs(a - b) <= slack


_WORDS = {"equal": "equals", "at_most": "is at most", "at_least": "is at least"}


def compare(quantity: str, a: Stated, b: Stated, tolerance: Tolerance, *, relation: Relation = "equal",
            gate: str = "witness", code: str = "EVIDENCE_CORRUPT", severity: Severity = "FAIL",
            action: Action | None = "eject", context: str = "") -> Finding | None:
    """None when ``a`` stands in ``relation`` to ``b`` within ``tolerance``; else a finding citing both."""
    va, vb = _number(a.value), _number(b.value)
    if va is not None and vb is not None and agrees(va, vb, tolerance, relation):
        return None
    evidence = [e for e in (a.evidence, b.evidence) if e is not None]
    if va is None or vb is None:
        bad = a if va is None else b
        message = f"{context}{quantity}: {bad.source} states {bad.value!r}, not a finite number to hold against " \
                  f"{(b if bad is a else a).source}"
    else:
        message = (f"{context}{quantity}: {a.source} says {va:.6g} and {b.source} says {vb:.6g}; one "
                   f"{_WORDS[relation]} the other within {tolerance.describe()} when both record the same "
                   "requests, so one of them was edited")
    return finding(code, severity, message, measured={a.source: a.value, b.source: b.value},
                   threshold={"relation": relation, "abs": tolerance.abs, "rel": tolerance.rel},
                   evidence=evidence, action=action, gate=gate)
