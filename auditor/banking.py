"""What a verdict banks, and as what: the one banking rule (issue 19).

The graph's patch step (``orchestrator/graph.py``), the bundle audit's component check
(``audit.accepted_changes``) and the review (``orchestrator/review/model.py`` ``is_banked``) all ask
this module; before, each had its own rule and a FLAG with ``replace_headline_with_e2e`` was shown as
banked by the review, not banked by the run, and refused as a bundle component.

The rule fails closed. A PASS banks. A FLAG banks only with an action that changes what is banked so
that what is kept is exactly what the auditor re-derived: ``downgrade_headline`` -- the change is real
(its significance was judged on the raw) and it is banked under the auditor's detected lever class and
its re-derived headline, never the producer's class or figure. ``replace_headline_with_e2e`` does not
bank: the e2e figure it names was not the headline the claim was judged on, and one of its sources
(``IMPLAUSIBLE_SPEEDUP``) says the e2e win is larger than the change can explain, so banking it would
credit the change with another's win; the producer resubmits with the e2e headline, and that claim is
judged. Every other FLAG action (``flag``, ``remeasure``, ``redo_harness``, ``eject``) and every FAIL
banks nothing. On unsealed evidence nothing banks (``findings.unsealed_refusal``, issue 17 §8).

Only a patch claim banks a change: a baseline, profile or harness verdict accepts evidence the search
builds on, and the bundle verdict checks the banked changes together (``report.json`` ``bundle``);
neither is a change the run banks, so the review lists neither among what the run banked.
"""

from __future__ import annotations

from typing import Literal

from perfwarden.auditor.findings import unsealed_refusal
from perfwarden.harness.records import Action, Scope, Seal, VerdictLabel

BankedAs = Literal["as_claimed", "downgraded"]
"""``as_claimed``: a PASS, banked with its re-derived headline; ``downgraded``: a FLAG whose change is
kept under the auditor's detected class and re-derived headline."""

FLAG_BANKING_ACTIONS: tuple[Action, ...] = ("downgrade_headline",)
"""The FLAG actions that bank (the module docstring says why ``replace_headline_with_e2e`` is not one)."""


def kept_as(verdict: VerdictLabel | str, action: Action | str) -> BankedAs | None:
    """How a verdict keeps its change whatever its seal, else None. The bundle audit uses this alone: a
    component's evidence is the bundle's own run, sealed or not alike."""
    if verdict == "PASS":
        return "as_claimed"
    if verdict == "FLAG" and action in FLAG_BANKING_ACTIONS:
        return "downgraded"
    return None


def banked_as(verdict: VerdictLabel | str, action: Action | str, seal: Seal | str,
              scope: Scope | str = "patch") -> BankedAs | None:
    """How a verdict banks its change, or None when it banks nothing (unsealed evidence never banks; only
    a patch claim banks a change)."""
    if scope != "patch" or unsealed_refusal(verdict, seal) is not None:  # type: ignore[arg-type]
        return None
    return kept_as(verdict, action)


def banks(verdict: VerdictLabel | str, action: Action | str, seal: Seal | str, scope: Scope | str = "patch") -> bool:
    """Whether a verdict banks its change (the graph and the review ask this)."""
    return banked_as(verdict, action, seal, scope) is not None


def rule_text() -> str:
    """The rule in one line, as the review shows it."""
    return "PASS, or FLAG with " + " / ".join(FLAG_BANKING_ACTIONS) + "; sealed evidence only"
