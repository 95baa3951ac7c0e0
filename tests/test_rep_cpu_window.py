"""The rep's CPU window: what the machine, the server and the harness used over the whole rep.

Why: the load average counts the server's own runnable threads as neighbours. vLLM on 2 cores (API server,
engine core, worker and its OpenMP threads) held the 1-minute load above 4 with nothing else running, so
every rep of the vLLM run e2e came back CONTENDED_LEG. The window measures the other work itself (machine
less server less harness) over the rep, so a harness line that carries one is judged on it instead of on
the load average; everything else stays as strict."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from perfwarden.auditor.evidence import LegEvidence
from perfwarden.auditor.gates.measurement import check_contention, window_contention
from perfwarden.harness import contention as C

from test_explorer_rules import _codes, _rep

QUIET = {"t": 1.0, "interval_s": 0.25, "ncpu": 2, "ncpu_available": 2, "cpu_quota_cores": None, "procs_running": 1,
         "procs_total": 90, "cpu_busy_pct": 3.0, "busy": [], "threshold_pct": 5.0, "self_pid": 10, "excluded_pids": [10],
         "error": None}
"""A sample as ``harness/contention.py`` writes it (every field: a version-2 sample missing one was edited)."""


def sample(load1: float) -> dict:
    return {**QUIET, "loadavg": [load1, 1.0, 1.0]}


def window(others: float, wall: float = 10.0) -> dict:
    return {"wall_s": wall, "machine_cpu_s": 14.0 + others, "server_cpu_s": 12.0, "harness_cpu_s": 2.0}


def leg_with(tmp_path, contention: dict, version: int | None = 2) -> LegEvidence:
    return LegEvidence("base", reps=[_rep(tmp_path, "base", 0, version=version, contention=contention, ended_at=3.0)])


def test_a_busy_server_on_a_quiet_machine_is_not_contention_when_the_window_says_so(tmp_path):
    loaded = {"start": sample(4.4), "end": sample(5.1)}
    assert ("CONTENDED_LEG", "FLAG") in _codes(check_contention(tmp_path, leg_with(tmp_path, loaded)))
    assert _codes(check_contention(tmp_path, leg_with(tmp_path, {**loaded, "window": window(0.3)}))) == []


def test_a_neighbour_during_the_rep_only_is_contention(tmp_path):
    """Quiet before and after, quiet load average: the window still sees the neighbour's CPU over the rep."""
    quiet = {"start": sample(0.5), "end": sample(0.5)}
    result = check_contention(tmp_path, leg_with(tmp_path, {**quiet, "window": window(6.0)}))
    assert ("CONTENDED_LEG", "FLAG") in _codes(result)
    assert "over the rep" in result.findings[0].message


@pytest.mark.parametrize("bad", [
    {"wall_s": 10.0, "machine_cpu_s": 5.0, "server_cpu_s": 12.0, "harness_cpu_s": 2.0},  # own > machine
    {"wall_s": 10.0, "machine_cpu_s": 30.0, "server_cpu_s": 12.0, "harness_cpu_s": 2.0},  # > 2 cores x 10 s
    {"wall_s": 0.0, "machine_cpu_s": 1.0, "server_cpu_s": 0.5, "harness_cpu_s": 0.1},
    {"wall_s": 10.0, "machine_cpu_s": "14", "server_cpu_s": 12.0, "harness_cpu_s": 2.0},
    {"wall_s": 10.0, "machine_cpu_s": float("nan"), "server_cpu_s": 12.0, "harness_cpu_s": 2.0},
    {"wall_s": 10.0, "machine_cpu_s": 14.0, "server_cpu_s": 12.0},  # a figure removed
    {**window(0.0), "others_cpu_s": 0.0},  # a field the harness never writes
    [1, 2],
])
def test_a_window_the_readings_cannot_produce_is_corrupt(tmp_path, bad):
    loaded = {"start": sample(4.4), "end": sample(5.1), "window": bad}
    assert ("EVIDENCE_CORRUPT", "FAIL") in _codes(check_contention(tmp_path, leg_with(tmp_path, loaded)))


def test_a_foreign_line_cannot_buy_its_way_out_of_the_load_average(tmp_path):
    """Only harness lines' windows are honoured: a foreign file that adds one is judged as before."""
    loaded = {"start": sample(4.4), "end": sample(5.1), "window": window(0.0)}
    assert ("CONTENDED_LEG", "FLAG") in _codes(check_contention(tmp_path, leg_with(tmp_path, loaded, version=None)))


def test_window_contention_limit_scales_with_cores():
    assert window_contention(window(4.9), 2.0) == []  # 49% of a core: under half a core
    assert window_contention(window(5.0), 2.0)
    assert window_contention({**window(9.0), "machine_cpu_s": 23.0}, 8.0) == []  # 90% < 2 cores' quarter


def test_window_figures_from_readings():
    start = C.CpuWindow(0.0, C.CpuTimes(total=1000, idle=900), {5: C.PidStat(5, "srv", "R", 10)},
                        C.PidStat(1, "me", "R", 100))
    end = C.CpuWindow(2.0, C.CpuTimes(total=1400, idle=1000), {5: C.PidStat(5, "srv", "R", 210)},
                      C.PidStat(1, "me", "R", 150))
    assert C.window_figures(start, end, 100) == {"wall_s": 2.0, "machine_cpu_s": 3.0, "server_cpu_s": 2.0,
                                                 "harness_cpu_s": 0.5}
    assert C.close_cpu_window(None) is None


@pytest.mark.quiet  # a spinner must get its CPU: a test beside it takes it (scripts/test.sh runs it alone)
def test_a_real_window_tells_the_servers_cpu_from_a_neighbours():
    spin = "import time\nt=time.time()\nwhile time.time()-t<1.0: pass"
    for excluded in (True, False):
        child = subprocess.Popen([sys.executable, "-c", spin])
        try:
            time.sleep(0.1)
            opened = C.open_cpu_window([child.pid] if excluded else [])
            time.sleep(0.7)
            figures = C.close_cpu_window(opened)
        finally:
            child.wait(5)
        others = figures["machine_cpu_s"] - figures["server_cpu_s"] - figures["harness_cpu_s"]
        if excluded:
            assert figures["server_cpu_s"] >= 0.4, figures  # the spinner's CPU is the server's
        else:
            assert figures["server_cpu_s"] == 0 and others >= 0.4, figures  # and here a neighbour's


def test_a_version3_line_whose_window_was_removed_cannot_show_a_quiet_machine(tmp_path):
    """Drop the window of a rep where a neighbour ran only between the samples: judged on its quiet samples
    and load average alone, the rep would look quiet. The harness writes the window wherever it took both
    samples, so from version 3 its absence is evidence removed; earlier lines are judged as before."""
    quiet = {"start": sample(0.5), "end": sample(0.5)}
    assert ("EVIDENCE_MISSING", "FLAG") in _codes(check_contention(tmp_path, leg_with(tmp_path, quiet, version=3)))
    assert _codes(check_contention(tmp_path, leg_with(tmp_path, quiet, version=2))) == []
