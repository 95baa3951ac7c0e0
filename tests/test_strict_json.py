"""One strict JSON decoder for every reader (``formats/strict_json.py``): each rule refused the same way
by every file perfwarden reads, and the scans behind it in constant memory.

The reader tests here go through the readers' public entry points (a claim, ``report.json``,
``outputs.jsonl``, ``settings.json``, a LoadGen log line, the seal chain's first line): one rule, whichever
file holds the text.
"""

from __future__ import annotations

import json
import random
import re
import tracemalloc
from pathlib import Path

import msgspec
import numpy as np
import pytest

from perfwarden.auditor.claim_file import ClaimError, load_claim
from perfwarden.auditor.serverlog import parse_server_log
from perfwarden.formats import strict_json
from perfwarden.formats.jsonl import OutputLine, chain_seal_id, read_jsonl
from perfwarden.formats.mlperf_log import MlperfLogError, read_detail
from perfwarden.formats.strict_json import INT_MAX, INT_MIN, JsonTooDeep, RepeatedKey, StrictJsonError, loads
from perfwarden.formats.vllm_log import MAX_ARGS_CHARS, VllmArgsError, parse_args
from perfwarden.harness.vllm_target import parse_args_line
from perfwarden.orchestrator.report_record import ReportError, read_report

CLAIM = {"seq": 1, "scope": "baseline", "producer": "t", "legs": {"baseline": "base"},
         "headline": {"metric": "output_throughput", "kind": "e2e"}}


# ------------------------------------------------------------------------------ the rules, one place


@pytest.mark.parametrize("text, rule", [
    (b"\xef\xbb\xbf{}", "byte-order mark"),
    ("\ufeff{}", "byte-order mark"),
    (b'{"a": NaN}', "non-finite"),
    (b"[-Infinity]", "non-finite"),
    (b'{"a": 1e400}', "non-finite"),
    (b"[1" + b"0" * 400 + b"]", "64-bit range"),
    (str(INT_MAX + 1).encode(), "64-bit range"),
    (str(INT_MIN - 1).encode(), "64-bit range"),
    (b'"\xff"', "UTF-8"),
    (b'{"a": 1, "a": 2}', "repeated"),
    (b'{"a": {"b": 1, "b": 2}}', "repeated"),
    (b'{"a": 1, "\\u0061": 2}', "repeated"),  # one key, two spellings
    (b"[" * 65 + b"]" * 65, "nests deeper than the limit of 64"),
])
def test_each_rule_is_refused_with_its_name(text, rule):
    with pytest.raises(StrictJsonError, match=rule):
        loads(text, what="x")


def test_what_the_rules_allow():
    assert loads(str(INT_MAX).encode()) == INT_MAX and loads(str(INT_MIN)) == INT_MIN
    assert loads(b"[" * 64 + b"]" * 64) is not None
    assert loads(b'{"a": "x:y", "b": ["{", "}"], "c": [{"d": 1}, {"d": 2}]}')["c"][1] == {"d": 2}
    assert loads(b'{"\\u0041": 1, "a": 2}') == {"A": 1, "a": 2}
    assert loads(b"1e-400") == 0.0  # underflow is a finite number


def _reference_structure(data: bytes) -> tuple[int, int]:
    """Strings blanked by a regex, then brackets summed and colons counted: slow, plainly right."""
    blanked = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', data, flags=re.DOTALL)
    steps = np.zeros(256, dtype=np.int64)
    steps[[ord("["), ord("{")]], steps[[ord("]"), ord("}")]] = 1, -1
    depth = int(np.cumsum(steps[np.frombuffer(blanked, np.uint8)]).max()) if blanked else 0
    return max(depth, 0), blanked.count(b":")


def _random_value(rng: random.Random, depth: int):
    pick = rng.random()
    if depth > 5 or pick < 0.3:
        return rng.choice([1, -2.5, None, True, 'a"b', "\\", "\\\\", '\\"', "[{:}]", "é€😀", ":", "\\" * 5 + '"'])
    if pick < 0.65:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["k", "a:b", "[", '"', "{", "\\"]) + str(i): _random_value(rng, depth + 1)
            for i in range(rng.randint(0, 4))}


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 18])
def test_the_structure_scan_agrees_with_a_plain_reference_at_any_piece_size(monkeypatch, chunk):
    monkeypatch.setattr(strict_json, "SCAN_CHUNK", chunk)  # strings, escapes and runs cut anywhere
    rng = random.Random(chunk)
    for _ in range(150 if chunk < 8 else 600):
        data = json.dumps(_random_value(rng, 0), ensure_ascii=rng.random() < 0.5).encode()
        assert strict_json.scan_structure(data) == _reference_structure(data), data


def test_the_depth_check_holds_no_copy_of_a_long_line():
    """A 16 MiB text with brackets in it is measured in pieces: the check's own memory is a few pieces,
    not the copies (and regex stack) that cost 2 GB for a 16 MiB line."""
    line = b'{"text": "' + b"[x] {y}: " * (16 << 20 >> 3) + b'", "a": [[[[[1]]]]]}'
    tracemalloc.start()
    try:
        strict_json.check_depth(line)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert strict_json.json_depth(line) == 6
    assert peak < 32 * strict_json.SCAN_CHUNK, peak


# ------------------------------------------------------------------------------ every reader, one rule


def test_a_claim_with_a_byte_order_mark_is_refused_like_evidence(tmp_path):
    path = tmp_path / "claim.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(CLAIM).encode())
    with pytest.raises(ClaimError, match="byte-order mark"):
        load_claim(path)
    path.write_bytes(json.dumps(CLAIM).encode())
    assert load_claim(path)[0].seq == 1


