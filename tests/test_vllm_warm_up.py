"""A vLLM server answers one request of the reps' own kind before its first rep, once per server process,
outside every rep's counter window (harness/labs/vllm.py): the engine's counters then witness the
reps alone, and a server's first-request costs land in no measured rep."""

from __future__ import annotations

import json
import threading
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

from perfwarden.harness.labs.vllm import WARMUP_PROMPT, VLLMLab
from perfwarden.harness.loadgen_client import LoadSettings, request_payload


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, dict]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Recorder.seen.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"choices":[{"text":"x"}]}\n\ndata: [DONE]\n\n')

    def log_message(self, *args: object) -> None:
        pass


class _Server:
    """A server process as the lab holds it (only its address is read)."""

    def __init__(self, base_url: str):
        self.base_url = base_url


def test_each_server_is_warmed_once_with_the_reps_own_kind_of_request():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        load = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.1, endpoint="chat")
        lab = SimpleNamespace(load=load)
        lab._warmed = weakref.WeakSet()
        first = _Server(f"http://127.0.0.1:{server.server_port}")
        second = _Server(first.base_url)  # a restarted server: a new process
        for target in (first, first, second):
            VLLMLab._warm_up(lab, target)
        assert [path for path, _ in _Recorder.seen] == ["/v1/chat/completions"] * 2  # once per server
        expected = request_payload(WARMUP_PROMPT, load)
        assert all(body == expected for _, body in _Recorder.seen)
        assert expected["stream"] is True
    finally:
        server.shutdown()


def test_a_server_that_cannot_answer_the_warm_up_is_left_to_its_rep():
    lab = SimpleNamespace(load=LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.1,
                                            request_timeout_s=2.0))
    lab._warmed = weakref.WeakSet()
    VLLMLab._warm_up(lab, _Server("http://127.0.0.1:9"))  # nothing listens: no raise
