"""What a finished run's report and claims must say of its objective: shared by the end-to-end runs."""

from __future__ import annotations

import json
from pathlib import Path

from perfwarden.formats.slo import parse_slo


def assert_goodput_headlines(run: Path, report: dict, slo_arg: str) -> None:
    """The run sealed the goodput objective at the SLO ``--slo slo_arg`` names, and every A/B step (patch, bundle) claimed and was
    judged on request goodput at that SLO, with a re-derived figure."""
    slo = parse_slo(slo_arg).model_dump()
    assert report["objective"]["objective"] == "goodput" and report["objective"]["metric"] == "request_goodput"
    assert report["objective"]["slo"] == {k: v for k, v in slo.items() if v is not None}  # the report omits unset bounds
    steps = [v for v in report["verdicts"] if v["scope"] in ("patch", "bundle")]
    assert steps, "no A/B step was judged"
    for verdict in steps:
        headline = json.loads((run / verdict["claim"]).read_text())["headline"]
        assert (headline["metric"], headline["slo"]) == ("request_goodput", slo), verdict["claim"]
        assert verdict["headline_metric"] == "request_goodput", verdict["claim"]
    sealed = [json.loads(line) for line in (run / "evidence.jsonl").read_text().splitlines()]
    assert any(e.get("file") == "objective.json" for e in sealed)
