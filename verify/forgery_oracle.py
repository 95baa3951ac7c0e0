"""The coherent-forgery explorer's oracle: what the evidence model says a forgery leaves behind.

It reads the model (``auditor/data/evidence_model.json``) as a specification and never the gates: a
forgery must not PASS when it leaves a witness the model names out of step with what it moved; it is
consistent -- undetectable by design, since the seal was made again over it -- only when it moved every
witness the model names. For each family:

- **witnesses**: a measurement moved with some of the groups of records that witness it; every group the
  base carries that was not moved is a witness out of step (:func:`witnesses_left`);
- **statements**: a condition or an identity changed in one leg. Changed at every place it is stated but
  one, the copies of one leg disagree (refused); changed everywhere, the legs differ -- refused for an
  identity (never the declared change) and an undeclared condition, consistent for the declared key; a
  bookkeeping field or a measurement changed is no difference at all (:func:`statement`);
- **records** and **downgrades** say themselves which witness they leave (the line of a rep's successor
  that counts its requests, the leg that keeps a witness the other lost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfwarden.auditor.model.schema import evidence_model

Expectation = Literal["refuse", "consistent"]


@dataclass(frozen=True)
class Expected:
    """What the model says of one forgery, and why."""

    outcome: Expectation
    why: str


def witnesses_left(groups_present: frozenset[str], moved: frozenset[str], relations: dict[str, tuple[str, ...]]
                   ) -> Expected:
    """A measurement moved with ``moved`` of the witness groups the base carries (``groups_present``); each
    group stands for the model relations in ``relations``, every one of which must be a relation the model
    lists."""
    listed = {w.id for w in evidence_model().witnesses}
    unknown = sorted({r for g in relations.values() for r in g} - listed)
    if unknown:
        raise ValueError(f"witness groups name relations the evidence model does not list: {unknown}")
    left = sorted(groups_present - moved)
    if not left:
        return Expected("consistent", "every witness the model names moved with the measurement")
    names = sorted({r for g in left for r in relations.get(g, ())})
    return Expected("refuse", f"witness group(s) {', '.join(left)} left unmoved (model relations: {', '.join(names)})")


def role(key: str) -> str | None:
    found = evidence_model().role_of("server_info", key)
    return found.role if found is not None else None


def statement(key: str, places: int, changed: int, declared: bool) -> Expected:
    """A server_info key stated at ``places`` places of one leg, changed at ``changed`` of them."""
    found = role(key)
    if found in ("bookkeeping", "measurement", "not_judged"):
        return Expected("consistent", f"{key!r} is {found} in the model: it may differ")
    if changed < places:
        return Expected("refuse", f"{key!r} ({found or 'no role'}) changed at {changed} of the {places} places one "
                                  "leg states it: the copies disagree")
    if found == "identity":
        return Expected("refuse", f"identity {key!r} changed in one leg: two experiments")
    if declared:
        return Expected("consistent", f"the declared key {key!r} changed coherently in one leg")
    return Expected("refuse", f"undeclared {found or 'unknown'} key {key!r} changed in one leg: the legs differ")
