"""SGLang target: command building and server_info capture (the real launch needs a GPU host).

The capture test starts a stand-in process that speaks SGLang's readiness and info endpoints
(/health, /get_server_info only -- the older route), so the lifecycle code runs for real here."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from perfwarden.harness.sglang_target import SglangTarget, flag_args
from perfwarden.harness.targets import TargetStartError


def test_flag_args_map_config_to_launch_flags():
    args = flag_args({"tp_size": 8, "mem_fraction_static": 0.85, "disable_radix_cache": True,
                      "enable_torch_compile": False, "speculative_algorithm": None, "attention_backend": "triton",
                      "op_overrides": {"x": "y"}, "model_path": "m", "port": 1})
    assert args == ["--attention-backend", "triton", "--disable-radix-cache", "--mem-fraction-static", "0.85",
                    "--tp-size", "8"]


def test_command_uses_the_sglang_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWARDEN_SGLANG_PYTHON", "/opt/sglang-env/bin/python")
    t = SglangTarget(tmp_path, {"model_path": "/models/llama", "tp_size": 2}, port=30001)
    assert t.command() == ["/opt/sglang-env/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/llama",
                           "--host", "127.0.0.1", "--port", "30001", "--tp-size", "2"]


def test_model_path_is_required(tmp_path):
    with pytest.raises(ValueError, match="model_path"):
        SglangTarget(tmp_path, {"tp_size": 1})


STAND_IN = textwrap.dedent('''
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    info = {"model_path": sys.argv[sys.argv.index("--model-path") + 1], "tp_size": 2, "mem_fraction_static": 0.85,
            "internal_states": [{"avg_spec_accept_length": None}]}
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            if self.path in ("/health", "/get_server_info"):
                body = json.dumps(info if self.path != "/health" else {}).encode()
                self.send_response(200); self.end_headers(); self.wfile.write(body)
            else:
                self.send_response(404); self.end_headers()
    print("The server is fired up and ready to roll!", flush=True)
    HTTPServer(("127.0.0.1", port), H).serve_forever()
''')


class StandIn(SglangTarget):
    def command(self):
        return [sys.executable, "-c", STAND_IN] + super().command()[3:]


def test_server_info_capture_and_teardown(tmp_path):
    t = StandIn(tmp_path / "leg", {"model_path": "/models/x", "tp_size": 2}, python=sys.executable, start_timeout_s=30)
    info = t.start()
    try:
        assert info["model_path"] == "/models/x" and info["tp_size"] == 2
        saved = json.loads((tmp_path / "leg" / "server_info.json").read_text())
        assert saved == info
        assert "fired up" in (tmp_path / "leg" / "server.log").read_text()
    finally:
        t.stop()
    assert not t.is_running()


def test_start_failure_is_classified(tmp_path):
    class Dies(SglangTarget):
        def command(self):
            return [sys.executable, "-c", "import sys; print('CUDA error: no device'); sys.exit(1)"]

    t = Dies(tmp_path / "leg", {"model_path": "m"}, python=sys.executable, start_timeout_s=30)
    with pytest.raises(TargetStartError) as info:
        t.start()
    assert info.value.returncode == 1 and "CUDA error" in info.value.log_tail
