"""What perfwarden tells Ray before Ray starts (orchestrator/ray_env.py), and what a node is told about the
lab (orchestrator/lab_spec.py): fast, no Ray process."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from perfwarden.harness.labs.lab import LabError, LabSettings, TargetLabSpec
from perfwarden.orchestrator import ray_env
from perfwarden.orchestrator.lab_spec import build_lab, describe, lab_for, lab_settings
from perfwarden.orchestrator.settings import RunSettings
from perfwarden.orchestrator.simlab import SyntheticLab


@pytest.fixture
def ray_vars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No Ray variable of the person running the tests; HOME is a fresh folder."""
    for name in list(os.environ):
        if name.startswith("RAY_"):
            monkeypatch.delenv(name)
    for name in (ray_env.USAGE_STATS, ray_env.AUTH_MODE, ray_env.KEEP_LOOPBACK, ray_env.TOKEN, ray_env.WORKER_NICENESS):
        monkeypatch.setenv(name, "")  # recorded as absent, so what ray_env.prepare sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("address, loopback", [("local", True), ("127.0.0.1:6379", True), ("ray://127.0.0.1:10001", True),
                                               ("localhost:6379", True), ("[::1]:6379", True), ("10.0.0.5:6379", False),
                                               ("head.example:6379", False), ("127.example:1", False)])
def test_loopback_addresses_are_told_apart(address, loopback):
    assert ray_env.is_loopback(address) is loopback


def test_defaults_are_safe_and_the_persons_own_settings_stay(ray_vars, monkeypatch):
    ray_env.prepare("10.0.0.5:6379")
    assert os.environ[ray_env.USAGE_STATS] == "0" and os.environ[ray_env.AUTH_MODE] == "token"
    assert os.environ[ray_env.KEEP_LOOPBACK] == "1"  # a real address: Ray resolves this host's own IP
    monkeypatch.delenv(ray_env.KEEP_LOOPBACK)
    monkeypatch.setenv(ray_env.AUTH_MODE, "disabled")
    ray_env.prepare("local")
    assert os.environ[ray_env.KEEP_LOOPBACK] == "0" and os.environ[ray_env.AUTH_MODE] == "disabled"
    assert ray_env.private_token(create=True) is None  # auth off by the person's choice: no token made
    assert os.environ[ray_env.WORKER_NICENESS] == "0"  # a step's servers at a run's own priority
    monkeypatch.setenv(ray_env.WORKER_NICENESS, "5")
    ray_env.prepare("local")
    assert os.environ[ray_env.WORKER_NICENESS] == "5"


def test_a_started_cluster_gets_a_new_private_token(ray_vars):
    ray_env.prepare("local")
    path = ray_env.private_token(create=True)
    assert path == ray_vars / ".ray" / "auth_token"
    assert mode(path) == 0o600 and mode(path.parent) == 0o700 and len(path.read_text()) == 2 * ray_env.TOKEN_BYTES
    assert ray_env.private_token(create=True) == path and len(path.read_text()) == 64  # kept, not replaced


def test_joining_never_invents_a_token(ray_vars):
    ray_env.prepare("10.0.0.5:6379")
    with pytest.raises(ray_env.ClusterError, match="no token"):
        ray_env.private_token(create=False)
    assert not (ray_vars / ".ray").exists()


