"""``perfwarden cluster``: a loopback-only Ray cluster on this machine, to try ``run --cluster`` on one host.

Ray 2.60's own ``ray start`` cannot do this safely: a second ``ray start --address`` on the same host
rewrites 127.0.0.1 to the host's outward IP, and its node then listens on every interface. This command
starts every node at 127.0.0.1 (orchestrator/cluster.py ``loopback_cluster``) with token authentication
on, usage stats off and no dashboard, prints the address to give ``run --cluster``, and stops every node
on Ctrl-C (or SIGTERM).
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

import typer
from rich.console import Console

from perfwarden.orchestrator.exit_codes import ExitCode
from perfwarden.orchestrator.render import print_error, safe_text

MAX_NODES = 16
MAX_CPUS_PER_NODE = 256
ADDRESS_PREFIX = "address: "
"""The line a script reads the cluster's address from (stdout)."""


def cluster(
    nodes: int = typer.Option(2, "--nodes", min=1, max=MAX_NODES, help="Worker nodes (each its own raylet)."),
    cpus_per_node: int = typer.Option(1, "--cpus-per-node", min=1, max=MAX_CPUS_PER_NODE,
                                      help="CPU slots per node: A/B steps one node measures at once."),
) -> None:
    """Start a Ray cluster on 127.0.0.1 only (token auth on, usage stats off) until Ctrl-C; prints its address."""
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    # lazy: Ray loads only for the cluster commands
    from perfwarden.orchestrator import ray_env

    ray_env.prepare(ray_env.LOCAL)
    from perfwarden.orchestrator.cluster import ClusterError, loopback_cluster

    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    try:
        with loopback_cluster(nodes, cpus_per_node) as sim:
            # After the nodes started: Ray installs handlers of its own that stop them without unwinding this.
            signal.signal(signal.SIGTERM, _stop)
            signal.signal(signal.SIGINT, _stop)
            token = ray_env.token_path()
            print(f"{ADDRESS_PREFIX}{sim.address}", flush=True)
            err.print(safe_text(("perfwarden cluster", "bold"), f": {nodes} node(s) x {cpus_per_node} CPU on 127.0.0.1 "
                                f"(token: {token if token else '$' + ray_env.TOKEN}); run with "
                                f"`perfwarden run --cluster {sim.address} ...`; Ctrl-C stops it"))
            stop.wait()
    except ClusterError as exc:
        print_error(err, exc)
        raise typer.Exit(ExitCode.INVALID) from None
    except (OSError, RuntimeError, TimeoutError) as exc:  # Ray could not start a node here
        print_error(err, f"the cluster did not start: {type(exc).__name__}: {exc}")
        raise typer.Exit(ExitCode.NOT_OK) from None
    err.print("cluster stopped")
    sys.stdout.flush()
