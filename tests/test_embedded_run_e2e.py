"""The real path end to end: ``perfwarden run`` on the embedded target (real SmolLM2 on torch CPU,
real servers, real mlcommons-loadgen reps, SQLite checkpoints), restricted to two levers so it takes
a few minutes: batching must be banked as a class-B win and the response cache refused. The run optimizes
goodput at an SLO (``--objective goodput``): every step's headline is the re-derived goodput at the SLO the
run sealed; the README's first command (CI runs it) covers the throughput objective on this target. It starts from an
empty weights cache, as a new user's first run does (issue 18): the weights are converted inside the run
(about 30 s on an idle 2-core host), once, while the legs' servers start.

The machine is sampled for contention before the run (``machine_quiet``): on a busy machine the run's
reps would come back CONTENDED_LEG and nothing could be judged, so the test skips before it spends its
ten minutes, not after. A baseline noisier than the documented limit is measured once
(``--baseline-remeasures 0``): the re-measure loop is the graph's (``test_graph``), each re-measure costs
over a minute here, and the steps are judged on their own interleaved legs either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from machine_quiet import skip_if_contended
from run_objective import assert_goodput_headlines

pytestmark = [pytest.mark.e2e, pytest.mark.quiet, pytest.mark.slow, pytest.mark.timeout(900)]


# Loose enough that batching keeps every request within it on a 2-core host (an offline rep's last request
# waits ~7 s for its first token at batch size 1), so the step is judged on goodput, not on the SLO's edge.
SLO_ARG = "ttft_ms=60000,tpot_ms=2000"


def test_embedded_run_banks_batching_and_refuses_the_response_cache(tmp_path):
    skip_if_contended("a ten-minute embedded run")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "perfwarden.cli.main", "run", "--target", "embedded", "--out", str(run),
           "--levers", "max_batch_size=4,response_cache", "--no-kernels", "--budget-minutes", "12",
           "--baseline-remeasures", "0",
           "--objective", "goodput", "--slo", SLO_ARG]
    cache = tmp_path / "cache"  # empty: the first-run path, every time
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=880,
                          env={**os.environ, "PERFWARDEN_CACHE": str(cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    converted = [d for d in (cache / "models").iterdir()]
    assert len(converted) == 1 and (converted[0] / "perfwarden_conversion.json").is_file()  # once, nothing left over
    report = json.loads((run / "report.json").read_text())
    verdicts = {v["claim"]: v for v in report["verdicts"]}
    contended = [v for v in verdicts.values() if any(f["code"] == "CONTENDED_LEG" for f in v["findings"])]
    if contended:  # the machine got busy during the run: the auditor must refuse, and we cannot judge more
        assert all(v["verdict"] != "PASS" for v in contended)
        pytest.skip(f"the machine was contended during the run ({len(contended)} verdicts say so)")
    banked = {b["name"]: b for b in report["banked"]}
    assert "cfg-max_batch_size=4" in banked and banked["cfg-max_batch_size=4"]["lever_class"] == "B"
    assert banked["cfg-max_batch_size=4"]["headline_rederived_pct"] > 20
    refused = {r["name"]: r for r in report["rejected"]}
    assert "CACHING_SUSPECTED" in refused["cfg-response_cache=True"]["reason"]
    assert [s["change"] for s in report["search_path"]] == ["cfg-max_batch_size=4", "cfg-response_cache=True"]
    assert "## Search path" in (run / "report.md").read_text()
    assert_goodput_headlines(run, report, SLO_ARG)
    # raw evidence really comes from LoadGen and the real server
    leg = run / "legs" / "baseline"
    assert (leg / "loadgen" / "rep-0" / "mlperf_log_summary.txt").is_file()
    info = json.loads((leg / "server_info.json").read_text())
    assert info["max_batch_size"] == 1 and info["weights_digest"]
    manifest = json.loads((converted[0] / "perfwarden_conversion.json").read_text())
    assert info["weights_digest"] == f"sha256:{manifest['weights_sha256']}"  # the servers loaded what was converted
    assert (run / "checkpoints.sqlite").stat().st_size > 0
