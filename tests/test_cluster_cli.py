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

from embedded_alone_run import ARGS as EMBEDDED_ARGS
from embedded_alone_run import TIMEOUT_S as EMBEDDED_TIMEOUT_S
from machine_quiet import skip_if_contended
from ray_sockets import MARK, Listener, end_marked, new_mark, stop, watch

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

CLI = [sys.executable, "-m", "perfwarden.cli.main"]
START_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 300.0
REAL_RUN_WATCH_S = 5.0
"""How often the socket watch samples during runs of a real target. Every sample's CPU is charged to the reps
running beside it (the runs' contention samples rightly count it: CONTENDED_LEG, and the test skips itself).
A sample costs about 0.02 CPU s with a two-node cluster's 15 processes among 300 others (``ray_sockets``
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


def _decided(verdict: tuple) -> tuple:
    """A verdict's file, scope and label; a baseline FLAGged only for the machine's noise counts as its PASS."""
    name, scope, label, _, _, codes = verdict
    noise_only = scope == "baseline" and label == "FLAG" and codes == ["NOISY_BASELINE"]
    return name, scope, "PASS" if noise_only else label


def _accepted(run: Path) -> list[tuple[str, bool]]:
    """Per verdict of the run's report, whether the run accepted it."""
    report = json.loads((run / "report.json").read_text())
    return [(v["path"], bool(v["acceptance"] and v["acceptance"]["accepted"])) for v in report["verdicts"]]


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


@pytest.mark.e2e
@pytest.mark.quiet  # it judges real reps: scripts/test.sh runs it alone
@pytest.mark.timeout(1800)
def test_the_embedded_target_on_the_cluster_decides_as_it_does_alone(tmp_path, embedded_alone, loopback):
    """The real target's lab is rebuilt on a node from the run's settings: its servers start there, its evidence
    streams to the head. The run without a cluster is the session's shared one (``embedded_alone_run``, made
    before the cluster started). Real reps are noisy, so what must match is what a clear win gives: the
    steps, what is banked, and every verdict's label; a run the machine's load made CONTENDED_LEG cannot be
    judged."""
    assert embedded_alone.returncode == 0, embedded_alone.stderr[-3000:]
    skip_if_contended("an embedded run on the cluster")
    address, env = loopback
    spread, seen = _run([*EMBEDDED_ARGS, "--cluster", address, "--out", str(tmp_path / "spread")], env,
                        timeout_s=EMBEDDED_TIMEOUT_S, watch_every_s=REAL_RUN_WATCH_S)
    assert spread.returncode == 0, spread.stderr[-3000:]
    assert not _outside(seen), _outside(seen)
    runs = {"alone": embedded_alone.run, "spread": tmp_path / "spread"}
    outcomes = {name: outcome(run) for name, run in runs.items()}
    contended = [(name, v) for name, o in outcomes.items() for v in o["verdicts"] if "CONTENDED_LEG" in v[5]]
    if contended:
        assert all(v[2] != "PASS" for _, v in contended)
        pytest.skip(f"the machine was contended during the runs: {contended}")
    info = json.loads((runs["spread"] / "legs/baseline/server_info.json").read_text())
    assert info["node"]["ray_node_id"] and info["weights_digest"]  # a real server, on a node
    handicapped = [(name, v) for name, o in outcomes.items() for v in o["verdicts"] if "UNREPRESENTATIVE_BASELINE" in v[5]]
    if handicapped and outcomes["spread"]["banked"] != outcomes["alone"]["banked"]:
        # a step's baseline slower than its same-config legs of other steps: the machine's speed drifts in
        # phases of minutes that both legs of a step share and a leg of another step may not (docs/benchmarks.md,
        # "Handicapped baselines"): the auditor must refuse to bank on it, and the runs cannot be compared
        assert all(v[2] != "PASS" for _, v in handicapped)
        pytest.skip(f"a handicapped baseline decided a step differently: {handicapped}")
    assert outcomes["spread"]["banked"] == outcomes["alone"]["banked"] != []
    # Every verdict's label, except a baseline's re-measure for the machine's noise alone: a real baseline is
    # NOISY_BASELINE in one run and not in the other (seen: alone FLAG, spread PASS), and the run accepts
    # it the same way either way (acceptance.py, NOISE_ONLY_CODES). What each run decided must agree.
    assert [_decided(v) for v in outcomes["spread"]["verdicts"]] == [_decided(v) for v in outcomes["alone"]["verdicts"]]
    assert _accepted(runs["spread"]) == _accepted(runs["alone"])