@pytest.mark.parametrize("number", [b"1e400", b"-1e999", str(INT_MAX + 1).encode()])
def test_report_json_refuses_what_no_double_or_64_bit_integer_holds(tmp_path, number):
    (tmp_path / "report.json").write_bytes(b'{"report_version": 1, "x": ' + number + b"}")
    with pytest.raises(ReportError, match="non-finite|64-bit"):
        read_report(tmp_path / "report.json", tmp_path)


def test_outputs_refuse_a_seed_every_other_record_refuses(tmp_path):
    path = tmp_path / "outputs.jsonl"
    line = {"prompt_id": "p", "text": "t", "seed": 0}
    path.write_text("\n".join(json.dumps({**line, "seed": s}) for s in (0, INT_MAX, INT_MAX + 1, INT_MIN - 1)) + "\n")
    report = read_jsonl(path, OutputLine)
    assert [ref.line for ref, _ in report.records] == [1, 2]
    assert [(i.kind, i.ref.line) for i in report.issues] == [("corrupt", 3), ("corrupt", 4)]
    assert "64-bit range" in report.issues[0].message


def test_a_loadgen_line_obeys_the_same_rules(tmp_path):
    detail = tmp_path / "mlperf_log_detail.txt"
    seed = 18209322760996052031  # a real uint64 LoadGen seed (shared corpus): inside the range
    detail.write_text(':::MLLOG {"key": "qsl_rng_seed", "value": %d, "time_ms": 1.0}\n' % seed)
    assert read_detail(detail).first["qsl_rng_seed"].value == seed
    detail.write_text(':::MLLOG {"key": "a", "value": 1, "value": 2, "time_ms": 1.0}\n')
    with pytest.raises(MlperfLogError, match="repeated"):
        read_detail(detail)


def test_settings_with_a_repeated_key_are_refused(tmp_path):
    from perfwarden.orchestrator.runner import RunUsageError, read_settings, settings_path

    path = settings_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"target": "synthetic", "target": "embedded"}')
    with pytest.raises(RunUsageError, match="repeated"):
        read_settings(tmp_path)


def test_the_one_seal_id_reader_refuses_hostile_first_lines_without_raising(tmp_path):
    chain = tmp_path / "evidence.jsonl"
    entry = {"v": 1, "seq": 0, "kind": "open", "prev": "0" * 64, "seal_id": "a" * 32}
    chain.write_text(json.dumps(entry) + "\n")
    assert chain_seal_id(chain) == "a" * 32
    chain.write_text(json.dumps(entry)[:-1] + ', "seal_id": "' + "b" * 32 + '"}\n')  # which id? refused
    assert chain_seal_id(chain) is None
    chain.write_bytes(b'{"v": 1, "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n")
    assert chain_seal_id(chain) is None


def test_typed_lines_keep_the_range_in_lists_and_mixed_lists():
    decoder = msgspec.json.Decoder(OutputLine)
    with pytest.raises(StrictJsonError, match="token_ids"):
        strict_json.decode_typed(decoder, b'{"prompt_id": 1, "text": "", "token_ids": [1, %d]}' % (INT_MIN - 1))
    with pytest.raises(StrictJsonError, match="prompt_id"):
        strict_json.decode_typed(decoder, b'{"prompt_id": %d, "text": ""}' % (INT_MAX + 1))
    with pytest.raises(RepeatedKey):
        strict_json.decode_typed(decoder, b'{"prompt_id": 1, "text": "", "\\u0074ext": "x"}')
    deep = b'{"prompt_id": 1, "text": "", "token_ids": ' + b"[" * 70 + b"]" * 70 + b"}"
    with pytest.raises(JsonTooDeep):
        strict_json.decode_typed(decoder, deep, depth=True)


# ------------------------------------------------------------------------------ one vLLM args parser


def test_the_harness_and_the_auditor_read_a_vllm_args_line_alike():
    texts = ["{'max_num_seqs': 8, 'o': <OptimizationLevel.O0: 0>, 'speculative_config': {'method': 'ngram', "
             "'num_speculative_tokens': 3}}", "{'a': __import__('os')}", "[1, 2]", "{" * 100 + "}" * 100,
             "{'a': '" + "x" * MAX_ARGS_CHARS + "'}"]
    for text in texts:
        harness = parse_args_line(text)
        copies, problems = parse_server_log([f"INFO non-default args: {text}"])
        if harness is None:
            assert not copies, text[:60]  # not read as a copy of the conditions by either
            continue
        spec = harness.pop("speculative_config", {})
        harness.update({"speculative_method": spec["method"], "num_speculative_tokens": 3} if spec else {})
        assert not problems and copies[0].values == harness, text[:60]


def test_the_vllm_args_parser_carries_its_own_bound():
    with pytest.raises(VllmArgsError, match="bound"):
        parse_args("{'a': '" + "x" * MAX_ARGS_CHARS + "'}")
    assert parse_args("{'a': 1, 'b': <E.X: 1>}") == {"a": 1}


@pytest.mark.parametrize("values, bad", [
    ([5, 2**63 - 1, INT_MIN], None),  # the signed 64-bit range numpy takes
    ([5, 2**63, INT_MAX], None),  # past it, inside the unsigned range: judged by the exact path
    ([5] * 1000 + [INT_MAX + 1], INT_MAX + 1),
    ([5, INT_MIN - 1, 7], INT_MIN - 1),
    ([5, "7", INT_MAX + 1], INT_MAX + 1),  # a list mixing words and integers
])
def test_an_integer_list_is_held_to_the_range_past_the_signed_64_bit_one(values, bad):
    """A long integer list is proven in range by one numpy conversion; whatever numpy refuses is judged
    exactly, so an integer just past either end is still named, and one inside the unsigned range passes."""
    assert strict_json._out_of_range(values) == bad
