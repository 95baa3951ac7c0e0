"""The evidence model read into typed records, validated once, and the lookups the engine asks.

The model is data (``auditor/data/evidence_model.json``); this module only reads it. A model that gives
one field two roles, names a role or writer it does not define, or a witness of a record type it does not
model is refused at load (``ModelError``): the auditor never runs on an inconsistent model.

Role lookup (:meth:`RecordModel.role_of`): a field path matches a group's entry exactly, or by a pattern
whose ``*`` stands for one dotted segment; where several entries match, the one with the most literal
characters wins (``requested_*`` before ``*``), so a catch-all can sit beside specific entries. A path
with no matching entry has no role: the engine treats that as fail-closed.
"""

from __future__ import annotations

import fnmatch
import json
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from perfwarden.auditor.codes import known

Role = Literal["condition", "identity", "measurement", "bookkeeping", "not_judged"]
Writer = Literal["harness", "judged", "producer", "foreign"]
Layout = Literal["jsonl", "json", "nested", "text", "mllog", "summary"]
Relation = Literal["equal", "at_most", "at_least"]

MODEL_FILE = "evidence_model.json"
MAX_MEMO = 1 << 14
"""Role answers remembered at once (a run states a few hundred keys)."""


class ModelError(ValueError):
    """The shipped evidence model is inconsistent (our own bug: the auditor refuses to run on it)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldGroup(_Strict):
    """Fields of one record type that share a role, a writer and a reason."""

    role: Role
    fields: tuple[str, ...] = Field(min_length=1)
    why: str = Field(min_length=1)
    writer: Writer | None = None
    """The group's writer where it is not the record's (a judged server's counters in a harness line)."""
    proof: str | None = None
    """Bookkeeping only: how the field is proven inert (by a measurement, or by construction)."""


class FieldRole(_Strict):
    """What the model says of one field: its role, who writes it, and why."""

    record: str
    path: str
    pattern: str
    """The group entry that matched (the path itself, or a pattern)."""
    role: Role
    writer: Writer
    why: str
    proof: str | None = None
    foreign: bool = False
    """Matched among the fields a foreign writer of the record adds."""


class StatedAgain(_Strict):
    """Another record that states one of this record's fields again (a copy of a condition): LoadGen's log
    of a rep states the settings the harness gave it, ``factor`` times the field's unit."""

    field: str
    record: str
    key: str
    factor: float = 1.0
    scenario: str | None = None
    """Only in this LoadGen scenario (the harness passes some settings to one scenario only)."""


class RecordModel(_Strict):
    """One record type the auditor reads."""

    file: str
    layout: Layout
    writer: Writer
    written_by: str
    schema_: str | None = Field(alias="schema")
    required: tuple[str, ...] = ()
    """Fields the writer always writes (``required_when`` says on which records): one absent was removed."""
    required_when: str | None = None
    stated_again: tuple[StatedAgain, ...] = ()
    groups: tuple[FieldGroup, ...]
    foreign: tuple[FieldGroup, ...] = ()
    """Fields a foreign writer of the same record adds beside the harness's (a foreign bench tool's extras)."""

    def entries(self, foreign: bool = False) -> list[tuple[str, FieldGroup]]:
        return [(name, g) for g in (self.foreign if foreign else self.groups) for name in g.fields]

    def role_of(self, name: str, path: str, foreign: bool = False) -> FieldRole | None:
        """The role of ``path`` (dotted); ``foreign``: also the foreign writer's fields. None: no role."""
        best: tuple[int, str, FieldGroup, bool] | None = None
        for is_foreign in ((False, True) if foreign else (False,)):
            for entry, group in self.entries(is_foreign):
                if entry == path:
                    return _role(name, path, entry, group, self.writer, is_foreign)
                if "*" in entry and segment_match(path, entry):
                    weight = len(entry.replace("*", ""))
                    if best is None or weight > best[0]:
                        best = (weight, entry, group, is_foreign)
        if best is None:
            return None
        return _role(name, path, best[1], best[2], self.writer, best[3])


def _role(record: str, path: str, entry: str, group: FieldGroup, writer: Writer, foreign: bool) -> FieldRole:
    return FieldRole(record=record, path=path, pattern=entry, role=group.role,
                     writer=group.writer or ("foreign" if foreign else writer), why=group.why, proof=group.proof,
                     foreign=foreign)


def segment_match(path: str, pattern: str) -> bool:
    """fnmatch where ``*`` stays inside one dotted segment; a lone ``*`` matches any one top-level field."""
    return path.count(".") == pattern.count(".") and fnmatch.fnmatchcase(path, pattern)


class WitnessRule(_Strict):
    """One relation binding a measurement to another record's statement of the same quantity."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    measurement: str
    witness: str
    relation: Relation
    writers: tuple[Writer, ...] = Field(min_length=1)
    """Writers of the line the relation binds (a foreign bench line is held to fewer than the harness's)."""
    required: str
    """When the run must carry the witness: absent then, the evidence is missing (fail closed)."""
    why: str


class CounterSignal(_Strict):
    """A counter that shows a mechanism ran: ``delta`` (after - before > 0) or ``value`` (set, non-zero)."""

    record: str
    field: str
    shows: Literal["delta", "value"]


class MechanismModel(_Strict):
    """A mechanism a server can run: the configuration that switches it on and the counters that show it."""

    why: str
    config: tuple[str, ...] = Field(min_length=1)
    off: tuple[object, ...]
    """Values of a config key that mean the mechanism is off."""
    counters: tuple[CounterSignal, ...] = Field(min_length=1)


class SettingRequirement(_Strict):
    """One way a compliance run's setting meets its test: equal to a value, at least one, above one, or other
    than the reference run's."""

    name: str
    equals: int | bool | None = None
    at_least: float | None = None
    above: float | None = None
    differs_from_reference: bool = False


class RequiredSetting(_Strict):
    """A setting a compliance test's audit.config fixes: met when any of its ways holds."""

    any_of: tuple[SettingRequirement, ...] = Field(min_length=1)
    source: str


class ComplianceTest(_Strict):
    """What an MLPerf compliance test requires of its run's own audit settings."""

    why: str
    settings: tuple[RequiredSetting, ...] = Field(min_length=1)


class ReadingRule(_Strict):
    """What one kind of thing the loader met while reading becomes in the verdict."""

    code: str
    severity: Literal["INFO", "FLAG", "FAIL"]
    action: Literal["flag", "remeasure", "eject"] | None = None
    why: str


class EvidenceModel(_Strict):
    """The whole model (``auditor/data/evidence_model.json``)."""

    doc: str = Field(alias="_doc")
    version: int
    roles: dict[Role, str]
    writers: dict[Writer, str]
    records: dict[str, RecordModel]
    witnesses: tuple[WitnessRule, ...]
    mechanisms: dict[str, MechanismModel]
    compliance_tests: dict[str, ComplianceTest]
    reading: dict[str, ReadingRule]
    _roles: dict[tuple[str, str, bool], FieldRole | None] = PrivateAttr(default_factory=dict)
    """Answers already given (at most ``MAX_MEMO``)."""

    def record(self, name: str) -> RecordModel:
        """The model of record type ``name`` (``KeyError`` for one it does not model: fail closed upstream)."""
        return self.records[name]

    def role_of(self, record: str, path: str, foreign: bool = False) -> FieldRole | None:
        """The role of ``path`` in ``record`` (memoized: the gates ask for the same keys in every copy)."""
        key = (record, path, foreign)
        if key not in self._roles:
            if len(self._roles) >= MAX_MEMO:
                self._roles.clear()  # keys come from the evidence: the memo never grows with the input
            found = self.records.get(record)
            self._roles[key] = found.role_of(record, path, foreign) if found is not None else None
        return self._roles[key]

    def is_container(self, record: str, path: str) -> bool:
        """Whether ``path`` is an object whose own fields have roles (``loadgen`` of a bench line)."""
        model = self.records.get(record)
        return model is not None and any(entry.startswith(path + ".") for entry, _ in model.entries())

    def fields_with_role(self, record: str, role: Role, foreign: bool = False) -> tuple[str, ...]:
        """Entries (names or patterns) of ``record`` whose role is ``role``."""
        model = self.records[record]
        return tuple(name for name, g in model.entries(foreign) if g.role == role)




def _check(model: EvidenceModel) -> None:
    """What pydantic cannot say: one role per field, witness ids unique, reading codes known."""
    for name, record in model.records.items():
        for foreign in (False, True):
            seen: dict[str, str] = {}
            for entry, group in record.entries(foreign):
                if entry in seen:
                    raise ModelError(f"{MODEL_FILE}: {name}.{entry} has two roles ({seen[entry]} and {group.role})")
                seen[entry] = group.role
                if group.proof is not None and group.role != "bookkeeping":
                    raise ModelError(f"{MODEL_FILE}: {name}.{entry}: only bookkeeping carries a proof")
                if group.role == "bookkeeping" and not group.proof:
                    raise ModelError(f"{MODEL_FILE}: {name}.{entry} is bookkeeping without a proof of inertness")
    ids = [w.id for w in model.witnesses]
    if len(ids) != len(set(ids)):
        raise ModelError(f"{MODEL_FILE}: a witness id is listed twice")
    for rule in model.reading.values():
        if not known(rule.code):
            raise ModelError(f"{MODEL_FILE}: reading rule names unknown code {rule.code!r}")
    for mech, spec in model.mechanisms.items():
        for counter in spec.counters:
            if counter.record not in model.records:
                raise ModelError(f"{MODEL_FILE}: mechanism {mech!r} reads record type {counter.record!r}, not modelled")


@lru_cache(maxsize=None)
def evidence_model() -> EvidenceModel:
    """The shipped model, read and checked once."""
    text = resources.files("perfwarden.auditor").joinpath("data", MODEL_FILE).read_text("utf-8")
    try:
        model = EvidenceModel.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise ModelError(f"{MODEL_FILE} is not a valid evidence model: {exc}") from None
    _check(model)
    return model
