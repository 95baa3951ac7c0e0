"""MLPerf LoadGen compliance re-derivation: log readers, rules, the audit, and ``audit-mlperf``.

Vendored cases live in ``tests/data/mlperf`` (see its README); broken variants are made from them
in ``tmp_path``. The whole shared corpus (``../shared/corpus/mlperf``) is audited when present.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from perfwarden.auditor import mlperf
from perfwarden.auditor.findings import decide
from perfwarden.auditor.mlperf import audit
from perfwarden.auditor.mlperf_findings import CODES
from perfwarden.auditor.mlperf_scores import Score, threshold_rule, values_agree
from perfwarden.cli.mlperf import audit_mlperf
from perfwarden.formats.jsonl import LineRef
from perfwarden.formats.mlperf_log import MlperfLogError, read_detail, read_summary
from perfwarden.formats.records import Verdict

DATA = Path(__file__).resolve().parent / "data" / "mlperf"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "mlperf"

T04_SS = "test04_r07_v41_singlestream_resnet50_lenovo"
T04_SERVER = "test04_r04_v41_server_resnet50_hpe"
T01_COPY = "test01_r10_v51_server_stable-diffusion-xl_gigacomputing"
T04_OTHER_BENCH = "test04_d05_v41_server_stable-diffusion-xl_gigacomputing"
T05_MS = "test05_r06_v41_multistream_retinanet_lenovo"
E_TRUNCATED = "test01_e01_v41_offline_retinanet_fujitsu"
E_NO_SCORE = "test04_e01_v41_offline_resnet50_cisco"

DETAIL = "mlperf_log_detail.txt"
SUMMARY = "mlperf_log_summary.txt"


def case(name: str) -> tuple[Path, Path]:
    return DATA / name / "reference", DATA / name / "compliance"


@pytest.fixture
def copy_case(tmp_path):
    """Copy a vendored case into tmp_path (writable) and return (reference, compliance)."""

    def _copy(name: str) -> tuple[Path, Path]:
        dst = tmp_path / name
        shutil.copytree(DATA / name, dst)
        for p in dst.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        return dst / "reference", dst / "compliance"

    return _copy


def set_mllog(path: Path, key: str, value, *, occurrence: int = 0) -> None:
    """Rewrite the value of the ``occurrence``-th ``:::MLLOG`` line with ``key``."""
    lines = path.read_text().splitlines(keepends=True)
    seen = 0
    for i, line in enumerate(lines):
        if line.startswith(":::MLLOG "):
            obj = json.loads(line[9:])
            if obj["key"] == key:
                if seen == occurrence:
                    obj["value"] = value
                    lines[i] = ":::MLLOG " + json.dumps(obj) + "\n"
                    path.write_text("".join(lines))
                    return
                seen += 1
    raise AssertionError(f"{key!r} not in {path}")


def append_mllog(path: Path, key: str, value) -> None:
    rec = {"key": key, "value": value, "time_ms": 1.0, "namespace": "mlperf::logging",
           "event_type": "POINT_IN_TIME", "metadata": {"is_error": False, "is_warning": False}}
    with open(path, "a") as fh:
        fh.write(":::MLLOG " + json.dumps(rec) + "\n")


def set_summary(path: Path, key: str, value: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        head, sep, _ = line.partition(":")
        if sep and head.strip().lstrip("*").strip() == key:
            lines[i] = f"{head}: {value}\n"
            path.write_text("".join(lines))
            return
    raise AssertionError(f"{key!r} not in {path}")


def codes(result, severity: str | None = None) -> set[str]:
    return {f.code for f in result.findings if severity is None or f.severity == severity}


# ------------------------------------------------------------------------------------------ readers


def test_detail_reader_first_occurrence_wins_and_records_conflicts(copy_case):
    ref, _ = copy_case(T04_SS)
    log = read_detail(ref / DETAIL)
    assert log.marker == ":::MLLOG"
    assert log.get("effective_scenario") == "SingleStream"
    first_line = log.record("result_validity").line
    append_mllog(ref / DETAIL, "result_validity", "INVALID")
    log = read_detail(ref / DETAIL)
    assert log.get("result_validity") == "VALID"  # first wins, as in the official log_parser
    assert log.record("result_validity").line == first_line
    assert [r.value for r in log.conflicts()["result_validity"]] == ["VALID", "INVALID"]
    # Evidence: the LineRef re-reads exactly the raw line.
    rec = log.record("result_validity")
    assert rec.ref.raw().startswith(b':::MLLOG {"key": "result_validity"')
    assert len(rec.ref.sha256()) == 64


def test_detail_reader_reports_bad_line_number(copy_case):
    ref, _ = copy_case(T04_SS)
    lines = (ref / DETAIL).read_text().splitlines(keepends=True)
    lines[9] = ':::MLLOG {"key": "sut_name", "value": \n'
    (ref / DETAIL).write_text("".join(lines))
    with pytest.raises(MlperfLogError) as exc:
        read_detail(ref / DETAIL)
    assert exc.value.line == 10
    assert "line 10" in str(exc.value)


@pytest.mark.parametrize("content, fragment", [
    (b"", "empty"),
    (b"hello\n:::MLLOG {\"key\": \"a\", \"value\": 1}\n", "does not start with"),
    (b":::MLLOG [1, 2]\n", "not a JSON object"),
    (b":::MLLOG {\"value\": 1}\n", "lacks 'key'"),
    (b":::MLLOG {\"key\": \"result_samples_per_second\", \"value\": NaN}\n", "non-finite"),
    (b":::MLLOG {\"key\": \"a\", \"value\": \"\xff\xfe\"}\n", "not UTF-8"),
    (b":::MLLOG {\"key\": \"a\", \"value\": 1}\n:::MLLOG {\"key\": \"b\", \"val", "truncated"),
])
def test_detail_reader_rejects_malformed(tmp_path, content, fragment):
    p = tmp_path / DETAIL
    p.write_bytes(content)
    with pytest.raises(MlperfLogError) as exc:
        read_detail(p)
    assert fragment in str(exc.value)


def test_detail_reader_keeps_decodable_unterminated_last_line(tmp_path):
    p = tmp_path / DETAIL
    p.write_bytes(b':::MLLOG {"key": "a", "value": 1}\n:::MLLOG {"key": "b", "value": 2}')
    log = read_detail(p)
    assert log.get("b") == 2 and log.notes


def test_summary_reader(copy_case):
    ref, comp = copy_case(T04_SS)
    s = read_summary(comp / SUMMARY)
    assert s.get("Scenario") == "SingleStream"
    assert s.get("Early stopping 90th percentile estimate") == "385528"
    assert s.entry("performance_issue_same").section == "Test Parameters Used"
    assert s.errors_reported == 0 and s.warnings_reported == 1
    (ref / SUMMARY).write_text("just some text\nkey : value\n")
    with pytest.raises(MlperfLogError, match="header"):
        read_summary(ref / SUMMARY)
    with pytest.raises(MlperfLogError, match="does not exist"):
        read_summary(ref / "nope.txt")
    # Cut before LoadGen's closing "No errors encountered" line: truncated, even at a line boundary.
    text = (comp / SUMMARY).read_text()
    (comp / SUMMARY).write_text(text[: text.index("Test Parameters Used")])
    with pytest.raises(MlperfLogError, match="truncated"):
        read_summary(comp / SUMMARY)
    with pytest.raises(mlperf.UnreadableLogs, match="truncated"):
        audit(ref.parent / "reference", comp)


# ------------------------------------------------------------------------------------------- rules


def _score(scenario: str, value: float) -> Score:
    kind = "latency" if scenario in ("SingleStream", "MultiStream") else "throughput"
    return Score(scenario, value, kind, "k", "detail", LineRef(Path("x"), 1, 0, 0))


def test_threshold_rules():
    # TEST04 Offline: one-sided, compliance must stay below ref * 1.10.
    r = threshold_rule("TEST04", "Offline", _score("Offline", 100.0))
    assert r.inside(109.9) and not r.inside(110.01) and r.inside(50.0)
    # TEST04 SingleStream: official 0.20 (1e9/latency <= 200000); the intended band is 0.10 for a
    # 386 us reference latency.
    r = threshold_rule("TEST04", "SingleStream", _score("SingleStream", 386_829.0))
    assert (r.threshold, r.intended_threshold) == (0.20, 0.10)
    assert r.inside(386_829 / 1.19) and not r.inside(386_829 / 1.2)
    # TEST01: two-sided, 0.20 only for short stream latencies.
    r = threshold_rule("TEST01", "SingleStream", _score("SingleStream", 150_000.0))
    assert r.threshold == 0.20 and r.inside(120_000) and not r.inside(119_999)
    r = threshold_rule("TEST01", "Server", _score("Server", 10.0))
    assert r.threshold == 0.10 and r.inside(9.0) and r.inside(11.0) and not r.inside(11.01)
    # TEST05: one-sided, 5%: throughput must not drop, latency must not rise.
    r = threshold_rule("TEST05", "Offline", _score("Offline", 100.0))
    assert r.inside(95.01) and not r.inside(95.0) and r.inside(1000.0)
    r = threshold_rule("TEST05", "MultiStream", _score("MultiStream", 32_000_000.0))
    assert r.threshold == 0.05 and r.inside(33_599_999) and not r.inside(33_600_000)


def test_values_agree_allows_printed_precision_only():
    assert values_agree("176024.90", 176025)  # detail printed with 6 significant digits
    assert values_agree("26.23", 26.2256)
    assert not values_agree("26.23", 28.4612)
    assert values_agree("Yes", True) and not values_agree("No", True)
    assert values_agree("3066443479025735752", 3066443479025735752)
    assert not values_agree("3066443479025735752", 3066443479025735753)
    assert values_agree("0", False) and values_agree("VALID", "VALID")


def test_normalize_test():
    assert mlperf.normalize_test("test04") == "TEST04" == mlperf.normalize_test("4")
    with pytest.raises(ValueError, match="TEST02"):
        mlperf.normalize_test("TEST02")


def test_codes_listed_in_docstring():
    for code in CODES:
        assert f"``{code}``" in mlperf.__doc__


# ----------------------------------------------------------------------------------- vendored cases


@pytest.mark.parametrize("name, verdict, test, must_have", [
    (T04_SS, "PASS", "TEST04", set()),
    (T04_SERVER, "PASS", "TEST04", set()),
    (T05_MS, "PASS", "TEST05", set()),
    (T01_COPY, "FAIL", "TEST01", {"MLPERF_SAME_RUN", "REPORTED_MISMATCH"}),
    (T04_OTHER_BENCH, "FAIL", "TEST04", {"CONDITIONS_DIFFER"}),
])
def test_vendored_cases(name, verdict, test, must_have):
    result = audit(*case(name))
    assert result.verdict == verdict, [f.message for f in result.findings if f.severity != "INFO"]
    assert result.mlperf.test == test
    assert must_have <= codes(result, "FAIL")
    for f in result.findings:
        if f.severity != "INFO" and f.evidence:
            assert all(e.sha256 for e in f.evidence)


def test_pass_carries_scores_threshold_and_line_evidence():
    result = audit(*case(T04_SS))
    scores = result.mlperf
    assert scores.scenario == "SingleStream" and scores.score_unit == "ns"
    assert (scores.reference_score, scores.compliance_score) == (386829.0, 385528.0)
    assert scores.threshold == 0.20 and scores.test_source == "detail"
    (thr,) = [f for f in result.findings if f.gate == "test04_threshold"]
    assert thr.severity == "INFO" and thr.measured["ratio"] == pytest.approx(385528 / 386829)
    ev = thr.evidence[0]
    line = (DATA / T04_SS / "reference" / DETAIL).read_bytes().splitlines()[ev.line - 1]
    import hashlib

    assert ev.sha256 == hashlib.sha256(line).hexdigest()


def test_benchmark_mismatch_is_not_scored_but_shown():
    result = audit(*case(T04_OTHER_BENCH))
    msgs = " ".join(f.message for f in result.findings)
    assert "qsl_reported_total_count" in msgs and "effective_target_latency_ns" in msgs
    assert any("not comparable" in n for n in result.not_checked)
    # Issue 9 rule 9: a conditions FAIL still shows the score comparison it would have made (as INFO).
    (shown,) = [f for f in result.findings if f.gate == "test04_threshold"]
    assert shown.severity == "INFO" and shown.message.startswith("not judged") and result.mlperf.ratio is not None
    dataset = next(f for f in result.findings if "qsl_reported_total_count" in f.message)
    assert dataset.severity == "FLAG"  # a dataset size is not a benchmark fingerprint


def test_dataset_subset_alone_is_not_another_benchmark(copy_case):
    """A performance run may legally load a subset of the dataset: a different QSL total count with the
    same benchmark settings is worth a look (FLAG), never 'different benchmarks' (FAIL)."""
    ref, comp = copy_case(T04_SS)
    set_mllog(ref / DETAIL, "qsl_reported_total_count", 500)
    result = audit(ref, comp)
    assert result.verdict == "FLAG" and codes(result, "FLAG") == {"CONDITIONS_DIFFER"}
    assert any(f.code == "CACHING_SUSPECTED" and f.severity == "INFO" for f in result.findings)  # still scored


def test_benchmark_settings_identify_the_benchmark(copy_case):
    """Token-latency (LLM) mode is fixed per benchmark by mlperf.conf: a run with it against one
    without is another benchmark, whatever the dataset sizes say."""
    ref, comp = copy_case(T04_SS)
    append_mllog(ref / DETAIL, "requested_use_token_latencies", True)
    result = audit(ref, comp)
    assert result.verdict == "FAIL" and "CONDITIONS_DIFFER" in codes(result, "FAIL")
    assert "use_token_latencies" in result.mlperf.message and result.mlperf.ratio is not None


def test_threshold_finding_is_info_inside_the_band_and_versions_are_info(copy_case):
    ref, comp = copy_case(T05_MS)
    result = audit(ref, comp)
    assert any(f.code == "MLPERF_THRESHOLD" and f.severity == "INFO" for f in result.findings)
    set_mllog(comp / DETAIL, "loadgen_version", "9.9 @ deadbeef")
    result = audit(ref, comp)
    assert any(f.code == "MLPERF_LOADGEN_VERSION" and f.severity == "INFO" for f in result.findings)


def test_mlperf_findings_use_the_shared_catalog():
    from perfwarden.auditor.codes import CATALOG

    assert set(CODES) <= set(CATALOG)


@pytest.mark.parametrize("name, code, fragment", [
    (E_TRUNCATED, "EVIDENCE_CORRUPT", "truncated"),
    (E_NO_SCORE, "EVIDENCE_MISSING", "'Samples per second'"),
])
def test_malformed_cases_are_errors(name, code, fragment):
    """Logs that are not LoadGen output are an input error (no verdict, no score), naming the problem."""
    with pytest.raises(mlperf.UnreadableLogs) as unreadable:
        audit(*case(name))
    assert fragment in unreadable.value.message
    assert codes(unreadable.value) == {code}
    assert mlperf.error_json(unreadable.value)["reference_score"] is None


# -------------------------------------------------------------------------------------- mutations


def test_invalid_compliance_run_fails(copy_case):
    ref, comp = copy_case(T04_SS)
    set_mllog(comp / DETAIL, "result_validity", "INVALID")
    set_summary(comp / SUMMARY, "Result is", "INVALID")
    result = audit(ref, comp)
    assert result.verdict == "FAIL" and "MLPERF_INVALID_RESULT" in codes(result, "FAIL")


def test_summary_detail_disagreement_fails(copy_case):
    ref, comp = copy_case(T04_SS)
    set_mllog(comp / DETAIL, "result_validity", "INVALID")  # the summary still says VALID
    result = audit(ref, comp)
    assert "REPORTED_MISMATCH" in codes(result, "FAIL")


def test_conflicting_duplicate_key_flags(copy_case):
    ref, comp = copy_case(T04_SS)
    append_mllog(comp / DETAIL, "early_stopping_latency_ss", 1)
    result = audit(ref, comp)
    assert result.verdict == "FLAG" and codes(result, "FLAG") == {"MLPERF_DUPLICATE_KEY"}
    assert result.mlperf.compliance_score == 385528.0  # the first occurrence is used


@pytest.mark.parametrize("speedup, verdict", [(1.05, "PASS"), (1.15, "FLAG"), (1.25, "FAIL")])
def test_test04_faster_compliance_is_caching(copy_case, speedup, verdict):
    ref, comp = copy_case(T04_SS)
    lat = int(386829 / speedup)
    set_mllog(comp / DETAIL, "early_stopping_latency_ss", lat)
    set_summary(comp / SUMMARY, "Early stopping 90th percentile estimate", str(lat))
    result = audit(ref, comp)
    assert result.verdict == verdict
    if verdict != "PASS":
        assert codes(result, verdict) == {"CACHING_SUSPECTED"}


def test_copy_with_edited_timestamp_is_same_run(copy_case):
    ref, comp = copy_case(T04_SS)
    shutil.copy(ref / DETAIL, comp / DETAIL)
    shutil.copy(ref / SUMMARY, comp / SUMMARY)
    set_mllog(comp / DETAIL, "test_datetime", "2030-01-01T00:00:00Z")
    set_summary(comp / SUMMARY, "SUT name", "LWIS_Server")  # rewrite a line so the bytes differ
    (comp / SUMMARY).write_text((comp / SUMMARY).read_text() + "\n")
    result = audit(ref, comp, "TEST04")
    assert "MLPERF_SAME_RUN" in codes(result, "FAIL")
    # With no --test the copy also carries no audit settings.
    assert "MLPERF_AUDIT_SETTINGS" in codes(audit(ref, comp), "FAIL")


def test_declared_test_must_match_audit_settings():
    result = audit(*case(T04_SS), test="TEST01")
    assert result.verdict == "FAIL" and result.mlperf.test == "TEST01" and result.mlperf.test_detected == "TEST04"
    assert "MLPERF_AUDIT_SETTINGS" in codes(result, "FAIL")


def test_reference_with_audit_settings_fails(copy_case):
    ref, comp = copy_case(T04_SS)
    set_mllog(ref / DETAIL, "effective_performance_issue_same", True)
    set_mllog(ref / DETAIL, "requested_performance_issue_same", True)
    set_summary(ref / SUMMARY, "performance_issue_same", "1")
    result = audit(ref, comp)
    assert result.verdict == "FAIL" and "CONDITIONS_DIFFER" in codes(result, "FAIL")


def test_loadgen_errors_flag(copy_case):
    ref, comp = copy_case(T05_MS)
    text = (comp / SUMMARY).read_text().replace("No errors encountered during test.",
                                                "2 ERRORS encountered. See detailed log.")
    (comp / SUMMARY).write_text(text)
    result = audit(ref, comp)
    assert result.verdict == "FLAG" and codes(result, "FLAG") == {"MLPERF_LOG_ERRORS"}


def test_missing_score_key_in_detail_is_error(copy_case):
    ref, comp = copy_case(T05_MS)
    text = "".join(l for l in (ref / DETAIL).read_text().splitlines(keepends=True)
                   if '"key": "early_stopping_latency_ms"' not in l)
    (ref / DETAIL).write_text(text)
    with pytest.raises(mlperf.UnreadableLogs, match="early_stopping_latency_ms"):
        audit(ref, comp)


def test_submission_layout_is_found(tmp_path):
    for side in ("reference", "compliance"):
        shutil.copytree(DATA / T04_SS / side, tmp_path / side / "performance" / "run_1")
    assert audit(tmp_path / "reference", tmp_path / "compliance").verdict == "PASS"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_detail_log_never_crashes(tmp_path_factory, data):
    """Any damage to a detail log gives a verdict or an ``error``, never an exception."""
    tmp = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(DATA / T04_SS, tmp / "c")
    target = tmp / "c" / data.draw(st.sampled_from(["reference", "compliance"])) / DETAIL
    target.chmod(0o644)
    raw = bytearray(target.read_bytes())
    op = data.draw(st.sampled_from(["truncate", "flip", "drop_line"]))
    if op == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    elif op == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    else:
        lines = bytes(raw).splitlines(keepends=True)
        del lines[data.draw(st.integers(0, len(lines) - 1))]
        raw = bytearray(b"".join(lines))
    target.write_bytes(bytes(raw))
    try:
        result = audit(tmp / "c" / "reference", tmp / "c" / "compliance")
    except mlperf.UnreadableLogs as unreadable:
        assert unreadable.message and unreadable.findings
        return
    assert result.verdict in ("PASS", "FLAG", "FAIL") and result.scope == "mlperf"


# -------------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("name", [T04_SS, T01_COPY, T04_OTHER_BENCH, T05_MS])
def test_an_mlperf_audit_is_a_verdict_through_the_one_verdict_rule(name, monkeypatch):
    """Issue 19 item 3: the same ``Verdict`` record as a claim's audit (scope ``mlperf``), its label and
    action from ``findings.decide`` -- the rule every audit uses, not a copy of it."""
    result = audit(*case(name))
    assert isinstance(result, Verdict) and result.scope == "mlperf" and result.mlperf is not None
    assert (result.verdict, result.action) == decide(result.findings)
    calls = []
    monkeypatch.setattr(mlperf, "decide", lambda findings: calls.append(len(findings)) or ("FLAG", "remeasure"))
    assert (audit(*case(name)).verdict, len(calls)) == ("FLAG", 1)  # asked once, and its answer is the verdict


def test_an_mlperf_verdict_digest_is_stable_and_names_its_inputs():
    first, again = audit(*case(T04_SS)), audit(*case(T04_SS))
    assert first.digest and first.digest == again.digest and len(first.input_digests) == 4
    assert first.seal == "unsealed" and first.shown == f"{first.verdict} (unsealed)"


@pytest.fixture(scope="module")
def cli():
    """``audit-mlperf`` through the main app when it imports, else a local app with the command."""
    try:
        from perfwarden.cli.main import app
    except ImportError:
        app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        app.command("audit-mlperf")(audit_mlperf)
        app.command("noop")(lambda: None)  # keep audit-mlperf a subcommand
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, ["audit-mlperf", *args])

    return run


@pytest.mark.parametrize("name, code", [
    (T04_SS, 0), (T01_COPY, 20), (T04_OTHER_BENCH, 20), (E_TRUNCATED, 3), (E_NO_SCORE, 3),
])
def test_cli_exit_codes(cli, name, code):
    ref, comp = case(name)
    res = cli("--reference", str(ref), "--compliance", str(comp))
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output


def test_cli_json_pass(cli):
    ref, comp = case(T05_MS)
    res = cli("--reference", str(ref), "--compliance", str(comp), "--json")
    assert res.exit_code == 0
    out = json.loads(res.stdout)
    assert out["verdict"] == "PASS" and out["test"] == "TEST05" and out["scenario"] == "MultiStream"
    assert out["threshold"] == 0.05 and out["reference_score"] == 32190689.0
    assert isinstance(out["findings"], list) and len(out["inputs"]) == 4


def test_cli_json_error_object(cli, tmp_path):
    ref, comp = case(E_TRUNCATED)
    res = cli("--reference", str(ref), "--compliance", str(comp), "--json")
    assert res.exit_code == 3
    out = json.loads(res.stdout)
    assert out["verdict"] == "error" and "truncated" in out["message"]
    assert out["reference_score"] is None and out["compliance_score"] is None
    res = cli("--reference", str(tmp_path / "nope"), "--compliance", str(comp), "--json")
    assert res.exit_code == 3 and json.loads(res.stdout)["verdict"] == "error"


def test_cli_flag_exit_code_and_table(cli, copy_case):
    ref, comp = copy_case(T04_SS)
    lat = int(386829 / 1.15)
    set_mllog(comp / DETAIL, "early_stopping_latency_ss", lat)
    set_summary(comp / SUMMARY, "Early stopping 90th percentile estimate", str(lat))
    res = cli("-r", str(ref), "-c", str(comp))
    assert res.exit_code == 10 and "FLAG" in res.stdout and "CACHING_SUSPECTED" in res.stdout


def test_cli_test_override_and_usage_error(cli):
    ref, comp = case(T04_SS)
    res = cli("-r", str(ref), "-c", str(comp), "--test", "test01", "--json")
    assert res.exit_code == 20 and json.loads(res.stdout)["test"] == "TEST01"
    res = cli("-r", str(ref), "-c", str(comp), "--test", "TEST02")
    assert res.exit_code == 2


# ------------------------------------------------------------------------------------------ corpus


def _corpus_cases() -> list[dict]:
    manifest = CORPUS / "manifest.json"
    return json.loads(manifest.read_text()) if manifest.is_file() else []


@pytest.mark.corpus
@pytest.mark.skipif(not (CORPUS / "manifest.json").is_file(), reason="../shared/corpus/mlperf absent")
@pytest.mark.parametrize("entry", _corpus_cases(), ids=lambda e: e["case_id"])
def test_shared_corpus_verdicts(entry):
    root = CORPUS / "cases" / entry["case_id"]
    try:
        result = audit(root / "reference", root / "compliance")
    except mlperf.UnreadableLogs as unreadable:
        assert "error" in entry["expected"], unreadable.message
        return
    assert result.verdict in entry["expected"], (result.verdict, result.mlperf.message)
    assert result.mlperf.test == entry["test"]
    assert result.mlperf.scenario is not None


MORE = CORPUS.parent / "mlperf-more"


@pytest.mark.corpus
@pytest.mark.parametrize("corpus", [CORPUS, MORE], ids=["mlperf", "mlperf-more"])
def test_backtest_folds_in_the_mlperf_corpora_with_and_without_test(corpus):
    """``perfwarden backtest`` scores both shared corpora, each case audited with ``--test`` and with the
    test detected; every audit must land in the case's expected verdicts (issue 9 rule 9)."""
    if not (corpus / "manifest.json").is_file():
        pytest.skip(f"{corpus} absent")
    from perfwarden.verify.mlperf_cases import mlperf_results

    results = mlperf_results(corpus)
    n_cases = len(json.loads((corpus / "manifest.json").read_text()))
    assert len(results) == 2 * n_cases
    assert {r.claim.split("(")[1] for r in results} == {"test detected)", *{f"--test {t})" for t in
                                                                           ("TEST01", "TEST04", "TEST05")}}
    assert [(r.fixture, r.claim, r.problems) for r in results if not r.agrees] == []


