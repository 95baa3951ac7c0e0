"""What the evidence model says a server_info key is, for the gates that classify keys.

A key's role (``auditor/data/evidence_model.json``, record type ``server_info``) decides whether it may
differ between legs: bookkeeping (proven inert: its proof is its ``inert`` entry in ``levers.json``), a
measurement (the server's running counters) or a field not judged may; a condition may only as the
declared change; an identity never. The lever registry (``levers.json``) says what a condition's change
is (class A or B, derived, a report of another knob).
"""

from __future__ import annotations

from perfwarden.auditor import registry
from perfwarden.auditor.model.schema import Role, evidence_model

NOT_COMPARED: frozenset[Role] = frozenset({"bookkeeping", "measurement", "not_judged"})
"""Roles whose fields may differ between legs and copies without being a difference."""


def role(key: str) -> Role | None:
    """The role of a flattened server_info key (None: a key the model does not know)."""
    found = evidence_model().role_of("server_info", key)
    return found.role if found is not None else None


def is_inert(key: str) -> bool:
    """Whether ``key`` (its full dotted name: a parent never makes its children inert) may differ between
    legs: its role is bookkeeping, a measurement or not judged."""
    return role(key) in NOT_COMPARED


def is_known(key: str) -> bool:
    """True when the registry says what a change of ``key`` is: inert, an identity (never a lever), a
    class-A/B lever, a derived quantity or a report of how a declared knob was applied. Anything else is
    an unknown knob."""
    data = registry.levers()
    top = registry.top_key(key)
    return (is_inert(key) or role(key) == "identity" or registry.lever_class(key)[0] is not None
            or top in data["derived"] or top in data.get("reports", {}))
