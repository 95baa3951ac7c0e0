"""The one strict JSON decoder: every file perfwarden reads is decoded here.

A run directory, a claim, a checkpoint's settings or a LoadGen log are handed over by someone else, and
two readers that disagree on one byte string see two different records. So every JSON text perfwarden
reads obeys one set of rules, and a text that breaks one is refused (``StrictJsonError``, a
``ValueError``) with the rule named:

- UTF-8 only (RFC 8259 §8.1), and no byte-order mark: the harness never writes one, RFC 8259 forbids
  adding one, and decoders disagree (Python's ``json.loads`` of bytes skips it, msgspec refuses it);
- no ``NaN`` or ``Infinity``, and every number finite as a double (``1e400`` is refused, not infinity);
- every integer inside the 64-bit range ``[INT_MIN, INT_MAX]``: signed for the harness's records,
  unsigned for LoadGen's seeds, and exactly what orjson (the harness's writer) can write;
- no key twice in one object, at any depth (whichever value one reader keeps, another sees the other);
- at most ``MAX_DEPTH`` levels of arrays and objects, measured before anything parses (Python's and
  msgspec's own limit is the interpreter's recursion limit, which moved between Python versions).

Memory follows the text, not more: the depth and key checks scan the bytes in pieces of
``SCAN_CHUNK`` (constant extra memory), the UTF-8 check decodes in pieces, and nothing builds a second
decoded copy of a value. Two entry points: :func:`loads` (a whole JSON document into Python values) and
:func:`decode_typed` (one line into a msgspec schema, the hot path of the JSONL readers).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Hashable
from functools import lru_cache
from typing import Any, TypeVar, cast

import msgspec
import numpy as np

T = TypeVar("T")

MAX_DEPTH = 64
"""Deepest nesting accepted (arrays and objects). Real evidence nests 3-6 levels (a claim, a
server_info with ``internal_states``); 64 leaves room for any honest producer."""
INT_MIN = -(1 << 63)
"""Smallest integer accepted (signed 64-bit)."""
INT_MAX = (1 << 64) - 1
"""Largest integer accepted (unsigned 64-bit: LoadGen logs its seeds as ``uint64``)."""
UTF8_BOM = b"\xef\xbb\xbf"
SCAN_CHUNK = 1 << 18
"""Bytes scanned at a time by the structure scan and the UTF-8 check (their extra memory is a few
times this, whatever the text's size)."""
NAME_REPEAT_BYTES = 1 << 20
"""Largest text parsed a second time only to name the key it repeats (a larger one is refused without
the name: the refusal is the same, and it never costs a Python object per value)."""


class StrictJsonError(ValueError):
    """A text that is not strict JSON (module docstring): the message names the rule it breaks."""


class JsonTooDeep(StrictJsonError):
    """The JSON text nests deeper than the limit: refused before parsing."""


class RepeatedKey(StrictJsonError):
    """A JSON object names one key twice: two readers may see two values."""

    def __init__(self, key: str | None, what: str | None = None):
        named = f"key {key!r} is" if key is not None else "a key is"
        super().__init__(_prefixed(what, f"{named} repeated in one object (whichever value a reader keeps, another "
                                         "reader sees the other)"))
        self.key = key


def _prefixed(what: str | None, message: str) -> str:
    """``message`` about the text called ``what`` (a typed line's reader names the line itself)."""
    return f"{what}: {message}" if what else message


# ------------------------------------------------------------------------------ the byte-level rules


def refuse_bom(data: bytes | str, what: str | None = None) -> None:
    """Raise when ``data`` starts with a byte-order mark (module docstring: refused everywhere)."""
    if (data[:3] == UTF8_BOM) if isinstance(data, bytes) else data[:1] == "\ufeff":
        raise StrictJsonError(_prefixed(what, "starts with a UTF-8 byte-order mark: JSON here is UTF-8 without one"))


def check_utf8(data: bytes, what: str | None = None) -> None:
    """Raise unless ``data`` is valid UTF-8, decoding at most ``SCAN_CHUNK`` bytes at a time (a whole
    decode of a 64 MiB line would hold up to four times its size as a string)."""
    if data.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for start in range(0, len(data), SCAN_CHUNK):
            decoder.decode(view[start:start + SCAN_CHUNK], final=start + SCAN_CHUNK >= len(data))
    except UnicodeDecodeError as exc:
        raise StrictJsonError(_prefixed(what, f"invalid UTF-8 at byte {start + exc.start} (JSON text must be "
                                              "UTF-8)")) from None


def _odd_tail(piece: bytes, odd_run: int) -> int:
    """Parity of the run of backslashes that ends ``piece`` (continuing one of parity ``odd_run``)."""
    tail = len(piece) - len(piece.rstrip(b"\\"))
    return (odd_run + tail) & 1 if tail == len(piece) else tail & 1


def _unescaped_quotes(a: np.ndarray, odd_run: int) -> np.ndarray:
    """Mask of the quote bytes of ``a`` that open or close a string: a quote after an odd run of
    backslashes is escaped (``odd_run``: the parity of the run the previous piece ended with)."""
    quotes: np.ndarray = a == 34
    edges = np.diff((a == 92).view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    lengths = ends - starts
    if odd_run:
        if starts.size and starts[0] == 0:
            lengths[0] += 1
        else:
            quotes[0] = False
    quotes[ends[(ends < len(a)) & (lengths & 1 == 1)]] = False
    return quotes


def _bracket_steps(a: np.ndarray) -> np.ndarray:
    """+1 at ``[``/``{``, -1 at ``]``/``}``, 0 elsewhere."""
    steps: np.ndarray = ((a == 91).view(np.int8) + (a == 123).view(np.int8) - (a == 93).view(np.int8)
                         - (a == 125).view(np.int8))
    return steps


class _Scan:
    """The running state of :func:`scan_structure` across pieces."""

    def __init__(self) -> None:
        self.depth = 0
        self.deepest = 0
        self.colons = 0
        self.in_string = 0
        self.odd_run = 0

    def brackets(self, steps: np.ndarray) -> None:
        running = np.cumsum(steps, dtype=np.int32)
        running += self.depth
        self.deepest = max(self.deepest, int(running.max()))
        self.depth = int(running[-1])

    def plain(self, piece: bytes) -> None:
        """A piece without a quote: the string state does not change inside it."""
        self.odd_run = _odd_tail(piece, self.odd_run) if b"\\" in piece else 0
        if self.in_string:
            return
        self.colons += piece.count(b":")
        if any(c in piece for c in (b"[", b"{", b"]", b"}")):
            self.brackets(_bracket_steps(np.frombuffer(piece, dtype=np.uint8)))

    def quote_mask(self, piece: bytes, a: np.ndarray) -> np.ndarray:
        """The piece's string-delimiting quotes; carries the trailing backslash run to the next piece."""
        if b"\\" in piece:
            quotes = _unescaped_quotes(a, self.odd_run)
            self.odd_run = _odd_tail(piece, self.odd_run)
        else:
            quotes = a == 34
            if self.odd_run:
                quotes[0] = False
            self.odd_run = 0
        return quotes

    def outside_strings(self, piece: bytes, a: np.ndarray) -> np.ndarray:
        """Mask of the piece's bytes that lie outside every string (a delimiting quote counts as outside
        when it opens, inside when it closes: neither is a bracket or a colon)."""
        quotes = self.quote_mask(piece, a)
        seen = np.cumsum(quotes, dtype=np.int32)
        outside: np.ndarray = ((seen - quotes + self.in_string) & 1) == 0
        self.in_string = int((seen[-1] + self.in_string) & 1)
        return outside

    def quoted(self, piece: bytes) -> None:
        a = np.frombuffer(piece, dtype=np.uint8)
        outside = self.outside_strings(piece, a)
        if b":" in piece:
            self.colons += int(np.count_nonzero((a == 58) & outside))
        if any(c in piece for c in (b"[", b"{", b"]", b"}")):
            self.brackets(_bracket_steps(a) * outside)


def scan_structure(data: bytes | str) -> tuple[int, int]:
    """(deepest nesting, colons outside strings) of a JSON text, brackets and colons inside strings
    ignored. Linear, no recursion, and constant extra memory: the text is scanned in pieces of
    ``SCAN_CHUNK`` bytes, and a piece with no quote (the inside of a long string, a run of numbers)
    is passed over with ``bytes`` methods alone. In valid JSON every colon outside a string separates
    one key from its value, so the count is the number of keys the text writes."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    state = _Scan()
    for start in range(0, len(raw), SCAN_CHUNK):
        piece = raw[start:start + SCAN_CHUNK]
        if b'"' in piece:
            state.quoted(piece)
        else:
            state.plain(piece)
    return max(state.deepest, 0), state.colons


def json_depth(data: bytes | str) -> int:
    """Deepest nesting of arrays/objects in ``data`` (0 for a scalar), brackets inside strings ignored."""
    return scan_structure(data)[0]


def check_depth(data: bytes | str, limit: int = MAX_DEPTH, what: str | None = "JSON") -> None:
    """Raise :class:`JsonTooDeep` when ``data`` nests deeper than ``limit``. A text with no more
    opening brackets than the limit cannot nest deeper, and is not scanned."""
    opens = data.count(b"[") + data.count(b"{") if isinstance(data, bytes) else data.count("[") + data.count("{")
    if opens <= limit:
        return
    depth = json_depth(data)
    if depth > limit:
        raise JsonTooDeep(_prefixed(what, f"nests deeper than the limit of {limit} levels ({depth} levels deep)"))


# ------------------------------------------------------------------------------ decoded values


def _walk(obj: Any, what: str | None, ints: bool = True) -> int:
    """Keys of every object in a decoded value (a repeated key was collapsed by the decoder, so it is
    counted once); with ``ints``, raises when an integer is outside ``[INT_MIN, INT_MAX]``. Iterative."""
    keys = 0
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            keys += len(value)
            items: Any = value.values()
        elif isinstance(value, list):
            items = value
        else:
            items = (value,)
        for item in items:
            kind = type(item)
            if ints and kind is int and not INT_MIN <= item <= INT_MAX:
                raise StrictJsonError(_prefixed(what, f"the integer {str(item)[:24]}… is outside the 64-bit "
                                                      f"range [{INT_MIN}, {INT_MAX}]"))
            if kind is dict or kind is list:
                stack.append(item)
    return keys


def _raise_on_repeat(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        raise RepeatedKey(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return out


def _name_repeat(data: bytes | str) -> str | None:
    """The key a text repeats, parsed a second time when it is small (else None: unnamed)."""
    if len(data) > NAME_REPEAT_BYTES:
        return None
    try:
        json.loads(data, object_pairs_hook=_raise_on_repeat)
    except RepeatedKey as exc:
        return exc.key
    except (ValueError, RecursionError):
        return None
    return None


def refuse_repeats(data: bytes | str, keys: int, what: str | None = None) -> None:
    """Raise :class:`RepeatedKey` when the text writes more keys than its decoded objects hold
    (``keys``, from :func:`_walk`): the decoder kept one value of a repeated key. A text with no more
    colons than keys needs no scan (every key writes one colon)."""
    colons = data.count(b":") if isinstance(data, bytes) else data.count(":")
    if colons > keys and scan_structure(data)[1] > keys:
        raise RepeatedKey(_name_repeat(data), what)


def loads(data: bytes | str, what: str = "JSON", limit: int = MAX_DEPTH) -> Any:
    """Decode one whole JSON document under every rule of the module (``StrictJsonError`` otherwise).
    msgspec refuses ``NaN``/``Infinity``, numbers beyond a double, invalid UTF-8 and lone surrogates in
    any string, and trailing bytes; the byte-order mark, the depth, the integers' range and repeated keys
    are checked here."""
    refuse_bom(data, what)
    check_depth(data, limit, what)
    try:
        obj = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise StrictJsonError(f"{what} is not valid JSON: {describe(exc, data)}") from None
    refuse_repeats(data, _walk(obj, what), what)
    return obj


_NON_FINITE = ("NaN", "Infinity")


def describe(exc: BaseException, data: bytes | str = b"") -> str:
    """One line saying why a decode failed, naming the rule where the decoder's words do not."""
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {exc.start} (JSON text must be UTF-8)"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    text = str(exc)
    if text.startswith("Number out of range"):
        return f"{text} (a number beyond a double is non-finite)"
    if text.startswith("JSON is malformed") and any(
            (word.encode() if isinstance(data, bytes) else word) in data for word in _NON_FINITE):  # type: ignore[operator]
        return f"{text} (NaN and Infinity are non-finite: not JSON numbers)"
    return text


# ------------------------------------------------------------------------------ typed lines


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_WS = (b" ", b"\t", b"\r", b"\n")
SMALL_VALUE = 1 << 16
"""Top-level values up to this size are copied to look for nested objects; a larger one is copied only
when the line has braces the small ones do not account for."""


def repeated_key(line: bytes) -> str | None:
    """The first repeated key of any object in the JSON object ``line``, ``""`` when one is repeated but
    the line is too large to name it, or None (also when ``line`` is not JSON: the decode reports that).

    Fast without a second full parse: the top-level object is split into raw values (msgspec skips
    values without building them), and its bytes are accounted for. A JSON object of n distinct keys
    with no whitespace outside strings is exactly ``2n + 1`` bytes of braces, commas and colons plus its
    key tokens and values; a repeated key leaves a whole pair unaccounted, and so does an escaped key
    (an escape is longer than what it encodes). Only when the sum does not close, or a value holds an
    object, is the exact check run (:func:`refuse_repeats`, on that part only)."""
    try:
        top = _TOP.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None
    accounted = sum(len(key.encode("utf-8", "surrogatepass")) + 2 + len(raw) for key, raw in top.items())
    structure = 2 * len(top) + 1 if top else 2
    if len(line) - accounted != structure and len(line) - accounted - _blanks_outside(line, top) != structure:
        key = _top_level_repeat(line, len(top))
        if key is not None:
            return key
    for data in _values_with_objects(line, top):
        try:
            # The value's integers are judged by whoever reads it (a raw field is decoded with loads).
            refuse_repeats(data, _walk(msgspec.json.decode(data), None, ints=False))
        except RepeatedKey as exc:
            return exc.key or ""
        except (msgspec.DecodeError, RecursionError):
            return None
    return None


def _top_level_repeat(line: bytes, keys: int) -> str | None:
    """A repeated top-level key, found by the colons at depth 1 (an escaped key's line gets here too,
    and is cleared)."""
    state = _ScanTop()
    state.run(line)
    if state.top_colons <= keys:
        return None
    return _name_repeat(line) or ""


class _ScanTop(_Scan):
    """The structure scan, counting the colons of the outermost object only."""

    def __init__(self) -> None:
        super().__init__()
        self.top_colons = 0

    def run(self, raw: bytes) -> None:
        for start in range(0, len(raw), SCAN_CHUNK):
            piece = raw[start:start + SCAN_CHUNK]
            a = np.frombuffer(piece, dtype=np.uint8)
            outside = self.outside_strings(piece, a)
            running = np.cumsum(_bracket_steps(a) * outside, dtype=np.int32) + self.depth
            self.depth = int(running[-1])
            # A colon's depth is the running depth at it (no bracket moves it): 1 inside the outer object.
            self.top_colons += int(np.count_nonzero((a == 58) & outside & (running == 1)))


def _blanks_outside(line: bytes, top: dict[str, msgspec.Raw]) -> int:
    """JSON whitespace of ``line`` that lies outside its top-level keys and values."""
    inside = sum(key.count(" ") for key in top)
    for raw in top.values():
        data = bytes(raw)
        if data[:1] in (b'"', b"[", b"{"):
            inside += sum(data.count(c) for c in _WS)
    return sum(line.count(c) for c in _WS) - inside


def _values_with_objects(line: bytes, top: dict[str, msgspec.Raw]) -> list[bytes]:
    """The top-level values that may hold an object: arrays or objects with a ``{`` in them. The big
    values are copied one at a time, and only when the line has braces the small ones do not hold."""
    small = [bytes(raw) for raw in top.values() if len(raw) <= SMALL_VALUE]
    out = [data for data in small if data[:1] in (b"{", b"[") and b"{" in data]
    if line.count(b"{") - 1 > sum(data.count(b"{") for data in small):
        for raw in top.values():
            if len(raw) > SMALL_VALUE:
                data = bytes(raw)
                if data[:1] in (b"{", b"[") and b"{" in data:
                    out.append(data)
    return out


@lru_cache(maxsize=None)
def _int_fields(schema: Hashable) -> tuple[tuple[str, int], ...]:
    """(field, how deep its integers sit) of every field of a msgspec schema that may hold an integer:
    0 for ``int``, 1 for ``list[int]``, 2 for ``list[list[int]]`` (unions with other types included)."""
    out = []
    for field in msgspec.inspect.type_info(schema).fields:  # type: ignore[attr-defined]
        depth = _int_depth(field.type)
        if depth is not None:
            out.append((field.name, depth))
    return tuple(out)


def _int_depth(info: Any, depth: int = 0) -> int | None:
    inspect = msgspec.inspect
    if isinstance(info, inspect.IntType):
        return depth
    if isinstance(info, inspect.UnionType):
        found = [d for d in (_int_depth(t, depth) for t in info.types) if d is not None]
        return max(found) if found else None
    if isinstance(info, (inspect.ListType, inspect.TupleType, inspect.VarTupleType)):
        item = getattr(info, "item_type", None)
        return _int_depth(item, depth + 1) if item is not None else None
    return None


def _out_of_range(values: list[Any]) -> Any:
    """The first integer of ``values`` outside the range, or None (``min``/``max`` run in C; a list
    mixing strings and integers, such as prompt ids, is filtered first)."""
    if values and type(values[0]) is int and _within_int64(values):
        return None
    ints = values if values and type(values[0]) is int else [v for v in values if type(v) is int]
    try:
        low, high = (min(ints), max(ints)) if ints else (0, 0)
    except TypeError:
        ints = [v for v in values if type(v) is int]
        low, high = (min(ints), max(ints)) if ints else (0, 0)
    if low < INT_MIN or high > INT_MAX:
        return next(v for v in ints if not INT_MIN <= v <= INT_MAX)
    return None


def _within_int64(values: list[Any]) -> bool:
    """Whether numpy takes ``values`` as signed 64-bit integers: it raises for any integer outside that
    range, whatever else the list holds, so success proves every integer in it is inside ``[INT_MIN,
    INT_MAX]``. One C pass of about two-thirds the time of a ``min`` and a ``max`` over a token-length
    list; anything numpy refuses (an integer past 2**63, None, a word) is judged by the exact path."""
    try:
        np.array(values, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        return False
    return True


def check_struct_ints(record: Any, what: str | None = None) -> None:
    """Raise when an integer field of a decoded msgspec record is outside ``[INT_MIN, INT_MAX]`` (msgspec
    bounds only fit a signed 64-bit range, and decodes a longer integer literal as a Python int)."""
    for name, depth in _int_fields(cast(Hashable, type(record))):
        value = getattr(record, name)
        if value is None:
            continue
        if depth == 0:
            bad = value if type(value) is int and not INT_MIN <= value <= INT_MAX else None
        elif depth == 1:
            bad = _out_of_range(value) if isinstance(value, list) else None
        else:
            bad = next((b for inner in value if isinstance(inner, list)
                        for b in (_out_of_range(inner),) if b is not None), None)
        if bad is not None:
            raise StrictJsonError(_prefixed(what, f"{name!r} holds the integer {str(bad)[:24]}…, outside the 64-bit "
                                              f"range [{INT_MIN}, {INT_MAX}]"))


def decode_typed(decoder: "msgspec.json.Decoder[T]", line: bytes, *, check_keys: bool = True,
                 depth: bool = False, what: str | None = None) -> T:
    """Decode one JSON line into ``decoder``'s msgspec schema under every rule of the module.

    msgspec validates the strings it decodes but skips an unknown field's bytes unchecked, so a
    non-ASCII line is checked as UTF-8 whole (in pieces). ``check_keys``: refuse a repeated key
    (:func:`repeated_key`); off only for a line whose bytes a verified seal proves the harness's own
    writer produced (it cannot write one). ``depth``: measure the nesting first (a schema without raw
    JSON fields bounds its own). Raises ``StrictJsonError``, or msgspec's ``ValidationError`` /
    ``DecodeError`` when the line does not fit the schema (callers tell a missing field from those)."""
    refuse_bom(line, what)
    check_utf8(line, what)
    if depth:
        check_depth(line, what=what)
    record = decoder.decode(line)
    check_struct_ints(record, what)
    if check_keys:
        key = repeated_key(line)
        if key is not None:
            raise RepeatedKey(key or None, what)
    return record
