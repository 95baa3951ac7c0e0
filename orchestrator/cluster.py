"""A/B steps fanned out over a Ray cluster (``perfwarden run --cluster ADDRESS|local``; issue 20 §2, §4).

One step is one Ray task that measures **both legs** of an A/B with their interleaved reps on **one
node** (so one comparison never spans two machines), holding one resource slot (``{"CPU": 1}`` on the
synthetic and embedded targets, ``{"GPU": 1}`` on SGLang, as vLLM's and SGLang's own tuning scripts fan
out one worker per GPU). Independent steps run concurrently, one per slot; the graph on the head audits
each as it finishes.

Evidence: the task's lab writes into a scratch copy of its legs on the worker; every write streams to
the :class:`_Sink` actor pinned to the head node, which writes it into the run and seals it with the
run's key (harness/seal_stream.py). The key never leaves the head; the worker runs with an empty key
store. Each leg's ``server_info.json`` carries the worker's node identity (harness/node_identity.py), so
an A/B whose legs ran on different nodes is CONDITIONS_DIFFER.

Everything a test starts listens on 127.0.0.1 with the dashboard off (:func:`simulated`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

# Ray rewrites a 127.0.0.1 address to the host's outward IP before connecting, unless this is off (read
# when Ray is imported; it changes nothing for a real cluster's address): a local or simulated cluster
# listens on the loopback only, so the driver must connect there.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from perfwarden.harness import node_identity, safe_write, seal
from perfwarden.harness.records import key_store_dir
from perfwarden.harness.safe_read import RECORD_BYTES, read_bytes
from perfwarden.harness.seal_stream import EvidenceSink, StreamChain
from perfwarden.orchestrator.lab import LabError, LegPlan

LOCAL = "local"
LOOPBACK = "127.0.0.1"
NO_KEYS = "no-keys"
"""The empty key store a worker task runs with: it can stream evidence, never seal it."""


class ClusterError(RuntimeError):
    """The cluster cannot be reached or has no slot for a step (one line, exit 3 at the CLI)."""


@ray.remote(num_cpus=0, max_concurrency=1)
class _Sink:
    """The head's evidence sink (one per run), pinned to the head node: it alone opens the run's chain."""

    def __init__(self, run: str, key_dir: str):
        os.environ["PERFWARDEN_KEY_DIR"] = key_dir  # the head's key store (same machine as the driver)
        self.sink = EvidenceSink(run)

    def receive(self, op: str, rel: str, payload: Any) -> None:
        self.sink.receive(op, rel, payload)

    def snapshot(self, legs: list[str]) -> dict[str, bytes]:
        return self.sink.snapshot(legs)


class _Stream:
    """A worker's transport to the head's sink. Writes are sent without waiting (Ray runs one caller's calls
    to an actor in order, so the head seals them in the order they were written); the step waits for all
    of them before it reports back. Never a blocking ``ray.get`` mid-step: Ray lends a blocked task's CPU
    to another task, and two steps would then share one slot."""

    def __init__(self, sink: Any):
        self.sink = sink
        self.sent: list[Any] = []

    def __call__(self, op: str, rel: str, payload: Any) -> None:
        self.sent.append(self.sink.receive.remote(op, rel, payload))

    def flush(self) -> None:
        """Wait until the head sealed every write (a refused one raises here and fails the step)."""
        ray.get(self.sent)


@ray.remote
def _measure_step(lab: Any, legs: list[dict[str, Any]], reps: int, sink: Any, manifest: bytes | None,
                  sealed: dict[str, bytes]) -> dict[str, Any]:
    """One A/B on this node: both legs, interleaved reps, evidence streamed to the head. ``sealed``: what
    the head already sealed of these legs (a re-measure continues them)."""
    node = ray.get_runtime_context().get_node_id()
    scratch = Path(tempfile.mkdtemp(prefix="pw-step-"))
    os.environ[node_identity.NODE_ENV] = node
    os.environ["PERFWARDEN_KEY_DIR"] = str(scratch / NO_KEYS)  # nothing to find: a worker cannot seal
    plans = [LegPlan.model_validate(leg) for leg in legs]
    stream = _Stream(sink)
    chain = StreamChain(scratch, stream)
    try:
        if manifest is not None:  # the run's clock (labs place their reps in it)
            safe_write.write_bytes(scratch / "run.json", manifest, scratch)
        chain.preload(sealed)
        seal.attach(scratch, chain)
        try:
            status = lab.measure(scratch, plans, reps)
        except LabError as exc:
            status = {plans[-1].leg: f"failed: {exc}"}
        stream.flush()
        return {"status": status, "node": node}
    finally:
        seal.forget(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


REACH_TIMEOUT_S = 5.0
"""How long the head's address may take to accept a connection (Ray itself retries for minutes)."""


