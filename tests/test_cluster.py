"""A/B steps on a (simulated, 127.0.0.1-only) Ray cluster; the seal across nodes; what travels to a node.

The Ray tests share one simulated cluster (a head without CPU slots, two one-CPU worker nodes): starting
one takes ~20 s on two cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfwarden.formats import seal
from perfwarden.formats.seal_stream import EvidenceSink, StreamChain, StreamRefused
from perfwarden.harness import node_identity
from perfwarden.harness.labs.lab import LegPlan
from perfwarden.harness.target_config import EmbeddedConfig
from perfwarden.orchestrator.runner import RunUsageError, run_graph
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import BASE, SyntheticLab


def settings(**kw) -> RunSettings:
    return RunSettings(target="synthetic", kernels=False, max_proposals=4, study_batch=2, **kw)


def test_node_identity_is_recorded_and_tells_nodes_apart(monkeypatch):
    monkeypatch.setenv(node_identity.NODE_ENV, "node-a")
    a = node_identity.stamp({"version": "1.2"})["node"]
    monkeypatch.setenv(node_identity.NODE_ENV, "node-b")
    b = node_identity.stamp({"version": "1.2"})["node"]
    assert set(a) >= {"host_id", "cpu_model", "cpu_cores", "gpu_name", "gpu_uuid", "driver", "engine_version"}
    assert a["engine_version"] == "1.2" and a["ray_node_id"] == "node-a" and a != b


def test_the_sink_seals_only_evidence_and_never_a_whole_bench_file(tmp_path):
    run = tmp_path / "run"
    sink = EvidenceSink(run)
    for rel in ("evidence.jsonl", "../x/legs/a", "claims/001-patch.json", "legs/../../x", "/legs/a/b", "legs"):
        with pytest.raises(StreamRefused):
            sink.receive("file", rel, b"{}")
    with pytest.raises(StreamRefused):
        sink.receive("file", "legs/a/bench_runs.jsonl", b'{"leg": "a"}\n')
    scratch = tmp_path / "scratch"
    chain = StreamChain(scratch, sink.receive)
    seal.attach(scratch, chain)
    try:
        seal.append_jsonl(scratch / "legs/a/bench_runs.jsonl", {"leg": "a", "rep": 0})
        seal.write_text(scratch / "legs/a/server.log", "ready\n")
    finally:
        seal.forget(scratch)
    assert not hasattr(chain, "key")  # the worker's side holds no key
    assert (run / "legs/a/bench_runs.jsonl").read_bytes() == (scratch / "legs/a/bench_runs.jsonl").read_bytes()
    assert sink.chain.is_current(run / "legs/a/server.log")
    assert sink.chain.sealed_size(run / "legs/a/bench_runs.jsonl") == (run / "legs/a/bench_runs.jsonl").stat().st_size
    seal.forget(run)


def test_only_a_steps_own_rep_events_reach_the_terminal():
    """A node's events are its say-so: one naming another leg (or markup), a rep out of range or an unknown
    status is dropped before the terminal shows it."""
    from perfwarden.orchestrator.cluster import RepEvent, shown_events

    legs = [LegPlan(leg=n, role=r, config=EmbeddedConfig.of(BASE)) for n, r in (("a", "baseline"), ("b", "candidate"))]
    sent = [RepEvent("a", 0, "ok"), RepEvent("b", 2, "failed"), RepEvent("[link=x]c[/link]", 0, "ok"),
            RepEvent("a", 3, "ok"), RepEvent("a", -1, "ok"), RepEvent("b", 1, "[red]ok"), ("a", 1, "ok")]
    assert shown_events(sent, legs, 3) == [RepEvent("a", 0, "ok"), RepEvent("b", 2, "failed")]


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-port", "local:x"])
def test_an_unreachable_cluster_is_exit_3_and_leaves_no_run(tmp_path, address):
    # Before the module's cluster fixture starts Ray in this process: a connected Ray would be reused.
    from typer.testing import CliRunner

    from perfwarden.cli.main import app

    result = CliRunner().invoke(app, ["run", "--target", "synthetic", "--out", str(tmp_path / "run"),
                                      "--cluster", address])
    assert result.exit_code == 3, result.output
    assert "Ray" in result.output or "cluster" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """The simulated cluster; its nodes start with the same key store as the head (one machine, one file
    system): yields that store's path."""
    from perfwarden.orchestrator import cluster

    import ray._private.ray_constants as ray_constants

    keys = tmp_path_factory.mktemp("cluster-keys")
    with pytest.MonkeyPatch.context() as patch:
        # Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, when first imported: a test earlier in this worker
        # that prepared for a remote address (ray_env.prepare) leaves it on, and ray.init would then rewrite
        # 127.0.0.1 to this host's external address, where the loopback cluster does not listen.
        patch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
        patch.setenv("PERFWARDEN_KEY_DIR", str(keys))
        patch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path_factory.mktemp("ray-token") / "auth_token"))
        with cluster.simulated(2):
            yield keys


