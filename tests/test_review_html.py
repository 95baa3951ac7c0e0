"""The HTML report as a file: self-contained, escaped, small; the backtest's HTML view."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_review_cases import EVIL, add_bundle, build_demo_run, build_variant
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.orchestrator.paths import default_fixture_roots
from perfwarden.orchestrator.review.model import load_review
from perfwarden.orchestrator.review.report_html import MAX_EVIDENCE_SHOWN, render_review_html
from perfwarden.verify.backtest import find_fixtures, run_backtest
from perfwarden.verify.backtest_html import render_backtest_html

runner = CliRunner()
SVG_NS = "http://www.w3.org/2000/svg"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    run = build_demo_run(tmp_path_factory.mktemp("html") / "run")
    add_bundle(run)
    return run


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of script elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


def assert_self_contained(page: str) -> None:
    tags = parse(page)
    names = {t for t, _ in tags.tags}
    assert not names & {"link", "img", "iframe", "object", "embed", "base", "form", "video", "audio", "source"}
    for tag, attrs in tags.tags:
        assert "src" not in attrs, f"<{tag}> loads {attrs['src']!r}"
        href = attrs.get("href")
        assert href is None or href.startswith("#"), f"<{tag}> links to {href!r}"
    assert not re.search(r"url\(", page), "CSS must not reference any URL"
    # URLs may appear as escaped text (a recorded error message names the server it failed to reach);
    # no attribute may hold one but the SVG namespace.
    attr_urls = {v for _, attrs in tags.tags for v in attrs.values() if v and re.match(r"https?://", v)}
    assert attr_urls <= {SVG_NS}, f"only the SVG namespace may be a URL attribute: {attr_urls!r}"
    assert len(tags.scripts) == 1, "exactly one (inline) script"
    csp = next(a["content"] for t, a in tags.tags if t == "meta" and a.get("http-equiv") ==
               "Content-Security-Policy")
    assert "default-src 'none'" in csp
    digest = base64.b64encode(hashlib.sha256(tags.scripts[0].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp, "the CSP must allow exactly the inline script"


def test_review_html_is_one_self_contained_escaped_file(demo, tmp_path):
    out = tmp_path / "report.html"
    r = runner.invoke(app, ["review", str(demo), "--html", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text("utf-8")
    assert_self_contained(page)
    assert EVIL not in page, "hostile text reached the markup unescaped"
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    # the sections the reviewer needs
    for needle in ('class="timeline"', "verdict trail", "banked results by lever class", "findings by gate and scope",
                   "per-leg rep distributions", "server_info diff (from the verdict)",
                   "server_info of the legs", "lever decomposition (bundle components)", 'id="filters"'):
        assert needle in page, needle
    # claimed vs re-derived headline, the action, evidence with sha256 and the re-read check
    assert "headline re-derived" in page and "+10.00%" in page and "downgrade_headline" in page
    assert "sha256 matches the line in the run" in page
    assert "never_accepted" in page and "no patch verdict in this run" in page
    assert page.count("<svg") >= 1 + 3 * 3  # a timeline and throughput/TTFT/TPOT for the A/B verdicts


def test_plots_mark_reps_medians_and_band(demo):
    page = render_review_html(load_review(demo))
    card = page[page.index('id="v1-002-patch"'):page.index('id="v2-003-patch"')]
    plot = card[card.index("<svg"):card.index("</svg>")]
    assert plot.count('class="dot"') == 10, "one dot per rep, 5 reps per leg"
    assert plot.count('class="median"') == 2 and 'class="band"' in plot and 'class="center"' in plot


def test_evidence_quotes_show_a_line_that_changed_since_the_audit(demo, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(demo, run)
    info = run / "legs" / "evil" / "server_info.json"
    info.write_text(info.read_text().replace("window.__pwned=1", "window.__pwned=2"))
    page = render_review_html(load_review(run))
    assert "the line in the run no longer matches the recorded sha256" in page


def test_a_pathological_verdict_stays_small(demo, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(demo, run)
    path = run / "verdicts" / "004-patch.json"
    verdict = json.loads(path.read_text())
    verdict["findings"][0]["evidence"] *= 5000
    path.write_text(json.dumps(verdict))
    page = render_review_html(load_review(run))
    assert page.count('class="evidence"') < 4 * MAX_EVIDENCE_SHOWN + 20
    assert "more evidence line(s)" in page and len(page) < 1_000_000


def test_compare_html_has_the_paired_view_and_both_runs(demo, tmp_path):
    other = build_variant(tmp_path / "b")
    out = tmp_path / "cmp.html"
    r = runner.invoke(app, ["review", str(demo), "--compare", str(other), "--html", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text("utf-8")
    assert_self_contained(page)
    assert 'id="comparison"' in page and "paired comparison" in page
    assert "run A: demo" in page and "run B: demo-rerun" in page
    assert "A:cand (candidate)" in page and "B:cand (candidate)" in page
    assert 'id="av3-004-patch"' in page and 'id="bv3-004-patch"' in page


@pytest.mark.slow
def test_backtest_html_shows_expected_vs_actual_with_drill_down(tmp_path):
    roots = default_fixture_roots()
    report = run_backtest(roots)
    assert all(r.verdict_record is not None for r in report.results)
    assert "verdict_record" not in json.dumps(report.to_json(), default=str)
    runs = {f.name: f / "run" for f in find_fixtures(roots)}
    page = render_backtest_html(report, runs)
    assert_self_contained(page)
    for r in report.results:
        assert r.fixture in page
    card = page[page.index("geak-i1-specdecode</b>"):]
    card = card[:card.index("</details>")]
    assert "ORTHOGONAL_LEVER" in card and "legs/cand/bench_runs.jsonl:" in card
    assert "sha256 matches the line in the run" in card


def test_backtest_cli_writes_html(tmp_path):
    out = tmp_path / "bt.html"
    fixture = find_fixtures(default_fixture_roots())[0]
    r = runner.invoke(app, ["backtest", str(fixture), "--no-mlperf", "--html", str(out)])
    assert r.exit_code in (0, 1), r.output
    assert fixture.name in out.read_text("utf-8")


def test_orchestrator_steps_are_listed_escaped(demo, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(demo, run)
    hostile = "<img src=x onerror=alert(1)>"
    (run / "events.jsonl").write_text(json.dumps({"node": "baseline", "duration_s": 1.5, "error": None}) + "\n"
                                      + json.dumps({"node": hostile, "duration_s": 0.2, "error": "boom"}) + "\n"
                                      + "{torn\n")
    review = load_review(run)
    page = render_review_html(review)
    assert "orchestrator steps (events.jsonl)" in page and hostile not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert any("1 line(s) are not JSON" in n for n in review.notes)
    assert_self_contained(page)


def test_a_verdict_shows_its_witnesses_and_its_fairer_reference(tmp_path):
    """A handicapped baseline's verdict: each leg's reps, the noise band, and the same-config legs as the
    fairer reference (a row of their reps, a dotted level, its band); the witnesses per leg; the why of the
    banked figure. (A leg name that is not a plain name is never a same-config leg: nothing of it is drawn.)"""
    from perfwarden.auditor.audit import audit_path, write_verdict
    from perfwarden.proof.build_stats_cases import CASES, build as build_case

    run = tmp_path / "run"
    run.mkdir()
    claim = build_case(CASES["sta-replay-handicapped-baseline-hidden-latency"])(run)
    write_verdict(run, audit_path(run, claim))
    page = render_review_html(load_review(run))
    assert_self_contained(page)
    card = page[page.index("<details"):]
    plot = card[card.index("<svg"):card.index("</svg>")]
    assert 'class="reference"' in plot and 'class="band-ref"' in plot and 'class="band"' in plot
    assert "same-config legs (fairer ref.)" in plot and plot.count('class="dot"') == 9  # 3 reps x base, cand, twins
    assert "what was checked: second witnesses per leg" in card and "LoadGen logs" in card
    assert "why that figure" in card and "downgrade_headline + flag" in card