# ------------------------------------------------------------- settings against the reference (issue 17 §6)


def _set_setting(run: Path, name: str, value, *, requested: str | None = None, summary: str | None = None) -> None:
    """Set a LoadGen setting in every copy a run states it in (detail effective/requested, summary)."""
    set_mllog(run / DETAIL, f"effective_{name}", value)
    if requested:
        set_mllog(run / DETAIL, f"requested_{requested}", value)
    if summary:
        set_summary(run / SUMMARY, summary, str(value))


@pytest.mark.parametrize("case_name,name,value,requested,summary", [
    (T05_MS, "min_duration_ms", 60000, "min_duration_ms", "min_duration (ms)"),
    (T05_MS, "samples_per_query", 4, "multi_stream_samples_per_query", "samples_per_query"),
    (T05_MS, "performance_sample_count", 8, "performance_sample_count_override", "performance_sample_count"),
    (T04_SS, "max_async_queries", 2, None, "max_async_queries"),
    (T04_SS, "max_duration_ms", 300000, "max_duration_ms", "max_duration (ms)"),
])
def test_a_setting_beyond_the_tests_own_fails_and_is_named(copy_case, case_name, name, value, requested, summary):
    ref, comp = copy_case(case_name)
    _set_setting(comp, name, value, requested=requested, summary=summary)
    result = audit(ref, comp)
    assert result.verdict == "FAIL", result.mlperf.message
    bad = [f for f in result.findings if f.code == "CONDITIONS_DIFFER" and f.severity == "FAIL"]
    assert bad and name in bad[0].message


