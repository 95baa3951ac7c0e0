"""The sandbox holds against code that tries to get out (issue 12 §1).

Each escape test runs real hostile code inside the real sandbox (bubblewrap) and fails if the escape
works: the effect is checked from outside (a file that must not appear or change, a marker an orphan
would keep writing, a secret that must not come back), never from what the code inside says.
Python-level guards play no part: the code is free to rebind anything in its own interpreter.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfwarden.harness import sandbox as sb
from perfwarden.harness import sandbox_limits

pytestmark = pytest.mark.skipif(sb.available() is not None, reason=f"sandbox unavailable: {sb.available()}")

SECRET = "sk-perfwarden-test-secret-4242"

HOSTILE = textwrap.dedent('''
    import ctypes, json, os, socket, subprocess, sys, time

    def good(n):
        return n * 2

    def write(path, text="escaped"):
        with open(path, "w") as f:
            f.write(text)
        return "wrote"

    def append(path):
        with open(path, "a") as f:
            f.write("appended")
        return "appended"

    def system(cmd):
        return os.system(cmd)

    def truncate(path):
        os.truncate(path, 0)
        return "truncated"

    def hardlink(src, dst):
        os.link(src, dst)
        with open(dst, "w") as f:
            f.write("via link")
        return "linked"

    def find_secret(secret):
        """Every environ this process can read, its own, its parents', any pid's."""
        hits = []
        for pid in os.listdir("/proc"):
            if pid.isdigit() or pid == "self":
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        if secret.encode() in f.read():
                            hits.append(pid)
                except OSError:
                    pass
        if secret in json.dumps(dict(os.environ)):
            hits.append("os.environ")
        try:
            with open(f"/proc/{os.getppid()}/environ", "rb") as f:
                if secret.encode() in f.read():
                    hits.append("ppid")
        except OSError:
            pass
        return {"hits": hits, "pids": sorted(p for p in os.listdir("/proc") if p.isdigit())}

    def connect(port):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"escaped")
        s.close()
        return "connected"

    def connect_abstract(name):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\\0" + name)
        s.sendall(b"escaped")
        return "connected"

    def ctypes_escape(port):
        """No Python guard to rebind: go straight to libc for what a guard would have blocked."""
        libc = ctypes.CDLL(None, use_errno=True)
        out = {}
        out["unshare_user"] = libc.unshare(0x10000000)           # CLONE_NEWUSER: regain capabilities?
        out["unshare_user_errno"] = ctypes.get_errno()
        out["mount_remount_rw"] = libc.mount(b"none", b"/usr", None, 32 | 4096, None)  # MS_REMOUNT|MS_BIND
        import __main__
        __main__.__dict__["guard"] = None                          # nothing to disable
        fd = libc.socket(2, 1, 0)
        import struct
        addr = struct.pack("!HH4s8x", 2, port, bytes([127, 0, 0, 1]))
        addr = struct.pack("=H", 2) + addr[2:]
        out["connect"] = libc.connect(fd, addr, len(addr))
        return out

    def fork_bomb(n, marker):
        """Bounded on purpose: try to hold n sleeping processes, report how many we got."""
        got = 0
        for _ in range(n):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            got += 1
        with open(marker, "w") as f:
            f.write(str(got))
        time.sleep(60)

    def orphan(marker):
        """A setsid grandchild that keeps writing a heartbeat; the parent then spins past the limit."""
        code = ("import os, time\\n"
                "while True:\\n"
                f"    open({marker!r}, 'w').write(str(time.time()))\\n"
                "    time.sleep(0.1)\\n")
        subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            pass

    def eat_memory(mb):
        blocks = []
        for _ in range(mb):
            blocks.append(bytearray(1 << 20))
        return len(blocks)

    def spin():
        while True:
            pass

    def big_file(mb):
        with open("big.bin", "wb") as f:
            for _ in range(mb):
                f.write(b"x" * (1 << 20))
        return "written"

    def read(path):
        with open(path, "rb") as f:
            return f.read(200).decode("latin-1")

    def vandalize(kind, target):
        """Replace what the harness may keep in the writable directory (its output files, tmp, .cache)
        with a directory, a FIFO, a link to a file outside, or nothing."""
        names = [n for n in os.listdir(".") if not os.path.isdir(n) or os.path.islink(n)]
        names += [".sandbox.stdout", ".sandbox.stderr", "tmp", ".cache"]
        for name in names:
            if os.path.islink(name) or os.path.isfile(name) or os.path.exists(name) and not os.path.isdir(name):
                os.unlink(name)
            elif os.path.isdir(name):
                os.rmdir(name) if not os.listdir(name) else None
            if os.path.lexists(name):
                continue
            if kind == "dir":
                os.mkdir(name)
                open(os.path.join(name, "x"), "w").close()
            elif kind == "fifo":
                os.mkfifo(name)
            elif kind == "link":
                os.symlink(target, name)
            elif kind == "file":
                open(name, "w").close()
            elif kind == "locked":
                os.mkdir(name, 0)
        os.chmod(".", 0o500) if kind == "locked" else None
        return kind

    def loop_cwd():
        """Leave the working directory a link to itself for the next call to start in."""
        here = os.getcwd()
        os.chdir("..")
        os.rmdir(here)
        os.symlink(os.path.basename(here), here)
        return "looped"

    def raw_result(text, times=1):
        """Hand back raw text on the result channel instead of the harness's JSON, then exit at once."""
        fd = int(sys.argv[1])
        data = text.encode("utf-8", "surrogateescape") * times
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os._exit(0)

    def fill_shm(mb, hold_s=3):
        """Keep memory where RSS does not show it: files (32 MiB each, under the file-size limit) in the
        sandbox's /dev/shm (a tmpfs)."""
        written = 0
        try:
            for i in range(0, mb, 32):
                with open(f"/dev/shm/hog-{i}", "wb") as f:
                    for _ in range(min(32, mb - i)):
                        f.write(b"x" * (1 << 20))
                        f.flush()
                        written += 1
        except OSError:
            pass
        time.sleep(hold_s)
        return written

    def fill_memfd(mb, hold_s=3):
        """The same in anonymous memfds, never mapped."""
        for i in range(0, mb, 32):
            fd = os.memfd_create(f"hog-{i}")
            for _ in range(min(32, mb - i)):
                os.write(fd, b"x" * (1 << 20))
        time.sleep(hold_s)
        return mb

    def sysv_shm(mb, hold_s=3):
        """The same in a System V segment, created, filled, detached: in no process's RSS at all."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        shmid = libc.shmget(0, ctypes.c_size_t(mb << 20), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        if shmid < 0:
            return {"shmget": -1, "errno": ctypes.get_errno()}
        for start in range(0, mb, 32):  # 32 MiB mapped at a time: RSS never shows more
            addr = libc.shmat(shmid, None, 0)
            ctypes.memset(addr + (start << 20), 1, min(32, mb - start) << 20)
            libc.shmdt(ctypes.c_void_p(addr))
        time.sleep(hold_s)
        return {"shmget": shmid}

    def tmpfs_mounts():
        """Every tmpfs in the view: [can a file be created in it, its size in bytes]."""
        out = {}
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
        for line in lines:
            pre, _, post = line.partition(" - ")
            if post.split(" ")[0] != "tmpfs":
                continue
            point = pre.split(" ")[4]
            st = os.statvfs(point)
            try:
                with open(os.path.join(point, ".probe"), "w") as f:
                    f.write("x")
                os.unlink(os.path.join(point, ".probe"))
                writable = True
            except OSError:
                writable = False
            out[point] = [writable, st.f_blocks * st.f_frsize]
        return out

    def views():
        """What a process can learn of where it runs: init's and its own command line, environment,
        working directory, the mount points, its own file."""
        def read(path):
            with open(path, "rb") as f:
                return f.read().replace(b"\\0", b" ").decode("utf-8", "replace")
        points = [line.split(" - ")[0].split(" ")[4] for line in read("/proc/self/mountinfo").splitlines()]
        return {"init": read("/proc/1/cmdline"), "self": read("/proc/self/cmdline"),
                "environ": read("/proc/self/environ"), "cwd": os.getcwd(), "points": points, "file": __file__}

    def kill_parent():
        """The parent pid is not visible; pid 1 is the sandbox's own init."""
        os.kill(os.getppid(), 9)
        return "killed"
