"""The HTML reports driven in a real headless Chromium (Debian's /usr/bin/chromium via Playwright).

Asserted in the browser: no console error (CSP violations included), no network request other than
the file itself, hostile text rendered inert, the filters changing what is shown, the comparison
view and the backtest drill-down rendering. Screenshots go to the test's tmp dir; with
``PERFWARDEN_KEEP_SCREENSHOTS=1`` a few are also copied to ``tests/artifacts/screenshots/`` (that
folder ignores itself in git). Skipped, with the reason, where Chromium or Playwright is absent:
``scripts/install_browser.sh`` installs both (CI runs it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_review_cases import EVIL, add_bundle, build_demo_run, build_variant
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.orchestrator.paths import default_fixture_roots
from perfwarden.verify.backtest import find_fixtures, run_backtest
from perfwarden.verify.backtest_html import render_backtest_html

pytestmark = pytest.mark.integration  # headless Chromium per test

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KEEP_DIR = Path(__file__).parent / "artifacts" / "screenshots"
runner = CliRunner()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One persistent Chromium context with a fresh profile (Playwright takes the user data dir as
    an argument of launch_persistent_context, never from --user-data-dir in args)."""
    if not CHROMIUM.is_file():
        pytest.skip(f"{str(CHROMIUM)!r} is absent: run scripts/install_browser.sh to install Chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the 'playwright' package is not installed: run scripts/install_browser.sh")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    pw = sync_playwright().start()
    profile = tmp_path_factory.mktemp("chromium-profile")
    try:
        context = pw.chromium.launch_persistent_context(str(profile), executable_path=str(CHROMIUM), headless=True,
                                                        args=LAUNCH_ARGS, viewport={"width": 1280, "height": 900})
    except Exception as exc:  # noqa: BLE001 - a browser that cannot start is an environment problem
        pw.stop()
        pytest.skip(f"Chromium at {str(CHROMIUM)!r} did not start under Playwright: {exc}")
    requests: list[str] = []
    context.on("request", lambda req: requests.append(req.url))
    yield context, requests
    context.close()
    pw.stop()


class Opened:
    """A page with everything it logged and requested."""

    def __init__(self, browser, path: Path):
        context, self._requests = browser
        self._start = len(self._requests)
        self.errors: list[str] = []
        self.page = context.new_page()
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.url = path.resolve().as_uri()
        self.page.goto(self.url)
        self.page.wait_for_load_state("load")

    @property
    def requests(self) -> list[str]:
        return self._requests[self._start:]

    def assert_clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.requests == [self.url], f"network requests besides the file: {self.requests}"

    def shot(self, tmp_path: Path, name: str, selector: str | None = None, keep: bool = False,
             full_page: bool = False) -> Path:
        """Screenshot the viewport, the whole page or one element (for an element, the sticky filter
        bar is unstuck first so it does not cover the element)."""
        out = tmp_path / f"{name}.png"
        if selector:
            self.page.evaluate("document.getElementById('filters').style.position = 'static'")
            self.page.locator(selector).first.screenshot(path=str(out), timeout=10_000)
            self.page.evaluate("document.getElementById('filters').style.position = ''")
        else:
            self.page.screenshot(path=str(out), full_page=full_page)
        if keep and os.environ.get("PERFWARDEN_KEEP_SCREENSHOTS") == "1":
            KEEP_DIR.mkdir(parents=True, exist_ok=True)
            (KEEP_DIR / ".gitignore").write_text("*\n")
            shutil.copy(out, KEEP_DIR / out.name)
        return out

    def visible(self, selector: str) -> list[str]:
        """ids of the matching elements that are displayed."""
        return self.page.eval_on_selector_all(
            selector, "els => els.filter(e => e.offsetParent !== null || e.getClientRects().length).map(e => e.id)")

    def close(self) -> None:
        self.page.close()


