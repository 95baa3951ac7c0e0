"""The review's pure parts: evidence re-reading, banked rules, pairing, exports, SVG helpers."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import pytest
from test_report_record import banked_entry
from test_review_cases import EVIL, add_bundle, build_demo_run
from typer.testing import CliRunner

from perfwarden.agents.base import BankedChange
from perfwarden.cli.main import app
from perfwarden.formats.records import EvidenceRef, Finding, Verdict
from perfwarden.orchestrator.review.compare import pair_entries
from perfwarden.orchestrator.review.evidence import LineReader
from perfwarden.orchestrator.review.export import csv_safe, md_cell
from perfwarden.orchestrator.review.model import VerdictEntry, load_review
from perfwarden.orchestrator.review.model import is_banked
from perfwarden.orchestrator.review.summary import match_report_item
from perfwarden.orchestrator.review.svg import Row, downsample, nice_ticks, strip_plot

runner = CliRunner()


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    run = build_demo_run(tmp_path_factory.mktemp("data") / "run")
    add_bundle(run)
    return run


# ------------------------------------------------------------------------------------ evidence


def ref_for(path: Path, run: Path, line: int, text: bytes) -> EvidenceRef:
    return EvidenceRef(file=str(path.relative_to(run)), line=line, sha256=hashlib.sha256(text).hexdigest())


def test_evidence_line_is_reread_and_its_hash_checked(tmp_path):
    f = tmp_path / "legs" / "a" / "bench_runs.jsonl"
    f.parent.mkdir(parents=True)
    f.write_bytes(b'{"rep":0}\n{"rep":1}\n{"rep":2}\n')
    reader = LineReader(tmp_path)
    q = reader.quote(ref_for(f, tmp_path, 2, b'{"rep":1}'))
    assert (q.status, q.excerpt, q.location) == ("verified", '{"rep":1}', "legs/a/bench_runs.jsonl:2")
    f.write_bytes(b'{"rep":0}\n{"rep":9}\n{"rep":2}\n')
    assert LineReader(tmp_path).quote(ref_for(f, tmp_path, 2, b'{"rep":1}')).status == "changed"
    assert LineReader(tmp_path).quote(ref_for(f, tmp_path, 4, b"x")).status == "missing"
    assert LineReader(tmp_path).quote(EvidenceRef(file="../../etc/passwd", line=1, excerpt="e")).status == "outside"
    gone = LineReader(tmp_path).quote(EvidenceRef(file="legs/b/x.jsonl", line=1, excerpt="kept"))
    assert (gone.status, gone.excerpt) == ("missing", "kept")


def test_text_file_lines_are_numbered_as_the_auditor_numbers_them(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"one\r\ntwo\x0cstill two?\nthree\n")
    lines = log.read_bytes().decode().splitlines()
    reader = LineReader(tmp_path)
    for i, text in enumerate(lines, 1):
        q = reader.quote(EvidenceRef(file="server.log", line=i, sha256=hashlib.sha256(text.encode()).hexdigest()))
        assert q.status == "verified", (i, text)


def test_a_line_after_multi_mb_lines_is_found_and_excerpted(tmp_path):
    f = tmp_path / "bench_runs.jsonl"
    big = b'{"ttfts":[' + b"0.1," * 2_000_000 + b'0.1]}'
    with open(f, "wb") as handle:
        for _ in range(6):
            handle.write(big + b"\n")
        handle.write(b'{"last":true}\n')
    q = LineReader(tmp_path).quote(ref_for(f, tmp_path, 7, b'{"last":true}'))
    assert q.status == "verified"
    q = LineReader(tmp_path).quote(ref_for(f, tmp_path, 3, big))
    assert q.status == "verified" and len(q.excerpt) == 200


# -------------------------------------------------------------------------------------- banked


def entry(verdict: str, action: str, seq: int = 1, scope: str = "patch", seal: str = "sealed") -> VerdictEntry:
    """A verdict as the auditor writes one: a FLAG or FAIL holds the finding that asks for its action."""
    asks = [] if verdict == "PASS" else [Finding(code="REPORTED_MISMATCH", severity=verdict, message="m", action=action)]
    return VerdictEntry(Verdict(scope=scope, claim=f"claims/{seq:03d}-{scope}.json", claim_seq=seq, verdict=verdict,
                                action=action, findings=asks, seal=seal), f"verdicts/{seq:03d}-{scope}.json")


@pytest.mark.parametrize("verdict,action,banked", [
    ("PASS", "pass", True), ("FLAG", "downgrade_headline", True), ("FLAG", "replace_headline_with_e2e", False),
    ("FLAG", "remeasure", False), ("FLAG", "flag", False), ("FAIL", "eject", False)])
def test_banked_rule(verdict, action, banked):
    assert is_banked(entry(verdict, action)) is banked
    assert is_banked(entry(verdict, action, seal="unsealed")) is False  # issue 17 §8: never on unsealed evidence


def test_a_verdict_file_without_a_seal_field_is_read_as_unsealed():
    """A verdict written before the field existed cannot show that its evidence was sealed."""
    old = Verdict.model_validate({"scope": "patch", "claim": "claims/001-patch.json", "verdict": "PASS",
                                  "action": "pass"})
    assert (old.seal, old.shown) == ("unsealed", "PASS (unsealed)")


def test_report_items_match_by_their_verdict_file():
    entries = [entry("PASS", "pass", 1), entry("FAIL", "eject", 2)]
    assert match_report_item(BankedChange.model_validate(banked_entry(2, "x")), entries) is entries[1]
    assert match_report_item(BankedChange.model_validate(banked_entry(1, "x")), entries) is entries[0]
    assert match_report_item(BankedChange.model_validate(banked_entry(3, "x")), entries) is None


def test_pairing_by_key_then_scope():
    a = [entry("PASS", "pass", 1), entry("FAIL", "eject", 2), entry("PASS", "pass", 3, "baseline")]
    b = [entry("FLAG", "flag", 2), entry("PASS", "pass", 7)]
    pairs = pair_entries(a, b)
    assert [(p.a.key if p.a else None, p.b.key if p.b else None) for p in pairs] == [
        ("002-patch", "002-patch"), ("001-patch", "007-patch"), ("003-baseline", None)]


# -------------------------------------------------------------------------------------- exports


def test_json_export_carries_every_verdict_and_the_banked_list(demo):
    r = runner.invoke(app, ["review", str(demo), "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [v["key"] for v in data["verdicts"]] == ["001-baseline", "002-patch", "003-patch", "004-patch",
                                                     "005-bundle"]
    assert Verdict.model_validate(data["verdicts"][3]["verdict"]).verdict == "FAIL"
    # Only patch claims bank a change (auditor/banking.py): the run never banks its baseline.
    assert {i["verdict_key"] for i in data["banked"]["items"]} == {"002-patch", "003-patch"}


def test_csv_export_has_one_row_per_finding(demo):
    r = runner.invoke(app, ["review", str(demo), "--format", "csv"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    review = load_review(demo)
    expected = sum(max(len(e.verdict.findings), 1) for e in review.entries)
    assert len(rows) == expected
    fail = [row for row in rows if row["code"] == "CONDITIONS_DIFFER" and row["claim"] == "004-patch"]
    assert fail and "legs/evil/server_info.json:" in fail[0]["evidence"]


def test_csv_neutralizes_formulas_but_keeps_numbers():
    assert csv_safe("=HYPERLINK(\"http://x\")") == "'=HYPERLINK(\"http://x\")"
    assert csv_safe("@SUM(A1)") == "'@SUM(A1)"
    assert csv_safe("-3.5") == "-3.5" and csv_safe(-3.5) == -3.5 and csv_safe("plain") == "plain"


def test_markdown_export_escapes_html_and_table_syntax(demo):
    r = runner.invoke(app, ["review", str(demo), "--format", "md"])
    assert r.exit_code == 0, r.output
    assert "## Verdict trail" in r.stdout and "| 004-patch | patch | FAIL |" in r.stdout
    assert EVIL not in r.stdout and "&lt;script&gt;" in r.stdout
    assert md_cell("a|b\nc <i>") == "a\\|b c &lt;i&gt;"


def test_compare_exports(demo, tmp_path):
    other = build_demo_run(tmp_path / "b", cand_tput=[100.4, 99.8, 100.9, 100.2, 99.6], run_id="b")
    r = runner.invoke(app, ["review", str(demo), "--compare", str(other), "--format", "json"])
    assert r.exit_code == 0, r.output
    pairs = {p["key"]: p for p in json.loads(r.stdout)["pairs"]}
    assert pairs["002-patch"]["verdict"][0] == "PASS" and pairs["002-patch"]["verdict"][1] != "PASS"
    cand = next(m for m in pairs["002-patch"]["metrics"] if m["role"] == "candidate" and
                m["metric"] == "output_throughput")
    assert cand["change_pct"] == pytest.approx((100.2 / 110.1 - 1) * 100, rel=1e-3)
    r = runner.invoke(app, ["review", str(demo), "--compare", str(other), "--format", "csv"])
    assert r.stdout.splitlines()[0] == "claim,verdict_a,verdict_b,role,metric,a,b,change_pct"


# ------------------------------------------------------------------------------------------ svg


def test_downsample_keeps_extremes_and_size():
    values = [float(i) for i in range(100_000)]
    out = downsample(values, 200)
    assert len(out) == 200 and out[0] == 0.0 and out[-1] == 99_999.0
    assert downsample([3.0, float("nan"), 1.0]) == [3.0, 1.0]


def test_nice_ticks_cover_the_range():
    ticks = nice_ticks(97.3, 112.8)
    assert ticks[0] >= 97.3 and ticks[-1] <= 112.8 and len(ticks) >= 3
    assert nice_ticks(5.0, 5.0) == [5.0]


def test_strip_plot_escapes_labels_and_downsamples():
    svg = strip_plot("t<i>", [Row("<b>leg</b>", [float(i) for i in range(5000)], 2500.0)], band=(2400, 2600),
                     center=2500.0)
    assert "<b>" not in svg and "&lt;b&gt;leg&lt;/b&gt; (200 of 5000)" in svg
    assert svg.count("<circle") == 200


def test_strip_plot_ignores_non_finite_numbers():
    nan, inf = float("nan"), float("inf")
    svg = strip_plot("t", [Row("a", [1.0, nan, 2.0, inf], nan), Row("b", [], None)], band=(nan, 2.0), center=nan)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    assert svg.count("<circle") == 2