''')


@pytest.fixture
def box(tmp_path):
    """A run directory with the hostile module, a writable work dir inside it, and evidence beside it."""
    run = tmp_path / "run"
    work = run / "opbench" / "rmsnorm" / "work" / "00-hostile"
    work.mkdir(parents=True)
    evidence = run / "legs" / "base" / "bench_runs.jsonl"
    evidence.parent.mkdir(parents=True)
    evidence.write_text('{"rep": 0}\n')
    module = tmp_path / "generated" / "hostile.py"
    module.parent.mkdir()
    module.write_text(HOSTILE)
    return {"run": run, "work": work, "evidence": evidence, "module": module, "tmp": tmp_path}


def call(box, fn: str, *, wall_s: float = 20, cpu_s: int = 20, memory_mb: int = 1024, pids: int = 64, **payload):
    policy = sb.Policy(writable=box["work"], limits=sb.Limits(wall_s=wall_s, cpu_s=cpu_s, memory_bytes=memory_mb << 20,
                                                              pids=pids, file_bytes=64 << 20))
    return sb.call_function(box["module"], fn, payload, policy)


# ------------------------------------------------------------------------------------------- basics


def test_a_well_behaved_function_returns_its_value(box):
    r = call(box, "good", n=21)
    assert r.ok and r.value == 42 and r.error is None
    assert r.confinement.network.startswith("none") and r.confinement.device == "cpu"


def test_writing_inside_the_writable_directory_works(box):
    target = box["work"] / "scratch.txt"
    r = call(box, "write", path=str(target), text="fine")
    assert r.ok and target.read_text() == "fine"


# ------------------------------------------------------------------------------------------ escapes


def test_write_outside_the_writable_directory_is_contained(box):
    outside = box["tmp"] / "outside.txt"
    for target in (outside, box["run"] / "verdicts" / "0001-patch.json", Path("/tmp") / f"pw-escape-{os.getpid()}"):
        r = call(box, "write", path=str(target))
        assert not r.ok and not target.exists(), target
    r = call(box, "append", path=str(box["evidence"]))
    assert not r.ok and box["evidence"].read_text() == '{"rep": 0}\n'


def test_os_system_runs_only_inside(box):
    outside = box["tmp"] / "from-shell.txt"
    r = call(box, "system", cmd=f"echo escaped > {outside}; cat /etc/shadow > {box['work']}/shadow 2>/dev/null")
    assert r.ok  # the shell itself may run: it is inside the same walls
    assert not outside.exists()
    assert not (box["work"] / "shadow").exists() or (box["work"] / "shadow").read_text() == ""


def test_code_and_files_outside_cannot_be_truncated_or_hard_linked(box):
    from perfwarden.formats import records  # any of perfwarden's own code files (no torch needed)

    code = Path(records.__file__)
    before = code.read_bytes()
    r = call(box, "truncate", path=str(code))
    assert not r.ok and code.read_bytes() == before
    r = call(box, "truncate", path=str(box["evidence"]))
    assert not r.ok and box["evidence"].read_text() == '{"rep": 0}\n'
    r = call(box, "hardlink", src=str(code), dst=str(box["work"] / "link.py"))
    assert not r.ok and code.read_bytes() == before
    r = call(box, "hardlink", src=str(box["evidence"]), dst=str(box["work"] / "ev.jsonl"))
    assert not r.ok and box["evidence"].read_text() == '{"rep": 0}\n'


def test_the_parents_environment_secrets_are_unreachable(box, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("PERFWARDEN_TEST_TOKEN", SECRET)
    r = call(box, "find_secret", secret=SECRET)
    assert r.ok, r.error
    assert r.value["hits"] == []
    assert str(os.getpid()) not in r.value["pids"] or len(r.value["pids"]) <= 3  # its own PID namespace
    assert len(r.value["pids"]) <= 3  # bwrap's init, the python, nothing of the host


def test_host_secrets_files_are_not_visible(box):
    for path in ("/etc/shadow", "/root/.bash_history", str(Path.home() / ".ssh" / "id_rsa"), "/proc/1/environ"):
        r = call(box, "read", path=path)
        if path == "/proc/1/environ":  # the sandbox's own init: readable, but holds only the sandbox env
            assert not r.ok or SECRET not in (r.value or "")
        else:
            assert not r.ok, path


def test_network_to_a_listening_localhost_port_is_contained(box):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        r = call(box, "connect", port=port)
        assert not r.ok and "ConnectionRefused" in r.error
        with pytest.raises(socket.timeout):
            listener.accept()


def test_abstract_unix_socket_of_the_host_is_not_reachable(box):
    name = f"perfwarden-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind("\0" + name)
        listener.listen(1)
        listener.settimeout(0.5)
        r = call(box, "connect_abstract", name=name)
        assert not r.ok
        with pytest.raises(socket.timeout):
            listener.accept()


def test_ctypes_and_main_rebinding_gain_nothing(box):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.settimeout(0.5)
        r = call(box, "ctypes_escape", port=listener.getsockname()[1])
        assert r.ok, r.error
        assert r.value["unshare_user"] == -1          # no new user namespace, so no capabilities back
        assert r.value["mount_remount_rw"] == -1      # the read-only view stays read-only
        assert r.value["connect"] == -1               # libc's connect meets the same network namespace
        with pytest.raises(socket.timeout):
            listener.accept()


@pytest.mark.slow  # over 2 s on a 2-core machine: the full suite runs it
def test_fork_bomb_is_bounded_and_dies_with_the_sandbox(box):
    marker = box["work"] / "forks.txt"
    started = time.monotonic()
    r = call(box, "fork_bomb", n=400, marker=str(marker), pids=32, wall_s=3)
    assert time.monotonic() - started < 15
    assert not r.ok and r.error.startswith("wall time limit")
    got = int(marker.read_text())
    if r.confinement.pids != "wall_time_only":
        assert got < 32, got
    assert r.confinement.pids in ("cgroup_v1", "cgroup_v2") or sys.platform != "linux"


@pytest.mark.slow  # over 2 s on a 2-core machine: the full suite runs it
def test_setsid_orphan_does_not_outlive_the_limit(box):
    marker = box["work"] / "heartbeat.txt"
    started = time.monotonic()
    r = call(box, "orphan", marker=str(marker), wall_s=3)
    elapsed = time.monotonic() - started
    assert not r.ok and r.error.startswith("wall time limit") and elapsed < 6, (r.error, elapsed)
    assert marker.exists()  # the orphan did run ...
    last = marker.read_text()
    time.sleep(0.6)
    assert marker.read_text() == last  # ... and is dead: no heartbeat after the call returned


def test_memory_blow_up_is_stopped(box):
    r = call(box, "eat_memory", mb=2048, memory_mb=256)
    assert not r.ok and r.error is not None
    assert "memory" in r.error or "SIGKILL" in r.error or "MemoryError" in r.error, r.error


def test_a_cgroup_oom_kill_is_reported_as_the_memory_limit(box):
    """The cgroup was removed before its OOM count was read: an OOM kill came back as a plain SIGKILL."""
    r = call(box, "eat_memory", mb=2048, memory_mb=256)
    if r.confinement.memory == "rss_watchdog":
        pytest.skip("no memory cgroup can be created here")
    assert not r.ok and r.error.startswith("memory limit (256 MiB, cgroup OOM kill)"), r.error
    proc = sb.Confined([sys.executable, "-I", "-c", "b = [bytearray(1 << 20) for _ in range(2048)]"],
                       sb.Policy(writable=box["work"], limits=sb.Limits(wall_s=20, memory_bytes=256 << 20)))
    proc.wait(30)
    assert proc.exit_reason() == "memory limit (256 MiB, cgroup OOM kill)"


@pytest.mark.parametrize("version,files,killed", [
    ("cgroup_v2", {"memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n"}, True),
    ("cgroup_v2", {"memory.events": "low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n"}, False),
    ("cgroup_v2", {"memory.events": "oom_group_kill 1\n"}, True),
    ("cgroup_v2", {}, False),
    ("cgroup_v1", {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"}, True),
    ("cgroup_v1", {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
                   "memory.failcnt": "40\n", "memory.max_usage_in_bytes": "268435456\n",
                   "memory.limit_in_bytes": "268435456\n"}, False),
    ("cgroup_v1", {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n", "memory.failcnt": "40\n",
                   "memory.max_usage_in_bytes": "268435456\n", "memory.limit_in_bytes": "268435456\n"}, True),
    ("cgroup_v1", {"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n", "memory.failcnt": "0\n",
                   "memory.max_usage_in_bytes": "1000\n", "memory.limit_in_bytes": "268435456\n"}, False),
    ("cgroup_v1", {"memory.oom_control": "garbage", "memory.failcnt": "x"}, False),
    ("rss_watchdog", {"memory.events": "oom_kill 1\n"}, False),
])
def test_oom_kills_are_read_from_either_cgroup_version(version, files, killed):
    assert sandbox_limits.oom_killed_in(version, files) is killed


def test_without_cgroups_the_rss_watchdog_bounds_memory(box, monkeypatch):
    """Hosts where no cgroup can be created (CI may differ): the watchdog over the PID namespace holds."""
    monkeypatch.setattr(sandbox_limits, "own_cgroups", lambda *a, **k: {})
    r = call(box, "eat_memory", mb=4096, memory_mb=300, wall_s=60)
    assert not r.ok and "RSS watchdog" in r.error, r.error
    assert r.confinement.memory == "rss_watchdog" and r.confinement.pids == "wall_time_only"


@pytest.mark.parametrize("fn", ["fill_shm", "fill_memfd"])
def test_without_cgroups_memory_kept_in_tmpfs_or_a_memfd_counts_toward_the_bound(box, monkeypatch, fn):
    """A file in /dev/shm (a tmpfs) or an unmapped memfd is memory outside any RSS: the watchdog counts
    it (the probe kept 2 GiB in /dev/shm under a 512 MiB bound)."""
    monkeypatch.setattr(sandbox_limits, "own_cgroups", lambda *a, **k: {})
    r = call(box, fn, mb=600, memory_mb=256, wall_s=30)
    assert not r.ok and "memory limit" in r.error and "RSS watchdog" in r.error, (r.value, r.error)


def test_without_cgroups_system_v_shared_memory_cannot_hold_memory_outside_the_bound(box, monkeypatch):
    """A detached System V segment is in no RSS and out of the watchdog's sight (its IPC namespace is the
    sandbox's own): without a cgroup to charge it to, shmget is refused (seccomp, EPERM)."""
    monkeypatch.setattr(sandbox_limits, "own_cgroups", lambda *a, **k: {})
    r = call(box, "sysv_shm", mb=600, memory_mb=256, wall_s=30)
    assert r.ok and r.value == {"shmget": -1, "errno": 1} or not r.ok and "memory limit" in r.error, (r.value, r.error)


def test_the_shmget_filter_knows_its_machines():
    x86, arm = sandbox_limits.no_sysv_shm_filter("x86_64"), sandbox_limits.no_sysv_shm_filter("aarch64")
    assert len(x86) == 9 * 8 and len(arm) == 7 * 8  # sock_filter entries: 8 bytes each
    assert sandbox_limits.no_sysv_shm_filter("riscv64") is None  # unknown: no filter rather than a wrong one


def test_every_writable_tmpfs_is_no_bigger_than_the_memory_bound(box, monkeypatch):
    """/dev (bwrap's own tmpfs) and the empty tmpfs over a key store are read-only; /dev/shm is the one
    writable tmpfs and no bigger than the memory bound, on every path (cgroup or not)."""
    shared = box["tmp"] / "shared"
    (shared / "keys").mkdir(parents=True)
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(shared / "keys"))
    policy = sb.Policy(writable=box["work"], read_only=(shared,), limits=sb.Limits(wall_s=20, memory_bytes=300 << 20))
    r = sb.call_function(box["module"], "tmpfs_mounts", {}, policy)
    assert r.ok, r.error
    writable = {point: size for point, (ok, size) in r.value.items() if ok}
    assert list(writable) == ["/dev/shm"], r.value
    assert writable["/dev/shm"] <= 300 << 20, r.value


@pytest.mark.slow
def test_cpu_spin_is_stopped_by_the_cpu_limit(box):
    started = time.monotonic()
    r = call(box, "spin", cpu_s=2, wall_s=30)
    assert not r.ok and "SIGXCPU" in r.error and time.monotonic() - started < 12, r.error


def test_a_huge_file_is_stopped_by_the_file_size_limit(box):
    r = call(box, "big_file", mb=200)
    assert not r.ok and "SIGXFSZ" in r.error or "File too large" in (r.error or ""), r.error
    assert (box["work"] / "big.bin").stat().st_size <= 64 << 20


def test_the_parent_is_not_a_process_the_sandbox_can_signal(box):
    r = call(box, "kill_parent")  # its "parent" is the namespace's init, which ignores it; we are untouched
    assert r.ok or r.error
    os.kill(os.getpid(), 0)


# --------------------------------------------------------------------------------- policy and errors


def test_the_view_holds_no_home_no_etc_secrets_and_no_writable_code(box):
    args = sb.bwrap_args(sb.Policy(writable=box["work"]))
    bound = [args[i + 1] for i, a in enumerate(args) if a in ("--bind", "--ro-bind", "--dev-bind")]
    writable = [args[i + 1] for i, a in enumerate(args) if a == "--bind"]
    assert writable == [str(box["work"].resolve())]
    assert not any(p in ("/", "/root", "/home", "/etc", "/etc/shadow", "/etc/passwd") for p in bound), bound
    assert not any(p.startswith("/dev/nvidia") for p in bound)
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"):
        assert flag in args
    with pytest.raises(sb.SandboxConfigError, match="contains code"):
        sb.bwrap_args(sb.Policy(writable=Path(sb.python_roots()[0]).parent))


def test_gpu_nodes_only_when_a_device_is_asked_for(box, monkeypatch):
    fake = box["tmp"] / "dev"
    fake.mkdir()
    (fake / "nvidia0").write_text("")
    (fake / "nvidiactl").write_text("")
    monkeypatch.setattr(sb, "_GPU_NODES", (str(fake / "nvidia*"),))
    cpu = sb.bwrap_args(sb.Policy(writable=box["work"]))
    cuda = sb.bwrap_args(sb.Policy(writable=box["work"], device="cuda"))
    assert str(fake / "nvidia0") not in cpu
    assert cuda[cuda.index(str(fake / "nvidia0")) - 1] == "--dev-bind" and str(fake / "nvidiactl") in cuda


def test_secret_looking_environment_is_refused(box):
    for name in ("OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"):
        with pytest.raises(sb.SandboxConfigError, match=name):
            sb.sandbox_env(sb.Policy(writable=box["work"], env={name: "x"}))
    env = sb.sandbox_env(sb.Policy(writable=box["work"], env={"OMP_NUM_THREADS": "1"}))
    assert env["OMP_NUM_THREADS"] == "1" and env["HOME"] == str(box["work"].resolve())


def test_missing_bwrap_is_a_clear_refusal(box, monkeypatch):
    real_which = sb.shutil.which
    monkeypatch.setattr(sb.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    sb._probe.cache_clear()
    try:
        assert "apt-get install bubblewrap" in sb.available()
        with pytest.raises(sb.SandboxUnavailable, match="bubblewrap"):
            sb.Confined([sys.executable, "-c", "pass"], sb.Policy(writable=box["work"]))
    finally:
        monkeypatch.undo()
        sb._probe.cache_clear()
    assert sb.available() is None


def test_a_bwrap_without_a_bounded_tmpfs_is_a_clear_refusal(box, monkeypatch):
    """/dev/shm is bounded with --size (bubblewrap 0.7+): an older bwrap is refused with why, not run."""
    fake = box["tmp"] / "bwrap"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "bubblewrap 0.6.1"; exit 0; }\n'
                    'echo "bwrap: Unknown option --size" >&2\nexit 1\n')
    fake.chmod(0o755)
    real_which = sb.shutil.which
    monkeypatch.setattr(sb.shutil, "which", lambda name: str(fake) if name == "bwrap" else real_which(name))
    sb._probe.cache_clear()
    try:
        why = sb.available()
        assert why is not None and "bubblewrap 0.6.1 is too old" in why and "0.7 or later" in why, why
    finally:
        monkeypatch.undo()
        sb._probe.cache_clear()
    assert sb.available() is None


def test_terminate_reaches_the_command_so_it_can_shut_down_cleanly(box):
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (open('bye.txt', 'w').write('clean'), sys.exit(0)))\n"
            "open('ready.txt', 'w').write('1')\n"
            "time.sleep(60)\n")
    proc = sb.Confined([sys.executable, "-I", "-c", code], sb.Policy(writable=box["work"],
                                                                     limits=sb.Limits(wall_s=30)))
    deadline = time.monotonic() + 20
    while not (box["work"] / "ready.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.terminate()
    assert proc.wait(10) == 0
    assert (box["work"] / "bye.txt").read_text() == "clean"
    assert proc.killed_for is None


@pytest.mark.skipif(not Path("/dev/nvidiactl").exists(), reason="needs an NVIDIA GPU (device nodes) on this host")
def test_gpu_is_reachable_only_with_device_cuda(box):
    pytest.importorskip("torch")
    code = ("import torch\n"
            "ok = torch.cuda.is_available()\n"
            "x = (torch.ones(1024, device='cuda') * 2).sum().item() if ok else None\n"
            "print(ok, x)\n")
    cuda = sb.run([sys.executable, "-I", "-c", code],
                  sb.Policy(writable=box["work"], device="cuda", limits=sb.Limits(wall_s=120, memory_bytes=8 << 30)))
    assert cuda.stdout.split() == [b"True", b"2048.0"], cuda.stderr[-2000:]
    cpu = sb.run([sys.executable, "-I", "-c", code], sb.Policy(writable=box["work"], limits=sb.Limits(wall_s=120)))
    assert cpu.stdout.split()[:1] == [b"False"], cpu.stderr[-2000:]


def test_no_python_guard_is_left_in_the_sandbox_module():
    source = Path(sb.__file__).read_text()
    assert "addaudithook" not in source and "socket.socket.connect =" not in source
    assert subprocess.run(["bwrap", "--version"], capture_output=True).returncode == 0


def test_a_sandbox_started_from_a_worker_thread_outlives_that_thread(box):
    """bwrap's --die-with-parent is PR_SET_PDEATHSIG in the outer bwrap, and the kernel fires it when the
    *thread* that forked it exits. The lab starts servers from a thread pool that ends once they serve:
    forked from a pool worker, every server was SIGKILLed the moment the pool shut down. bwrap reports
    its init's pid on --info-fd only after that prctl, so waiting for it in the worker makes the test
    independent of timing (with plain Popen it fails every time)."""
    from concurrent.futures import ThreadPoolExecutor

    def start():
        proc = sb.Confined([sys.executable, "-I", "-c", "import time; time.sleep(30)"],
                           sb.Policy(writable=box["work"], limits=sb.Limits(wall_s=20)))
        deadline = time.monotonic() + 5
        while proc._init_pid is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return proc

    with ThreadPoolExecutor(max_workers=1) as pool:  # the worker thread exits at shutdown
        proc = pool.submit(start).result()
    try:
        assert proc._init_pid is not None, "bwrap never reported its init"
        time.sleep(0.5)
        assert proc.poll() is None, f"the sandbox died with the thread that started it (code {proc.poll()})"
    finally:
        proc.kill()
        proc.wait(10)


def test_confined_code_cannot_read_the_seal_keys_even_inside_a_bound_tree(box, monkeypatch):
    """Whoever reads a seal key can seal anything. A key store inside a directory the sandbox binds
    (here: a read-only input directory) is covered by an empty tmpfs: the file is not there."""
    shared = box["tmp"] / "shared"
    keys = shared / "keys"
    keys.mkdir(parents=True)
    (keys / "run.key").write_text("secret-key-material")
    (shared / "input.txt").write_text("visible")
    monkeypatch.setenv("PERFWARDEN_KEY_DIR", str(keys))
    probe = ("import pathlib, sys; out = pathlib.Path(sys.argv[1]); "
             "k = pathlib.Path(sys.argv[2]) / 'run.key'; i = pathlib.Path(sys.argv[3]); "
             "out.write_text(repr((k.exists() and k.read_text(), i.read_text())))")
    result = box["work"] / "seen.txt"
    proc = sb.Confined([sys.executable, "-I", "-c", probe, str(result), str(keys), str(shared / "input.txt")],
                       sb.Policy(writable=box["work"], read_only=(shared,), limits=sb.Limits(wall_s=20)))
    assert proc.wait(30) == 0
    assert result.read_text() == repr((False, "visible"))


def test_a_sandbox_dies_when_the_process_that_started_it_is_sigkilled(box):
    """A run SIGKILLed mid-measurement leaves no orphan server: the sandbox (started from a worker
    thread, as the lab starts servers) dies with the process."""
    script = textwrap.dedent(f"""
        import sys, time, threading
        from concurrent.futures import ThreadPoolExecutor
        from perfwarden.harness import sandbox as sb
        def start():
            p = sb.Confined([sys.executable, "-I", "-c", "import time; time.sleep(60)"],
                            sb.Policy(writable={str(box["work"])!r}, limits=sb.Limits(wall_s=None)))
            while p._init_pid is None:
                time.sleep(0.01)
            return p
        with ThreadPoolExecutor(1) as pool:
            p = pool.submit(start).result()
        print(p.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        bwrap_pid = int(parent.stdout.readline())
        assert Path(f"/proc/{bwrap_pid}").exists()
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{bwrap_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{bwrap_pid}").exists(), "the sandbox outlived the SIGKILLed process that started it"
    finally:
        parent.kill()


# ------------------------------------------------------------ the parent never raises for the code inside


@pytest.mark.parametrize("kind", ["dir", "fifo", "link", "file", "locked"])
def test_confined_code_that_replaces_the_harness_files_cannot_make_the_parent_raise_or_write(box, kind):
    """call_function never raises for the code's misbehaviour: its output files, tmp and .cache
    replaced by a directory, FIFO, link (to evidence outside), a file, or a locked directory -- this call
    and the next both return a result, and nothing outside is written through a planted link."""
    r = call(box, "vandalize", kind=kind, target=str(box["evidence"]))
    assert isinstance(r, sb.SandboxResult) and (r.error is None or isinstance(r.error, str))
    again = call(box, "good", n=4)
    assert again.ok and again.value == 8, again.error
    assert box["evidence"].read_text() == '{"rep": 0}\n'
    os.chmod(box["work"], 0o755)


def test_a_working_directory_left_as_a_link_loop_does_not_make_the_parent_raise(box):
    sub = box["work"] / "sub"
    sub.mkdir()
    policy = sb.Policy(writable=box["work"], cwd=sub, limits=sb.Limits(wall_s=20))
    first = sb.call_function(box["module"], "loop_cwd", {}, policy)
    assert first.ok and sub.is_symlink(), first.error
    again = sb.call_function(box["module"], "good", {"n": 1}, policy)  # resolving the loop used to raise
    assert isinstance(again, sb.SandboxResult) and (again.ok or again.error)


@pytest.mark.parametrize("text,times", [("[", 200_000), ('{"ok": true, "error": {"a": 1}, "value": 3}', 1),
                                        ('"a string"', 1), ("1", 6000), ("\\udcff\\udcfe{", 1), ("", 1),
                                        ('{"ok": "yes", "error": ["x"]}', 1)])
def test_a_result_that_is_not_the_harness_json_is_a_failure_not_an_exception(box, text, times):
    r = call(box, "raw_result", text=text, times=times)
    assert isinstance(r, sb.SandboxResult)
    assert isinstance(r.ok, bool) and (r.error is None if r.ok else isinstance(r.error, str) and r.error), r



# ------------------------------------------------------------------------------------- no host paths


def test_no_host_path_of_the_run_shows_inside_and_init_names_none_at_all(box):
    """The probe read host paths in /proc/1/cmdline (bwrap's whole command line: every bind source) and
    /proc/self/mountinfo. Now bwrap's options come through --args and the command through a script, so
    init's command line names no host path; the writable directory and the code under test sit at
    neutral paths, and the paths handed in are rewritten to them."""
    scratch = box["work"] / "scratch.txt"
    r = call(box, "views", wall_s=20)
    assert r.ok, r.error
    seen = r.value
    run_paths = [str(box["tmp"]), str(box["tmp"].resolve()), str(box["work"].resolve())]
    for where in ("init", "self", "environ", "cwd", "file"):
        assert not any(p in seen[where] for p in run_paths), (where, seen[where][:500])
    assert not any(p in point for p in run_paths for point in seen["points"]), seen["points"]
    host_roots = [str(p) for p in sb.python_roots()] + [sys.prefix, str(Path(sys.executable).parent)]
    assert not any(root in seen["init"] for root in host_roots), seen["init"]
    assert seen["cwd"] == "/sandbox/work" and seen["file"].startswith("/sandbox/in/")
    w = call(box, "write", path=str(scratch), text="through the neutral path")  # a host path handed in still works
    assert w.ok and scratch.read_text() == "through the neutral path"


def test_the_path_map_rewrites_whole_paths_only(tmp_path):
    run = tmp_path / "run"
    (run / "work").mkdir(parents=True)
    (run / "work" / "in.py").write_text("")
    (tmp_path / "cand.py").write_text("")
    policy = sb.Policy(writable=run / "work", inputs=(tmp_path / "cand.py", run / "work" / "in.py"))
    paths = sb.path_map(policy)
    w, c = str((run / "work").resolve()), str((tmp_path / "cand.py").resolve())
    assert paths.translate(f"{w}/a.pt") == "/sandbox/work/a.pt"
    assert paths.translate(f"{c}:rmsnorm") == "/sandbox/in/0/cand.py:rmsnorm"
    assert paths.translate(f"{w}2/x {w}.bak x{w}") == f"{w}2/x {w}.bak x{w}"  # other names left alone
    assert paths.inside(run / "work" / "in.py") == "/sandbox/work/in.py"  # an input inside the writable dir
    assert paths.translate_value({"out": f"{w}/o.pt", "n": [1, f"{c}:f"]}) == {
        "out": "/sandbox/work/o.pt", "n": [1, "/sandbox/in/0/cand.py:f"]}
    assert paths.inside("/usr/bin/python3") == "/usr/bin/python3"
    args = sb.bwrap_args(policy)
    assert args[args.index(w) + 1] == "/sandbox/work"
    ro = args.index(str((run / "work" / "in.py").resolve()))
    assert args[ro - 1] == "--ro-bind" and args[ro + 1] == "/sandbox/work/in.py"
    assert args.index("/sandbox/work/in.py") > args.index("/sandbox/work")  # read-only on top of the writable dir
