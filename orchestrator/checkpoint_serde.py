"""The checkpoint as input: it revives the run state's own record types, which name nothing foreign.

A checkpoint is a file in the run directory, so it is input like any other (docs/threat-model.md,
"Hostile input").
LangGraph's default serializer imports and calls whatever ``(module, name)`` a msgpack extension object
names (``os.system`` with an argument runs a command on load); its strict mode silently hands back the
raw data instead. Here a checkpoint value is first scanned, without constructing anything, and any
type outside ``ALLOWED_TYPES`` (the pydantic records ``RunState`` holds) is a ``CheckpointTypeError``
naming it. The records are then revived here, never by importing what the value names: each is looked
up in ``REVIVABLE`` (which also maps the names an older state version gave them) and validated, so a
record whose fields fail validation is refused instead of built unvalidated.

What the revived records name is checked too before a resumed graph runs (``check_names``): the knobs
of every proposal and banked change, and every op implementation, which a server would import. And the
revived state's types, counters and the run files it names (``check_state``): a wrong type ended in a
node's ``TypeError``, and a claim path or leg name naming a place outside the run was read or written.
"""

from __future__ import annotations

import functools
import os
import re
import typing
from pathlib import Path
from typing import Any, Callable, Iterator

import ormsgpack
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, with_config

from perfwarden.auditor.acceptance import kinder_than_rule
from perfwarden.formats.safe_write import RefusedWrite, check_name
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.orchestrator.state import RunState

PLAIN_KINDS = ("null", "bytes", "bytearray")
"""Serialization kinds that revive no type (``msgpack`` is scanned; ``json`` and ``pickle`` are refused)."""
CONSTRUCTOR_EXTS = (jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG, jsonplus.EXT_CONSTRUCTOR_POS_ARGS,
                    jsonplus.EXT_CONSTRUCTOR_KW_ARGS, jsonplus.EXT_PYDANTIC_V1, jsonplus.EXT_PYDANTIC_V2)
"""Extension codes whose payload is ``(module, name, args, ...)``: the library would call ``module.name``."""


class CheckpointTypeError(ValueError):
    """A checkpoint value names a type outside the allow-list, or cannot be decoded at all."""


def _record_types(hint: Any, found: set[type[BaseModel]]) -> None:
    """Every perfwarden pydantic model reachable from a type hint (fields included)."""
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        if hint in found or not hint.__module__.startswith("perfwarden."):
            return
        found.add(hint)
        for field in hint.model_fields.values():
            _record_types(field.annotation, found)
        return
    for arg in typing.get_args(hint):
        _record_types(arg, found)


def _state_records() -> dict[tuple[str, str], type[BaseModel]]:
    """``(module, name)`` -> class of each record type the run state holds, read from ``RunState``'s hints."""
    found: set[type[BaseModel]] = set()
    for hint in typing.get_type_hints(RunState, include_extras=True).values():
        _record_types(hint, found)
    return {(cls.__module__, cls.__name__): cls for cls in found}


OLDER_RECORD_NAMES: dict[tuple[str, str], type[BaseModel]] = {
    ("perfwarden.agents.base", "VerdictSummary"): VerdictSummary,
}
"""The names a checkpoint of run-state version 2 gives the records that live elsewhere now: revived as the
record they name (tests/data/checkpoint-v2)."""
FORMATS = "perfwarden.formats."
HARNESS_FORMATS = "perfwarden.harness."
"""The evidence formats' records as a checkpoint of an earlier perfwarden names them
(``perfwarden.harness.<module>``): revived as the record they name, so such a run still resumes."""
REVIVABLE: dict[tuple[str, str], type[BaseModel]] = {**_state_records(), **OLDER_RECORD_NAMES}
REVIVABLE.update({(HARNESS_FORMATS + module.removeprefix(FORMATS), name): cls
                  for (module, name), cls in list(REVIVABLE.items()) if module.startswith(FORMATS)})
"""Every ``(module, name)`` a checkpoint may name, and the record it revives as."""
ALLOWED_TYPES: frozenset[tuple[str, str]] = frozenset(REVIVABLE)
"""The only types a checkpoint may name (the project's own run-state records)."""


