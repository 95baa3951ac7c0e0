"""``perfwarden review`` in the terminal: 80 columns, the trail, banked per class, FLAG/FAIL details,
audit on the fly, comparisons, hostile text, and the CLI's exit codes."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from test_audit_terminal import check_rendering
from test_report_record import banked_entry, unversioned_report
from test_review_cases import EVIL, add_bundle, build_demo_run, build_variant
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.orchestrator.render import printable
from perfwarden.orchestrator.review.compare import compare
from perfwarden.orchestrator.review.model import ReviewError, load_review
from perfwarden.orchestrator.review.terminal import print_comparison, print_review

runner = CliRunner()
WIDTH = 80


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    run = build_demo_run(tmp_path_factory.mktemp("review") / "run")
    add_bundle(run)
    return run


def render(fn, obj, width: int = WIDTH) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    fn(obj, console)
    return console.export_text()


def assert_fits(text: str, width: int = WIDTH) -> None:
    wide = [line for line in text.splitlines() if len(line) > width]
    assert not wide, f"{len(wide)} line(s) wider than {width}: {wide[:3]!r}"


def test_review_reads_at_80_columns_with_trail_banked_and_findings(demo):
    text = render(print_review, load_review(demo))
    assert_fits(text)
    # the trail, in seq order, by gate
    order = [text.index(k) for k in ("001-baseline", "002-patch", "003-patch", "004-patch", "005-bundle")]
    assert order == sorted(order)
    assert "gates: lever FLAG×1" in text and "conditions FAIL" in text
    assert "findings by gate and scope" in text
    # banked: PASS and the downgraded FLAG are banked under class B (the detected class), FAILs are not
    banked = text[text.index("banked results by lever class"):text.index("FLAG and FAIL, with findings")]
    assert "class B (orthogonal serving lever):" in banked
    assert "002-patch 'max_batch_size=8'" in banked and "003-patch 'fused_batching'" in banked
    assert "004-patch" not in banked and "005-bundle" not in banked
    assert "class A (kernel/implementation): none" in banked
    # details: each FLAG/FAIL with measured vs threshold and evidence file:line
    details = text[text.index("FLAG and FAIL, with findings"):]
    assert "FLAG ORTHOGONAL_LEVER" in details and "FAIL CONDITIONS_DIFFER" in details
    assert "measured" in details and "threshold" in details
    assert "legs/evil/server_info.json:" in details and "(sha256 ok)" in details
    assert "002-patch  PASS" not in details


def test_review_stays_within_80_columns_for_long_untrusted_text(tmp_path):
    run = build_demo_run(tmp_path / "run")
    path = run / "verdicts" / "004-patch.json"
    verdict = json.loads(path.read_text())
    verdict["findings"][0]["message"] = "x" * 300 + " [bold]not markup[/] \x1b]0;pwned\x07 " + "y" * 150
    verdict["findings"][0]["gate"] = "a-very-long-gate-name-" * 5
    verdict["findings"][0]["evidence"][0]["file"] = "legs/" + "deep/" * 30 + "server.log"
    path.write_text(json.dumps(verdict))
    review = load_review(run)
    text = render(print_review, review)
    assert_fits(text)
    assert "[bold]not markup[/]" in text, "run data must be printed literally, never parsed as rich markup"
    # the details read as the audit's finding blocks: message whole, every other field in at most 3 lines
    details = text[text.index("FLAG and FAIL, with findings"):]
    check_rendering(details, [f for e in review.entries if e.verdict.verdict != "PASS" for f in e.verdict.findings])
    table = text[text.index("findings by gate and scope"):text.index("banked results by lever class")]
    gate_rows = [line for line in table.splitlines() if "a-very-long-gate" in line]
    assert len(gate_rows) == 1 and "…" in gate_rows[0], gate_rows  # the forged gate's row does not wrap
    raw = io.StringIO()
    print_review(load_review(run), Console(file=raw, width=WIDTH, force_terminal=True))
    assert "\x1b]0;pwned" not in raw.getvalue(), "an escape sequence from run data reached the terminal"
    assert "\\x1b]0;pwned" in raw.getvalue()


def test_printable_shows_control_characters_as_escapes():
    assert printable("a\x1b[2Jb\u202ec\nd") == "a\\x1b[2Jb\\u202ec\\nd"
    assert printable("tab\there") == "tab here"


def test_run_without_verdicts_is_audited_on_the_fly_and_says_so(tmp_path):
    run = build_demo_run(tmp_path / "run", save=False)
    r = runner.invoke(app, ["review", str(run)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "claims were audited now" in " ".join(r.output.split())
    assert "004-patch" in r.output and "CONDITIONS_DIFFER" in r.output
    assert not (run / "verdicts").exists(), "a review must not write verdicts"


def test_report_json_banked_list_is_preferred_and_checked(demo, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(demo, run)
    (run / "report.json").write_text(json.dumps(unversioned_report(
        [banked_entry(2, "lever2"), banked_entry(4, "mbs8_attn"), banked_entry(99, "ghost_lever")])))
    text = render(print_review, load_review(run))
    assert_fits(text)
    assert "source: report.json" in text
    flat = " ".join(text.split())
    assert "! report banks 004-patch 'mbs8_attn': the auditor's verdict is FAIL" in flat
    assert "'ghost_lever' ('verdicts/099-patch.json'): no verdict in this run backs it" in flat
    assert "bankable but not in report.json: 003-patch" in flat


def test_unreadable_report_json_is_an_error(demo, tmp_path):
    """What the run says it banked is never guessed: an unreadable report stops the review (exit 3 in the
    CLI, tests/test_report_record.py)."""
    run = tmp_path / "run"
    shutil.copytree(demo, run)
    (run / "report.json").write_text("{not json")
    with pytest.raises(ReviewError, match="report.json is unreadable"):
        load_review(run)


def test_comparison_in_the_terminal_pairs_claims(demo, tmp_path):
    other = build_variant(tmp_path / "b")
    comp = compare(load_review(demo), load_review(other))
    text = render(print_comparison, comp)
    assert_fits(text)
    assert "Comparison  A 'demo'  vs  B 'demo-rerun'" in text
    assert "002-patch  A PASS pass  →  B" in text
    assert "only in B: DELTA_NOT_SIGNIFICANT" in text
    assert "005-bundle  A FAIL eject  →  B absent" in text
    r = runner.invoke(app, ["review", str(demo), "--compare", str(other)], env={"COLUMNS": "80"})
    assert r.exit_code == 0 and "paired verdicts" in r.output


def test_two_verdict_files_compare_and_a_verdict_file_reviews_alone(demo, tmp_path):
    a = demo / "verdicts" / "003-patch.json"
    b = demo / "verdicts" / "002-patch.json"
    r = runner.invoke(app, ["review", str(a)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "1 verdict(s)" in r.output and "ORTHOGONAL_LEVER" in r.output
    r = runner.invoke(app, ["review", str(a), "--compare", str(b)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "only in A: ORTHOGONAL_LEVER" in r.output


@pytest.mark.parametrize("case", ["missing", "corrupt", "invalid", "empty"])
def test_unreadable_input_is_a_clear_error_and_exit_3(tmp_path, case):
    run = tmp_path / "run"
    if case == "missing":
        target = tmp_path / "nope"
    elif case == "empty":
        run.mkdir()
        target = run
    else:
        build_demo_run(run)
        (run / "verdicts" / "002-patch.json").write_text("{torn" if case == "corrupt" else '{"scope": "kernel"}')
        target = run
    r = runner.invoke(app, ["review", str(target)])
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output and "error:" in r.output
    if case in ("corrupt", "invalid"):
        assert "002-patch.json" in r.output
    if case == "empty":
        assert "nothing to review" in r.output


def test_unwritable_html_path_exits_3(demo, tmp_path):
    r = runner.invoke(app, ["review", str(demo), "--html", str(tmp_path / "no" / "such" / "dir" / "r.html")])
    assert r.exit_code == 3 and "cannot write the HTML report" in r.output and "Traceback" not in r.output


def test_bad_format_is_a_usage_error():
    assert runner.invoke(app, ["review", ".", "--format", "xml"]).exit_code == 2


def test_hostile_claim_paths_are_not_read(demo, tmp_path):
    """A verdict naming a claim or evidence outside the run must not make the review read it."""
    run = tmp_path / "run"
    shutil.copytree(demo, run)
    secret = tmp_path / "secret.json"
    secret.write_text('{"scope": "patch", "lever": {"name": "LEAKED", "lever_class": "A"}}')
    path = run / "verdicts" / "002-patch.json"
    verdict = json.loads(path.read_text())
    verdict["claim"] = "../secret.json"
    verdict["findings"] = [{"code": "EVIDENCE_MISSING", "severity": "FAIL", "message": "m",
                            "evidence": [{"file": "../secret.json", "line": 1, "excerpt": "recorded"}]}]
    verdict["verdict"], verdict["action"] = "FAIL", "eject"
    path.write_text(json.dumps(verdict))
    text = render(print_review, load_review(run))
    assert "LEAKED" not in text
    assert "outside the run directory" in " ".join(text.split())
    assert "../secret.json:1  (outside run, not read)" in text
    assert EVIL not in secret.read_text()


def test_a_claim_without_a_verdict_is_noted(demo, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(demo, run)
    (run / "verdicts" / "003-patch.json").unlink()
    text = render(print_review, load_review(run))
    assert "note: claim 'claims/003-patch.json' has no verdict yet" in text
    assert "003-patch" not in text.split("verdict trail")[1].split("findings by gate")[0]


def test_a_verdict_block_shows_its_witnesses_its_asks_and_why_its_figure(tmp_path):
    from perfwarden.auditor.audit import audit_path, write_verdict
    from perfwarden.proof.build_stats_cases import CASES, build as build_case

    run = tmp_path / "run"
    run.mkdir()
    claim = build_case(CASES["sta-replay-handicapped-baseline-hidden-latency"])(run)
    write_verdict(run, audit_path(run, claim))
    text = render(print_review, load_review(run))
    assert_fits(text)
    flat = " ".join(text.split())
    assert "witnesses base: LoadGen logs" in flat and "witnesses cand: LoadGen logs" in flat
    assert "asks: downgrade_headline + flag" in flat
    assert "why that figure: output_throughput +41." in flat and "same-config leg(s) 'twin'" in flat
