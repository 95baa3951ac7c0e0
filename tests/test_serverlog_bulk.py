"""A batch with many chosen lines is read channel by channel, each hot pattern once over the batch's text
(``_LineScan._bulk``); a batch with few is read line by line (``_LineScan.line``). Both must leave the
same record for every log: the per-line reading is the reference, and a forger's ENGAGED line hidden among
millions of look-alikes must be found by either. Random mixtures of the line shapes the gates look for
(case variants, the letters case folding maps to ASCII, refusals, bounds reached within a batch) are read
both ways, in random pieces, and the records compared field by field."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfwarden.auditor import serverlog
from perfwarden.auditor.batch_lines import BatchLines, confined, holding_literal, line_starts, present_literals
from perfwarden.auditor.serverlog import ServerLog, _LineScan, scan_server_log

STAMP = "2026-11-22T02:28:42.626 INFO perfwarden.embedded: "
OPS = ("rmsnorm", "silu_and_mul", "op00000001", "Rmsnorm")

_op = st.one_of(st.sampled_from(OPS), st.from_regex(r"op[0-9]{1,3}", fullmatch=True),
                st.sampled_from(["rms\u0130norm", "\u212aernel", "op\u017f", "\u03a3igma"]))
_word = st.sampled_from(["ENGAGED", "engaged", "EnGaGeD", "ENGAGED:", "engaged =", "not engaged", "ENGA GED",
                        "DISENGAGED", "engaged_x"])
_shape = st.one_of(
    st.builds(lambda w, op, q: f"{STAMP}{w} op_override op={q}{op}{q} first call", _word, _op,
              st.sampled_from(["'", '"', ""])),
    st.builds(lambda w, op: f"{STAMP}override '{op}' {w}", _word, _op),
    st.builds(lambda w, v: f"{STAMP}{w} prompt_lookup={v}", _word, st.sampled_from(["true", "4", "x"])),
    st.builds(lambda w: f"{STAMP}{w} response_cache", _word),
    st.builds(lambda h: f"{STAMP}response cache {h} rid=1", st.sampled_from(["hit", "miss", "HIT", "hits"])),
    st.builds(lambda op, n: f"{STAMP}op_override final calls {{'{op}': {n}}}", _op, st.integers(0, 3)),
    st.builds(lambda n: f"{STAMP}prompt_lookup rid=r{n} verify_steps=2 drafted=4 accepted={n}", st.integers(0, 4)),
    st.builds(lambda n: f"{STAMP}effective_config {{\"max_num_seqs\": {n}}}", st.integers(0, 99)),
    st.just(f"{STAMP}effective_config {{broken"),
    st.just(f"{STAMP}server_args=ServerArgs(model_path='m', tp_size=1)"),
    st.just(f"{STAMP}Worker 3 died"),
    st.just("Traceback (most recent call last)"),
    st.builds(lambda n: f"{STAMP}kv_usage={n}", st.sampled_from(["0.5", "1.25", "2."])),
    st.builds(lambda n: f"{STAMP}request done rid={n} tokens=128", st.integers(0, 9)),
    st.builds(lambda op: f"{STAMP}{op} 0 calls", _op),
    st.text(alphabet="eEnNgGaAdD \u0130\u212a:=", max_size=20),
)


def _read(text: str, pieces: list[int], bulk_min: int, monkeypatch: pytest.MonkeyPatch) -> ServerLog:
    monkeypatch.setattr(_LineScan, "BULK_MIN", bulk_min)
    data = text.encode("utf-8")
    cuts = sorted({min(p, len(data)) for p in pieces})
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    return scan_server_log(chunks, "server.log", OPS, 4096)


def _same(bulk: ServerLog, reference: ServerLog) -> None:
    for f in dataclasses.fields(ServerLog):
        got, want = getattr(bulk, f.name), getattr(reference, f.name)
        if f.name == "acceptance_error":
            got, want = repr(got), repr(want)
        assert got == want, f.name


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_shape, min_size=1, max_size=120), pieces=st.lists(st.integers(0, 12000), max_size=4),
       bounds=st.tuples(st.integers(1, 6), st.integers(1, 4), st.integers(1, 5)))
def test_the_batch_reading_leaves_the_record_the_per_line_reading_does(
        lines: list[str], pieces: list[int], bounds: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    kinds, per_kind, copies = bounds  # small bounds, so each is reached inside one batch
    monkeypatch.setattr(serverlog, "MAX_SIGNAL_KINDS", kinds)
    monkeypatch.setattr(serverlog, "MAX_SIGNALS", per_kind)
    monkeypatch.setattr(serverlog, "MAX_COPIES", copies)
    text = "\n".join(lines) + "\n"
    _same(_read(text, pieces, 0, monkeypatch), _read(text, pieces, 10**9, monkeypatch))


def test_a_forged_engaged_line_among_a_flood_is_found_by_the_batch_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """The declared op's one ENGAGED line, in a different case, behind thousands of distinct ones."""
    flood = [f"{STAMP}ENGAGED op_override op='op{k:08d}' first call" for k in range(5000)]
    flood.insert(4321, f"{STAMP}engaged op_override op='RMSNORM' first call")
    text = "\n".join(flood) + "\n"
    bulk = _read(text, [], 0, monkeypatch)
    assert bulk.engaged["rmsnorm"] == 4322
    assert any("mechanism line(s) of kinds beyond" in note for note in bulk.notes)  # its kind came too late
    _same(bulk, _read(text, [], 10**9, monkeypatch))


