"""Test tool: the processes a test started (found by a marker in their environment, which every Ray
process inherits from the node that spawned it), their listening sockets, and stopping them by pid."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass

import psutil

MARK = "PERFWARDEN_TEST_MARK"


def new_mark() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Listener:
    pid: int
    name: str
    ip: str
    port: int
    kind: str
    """``tcp`` (listening) or ``udp`` (bound)."""

    @property
    def loopback(self) -> bool:
        address = ipaddress.ip_address(self.ip.split("%")[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return address.is_loopback


_MARKS: dict[tuple[int, float], str | None] = {}
"""A process's marker by ``(pid, start time)``: its environment is read once, not at every sample (a sample
runs beside a real run's reps, and all its CPU is charged to them as contention)."""
SETTLED_S = 2.0
"""A process younger than this may not have exec'd yet: between fork and exec its environment is still its
parent's (a test's child has no marker there), and exec keeps the pid and start time. An unmarked young
process is read again at the next sample."""


def _mark_of(proc: psutil.Process) -> str | None:
    key = (proc.pid, proc.info["create_time"])
    if key not in _MARKS:
        try:
            mark = proc.environ().get(MARK)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None  # read again next time: it may have been caught mid-start
        if mark is None and time.time() - proc.info["create_time"] < SETTLED_S:
            return None
        _MARKS[key] = mark
    return _MARKS[key]


def marked(mark: str) -> list[psutil.Process]:
    """Every live process whose environment carries ``mark``."""
    return [proc for proc in psutil.process_iter(["create_time"])
            if proc.info["create_time"] is not None and _mark_of(proc) == mark]


def listeners(mark: str) -> list[Listener]:
    """Listening TCP and bound UDP sockets of every marked process (the ones a remote host could reach): the
    machine's socket tables read once, not once per process."""
    names: dict[int, str] = {}
    for proc in marked(mark):
        try:
            names[proc.pid] = proc.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    found = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.pid not in names or not conn.laddr:
            continue
        if conn.type == socket.SOCK_STREAM and conn.status == psutil.CONN_LISTEN:
            found.append(Listener(conn.pid, names[conn.pid], conn.laddr.ip, conn.laddr.port, "tcp"))
        elif conn.type == socket.SOCK_DGRAM and not conn.raddr:
            found.append(Listener(conn.pid, names[conn.pid], conn.laddr.ip, conn.laddr.port, "udp"))
    return found


def watch(proc: subprocess.Popen[str], mark: str, timeout_s: float, every_s: float = 0.3) -> set[Listener]:
    """Every socket the marked processes listened on while ``proc`` ran (sampled), until it exits."""
    seen: set[Listener] = set()
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        seen.update(listeners(mark))
        time.sleep(every_s)
    return seen


def stop(proc: subprocess.Popen[str], mark: str, grace_s: float = 60.0) -> None:
    """SIGTERM the process the test started and wait; then end whatever marked process it left behind."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    end_marked(mark)


def end_marked(mark: str) -> None:
    """Terminate, then kill, each process carrying ``mark`` (processes this test started), one by one."""
    left = [p for p in marked(mark) if p.pid != os.getpid()]
    for p in left:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(left, timeout=10)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
