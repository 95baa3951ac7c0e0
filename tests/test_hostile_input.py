"""Hostile input: every raw-file reader, the auditor and the audit CLI against damaged evidence.

Each example starts from a valid run built with ``orchestrator/synth.py`` (every claim in it PASSes intact),
damages ONE file ONE way, and audits. The properties (design §2, §3):

- ``audit_path`` never raises, except ``ClaimError`` for a bad claim file (exit 3 at the CLI);
- damaged evidence never PASSes;
- a torn tail (last line without its newline) is ``EVIDENCE_CORRUPT`` at FLAG severity;
- mid-file corruption is ``EVIDENCE_CORRUPT`` at FAIL severity;
- a missing field (or file) a gate needs is ``EVIDENCE_MISSING``;
- the CLI exits only 0/10/20/3 and never prints a traceback.

Damage kinds: malformed JSON, NaN/Infinity tokens, numbers beyond float range and near float max,
negative and reversed times, wrong types, empty files, truncated tails, splices across lines, huge
integers, duplicate reps, missing fields, arrays of mismatched length, non-UTF-8 bytes, deep nesting,
rich-markup text -- over bench_runs.jsonl, outputs.jsonl, opbench.jsonl, profile.jsonl,
server_info.json, leg.json, quality/*.json and the claim file. Benign edits (blank lines, CRLF line
ends, an identical duplicated rep) must not change a PASS.

Damage the auditor does not read is not damage here: unknown fields are ignored by design (a real
sglang file audits as-is), so mutations only touch fields the schemas declare.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from pydantic import ValidationError
from typer.testing import CliRunner

from perfwarden.auditor.audit import ClaimError, audit_path
from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.gates import reading
from perfwarden.cli.main import app
from perfwarden.formats import jsonl
from perfwarden.formats.records import Claim, LegSpec, QualityEval, Verdict, write_json_atomic
from perfwarden.orchestrator.synth import BASE_INFO, build_ab_run, write_claim, write_jsonl, write_quality_pair

# Modest and derandomized so the file runs in well under a minute and the same way every time; set
# PERFWARDEN_HOSTILE_SCALE=10 for a deeper, randomized hunt (pytest --hypothesis-seed=N to replay).
_SCALE = int(os.environ.get("PERFWARDEN_HOSTILE_SCALE", "1"))
SETTINGS = settings(max_examples=40 * _SCALE, deadline=None, derandomize=_SCALE == 1, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EXIT_CODES = {"PASS": 0, "FLAG": 10, "FAIL": 20}

# ---------------------------------------------------------------------------------- valid runs

BENCH = ("legs/base/bench_runs.jsonl", "legs/cand/bench_runs.jsonl")
OUTPUTS = ("legs/base/outputs.jsonl", "legs/cand/outputs.jsonl")
OPBENCH = "opbench/rmsnorm/opbench.jsonl"
PROFILE = "profile/profile.jsonl"
QUALITY = "quality/pw-qa-exact-v1@cand.json"  # the candidate's record (the baseline's sits beside it)
PATCH, BASELINE, HARNESS, PROF = "claims/001-patch.json", "claims/002-baseline.json", "claims/005-harness.json", \
    "claims/006-profile.json"

# (template, claim) audited when a file is damaged
CLAIM_FOR = {
    **{f: ("main", PATCH) for f in BENCH + OUTPUTS},
    OPBENCH: ("main", HARNESS),
    PROFILE: ("main", PROF),
    "legs/base/server_info.json": ("main", PATCH),
    "legs/cand/server_info.json": ("main", PATCH),
    "legs/base/leg.json": ("main", PATCH),
    "legs/cand/leg.json": ("main", PATCH),
    QUALITY: ("lossy", PATCH),
}
SCHEMA = {**{f: jsonl.BenchRunLine for f in BENCH}, **{f: jsonl.OutputLine for f in OUTPUTS},
          OPBENCH: jsonl.OpBenchLine, PROFILE: jsonl.ProfileLine}


def _oprows(backend: str, ms: float, ref: bool = False) -> list[dict]:
    return [{"op": "rmsnorm", "backend": backend, "shape": [16, 576], "trial": t, "dtype": "float32",
             "times_ms": [ms * (1 + 0.01 * i) for i in range(5)], "warmup_discarded": 3, "fresh_inputs": True,
             "correct": True, "max_abs_err": 1e-6, "max_rel_err": 1e-6, "dispatch": "eager", "seed": s,
             "is_reference": ref, "impl_sha256": backend} for t, s in enumerate((0, 1, 2))]


def _build_templates(root: Path) -> dict[str, Path]:
    main = root / "main"
    build_ab_run(main)
    write_jsonl(main / PROFILE, [
        {"name": "rmsnorm", "op": "rmsnorm", "self_time_us": 3000.0, "count": 100, "shapes": [[16, 576]]},
        {"name": "aten::linear", "op": "linear", "self_time_us": 9000.0, "count": 300, "shapes": [[16, 576]]},
        {"name": "aten::softmax", "op": "softmax", "self_time_us": 500.0, "count": 30, "shapes": [[16, 9, 9]]}])
    write_jsonl(main / OPBENCH, _oprows("torch_ref", 2.0, True) + _oprows("fused", 1.0))
    write_claim(main, {"scope": "baseline", "seq": 2, "legs": {"baseline": "base"}})
    write_claim(main, {"scope": "harness", "seq": 5, "op": "rmsnorm", "opbench": OPBENCH, "legs": {"baseline": "base"},
                       "isolated_speedup": {"value": 2.0, "op": "rmsnorm", "opbench": OPBENCH,
                                            "baseline_backend": "torch_ref", "candidate_backend": "fused"}})
    write_claim(main, {"scope": "profile", "seq": 6, "op": "linear"})
    lossy = root / "lossy"
    build_ab_run(lossy, cand_info={**BASE_INFO, "port": 8101, "quantization": "int8_dynamic"}, claim={
        "lever": {"name": "int8", "lever_class": "B", "config_keys": ["quantization"]},
        "correctness": {"parity": "none", "quality_eval_id": "pw-qa-exact-v1"}})
    write_quality_pair(lossy, base_score=0.45, cand_score=0.45)
    return {"main": main, "lossy": lossy}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return _build_templates(tmp_path_factory.mktemp("hostile"))


def audit_damaged(runs: dict[str, Path], rel: str, damage: Callable[[Path], None],
                  claim: tuple[str, str] | None = None) -> Verdict:
    """Copy the template that ``rel`` belongs to, damage it, audit the claim that reads ``rel``."""
    template, claim_rel = claim or CLAIM_FOR[rel]
    with tempfile.TemporaryDirectory(prefix="pw-hostile-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(runs[template], run)
        damage(run / rel)
        verdict = audit_path(run, run / claim_rel)  # anything but a Verdict is a failure of the test
    _note(f"verdict {verdict.verdict}: {[(f.code, f.severity, f.message[:120]) for f in verdict.findings]}")
    return verdict


def _note(text: str) -> None:
    try:
        note(text)
    except InvalidArgument:  # outside a hypothesis test
        pass


def has(verdict: Verdict, code: str, severity: str | None = None) -> bool:
    return any(f.code == code and (severity is None or f.severity == severity) for f in verdict.findings)


def evidence_fail(verdict: Verdict) -> bool:
    return verdict.verdict == "FAIL" and any(
        f.code in ("EVIDENCE_CORRUPT", "EVIDENCE_MISSING") and f.severity == "FAIL" for f in verdict.findings)


# ------------------------------------------------------------------------------ line editing


def read_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


RAW = "@@RAW@@"  # placeholder for a token json.dumps cannot write (1e400) or bytes it would escape


def encode(obj, raw: bytes | None = None) -> bytes:
    text = json.dumps(obj, allow_nan=True).encode()  # allow_nan: writes NaN / Infinity tokens
    if raw is not None:
        text = text.replace(json.dumps(RAW).encode(), raw).replace(RAW.encode(), raw)
    return text


def edit_line(index: int, fn: Callable[[dict], bytes | None]) -> Callable[[Path], None]:
    """Damage: decode line ``index``, let ``fn`` edit the object and return raw bytes to splice in."""
    def damage(path: Path) -> None:
        lines = read_lines(path)
        obj = json.loads(lines[index])
        raw = fn(obj)
        lines[index] = encode(obj, raw)
        write_lines(path, lines)
    return damage


def _set(obj: dict, path: tuple, value) -> None:
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def _get(obj: dict, path: tuple):
    for key in path:
        obj = obj[key]
    return obj


# Numeric places per schema: (path into the line object, kind). Paths index the first element of an
# array; ``time`` values are seconds the auditor converts to ms.
BENCH_NUMBERS = [(("duration",), "scalar"), (("ttfts", 3), "time"), (("latencies", 2), "time"),
                 (("itls", 1, 4), "time"), (("output_lens", 5), "int"), (("input_lens", 0), "int"),
                 (("request_starts", 7), "start"), (("median_ttft_ms",), "aggregate"),
                 (("output_throughput",), "aggregate"), (("started_at",), "scalar")]
NUMBERS = {
    **{f: BENCH_NUMBERS for f in BENCH},
    **{f: [(("seed",), "int")] for f in OUTPUTS},
    OPBENCH: [(("times_ms", 1), "time"), (("max_rel_err",), "scalar"), (("max_abs_err",), "scalar"),
              (("trial",), "int"), (("seed",), "int")],
    PROFILE: [(("self_time_us",), "time"), (("count",), "int")],
}
STRINGS = {**{f: ("backend",) for f in BENCH}, **{f: ("text",) for f in OUTPUTS}, OPBENCH: ("backend",),
           PROFILE: ("name",)}
# Fields whose absence a gate cannot do without -> (expected code, minimum severity)
REQUIRED = {
    **{f: {"duration": "FAIL", "output_lens": "FAIL", "ttfts": "FAIL", "errors": "FAIL", "itls": "FLAG",
           "input_lens": "FLAG"} for f in BENCH},
    **{f: {"prompt_id": "FAIL", "text": "FAIL"} for f in OUTPUTS},
    OPBENCH: {"op": "FAIL", "backend": "FAIL", "shape": "FAIL"},
    PROFILE: {"name": "FAIL", "self_time_us": "FAIL"},
}
BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80abc", b"\xe2\x82", b"\xf8\x88\x80\x80\x80"]
BAD_TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1e999999", b"nan", b"inf", b"0x10", b"+1",
              b"01", b"1.", b".5"]
GARBAGE = [b"{", b"}", b"[", b'{"a":', b"not json", b"\xff\xfe", b"NaN", b'{"leg": NaN}', b"null", b"[]", b"1",
           b'"str"', b"{}{}", b'{"x":1}garbage', b"\x00\x00", b"{'single': 'quotes'}", b'{"a":1,}',
           b"[/red] rich markup [bold]", b"\x1b[31m"]


def garbage_bytes() -> st.SearchStrategy[bytes]:
    """A line that is not a JSON value at all (so it can only be corrupt)."""
    def not_json(b: bytes) -> bool:
        if b"\n" in b or not b.strip():
            return False
        try:
            json.loads(b)
        except (ValueError, RecursionError):
            return True
        return False
    return st.one_of(st.sampled_from(GARBAGE), st.binary(min_size=1, max_size=60)).filter(not_json)


# -------------------------------------------------------------------- JSONL damage, by kind


OBJECT_FIELDS = ("server_info", "contention", "loadgen", "request_params")
"""Bench-line fields read as raw JSON that must hold an object or null."""


def _damage_garbage(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    junk = data.draw(garbage_bytes(), label="garbage")

    def damage(path: Path) -> None:
        lines[i] = junk
        write_lines(path, lines)
    return "corrupt_fail", damage


def _damage_torn(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    # cut inside the last line, keeping at least its first byte: the writer died mid-line
    cut = data.draw(st.integers(1, len(lines[-1])), label="cut")

    def damage(path: Path) -> None:
        path.write_bytes(b"".join(line + b"\n" for line in lines[:-1]) + lines[-1][:cut])
    return "torn", damage


def _damage_splice(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    n, schema = len(lines), SCHEMA[rel]
    assume(n >= 2)
    j = min(i, n - 2)
    a = data.draw(st.integers(1, len(lines[j])), label="keep from line j")
    b = data.draw(st.integers(0, len(lines[j + 1]) - 1), label="drop from line j+1")
    joined = lines[j][:a] + lines[j + 1][b:]
    try:
        msgspec.json.decode(joined, type=schema)
        outcome = "no_crash"  # a splice that happens to be a valid record: undetectable (see report)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        outcome = "corrupt_or_missing_fail"

    def damage(path: Path) -> None:
        write_lines(path, lines[:j] + [joined] + lines[j + 2:])
    return outcome, damage


def _damage_non_utf8(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    field = data.draw(st.sampled_from(STRINGS[rel]), label="field")
    bad = data.draw(st.sampled_from(BAD_UTF8), label="bytes")

    def edit(obj: dict) -> bytes:
        obj[field] = str(obj.get(field, "")) + RAW
        return bad
    return "corrupt_fail", edit_line(i, edit)


def _damage_bad_token(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    place, num_kind = data.draw(st.sampled_from(NUMBERS[rel]), label="place")
    if kind == "bad_token":
        token = data.draw(st.sampled_from(BAD_TOKENS), label="token")
        outcome = "corrupt_fail"
    elif kind == "huge":
        token = data.draw(st.sampled_from([b"1e308", b"1.7976931348623157e308", b"-1e308", b"9" * 400,
                                           b"1" + b"0" * 30]), label="token")
        outcome = _huge_outcome(rel, place, num_kind, token)
    else:
        token = b"-1" if num_kind == "int" else b"-0.25"
        outcome = _negative_outcome(rel, num_kind, place)

    def edit(obj: dict) -> bytes:
        _set(obj, place, RAW)
        return token
    return outcome, edit_line(i, edit)


def _damage_wrong_type(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    schema = SCHEMA[rel]
    line_obj = json.loads(lines[i])
    field = data.draw(st.sampled_from(sorted(k for k in line_obj if k in schema.__struct_fields__)), label="field")
    value = data.draw(st.sampled_from(["x", "[/red]", 7, 2.5, True, [], {}, [["x"]], {"a": [1]}, [None]]),
                      label="value")
    obj = dict(line_obj, **{field: value})
    try:  # through JSON, as a reader sees it (raw-JSON fields take any value there)
        msgspec.json.decode(json.dumps(obj), type=schema)
        accepted = True
    except msgspec.ValidationError:
        accepted = False
    # the schema takes this value: not a wrong type -- unless it is a raw-JSON field the auditor
    # requires to be an object (or null)
    assume(not accepted or field in OBJECT_FIELDS)

    def edit(o: dict) -> None:
        o[field] = value
    return "corrupt_fail", edit_line(i, edit)


def _damage_missing(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    field = data.draw(st.sampled_from(sorted(REQUIRED[rel])), label="field")
    severity = REQUIRED[rel][field]

    def edit(obj: dict) -> None:
        obj.pop(field, None)
    return f"missing_{severity.lower()}", edit_line(i, edit)


def _damage_empty(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    content = data.draw(st.sampled_from([b"", b"\n", b"  \n\n"]), label="content")
    return "missing_fail", lambda path: path.write_bytes(content)


def _damage_deep(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    depth = data.draw(st.sampled_from([5_000, 100_000]), label="depth")
    field = {"legs/base/bench_runs.jsonl": "contention", "legs/cand/bench_runs.jsonl": "server_info"}.get(
        rel, "shape" if rel == OPBENCH else "shapes" if rel == PROFILE else "token_ids")

    def edit(obj: dict) -> bytes:
        obj[field] = RAW
        return (b'{"a":' * depth + b"1" + b"}" * depth) if rel in BENCH else (b"[" * depth + b"]" * depth)
    return "corrupt_fail", edit_line(i, edit)


def _damage_reversed(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    which = data.draw(st.sampled_from(["latency_before_ttft", "negative_start"]), label="which")

    def edit(obj: dict) -> None:
        if which == "latency_before_ttft":
            obj["latencies"][3] = obj["ttfts"][3] / 2
        else:
            obj["request_starts"][4] = -obj["request_starts"][5]
    return "corrupt_fail", edit_line(i, edit)


def _damage_mismatched_length(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    array = data.draw(st.sampled_from(["ttfts", "output_lens", "latencies", "itls", "input_lens",
                                       "request_starts", "errors"]), label="array")

    def edit(obj: dict) -> None:
        obj[array] = obj[array][:-1]
    return "corrupt_fail", edit_line(i, edit)


def _damage_dup_conflict(rel: str, data: st.DataObject, lines: list[bytes], i: int, kind: str):
    def damage(path: Path) -> None:
        other = json.loads(lines[i])
        other["duration"] *= 1.1
        write_lines(path, lines + [encode(other)])
    return "corrupt_fail", damage


DAMAGES: dict[str, Callable] = {
    "garbage": _damage_garbage,
    "torn": _damage_torn,
    "splice": _damage_splice,
    "non_utf8": _damage_non_utf8,
    "bad_token": _damage_bad_token,
    "huge": _damage_bad_token,
    "negative": _damage_bad_token,
    "wrong_type": _damage_wrong_type,
    "missing": _damage_missing,
    "empty": _damage_empty,
    "deep": _damage_deep,
    "reversed": _damage_reversed,
    "mismatched_length": _damage_mismatched_length,
    "dup_conflict": _damage_dup_conflict,
}
"""One drawing function per kind of damage: each returns (expected outcome, damage)."""


def jsonl_damage(rel: str, data: st.DataObject, runs: dict[str, Path]) -> tuple[str, Callable[[Path], None]]:
    """Draw one damage for the JSONL file ``rel``; returns (expected outcome, damage)."""
    lines = read_lines(runs[CLAIM_FOR[rel][0]] / rel)
    n = len(lines)
    i = data.draw(st.integers(0, n - 1), label="line")
    kind = data.draw(st.sampled_from([
        "garbage", "torn", "splice", "non_utf8", "bad_token", "huge", "negative", "wrong_type", "missing",
        "empty", "deep"] + (["reversed", "mismatched_length", "dup_conflict"] if rel in BENCH else [])),
        label="kind")
    note(f"{rel}: {kind} at line {i + 1} of {n}")
    return DAMAGES[kind](rel, data, lines, i, kind)


def _huge_outcome(rel: str, place: tuple, num_kind: str, token: bytes) -> str:
    """What a number near or beyond the float range must do, per field.

    Beyond range (a 400-digit literal), negative, or a time that overflows when converted to ms is
    corrupt. A huge but representable value is only caught where the auditor has something to hold it
    against: a rep's duration (its throughput collapses), a reported aggregate (cross-checked against
    the arrays), output lengths (throughput vs the reported one). A huge finite TTFT/ITL/latency
    (1e30 s), request start or input length is not detectable without a plausibility bound (see the
    report), so those only must not crash.
    """
    beyond = token.startswith(b"9" * 400)
    if rel not in BENCH:
        return "corrupt_fail" if beyond and num_kind != "int" else "no_crash"
    if beyond:
        return "corrupt_fail"
    if token.startswith(b"-"):
        return _negative_outcome(rel, num_kind, place)
    if num_kind == "int" and b"e" in token:
        return "corrupt_fail"  # a float where the schema wants an int
    if num_kind == "time":
        return "corrupt_fail" if b"e308" in token else "no_crash"
    if place == ("duration",) or num_kind == "aggregate" or place == ("output_lens", 5):
        return "not_pass"
    return "no_crash"


def _negative_outcome(rel: str, num_kind: str, place: tuple) -> str:
    if rel in BENCH:
        if num_kind in ("time", "int", "start") or place == ("duration",):
            return "corrupt_fail"
        if num_kind == "aggregate":
            return "not_pass"  # the line's own aggregate no longer matches its arrays
        return "no_crash"  # started_at: only orders reps
    return "no_crash"


def check(verdict: Verdict, outcome: str) -> None:
    if outcome == "no_crash":
        return
    assert verdict.verdict != "PASS", "damaged evidence passed"
    if outcome == "not_pass":
        return
    if outcome == "torn":
        assert has(verdict, "EVIDENCE_CORRUPT", "FLAG"), "a torn tail must be EVIDENCE_CORRUPT at FLAG"
        assert not has(verdict, "EVIDENCE_CORRUPT", "FAIL"), "a torn tail alone is not mid-file corruption"
    elif outcome == "corrupt_fail":
        assert verdict.verdict == "FAIL" and has(verdict, "EVIDENCE_CORRUPT", "FAIL")
    elif outcome == "corrupt_or_missing_fail":
        assert evidence_fail(verdict)
    elif outcome == "missing_fail":
        assert verdict.verdict == "FAIL" and has(verdict, "EVIDENCE_MISSING", "FAIL")
    elif outcome == "missing_flag":
        assert has(verdict, "EVIDENCE_MISSING")
    else:
        raise AssertionError(outcome)


# ------------------------------------------------------------------------------------ tests


def test_templates_pass_intact(runs):
    for template, claim in set(CLAIM_FOR.values()) | {("main", BASELINE)}:
        verdict = audit_path(runs[template], runs[template] / claim)
        assert verdict.verdict == "PASS", (template, claim, [f.message for f in verdict.findings])


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_damaged_bench_runs(runs, data):
    rel = data.draw(st.sampled_from(BENCH), label="file")
    outcome, damage = jsonl_damage(rel, data, runs)
    check(audit_damaged(runs, rel, damage), outcome)


@SETTINGS
@given(data=st.data())
def test_damaged_bench_runs_baseline_scope(runs, data):
    outcome, damage = jsonl_damage(BENCH[0], data, runs)
    check(audit_damaged(runs, BENCH[0], damage, claim=("main", BASELINE)), outcome)


@SETTINGS
@given(data=st.data())
def test_damaged_outputs_opbench_profile(runs, data):
    rel = data.draw(st.sampled_from(OUTPUTS + (OPBENCH, PROFILE)), label="file")
    outcome, damage = jsonl_damage(rel, data, runs)
    check(audit_damaged(runs, rel, damage), outcome)


@settings(SETTINGS, max_examples=15 * _SCALE)
@given(rel=st.sampled_from(BENCH + OUTPUTS + (OPBENCH, PROFILE)),
       edit=st.sampled_from(["blank_lines", "crlf", "dup_identical"]))
def test_benign_line_edits_keep_the_pass(runs, rel, edit):
    def damage(path: Path) -> None:
        lines = read_lines(path)
        if edit == "blank_lines":
            path.write_bytes(b"\n  \n" + b"\n\t\n".join(lines) + b"\n\n")
        elif edit == "crlf":
            path.write_bytes(b"".join(line + b"\r\n" for line in lines))
        else:
            write_lines(path, lines[:1] + lines)
    if edit == "dup_identical":
        assume(rel in BENCH)  # an identical rep line is counted once (INFO); other files dedupe differently
    verdict = audit_damaged(runs, rel, damage)
    assert verdict.verdict == "PASS", [f.message for f in verdict.findings]
    if edit == "dup_identical":
        assert has(verdict, "EVIDENCE_CORRUPT", "INFO")


@pytest.mark.parametrize("rel", BENCH)
def test_a_deleted_or_spliced_away_rep_is_not_a_pass(runs, rel):
    """A splice can yield a valid line (prefix of rep k + suffix of rep k+1), i.e. rep k silently gone;
    numbered reps with a gap are reported."""
    def damage(path: Path) -> None:
        lines = read_lines(path)
        write_lines(path, lines[:2] + lines[3:])
    verdict = audit_damaged(runs, rel, damage)
    assert verdict.verdict != "PASS" and has(verdict, "EVIDENCE_MISSING")


# ---------------------------------------------------------------- JSON object files


# server_info keys that may differ between legs: inert ones and the declared change of the main claim
UNCOMPARED_INFO = ("port", "host", "max_batch_size")
JSON_FILES = ("legs/base/server_info.json", "legs/cand/server_info.json", "legs/base/leg.json",
              "legs/cand/leg.json", QUALITY)


def _json_damage(rel: str, data: st.DataObject, runs: dict[str, Path]) -> tuple[str, Callable[[Path], None]]:
    path0 = runs[CLAIM_FOR[rel][0]] / rel
    text = path0.read_bytes()
    obj = json.loads(text)
    kind = data.draw(st.sampled_from(["truncate", "bad_token", "non_utf8", "not_object", "deep", "wrong_type",
                                      "missing_key", "delete", "empty"]), label="kind")
    note(f"{rel}: {kind}")
    numeric = [k for k, v in obj.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    strings = [k for k, v in obj.items() if isinstance(v, str)]

    if kind == "truncate":
        cut = data.draw(st.integers(0, text.rstrip().rfind(b"}")), label="cut")
        return "corrupt_or_missing_fail", lambda p: p.write_bytes(text[:cut])
    if kind == "bad_token":
        key = data.draw(st.sampled_from(numeric), label="key")
        token = data.draw(st.sampled_from(BAD_TOKENS[:7]), label="token")
        return "corrupt_fail", lambda p: p.write_bytes(encode(dict(obj, **{key: RAW}), token))
    if kind == "non_utf8":
        key = data.draw(st.sampled_from(strings), label="key")
        bad = data.draw(st.sampled_from(BAD_UTF8), label="bytes")
        return "corrupt_fail", lambda p: p.write_bytes(encode(dict(obj, **{key: obj[key] + RAW}), bad))
    if kind == "not_object":
        body = data.draw(st.sampled_from([b"[]", b"1", b'"s"', b"null", b"true", b"[{}]"]), label="body")
        return "corrupt_fail", lambda p: p.write_bytes(body)
    if kind == "deep":
        depth = data.draw(st.sampled_from([3_000, 200_000]), label="depth")
        return "corrupt_fail", lambda p: p.write_bytes(b'{"x":' + b"[" * depth + b"]" * depth + b"}")
    if kind == "empty":
        content = data.draw(st.sampled_from([b"", b"\n", b" "]), label="content")
        return "corrupt_or_missing_fail", lambda p: p.write_bytes(content)
    if kind == "delete":
        # leg.json is optional by design (scope-dependent requirements): a run without leg specs audits
        outcome = "quality_missing" if rel == QUALITY else "no_crash" if rel.endswith("leg.json") else "missing_fail"
        return outcome, lambda p: p.unlink()
    model = LegSpec if rel.endswith("leg.json") else QualityEval if rel == QUALITY else None
    if kind == "wrong_type":
        key = data.draw(st.sampled_from(sorted(obj)), label="key")
        value = data.draw(st.sampled_from(["x", 7, 2.5, True, None, [], {}, ["x"]]), label="value")
        new = dict(obj, **{key: value})
        if model is not None:
            try:
                model.model_validate(new)
                assume(False)  # the model accepts it: not a wrong type
            except ValidationError:
                pass
            outcome = "corrupt_fail"
        else:  # server_info is free-form: a changed value in one leg is a condition difference
            assume(new[key] != obj[key] and key not in UNCOMPARED_INFO)
            outcome = "not_pass"
        return outcome, lambda p: p.write_text(json.dumps(new, indent=2))
    if kind == "missing_key":
        if model is not None:
            required = [k for k, f in model.model_fields.items() if f.is_required() and k in obj]
            key = data.draw(st.sampled_from(required), label="key")
            outcome = "missing_fail"
        else:
            key = data.draw(st.sampled_from(sorted(k for k in obj if k not in UNCOMPARED_INFO)), label="key")
            outcome = "not_pass"
        return outcome, lambda p: p.write_text(json.dumps({k: v for k, v in obj.items() if k != key}, indent=2))
    raise AssertionError(kind)


@SETTINGS
@given(data=st.data())
def test_damaged_json_files(runs, data):
    rel = data.draw(st.sampled_from(JSON_FILES), label="file")
    outcome, damage = _json_damage(rel, data, runs)
    verdict = audit_damaged(runs, rel, damage)
    if outcome == "quality_missing":
        assert verdict.verdict == "FAIL" and has(verdict, "QUALITY_EVAL_MISSING")
    else:
        check(verdict, outcome)


# ------------------------------------------------------------------------------- the claim


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12) | st.sampled_from(["../..", "/etc/passwd", "base\x00", "[/red]", "cand", "base", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
_CLAIM_KEYS = [("scope",), ("legs",), ("legs", "baseline"), ("legs", "candidate"), ("legs", "aa"),
               ("legs", "caching_audit"), ("legs", "validation"), ("lever",), ("lever", "config_keys"),
               ("lever", "kernel_ops"), ("headline",), ("headline", "metric"), ("headline", "value"),
               ("isolated_speedup",), ("correctness",), ("correctness", "quality_eval_id"), ("mechanism",),
               ("mechanism", "name"), ("provided_baseline",), ("op",), ("opbench",), ("report",), ("reported",),
               ("reported", "legs"), ("seq",)]


def _claim_bytes(data: st.DataObject, runs: dict[str, Path]) -> tuple[str, bytes]:
    claim_rel = data.draw(st.sampled_from([PATCH, BASELINE, HARNESS, PROF]), label="claim")
    text = (runs["main"] / claim_rel).read_bytes()
    obj = json.loads(text)
    kind = data.draw(st.sampled_from(["set", "set", "set", "truncate", "bytes", "token", "non_utf8"]), label="kind")
    if kind == "set":
        for _ in range(data.draw(st.integers(1, 3), label="edits")):
            path = data.draw(st.sampled_from(_CLAIM_KEYS), label="path")
            value = data.draw(_json_values, label="value")
            if len(path) == 2 and not isinstance(obj.get(path[0]), dict):
                obj[path[0]] = {}
            _set(obj, path, value)
        return claim_rel, json.dumps(obj).encode()
    if kind == "truncate":
        return claim_rel, text[:data.draw(st.integers(0, len(text) - 2), label="cut")]
    if kind == "bytes":
        return claim_rel, data.draw(st.binary(max_size=80), label="bytes")
    if kind == "token":
        return claim_rel, encode(dict(obj, seq=RAW), data.draw(st.sampled_from(BAD_TOKENS), label="token"))
    return claim_rel, encode(dict(obj, producer="x" + RAW), data.draw(st.sampled_from(BAD_UTF8), label="bytes"))


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_hostile_claim_is_a_verdict_or_a_claim_error(runs, data):
    claim_rel, body = _claim_bytes(data, runs)
    with tempfile.TemporaryDirectory(prefix="pw-hostile-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(runs["main"], run)
        (run / claim_rel).write_bytes(body)
        try:
            verdict = audit_path(run, run / claim_rel)
        except ClaimError:
            return
        assert isinstance(verdict, Verdict)
        # evidence is intact here, but a claim naming legs outside the run must not read them
        try:
            claim = Claim.model_validate_json(body)
        except ValidationError:
            return
        for name in [claim.legs.baseline, claim.legs.candidate, claim.legs.validation, *claim.legs.aa]:
            if name and ("/" in name or "\\" in name or name in (".", "..") or "\x00" in name):
                assert verdict.verdict == "FAIL"


# ------------------------------------------------------------------------------- the CLI

runner = CliRunner()


def _any_damage(data: st.DataObject, runs: dict[str, Path]) -> tuple[str, Callable[[Path], None]]:
    rel = data.draw(st.sampled_from(BENCH + OUTPUTS + (OPBENCH, PROFILE) + JSON_FILES), label="file")
    _, damage = _json_damage(rel, data, runs) if rel.endswith(".json") else jsonl_damage(rel, data, runs)
    return rel, damage


@pytest.mark.slow
@settings(SETTINGS, max_examples=30 * _SCALE)
@given(data=st.data(), as_json=st.booleans(), claim_too=st.booleans())
def test_cli_exit_codes_and_no_traceback(runs, data, as_json, claim_too):
    rel, damage = _any_damage(data, runs)
    template, claim_rel = CLAIM_FOR[rel]
    with tempfile.TemporaryDirectory(prefix="pw-hostile-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(runs[template], run)
        damage(run / rel)
        if claim_too and template == "main":
            claim_rel, body = _claim_bytes(data, runs)
            (run / claim_rel).write_bytes(body)
        args = ["audit", str(run), "--claim", str(run / claim_rel)] + (["--json"] if as_json else [])
        result = runner.invoke(app, args)
    output = result.output
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 10, 20, 3), (result.exit_code, output[-2000:])
    if as_json and result.exit_code != 3:
        verdict = json.loads(result.stdout)
        assert EXIT_CODES[verdict["verdict"]] == result.exit_code


def test_cli_renders_hostile_text_without_crashing(runs, tmp_path):
    """Evidence text reaches the terminal: rich markup in it must be shown, not interpreted."""
    run = tmp_path / "run"
    shutil.copytree(runs["main"], run)
    path = run / BENCH[1]
    lines = read_lines(path)
    obj = json.loads(lines[0])
    obj["leg"] = "[/red]"
    lines[0] = encode(obj)
    write_lines(path, lines)
    result = runner.invoke(app, ["audit", str(run), "--claim", str(run / PATCH)])
    assert result.exit_code == 20 and "Traceback" not in result.output, (result.exit_code, repr(result.exception))


# ------------------------------------------------------------------ the readers themselves


@settings(SETTINGS, max_examples=60 * _SCALE)
@given(content=st.one_of(st.binary(max_size=300),
                         st.lists(st.one_of(st.sampled_from(GARBAGE + [b"", b"  ", b"\r"]),
                                            st.builds(lambda d: json.dumps(d).encode(), _json_values)),
                                  max_size=6).map(lambda ls: b"\n".join(ls))),
       schema=st.sampled_from([jsonl.BenchRunLine, jsonl.OutputLine, jsonl.OpBenchLine, jsonl.ProfileLine]))
def test_readers_never_raise_and_account_for_every_line(content, schema):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.jsonl"
        path.write_bytes(content)
        report = jsonl.read_jsonl(path, schema)
        streamed: list = []
        issues: list = []
        streamed = [ref.line for ref, _ in jsonl.iter_jsonl(path, schema, issues)]
        assert streamed == [ref.line for ref, _ in report.records]
        assert [(i.kind, i.ref.line) for i in issues] == [(i.kind, i.ref.line) for i in report.issues]
        # every complete non-blank line is either a record or an issue; a torn tail is only an issue,
        # except a foreign bench file's last record that decodes whole (vllm bench serve ends no line)
        complete = [ln for ln in content.split(b"\n")[:-1] if ln.rstrip(b"\r").strip()]
        tail = content.split(b"\n")[-1]
        finished = (schema in jsonl.FOREIGN_SCHEMAS and bool(tail.strip()) and len(tail) <= jsonl.LINE_BYTES
                    and jsonl._finished_foreign_tail(tail[:-1] if tail.endswith(b"\r") else tail,
                                                     msgspec.json.Decoder(schema),
                                                     msgspec.json.Decoder(jsonl.FOREIGN_SCHEMAS[schema]), True)
                    is not None)
        assert (len(report.records) + sum(i.kind in ("corrupt", "missing_field") for i in report.issues)
                == len(complete) + finished)
        torn = bool(tail.strip()) and not finished
        assert any(i.kind == "torn_tail" for i in report.issues) == torn
        for ref, record in report.records:  # a foreign bench line decodes as the foreign schema (issue 17)
            assert type(record) in (schema, jsonl.FOREIGN_SCHEMAS.get(schema))
            assert msgspec.json.decode(ref.raw(), type=type(record)) == record
        loader = RunLoader(Path(tmp))
        obj, _ = loader.json_object(path, True, "object")
        if obj is None:
            found = reading.check_reading(loader.problems).findings
            assert found and all(f.severity == "FAIL" for f in found)
        else:
            assert isinstance(obj, dict)
        assert re.fullmatch(r"[0-9a-f]{64}", report.sha256)
