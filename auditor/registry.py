"""Data registries shipped with the auditor: lever classes, mechanisms, quality evals.

They are JSON so that a user can read (and a reviewer can diff) exactly what the auditor believes
about each server knob and each eval, without reading code.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfwarden.formats.safe_read import RECORD_BYTES, read_bytes
from perfwarden.formats.strict_json import loads

QUALITY_REGISTRY_ENV = "PERFWARDEN_QUALITY_REGISTRY"
"""Environment variable naming a user's quality-eval registry file (``--quality-registry`` sets it)."""


@lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    text = resources.files("perfwarden.auditor").joinpath("data", name).read_text("utf-8")
    return loads(text, what=f"registry {name!r}")  # type: ignore[no-any-return]


def levers() -> dict[str, Any]:
    return load("levers.json")


def mechanisms() -> dict[str, Any]:
    table: dict[str, Any] = load("mechanisms.json")["mechanisms"]  # shipped package data, read as JSON
    return table


class RegistryError(ValueError):
    """A user-supplied registry file that cannot be used (the CLI exits 3)."""


class QualityEvalSpec(BaseModel):
    """One registered quality eval (package data or a user's registry file)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    description: str = ""
    """What the eval measures and where its items come from."""
    metric: str
    """Score unit: ``exact_match``, ``accuracy`` (bounded in [0, 1]), ``perplexity``, ..."""
    higher_is_better: bool = True
    """Direction of the score."""
    max_drop: float = Field(ge=0)
    """Largest accepted drop of the candidate vs the baseline (absolute, or relative for lower-is-better)."""
    min_n: int = Field(1, ge=1)
    """Fewest items a result may have to count."""
    items_sha256: str | None = Field(None, pattern="^[0-9a-f]{64}$")
    """Digest of the item set (or text) both legs must have been scored on; None: any one set, the same
    for both legs."""


class _UserRegistry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    evals: dict[str, QualityEvalSpec]


def _package_quality_evals() -> dict[str, QualityEvalSpec]:
    return {k: QualityEvalSpec.model_validate(v) for k, v in load("quality_evals.json")["evals"].items()}


@lru_cache(maxsize=8)
def _user_quality_evals(path: str, mtime_ns: int) -> dict[str, QualityEvalSpec]:
    try:
        data = loads(read_bytes(path, limit=RECORD_BYTES, what="quality registry"), what="quality registry")
        evals = _UserRegistry.model_validate(data).evals
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = str(exc)
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            reason = f"{err['msg']} at {'.'.join(map(str, err['loc']))!r}"
        raise RegistryError(f"quality registry {path!r} is unusable: {reason}") from None
    clash = sorted(set(evals) & set(_package_quality_evals()))
    if clash:
        raise RegistryError(f"quality registry {path!r} redefines shipped evals {clash!r}; register new ids instead")
    return evals


def user_quality_registry() -> Path | None:
    value = os.environ.get(QUALITY_REGISTRY_ENV)
    return Path(value) if value else None


def quality_evals() -> dict[str, QualityEvalSpec]:
    """Registered evals: the shipped ones plus those of the user's registry file (``--quality-registry``
    or ``PERFWARDEN_QUALITY_REGISTRY``), which may add ids but never redefine a shipped one."""
    evals = dict(_package_quality_evals())
    path = user_quality_registry()
    if path is not None:
        try:
            mtime = path.stat().st_mtime_ns
        except OSError as exc:
            raise RegistryError(f"quality registry {str(path)!r} is unusable: {exc}") from None
        evals.update(_user_quality_evals(str(path), mtime))
    return evals


def _match(key: str, patterns: Iterable[str]) -> str | None:
    for pattern in patterns:
        if fnmatch.fnmatchcase(key, pattern):
            return pattern
    return None


def top_key(key: str) -> str:
    """``op_overrides.rmsnorm`` -> ``op_overrides``: nested keys classify by their top-level knob."""
    return key.split(".", 1)[0]


class InertEntry(BaseModel):
    """Why one key may differ between legs without being a confound (``levers.json`` ``inert``)."""

    model_config = ConfigDict(extra="forbid")

    why: str = Field(min_length=1)
    measured: str | None = None
    """Id of the measurement in ``inert_measurements.json`` that flipped the key on the embedded target."""
    source: str | None = None
    """Where it is documented, for a key the targets that run here cannot flip."""
    unmeasured: bool = False


@lru_cache(maxsize=None)
def inert_entries() -> dict[str, InertEntry]:
    """The inert table, each entry proven: a measurement that exists and shows neither speed nor output
    changed, or a cited source marked unmeasured. A shipped entry without either is a data error."""
    entries = {k: InertEntry.model_validate(v) for k, v in levers()["inert"].items()}
    measurements = load("inert_measurements.json")["measurements"]
    for key, entry in entries.items():
        if entry.measured is not None:
            result = measurements.get(entry.measured)
            if result is None or key not in result["keys_flipped"] or not result["inert"]:
                raise RegistryError(f"inert key {key!r}: measurement {entry.measured!r} does not show it inert")
        elif not (entry.source and entry.unmeasured):
            raise RegistryError(f"inert key {key!r} has neither a measurement nor a cited source marked unmeasured")
    return entries


def lever_class(key: str) -> tuple[str | None, str]:
    """('A'|'B'|None, reason) for one server_info key."""
    data = levers()
    for cls, table in (("B", data["class_b"]), ("A", data["class_a"])):
        for pattern in (key, top_key(key)):
            hit = _match(pattern, table)
            if hit is not None:
                return cls, table[hit]
    return None, "unclassified knob"


def is_lossy_change(key: str, before: Any, after: Any) -> bool:
    """Whether changing ``key`` from ``before`` to ``after`` alters numerics by design (levers.json
    ``lossiness``)."""
    if before == after:
        return False
    table = levers()["lossiness"]
    top = top_key(key)
    if _match(top, table["always_lossy"]) is not None:
        return True
    hit = _match(top, table["lossless_values"])
    return hit is not None and after not in table["lossless_values"][hit]


def random_weights_value(key: str, value: Any) -> bool:
    """Whether ``key=value`` in a server_info says the server loaded random weights (levers.json
    ``random_weights``: flattened-key patterns -> the values that mean random weights)."""
    pattern = _match(key, levers()["random_weights"])
    if pattern is None or not isinstance(value, str):
        return False
    return value.strip().lower() in levers()["random_weights"][pattern]


def is_spec_decode_key(key: str) -> bool:
    return _match(top_key(key), levers()["spec_decode_keys"]) is not None


def is_response_cache_key(key: str) -> bool:
    return _match(top_key(key), levers()["response_cache_keys"]) is not None


# ------------------------------------------------------------------ keys each target reports


def targets() -> dict[str, Any]:
    """Target name -> its entry in ``target_keys.json`` (what that target's server_info holds, and why)."""
    table: dict[str, Any] = load("target_keys.json")["targets"]  # shipped package data, read as JSON
    return table


@lru_cache(maxsize=None)
def target_patterns(target: str) -> tuple[str, ...]:
    """Every key pattern ``target`` reports: its own, those of the targets it stands in for, and what the
    harness adds to every server it launches. Empty for a target the registry does not list."""
    entry = targets().get(target)
    if entry is None:
        return ()
    own = [*entry["keys"], *load("target_keys.json")["every_target"]["keys"]]
    for other in entry.get("stands_in_for", []):
        own += target_patterns(other)
    return tuple(dict.fromkeys(own))


def _segment_match(key: str, pattern: str) -> bool:
    """fnmatch where ``*`` stays inside one dotted segment (``op_overrides.*`` is one op, never deeper)."""
    return key.count(".") == pattern.count(".") and fnmatch.fnmatchcase(key, pattern)


def target_reports(target: str, key: str) -> bool:
    """Whether ``target``'s server reports the flattened key ``key`` (exact, case-sensitive)."""
    return any(_segment_match(key, pattern) for pattern in target_patterns(target))


def target_engines(target: str) -> frozenset[str]:
    """The ``process_conditions.engine`` values the harness writes for ``target`` (and those it stands in for)."""
    entry = targets().get(target, {})
    own = set(entry.get("engines", []))
    for other in entry.get("stands_in_for", []):
        own |= target_engines(other)
    return frozenset(own)
