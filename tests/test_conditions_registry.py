"""Inert is proven, not assumed (issue 17 item 2): the inert table, process-level conditions, strict
nested records (contention samples, quality evals).

proof/fixtures/cond-* and the witness-* contention/quality cases score the rules end to end (answers
frozen before the rules ran on them); the tests here pin each rule and its near misses.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from perfwarden.auditor import registry
from perfwarden.auditor.model import roles
from perfwarden.auditor.gates import measurement
from perfwarden.auditor.gates.process import _wrong
from perfwarden.harness.process_conditions import THREAD_ENV, process_conditions
from perfwarden.harness.targets import ServerTarget
from perfwarden.proof.build_integrity import sample

sys.path.insert(0, str(Path(__file__).resolve().parent))
from auditor_cases import audit, codes  # noqa: E402
from fake_openai_server import FakeOpenAIServer  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"


# ------------------------------------------------------------------------- the inert table


def test_every_inert_entry_is_backed_by_a_measurement_or_a_cited_source():
    entries = registry.inert_entries()
    measured = [k for k, e in entries.items() if e.measured]
    assert {"process.port", "process.pid", "process.started_at", "explicit_knobs"} <= set(measured)
    assert all(e.source and e.unmeasured for e in entries.values() if not e.measured)


def test_an_unproven_inert_entry_refuses_to_load(monkeypatch):
    data = json.loads(json.dumps(registry.levers()))
    for bad in ({"why": "trust me"}, {"why": "x", "measured": "no-such-measurement"},
                {"why": "x", "source": "a blog"}):  # a source not marked unmeasured is no proof either
        data["inert"] = {"threads": bad}
        monkeypatch.setattr(registry, "levers", lambda data=data: data)
        registry.inert_entries.cache_clear()
        with pytest.raises(registry.RegistryError, match="threads"):
            registry.inert_entries()
    registry.inert_entries.cache_clear()


def test_a_measured_entry_must_name_a_key_its_measurement_flipped(monkeypatch):
    data = json.loads(json.dumps(registry.levers()))
    data["inert"] = {"max_batch_size": {"why": "x", "measured": "embedded-relaunch"}}
    monkeypatch.setattr(registry, "levers", lambda: data)
    registry.inert_entries.cache_clear()
    with pytest.raises(registry.RegistryError, match="does not show it inert"):
        registry.inert_entries()
    registry.inert_entries.cache_clear()


def test_a_parent_never_makes_its_children_inert():
    assert roles.is_inert("process.pid") and roles.is_inert("port")
    assert not roles.is_inert("process") and not roles.is_inert("process.cpu_count")
    assert not roles.is_inert("process.platform") and not roles.is_inert("portx")
    assert not roles.is_inert("cpu_count") and not roles.is_inert("model_path")
    assert roles.is_inert("internal_states")  # a runtime outcome, not a condition
    for key in ("process.cpu_count", "process_conditions.cpus_allowed", "process_conditions.thread_env.OMP_NUM_THREADS"):
        assert registry.lever_class(key)[0] == "B", key


# ------------------------------------------------------------------------- process conditions


def test_process_conditions_are_read_for_the_process_itself(tmp_path):
    cgroup_root = tmp_path / "cg"
    (cgroup_root / "job").mkdir(parents=True)
    (cgroup_root / "job" / "cpu.max").write_text("50000 100000\n")
    proc = tmp_path / "proc"
    (proc / str(os.getpid())).mkdir(parents=True)
    (proc / str(os.getpid()) / "cgroup").write_text("0::/job\n")
    got = process_conditions(os.getpid(), {"OMP_NUM_THREADS": "3", "HOME": "/root"}, "eng", proc, cgroup_root)
    assert got == {"engine": "eng", "cpu_count": os.cpu_count(), "cpus_allowed": sorted(os.sched_getaffinity(0)),
                   "cpu_quota_cores": 0.5, "nice": os.getpriority(os.PRIO_PROCESS, os.getpid()),
                   "thread_env": {"OMP_NUM_THREADS": "3"}}
    assert _wrong(got) is None and "MKL_NUM_THREADS" in THREAD_ENV


class _SleepTarget(ServerTarget):
    """A process that only sleeps, in front of the scripted server (what /server_info answers)."""

    health_path = "/v1/models"
    name = "sleep"

    def command(self) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(60)"]


def test_the_harness_records_process_conditions_in_server_info(tmp_path):
    server = FakeOpenAIServer().start()
    try:
        target = _SleepTarget(tmp_path / "legs" / "a", port=server.port, env={"OMP_NUM_THREADS": "3"})
        info = target.start()
        target.stop()
    finally:
        server.stop()
    written = json.loads((tmp_path / "legs" / "a" / "server_info.json").read_text())
    assert written == info and written["process_conditions"]["thread_env"] == {"OMP_NUM_THREADS": "3"}
    assert written["process_conditions"]["engine"] == "_SleepTarget" and _wrong(written["process_conditions"]) is None


def test_a_process_conditions_record_is_strict():
    good = {"engine": "e", "cpu_count": 2, "cpus_allowed": [0, 1], "cpu_quota_cores": None, "nice": 0,
            "thread_env": {}}
    assert _wrong(good) is None and _wrong({**good, "cpu_count": 2.0}) is None  # an integer written as a float
    assert "schema does not have" in _wrong({**good, "boost": 1})
    assert "no nice" in _wrong({k: v for k, v in good.items() if k != "nice"})
    assert "wrong type" in _wrong({**good, "cpus_allowed": "0-1"})
    assert "wrong type" in _wrong({**good, "nice": True})
    assert "not a string" in _wrong({**good, "thread_env": {"OMP_NUM_THREADS": 1}})


# ------------------------------------------------------------------------- strict nested records


def test_contention_samples_hold_only_the_harness_s_fields():
    measurement.validate_sample_fields({"start": sample(), "end": sample()}, 2)
    measurement.validate_sample_fields({"loadavg_1m": 0.5, "ncpu": 2, "busy": []}, 1)  # the earlier flat format
    for bad, version in (({"start": {**sample(), "quiet": True}, "end": sample()}, 2),
                         ({"start": sample(), "end": sample(), "note": "x"}, 2),
                         ({"loadavg_1m": 0.5, "ncpu": 2, "busy": []}, 2),  # version 2 writes start/end only
                         ({"start": sample(busy=[{"pid": 1, "name": "a", "cpu_pct": 1.0, "ok": 1}]), "end": sample()}, 2),
                         ({"loadavg_1m": 0.5, "ncpu": 2, "busy": [], "verified": True}, 1)):
        with pytest.raises(measurement.ContentionFormatError, match="never writes|holds .start. and .end."):
            measurement.validate_sample_fields(bad, version)


@pytest.mark.slow
def test_cond_and_strict_record_fixtures_agree_with_their_answer_keys():
    fixtures = sorted(FIXTURES.glob("cond-*")) + [FIXTURES / n for n in (
        "witness-contention-unknown-field", "witness-quality-unknown-field", "witness-near-contention-busy")]
    assert len(fixtures) >= 12
    for fixture in fixtures:
        answer = json.loads((fixture / "answer_key.json").read_text())["answers"][0]
        verdict = audit(fixture / "run", fixture / "run" / answer["claim"])
        assert verdict.verdict == answer["verdict"], (fixture.name, [f.message for f in verdict.findings])
        assert set(answer["must_include"]) <= codes(verdict), fixture.name
        assert not set(answer["must_exclude"]) & codes(verdict), fixture.name
