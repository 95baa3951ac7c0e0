"""The red team's field explorer: every type-consistent edit of every field of every record.

Attack families are what someone thought of; the explorer is what the record types allow. For every
record type the auditor reads (bench lines and their nested conditions, contention samples and LoadGen
settings, outputs, ``leg.json``, ``server_info.json``, op bench and profile lines, ``rig.json``, quality
evals, ``run.json``, claims, the seal chain, LoadGen's summary and detail logs) it enumerates the fields
from the type's own definition (msgspec struct fields, pydantic model fields, recursing into nested
models; a raw-JSON or dict field by the keys the record holds), so a field added to a schema is explored
without anyone listing it. For each field present in a real clean run it makes every type-consistent
edit (:data:`OPS`): scale, shift, swap with the other leg, drop, a repeated key, retype, rename to a case
or confusable variant, move into or out of a nested object. An edit of a bench line's per-request arrays
re-derives the line's own aggregates (where the oracle's formula reproduces the writer's on the unedited
line), and a sealed run is sealed again over the edited bytes with its own key -- the threat the seal
admits it does not cover (a rigged harness seals wrong numbers faithfully), so the other gates are what
is tested.

The oracle (``field_explorer_oracle``) decides whether an edit changed something the auditor judges (the
headline delta, a condition, the load, the evidence set). Only those are audited, blind; one that leaves
no finding at FLAG or above is a success, and becomes a fixture whose answer (FAIL or FLAG: not PASS) is
written before the auditor is run on the fixture (:func:`write_fixture`).
"""

from __future__ import annotations

import json
import random
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from pydantic import BaseModel

from perfwarden.formats import jsonl as line_schemas
from perfwarden.formats import records
from perfwarden.verify import field_explorer_oracle as oracle

EXPLORER_BASES = ("seal-syn-clean", "seal-rec-clean", "rec-harness-clean", "jdg-eval-comparable")
"""Clean runs the explorer edits: the sealed synthetic and recorded runs (every harness record of a patch
claim, LoadGen logs, the seal chain), a recorded op bench with its profile and rig, and quality evals."""


# --------------------------------------------------------------------------------- record types


@dataclass(frozen=True)
class RecordType:
    """One kind of record the auditor reads: where it lives and the type that defines its fields."""

    name: str
    pattern: str
    """Glob inside the run."""
    schema: type | None
    """msgspec Struct or pydantic model; None for records whose fields are their own keys."""
    layout: str = "json"
    """``jsonl`` (one record a line), ``json`` (one object), ``summary`` / ``mllog`` (LoadGen text)."""
    harness: bool = True
    """Written by the harness (strict evidence: a renamed, retyped or repeated field is not the schema's)."""


RECORD_TYPES: tuple[RecordType, ...] = (
    RecordType("bench_line", "legs/*/bench_runs.jsonl", line_schemas.BenchRunLine, "jsonl"),
    RecordType("output_line", "legs/*/outputs.jsonl", line_schemas.OutputLine, "jsonl"),
    RecordType("server_info", "legs/*/server_info.json", None),
    RecordType("leg_spec", "legs/*/leg.json", records.LegSpec),
    RecordType("op_bench_line", "opbench/*/opbench.jsonl", line_schemas.OpBenchLine, "jsonl"),
    RecordType("op_bench_rig", "opbench/*/rig.json", None),
    RecordType("profile_line", "profile/profile.jsonl", line_schemas.ProfileLine, "jsonl"),
    RecordType("quality_eval", "quality/*.json", records.QualityEval),
    RecordType("run_manifest", "run.json", records.RunManifest, harness=False),
    RecordType("claim", "claims/*.json", records.Claim, harness=False),
    RecordType("seal_entry", "evidence.jsonl", line_schemas.SealEntry, "jsonl"),
    RecordType("loadgen_summary", "legs/*/loadgen/rep-0/mlperf_log_summary.txt", None, "summary"),
    RecordType("loadgen_detail", "legs/*/loadgen/rep-0/mlperf_log_detail.txt", None, "mllog"),
)


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if args else tp
    if typing.get_origin(tp) is typing.Annotated:
        return typing.get_args(tp)[0]
    return tp


