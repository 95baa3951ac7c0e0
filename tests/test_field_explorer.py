"""The red team's field explorer (issue 17 §9) and the auditor rules its first runs showed missing.

The explorer enumerates record fields from the record types themselves, edits them type-consistently,
seals the edited run again with its own key, and audits what its oracle says changed. The rules: a bench
file whose lines a verified seal covers is the harness's (no line may lose ``schema_version`` and be judged
as a foreign file's), and a harness record or claim whose field has another JSON type than its schema's is
refused instead of coerced.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from perfwarden.auditor.audit import ClaimError, audit_path
from perfwarden.cli.main import app
from perfwarden.formats.jsonl import BenchRunLine
from perfwarden.formats.records import QualityEval, Record
from perfwarden.orchestrator.paths import default_fixture_roots
from perfwarden.verify import field_explorer as fx
from perfwarden.verify import field_explorer_oracle as oracle
from perfwarden.verify import field_explorer_run as fxr

FIXTURES = default_fixture_roots()[0]
SEALED = FIXTURES / "seal-syn-clean"
EVAL = FIXTURES / "jdg-eval-comparable"


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("verdicts"))
    return dest


def _claim(fixture: Path) -> Path:
    return sorted((fixture / "run" / "claims").glob("*.json"))[0]


def _audit(fixture: Path):
    key = fixture / "seal.key"
    return audit_path(fixture / "run", _claim(fixture), key=key if key.is_file() else None)


def _codes(v) -> set[str]:
    return {f.code for f in v.findings if f.severity != "INFO"}


# ------------------------------------------------------------------------- the record types


def test_fields_come_from_the_type_definitions_so_a_new_field_is_explored():
    class Line(msgspec.Struct, kw_only=True):
        a: int | None = None
        brand_new: list[float] | None = None

    class Inner(Record):
        x: float = 0.0

    class Outer(Record):
        inner: Inner
        name: str = ""

    assert fx.schema_fields(Line) == {"a": int, "brand_new": list[float]}
    assert set(fx.schema_fields(Outer)) == {"inner", "name"}
    paths = fx.field_paths(Outer, {"inner": {"x": 1.0, "extra": 2}, "name": "n"})
    assert ("inner", "x") in paths and ("inner", "extra") in paths and ("name",) in paths
    assert set(fx.coverage()["bench_line"]) == {f.name for f in msgspec.structs.fields(BenchRunLine)}
    assert set(fx.coverage()["quality_eval"]) == set(QualityEval.model_fields)


def test_edits_cover_every_op_family_and_write_what_they_say():
    rec = {"a": 2, "b": {"c": "mode"}, "d": [1.0, 2.0]}
    assert fx.edit_record(rec, ("a",), "scale:2", None) == {"a": 4, "b": {"c": "mode"}, "d": [1.0, 2.0]}
    assert "a" not in fx.edit_record(rec, ("a",), "drop", None)
    assert fx.edit_record(rec, ("b", "c"), "move_out", None)["c"] == "mode"
    assert fx.edit_record(rec, ("a",), "move_in", None)["b"]["a"] == 2
    assert fx.edit_record(rec, ("a",), "swap_legs", {"a": 7, "b": {}})["a"] == 7
    assert fx.edit_record(rec, ("d",), "retype:str", None)["d"] == "[1.0, 2.0]"
    renamed = fx.edit_record(rec, ("b", "c"), "rename:confusable", None)["b"]
    assert "c" not in renamed and len(renamed) == 1
    text = fx.dumps(fx.edit_record(rec, ("a",), "repeat_key", None))
    assert text.count('"a":') == 2 and json.loads(text)["a"] == 2  # a last-wins reader sees the original
    assert fx.new_value([1, 2], "dup_last") == [1, 2, 2]


def test_a_bench_line_edited_in_its_arrays_re_derives_its_own_aggregates():
    line = json.loads((SEALED / "run" / "legs" / "cand" / "bench_runs.jsonl").read_text().splitlines()[0])
    fields = oracle.rederivable(line)
    assert {"output_throughput", "total_output_tokens", "completed"} <= fields
    edited = oracle.rederive({**line, "output_lens": [n * 2 for n in line["output_lens"]]}, fields)
    assert edited["total_output_tokens"] == 2 * line["total_output_tokens"]
    assert edited["output_throughput"] == pytest.approx(2 * line["output_throughput"])


# ---------------------------------------------------------------------------- the seal again


def test_reseal_makes_an_edit_look_harness_written_and_only_then(tmp_path):
    fixture = _copy(SEALED, tmp_path / "f")
    bench = fixture / "run" / "legs" / "base" / "bench_runs.jsonl"
    lines = bench.read_text().splitlines()
    first = json.loads(lines[0])
    first["backend"] = "edited"
    bench.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert "EVIDENCE_TAMPERED" in _codes(_audit(fixture))
    fxr.reseal(fixture / "run", fixture / "seal.key")
    v = _audit(fixture)
    assert v.seal == "sealed" and "EVIDENCE_TAMPERED" not in _codes(v), [f.message for f in v.findings]


# --------------------------------------------------------------------------------- the rules


@pytest.mark.slow
def test_sealed_bench_lines_without_schema_version_are_corrupt(tmp_path):
    """Found by the explorer: dropping schema_version from every line of a leg made a sealed harness file
    a 'foreign' one (no contention sample, no rep clock required) and the win PASSed."""
    plain = tmp_path / "plain"
    shutil.copytree(SEALED / "run", plain / "run", ignore=shutil.ignore_patterns("evidence.jsonl", "verdicts"))
    bench = plain / "run" / "legs" / "cand" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in bench.read_text().splitlines()]
    bench.write_text("".join(json.dumps({k: v for k, v in x.items() if k != "schema_version"}) + "\n" for x in lines))
    sealed = fxr.sealed_copy(plain, tmp_path / "sealed")
    v = _audit(sealed)
    assert v.seal == "sealed" and v.verdict == "FAIL" and "EVIDENCE_CORRUPT" in _codes(v), [f.message for f in v.findings]
    clean = fxr.sealed_copy(_copy(SEALED, tmp_path / "clean-src"), tmp_path / "clean")
    assert _audit(clean).verdict == "PASS"  # the same copy with schema_version kept


@pytest.mark.slow
def test_a_quality_eval_field_of_the_wrong_type_is_corrupt_and_an_integral_float_is_not(tmp_path):
    fixture = _copy(EVAL, tmp_path / "f")
    path = sorted((fixture / "run" / "quality").glob("*@cand.json"))[0]
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "score": str(record["score"])}))
    v = _audit(fixture)
    assert v.verdict == "FAIL" and "EVIDENCE_CORRUPT" in _codes(v), [f.message for f in v.findings]
    path.write_text(json.dumps({**record, "n": float(record["n"])}))  # an integer written as a float: honest
    assert _audit(fixture).verdict == "PASS"


def test_a_claim_field_of_the_wrong_type_is_refused(tmp_path):
    fixture = _copy(SEALED, tmp_path / "f")
    claim = json.loads(_claim(fixture).read_text())
    claim["headline"]["value"] = str(claim["headline"].get("value") or 10.0)
    _claim(fixture).write_text(json.dumps(claim))
    with pytest.raises(ClaimError, match="wrong type"):
        _audit(fixture)


def test_a_leg_spec_field_of_the_wrong_type_is_corrupt(tmp_path):
    fixture = _copy(EVAL, tmp_path / "f")
    spec_path = fixture / "run" / "legs" / json.loads(_claim(fixture).read_text())["legs"]["candidate"] / "leg.json"
    spec = json.loads(spec_path.read_text())
    spec_path.write_text(json.dumps({**spec, "schema_version": "1"}))
    v = _audit(fixture)
    assert v.verdict == "FAIL" and "EVIDENCE_CORRUPT" in _codes(v), [f.message for f in v.findings]


# ------------------------------------------------------------------------------ the explorer


@pytest.mark.slow
def test_the_explorer_reports_counts_per_record_type_and_writes_fixtures_with_answers_first(tmp_path):
    report = fxr.explore([SEALED], edits=120, workers=1, out=tmp_path)
    data = report.to_json()
    assert data["edits"] >= 115 and data["audited"] > 0 and len(data["record_types"]) >= 4
    assert data["bases"] == ["seal-syn-clean (sealed)"]
    for row in data["success_classes"].values():
        answer = json.loads((tmp_path / row["fixture"] / "answer_key.json").read_text())
        assert answer["answers"][0]["verdict"] == ["FLAG", "FAIL"]


@pytest.mark.slow
def test_redteam_json_carries_the_explorer(tmp_path):
    result = CliRunner().invoke(app, ["redteam", str(SEALED), "--families", "second_knob", "--explore", "30",
                                      "--explore-workers", "1", "--no-op-catalogue", "--json", "--out", str(tmp_path)])
    data = json.loads(result.stdout)
    assert data["explorer"]["edits"] >= 25 and "op_catalogue" not in data


@pytest.mark.parametrize("array", ["latencies", "request_starts"])
def test_a_harness_line_that_lost_an_array_the_harness_writes_is_missing_evidence(tmp_path, array):
    """Found by the explorer: dropping 'latencies' or 'request_starts' from harness lines silently skipped the
    checks they feed (latency against TTFT and gaps; the request timeline) and the win PASSed."""
    run = tmp_path / "f" / "run"
    shutil.copytree(SEALED / "run", run, ignore=shutil.ignore_patterns("evidence.jsonl", "verdicts"))
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in bench.read_text().splitlines()]
    bench.write_text("".join(json.dumps({k: v for k, v in x.items() if k != array}) + "\n" for x in lines))
    v = _audit(tmp_path / "f")
    assert v.verdict == "FLAG" and "EVIDENCE_MISSING" in _codes(v), [f.message for f in v.findings]
    assert any(array in f.message for f in v.findings if f.code == "EVIDENCE_MISSING")


def test_parity_dumps_over_different_prompts_are_missing_evidence(tmp_path):
    """Found by the explorer: a candidate output whose prompt id was changed fell out of the parity pairs
    unnoticed, so parity was decided on a subset the producer chose."""
    fixture = tmp_path / "f"
    shutil.copytree(SEALED / "run", fixture / "run", ignore=shutil.ignore_patterns("evidence.jsonl", "verdicts"))
    path = fixture / "run" / "legs" / "cand" / "outputs.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0]["prompt_id"] = f"{rows[0]['prompt_id']}-other"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    v = _audit(fixture)
    assert v.verdict in ("FLAG", "FAIL") and "EVIDENCE_MISSING" in _codes(v), [f.message for f in v.findings]


def test_op_catalogue_candidates_count_an_unrefused_exploit_and_a_refused_honest_alternative(monkeypatch):
    from perfwarden.redteam import op_catalogue
    from perfwarden.verify import op_candidates

    rows = [op_catalogue.Row("clock_patch", "rmsnorm", "exploit", True, "clock", 0.1, "KernelGuard"),
            op_catalogue.Row("stream_forge", "rmsnorm", "exploit", False, None, 5.0, "Wafer"),
            op_catalogue.Row("honest:fused", "rmsnorm", "honest", True, "roofline", 1.2, "-"),
            op_catalogue.Row("honest:other", "silu_mul", "honest", False, None, 1.1, "-")]
    monkeypatch.setattr(op_catalogue, "run", lambda run_dir: rows)
    data = op_candidates.op_bench_candidates()
    assert (data["exploits"], data["refused"], data["honest"], data["honest_refused"]) == (2, 1, 2, 1)
    assert sorted(s["candidate"] for s in data["success_list"]) == ["honest:fused", "stream_forge"]


@pytest.mark.parametrize("value", ["0.4", [0.4], True])
def test_a_contention_figure_of_another_type_is_corrupt_not_quiet(tmp_path, value):
    """Found by the explorer: a sample's load average written as a string was skipped, and the rep judged
    quiet."""
    run = tmp_path / "f" / "run"
    shutil.copytree(SEALED / "run", run, ignore=shutil.ignore_patterns("evidence.jsonl", "verdicts"))
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in bench.read_text().splitlines()]
    assert "loadavg_1m" in lines[0]["contention"]
    lines[0]["contention"]["loadavg_1m"] = value
    bench.write_text("".join(json.dumps(x) + "\n" for x in lines))
    v = _audit(tmp_path / "f")
    assert v.verdict == "FAIL" and "EVIDENCE_CORRUPT" in _codes(v), [f.message for f in v.findings]


@pytest.mark.parametrize("renamed", ["LOADAVG_1M", "loadаvg_1m"])
def test_a_contention_figure_renamed_to_a_look_alike_is_corrupt(tmp_path, renamed):
    """Found by the explorer: a sample whose load average key became a case or homoglyph variant lost the
    figure silently, and the rep was judged quiet."""
    run = tmp_path / "f" / "run"
    shutil.copytree(SEALED / "run", run, ignore=shutil.ignore_patterns("evidence.jsonl", "verdicts"))
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in bench.read_text().splitlines()]
    con = lines[0]["contention"]
    lines[0]["contention"] = {(renamed if k == "loadavg_1m" else k): v for k, v in con.items()}
    bench.write_text("".join(json.dumps(x) + "\n" for x in lines))
    v = _audit(tmp_path / "f")
    assert v.verdict == "FAIL" and "EVIDENCE_CORRUPT" in _codes(v), [f.message for f in v.findings]


@pytest.mark.slow
@pytest.mark.parametrize("field", ["ci_high", "schema_version", "item_set_sha256"])
def test_a_quality_eval_field_renamed_to_a_look_alike_is_corrupt(tmp_path, field):
    fixture = _copy(EVAL, tmp_path / "f")
    path = sorted((fixture / "run" / "quality").glob("*@cand.json"))[0]
    record = json.loads(path.read_text())
    assert field in record
    path.write_text(json.dumps({(field.upper() if k == field else k): v for k, v in record.items()}))
    v = _audit(fixture)
    assert v.verdict == "FAIL" and "EVIDENCE_CORRUPT" in _codes(v), [f.message for f in v.findings]


@pytest.mark.parametrize("edit", ["drop", "null"])
def test_a_load_figure_without_its_core_count_is_not_a_quiet_machine(tmp_path, edit):
    """Found by the explorer: a sample whose core count was dropped (or nulled) could not be judged per core,
    and the rep passed as quiet."""
    run = tmp_path / "f" / "run"
    shutil.copytree(SEALED / "run", run, ignore=shutil.ignore_patterns("evidence.jsonl", "verdicts"))
    bench = run / "legs" / "cand" / "bench_runs.jsonl"
    lines = [json.loads(x) for x in bench.read_text().splitlines()]
    for line in lines:
        con = line["contention"]
        line["contention"] = {k: v for k, v in con.items() if k != "ncpu"} if edit == "drop" else {**con, "ncpu": None}
    bench.write_text("".join(json.dumps(x) + "\n" for x in lines))
    v = _audit(tmp_path / "f")
    assert v.verdict == "FLAG" and "EVIDENCE_MISSING" in _codes(v), [f.message for f in v.findings]


def test_a_retype_the_schema_still_accepts_is_judged_by_what_it_feeds():
    """Found by the field explorer (explore-profile_line-shapes-retype-768556e2, not kept: a false success): an
    op's empty shape list made ``[[]]`` is still a list of shapes; only a value the schema rejects is retyped."""
    edit = fx.Edit("profile_line", "profile/profile.jsonl", 0, ("shapes",), "retype:list")
    ok = b'{"name":"aten::mm","op":null,"self_time_us":1.0,"count":1,"shapes":[[]],"device":"cpu"}\n'
    bad = b'{"name":"aten::mm","op":null,"self_time_us":1.0,"count":1,"shapes":[[[1,2]]],"device":"cpu"}\n'
    assert not fx.is_structural(edit, ok) and fx.is_structural(edit, bad) and fx.is_structural(edit)
    shape = fx.Edit("op_bench_line", "opbench/rmsnorm/opbench.jsonl", 0, ("shape",), "retype:str")
    assert fx.is_structural(shape, b'{"op":"rmsnorm","backend":"reference","shape":"[1, 5, 576]"}\n')


