"""Generated code runs confined: endless loops, writes outside the run dir, sockets and subprocesses
are stopped and recorded, and a well-behaved function still returns its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfwarden.harness.sandbox import run_sandboxed

GENERATED = '''
import os, socket
def good(n):
    return n * 2
def loop_forever():
    while True:
        pass
def write_outside(target):
    with open(target, "w") as f:
        f.write("escaped")
    return "wrote"
def write_inside():
    with open("scratch.txt", "w") as f:
        f.write("fine")
    return os.path.realpath("scratch.txt")
def open_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.connect(("127.0.0.1", 9))
    return "connected"
def spawn():
    import subprocess
    return subprocess.run(["true"]).returncode
def leak_env():
    return sorted(os.environ)
def explode():
    raise ValueError("bad shape")
'''


@pytest.fixture
def module(tmp_path) -> Path:
    path = tmp_path / "run" / "generated" / "op.py"
    path.parent.mkdir(parents=True)
    path.write_text(GENERATED)
    return path


def call(module: Path, fn: str, **payload):
    return run_sandboxed(module, fn, module.parents[1], payload, timeout_s=3)


def test_good_function_returns_its_value(module):
    r = call(module, "good", n=21)
    assert r.ok and r.value == 42 and r.error is None


def test_endless_loop_is_stopped_by_the_timeout(module):
    r = call(module, "loop_forever")
    assert not r.ok and r.error.startswith("timeout") and 2.5 < r.seconds < 10


def test_write_outside_the_run_dir_is_blocked(module, tmp_path):
    target = tmp_path / "outside.txt"
    r = call(module, "write_outside", target=str(target))
    assert not r.ok and "outside the run directory" in r.error and not target.exists()


def test_write_inside_the_run_dir_is_allowed(module):
    r = call(module, "write_inside")
    assert r.ok and r.value.startswith(str(module.parents[1].resolve()))


def test_socket_is_blocked(module):
    r = call(module, "open_socket")
    assert not r.ok and "network" in r.error


def test_subprocess_is_blocked(module):
    r = call(module, "spawn")
    assert not r.ok and "process creation" in r.error


def test_environment_is_scrubbed(module, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    r = call(module, "leak_env")
    assert r.ok and "OPENAI_API_KEY" not in r.value and "HOME" in r.value


def test_an_exception_is_recorded(module):
    r = call(module, "explode")
    assert not r.ok and r.error == "ValueError: bad shape"