def schema_fields(schema: type | None) -> dict[str, Any]:
    """Field name -> declared type, read from the type itself (msgspec or pydantic), never a hand list."""
    if schema is None:
        return {}
    if isinstance(schema, type) and issubclass(schema, msgspec.Struct):
        return {f.name: _strip_optional(f.type) for f in msgspec.structs.fields(schema)}
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return {name: _strip_optional(f.annotation) for name, f in schema.model_fields.items()}
    return {}


def _nested_model(tp: Any) -> type | None:
    tp = _strip_optional(tp)
    if isinstance(tp, type) and issubclass(tp, (BaseModel, msgspec.Struct)):
        return tp
    return None


def field_paths(schema: type | None, value: dict[str, Any], depth: int = 0) -> list[tuple[str, ...]]:
    """Every field path of one record: the schema's fields the record holds (absent ones have no value to
    edit), recursing into nested models by their schema and into dicts (raw JSON, server_info) by their
    keys, three levels at most."""
    fields = schema_fields(schema)
    names = [n for n in fields if n in value] if fields else list(value)
    names += [n for n in value if fields and n not in fields]  # what the record holds beyond its schema
    out: list[tuple[str, ...]] = []
    for name in names:
        out.append((name,))
        child = value.get(name)
        if depth < 2 and isinstance(child, dict) and child:
            sub = _nested_model(fields.get(name)) if fields else None
            out += [(name, *p) for p in field_paths(sub, child, depth + 1)]
        elif depth < 2 and isinstance(child, list) and child and isinstance(child[0], dict):
            sub = _nested_model(typing.get_args(fields.get(name))[0]) if fields and typing.get_args(fields.get(name)) else None
            out += [(name, "0", *p) for p in field_paths(sub, child[0], depth + 1)]
    return out


def coverage() -> dict[str, list[str]]:
    """Per record type, the fields its definition declares (what the explorer must reach)."""
    return {rt.name: sorted(schema_fields(rt.schema)) for rt in RECORD_TYPES}


# ---------------------------------------------------------------------------------------- edits


@dataclass(frozen=True)
class Edit:
    """One edit: of ``path`` in the record at ``where`` of file ``rel`` (a line index, -1 for every line of
    the file, None for a whole-file record), by ``op``."""

    record: str
    rel: str
    where: int | None
    path: tuple[str, ...]
    op: str

    def name(self) -> str:
        where = "" if self.where is None else ("@all" if self.where < 0 else f"@{self.where}")
        return f"{self.record}:{self.rel}{where}:{'.'.join(self.path)}:{self.op}"


CONFUSABLE = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "c": "\u0441", "p": "\u0440", "i": "\u0456"}


def _confusable(text: str) -> str:
    for i, ch in enumerate(text):
        if ch in CONFUSABLE:
            return text[:i] + CONFUSABLE[ch] + text[i + 1:]
    return text + "\u200b"


def _case(text: str) -> str:
    return text.upper() if text != text.upper() else text.lower()


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def value_ops(value: Any) -> list[str]:
    """The type-consistent value edits of one value."""
    if isinstance(value, bool):
        return ["flip"]
    if _is_num(value):
        return ["scale:0.5", "scale:0.9", "scale:1.1", "scale:2", "shift:+1", "shift:-1"]
    if isinstance(value, str):
        return ["case", "confusable", "empty"]
    if isinstance(value, list) and value:
        if all(_is_num(v) for v in value):
            return ["scale_all:0.5", "scale_all:0.9", "scale_all:1.1", "scale_all:2", "scale_one:2", "drop_last",
                    "dup_last", "reverse"]
        if all(isinstance(v, list) for v in value):
            return ["scale_all:0.5", "scale_all:2", "drop_last", "dup_last", "drop_inner_last"]
        return ["drop_last", "dup_last", "set_first_text"]
    return []