@pytest.mark.slow
def test_steps_fan_out_one_node_each_and_match_the_single_process_run(tmp_path, two_nodes):
    from perfwarden.orchestrator import cluster

    spread = run_graph(tmp_path / "spread", settings(), SyntheticLab(), cluster="attached")
    alone = run_graph(tmp_path / "alone", settings(), SyntheticLab())
    assert [(p.id, p.status) for p in spread["proposals"]] == [(p.id, p.status) for p in alone["proposals"]]
    shown = [(v.seq, v.scope, v.lever, v.verdict, v.action, sorted(v.codes())) for v in spread["verdicts"]]
    assert shown == [(v.seq, v.scope, v.lever, v.verdict, v.action, sorted(v.codes())) for v in alone["verdicts"]]
    assert all(v.seal == "sealed" for v in spread["verdicts"])  # sealed on the head as it streamed in
    nodes = set()
    for v in spread["verdicts"]:
        legs = json.loads((tmp_path / "spread" / v.claim).read_text())["legs"]
        if v.scope != "patch":
            continue
        infos = [json.loads((tmp_path / "spread/legs" / legs[r] / "server_info.json").read_text())["node"]
                 for r in ("baseline", "candidate")]
        assert infos[0] == infos[1] and infos[0]["ray_node_id"]  # one A/B, one node
        nodes.add(infos[0]["ray_node_id"])
    assert len(nodes) == 2, nodes  # independent steps went to both worker nodes
    assert cluster.ray.is_initialized()


@pytest.mark.slow
def test_a_worker_cannot_seal_the_head_run(tmp_path, two_nodes, monkeypatch):
    """A step's scope on its node (the one ``_measure_step`` runs the lab in) has an empty key store: code
    there that tries to seal into the head's run directly (a shared file system) is refused."""
    import ray

    from perfwarden.orchestrator import cluster

    @ray.remote(num_cpus=1)
    def seal_the_head(head_run: str, scratch: str) -> str:
        with cluster.worker_scope(Path(scratch)):
            try:
                seal.begin(Path(head_run))
                return "sealed"
            except seal.SealError as exc:
                return f"refused: {exc}"

    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(two_nodes))  # the store the worker processes inherited
    run = tmp_path / "run"
    seal.begin(run)  # the head's chain and key
    try:
        status = ray.get(seal_the_head.remote(str(run.resolve()), str(tmp_path / "scratch")))
    finally:
        seal.forget(run)
    assert status.startswith("refused:") and "key store" in status, status


@pytest.mark.slow
def test_a_lab_a_node_could_not_rebuild_is_refused(tmp_path, two_nodes):
    """What travels is the lab's description: a lab with behaviour of its own (a subclass, a surface given as a
    function) has none, and the cluster refuses it instead of measuring a different lab on the node."""
    from perfwarden.orchestrator import cluster

    class OwnLab(SyntheticLab):
        def measure(self, run, legs, reps):
            return {legs[0].leg: "not what the description says"}

    for lab in (OwnLab(), SyntheticLab(surface=lambda config: 2.0)):
        with pytest.raises(cluster.ClusterError, match="cannot be described"):
            cluster.Cluster(tmp_path / "run", lab)
        with pytest.raises(RunUsageError, match="cannot be described"):  # before the run is created
            run_graph(tmp_path / "run", settings(), lab, cluster="attached")
        assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_backtest_and_red_team_fan_out_with_the_same_results(two_nodes):
    from perfwarden.orchestrator import cluster
    from perfwarden.orchestrator.paths import default_fixture_roots
    from perfwarden.redteam import red_team
    from perfwarden.verify.backtest import run_backtest

    root = default_fixture_roots()[0]
    fixtures = [root / n for n in ("cluster-legs-on-two-nodes", "cluster-worker-edit-after-stream",
                                   "seal-syn-clean", "syn-clean-patch-win")]

    def spread(fn, items):
        return cluster.fan_out(fn, items, "attached")

    here, there = run_backtest(fixtures), run_backtest(fixtures, fan_out=spread)
    shown = [(r.fixture, r.claim, r.verdict, r.action, r.codes, r.agrees) for r in here.results]
    assert shown == [(r.fixture, r.claim, r.verdict, r.action, r.codes, r.agrees) for r in there.results]
    assert len(shown) == 4 and all(r.agrees for r in there.results)
    families = sorted(red_team.load_families())[:4]
    bases = [root / "syn-clean-patch-win"]
    here = red_team.redteam(bases, only=families, pairs=False).results
    there = red_team.redteam(bases, only=families, pairs=False, fan_out=spread).results
    assert [(r.family, r.base, r.seed, r.verdict, r.success) for r in here] == \
        [(r.family, r.base, r.seed, r.verdict, r.success) for r in there]
    assert len(here) == 4


@pytest.mark.slow
def test_a_step_never_shares_its_slot(tmp_path, two_nodes, monkeypatch):
    """Three streamed steps on two one-CPU nodes: never more than two measure at once (a task waiting on the
    head mid-step once lent its CPU to a third step); every rep's event reaches the head's callback."""
    from perfwarden.orchestrator import cluster

    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(two_nodes))
    run = tmp_path / "run"
    seal.begin(run)
    lab = SyntheticLab()
    lab.rep_delay_s = 0.3
    events: list[tuple[str, int, str]] = []
    view = cluster.Cluster(run, lab, on_rep=lambda leg, rep, status: events.append((leg, rep, status)))
    steps = [[LegPlan(leg=f"s{i}-{r}", role=r, config=EmbeddedConfig.of(BASE)) for r in ("baseline", "candidate")]
             for i in range(3)]
    try:
        for legs in steps:
            view.submit(legs, 2)
        for legs in steps:
            assert view.measure(legs, 2) == {legs[0].leg: "ok", legs[1].leg: "ok"}
    finally:
        view.close()
        seal.forget(run)
    spans = list(view.spans.values())
    busiest = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
    assert busiest <= 2, spans
    assert len(set(view.nodes.values())) == 2
    assert sorted(events) == sorted((p.leg, k, "ok") for legs in steps for p in legs for k in range(2))