@pytest.mark.parametrize("case_name,name,value,requested,summary", [
    (T04_SS, "accuracy_log_rng_seed", 720381539243781796, "accuracy_log_rng_seed", "accuracy_log_rng_seed"),
    (T04_SS, "qsl_rng_seed", 12345, "qsl_rng_seed", "qsl_rng_seed"),
    (T04_SS, "performance_issue_same_index", 0, "performance_issue_same_index", "performance_issue_same_index"),
    (T05_MS, "qsl_rng_seed", 3066443479025735752, "qsl_rng_seed", "qsl_rng_seed"),
])
def test_an_audit_setting_not_the_tests_own_fails(copy_case, case_name, name, value, requested, summary):
    """Another test's audit setting, or one of the test's own at another value or missing."""
    ref, comp = copy_case(case_name)
    _set_setting(comp, name, value, requested=requested, summary=summary)
    for test in (None, "TEST04" if case_name == T04_SS else "TEST05"):
        result = audit(ref, comp, test)
        assert result.verdict == "FAIL", result.mlperf.message
        assert any(f.code == "MLPERF_AUDIT_SETTINGS" and f.severity == "FAIL" and name in f.message
                   for f in result.findings)


@pytest.mark.parametrize("case_name,edits", [
    (T05_MS, [("min_duration_ms", 900000, "min_duration_ms", "min_duration (ms)"), ("target_duration_ms", 900000,
                                                                                    None, None)]),
    (T04_SS, [("min_query_count", 500, "min_query_count", "min_query_count"), ("min_sample_count", 500, None, None)]),
    (T04_SS, [("target_qps", 2000, None, "target_qps")]),
])
def test_longer_runs_hints_and_the_tests_own_settings_pass(copy_case, case_name, edits):
    ref, comp = copy_case(case_name)
    for name, value, requested, summary in edits:
        _set_setting(comp, name, value, requested=requested, summary=summary)
    result = audit(ref, comp)
    assert result.verdict == "PASS", result.mlperf.message


