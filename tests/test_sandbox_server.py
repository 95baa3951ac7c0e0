"""A banked kernel runs inside the serving process: that process is confined like any generated code.

A hostile override (module-level code runs when the server loads it) looks for the parent's API key,
writes outside its scratch directory and into the leg's evidence, and calls a listening localhost port.
Every effect is checked from outside the server; the override still serves (it is also a correct
RMSNorm), so confinement costs the kernel nothing it legitimately needs.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest

from perfwarden.harness import sandbox
from perfwarden.harness.targets import EmbeddedTarget, TargetStartError

pytest.importorskip("torch")

SECRET = "sk-perfwarden-server-secret-777"
REPO = Path(__file__).resolve().parents[1]

HOSTILE_OVERRIDE = '''
import json, os, socket, sys, torch

found = {{"env": {{k: v for k, v in os.environ.items() if "{secret}" in v or k == "OPENAI_API_KEY"}}, "proc": []}}
for pid in os.listdir("/proc"):
    try:
        if pid.isdigit() and b"{secret}" in open(f"/proc/{{pid}}/environ", "rb").read():
            found["proc"].append(pid)
    except OSError:
        pass
for target in ({outside!r}, {evidence!r}, {code!r}):
    try:
        with open(target, "a") as f:
            f.write("escaped")
        found[target] = "wrote"
    except OSError as exc:
        found[target] = type(exc).__name__
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    found["net"] = "connected"
except OSError as exc:
    found["net"] = type(exc).__name__
print("HOSTILE-PROBE " + json.dumps(found), file=sys.stderr, flush=True)


def rmsnorm(hidden_states, weight, eps):
    x = hidden_states.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(hidden_states.dtype)
'''


@pytest.mark.slow
@pytest.mark.skipif(sandbox.available() is not None, reason=f"sandbox unavailable: {sandbox.available()}")
def test_a_hostile_override_in_the_server_gets_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    leg = tmp_path / "run" / "legs" / "cand"
    leg.mkdir(parents=True)
    evidence = leg / "bench_runs.jsonl"
    evidence.write_text('{"rep": 0}\n')
    outside = tmp_path / "escaped.txt"
    code = REPO / "harness" / "ops" / "reference.py"
    code_before = code.read_bytes()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.settimeout(0.2)
        override = tmp_path / "generated" / "rmsnorm_llm_0.py"
        override.parent.mkdir()
        override.write_text(HOSTILE_OVERRIDE.format(secret=SECRET, outside=str(outside), evidence=str(evidence),
                                                    code=str(code), port=listener.getsockname()[1]))
        knobs = {"threads": 1, "op_overrides": {"rmsnorm": f"{override}:rmsnorm"}}
        with EmbeddedTarget(leg, knobs) as target:
            assert target.confinement is not None and target.confinement["network"].startswith("none")
            body = {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
            response = httpx.post(f"{target.base_url}/v1/completions", json=body, timeout=120)
            assert response.status_code == 200  # the kernel still serves
            info = httpx.get(f"{target.base_url}/server_info", timeout=10).json()
            assert info["op_overrides_detail"]["rmsnorm"]["modules_patched"] > 0
            assert info["internal_states"][0]["op_override_calls"]["rmsnorm"] > 0
        with pytest.raises(socket.timeout):
            listener.accept()
    log = target.log_text()
    probe = json.loads(log.split("HOSTILE-PROBE ", 1)[1].splitlines()[0])
    assert probe["env"] == {} and probe["proc"] == []
    assert probe["net"] != "connected"
    assert not outside.exists() and evidence.read_text() == '{"rep": 0}\n' and code.read_bytes() == code_before
    assert SECRET not in log
    assert "=== sandbox " in log


def test_generated_code_is_refused_by_an_unconfined_server(tmp_path):
    override = tmp_path / "generated" / "k.py"
    override.parent.mkdir()
    override.write_text("def rmsnorm(h, w, eps):\n    return h\n")
    target = EmbeddedTarget(tmp_path / "leg", {"threads": 1, "op_overrides": {"rmsnorm": f"{override}:rmsnorm"}},
                            confine=False)
    with pytest.raises(TargetStartError, match="refusing to load generated code"):
        target.start()
    assert target.proc is None
    shipped = EmbeddedTarget(tmp_path / "leg2", {"op_overrides": {
        "rmsnorm": str(REPO / "harness" / "ops" / "rmsnorm_alt.py") + ":rmsnorm"}}, confine=False)
    assert shipped.generated_code() == []


def test_the_server_environment_holds_no_secret(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    env = EmbeddedTarget(tmp_path / "leg", {"threads": 2}).environment()
    policy = sandbox.Policy(writable=tmp_path / "leg" / "server-scratch", env=env)
    full = sandbox.sandbox_env(policy)
    assert SECRET not in json.dumps(full) and full["OMP_NUM_THREADS"] == "2"
    assert set(full) <= set(sandbox.sandbox_env(sandbox.Policy(writable=tmp_path))) | set(env)
