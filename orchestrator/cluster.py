"""A/B steps fanned out over a Ray cluster (``perfwarden run --cluster ADDRESS|local``; design §5, "Scale-out").

One step is one Ray task that measures **both legs** of an A/B with their interleaved reps on **one
node** (so one comparison never spans two machines), holding one resource slot (``{"CPU": 1}`` on the
synthetic and embedded targets, ``{"GPU": 1}`` on SGLang, as vLLM's and SGLang's own tuning scripts fan
out one worker per GPU). Independent steps run concurrently, one per slot; the graph on the head audits
each as it finishes.

What travels to a node is plain data: the lab's description (orchestrator/lab_spec.py), the legs and the
rep count. The node builds its own lab; each rep it finishes is an event sent back to the head's sink,
and the head hands the events of the step it waits on to the terminal (``on_rep``). Nothing live (a
console, a callback, an open client) is ever pickled.

Evidence: the node's lab writes into a scratch copy of its legs on the worker; every write streams to
the :class:`_Sink` actor pinned to the head node, which writes it into the run and seals it with the
run's key (formats/seal_stream.py). The key never leaves the head; the worker runs with an empty key
store. Each leg's ``server_info.json`` carries the worker's node identity (harness/node_identity.py), so
an A/B whose legs ran on different nodes is CONDITIONS_DIFFER.

Everything perfwarden starts listens on 127.0.0.1 with the dashboard off, usage stats off and Ray's token
authentication on (orchestrator/ray_env.py): ``local``, :func:`loopback_cluster` (``perfwarden cluster``)
and :func:`simulated` (tests, benchmarks).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypedDict

from perfwarden.harness.labs.lab import Lab, LabError, LegPlan, RepCallback, TargetLabSpec  # noqa: E402
from perfwarden.orchestrator import ray_env

# Read when Ray is imported. A caller that knows the address first (runner.py) prepares for it; whoever
# imports this module without saying gets the loopback's defaults.
ray_env.prepare(ray_env.LOCAL)
import ray  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from perfwarden.formats import safe_write, seal
from perfwarden.formats.records import key_store_dir  # noqa: E402
from perfwarden.formats.safe_read import RECORD_BYTES, read_bytes  # noqa: E402
from perfwarden.formats.seal_stream import EvidenceSink, StreamChain  # noqa: E402
from perfwarden.harness import node_identity  # noqa: E402
from perfwarden.orchestrator.lab_spec import build_lab, describe  # noqa: E402
from perfwarden.orchestrator.ray_env import LOCAL, LOOPBACK, ClusterError  # noqa: E402
from perfwarden.orchestrator.simlab import SyntheticLabSpec  # noqa: E402

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster as RayCluster

__all__ = ["LOCAL", "LOOPBACK", "ClusterError", "Cluster", "connect", "fan_out", "loopback_cluster", "simulated"]
NO_KEYS = "no-keys"
"""The empty key store a worker task runs with: it can stream evidence, never seal it."""
PROGRESS_POLL_S = 0.5
"""How often the head collects the rep events of the step it waits on."""


@dataclass(frozen=True)
class RepEvent:
    """One rep a node finished (or failed), on its way to the head's terminal."""

    leg: str
    rep: int
    status: str


@dataclass(frozen=True)
class StepOutcome:
    """What a node reports back for one step, besides the evidence it streamed."""

    status: dict[str, str]
    node: str
    started: float
    """Clock time the step started on its node (``time.time()`` there)."""
    ended: float


@ray.remote(num_cpus=0, max_concurrency=1)  # type: ignore[call-overload]  # Ray's stub lacks actor options
class _Sink:
    """The head's evidence sink (one per run), pinned to the head node: it alone opens the run's chain. It
    also keeps each step's rep events until the head collects them."""

    def __init__(self, run: str, key_dir: str):
        os.environ["PERFWARDEN_KEY_DIR"] = key_dir  # the head's key store (same machine as the driver)
        self.sink = EvidenceSink(run)
        self.events: dict[str, list[RepEvent]] = {}

    def receive(self, op: str, rel: str, payload: Any) -> None:
        self.sink.receive(op, rel, payload)

    def snapshot(self, legs: list[str]) -> dict[str, bytes]:
        return self.sink.snapshot(legs)

    def progress(self, step: str, leg: str, rep: int, status: str) -> None:
        self.events.setdefault(step, []).append(RepEvent(str(leg), int(rep), str(status)))

    def collect(self, step: str) -> list[RepEvent]:
        return self.events.pop(step, [])


class _Stream:
    """A worker's transport to the head's sink. Writes and rep events are sent without waiting (Ray runs one
    caller's calls to an actor in order, so the head seals them in the order they were written); the step
    waits for all of them before it reports back. Never a blocking ``ray.get`` mid-step: Ray lends a blocked
    task's CPU to another task, and two steps would then share one slot."""

    def __init__(self, sink: Any, step: str):
        self.sink = sink
        self.step = step
        self.sent: list[Any] = []

    def __call__(self, op: str, rel: str, payload: Any) -> None:
        self.sent.append(self.sink.receive.remote(op, rel, payload))

    def rep(self, leg: str, rep: int, status: str) -> None:
        self.sent.append(self.sink.progress.remote(self.step, leg, rep, status))

    def flush(self) -> None:
        """Wait until the head sealed every write (a refused one raises here and fails the step)."""
        ray.get(self.sent)