def test_a_setting_one_run_alone_states_fails_on_one_loadgen_build(copy_case):
    ref, comp = copy_case(T04_SS)
    append_mllog(comp / DETAIL, "requested_server_fast_path", True)
    result = audit(ref, comp)
    assert result.verdict == "FAIL"
    assert any(f.code == "CONDITIONS_DIFFER" and "requested_server_fast_path" in f.message for f in result.findings)


def test_every_logged_setting_is_classified():
    """The registry names every setting key LoadGen 4.1-6.0 logs (tests/data); anything else is a condition."""
    from perfwarden.auditor.mlperf_settings import _AUDIT_OWNER, _CLASSES, classify, setting_name

    keys = {k for d in DATA.iterdir() if (d / "reference" / DETAIL).is_file()
            for k in read_detail(d / "reference" / DETAIL).first if setting_name(k)}
    unlisted = {k for k in keys if setting_name(k) not in {**_CLASSES, **_AUDIT_OWNER}
                and setting_name(k) not in ("samples_per_query", "target_qps", "max_async_queries",
                                            "print_timestamps", "sample_concatenate_permutation",
                                            "server_coalesce_queries", "server_max_async_queries",
                                            "multi_stream_samples_per_query")}
    assert not unlisted
    assert classify("effective_made_up_setting", "Offline", "TEST01") == ("equal", None)


def test_the_summary_is_a_second_witness_of_the_settings(copy_case):
    """A shortened run whose detail lines are deleted: the summaries still differ."""
    ref, comp = copy_case(T05_MS)
    lines = (comp / DETAIL).read_text().splitlines(keepends=True)
    (comp / DETAIL).write_text("".join(line for line in lines if "min_duration_ms" not in line))
    set_summary(comp / SUMMARY, "min_duration (ms)", "60000")
    result = audit(ref, comp)
    assert result.verdict == "FAIL"
    assert any(f.code == "CONDITIONS_DIFFER" and f.severity == "FAIL" and "min_duration (ms)" in f.message
               for f in result.findings)
