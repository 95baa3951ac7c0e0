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


def marked(mark: str) -> list[psutil.Process]:
    """Every live process whose environment carries ``mark``."""
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == mark:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def listeners(mark: str) -> list[Listener]:
    """Listening TCP and bound UDP sockets of every marked process (the ones a remote host could reach)."""
    found = []
    for proc in marked(mark):
        try:
            name = proc.name()
            for conn in proc.net_connections(kind="inet"):
                if not conn.laddr:
                    continue
                if conn.type == socket.SOCK_STREAM and conn.status == psutil.CONN_LISTEN:
                    found.append(Listener(proc.pid, name, conn.laddr.ip, conn.laddr.port, "tcp"))
                elif conn.type == socket.SOCK_DGRAM and not conn.raddr:
                    found.append(Listener(proc.pid, name, conn.laddr.ip, conn.laddr.port, "udp"))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
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