def test_an_op_bench_shape_written_as_a_string_is_corrupt(tmp_path):
    """Found by the field explorer (explore-op_bench_line-shape-retype-85a30c7c): the schema took a string shape,
    which the harness never writes; the harness claim passed on it."""
    fixture = _copy(FIXTURES / "rec-harness-clean", tmp_path / "f")
    path = fixture / "run" / "opbench" / "rmsnorm" / "opbench.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[0])
    lines[0] = json.dumps({**row, "shape": json.dumps(row["shape"])})
    path.write_text("\n".join(lines) + "\n")
    v = _audit(fixture)
    assert v.verdict == "FAIL" and "EVIDENCE_CORRUPT" in _codes(v), [f.message for f in v.findings]


def test_a_parity_that_holds_is_as_one_not_asked_and_a_broken_one_is_a_change(tmp_path):
    """Found by the field explorer (explore-claim-correctness-drop-7a01bab3, not kept: a false success): dropping
    ``parity: none`` asks for exact parity, which the agreeing outputs meet; only a parity that breaks changed."""
    run = EVAL / "run"
    assert oracle.correctness(run, ["base", "cand"], "none") == oracle.correctness(run, ["base", "cand"], "exact_text")
    fixture = _copy(EVAL, tmp_path / "f")
    out = fixture / "run" / "legs" / "cand" / "outputs.jsonl"
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    out.write_text("".join(json.dumps({**r, "text": r["text"] + " x"}) + "\n" for r in rows))
    assert oracle.correctness(fixture / "run", ["base", "cand"], "exact_text")[0] == (True, True)
