"""Issue 16 §3: report.md escapes every string that came from the run.

Text from the checkpoint (notes, proposal ids and histories, knob values, leg names, claim and verdict
paths, finding codes) reached report.md raw: a forged "## Banked +900%" heading, ``<script>``,
``<img onerror>``, markdown links, OSC/BEL/ANSI bytes. The report now goes through the one markdown
escaper the review's export uses (``render.md_cell``). Before the fix both tests failed: the planted
heading, HTML, link and control bytes were in report.md as written.
"""

from __future__ import annotations

import json
import re
import sqlite3
import unicodedata
from itertools import cycle
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.orchestrator.report import build_report, render_markdown
from perfwarden.orchestrator.report_record import LLMUsage
from perfwarden.orchestrator.review.search_plot import clean_rows, history_svg
from perfwarden.orchestrator.runner import THREAD_ID, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab

PAYLOADS = ["## Banked +900%", "\n# forged heading", "\r## forged heading", "<script>alert(1)</script>",
            "<img src=x onerror=alert(1)>", "[click](http://evil.example/x)", "![i](https://evil.example/i.png)",
            "https://evil.example/auto", "www.evil.example", "mail@evil.example", "| forged | row |",
            "`code` **bold**", "\x1b]0;owned\x07\x1b[31mRED\x1b[0m", "\x9b2K\u202eevil", "<!-- hide -->"]
MAPPING_FIELDS = {"against", "set", "disclosed_regressions", "fallbacks", "op_overrides", "history"}


def without_own_plot(md: str, rows: Any) -> str:
    """report.md less its one own HTML: the search history's SVG, which must be exactly what
    ``history_svg`` draws from the report's rows (numbers only: no text of the run reaches it)."""
    expected = history_svg(clean_rows(rows))
    lines = md.splitlines()
    plots = [line for line in lines if line.startswith("<svg")]
    assert plots == ([expected] if expected else []), "report.md holds HTML other than its own plot"
    return "\n".join(line for line in lines if not line.startswith("<svg"))


def assert_inert(md: str) -> None:
    """Nothing the run supplied is markdown or HTML: no forged heading, link, autolink, HTML, code span,
    table pipe or control character (the report's own text uses none of these but its headings; its own
    plot is checked and taken out first, ``without_own_plot``)."""
    for line in md.splitlines():
        if re.match(r"^\s*(?:[-*+]\s+)*#", line):
            assert "forged" not in line and "900" not in line, line
    assert "<" not in md, "raw HTML"
    for pattern in (r"(?<!\\)\[", r"(?<!\\)`", r"(?<!\\)://", r"(?<!\\)@", r"(?i)www\.", r"(?<!\\)\| forged"):
        assert not re.search(pattern, md), (pattern, re.search(pattern, md))
    controls = {repr(c) for c in md if unicodedata.category(c) in ("Cc", "Cf") and c != "\n"}
    assert not controls, controls


@pytest.fixture
def finished(tmp_path) -> tuple[Path, dict[str, Any]]:
    run = tmp_path / "run"
    state = run_graph(run, RunSettings(target="synthetic", levers=["max_batch_size"], kernels=False), SyntheticLab())
    return run, state


def test_notes_planted_in_the_checkpoint_reach_the_report_escaped(finished):
    """The probe's path: a finished run's checkpoint gains notes; ``run --resume`` rewrites the
    missing report from it."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from perfwarden.orchestrator.graph import build_graph

    run, _ = finished
    with sqlite3.connect(run / "checkpoints.sqlite", check_same_thread=False) as conn:
        graph = build_graph().compile(checkpointer=SqliteSaver(conn))
        graph.update_state({"configurable": {"thread_id": THREAD_ID}}, {"notes": PAYLOADS}, as_node="report")
    conn.close()
    (run / "report.md").unlink()
    (run / "report.json").unlink()
    result = CliRunner().invoke(app, ["run", "--resume", str(run)])
    assert result.exit_code == 0, result.output[-2000:]
    md = (run / "report.md").read_text("utf-8")
    assert "## Notes" in md and "Banked +900%" in md  # the note is there, as text
    rows = json.loads((run / "report.json").read_text("utf-8"))["search_history"]
    assert rows  # the plot is there to be checked
    assert_inert(without_own_plot(md, rows))


def _plant(value: Any, payloads, key: str = "") -> Any:
    """Every string of the report (and the keys of the maps the run names: knobs, metrics, ops) with a
    payload appended."""
    if isinstance(value, str):
        return value + next(payloads)
    if isinstance(value, list):
        return [_plant(v, payloads, key) for v in value]
    if isinstance(value, dict):
        return {(_plant(k, payloads) if key in MAPPING_FIELDS else k): _plant(v, payloads, k) for k, v in value.items()}
    return value


def test_every_string_of_the_run_is_escaped_in_the_report(finished):
    """Claim and verdict paths, leg and change names, knob names and values, codes, histories, the LLM's
    model and fallbacks, the run directory: each carries a payload, none is interpreted."""
    run, state = finished
    report = build_report(state, SyntheticLab().base_config(),
                          llm_usage=LLMUsage(model="m", calls=1, prompt_tokens=1, completion_tokens=1,
                                             invalid_outputs=0, unavailable=0,
                                             fallbacks={"tuner": 1})).model_dump(mode="json")
    assert report["search_path"] and report["banked"] and report["final_configuration"]
    planted = _plant(report, cycle(PAYLOADS))
    md = render_markdown(planted)
    assert md.count("Banked +900%") >= 3  # the payloads are there, as text: every kind of them
    assert all(marker in md for marker in ("forged heading", "alert(1)", "onerror", "click", "evil.example", "row",
                                           "bold", "owned", "RED", "evil", "hide"))
    assert_inert(without_own_plot(md, planted["search_history"]))