@contextlib.contextmanager
def worker_scope(scratch: Path) -> Iterator[None]:
    """A step's process state on its node: the node's identity for the legs' ``server_info``, and an empty key
    store, so nothing the step runs can seal (it streams; the head seals)."""
    saved = {name: os.environ.get(name) for name in (node_identity.NODE_ENV, "PERFWARDEN_KEY_DIR")}
    os.environ[node_identity.NODE_ENV] = ray.get_runtime_context().get_node_id()
    os.environ["PERFWARDEN_KEY_DIR"] = str(scratch / NO_KEYS)  # nothing to find: a worker cannot seal
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@ray.remote
def _measure_step(spec: SyntheticLabSpec | TargetLabSpec, legs: list[dict[str, Any]], reps: int, sink: Any,
                  step: str, manifest: bytes | None, sealed: dict[str, bytes]) -> StepOutcome:
    """One A/B on this node: both legs, interleaved reps, evidence and rep events streamed to the head.
    ``sealed``: what the head already sealed of these legs (a re-measure continues them)."""
    started = time.time()
    scratch = Path(tempfile.mkdtemp(prefix="pw-step-"))
    stream = _Stream(sink, step)
    chain = StreamChain(scratch, stream)
    try:
        with worker_scope(scratch):
            if manifest is not None:  # the run's clock (labs place their reps in it)
                safe_write.write_bytes(scratch / "run.json", manifest, scratch)
            chain.preload(sealed)
            seal.attach(scratch, chain)
            lab = build_lab(spec, on_rep=stream.rep)
            plans = [LegPlan.from_data(leg, lab.config_model) for leg in legs]
            try:
                status = lab.measure(scratch, plans, reps)
            except LabError as exc:
                status = {plans[-1].leg: f"failed: {exc}"}
            stream.flush()
            return StepOutcome(status, ray.get_runtime_context().get_node_id(), started, time.time())
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
    """Join the Ray cluster at ``address``; ``local`` starts one on this machine (127.0.0.1, no dashboard, its
    own instance even when another Ray runs here). Token authentication is on unless the caller turned it
    off (orchestrator/ray_env.py): ``local`` makes a 0600 token when there is none, joining needs the
    cluster's."""
    if ray.is_initialized():
        return
    if address != LOCAL:
        _reachable(address.removeprefix("ray://"))
    ray_env.private_token(create=address == LOCAL)
    try:
        if address == LOCAL:
            ray.init(address=LOCAL, _node_ip_address=LOOPBACK, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:  # AuthenticationError is a RuntimeError
        raise ClusterError(f"cannot join the Ray cluster at {address!r}: {type(exc).__name__}: {exc}") from None
    ray_env.private_token(create=False)  # whatever Ray wrote meanwhile is private too


REP_STATUSES = ("ok", "failed")


def shown_events(events: list[Any], legs: list[LegPlan], reps: int) -> list[RepEvent]:
    """The rep events of a step the terminal may show: a rep of one of the step's own legs, in range, with a
    known status. A node's events are its say-so (a name from one reaches the terminal's markup): anything
    else is dropped."""
    names = {p.leg for p in legs}
    return [e for e in events if isinstance(e, RepEvent) and e.leg in names and isinstance(e.rep, int)
            and 0 <= e.rep < reps and e.status in REP_STATUSES]


def _step_name(legs: list[LegPlan], reps: int) -> str:
    return "+".join(p.leg for p in legs) + f"x{reps}"


class Cluster:
    """A run's view of the cluster: where steps go, the steps in flight, and their rep events."""

    def __init__(self, run: Path, lab: Lab, resource: str = "CPU", on_rep: RepCallback | None = None):
        if not ray.is_initialized():
            raise ClusterError("not connected to a Ray cluster (call cluster.connect first)")
        try:
            self.spec = describe(lab)
        except LabError as exc:
            raise ClusterError(str(exc)) from None
        self.run = Path(run)
        self.resource = resource
        self.on_rep = on_rep
        self.slots = int(ray.cluster_resources().get(resource, 0))
        if self.slots < 1:
            raise ClusterError(f"the Ray cluster has no {resource!r} slot for an A/B step")
        head = ray.get_runtime_context().get_node_id()
        pinned = NodeAffinitySchedulingStrategy(head, soft=False)
        # Ray's stub types the decorated class as the class itself, without the actor's ``options``.
        self.sink = _Sink.options(scheduling_strategy=pinned).remote(  # type: ignore[attr-defined]
            str(self.run.resolve()), str(key_store_dir()))
        self.inflight: dict[tuple[tuple[str, ...], int], Any] = {}
        self.nodes: dict[tuple[tuple[str, ...], int], str] = {}
        """Step (its legs and reps) -> the node that measured it."""
        self.spans: dict[tuple[tuple[str, ...], int], tuple[float, float]] = {}
        """Step -> (start, end) clock time on its node."""
        self.step_nodes = sorted(n["NodeID"] for n in ray.nodes()
                                 if n.get("Alive") and (n.get("Resources") or {}).get(resource, 0) >= 1)
        """Nodes with a slot for a step, taken in turn (round robin)."""
        self._turn = 0

    @staticmethod
    def key(legs: list[LegPlan], reps: int) -> tuple[tuple[str, ...], int]:
        return tuple(p.leg for p in legs), reps

    def submit(self, legs: list[LegPlan], reps: int) -> tuple[tuple[str, ...], int]:
        """Start one step (no-op when the same step is in flight)."""
        key = self.key(legs, reps)
        if key not in self.inflight:
            manifest = self.run / "run.json"
            data = read_bytes(manifest, self.run, limit=RECORD_BYTES, what="run.json") if manifest.is_file() else None
            slot = {"num_cpus": 0, "resources": {self.resource: 1}} if self.resource != "CPU" else {"num_cpus": 1}
            task = _measure_step.options(scheduling_strategy=self._placement(), **slot)
            sealed = ray.get(self.sink.snapshot.remote([p.leg for p in legs]))
            self.inflight[key] = task.remote(self.spec, [p.model_dump() for p in legs], reps, self.sink,
                                             _step_name(legs, reps), data, sealed)
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

    def measure(self, legs: list[LegPlan], reps: int) -> dict[str, str]:
        """Measure one step on some node (started now, or earlier by ``submit``) and wait for it, handing its
        rep events to ``on_rep`` as they arrive."""
        key = self.submit(legs, reps)
        ref = self.inflight[key]
        try:
            while not ray.wait([ref], timeout=PROGRESS_POLL_S)[0]:
                self._report(legs, reps)
            outcome: StepOutcome = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
            raise LabError(f"step {list(key[0])!r} failed on its node: {type(cause).__name__}: {cause}") from None
        finally:
            self.inflight.pop(key, None)
        self._report(legs, reps)  # the step waited for its last events to reach the sink before returning
        self.nodes[key] = outcome.node
        self.spans[key] = (outcome.started, outcome.ended)
        return outcome.status

    def _report(self, legs: list[LegPlan], reps: int) -> None:
        events: list[RepEvent] = ray.get(self.sink.collect.remote(_step_name(legs, reps)))
        if self.on_rep is not None:
            for event in shown_events(events, legs, reps):
                self.on_rep(event.leg, event.rep, event.status)

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


NODE_OBJECT_STORE_BYTES = 80 * 1024 * 1024
"""Each loopback node's object store: steps move evidence through the sink, never large objects."""


class _NodeArgs(TypedDict):
    """The arguments every loopback node starts with (``ray.cluster_utils.Cluster.add_node``)."""

    node_ip_address: str
    include_dashboard: bool
    object_store_memory: int


@contextlib.contextmanager
def loopback_cluster(nodes: int, cpus_per_node: int = 1) -> Iterator[RayCluster]:
    """A multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): a head with no CPU slot (the
    driver and the sink) and ``nodes`` worker nodes, every node at 127.0.0.1 (Ray then binds all its ports
    there), the dashboard off, token authentication on with a 0600 token. Ray's files go to a temporary
    folder of its own, so no other ``ray.init()`` on the machine finds and joins this cluster. Yields Ray's
    cluster object (``.address``); everything is stopped and removed on exit."""
    from ray.cluster_utils import Cluster as RayCluster  # only loopback clusters need Ray's test utility

    ray_env.prepare(LOCAL)
    ray_env.private_token(create=True)
    temp = tempfile.mkdtemp(prefix="pw-ray-")  # short: Ray's socket paths live under it (<108 bytes)
    saved = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp
    common: _NodeArgs = {"node_ip_address": LOOPBACK, "include_dashboard": False,
                         "object_store_memory": NODE_OBJECT_STORE_BYTES}
    sim = None
    try:
        sim = RayCluster(initialize_head=True, head_node_args={"num_cpus": 0, **common})
        for _ in range(nodes):
            sim.add_node(num_cpus=cpus_per_node, **common)
        yield sim
    finally:
        if sim is not None:
            sim.shutdown()
        if saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved
        shutil.rmtree(temp, ignore_errors=True)


@contextlib.contextmanager
def simulated(nodes: int, cpus_per_node: int = 1) -> Iterator[RayCluster]:
    """:func:`loopback_cluster` with this process connected as its driver. For tests and benchmarks."""
    with loopback_cluster(nodes, cpus_per_node) as sim:
        try:
            ray.init(address=sim.address, _node_ip_address=LOOPBACK, log_to_driver=False)
            sim.wait_for_nodes()
            yield sim
        finally:
            ray.shutdown()
