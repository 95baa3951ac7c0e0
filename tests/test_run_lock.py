"""One writer per run (design §2, ``harness/run_lock.py``): a second writer exits 3 naming the first, a lock
left by a killed writer is taken over, readers never wait on a writer and see a consistent run.

The command-line tests run real ``perfwarden`` processes on an interrupted synthetic run
(``tests/writers_fuzz.py`` builds it; ``benchmarks/fuzz.py --writers`` runs 100 random tries of the same);
the refusals of a hostile lock file run the commands in this process.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import writers_fuzz as wf

pytestmark = pytest.mark.integration  # real CLI processes on real synthetic runs: seconds each


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> wf.Base:
    return wf.build_base(tmp_path_factory.mktemp("writers"))


def _copy(base: wf.Base, tmp_path: Path) -> tuple[Path, Path]:
    run, keys = tmp_path / "run", tmp_path / "keys"
    shutil.copytree(base.run, run, symlinks=True)
    shutil.copytree(base.keys, keys)
    return run, keys


def _start(args: list[str], keys: Path, rep_delay: str = wf.REP_DELAY_S) -> subprocess.Popen[str]:
    env = {**wf._env(keys), "PERFWARDEN_SIM_REP_DELAY": rep_delay}
    return subprocess.Popen([*wf.CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)


def _wait_for_holder(run: Path, pid: int, timeout: float = 60.0) -> bool:
    """Until ``writer.json`` names ``pid``: True. False as soon as the process is seen writing the run
    (``events.jsonl`` grew) without having described itself, or after ``timeout``."""
    events = run / "events.jsonl"
    size = events.stat().st_size if events.exists() else 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads((run / "writer.json").read_text("utf-8")).get("pid") == pid:
                return True
        except (OSError, ValueError):
            pass
        if events.exists() and events.stat().st_size > size:
            return False
        time.sleep(0.05)
    return False


def _names(stderr: str, pid: int, command: str) -> bool:
    return (f"pid {pid} " in stderr and command in stderr and repr(socket.gethostname()) in stderr
            and "writing since 20" in stderr)


def test_two_resumes_at_once_the_second_exits_3_naming_the_first(base, tmp_path):
    run, keys = _copy(base, tmp_path)
    first = _start(["run", "--resume", str(run)], keys, rep_delay="0.05")
    try:
        held = _wait_for_holder(run, first.pid)
        second = wf.run_cli(["run", "--resume", str(run)], keys, timeout=120)
        assert first.poll() is None, "the second resume ended only after the first: nothing was proven"
        assert second.returncode == 3, second.stderr[-2000:]
        assert _names(second.stderr, first.pid, "run --resume"), second.stderr
        assert held
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err[-2000:]
    got = wf.summary(run)
    assert got == base.reference
    assert not wf.seal_problems(run, keys)


def test_a_lock_left_by_a_kill_9_writer_is_taken_over(base, tmp_path):
    run, keys = _copy(base, tmp_path)
    victim = _start(["run", "--resume", str(run)], keys, rep_delay="0.05")
    try:
        _wait_for_holder(run, victim.pid)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.communicate()
    assert json.loads((run / "writer.json").read_text("utf-8"))["pid"] == victim.pid, "it never held the lock"
    started = time.monotonic()
    taken = wf.run_cli(["run", "--resume", str(run)], keys)
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert json.loads((run / "writer.json").read_text("utf-8"))["pid"] != victim.pid
    assert wf.summary(run) == base.reference
    assert not wf.seal_problems(run, keys)
    assert time.monotonic() - started < 120


def test_readers_do_not_block_while_a_writer_holds_the_run(base, tmp_path):
    run, keys = _copy(base, tmp_path)
    reference = wf.run_cli(["audit", str(base.run), "--claim", str(base.run / wf.CLAIM), "--json"], base.keys)
    writer = _start(["run", "--resume", str(run)], keys, rep_delay="1.0")  # ~36 reps left: outlasts the readers
    try:
        _wait_for_holder(run, writer.pid)
        audit = wf.run_cli(["audit", str(run), "--claim", str(run / wf.CLAIM), "--json"], keys, timeout=120)
        review = wf.run_cli(["review", str(run), "--format", "json"], keys, timeout=120)
        save = wf.run_cli(["audit", str(run), "--claim", str(run / wf.CLAIM), "--save"], keys, timeout=120)
        assert writer.poll() is None, "the writer ended before the readers did: nothing was proven"
    finally:
        writer.kill()
        writer.communicate()
    assert audit.returncode == reference.returncode, audit.stderr[-2000:]
    got, want = json.loads(audit.stdout), json.loads(reference.stdout)
    assert (got["verdict"], got["action"], [f["code"] for f in got["findings"]]) == \
           (want["verdict"], want["action"], [f["code"] for f in want["findings"]])
    assert review.returncode == 0, review.stderr[-2000:]
    assert save.returncode == 3 and _names(save.stderr, writer.pid, "run --resume"), save.stderr


def test_a_new_run_directory_appears_locked(tmp_path):
    """From the first instant the directory exists, a second writer is refused naming the first."""
    keys, run = tmp_path / "keys", tmp_path / "new-run"
    first = _start(["run", "--target", "synthetic", "--out", str(run)], keys, rep_delay="0.02")
    try:
        while not run.exists() and first.poll() is None:
            pass  # spin: try the directory the moment it appears
        second = wf.run_cli(["measure", "--target", "synthetic", "--out", str(run), "--leg", "x"], keys, timeout=120)
        assert second.returncode == 3 and _names(second.stderr, first.pid, "run --target synthetic"), second.stderr
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err[-2000:]
    assert not (run / "legs" / "x").exists()


@pytest.mark.parametrize("tries", [3])
def test_random_concurrent_writers(base, tmp_path, tries):
    """A few tries of the ``benchmarks/fuzz.py --writers`` engine (the benchmark runs 100)."""
    rng = random.Random(26)
    for index in range(tries):
        work = tmp_path / f"try-{index}"
        outcome = wf.one_try(base, work, rng, index)
        assert not outcome.problems, (outcome.writers, outcome.problems, outcome.details)
        shutil.rmtree(work)


def _lock_holder_process(run: Path) -> subprocess.Popen[str]:
    code = ("import sys, time\nfrom perfwarden.harness import run_lock\n"
            "with run_lock.hold(sys.argv[1], 'holder-for-test'):\n    print('held', flush=True)\n    time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_hostile_holder_description_is_named_never_trusted_or_waited_on(tmp_path):
    from perfwarden.harness import run_lock

    run = tmp_path / "run"
    run.mkdir()
    holder = _lock_holder_process(run)
    try:
        for planted in ("garbage", "fifo", "link", "huge"):
            (run / "writer.json").unlink(missing_ok=True)
            if planted == "garbage":
                (run / "writer.json").write_bytes(b"\x1b[31m{not json")
            elif planted == "fifo":
                os.mkfifo(run / "writer.json")
            elif planted == "link":
                (run / "writer.json").symlink_to("/etc/passwd")
            else:
                (run / "writer.json").write_bytes(b" " * (1 << 20))
            started = time.monotonic()
            with pytest.raises(run_lock.RunBusy) as info:
                with run_lock.hold(run):
                    pass
            assert time.monotonic() - started < run_lock.DESCRIPTION_WAIT_S + 2
            assert info.value.holder is None and "has not described itself" in str(info.value), planted
    finally:
        holder.kill()
        holder.wait()
    with run_lock.hold(run) as lock:  # the holder died: the lock is free, and the description is replaced
        assert lock.holder.pid == os.getpid()
    assert json.loads((run / "writer.json").read_text())["pid"] == os.getpid()


@pytest.mark.parametrize("planted", ["link", "fifo", "directory", "dangling"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused_never_followed(tmp_path, planted):
    from perfwarden.harness import run_lock

    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.write_text("keep")
    lock = run / "writer.lock"
    if planted == "link":
        lock.symlink_to(outside)
    elif planted == "dangling":
        lock.symlink_to(tmp_path / "nowhere")
    elif planted == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    started = time.monotonic()
    with pytest.raises(OSError) as info:
        with run_lock.hold(run):
            pass
    assert time.monotonic() - started < 5
    assert "writer.lock" in str(info.value) and "nothing is written through it" in str(info.value)
    assert outside.read_text() == "keep" and not (tmp_path / "nowhere").exists()
    assert not (run / "writer.json").exists()


def test_a_lock_file_with_garbage_contents_still_locks(tmp_path):
    from perfwarden.harness import run_lock

    run = tmp_path / "run"
    run.mkdir()
    (run / "writer.lock").write_bytes(os.urandom(4096))
    holder = _lock_holder_process(run)
    try:
        with pytest.raises(run_lock.RunBusy) as info:
            with run_lock.hold(run):
                pass
        assert info.value.holder is not None and info.value.holder.pid == holder.pid
        assert info.value.holder.command == "holder-for-test"
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_reentrant_in_one_process_and_free_after_it(tmp_path):
    from perfwarden.harness import run_lock

    run = tmp_path / "run"
    with run_lock.hold(run, create=True) as outer:
        assert outer.created and run_lock.holds(run)
        with run_lock.hold(run) as inner:
            assert inner is outer
        assert run_lock.holds(run)
    assert not run_lock.holds(run)
    with pytest.raises(run_lock.NotARunDirectory):
        with run_lock.hold(tmp_path / "missing"):
            pass


def test_the_study_and_the_checkpoint_open_only_under_the_lock(tmp_path):
    from perfwarden.agents import search
    from perfwarden.harness import run_lock
    from perfwarden.orchestrator import runner

    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(RuntimeError, match="writer lock"):
        search.open_study(run)
    with pytest.raises(RuntimeError, match="writer lock"):
        runner._graph(run, None)
    assert not (run / "checkpoints.sqlite").exists()
    with run_lock.hold(run):
        assert search.open_study(run) is not None


@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_the_commands_refuse_a_hostile_lock_file_with_exit_3(base, tmp_path, planted):
    """The commands run in this process (a refusal is all they do here; a process start would cost seconds):
    an uncaught exception ends one with exit 1, never the refusal's 3."""
    from typer.testing import CliRunner

    from perfwarden.cli.main import app

    run, keys = _copy(base, tmp_path)
    outside = tmp_path / "outside"
    outside.write_text("keep")
    (run / "writer.lock").unlink()
    if planted == "fifo":
        os.mkfifo(run / "writer.lock")
    else:
        (run / "writer.lock").symlink_to(outside)
    for args in (["audit", str(run), "--claim", str(run / wf.CLAIM), "--save"], ["run", "--resume", str(run)]):
        done = CliRunner().invoke(app, args, env=wf._env(keys))
        assert done.exit_code == 3, done.output[-2000:]
        assert "writer.lock" in done.output and "nothing is written through it" in done.output
        assert "Traceback" not in done.output
    assert outside.read_text() == "keep"