def _reachable(address: str) -> None:
    """A ``host:port`` that accepts a TCP connection, else ClusterError (one line, before Ray is asked)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterError(f"--cluster {address!r} is not `local` or a Ray address host:port")
    try:
        socket.create_connection((host, int(port)), timeout=REACH_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None


def connect(address: str) -> None:
    """Join the Ray cluster at ``address``; ``local`` starts one on this machine (127.0.0.1, no dashboard)."""
    if ray.is_initialized():
        return
    if address != LOCAL:
        _reachable(address.removeprefix("ray://"))
    try:
        if address == LOCAL:
            ray.init(_node_ip_address=LOOPBACK, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"cannot join the Ray cluster at {address!r}: {exc}") from None


class Cluster:
    """A run's view of the cluster: where steps go, and the steps in flight."""

    def __init__(self, run: Path, resource: str = "CPU"):
        if not ray.is_initialized():
            raise ClusterError("not connected to a Ray cluster (call cluster.connect first)")
        self.run = Path(run)
        self.resource = resource
        self.slots = int(ray.cluster_resources().get(resource, 0))
        if self.slots < 1:
            raise ClusterError(f"the Ray cluster has no {resource!r} slot for an A/B step")
        head = ray.get_runtime_context().get_node_id()
        self.sink = _Sink.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote(
            str(self.run.resolve()), str(key_store_dir()))
        self.inflight: dict[tuple, Any] = {}
        self.nodes: dict[tuple, str] = {}
        """Step (its legs and reps) -> the node that measured it."""
        self.step_nodes = sorted(n["NodeID"] for n in ray.nodes()
                                 if n.get("Alive") and (n.get("Resources") or {}).get(resource, 0) >= 1)
        """Nodes with a slot for a step, taken in turn (round robin)."""
        self._turn = 0

    @staticmethod
    def key(legs: list[LegPlan], reps: int) -> tuple:
        return tuple(p.leg for p in legs), reps

    def submit(self, lab: Any, legs: list[LegPlan], reps: int) -> tuple:
        """Start one step (no-op when the same step is in flight)."""
        key = self.key(legs, reps)
        if key not in self.inflight:
            manifest = self.run / "run.json"
            data = read_bytes(manifest, self.run, limit=RECORD_BYTES, what="run.json") if manifest.is_file() else None
            slot = {"num_cpus": 0, "resources": {self.resource: 1}} if self.resource != "CPU" else {"num_cpus": 1}
            task = _measure_step.options(scheduling_strategy=self._placement(), **slot)
            sealed = ray.get(self.sink.snapshot.remote([p.leg for p in legs]))
            self.inflight[key] = task.remote(lab, [p.model_dump() for p in legs], reps, self.sink, data, sealed)
        return key

    def _placement(self) -> Any:
        """The next node in turn, softly (a node gone since is replaced by Ray's choice). Neither Ray's default
        packing nor SPREAD is a promise: both put every step on one node when each finishes before the next is
        submitted (the clean-clone CI: 1 node of 2 with SPREAD on a loaded machine)."""
        if not self.step_nodes:
            return "SPREAD"
        node = self.step_nodes[self._turn % len(self.step_nodes)]
        self._turn += 1
        return NodeAffinitySchedulingStrategy(node, soft=True)

    def measure(self, lab: Any, legs: list[LegPlan], reps: int) -> dict[str, str]:
        """Measure one step on some node (started now, or earlier by ``submit``) and wait for it."""
        key = self.submit(lab, legs, reps)
        try:
            result = ray.get(self.inflight[key])
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
            raise LabError(f"step {list(key[0])!r} failed on its node: {type(cause).__name__}: {cause}") from None
        finally:
            self.inflight.pop(key, None)
        self.nodes[key] = result["node"]
        return result["status"]

    def close(self) -> None:
        for ref in self.inflight.values():
            ray.cancel(ref, force=True)
        self.inflight.clear()
        ray.kill(self.sink)


def fan_out(fn: Callable[[Any], Any], items: list[Any], address: str | None) -> list[Any]:
    """``[fn(x) for x in items]``, in order; with ``address``, one Ray task (one CPU) per item on that
    cluster (backtest, red team and fuzz jobs are independent: the same results, sooner). ``fn`` must be
    importable on the nodes (a module-level function, or a ``functools.partial`` of one)."""
    if address is None:
        return [fn(x) for x in items]
    connect(address)
    task = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_call)
    return ray.get([task.remote(fn, x) for x in items])


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    return fn(item)


def resource_for(target: str) -> str:
    """A step's slot: a GPU for SGLang (one server per GPU), a CPU for the embedded and synthetic targets."""
    return "GPU" if target == "sglang" else "CPU"


@contextlib.contextmanager
def simulated(nodes: int, cpus_per_node: int = 1) -> Iterator[Any]:
    """A local multi-node Ray cluster (``ray.cluster_utils.Cluster``): a head with no CPU slot (the driver
    and the sink) and ``nodes`` worker nodes, all on 127.0.0.1 with the dashboard off. For tests and
    benchmarks."""
    from ray.cluster_utils import Cluster as RayCluster  # test utility: only simulated clusters need it

    common = {"node_ip_address": LOOPBACK, "include_dashboard": False, "object_store_memory": 80 * 1024 * 1024}
    sim = RayCluster(initialize_head=True, head_node_args={"num_cpus": 0, **common})
    try:
        for _ in range(nodes):
            sim.add_node(num_cpus=cpus_per_node, **common)
        ray.init(address=sim.address, _node_ip_address=LOOPBACK, log_to_driver=False)
        sim.wait_for_nodes()
        yield sim
    finally:
        ray.shutdown()
        sim.shutdown()
