"""The launch arguments vLLM writes in its own log: one parser for the harness and the auditor.

vLLM logs ``non-default args: {...}`` once per start: the arguments it was launched with that differ
from its defaults, as a Python dict's repr. The harness reads it to build ``server_info`` (what the
engine applied, ``harness/vllm_target.py``) and the auditor reads it as one more copy of a leg's
conditions (``auditor/serverlog.py``): both read the same bytes with this parser, so they cannot
disagree on what a line says.

The text is a server's output, so it is parsed as hostile: never evaluated (``ast.literal_eval`` on
each value), at most ``MAX_ARGS_CHARS`` characters and ``MAX_DEPTH`` levels deep (an ``ast.parse``
of a megabyte of nested brackets costs memory and stack far beyond the line), and a value that is not
a literal (an enum's repr such as ``<OptimizationLevel.O0: 0>``) is left out, never guessed.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from perfwarden.formats.strict_json import check_depth

MAX_ARGS_CHARS = 256 * 1024
"""Longest ``{...}`` text parsed (a real one is a few KB)."""
NON_DEFAULT_ARGS = re.compile(r"\bnon-default args: (\{.*\})\s*$")
"""A log line that states the arguments; group 1 is the dict's text."""
_ENUM_REPR = re.compile(r"<[A-Za-z_][\w.]*: [^<>]*>")
"""An enum's repr inside a logged dict: not Python syntax, so replaced by a name ``literal_eval``
refuses before the dict is parsed."""
SPECULATIVE_FIELDS = {"method": "speculative_method", "num_speculative_tokens": "num_speculative_tokens",
                      "prompt_lookup_max": "prompt_lookup_max", "prompt_lookup_min": "prompt_lookup_min"}
"""``--speculative-config``'s fields under the names ``server_info`` gives them."""
_PARSE_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)


class VllmArgsError(ValueError):
    """The text is not a dict literal this parser reads (too long, too deep, or not a dict)."""


def parse_args(text: str) -> dict[str, Any]:
    """The literal entries of a ``non-default args`` dict text (``VllmArgsError`` when it is none)."""
    if len(text) > MAX_ARGS_CHARS:
        raise VllmArgsError(f"the arguments are {len(text):,} characters, over the {MAX_ARGS_CHARS:,} bound")
    try:
        check_depth(text, what="vLLM non-default args")
        node = ast.parse(_ENUM_REPR.sub("_not_a_literal_", text), mode="eval").body
    except _PARSE_ERRORS as exc:
        raise VllmArgsError(f"the arguments do not parse ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not isinstance(node, ast.Dict):
        raise VllmArgsError("the arguments are not a dict")
    out: dict[str, Any] = {}
    for key, value in zip(node.keys, node.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        try:
            out[key.value] = ast.literal_eval(value)
        except _PARSE_ERRORS:
            continue
    return out


def speculative_fields(spec: Any) -> dict[str, Any]:
    """The fields of a logged ``speculative_config`` under ``server_info``'s names (empty when it is not
    a dict)."""
    if not isinstance(spec, dict):
        return {}
    return {SPECULATIVE_FIELDS[k]: v for k, v in spec.items() if k in SPECULATIVE_FIELDS}
