"""Issue 16 item 6: a review streams its verdicts; memory is flat in their number.

A trail longer than ``model.KEEP`` is summarized: counts, gate table and banked results cover every
verdict, only the ``KEEP`` most severe are held whole, every view says how many were left out, and
the exports still list every verdict (read again one at a time).
"""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.formats.records import EvidenceRef, Finding, Verdict
from perfwarden.orchestrator.review import model
from perfwarden.orchestrator.review.report_html import render_review_html
from perfwarden.orchestrator.review.summary import banked

runner = CliRunner()
KEEP = 20


def _verdict(seq: int) -> Verdict:
    """Odd seqs PASS, even seqs FAIL with findings citing a missing log line (each verdict ~3 KB)."""
    if seq % 2:
        return Verdict(scope="patch", claim=f"claims/{seq:04d}-patch.json", claim_seq=seq, verdict="PASS",
                       action="pass", headline_rederived=1.0 + seq / 1000, seal="sealed")
    findings = [Finding(code="CACHING_SUSPECTED", severity="FAIL", gate="caching", message="x" * 400,
                        evidence=[EvidenceRef(file="legs/a/server.log", line=k + 1)]) for k in range(3)]
    return Verdict(scope="patch", claim=f"claims/{seq:04d}-patch.json", claim_seq=seq, verdict="FAIL",
                   action="eject", findings=findings)


def _trail(root: Path, n: int) -> Path:
    (root / "verdicts").mkdir(parents=True)
    for seq in range(1, n + 1):
        (root / "verdicts" / f"{seq:04d}-patch.json").write_text(_verdict(seq).model_dump_json(), "utf-8")
    return root


@pytest.fixture
def keep(monkeypatch):
    monkeypatch.setattr(model, "KEEP", KEEP, raising=False)
    return KEEP


def _peak_loading(root: Path) -> int:
    tracemalloc.start()
    try:
        review = model.load_review(root)
        render_review_html(review)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_long_trail_is_summarized_whole_and_detailed_in_part(tmp_path, keep):
    root = _trail(tmp_path / "run", 90)
    review = model.load_review(root)
    assert len(review.entries) == keep and review.omitted == 90 - keep
    assert all(e.verdict.verdict == "FAIL" for e in review.entries)  # the most severe are the ones held
    assert [e.verdict.claim_seq for e in review.entries] == list(range(2, 2 * keep + 1, 2))
    assert review.summary.counts == {"PASS": 45, "FAIL": 45}
    assert review.summary.gate_rows()[0][2]["FAIL"] == 45 * 3
    items = banked(review).items
    assert len(items) == 45 and all(i.entry.verdict == "PASS" for i in items)  # none of them held whole
    assert any("70 are left out" in note for note in review.notes)
    page = render_review_html(review)
    assert page.count('<details class="block card"') == keep and "70 are left out" in page
    out = runner.invoke(app, ["review", str(root)], terminal_width=200)
    assert out.exit_code == 0 and "90 verdict(s)" in out.output and "70 less severe verdict(s) left out" in out.output


def test_exports_list_every_verdict_of_a_long_trail(tmp_path, keep):
    root = _trail(tmp_path / "run", 60)
    out = runner.invoke(app, ["review", str(root), "--format", "json"])
    assert out.exit_code == 0
    doc = json.loads(out.output)
    assert [v["verdict"]["claim_seq"] for v in doc["verdicts"]] == list(range(1, 61))
    out = runner.invoke(app, ["review", str(root), "--format", "csv"])
    rows = list(csv.reader(io.StringIO(out.output)))
    assert len(rows) == 1 + 30 + 30 * 3  # header, one row per PASS, one per finding of each FAIL
    out = runner.invoke(app, ["review", str(root), "--format", "md"])
    assert out.output.count("| CACHING_SUSPECTED |") == 90


def test_review_memory_is_flat_in_the_number_of_verdicts(tmp_path, keep):
    """Three times the verdicts, about the same peak (it grew with every verdict held whole)."""
    small = _peak_loading(_trail(tmp_path / "small", 60))
    large = _peak_loading(_trail(tmp_path / "large", 180))
    assert large < 1.5 * small, (small, large)
