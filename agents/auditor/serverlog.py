"""What a server log says about the conditions: the configuration the server applied, and the
mechanisms it reports engaged. One more copy of a leg's conditions, held against the others.

Formats read (any other line is ignored; a line that has the shape but does not parse is reported so
the verdict can say that copy was not checked -- never taken as agreement):

- perfwarden's embedded server (``harness/embedded_server.py``): ``... effective_config {json}``,
  logged once per start, and ``... ENGAGED <knob>[=<value>] ...`` when a mechanism engages
  (``ENGAGED prompt_lookup``, ``ENGAGED response_cache``, ``ENGAGED quantization=int8_dynamic``,
  ``ENGAGED torch_compile``, ``ENGAGED op_override op='rmsnorm'``);
- sglang: ``server_args=ServerArgs(key=value, ...)``, the launch line with each argument's Python
  repr (values that are not literals, e.g. enum reprs, are skipped).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from perfwarden.agents.auditor.rederive import flatten_json
from perfwarden.harness.json_limits import check_depth, loads_bounded

CopySource = Literal["effective_config", "server_args", "engaged"]

MAX_LINE_CHARS = 256 * 1024
"""Longest log line parsed as a configuration (a real ServerArgs line is a few KB)."""
PRESENT = "<engaged>"
"""Value of a knob the log says engaged without saying its value (an op override): it only has to exist."""

_EFFECTIVE = re.compile(r"\beffective_config (\{.*)$")
_SERVER_ARGS = re.compile(r"\bserver_args=(ServerArgs\(.*\))\s*$")
_ENGAGED = re.compile(r"\bENGAGED (\w+)(?:=(\S+))?(?:\s+op=['\"]([^'\"]+)['\"])?")
_ENGAGED_KNOB = {"op_override": "op_overrides"}


@dataclass(frozen=True)
class LogCopy:
    """The conditions one log line states."""

    line: int
    """1-based line in server.log."""
    source: CopySource
    values: dict[str, Any] = field(default_factory=dict)
    """Flattened knob -> value (``PRESENT`` when only engagement is known)."""


def parse_server_log(lines: list[str]) -> tuple[list[LogCopy], list[str]]:
    """Every configuration/engagement line of a log, and a note per line that looked like one but
    could not be read."""
    copies: list[LogCopy] = []
    problems: list[str] = []
    for i, text in enumerate(lines, 1):
        if "effective_config" not in text and "ServerArgs(" not in text and "ENGAGED" not in text:
            continue
        if len(text) > MAX_LINE_CHARS:
            problems.append(f"line {i} is {len(text)} characters, longer than {MAX_LINE_CHARS}")
            continue
        try:
            copy = _parse_line(i, text)
        except (ValueError, SyntaxError, RecursionError, MemoryError) as exc:
            problems.append(f"line {i} does not parse ({type(exc).__name__}: {str(exc)[:80]})")
            continue
        if copy is not None:
            copies.append(copy)
    return copies, problems


def _parse_line(i: int, text: str) -> LogCopy | None:
    m = _EFFECTIVE.search(text)
    if m:
        obj = loads_bounded(m.group(1), what="effective_config")
        if not isinstance(obj, dict):
            raise ValueError("effective_config is not a JSON object")
        return LogCopy(i, "effective_config", flatten_json(obj))
    m = _SERVER_ARGS.search(text)
    if m:
        return LogCopy(i, "server_args", flatten_json(_server_args(m.group(1))))
    m = _ENGAGED.search(text)
    if m:
        knob, value, op = m.group(1), m.group(2), m.group(3)
        knob = _ENGAGED_KNOB.get(knob, knob)
        if op:
            return LogCopy(i, "engaged", {f"{knob}.{op}": PRESENT})
        return LogCopy(i, "engaged", {knob: _scalar(value) if value is not None else True})
    return None


def _server_args(expr: str) -> dict[str, Any]:
    """Keyword arguments of ``ServerArgs(...)`` whose values are Python literals."""
    check_depth(expr.replace("(", "[").replace(")", "]"), what="ServerArgs")
    node = ast.parse(expr, mode="eval").body
    if not isinstance(node, ast.Call):
        raise ValueError("not a call")
    out: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            continue  # an enum or object repr: not a literal, nothing to compare
    return out


def _scalar(text: str) -> Any:
    """``int8_dynamic`` -> str, ``4`` -> int, ``true`` -> bool (how ENGAGED lines write values)."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip("'\"")

