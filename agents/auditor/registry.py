"""Data registries shipped with the auditor: lever classes, mechanisms, quality evals.

They are JSON so that a user can read (and a reviewer can diff) exactly what the auditor believes
about each server knob and each eval, without reading code.
"""

from __future__ import annotations

import fnmatch
import json
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    text = resources.files("perfwarden.agents.auditor").joinpath("data", name).read_text("utf-8")
    return json.loads(text)


def levers() -> dict[str, Any]:
    return load("levers.json")


def mechanisms() -> dict[str, Any]:
    return load("mechanisms.json")["mechanisms"]


def quality_evals() -> dict[str, Any]:
    return load("quality_evals.json")["evals"]


def _match(key: str, patterns) -> str | None:
    for pattern in patterns:
        if fnmatch.fnmatchcase(key, pattern):
            return pattern
    return None


def top_key(key: str) -> str:
    """``op_overrides.rmsnorm`` -> ``op_overrides``: nested keys classify by their top-level knob."""
    return key.split(".", 1)[0]


def is_inert(key: str) -> bool:
    return _match(top_key(key), levers()["inert"]) is not None


def lever_class(key: str) -> tuple[str | None, str]:
    """('A'|'B'|None, reason) for one server_info key."""
    data = levers()
    for cls, table in (("B", data["class_b"]), ("A", data["class_a"])):
        for pattern in (key, top_key(key)):
            hit = _match(pattern, table)
            if hit is not None:
                return cls, table[hit]
    return None, "unclassified knob"


def is_spec_decode_key(key: str) -> bool:
    return _match(top_key(key), levers()["spec_decode_keys"]) is not None


def is_response_cache_key(key: str) -> bool:
    return _match(top_key(key), levers()["response_cache_keys"]) is not None
