"""``perfwarden audit`` (and ``audit-mlperf``) for a person at 80 columns: each finding a block.

What is asserted, for real verdicts of recorded fixtures (``proof/fixtures``) rendered at width 80:

- no output line is wider than 80 cells;
- every finding of the verdict appears, in order, as a block whose head line starts at column 2 with its
  severity and code; the head takes at most three lines;
- the block's body (column 6) starts with the finding's message as one paragraph: its lines, joined,
  are the whole message (nothing cut), however many lines that takes;
- after the message come only labelled fields, ``measured``, ``threshold`` and ``evidence``, each at
  most three lines (a label line and its continuations under the value column);
- ``--json`` stays the verdict record as the auditor wrote it.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from perfwarden.auditor import mlperf
from perfwarden.auditor.audit import audit_path
from perfwarden.cli.main import app
from perfwarden.cli.mlperf import render as render_mlperf
from perfwarden.formats.records import EvidenceRef, Finding, Verdict
from perfwarden.orchestrator.render import printable, print_verdict

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "proof" / "fixtures"
WIDTH = 80
FIELD_LINES = 3
HEAD = re.compile(r"^  (INFO|FLAG|FAIL) (\S+)")
FIELD = re.compile(r"^ {6}(measured|threshold|evidence) ")
VALUE_COLUMN = 16
"""Where a field's value starts: the body's indent (6) plus the widest label, ``threshold``, and a space."""

LONG = {
    "rec-prompt-lookup-as-kernel": "a 5,548-character message (the lever gate's signals), seven findings",
    "cond-engine-differs": "a 538-character threshold",
    "explore-loadgen_detail-result_samples_per_second-scale-8d8d5fc7": "three evidence lines, long measured values",
}
"""Real fixtures whose verdicts hold the longest messages, values and evidence lists of the corpus."""

runner = CliRunner()


@dataclass
class Block:
    severity: str
    code: str
    head_lines: int = 1
    body: list[str] = field(default_factory=list)


def finding_blocks(text: str) -> list[Block]:
    """The finding blocks of a rendered verdict: a head at column 2, its continuations, then the body
    lines at column 6 or deeper, up to the next head or the first line less indented."""
    blocks: list[Block] = []
    current: Block | None = None
    for line in text.splitlines():
        head = HEAD.match(line)
        if head:
            current = Block(head.group(1), head.group(2))
            blocks.append(current)
        elif current is not None and line.startswith(" " * 6):
            current.body.append(line)
        elif current is not None and line.startswith("  ") and not line.startswith("   ") and not current.body:
            current.head_lines += 1
        else:
            current = None
    return blocks


def squeeze(text: str) -> str:
    return "".join(text.split())


def check_block(block: Block, finding: Finding) -> None:
    """The block is this finding: its message whole as a paragraph, then fields of at most three lines."""
    assert (block.severity, block.code) == (finding.severity, printable(finding.code))
    assert block.head_lines <= FIELD_LINES, f"{block.code}: head wrapped into {block.head_lines} lines"
    message = squeeze(printable(finding.message))
    lines, taken = block.body, 0
    while taken < len(lines) and len(squeeze("".join(lines[:taken]))) < len(message):
        taken += 1
    assert squeeze("".join(lines[:taken])) == message, f"{block.code}: the message is not shown whole"
    fields: list[list[str]] = []
    for line in lines[taken:]:
        if FIELD.match(line):
            fields.append([line])
        else:
            assert fields and line.startswith(" " * VALUE_COLUMN), f"{block.code}: stray line {line!r}"
            fields[-1].append(line)
    labels = [f[0].split()[0] for f in fields]
    expected = (["measured", "threshold"] if finding.measured is not None or finding.threshold is not None
                else []) + (["evidence"] if finding.evidence else [])
    assert labels == expected, f"{block.code}: fields {labels}, expected {expected}"
    for lines_of_field in fields:
        assert len(lines_of_field) <= FIELD_LINES, f"{block.code}: a field over three lines: {lines_of_field!r}"


def check_rendering(text: str, findings: list[Finding]) -> None:
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not wide, f"{len(wide)} line(s) wider than {WIDTH}: {wide[:2]!r}"
    blocks = finding_blocks(text)
    assert [b.code for b in blocks] == [printable(f.code) for f in findings]
    for block, finding in zip(blocks, findings):
        check_block(block, finding)


def rendered(verdict: Verdict, width: int = WIDTH) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    print_verdict(verdict, console)
    return console.export_text()


def fixture_verdict(name: str) -> tuple[Verdict, Path, Path]:
    run = FIXTURES / name / "run"
    claim = run / json.loads((FIXTURES / name / "answer_key.json").read_text())["answers"][0]["claim"]
    return audit_path(run, claim), run, claim


@pytest.mark.parametrize("name", sorted(LONG))
def test_a_real_verdict_reads_as_finding_blocks_at_80_columns(name):
    verdict, run, claim = fixture_verdict(name)
    assert verdict.findings
    result = runner.invoke(app, ["audit", str(run), "--claim", str(claim)], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code in (10, 20), result.output
    check_rendering(result.output, verdict.findings)


def test_the_longest_real_message_is_one_paragraph_and_the_rest_stays_short():
    verdict, _, _ = fixture_verdict("rec-prompt-lookup-as-kernel")
    longest = max(verdict.findings, key=lambda f: len(f.message))
    assert len(longest.message) > 5000  # the fixture still holds what this test is about
    text = rendered(verdict)
    check_rendering(text, verdict.findings)
    block = next(b for b in finding_blocks(text) if b.code == longest.code)
    assert len(block.body) > 60  # the message wraps as a paragraph, as long as it needs


def test_hostile_fields_take_at_most_three_lines_each_and_stay_text():
    """A forged verdict's every field at once: a 10,000-character gate, code-sized junk, an evidence file
    name of 10,000 characters, a measured value of 2,000 keys, escape sequences everywhere."""
    verdict, _, _ = fixture_verdict("rec-prompt-lookup-as-kernel")
    escape = "\x1b]0;pwned\x07\x1b[2J\u202e"
    forged = verdict.findings[0].model_copy(update={
        "gate": "g" * 10_000 + escape, "action": "eject",
        "message": "word " * 400 + escape + "tail",
        "measured": {f"k{i}": "v" * 20 for i in range(2_000)},
        "threshold": "t" * 10_000 + escape,
        "evidence": [EvidenceRef(file="legs/" + "deep/" * 2_000 + "server.log" + escape, line=7)] * 5})
    verdict = verdict.model_copy(update={"findings": [forged, *verdict.findings[1:]], "claim": "c" * 5_000 + escape})
    text = rendered(verdict)
    check_rendering(text, verdict.findings)
    assert "\x1b" not in text and "\\x1b]0;pwned" in text
    first = finding_blocks(text)[0]
    evidence = [line for line in first.body if line.startswith("      evidence ")]
    assert evidence and evidence[0].rstrip().endswith("server.log\\x1b]0;pwned\\x07\\x1b[2J\\u202e:7"), (
        "a clipped path keeps its end: the file name and the line number")
    assert any("… and 3 more" in line for line in first.body)  # two of five shown, and a count
    header = text.splitlines()[:FIELD_LINES + 1]
    assert not header[FIELD_LINES].startswith("c"), "the claim name took more than three lines"


def test_json_output_is_the_verdict_record(tmp_path):
    verdict, run, claim = fixture_verdict("cond-engine-differs")
    result = runner.invoke(app, ["audit", str(run), "--claim", str(claim), "--json"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code in (10, 20)
    assert result.stdout == json.dumps(json.loads(verdict.model_dump_json()), indent=2, ensure_ascii=True) + "\n"


def test_audit_mlperf_findings_read_as_blocks_at_80_columns():
    case = ROOT / "proof" / "mlperf_fixtures" / "cases" / "mlf-t04-server-coalesce"
    verdict = mlperf.audit(case / "reference", case / "compliance", None)
    console = Console(file=io.StringIO(), width=WIDTH, record=True, color_system=None)
    render_mlperf(verdict, console)
    order = {"FAIL": 0, "FLAG": 1, "INFO": 2}
    check_rendering(console.export_text(), sorted(verdict.findings, key=lambda f: order[f.severity]))


def test_backtest_results_read_at_80_columns_with_disagreements_as_paragraphs(tmp_path):
    """A real fixture copied under a 200-character hostile name, its answer changed so that the auditor
    disagrees: the result's names take at most two lines, each disagreement is shown whole."""
    from perfwarden.cli.backtest import print_report
    from perfwarden.verify.backtest import run_backtest

    name = "fx-" + "long-fixture-name-" * 11 + "\x1b[2J"
    fixture = tmp_path / name
    shutil.copytree(FIXTURES / "geak-i1-specdecode", fixture)
    key = json.loads((fixture / "answer_key.json").read_text())
    key["answers"][0].update(verdict="FAIL", action="eject", must_include=["ORTHOGONAL_LEVER", "UNKNOWN_KNOB"])
    (fixture / "answer_key.json").write_text(json.dumps(key))
    report = run_backtest([tmp_path])
    (result,) = report.results
    assert len(result.problems) >= 2
    console = Console(file=io.StringIO(), width=WIDTH, record=True, color_system=None)
    print_report(report, console)
    text = console.export_text()
    assert not [line for line in text.splitlines() if len(line) > WIDTH]
    assert "\x1b" not in text and "\\x1b[2J" in text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  no   fx-long-fixture-name-"))
    assert lines[start + 2].startswith("       expected FAIL  actual FLAG"), "the names took more than two lines"
    problems = " ".join(line.strip() for line in lines[start + 3:] if line.startswith("       "))
    for problem in result.problems:
        assert squeeze(printable(problem)) in squeeze(problems)
