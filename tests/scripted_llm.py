"""A local scripted OpenAI-compatible chat server for tests (never the network).

Each POST to /v1/chat/completions records the JSON payload and answers with the next scripted reply:
a string (the assistant message content), a callable(payload) -> string, or an int (an HTTP error).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class ScriptedLLM:
    def __init__(self, replies: list[str | int | Callable[[dict], str]], default: str | None = None):
        self.replies = list(replies)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length))
                with outer._lock:
                    outer.requests.append(payload)
                    outer.paths.append(self.path)
                    reply = outer.replies.pop(0) if outer.replies else outer.default
                if reply is None:
                    reply = 500
                if isinstance(reply, int):
                    self.send_response(reply)
                    self.end_headers()
                    self.wfile.write(b'{"error": "scripted failure"}')
                    return
                content = reply(payload) if callable(reply) else reply
                body = json.dumps({"id": "x", "object": "chat.completion", "model": payload.get("model"),
                                   "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 100, "completion_tokens": 20}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def user_messages(self) -> list[str]:
        return [m["content"] for r in self.requests for m in r["messages"] if m["role"] == "user"]