def named_types(blob: bytes) -> list[tuple[str, str]]:
    """``(module, name)`` of every constructor a msgpack value names, nested ones included, in order;
    constructs nothing. ``CheckpointTypeError`` for an extension that is not a constructor of a named
    type (a method call, an array) or a value that does not decode."""
    names: list[tuple[str, str]] = []
    refused: list[str] = []

    def hook(code: int, data: bytes) -> None:
        if code == jsonplus.EXT_DELTA_SNAPSHOT:  # a wrapper around plain data
            ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            return None
        payload = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if code not in CONSTRUCTOR_EXTS or not isinstance(payload, (list, tuple)) or len(payload) < 2:
            refused.append(f"msgpack extension {code} ({_head(payload)})")
            raise ValueError(refused[-1])
        names.append((str(payload[0]), str(payload[1])))
        return None

    try:
        ormsgpack.unpackb(blob, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    except (ValueError, TypeError) as exc:  # ormsgpack reports a failing hook as ValueError("ext_hook failed")
        raise CheckpointTypeError(f"the checkpoint holds {refused[0]}, which perfwarden never writes" if refused
                                  else f"a checkpoint value does not decode: {exc}") from None
    return names


def _head(value: Any) -> str:
    """A short, printable description of an unexpected extension payload."""
    if isinstance(value, (list, tuple)) and len(value) >= 2:
        return ".".join(str(part)[:80] for part in value[:2]) + (f".{str(value[3])[:80]}" if len(value) > 3 else "")
    return type(value).__name__


def check_blob(blob: bytes) -> None:
    """Refuse a msgpack checkpoint value that names any type outside ``ALLOWED_TYPES``."""
    for module, name in named_types(blob):
        if (module, name) not in ALLOWED_TYPES:
            raise CheckpointTypeError(
                f"the checkpoint names the type {module[:120]}.{name[:120]}, which is not one of perfwarden's "
                f"run-state records ({', '.join(sorted(n for _, n in ALLOWED_TYPES))}); it was not loaded")


class StateOnlySerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` that loads only values naming ``ALLOWED_TYPES`` (writes are unchanged), and
    revives each record itself: validated (the library's fallback builds an unvalidated record from fields
    that fail validation), and under the name an older state version gave it (``OLDER_RECORD_NAMES``)."""

    def __init__(self) -> None:
        super().__init__(allowed_msgpack_modules=tuple(sorted(ALLOWED_TYPES)))

    def _record_hook(self, refusals: list[str]) -> Callable[[int, bytes], Any]:
        """An extension hook that revives the records ``REVIVABLE`` names; what it refuses is appended to
        ``refusals`` (ormsgpack reports a failing hook only as "ext_hook failed")."""
        def revive(code: int, data: bytes) -> Any:
            if code not in CONSTRUCTOR_EXTS:  # a delta snapshot of plain data (``check_blob`` refused the rest)
                return self._unpack_ext_hook(code, data)
            payload = ormsgpack.unpackb(data, ext_hook=revive, option=ormsgpack.OPT_NON_STR_KEYS)
            record = REVIVABLE.get((str(payload[0]), str(payload[1])))
            if record is None or code != jsonplus.EXT_PYDANTIC_V2 or not isinstance(payload[2], dict):
                refusals.append(f"the checkpoint names {_head(payload)} in a form perfwarden never writes")
                raise ValueError(refusals[-1])
            try:
                return record.model_validate(payload[2])
            except ValidationError as exc:
                err = exc.errors()[0]
                refusals.append(f"the checkpoint's {record.__name__} record is invalid at "
                                f"{'.'.join(map(str, err['loc']))[:120]!r}: {err['msg']} (got {_head(err.get('input'))})")
                raise ValueError(refusals[-1]) from None
        return revive

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, blob = data
        if kind in PLAIN_KINDS:
            return super().loads_typed(data)
        if kind != "msgpack":
            raise CheckpointTypeError(f"the checkpoint holds a {str(kind)[:40]!r} value, which perfwarden "
                                      "never writes (only msgpack); it was not loaded")
        check_blob(blob)
        refusals: list[str] = []
        try:
            return ormsgpack.unpackb(blob, ext_hook=self._record_hook(refusals), option=ormsgpack.OPT_NON_STR_KEYS)
        except (ValueError, TypeError) as exc:
            raise CheckpointTypeError(refusals[0] if refusals else f"a checkpoint value does not decode: {exc}") from None


# ------------------------------------------------------------------- what the revived records may name

GENERATED_DIR = "generated"
"""Folder of a run where the LLM brain writes candidate kernels (``Brains.write_kernel``): code that is
only ever run in the sandbox."""
OWN_OPS = Path(__file__).resolve().parents[1] / "harness" / "ops"
"""perfwarden's own op implementations (the embedded lab's alternatives, the hand-written Triton kernels)."""


def _spec_allowed(spec: str, run: Path, offered: set[str]) -> bool:
    """An op implementation a run could have proposed: the lab's own offer, a file of perfwarden's ops
    or of the run's ``generated/`` folder, or a module of ``perfwarden.harness.ops``."""
    if spec in offered:
        return True
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        return False
    if target.endswith(".py") or "/" in target:
        real = Path(os.path.realpath(target))  # a relative spec, as the server resolves it: against the cwd
        return real.is_relative_to(OWN_OPS) or real.is_relative_to(Path(os.path.realpath(run)) / GENERATED_DIR)
    return target == "perfwarden.harness.ops" or target.startswith("perfwarden.harness.ops.")


def _named(values: dict[str, Any]) -> tuple[list[dict[str, Any]], list[tuple[str | None, str]]]:
    """The knob sets and the ``(op, spec)`` implementations the state's proposals and banked changes name."""
    knob_sets: list[dict[str, Any]] = []
    specs: list[tuple[str | None, str]] = []
    for record in [*values.get("proposals", []), *values.get("banked", [])]:
        for knobs in (record.config, record.against):
            knob_sets.append(dict(knobs))
            specs += [(op, str(spec)) for op, spec in dict(knobs.get("op_overrides") or {}).items()]
        chosen = [*getattr(record, "candidates", []), getattr(record, "chosen", None), getattr(record, "impl", None)]
        specs += [(record.op, str(spec)) for spec in chosen if spec]
    return knob_sets, specs


def check_names(run: Path, values: dict[str, Any], lab: Any) -> None:
    """A revived state names only what this run could have made: knobs of the lab's config model with
    valid values (an unknown one would become an SGLang launch flag), and op implementations allowed by
    ``_spec_allowed`` (a checkpoint naming any other module or file would have it imported by a
    server). ``CheckpointTypeError`` names the first that is not."""
    knob_sets, specs = _named(values)
    model = lab.config_model
    for knobs in knob_sets:
        try:
            model.validate_knobs(knobs)
        except ValueError as exc:
            raise CheckpointTypeError(f"the checkpoint's state names knobs this target does not have: {exc}") from None
    offered = {spec for op in lab.overridable_ops() for spec in lab.alternatives(op)}
    for op, spec in specs:
        if not _spec_allowed(spec, Path(run), offered):
            raise CheckpointTypeError(f"the checkpoint's state names the implementation {spec[:300]!r} for op "
                                      f"{str(op)[:80]!r}, which is neither perfwarden's nor generated into "
                                      f"{GENERATED_DIR}/ of this run; it is not loaded")


# ------------------------------------------------------------------- the revived state's types and places

MAX_COUNT = 1_000_000
"""Upper bound of a revived counter (``seq``, ``baseline_attempts``): a run makes a few dozen claims, and
a claim file name carries ``seq``."""
CLOCK_SLACK_S = 86_400.0
"""A revived ``started_at`` may lie at most a day after now (clock skew between machines); later, or
before 1970, it is no time this run started at (the budget counts from it)."""
CLAIM_FILE = re.compile(r"claims/[^/\\]+\.json")
"""Where ``pending_claim`` and a verdict's ``claim`` point (graph.py ``_submit``): a file of ``claims/``."""
VERDICT_FILE = re.compile(r"verdicts/[^/\\]+\.json")
"""Where a verdict summary's ``path`` points (``write_verdict``): a file of the run's ``verdicts/``."""


@with_config(ConfigDict(allow_inf_nan=False, extra="forbid"))
class _CheckedRunState(RunState, total=False):
    """``RunState``'s own fields, validated with NaN/inf refused and no unknown channel."""


@functools.cache
def _state_adapter() -> TypeAdapter[_CheckedRunState]:
    """``RunState`` as a pydantic validator (built on first use: a run that never resumes never needs it)."""
    return TypeAdapter(_CheckedRunState)


def check_state(values: dict[str, Any], now: float) -> None:
    """A revived state (or a pending write) holds ``RunState``'s types, counters and a start time in range,
    and names no place outside the run: leg names are single path components, and the claim and verdict
    files it names are files of ``claims/`` and ``verdicts/``; no verdict summary records a decision kinder
    than the acceptance rule gives its own fields. ``CheckpointTypeError`` names the first
    field that is not (a node would raise a ``TypeError`` on it, or read where it points). Its ``run_dir``
    is not checked: nodes never use it (graph.py ``step`` puts the resumed folder there)."""
    try:
        _state_adapter().validate_python(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise CheckpointTypeError(f"the checkpoint's state field {where[:120]!r} is invalid: {err['msg']} "
                                  f"(got {_head(err.get('input'))})") from None
    for key in ("seq", "baseline_attempts"):
        if key in values and not 0 <= values[key] <= MAX_COUNT:
            raise CheckpointTypeError(f"the checkpoint's state field {key!r} is {values[key]!r}, outside "
                                      f"0..{MAX_COUNT}")
    if "started_at" in values and not 0 <= values["started_at"] <= now + CLOCK_SLACK_S:
        raise CheckpointTypeError(f"the checkpoint's state field 'started_at' is {values['started_at']!r}, "
                                  "which is no time this run can have started at")
    for where, rel, pattern in _run_files(values):
        if rel is not None and not (pattern.fullmatch(rel) and _safe_name(rel.split("/")[1])):
            raise CheckpointTypeError(f"the checkpoint's state field {where!r} is {rel[:200]!r}, not a file of the "
                                      f"run's {pattern.pattern.split('/')[0]}/ folder")
    summaries = [values.get("last_verdict"), *values.get("verdicts", [])]
    for v in (v for v in summaries if v is not None and v.acceptance is not None):
        kinder = kinder_than_rule(v, v.acceptance)
        if kinder is not None:
            raise CheckpointTypeError(f"the checkpoint's verdict summary {v.path[:200]!r} is {kinder}")
    legs = [*values.get("aa_legs", []), *(leg for p in values.get("proposals", []) for leg in p.legs or [])]
    for leg in legs:
        if not _safe_name(leg):
            raise CheckpointTypeError(f"the checkpoint's state names the leg {leg[:200]!r}, which is not a single "
                                      "path component of the run's legs/")


def _run_files(values: dict[str, Any]) -> Iterator[tuple[str, str | None, re.Pattern[str]]]:
    """``(field, relative path, the pattern it must match)`` of every run file the state names (nodes read
    the pending claim and the last verdict's claim; the rest reach the report)."""
    yield "pending_claim", values.get("pending_claim"), CLAIM_FILE
    summaries = [("last_verdict", values.get("last_verdict"))] + [("verdicts", v) for v in values.get("verdicts", [])]
    for where, v in summaries:
        if v is not None:
            yield f"{where}.claim", v.claim, CLAIM_FILE
            yield f"{where}.path", v.path, VERDICT_FILE
    for b in values.get("banked", []):
        yield "banked.claim", b.claim, CLAIM_FILE
        yield "banked.verdict", b.verdict, VERDICT_FILE
    for r in values.get("rejected", []):
        yield "rejected.verdict", r.verdict, VERDICT_FILE


def _safe_name(name: str) -> bool:
    """Whether ``name`` is one safe path component (``safe_write.check_name``)."""
    try:
        check_name(name)
    except RefusedWrite:
        return False
    return True
