"""Decoded JSON number lists to float64 arrays, in as few C passes as possible.

A bench line's per-request arrays arrive as Python lists of Python floats (msgspec decodes them typed,
``list[float]`` / ``list[list[float]]``). Turning them into numpy arrays is the auditor's largest cost
beyond the decode itself: ``np.fromiter`` converts element by element through the iterator protocol
(~15 ns a value; a rep's million inter-token gaps were ~45 ms of a ~110 ms re-derivation). msgspec's
MessagePack encoder writes every Python float as one fixed-size record (the byte ``0xcb`` and the
big-endian IEEE double, 9 bytes) in a tight C loop (~4 ns a value), and numpy reads that buffer back
as a strided record array in one more pass. The bytes are the value's own bits, so the array is
bit-identical to ``np.fromiter``'s.

Nothing is taken on trust: the encoded buffer is accepted only when its length is exactly the array
header plus 9 bytes per value and every record starts with the float64 tag -- since MessagePack
records are self-delimiting, that proves every value was encoded as a float64, in order. Anything else
(an int, a bool, a foreign object: impossible after a typed decode, but checked) falls back to
``np.fromiter`` on the same values, which raises what it always raised.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence

import msgspec
import numpy as np

_PACK = msgspec.msgpack.Encoder()
_FLOAT64_TAG = 0xCB
_FLOAT64_RECORD = np.dtype([("tag", "u1"), ("value", ">f8")])
_RECORD_BYTES = _FLOAT64_RECORD.itemsize

FLATTEN_CHUNK = 4096
"""Requests flattened per step: their gaps (~120k values, ~1 MB of pointers and ~1 MB encoded) stay in
cache between the concatenation, the encoding and the read-back, and the transient memory stays small
next to the line instead of holding a second copy of a rep's gaps."""


def _array_header_bytes(n: int) -> int:
    """Size of a MessagePack array header for ``n`` items (fixarray, array 16, array 32)."""
    if n < 16:
        return 1
    return 3 if n < 1 << 16 else 5


def _packed_floats(values: Sequence[float]) -> np.ndarray | None:
    """The float64 records of ``values`` encoded as MessagePack (a view into the encoded bytes), or None
    when the encoding is not exactly one float64 record per value."""
    try:
        packed = _PACK.encode(values)
    except (TypeError, OverflowError):  # not a float (an integer beyond 64 bits, a foreign object)
        return None
    n = len(values)
    head = _array_header_bytes(n)
    if len(packed) != head + _RECORD_BYTES * n:
        return None
    records = np.frombuffer(packed, dtype=_FLOAT64_RECORD, offset=head)
    if n and not bool((records["tag"] == _FLOAT64_TAG).all()):
        return None
    return records


def float_array(values: Sequence[float]) -> np.ndarray:
    """``np.fromiter(values, dtype=float, count=len(values))``, bit for bit, in two C passes."""
    records = _packed_floats(values) if values and type(values[0]) is float else None
    if records is None:  # integers (input lengths) or the empty list: numpy's own conversion
        return np.fromiter(values, dtype=float, count=len(values))
    return records["value"].astype(np.float64)


def flat_float_array(lists: Sequence[Sequence[float]], total: int) -> np.ndarray:
    """The values of ``lists`` concatenated in order (``total`` of them, the sum of their lengths) as one
    float64 array: ``np.fromiter(itertools.chain.from_iterable(lists), float, total)``, bit for bit."""
    out = np.empty(total, dtype=np.float64)
    filled = 0
    for start in range(0, len(lists), FLATTEN_CHUNK):
        part = lists[start:start + FLATTEN_CHUNK]
        flat: list[float] = functools.reduce(operator.iadd, part, [])  # one C memcpy per list
        end = filled + len(flat)
        if end > total:
            raise ValueError(f"the lists hold more than the {total} values stated")
        records = _packed_floats(flat)
        if records is None:
            out[filled:end] = np.fromiter(itertools.chain.from_iterable(part), dtype=float, count=len(flat))
        else:
            out[filled:end] = records["value"]
        filled = end
    if filled != total:
        raise ValueError(f"the lists hold {filled} values, not the {total} stated")
    return out
