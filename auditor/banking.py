"""What a verdict banks, and as what: the one banking rule.

The acceptance rule of the patch and bundle scopes (``auditor/acceptance.py``, which the graph's patch step
asks), the bundle audit's component check (``audit.accepted_changes``) and the review
(``orchestrator/review/model.py`` ``is_banked``) all ask this module, so a verdict never banks in one place
and not in another.

The rule fails closed. A PASS banks. A FLAG banks only when every action its deciding findings ask for
(``Verdict.actions``) is one that changes what is banked so that what is kept is exactly what the auditor
re-derived: ``downgrade_headline`` -- the change is real (its significance was judged on the raw) and it is
banked under the auditor's detected lever class and its re-derived headline, never the producer's class or
figure. One finding's action never launders another's: a ``downgrade_headline`` beside a ``flag`` (an
undisclosed latency trade-off asking for its disclosure) banks nothing until the resubmitted claim
satisfies the ``flag`` (a truthful disclosure turns that finding INFO, which decides nothing).
``replace_headline_with_e2e`` does not bank: the e2e figure it names was not the headline the claim was
judged on, and one of its sources (``IMPLAUSIBLE_SPEEDUP``) says the e2e win is larger than the change can
explain, so banking it would credit the change with another's win; the producer resubmits with the e2e
headline, and that claim is judged. Every other FLAG action (``flag``, ``remeasure``, ``redo_harness``,
``eject``) and every FAIL banks nothing. On unsealed evidence nothing banks (``findings.unsealed_refusal``).

Only a patch claim banks a change: a baseline, profile or harness verdict accepts evidence the search
builds on, and the bundle verdict checks the banked changes together (``report.json`` ``bundle``);
neither is a change the run banks, so the review lists neither among what the run banked. What accepts
each of them is ``auditor/acceptance.py``'s.
"""

from __future__ import annotations

from typing import Literal, Sequence, Union

from perfwarden.auditor.findings import ACTION_PRECEDENCE, deciding_actions, unsealed_refusal
from perfwarden.formats.records import Action, Scope, Seal, Verdict, VerdictLabel

BankedAs = Literal["as_claimed", "downgraded"]
"""``as_claimed``: a PASS, banked with its re-derived headline; ``downgraded``: a FLAG whose change is
kept under the auditor's detected class and re-derived headline."""

FLAG_BANKING_ACTIONS: tuple[Action, ...] = ("downgrade_headline",)
"""The FLAG actions that bank (the module docstring says why ``replace_headline_with_e2e`` is not one)."""


Asked = Union[Action, str, Sequence[Union[Action, str]]]
"""What a verdict's deciding findings ask for: every action (``Verdict.actions``), or one action where the
verdict had one deciding finding."""


def _all(actions: Asked) -> tuple[str, ...]:
    return (actions,) if isinstance(actions, str) else tuple(actions)


def verdict_actions(verdict: Verdict) -> list[Action]:
    """Every action a verdict file says its deciding findings ask for: its ``actions`` together with what
    its findings state, most decisive first. A verdict file is input: one written before ``actions``
    existed has only its findings to say it, and an edited one whose ``actions`` dropped an ask its
    findings still make keeps that ask (its one ``action`` alone is never enough: the most decisive can
    hide a less decisive ask that banks nothing)."""
    asked = set(verdict.actions) | set(deciding_actions(verdict.findings, verdict.verdict))
    return [a for a in ACTION_PRECEDENCE if a in asked]


def kept_as(verdict: VerdictLabel | str, actions: Asked) -> BankedAs | None:
    """How a verdict keeps its change whatever its seal, else None. The bundle audit uses this alone: a
    component's evidence is the bundle's own run, sealed or not alike."""
    if verdict == "PASS":
        return "as_claimed"
    asked = _all(actions)
    if verdict == "FLAG" and asked and all(a in FLAG_BANKING_ACTIONS for a in asked):
        return "downgraded"
    return None


def banked_as(verdict: VerdictLabel | str, actions: Asked, seal: Seal | str,
              scope: Scope | str = "patch") -> BankedAs | None:
    """How a verdict banks its change, or None when it banks nothing (unsealed evidence never banks; only
    a patch claim banks a change)."""
    if scope != "patch" or unsealed_refusal(verdict, seal) is not None:  # type: ignore[arg-type]
        return None
    return kept_as(verdict, actions)


def banks(verdict: VerdictLabel | str, actions: Asked, seal: Seal | str, scope: Scope | str = "patch") -> bool:
    """Whether a verdict banks its change (the graph and the review ask this)."""
    return banked_as(verdict, actions, seal, scope) is not None


def rule_text() -> str:
    """The rule in one line, as the review shows it."""
    return "PASS, or FLAG whose every deciding finding asks " + " / ".join(FLAG_BANKING_ACTIONS) + "; sealed evidence only"
