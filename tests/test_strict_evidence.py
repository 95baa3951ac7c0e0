"""Strict evidence and overlapping legs (issue 17 items 1 and 4), rule by rule.

proof/fixtures/strict-* score these end to end (proof/build_strict.py); the tests here pin each rule's
edge: the repeated-key scan against an exact reference on hostile spellings, what a foreign file may
carry, what the harness writer refuses, claims, sealed lines, and the overlap window.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest

from perfwarden.auditor.claim_file import ClaimError, load_claim
from perfwarden.auditor.gates import timeline
from perfwarden.formats import seal
from perfwarden.formats.jsonl import BenchRunLine, OutputLine, iter_jsonl, read_jsonl
from perfwarden.formats.records import jsonl_text
from perfwarden.formats.strict_json import RepeatedKey, repeated_key
from perfwarden.harness.bench_writer import RequestRecord, build_bench_line
from perfwarden.orchestrator.synth import make_rep, write_claim
from perfwarden.proof.build_strict import interleaved

from auditor_cases import BASE_TPUT, CAND_TPUT, audit, build, codes, reps

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"


class _Repeat(Exception):
    def __init__(self, key: str):
        self.key = key


def _no_repeats(pairs: list) -> dict:
    seen: set = set()
    for key, _ in pairs:
        if key in seen:
            raise _Repeat(key)
        seen.add(key)
    return dict(pairs)


def reference_repeat(text: bytes) -> str | None:
    """The test's own exact reader (Python's parser, every pair seen): what ``repeated_key`` must agree with."""
    try:
        json.loads(text, object_pairs_hook=_no_repeats)
    except _Repeat as exc:
        return exc.key
    return None


# ------------------------------------------------------------------------- repeated keys, exactly


@pytest.mark.parametrize("text, key", [
    (b'{"a":1,"b":2}', None),
    (b'{"a":1,"a":2}', "a"),
    (b'{"a": 1, "a": 2}', "a"),                        # whitespace between tokens
    (b'{"a" :1 ,\t"a"\r: 2 }', "a"),
    (b'{"le\\u0067":1,"leg":2}', "leg"),                 # an escaped spelling of the same key
    (b'{"x":{"k":1,"k":2}}', "k"),                       # nested object
    (b'{"x":[1,[{"k":1,"k":2}]]}', "k"),                 # object inside arrays
    (b'{"s":"\\"a\\": 1, \\"a\\": 2","t":1}', None),    # a string that looks like repeated keys
    (b'{"a":"x y","b":[1, 2, 3]}', None),
    (b'{"":1,"":2}', ""),
    (b'{}', None),
    (b'{ }', None),
    (b'[1,2]', None),                                    # not an object: the schema decode decides
])
def test_repeated_key_matches_an_exact_reader(text, key):
    assert repeated_key(text) == key
    assert reference_repeat(text) == key or text == b"[1,2]"


def _random_value(rng: random.Random, depth: int):
    kind = rng.randrange(6 if depth < 3 else 4)
    if kind == 0:
        return rng.choice([0, -3, 2.5, 1e-7, 12345678901234567890])
    if kind == 1:
        return rng.choice(["", "a b", 'q"uote', "back\\slash", "é", "\n", "k\":"])
    if kind == 2:
        return rng.choice([None, True, False])
    if kind == 3:
        return [rng.random() for _ in range(rng.randrange(4))]
    if kind == 4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return _random_object(rng, depth + 1)


def _random_object(rng: random.Random, depth: int) -> dict:
    return {rng.choice(["a", "b", "leg", "rep", "é", "x y", "\"q"]) + str(i): _random_value(rng, depth)
            for i in range(rng.randrange(5))}


def _spell(obj, rng: random.Random, repeat: bool) -> str:
    """JSON text of ``obj`` in a random spelling (compact or spaced, ASCII or not), optionally with one
    key of one object repeated."""
    separators = rng.choice([(",", ":"), (", ", ": "), (" ,", " : ")])
    text = json.dumps(obj, separators=separators, ensure_ascii=rng.random() < 0.5)
    if repeat:
        keys = [m for m in range(len(text)) if text.startswith('{"', m)]
        at = rng.choice(keys)
        text = text[:at + 1] + '"dup":1' + separators[0] + '"dup":2' + separators[0] + text[at + 1:]
    return text.replace('{"dup":1,"dup":2,}', '{"dup":1,"dup":2}')


def test_repeated_key_agrees_with_the_exact_reader_on_random_spellings():
    rng = random.Random(17)
    for case in range(600):  # bounded; a fixed seed
        obj = _random_object(rng, 0) or {"a": 1}
        text = _spell(obj, rng, repeat=case % 2 == 1).encode("utf-8")
        try:
            expected = reference_repeat(text)
        except ValueError:
            continue  # the splice made invalid JSON (e.g. a trailing separator)
        assert repeated_key(text) == expected, text


def test_a_big_compact_line_is_decided_without_the_slow_reader(monkeypatch):
    import perfwarden.formats.strict_json as strict_json

    line = json.dumps({"leg": "cand", "ttfts": [0.1] * 200_000, "itls": [[0.02] * 3] * 20_000,
                       "contention": {"start": {"t": 1.0}}}, separators=(",", ":")).encode()
    calls = []
    real = strict_json.refuse_repeats
    monkeypatch.setattr(strict_json, "refuse_repeats", lambda data, *a: calls.append(len(data)) or real(data, *a))
    assert repeated_key(line) is None
    assert all(n < 100 for n in calls)  # only the small nested object went to the exact check


# ------------------------------------------------------------------------- line schemas


def _line(**fields) -> dict:
    line = make_rep("cand", 0, throughput=100.0, started_at=1000.0)
    line.update(fields)
    return line


def _read(tmp_path: Path, *texts: str | bytes):
    path = tmp_path / "bench_runs.jsonl"
    path.write_bytes(b"".join((t.encode() if isinstance(t, str) else t) + b"\n" for t in texts))
    issues = []
    return list(iter_jsonl(path, BenchRunLine, issues)), issues


def test_a_harness_line_with_an_unknown_field_is_corrupt(tmp_path):
    records, issues = _read(tmp_path, json.dumps(_line(output_throughput_adjusted=1.0)))
    assert not records and [i.kind for i in issues] == ["corrupt"]
    assert "output_throughput_adjusted" in issues[0].message


def test_a_foreign_line_may_carry_fields_perfwarden_does_not_read(tmp_path):
    line = {k: v for k, v in _line(std_ttft_ms=3.0, tag=None).items() if k != "schema_version"}
    records, issues = _read(tmp_path, json.dumps(line))
    assert len(records) == 1 and isinstance(records[0][1], BenchRunLine)
    assert [(i.kind, i.message) for i in issues] == [("foreign_fields", "std_ttft_ms, tag")]


def test_a_repeated_key_is_corrupt_in_harness_and_foreign_lines(tmp_path):
    harness = json.dumps(_line())
    foreign = json.dumps({k: v for k, v in _line().items() if k != "schema_version"})
    for text in (harness, foreign):
        records, issues = _read(tmp_path, '{"duration": 0.01, ' + text[1:])
        assert not records and issues[0].kind == "corrupt" and "'duration' is repeated" in issues[0].message


def test_a_wrong_type_is_corrupt_and_an_integer_where_a_float_goes_is_not(tmp_path):
    records, issues = _read(tmp_path, json.dumps(_line(completed="8")))
    assert not records and issues[0].kind == "corrupt"
    records, issues = _read(tmp_path, json.dumps(_line(started_at=1000, ended_at=1002)))
    assert len(records) == 1 and not issues and records[0][1].ended_at == 1002.0


def test_outputs_lines_are_strict_and_the_harness_error_field_is_known(tmp_path):
    path = tmp_path / "outputs.jsonl"
    path.write_text(json.dumps({"prompt_id": "p", "text": "", "finish_reason": "error", "error": "HTTP 500"}) + "\n"
                    + json.dumps({"prompt_id": "q", "text": "x", "textt": "y"}) + "\n")
    report = read_jsonl(path, OutputLine)
    assert len(report.records) == 1 and [i.kind for i in report.issues] == ["corrupt"]


def test_the_harness_never_writes_a_repeated_key():
    with pytest.raises(TypeError):
        jsonl_text({"server_info": {1: "a", "1": "b"}})
    with pytest.raises(TypeError):
        jsonl_text({"x": [{True: 1}]})
    assert repeated_key(jsonl_text({"a": {"b": [1, {"c": 2}]}}).encode()) is None


# ------------------------------------------------------------------------- records and claims


def test_a_claim_with_a_repeated_key_or_an_unknown_field_is_refused(tmp_path):
    run = tmp_path / "run"
    claim = build(run)
    text = claim.read_text()
    claim.write_text(text.replace('"value": 10.0', '"value": 10.0,\n    "value": 60.0', 1))
    with pytest.raises(ClaimError, match="repeated"):
        load_claim(claim)
    body = json.loads(text)
    body["headline"]["vaule"] = 60.0
    claim.write_text(json.dumps(body))
    with pytest.raises(ClaimError, match="headline.vaule"):
        load_claim(claim)


def test_run_manifest_and_server_info_refuse_repeated_keys(tmp_path):
    run = tmp_path / "run"
    claim = build(run)
    path = run / "legs" / "base" / "server_info.json"
    path.write_text('{"max_batch_size": 4, "threads": 2, "threads": 1}')
    verdict = audit(run, claim)
    corrupt = [f for f in verdict.findings if f.code == "EVIDENCE_CORRUPT"]
    assert verdict.verdict == "FAIL" and any("'threads' is repeated" in f.message for f in corrupt)


def test_a_sealed_line_edited_to_repeat_a_key_is_tampered(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(tmp_path / "keys"))
    run = tmp_path / "run"
    run.mkdir()
    seal.begin(run)
    claim = build(run)
    seal.forget(run)
    path = run / "legs" / "cand" / "bench_runs.jsonl"
    lines = path.read_text().splitlines()
    lines[0] = '{"duration":0.01,' + lines[0][1:]
    path.write_text("\n".join(lines) + "\n")
    verdict = audit(run, claim)
    assert verdict.verdict == "FAIL" and {"EVIDENCE_TAMPERED"} <= codes(verdict)


# ------------------------------------------------------------------------- overlapping legs


def test_the_harness_stamps_the_end_of_a_rep():
    record = RequestRecord(index=0, sample_index=0, prompt_id="p0", issued_s=0.0, start_s=0.0, ttft_s=0.1,
                           latency_s=0.2, itls_s=[0.1], input_tokens=4, output_tokens=2, text="hi")
    line = build_bench_line([record], leg="a", rep=0, started_at=100.0, duration_s=0.3, request_rate="inf",
                            max_concurrency=None, backend="openai", dataset_name="d", ended_at=100.4)
    assert line["ended_at"] == 100.4
    msgspec.json.decode(jsonl_text(line), type=BenchRunLine)  # every field it writes is in the schema


def _overlap_run(tmp_path: Path, base: list[dict], cand: list[dict], **claim) -> tuple[Path, Path]:
    run = tmp_path / "run"
    return run, build(run, base_reps=base, cand_reps=cand, claim=claim or None)


def test_an_end_stamp_edited_early_cannot_hide_an_overlap(tmp_path):
    base, cand = interleaved(cand_shift=0.5)
    for line in cand:
        line["ended_at"] = line["started_at"] + 0.01  # claims to have ended at once; its duration says ~1.2 s
    for line in base:
        line["ended_at"] = line["started_at"] + 0.01
    verdict = audit(*_overlap_run(tmp_path, base, cand))
    overlap = [f for f in verdict.findings if f.gate == timeline.GATE]
    assert [(f.code, f.severity, f.action) for f in overlap] == [("CONTENDED_LEG", "FLAG", "remeasure")]
    assert len(overlap[0].evidence) == 2


def test_adjacent_reps_and_reps_without_end_stamps(tmp_path):
    base, cand = interleaved()
    for b, c in zip(base, cand):
        c["started_at"] = b["ended_at"]  # starts exactly when the other leg's rep ended
        c["ended_at"] = c["started_at"] + c["duration"]
    verdict = audit(*_overlap_run(tmp_path, base, cand))
    assert not [f for f in verdict.findings if f.gate == timeline.GATE]
    run = tmp_path / "plain"
    verdict = audit(run, build(run))  # synthetic reps without ended_at: listed, not judged
    assert any(n.startswith("rep overlap between legs: 10 rep(s)") for n in verdict.not_checked)


def test_legs_declared_concurrent_may_overlap(tmp_path):
    base, cand = interleaved(cand_shift=0.2)
    verdict = audit(*_overlap_run(tmp_path, base, cand, legs={"baseline": "base", "candidate": "cand",
                                                             "concurrent": True}))
    assert "CONTENDED_LEG" not in codes(verdict)
    assert any("declares its legs concurrent" in n for n in verdict.not_checked)


# ------------------------------------------------------------------------- the fixtures


def test_strict_fixtures_agree_with_their_answer_keys():
    for fixture in sorted(FIXTURES.glob("strict-*")):
        answer = json.loads((fixture / "answer_key.json").read_text())["answers"][0]
        verdict = audit(fixture / "run", fixture / "run" / answer["claim"])
        assert verdict.verdict == answer["verdict"], fixture.name
        assert set(answer["must_include"]) <= codes(verdict), fixture.name
        assert not set(answer["must_exclude"]) & codes(verdict), fixture.name


def test_a_repeat_in_a_huge_line_is_refused_without_parsing_it_twice(monkeypatch):
    import perfwarden.formats.jsonl as jsonl
    import perfwarden.formats.strict_json as strict_json

    monkeypatch.setattr(strict_json, "NAME_REPEAT_BYTES", 1000)  # the bound, scaled down
    line = json.dumps({"ttfts": [0.1] * 500, "leg": "a"}).encode()
    assert repeated_key(line) is None  # spaced JSON, no repeat: decided by counting, not parsing
    assert repeated_key(b'{"le\\u0067":"b",' + line[1:]) == ""  # found by its colons, too big to name
    assert repeated_key(b'{"\\u0074tfts":[],' + line[1:].replace(b'"leg"', b'"x"')) == ""
    assert repeated_key(b'{"\\u0078":"b",' + line[1:]) is None  # an escaped key that repeats nothing
    with pytest.raises(RepeatedKey, match="a key is repeated"):
        jsonl.decode_line(msgspec.json.Decoder(BenchRunLine), b'{"leg":"b",' + line[1:])