def readable_token(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A token file others can read, named by ``RAY_AUTH_TOKEN_PATH``, token auth on."""
    token = folder / "tok"
    token.write_text("secret")
    token.chmod(0o644)
    monkeypatch.setenv(ray_env.TOKEN_PATH, str(token))
    ray_env.prepare("local")
    return token


def test_a_readable_token_of_ours_is_made_private(ray_vars, monkeypatch):
    """Ray's own ``ray.init`` and ``ray get-auth-token --generate`` write the token with the umask (0644)."""
    token = readable_token(ray_vars, monkeypatch)
    assert ray_env.private_token(create=False) == token and mode(token) == 0o600


def test_a_readable_token_that_is_not_ours_or_not_a_file_is_refused(ray_vars, monkeypatch):
    token = readable_token(ray_vars, monkeypatch)
    monkeypatch.setattr(ray_env.os, "getuid", lambda: os.geteuid() + 1)
    with pytest.raises(ray_env.ClusterError, match="not ours"):
        ray_env.private_token(create=False)
    assert mode(token) == 0o644
    link = ray_vars / "link"
    link.symlink_to(token)
    monkeypatch.setenv(ray_env.TOKEN_PATH, str(link))
    with pytest.raises(ray_env.ClusterError, match="not a regular file"):
        ray_env.private_token(create=True)


def test_a_token_given_inline_needs_no_file(ray_vars, monkeypatch):
    monkeypatch.setenv(ray_env.TOKEN, "inline")
    ray_env.prepare("10.0.0.5:6379")
    assert ray_env.private_token(create=False) is None


def test_a_synthetic_lab_travels_as_its_parameters():
    lab = SyntheticLab(cv=0.03, seed=7, contended="cand", fail_first_quality=True)
    lab.rep_delay_s = 0.25
    spec = describe(lab)
    rebuilt = build_lab(spec.model_validate(spec.model_dump()))  # what arrives is data, validated again
    assert isinstance(rebuilt, SyntheticLab) and rebuilt is not lab
    assert (rebuilt.effects, rebuilt.cv, rebuilt.seed, rebuilt.contended, rebuilt.fail_first_quality,
            rebuilt.rep_delay_s) == (lab.effects, 0.03, 7, "cand", True, 0.25)


def test_a_target_lab_travels_as_the_settings_it_was_built_from():
    from perfwarden.harness.labs.embedded import EmbeddedLab

    run_settings = RunSettings(target="embedded", qps=3.0, max_tokens=8, base_config={"threads": 1})
    settings = lab_settings(run_settings)
    spec = describe(EmbeddedLab.from_settings(settings, on_rep=print))
    assert isinstance(spec, TargetLabSpec) and spec.settings == settings and spec.engine_python is None
    assert describe(lab_for(run_settings)) == spec
    rebuilt = build_lab(TargetLabSpec.model_validate_json(spec.model_dump_json()))
    assert isinstance(rebuilt, EmbeddedLab) and rebuilt.load == EmbeddedLab.from_settings(settings).load
    with pytest.raises(LabError, match="not built from a run's settings"):
        describe(EmbeddedLab(qps=3.0))


def test_a_lab_with_behaviour_of_its_own_has_no_description():
    class OwnLab(SyntheticLab):
        pass

    for lab in (OwnLab(), SyntheticLab(surface=lambda config: 1.0), SyntheticLab(crash_after=1)):
        with pytest.raises(LabError, match="cannot be described"):
            describe(lab)
    with pytest.raises(LabError, match="cannot be described"):
        describe(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("ip, loopback", [("127.0.0.1", True), ("::ffff:127.0.0.1", True), ("::1", True),
                                          ("127.0.1.1", True), ("0.0.0.0", False), ("::", False),
                                          ("192.0.2.2", False), ("::ffff:192.0.2.2", False), ("fe80::1%eth0", False)])
def test_the_socket_check_tells_loopback_from_every_other_address(ip, loopback):
    from ray_sockets import Listener

    assert Listener(1, "raylet", ip, 1, "tcp").loopback is loopback


def test_the_socket_check_sees_a_marked_processs_listening_socket(tmp_path):
    """The check the cluster tests rely on finds what a process they started listens on (here on 127.0.0.1)."""
    import subprocess
    import sys
    import time

    from ray_sockets import MARK, end_marked, listeners, new_mark

    mark = new_mark()
    code = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); time.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, MARK: mark})
    try:
        port = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        found = []
        while not found and time.monotonic() < deadline:
            found = [s for s in listeners(mark) if s.port == port]
        assert found and found[0].pid == proc.pid and found[0].loopback
    finally:
        end_marked(mark)
        proc.wait(timeout=10)


class _Starting:
    """A process as the socket check sees it between fork and exec (its parent's environment, no marker),
    then after exec (same pid, same start time, its own environment)."""

    def __init__(self, started: float, environments: list[dict[str, str]]):
        self.pid = 4242
        self.info = {"create_time": started}
        self._environments = environments

    def environ(self) -> dict[str, str]:
        return self._environments.pop(0) if len(self._environments) > 1 else self._environments[0]


def test_a_process_caught_before_its_exec_is_read_again():
    """The run a cluster test starts was once sampled before its exec and never seen again (its sockets
    missed): an unmarked process is only remembered as unmarked once it is past its start."""
    import time

    from ray_sockets import MARK, SETTLED_S, _mark_of

    young = _Starting(time.time(), [{}, {MARK: "m1"}])
    assert _mark_of(young) is None and _mark_of(young) == "m1"
    settled = _Starting(time.time() - SETTLED_S - 1, [{}, {MARK: "m2"}])
    settled.pid = 4243
    assert _mark_of(settled) is None and _mark_of(settled) is None  # an old unmarked process is read once

def test_a_lab_settings_record_copies_every_field_it_has_from_the_run_settings():
    """A field added to ``LabSettings`` and not copied by ``lab_settings`` would silently keep its default."""
    run_settings = RunSettings(target="embedded", model="/weights", qps=3.5, rep_seconds=2.0, max_tokens=9,
                               scenario="server", offline_samples=5, seed=11, base_config={"threads": 1})
    assert lab_settings(run_settings).model_dump() == {name: getattr(run_settings, name)
                                                       for name in LabSettings.model_fields}
    with pytest.raises(ValueError, match="synthetic"):
        lab_settings(RunSettings(target="synthetic"))