STRUCT_OPS = ("drop", "repeat_key", "retype:str", "retype:list", "retype:null", "rename:case", "rename:confusable",
              "move_in", "move_out", "swap_legs")
OPS = ("scale", "shift", "swap_legs", "drop", "repeat_key", "retype", "rename", "move_in", "move_out", "flip", "case",
       "confusable", "empty", "scale_all", "scale_one", "drop_last", "dup_last", "reverse", "drop_inner_last",
       "set_first_text")
"""Edit operation families (each with its parameters above)."""


def _scaled(value: Any, factor: float) -> Any:
    out = value * factor
    return int(round(out)) if isinstance(value, int) else out


def new_value(value: Any, op: str) -> Any:
    """The edited value (raises ValueError where the op does not apply)."""
    kind, _, arg = op.partition(":")
    if kind == "flip":
        return not value
    if kind == "scale":
        return _scaled(value, float(arg))
    if kind == "shift":
        step = 1 if isinstance(value, int) else max(abs(value) * 0.05, 1e-3)
        return value + step if arg == "+1" else value - step
    if kind == "case":
        return _case(value)
    if kind == "confusable":
        return _confusable(value)
    if kind == "empty":
        return ""
    if kind == "scale_all":
        return [[_scaled(x, float(arg)) for x in v] if isinstance(v, list) else _scaled(v, float(arg)) for v in value]
    if kind == "scale_one":
        return [_scaled(value[0], float(arg)), *value[1:]]
    if kind == "drop_last":
        return value[:-1]
    if kind == "dup_last":
        return [*value, value[-1]]
    if kind == "reverse":
        return list(reversed(value))
    if kind == "drop_inner_last":
        return [v[:-1] if isinstance(v, list) and v else v for v in value]
    if kind == "set_first_text":
        return ["x" if value[0] in (None, "") else None, *value[1:]]
    if kind == "retype":
        if value is None:
            raise ValueError("null has no type to change (null is absent)")
        return {"str": json.dumps(value) if not isinstance(value, str) else [value], "list": [value], "null": None}[arg]
    raise ValueError(op)


# ------------------------------------------------------------------- a record inside its file


class Pairs(list):
    """An object kept as (key, value) pairs, so a key may repeat when it is serialized."""


