"""``perfwarden run --cluster`` as a person runs it: subprocesses against a two-node loopback cluster that
``perfwarden cluster`` starts, and against ``--cluster local``; the same banked steps and verdicts as the run
without a cluster; ``--resume`` of a cluster run; and no socket of any process they started (every Ray
process inherits the test's marker) listening outside 127.0.0.1 while the run goes on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ray_sockets import MARK, Listener, end_marked, new_mark, stop, watch

from perfwarden.auditor.gates import conditions
from perfwarden.auditor.model import roles

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

CLI = [sys.executable, "-m", "perfwarden.cli.main"]
START_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 300.0
REAL_RUN_WATCH_S = 5.0
"""How often the socket watch samples during runs of a real target. Every sample's CPU is charged to the reps
running beside it (a run's contention samples rightly count it: CONTENDED_LEG). A sample costs about 0.02 CPU s with a two-node cluster's 15 processes among 300 others (``ray_sockets``
reads each process's environment once and the socket tables once a sample: reading them per process
costs 0.15 s), and every socket a real run opens (Ray's ports, a step's servers) lives for tens of
seconds, so a 5 s sample still sees it."""
SYNTHETIC = ["run", "--target", "synthetic", "--study-batch", "2", "--budget-minutes", "30"]
"""The same study with and without a cluster: two steps asked at once either way."""


def _env(home: Path, mark: str, **extra: str) -> dict[str, str]:
    """A private HOME (Ray's default token file is ~/.ray/auth_token) and the marker; no Ray setting of the
    person running the tests leaks in."""
    from perfwarden.harness.model import CACHE_ENV, cache_root

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # The model cache stays where it is: every run and node loads the weights converted once.
    return {**env, "HOME": str(home), MARK: mark, CACHE_ENV: str(cache_root()), **extra}


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """``perfwarden cluster --nodes 2`` in the background: yields its address and the environment to join it."""
    home = tmp_path_factory.mktemp("home")
    env = _env(home, new_mark())
    out = home / "cluster.out"
    with open(out, "w") as stdout, open(home / "cluster.err", "w") as stderr:
        proc = subprocess.Popen([*CLI, "cluster", "--nodes", "2"], stdout=stdout, stderr=stderr, text=True, env=env)
    try:
        address = _address(proc, out, home / "cluster.err")
        yield address, env
    finally:
        stop(proc, env[MARK])


def _address(proc: subprocess.Popen[str], out: Path, err: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in out.read_text().splitlines():
            if line.startswith("address: "):
                return line.removeprefix("address: ").strip()
        if proc.poll() is not None:
            pytest.fail(f"perfwarden cluster exited {proc.returncode}: {err.read_text()[-2000:]}")
        time.sleep(0.5)
    pytest.fail(f"perfwarden cluster printed no address in {START_TIMEOUT_S:.0f} s: {err.read_text()[-2000:]}")


@dataclass(frozen=True)
class Ran:
    """A finished ``perfwarden`` command (``pid``: to tell its own sockets apart)."""

    pid: int
    returncode: int
    stdout: str
    stderr: str


def _run(args: list[str], env: dict[str, str], timeout_s: float = RUN_TIMEOUT_S,
         watch_every_s: float = 0.3) -> tuple[Ran, set[Listener]]:
    """One ``perfwarden`` command, its sockets (and those of every marked process) sampled while it runs."""
    # Files, not pipes: nothing is read while the sockets are sampled, and a full pipe would stall the run.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([*CLI, *args], stdout=out, stderr=err, text=True, env=env)
        seen = watch(proc, env[MARK], timeout_s, every_s=watch_every_s)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        out.seek(0)
        err.seek(0)
        return Ran(proc.pid, proc.returncode, out.read(), err.read()), seen


def outcome(run: Path) -> dict[str, Any]:
    """What a run decided: every verdict (scope, label, action, seal, the codes that count) in order, what it
    banked and refused. INFO findings are left out: a leg's node is part of its conditions, so on a cluster a
    baseline has fewer same-config legs to be compared with (UNREPRESENTATIVE_BASELINE, INFO, may differ)."""
    report = json.loads((run / "report.json").read_text())
    verdicts = []
    for path in sorted((run / "verdicts").glob("*.json")):
        v = json.loads(path.read_text())
        codes = sorted({f["code"] for f in v["findings"] if f["severity"] != "INFO"})
        verdicts.append((path.name, v["scope"], v["verdict"], v["action"], v["seal"], codes))
    return {"verdicts": verdicts, "banked": [(b["name"], b["lever_class"], b["verdict"]) for b in report["banked"]],
            "rejected": [(r["name"], r["verdict"]) for r in report["rejected"]]}


def _outside(seen: set[Listener]) -> list[Listener]:
    return sorted((s for s in seen if not s.loopback), key=lambda s: (s.pid, s.port))


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The synthetic run without a cluster: what the cluster runs must reproduce."""
    root = tmp_path_factory.mktemp("alone")
    done, _ = _run([*SYNTHETIC, "--out", str(root / "run")], _env(root, new_mark()))
    assert done.returncode == 0, done.stderr[-3000:]
    return outcome(root / "run")


def test_run_on_a_two_node_cluster_matches_the_run_without_and_listens_on_loopback_only(tmp_path, loopback, alone):
    address, env = loopback
    done, seen = _run([*SYNTHETIC, "--cluster", address, "--out", str(tmp_path / "run")], env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert outcome(tmp_path / "run") == alone
    assert alone["banked"], "the comparison needs a run that banks something"
    nodes = set()
    for info in (tmp_path / "run/legs").glob("*/server_info.json"):
        nodes.add(json.loads(info.read_text())["node"]["ray_node_id"])
    assert len(nodes) == 2, nodes  # both worker nodes measured steps
    port = int(address.rpartition(":")[2])
    assert any(s.port == port for s in seen), "the cluster's GCS was not among the sockets seen"
    assert any(s.pid == done.pid for s in seen), "the run's own sockets were not sampled"
    assert not _outside(seen), _outside(seen)


def test_run_with_local_starts_its_own_loopback_cluster_with_a_private_token(tmp_path, alone):
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home, new_mark())
    try:
        done, seen = _run([*SYNTHETIC, "--cluster", "local", "--out", str(tmp_path / "run")], env)
    finally:
        end_marked(env[MARK])  # whatever its Ray left behind
    assert done.returncode == 0, done.stderr[-3000:]
    assert outcome(tmp_path / "run") == alone
    token = home / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert any(s.name == "gcs_server" for s in seen) and any(s.pid == done.pid for s in seen), seen
    assert not _outside(seen), _outside(seen)


def test_a_cluster_run_killed_mid_study_resumes_on_the_cluster_to_the_same_result(tmp_path, loopback, alone):
    address, env = loopback
    run = tmp_path / "run"
    killed, _ = _run([*SYNTHETIC, "--cluster", address, "--out", str(run)],
                     {**env, "PERFWARDEN_CRASH_AT": "after:integrator#2"})
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (run / "report.json").exists()
    done, seen = _run(["run", "--resume", str(run), "--cluster", address], env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert outcome(run) == alone
    assert not _outside(seen), _outside(seen)


def test_joining_a_cluster_without_its_token_is_exit_3_and_leaves_no_run(tmp_path, loopback):
    address, env = loopback
    home = tmp_path / "home"
    home.mkdir()
    done, _ = _run([*SYNTHETIC, "--cluster", address, "--out", str(tmp_path / "run")], {**env, "HOME": str(home)})
    assert done.returncode == 3, done.stderr[-3000:]
    assert "token" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


TINY_REAL = ["run", "--target", "embedded", "--levers", "max_batch_size=4", "--no-kernels", "--baseline-remeasures", "0",
             "--set", "threads=1", "--samples", "2", "--max-tokens", "4", "--budget-minutes", "1"]
"""The real target at the smallest size that still measures: its baseline legs (two servers, three reps of two
requests each), after which the minute's budget stops the search (a step and the bundle need 2.5 times what
the baseline cost, ``graph.NEXT_CHANGE_NEEDS``). One torch thread: this runs beside the other xdist worker,
where two 2-thread torch processes spin on each other's cores. It judges no timing: the decisions on real reps
are the quiet ``test_embedded_run_e2e``'s, and a cluster decides what the run alone decides on the synthetic
target, exactly (the tests above)."""

NODE_KEYS = {"node"}
"""The conditions a cluster changes by design: which node measured the leg (``server_info["node"]``)."""


@pytest.mark.e2e
def test_the_embedded_target_on_the_cluster_measures_as_it_does_alone(tmp_path, loopback):
    """The real target's lab is rebuilt on a node from the run's settings: its servers start there, its evidence
    streams to the head, where it is sealed and audited; and they ran the conditions the same command runs
    alone, key for key (the auditor's own reading of ``server_info.json``: no non-inert difference but the
    node), with the same weights."""
    address, env = loopback
    alone, _ = _run([*TINY_REAL, "--out", str(tmp_path / "alone")], env, timeout_s=RUN_TIMEOUT_S)
    spread, seen = _run([*TINY_REAL, "--cluster", address, "--out", str(tmp_path / "spread")], env,
                        timeout_s=RUN_TIMEOUT_S, watch_every_s=REAL_RUN_WATCH_S)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert spread.returncode == 0, spread.stderr[-3000:]
    assert not _outside(seen), _outside(seen)
    infos = {name: json.loads((tmp_path / name / "legs/baseline/server_info.json").read_text())
             for name in ("alone", "spread")}
    assert infos["spread"]["node"]["ray_node_id"] and not infos["alone"]["node"].get("ray_node_id")  # on a node
    assert infos["alone"]["weights_digest"] and infos["spread"]["weights_digest"] == infos["alone"]["weights_digest"]
    assert infos["spread"]["threads"] == 1 and infos["spread"]["max_batch_size"] == 1
    differ = {key for key in conditions.diff_server_info(infos["alone"], infos["spread"]) if not roles.is_inert(key)}
    assert {key.partition(".")[0] for key in differ} <= NODE_KEYS, differ
    for name in ("alone", "spread"):
        for leg in ("baseline", "baseline-aa"):
            lines = [json.loads(line) for line in (tmp_path / name / "legs" / leg / "bench_runs.jsonl").read_text().splitlines()]
            assert [line["completed"] for line in lines] == [2, 2, 2], (name, leg)
        verdict = json.loads((tmp_path / name / "verdicts/001-baseline.json").read_text())
        assert verdict["scope"] == "baseline" and verdict["seal"] == "sealed", (name, verdict["seal"])
        assert (tmp_path / name / "report.json").is_file()
