"""The fast float-list conversions are numpy's own conversion, bit for bit, and fall back to it."""

from __future__ import annotations

import itertools
import math

import msgspec
import numpy as np
import pytest

from perfwarden.auditor import float_columns
from perfwarden.auditor.float_columns import flat_float_array, float_array

# Array header sizes change at 16 and 65536 items; the encoded length check must hold on both sides.
SIZES = (0, 1, 15, 16, 17, 65535, 65536, 70000)


def _bits(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr, dtype=np.float64).tobytes()


def _awkward_floats(n: int, seed: int = 0) -> list[float]:
    """Values whose bits a sloppy conversion would change: signed zeros, subnormals, extremes, NaN."""
    rng = np.random.default_rng(seed)
    values = rng.lognormal(-3.0, 2.0, n).tolist()
    specials = [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.5, math.nan, math.inf,
                0.1, 1 / 3]
    for i, special in zip(range(0, n, max(1, n // len(specials))), specials):
        values[i] = special
    return values


@pytest.mark.parametrize("n", SIZES)
def test_float_array_is_fromiter_bit_for_bit(n: int) -> None:
    values = _awkward_floats(n)
    got = float_array(values)
    assert got.dtype == np.float64 and got.shape == (n,)
    assert _bits(got) == _bits(np.fromiter(values, dtype=float, count=n))


def test_float_array_of_decoded_json_equals_fromiter() -> None:
    """What the auditor hands it: a typed decode of written floats (integers in the text become floats)."""
    text = b"[0.1,2,1e-300,-0.0,12345678901234567,0.30000000000000004," + b",".join([b"7.5"] * 40) + b"]"
    values = msgspec.json.decode(text, type=list[float])
    assert _bits(float_array(values)) == _bits(np.fromiter(values, dtype=float, count=len(values)))


@pytest.mark.parametrize("values", [
    [1, 2, 3],  # integers (input lengths): numpy's conversion
    [0.5, 2, 3.5],  # a float first, then an integer: the encoded records are not all float64
    [0.5, True, 3.5],  # a bool encodes as one byte
    [0.5, 10**30],  # an integer beyond 64 bits: the encoder refuses, numpy converts it
    [0.5, None],  # None and a numeric string: numpy's conversion, whatever it makes of them (NaN, 1.0)
    [0.5, "1.0"],
])
def test_float_array_falls_back_to_fromiter(values: list) -> None:
    assert _bits(float_array(values)) == _bits(np.fromiter(values, dtype=float, count=len(values)))


def test_a_value_numpy_cannot_convert_raises_what_numpy_raises() -> None:
    """An integer beyond the float range: the auditor's reader turns numpy's OverflowError into a corrupt rep."""
    with pytest.raises(OverflowError):
        float_array([0.5, 10**400])


def test_the_fallback_is_taken_when_the_encoding_is_not_all_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mixed values are converted by numpy, never read from a misaligned buffer."""
    calls = []
    real = np.fromiter

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(float_columns.np, "fromiter", spy)
    assert float_array([0.25, 0.5]).tolist() == [0.25, 0.5] and not calls
    assert float_array([0.25, 7, 0.5]).tolist() == [0.25, 7.0, 0.5] and calls


def _ragged(n_lists: int, seed: int = 1) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, n_lists)
    lengths[::7] = 0  # requests without gaps
    lengths[3::97] = 70000 if n_lists > 3 else 0  # one list with a wide header
    flat = iter(_awkward_floats(int(lengths.sum()), seed))
    return [[next(flat) for _ in range(k)] for k in lengths]


@pytest.mark.parametrize("n_lists", [0, 1, 5, float_columns.FLATTEN_CHUNK, float_columns.FLATTEN_CHUNK * 2 + 3])
def test_flat_float_array_is_chained_fromiter_bit_for_bit(n_lists: int) -> None:
    lists = _ragged(n_lists)
    total = sum(map(len, lists))
    want = np.fromiter(itertools.chain.from_iterable(lists), dtype=float, count=total)
    assert _bits(flat_float_array(lists, total)) == _bits(want)
    assert all(isinstance(v, float) for inner in lists for v in inner)  # the inputs are left as they were


def test_flat_float_array_falls_back_per_chunk_and_keeps_order() -> None:
    chunk = float_columns.FLATTEN_CHUNK
    lists: list[list] = [[0.5 * i, 1.0] for i in range(chunk * 2)]
    lists[chunk + 1] = [3, 0.25]  # an integer in the second chunk only
    total = sum(map(len, lists))
    want = np.fromiter(itertools.chain.from_iterable(lists), dtype=float, count=total)
    assert _bits(flat_float_array(lists, total)) == _bits(want)


def test_flat_float_array_refuses_a_wrong_total() -> None:
    with pytest.raises(ValueError, match="hold 3 values, not the 4"):
        flat_float_array([[0.5], [1.0, 2.0]], 4)
    with pytest.raises(ValueError, match="more than the 2"):
        flat_float_array([[0.5], [1.0, 2.0]], 2)