@pytest.fixture(scope="module")
def demo_html(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("browser")
    run = build_demo_run(base / "run")
    add_bundle(run)
    out = base / "report.html"
    r = runner.invoke(app, ["review", str(run), "--html", str(out)])
    assert r.exit_code == 0, r.output
    return out


CARDS = ["v0-001-baseline", "v1-002-patch", "v2-003-patch", "v3-004-patch", "v4-005-bundle"]


def test_review_page_loads_clean_offline_and_renders_hostile_text_inert(browser, demo_html, tmp_path):
    o = Opened(browser, demo_html)
    try:
        o.assert_clean()
        assert o.page.evaluate("typeof window.__pwned") == "undefined"
        assert o.page.evaluate("document.scripts.length") == 1
        quoted = o.page.locator("#v3-004-patch .evidence pre").all_inner_texts()
        assert any(EVIL in q for q in quoted), "the hostile excerpt must be shown as text"
        assert o.page.locator("#f-count").inner_text() == "5 of 5 shown"
        assert o.visible(".card") == CARDS
        assert o.page.locator("svg.timeline .tl-node").count() == 5
        o.shot(tmp_path, "review-full", full_page=True)
        o.shot(tmp_path, "review-top", keep=True)
        o.shot(tmp_path, "review-timeline", "section.block:has(svg.timeline)", keep=True)
        o.shot(tmp_path, "review-fail-findings", "#v3-004-patch .finding", keep=True)
        o.page.evaluate("document.getElementById('v1-002-patch').open = true")  # PASS cards start closed
        o.shot(tmp_path, "review-plots", "#v1-002-patch .plots", keep=True)
        o.shot(tmp_path, "review-conditions", "#v3-004-patch table.si", keep=True)
    finally:
        o.close()


def test_filters_change_what_is_shown(browser, demo_html, tmp_path):
    o = Opened(browser, demo_html)
    page = o.page
    try:
        page.uncheck("#f-verdict-PASS")
        assert o.visible(".card") == ["v2-003-patch", "v3-004-patch", "v4-005-bundle"]
        assert page.locator("#f-count").inner_text() == "3 of 5 shown"
        assert page.locator("svg.timeline .tl-node.filtered-out").count() == 2
        assert page.locator("tbody tr[data-fi=row]:visible").count() == 3
        page.uncheck("#f-verdict-FLAG")
        assert o.visible(".card") == ["v3-004-patch", "v4-005-bundle"]
        o.shot(tmp_path, "filter-fail-only", keep=True)

        page.click("#f-reset")
        page.select_option("#f-scope", "bundle")
        assert o.visible(".card") == ["v4-005-bundle"]

        page.click("#f-reset")
        page.select_option("#f-codes", "ORTHOGONAL_LEVER")
        assert o.visible(".card") == ["v2-003-patch"]
        page.select_option("#f-codes", "CONDITIONS_DIFFER")
        assert o.visible(".card") == ["v3-004-patch", "v4-005-bundle"]
        codes = page.eval_on_selector_all("#v4-005-bundle .finding", "els => els.filter(e => e.getClientRects()"
                                          ".length).map(e => e.dataset.code)")
        assert codes and set(codes) == {"CONDITIONS_DIFFER"}, "findings of other codes must be hidden"
        o.shot(tmp_path, "filter-code", keep=False)

        page.click("#f-reset")
        assert o.visible(".card") == CARDS
        o.assert_clean()
    finally:
        o.close()


def test_comparison_view_renders(browser, demo_html, tmp_path):
    other = build_variant(tmp_path / "b")
    out = tmp_path / "compare.html"
    r = runner.invoke(app, ["review", str(demo_html.parent / "run"), "--compare", str(other), "--html", str(out)])
    assert r.exit_code == 0, r.output
    o = Opened(browser, out)
    try:
        o.assert_clean()
        assert o.page.locator("#comparison").is_visible()
        assert o.page.locator("#comparison .pair").count() == 5
        pair = o.page.locator("#pair1")
        assert "002-patch" in pair.locator("h3").inner_text()
        assert "DELTA_NOT_SIGNIFICANT" in pair.inner_text()
        assert pair.locator("svg.plot").count() == 3
        assert pair.locator("td.down").count() >= 1, "the slower rerun's candidate throughput is marked worse"
        o.page.select_option("#f-codes", "DELTA_NOT_SIGNIFICANT")
        assert o.visible(".card") == ["bv1-002-patch", "bv2-003-patch"]
        o.page.click("#f-reset")
        o.shot(tmp_path, "compare-pair", "#pair1", keep=True)
    finally:
        o.close()


def test_backtest_page_shows_expected_vs_actual_and_drills_down(browser, tmp_path):
    roots = default_fixture_roots()
    report = run_backtest(roots)
    out = tmp_path / "backtest.html"
    out.write_text(render_backtest_html(report, {f.name: f / "run" for f in find_fixtures(roots)}), "utf-8")
    o = Opened(browser, out)
    page = o.page
    try:
        o.assert_clean()
        n = len(report.results)
        assert page.locator("#f-count").inner_text() == f"{n} of {n} shown"
        page.select_option("#f-expected", "FAIL")
        expected = page.eval_on_selector_all(".card", "els => els.filter(e => e.getClientRects().length)"
                                             ".map(e => e.dataset.expected)")
        assert expected and set(expected) == {"FAIL"}
        page.click("#f-reset")
        index = next(i for i, r in enumerate(report.results) if r.fixture == "geak-i1-specdecode")
        card = page.locator(f"#case{index}")
        if card.get_attribute("open") is None:
            card.locator("summary").click()
        finding = card.locator(".finding[data-code=ORTHOGONAL_LEVER]")
        assert finding.is_visible()
        assert "legs/cand/bench_runs.jsonl:" in finding.inner_text()
        o.shot(tmp_path, "backtest-summary", "section.block", keep=True)
        o.shot(tmp_path, "backtest-drilldown", f"#case{index} .finding[data-code=ORTHOGONAL_LEVER]", keep=True)
    finally:
        o.close()