def dumps(obj: Any) -> str:
    if isinstance(obj, Pairs):
        return "{" + ",".join(f"{json.dumps(k)}:{dumps(v)}" for k, v in obj) + "}"
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dumps(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    return json.dumps(obj)


def _parent(obj: Any, path: tuple[str, ...]) -> tuple[Any, str]:
    for part in path[:-1]:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj, path[-1]


def edit_record(record: dict[str, Any], path: tuple[str, ...], op: str, other: dict[str, Any] | None) -> Any:
    """The record after one edit (a dict, or :class:`Pairs` somewhere inside for a repeated key)."""
    rec = json.loads(json.dumps(record))
    parent, key = _parent(rec, path)
    if not isinstance(parent, dict) or key not in parent:
        raise ValueError("no such field")
    value = parent[key]
    kind, _, arg = op.partition(":")
    if kind == "drop":
        del parent[key]
    elif kind == "swap_legs":
        if other is None:
            raise ValueError("no other leg")
        o_parent, _ = _parent(other, path)
        if not isinstance(o_parent, dict) or key not in o_parent or o_parent[key] == value:
            raise ValueError("nothing to swap")
        parent[key] = o_parent[key]
    elif kind == "rename":
        renamed = _case(key) if arg == "case" else _confusable(key)
        items = [(renamed if k == key else k, v) for k, v in parent.items()]
        parent.clear()
        parent.update(items)
    elif kind == "repeat_key":
        alt = new_value(value, value_ops(value)[0]) if value_ops(value) else None
        pairs = Pairs([(k, v) for k, v in parent.items()])
        at = [k for k, _ in pairs].index(key)
        pairs.insert(at, (key, alt))
        if len(path) == 1:
            return pairs
        grand, gkey = _parent(rec, path[:-1])
        grand[int(gkey) if isinstance(grand, list) else gkey] = pairs
    elif kind == "move_in":
        host = next((k for k, v in rec.items() if isinstance(v, dict) and k != key), None) if len(path) == 1 else None
        if host is None:
            raise ValueError("nowhere to move into")
        rec[host] = {**rec[host], key: rec.pop(key)}
    elif kind == "move_out":
        if len(path) < 2 or key in rec:
            raise ValueError("not nested")
        rec[key] = parent.pop(key)
    else:
        parent[key] = new_value(value, op)
    return rec


# --------------------------------------------------------------------------- text records


def _summary_keys(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if ":" in line and not line.startswith("="):
            key = line.split(":", 1)[0].strip()
            if key and key not in out:
                out.append(key)
    return out


def _mllog_keys(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if line.startswith(":::MLLOG "):
            try:
                key = json.loads(line[9:]).get("key")
            except (ValueError, AttributeError):
                continue
            if isinstance(key, str) and key not in out:
                out.append(key)
    return out


TEXT_OPS = ("scale:0.5", "scale:2", "shift:+1", "drop", "repeat_key", "rename:case", "retype:str")


def edit_text(layout: str, text: str, key: str, op: str) -> str:
    """A LoadGen summary (``key : value``) or detail (``:::MLLOG {json}``) log with one key's line edited."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if layout == "summary" and ":" in line and line.split(":", 1)[0].strip() == key:
            head, value = line.split(":", 1)
            edited = _text_value(value.strip(), op)
            new = None if op == "drop" else (head.replace(key, _case(key)) if op.startswith("rename") else head) + \
                ": " + (value.strip() if op.startswith("rename") or op == "repeat_key" else edited) + "\n"
            extra = [f"{head}: {_text_value(value.strip(), 'scale:2')}\n"] if op == "repeat_key" else []
            return "".join(lines[:i] + extra + ([new] if new else []) + lines[i + 1:])
        if layout == "mllog" and line.startswith(":::MLLOG "):
            try:
                rec = json.loads(line[9:])
            except ValueError:
                continue
            if rec.get("key") != key:
                continue
            new_lines = [] if op == "drop" else [":::MLLOG " + json.dumps(_mllog_edit(rec, op)) + "\n"]
            if op == "repeat_key":
                new_lines = [":::MLLOG " + json.dumps({**rec, "value": _text_value(rec.get("value"), "scale:2")}) + "\n",
                             line]
            return "".join(lines[:i] + new_lines + lines[i + 1:])
    raise ValueError("no such key")


def _text_value(value: Any, op: str) -> Any:
    if op.startswith(("scale", "shift")):
        num = float(value) if not isinstance(value, (int, float)) else value
        out = new_value(num, op)
        if isinstance(value, str):
            return str(int(out)) if "." not in value and "e" not in value.lower() else f"{out:g}"
        return out
    if op == "retype:str":
        return json.dumps(value) if not isinstance(value, str) else [value]
    return value


def _mllog_edit(rec: dict[str, Any], op: str) -> dict[str, Any]:
    if op.startswith("rename"):
        return {**rec, "key": _case(rec["key"])}
    return {**rec, "value": _text_value(rec.get("value"), op)}


# ----------------------------------------------------------------------------------- the bases


@dataclass(frozen=True)
class ExplorerBase:
    """A clean fixture the explorer edits, with its claim and (sealed runs) its key beside the run."""

    name: str
    fixture: Path
    claim_rel: str
    claim: dict[str, Any]
    key: Path | None


def load_explorer_base(fixture: Path) -> ExplorerBase | None:
    run = fixture / "run"
    claims = sorted((run / "claims").glob("*.json"))
    if len(claims) != 1:
        return None
    key = fixture / "seal.key"
    return ExplorerBase(fixture.name, fixture, str(claims[0].relative_to(run)), json.loads(claims[0].read_text("utf-8")),
                        key if key.is_file() and (run / "evidence.jsonl").is_file() else None)


def _other_leg_rel(base: ExplorerBase, rel: str) -> str | None:
    """The same file of the claim's other leg (baseline <-> candidate)."""
    legs = base.claim.get("legs") or {}
    pair = {legs.get("baseline"): legs.get("candidate"), legs.get("candidate"): legs.get("baseline")}
    parts = rel.split("/")
    other = pair.get(parts[1]) if len(parts) >= 3 and parts[0] == "legs" else None
    if other:
        return "/".join(["legs", other, *parts[2:]])
    return None


def planned_edits(base: ExplorerBase, seed: int = 0) -> list[Edit]:
    """Every edit of ``base`` in a seeded order that mixes record types and fields, so any prefix of it (a
    budget) samples every record type alike."""
    edits = list(enumerate_edits(base))
    random.Random(f"explore:{seed}:{base.name}").shuffle(edits)
    return edits


def enumerate_edits(base: ExplorerBase) -> Iterator[Edit]:
    """Every edit of every field of every record of ``base`` (deterministic order)."""
    run = base.fixture / "run"
    for rt in RECORD_TYPES:
        for path in sorted(run.glob(rt.pattern)):
            rel = str(path.relative_to(run))
            text = path.read_text("utf-8", errors="replace")
            if rt.layout in ("summary", "mllog"):
                keys = _summary_keys(text) if rt.layout == "summary" else _mllog_keys(text)
                for key in keys:
                    for op in TEXT_OPS:
                        yield Edit(rt.name, rel, None, (key,), op)
                continue
            wheres: list[int | None]  # the records edited (Edit.where): a line, -1 every line, None the file
            if rt.layout == "jsonl":
                recs = [json.loads(x) for x in text.splitlines() if x.strip()]
                wheres = [0, -1] if len(recs) > 1 and rt.name == "bench_line" else [0]
            else:
                recs, wheres = [json.loads(text)], [None]
            if not recs or not isinstance(recs[0], dict):
                continue
            for fpath in field_paths(rt.schema, recs[0]):
                parent, key = _parent(recs[0], fpath)
                value = parent.get(key) if isinstance(parent, dict) else None
                ops = [*value_ops(value), *STRUCT_OPS]
                for where in wheres:
                    for op in ops:
                        yield Edit(rt.name, rel, where, fpath, op)


# ------------------------------------------------------------------------------- applying one


def apply_edit(run: Path, base: ExplorerBase, edit: Edit) -> dict[str, bytes]:
    """The new bytes of every file the edit changes (``rel -> bytes``); raises ValueError when it does not
    apply. Bench-line array edits re-derive the line's own aggregates."""
    rt = next(r for r in RECORD_TYPES if r.name == edit.record)
    path = run / edit.rel
    text = path.read_text("utf-8")
    if rt.layout in ("summary", "mllog"):
        return {edit.rel: edit_text(rt.layout, text, edit.path[0], edit.op).encode()}
    other_rel = _other_leg_rel(base, edit.rel)
    other_text = (run / other_rel).read_text("utf-8") if other_rel and (run / other_rel).is_file() else None
    if rt.layout == "json":
        other = json.loads(other_text) if other_text else None
        return {edit.rel: (dumps(edit_record(json.loads(text), edit.path, edit.op, other)) + "\n").encode()}
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    others = [json.loads(x) for x in other_text.splitlines() if x.strip()] if other_text else []
    targets = range(len(lines)) if edit.where == -1 else [edit.where or 0]
    out = list(lines)
    for i in targets:
        edited = edit_record(lines[i], edit.path, edit.op, others[i] if i < len(others) else None)
        if rt.name == "bench_line" and isinstance(edited, dict) and len(edit.path) == 1 and \
                (isinstance(lines[i].get(edit.path[0]), list) or edit.path[0] == "duration"):
            edited = oracle.rederive(edited, oracle.rederivable(lines[i]))
        out[i] = edited
    return {edit.rel: "".join(dumps(x) + "\n" for x in out).encode()}


def rests_on(claim: dict[str, Any], rel: str) -> bool:
    """Whether the audit of ``claim`` reads the file ``rel`` (a leg it names, the run-wide records, the op
    bench and profile of a harness claim or a cited isolated speedup)."""
    legs = oracle.json_object(claim.get("legs"))
    named = {v for v in legs.values() if isinstance(v, str)} | {v for v in legs.get("aa") or [] if isinstance(v, str)}
    parts = rel.split("/")
    if parts[0] == "legs":
        harness = claim.get("scope") == "harness"
        return len(parts) > 1 and parts[1] in named and (not harness or parts[-1] == "server_info.json")
    return True


def declared(schema: type | None, path: tuple[str, ...]) -> bool:
    """Whether the edited key is a field its (schema-typed) parent declares."""
    for part in path[:-1]:
        if part.isdigit():
            continue
        tp = schema_fields(schema).get(part)
        schema = _nested_model(typing.get_args(tp)[0] if typing.get_origin(tp) is list and typing.get_args(tp) else tp)
    return path[-1] in schema_fields(schema)


def typed_parent(schema: type | None, path: tuple[str, ...]) -> bool:
    """Whether the object holding the edited key is one a schema types (not a free-form raw-JSON object such as
    a bench line's ``server_info`` or ``contention``, whose keys are the writer's own)."""
    for part in path[:-1]:
        fields = schema_fields(schema)
        if part.isdigit():
            continue
        tp = fields.get(part)
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is list and typing.get_args(tp) else tp
        schema = _nested_model(inner)
        if schema is None:
            return False
    return schema is not None


WRITER_CANNOT = ("repeat_key",)
"""Edits the harness's own writer cannot make (``json.dumps`` of a dict never repeats a key): on a sealed base
they are not sealed again -- only a forger of sealed bytes writes them, and the seal must catch that."""


def is_structural(edit: Edit, written: bytes | None = None) -> bool:
    """A harness record no longer shaped as its schema: a field renamed, moved, repeated or of another type
    (null is absent: judged by what the field feeds). Records without a schema (``server_info``, LoadGen's
    text logs, ``rig.json``) are judged by what they feed only. A retype is of "another type" only where the
    schema rejects the file it wrote (``written``): ``[]`` made ``[[]]`` in a field typed as a list of shapes
    is still a list of shapes, judged by what it feeds (found by the field explorer: a profile's free-form
    ``shapes`` counted as retyped)."""
    rt = next(r for r in RECORD_TYPES if r.name == edit.record)
    if not (rt.harness and typed_parent(rt.schema, edit.path) and declared(rt.schema, edit.path)):
        return False
    if edit.op.split(":")[0] in ("rename", "move_in", "move_out", "repeat_key"):
        return True
    return edit.op in ("retype:str", "retype:list") and (written is None or not conforms(rt, written))


def conforms(rt: RecordType, data: bytes) -> bool:
    """Whether every record of one file (``data``) decodes under its record type's schema, strictly (a string
    is not a number): the harness's record formats are the definition of a field's type."""
    try:
        if rt.layout == "jsonl" and isinstance(rt.schema, type) and issubclass(rt.schema, msgspec.Struct):
            for line in data.splitlines():
                if line.strip():
                    msgspec.json.decode(line, type=rt.schema)
        elif isinstance(rt.schema, type) and issubclass(rt.schema, BaseModel):
            rt.schema.model_validate_json(data, strict=True)
        else:
            return False
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return False
    return True
