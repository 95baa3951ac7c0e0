"""report.json is a typed, versioned record (issue 19 item 4): the review reads it through a migration chain
instead of guessing its shape from its keys. An unversioned report (written before) still reads; a newer
version or a malformed one is a clear error and exit 3."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfwarden.agents.base import BankedChange
from perfwarden.cli.main import app
from perfwarden.formats.verdict_summary import VerdictSummary
from perfwarden.harness.target_config import EmbeddedConfig
from perfwarden.orchestrator.exit_codes import ExitCode
from perfwarden.orchestrator.report import build_report
from perfwarden.orchestrator.report_record import REPORT_VERSION, ReportError, ReportRecord, parse_report

runner = CliRunner()


def banked_entry(seq: int, name: str, lever_class: str = "B") -> dict:
    """One ``banked`` entry as the run writes it (a ``BankedChange``)."""
    return BankedChange(name=name, kind="config", lever_class=lever_class, config={"max_batch_size": 2},
                        verdict=f"verdicts/{seq:03d}-patch.json", claim=f"claims/{seq:03d}-patch.json"
                        ).model_dump(mode="json")


def unversioned_report(banked: list[dict]) -> dict:
    """A report as perfwarden wrote it before reports were versioned (no ``report_version``)."""
    return {"run_dir": "runs/x", "banked": banked, "rejected": [], "headlines": {"A": [], "B": []},
            "search_path": [], "final_configuration": [], "bundle": None, "refused_or_reclassified": [],
            "red_team": None, "verdicts": [], "proposals": [], "llm": None, "notes": []}


def _state() -> dict:
    change = BankedChange.model_validate(banked_entry(2, "cfg-max_batch_size=2"))
    verdict = VerdictSummary(seq=2, scope="patch", verdict="PASS", action="pass", path=change.verdict,
                             claim=change.claim, lever=change.name, proposal=change.name, seal="sealed")
    return {"run_dir": "runs/x", "banked": [change], "verdicts": [verdict], "proposals": [], "rejected": [],
            "notes": ["n"]}


def test_the_written_report_is_the_versioned_record_and_reads_back():
    record = build_report(_state(), EmbeddedConfig())
    written = json.loads(json.dumps(record.model_dump(mode="json")))
    assert written["report_version"] == REPORT_VERSION == 5
    assert written["verdicts"][0]["acceptance"]["accepted"] is True  # the run's decision, written with it
    assert parse_report(written) == record
    assert written["final_configuration"] == [{"knob": "max_batch_size", "baseline": 1, "final": 2,
                                               "lever_class": "B", "lossless": True}]


def test_an_unversioned_report_is_migrated():
    old = unversioned_report([banked_entry(2, "cfg-max_batch_size=2")])
    record = parse_report(old)
    assert isinstance(record, ReportRecord) and record.report_version == REPORT_VERSION
    assert [b.verdict for b in record.banked] == ["verdicts/002-patch.json"]


def test_a_version_3_report_reads_as_the_throughput_run_it_was():
    """Version 3 named a step's delta ``output_throughput_delta_pct``: every run then optimized throughput."""
    step = {"step": 1, "change": "cfg-x", "kind": "config", "set": {"max_batch_size": 2}, "against": {},
            "status": "banked", "audits": 1, "verdict": "PASS", "verdict_file": "verdicts/002-patch.json",
            "output_throughput_delta_pct": 12.5, "codes": []}
    head = {"change": "cfg-x", "against": {}, "output_throughput_delta_pct": 12.5, "verdict": "verdicts/002-patch.json",
            "disclosed_regressions": {}}
    old = {**unversioned_report([]), "report_version": 3, "search_path": [step], "headlines": {"A": [], "B": [head]}}
    record = parse_report(old)
    assert record.search_path[0].headline_delta_pct == 12.5 and record.headlines["B"][0].headline_delta_pct == 12.5
    assert (record.objective.objective, record.objective.metric, record.objective.slo) == ("throughput",
                                                                                           "output_throughput", None)


def test_a_version_4_report_reads_with_no_acceptance_decision_recorded():
    """Version 4 (the run's objective) recorded no acceptance decision on its summaries: they read with none,
    never with one guessed from the label."""
    summary = VerdictSummary(seq=1, scope="baseline", verdict="FLAG", action="remeasure",
                             path="verdicts/001-baseline.json", claim="claims/001-baseline.json",
                             seal="sealed").model_dump(mode="json")
    del summary["acceptance"]
    objective = {"objective": "throughput", "metric": "output_throughput", "higher_is_better": True, "slo": None}
    old = {**unversioned_report([]), "report_version": 4, "objective": objective, "verdicts": [summary]}
    record = parse_report(old)
    assert record.report_version == REPORT_VERSION and record.objective.metric == "output_throughput"
    assert [v.acceptance for v in record.verdicts] == [None]


@pytest.mark.parametrize("change,message", [
    ({"report_version": 6}, "newer than the 5"),
    ({"report_version": "two"}, "not a version number"),
    ({"report_version": 0}, "no migration from it"),
    ({"banked": ["claims/002-patch.json"]}, "banked.0"),  # the old guessed shapes: a string names nothing typed
    ({"banked": [{"seq": 2, "scope": "patch"}]}, "banked.0"),
    ({"verdicts": None}, "verdicts"),
    ({"surprise": 1}, "surprise"),
])
def test_a_newer_or_malformed_report_is_an_error_never_a_guess(change, message):
    data = {**unversioned_report([banked_entry(2, "x")]), **change}
    with pytest.raises(ReportError, match=message):
        parse_report(data)
    with pytest.raises(ReportError, match="not a report object"):
        parse_report([data])
    missing = unversioned_report([])
    del missing["verdicts"]
    with pytest.raises(ReportError, match="verdicts"):
        parse_report(missing)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    from test_review_cases import build_demo_run

    return build_demo_run(tmp_path_factory.mktemp("report") / "run")


@pytest.mark.parametrize("content", [json.dumps({**unversioned_report([]), "report_version": 99}),
                                     json.dumps({"banked": ["claims/002-patch.json"]}), "{not json",
                                     '{"banked": [], "banked": []}'])
def test_review_of_a_run_with_a_bad_report_exits_3_in_one_line(demo, tmp_path, content):
    run = tmp_path / "run"
    shutil.copytree(demo, run)
    (run / "report.json").write_text(content)
    result = runner.invoke(app, ["review", str(run)])
    assert result.exit_code == ExitCode.INVALID, result.output
    assert "report.json" in result.output and "Traceback" not in result.output
