"""An explicit bound on JSON nesting, the same on every Python version.

Python's own JSON parser stops deep nesting only through the interpreter's recursion limit, and that
moved: 3.11 refuses a 3,000-deep array, 3.12.3+ and 3.13 parse it (their C recursion limit is far
higher), and msgspec follows the same limit. A reader that relies on it accepts hostile input on one
version and rejects it on another, and anything that later walks the parsed value recursively (a
flatten, a diff) can still blow the stack. So every JSON reader of the auditor measures the nesting
first, in constant stack and linear time, and refuses anything deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

MAX_DEPTH = 64
"""Deepest nesting accepted (arrays and objects). Real evidence nests 3-6 levels (a claim, a
server_info with ``internal_states``); 64 leaves room for any honest producer."""

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_STEP = np.zeros(256, dtype=np.int32)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


class JsonTooDeep(ValueError):
    """The JSON text nests deeper than the limit: corrupt evidence, refused before parsing."""


def json_depth(data: bytes | str) -> int:
    """Deepest nesting of arrays/objects in ``data`` (0 for a scalar), brackets inside strings
    ignored. Linear in the size, no recursion: strings are blanked by one regex pass, then the
    running bracket count is a cumulative sum."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if not raw:
        return 0
    stripped = _STRING.sub(b'""', raw)
    step = _STEP[np.frombuffer(stripped, dtype=np.uint8)]
    return max(int(np.cumsum(step, dtype=np.int64).max()), 0)


def check_depth(data: bytes | str, limit: int = MAX_DEPTH, what: str = "JSON") -> None:
    """Raise :class:`JsonTooDeep` when ``data`` nests deeper than ``limit``."""
    depth = json_depth(data)
    if depth > limit:
        raise JsonTooDeep(f"{what} nests {depth} levels deep, more than the limit of {limit}")


class RepeatedKey(ValueError):
    """A JSON object names one key twice: two readers may see two values (issue 17 item 1)."""

    def __init__(self, key: str):
        super().__init__(f"key {key!r} is repeated in one object (whichever value a reader keeps, another "
                         "reader sees the other)")
        self.key = key


def no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads`` that refuses a repeated key (every depth)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise RepeatedKey(key)
    return out


def loads_bounded(data: bytes | str, limit: int = MAX_DEPTH, what: str = "JSON", **kwargs: Any) -> Any:
    """``json.loads`` behind an explicit depth check (raises ``JsonTooDeep``, a ``ValueError``)."""
    check_depth(data, limit, what)
    return json.loads(data, **kwargs)
