"""The long e2e run asks whether the machine is busy before it spends its minutes, and asks with the
auditor's own contention rule."""

from __future__ import annotations

import subprocess

import pytest

import embedded_alone_run
import machine_quiet

QUIET = {"ncpu": 2, "ncpu_available": 2, "cpu_quota_cores": None, "loadavg": [0.3, 0.4, 0.5],
         "cpu_busy_pct": 4.0, "busy": [], "error": None}
HOG = {**QUIET, "loadavg": [4.5, 2.0, 1.5], "cpu_busy_pct": 97.0,
       "busy": [{"pid": 4242, "name": "stress-ng", "cpu_pct": 98.0}]}


def sampler(*samples):
    """A stand-in for ``harness.contention.sample_contention`` handing out the given samples in turn."""
    it = iter(samples)
    return lambda interval_s: next(it)


def test_a_quiet_machine_has_no_reasons():
    assert machine_quiet.contention_reasons(samples=2, take=sampler(QUIET, QUIET)) == []


def test_one_busy_sample_is_enough_and_the_reasons_are_the_auditors():
    reasons = machine_quiet.contention_reasons(samples=3, take=sampler(QUIET, HOG, QUIET))
    assert any("stress-ng" in r for r in reasons) and any("busy" in r for r in reasons)


def test_the_last_minutes_load_average_alone_is_not_a_busy_machine_now():
    """The vLLM measure test left the 1-minute load at 4.7 on 2 cores, and the vLLM run e2e after it skipped
    as 'busy' with nothing running: the load average is the past, the samples are the present."""
    after_a_test = {**QUIET, "loadavg": [4.7, 3.0, 2.0]}
    assert machine_quiet.contention_reasons(samples=2, take=sampler(after_a_test, after_a_test)) == []


def test_the_e2e_run_skips_before_it_starts_anything_on_a_busy_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(machine_quiet, "contention_reasons", lambda **kw: ["process 'stress-ng' used 98% of a core"])

    def no_run(*args, **kwargs):
        raise AssertionError("the real run was started on a busy machine")

    monkeypatch.setattr(subprocess, "run", no_run)
    with pytest.raises(pytest.skip.Exception, match="busy before a real embedded run.*stress-ng"):
        embedded_alone_run.run_alone(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing made either