@pytest.mark.parametrize("pattern", [r"a\Wb", r"^x", r"x$", r"(?<=a)b", r"[^a]b", r"[\s,]x", r"a\nb", r"a\Db"])
def test_a_pattern_that_could_match_across_lines_has_no_confined_form(pattern: str) -> None:
    assert confined(re.compile(pattern)) is None


@pytest.mark.parametrize("pattern", [r"\bengaged\s+op=(\w+)", r"\bab?c\s*:", r"\bx\b", r"res[^\n]*\bhit\b"])
@pytest.mark.parametrize("text", ["engaged  op=rms", "xengaged op=a", "ab c:", "ac:", "a x b", "zabc :",
                                  "res hit", "a\u2028b", "engaged\top=_"])
def test_a_confined_pattern_finds_on_joined_lines_what_it_finds_on_each(pattern: str, text: str) -> None:
    rx, narrow = re.compile(pattern), confined(re.compile(pattern))
    assert narrow is not None
    lines = [text, text.upper(), "x " + text, text + " x", ""]
    batch = BatchLines(lines, str.lower)
    found, matches = batch.first_matches(narrow, False)
    expect = [(n, m.group()) for n, m in ((n, rx.search(line)) for n, line in enumerate(lines)) if m]
    assert [(int(n), m.group()) for n, m in zip(found, matches)] == expect


def test_a_literal_is_ruled_out_only_when_it_is_absent() -> None:
    text = b"engaged op_override op='x'\nkv_usage=1"
    literals = [b"engaged", b"op=", b"not engaged", b"kv_usage=", b"x", b"q", b"usage=1\n", b"'x'"]
    assert present_literals(text, literals) == tuple(n for n in literals if n in text)


@pytest.mark.parametrize("op", ["rms\u0130norm", "op\u017f", "\u212aernel", "\u03a3igma\u03a3", "RMSNORM"])
def test_an_op_written_with_letters_case_folding_changes_is_told_as_the_line_writes_it(
        op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [f"{STAMP}ENGAGED op_override op='op{k}' first call" for k in range(200)]
    lines[50] = f"{STAMP}ENGAGED op_override op='{op}' first call"
    text = "\n".join(lines) + "\n"
    bulk = _read(text, [], 0, monkeypatch)
    assert ("kernel_override", op.lower(), False) in bulk.signal_counts
    _same(bulk, _read(text, [], 10**9, monkeypatch))


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.text(alphabet="ab\u00e9 ", max_size=8), min_size=1, max_size=30),
       literal=st.text(alphabet="ab\u00e9 ", min_size=1, max_size=3))
def test_the_lines_that_hold_a_literal_are_found_from_its_occurrences(lines: list[str], literal: str) -> None:
    text = "\n".join(lines)
    starts = line_starts(np.array([len(line) for line in lines], dtype=np.int64))
    assert holding_literal(text, starts, literal).tolist() == [literal in line for line in lines]
    data = [line.encode() for line in lines]
    byte_starts = line_starts(np.array([len(line) for line in data], dtype=np.int64))
    assert holding_literal(b"\n".join(data), byte_starts, literal.encode()).tolist() == [literal.encode() in line
                                                                                          for line in data]
