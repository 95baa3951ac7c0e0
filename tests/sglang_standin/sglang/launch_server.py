"""Stand-in for ``python -m sglang.launch_server`` (a test double; standard library only).

What it copies from SGLang, because the lab and the auditor depend on it:

- the command line: the ``ServerArgs`` flags perfwarden's SGLangConfig sets, with SGLang's spellings
  and choices (an unknown flag exits 2, as argparse does in SGLang);
- ``server_args=ServerArgs(...)`` logged at start, then "The server is fired up and ready to roll!";
- ``GET /health``; ``GET /server_info`` and ``/get_server_info``: the arguments (with SGLang's own
  resolution of the GPU-dependent defaults: ``chunked_prefill_size`` 8192, ``cuda_graph_max_bs`` 160,
  ``cuda_graph_bs`` generated from ``cuda_graph_max_bs``, as ``ServerArgs._handle_gpu_memory_settings``
  does), the scheduler's ``max_total_num_tokens``, ``internal_states`` and ``version``;
- ``GET /v1/models``; ``POST /v1/completions`` (streaming SSE with a final usage chunk, or one JSON
  body) and ``POST /v1/chat/completions`` (non-streaming), honouring ``max_tokens`` and ``ignore_eos``.

Text is deterministic English taken from a fixed passage at an offset hashed from the prompt, so greedy
outputs are equal across lossless configurations; a quantized KV cache or weights (lossy) changes every
seventh word, as a real lossy change would sometimes change greedy tokens. Each finished request
logs SGLang's decode line (``Decode batch. #running-req: …, token usage: …``), the line the auditor reads
KV-pool usage from. Scripted by environment variables (the lab passes its environment through):
``SGLANG_STANDIN_TOKEN_MS`` (token spacing, default 2 ms), ``SGLANG_STANDIN_FAIL_AFTER=N`` (exit 1 after
N completions: a crash mid-rep), ``SGLANG_STANDIN_REFUSE=1`` (exit 1 at start: a bad knob).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PASSAGE = (
    "The river runs past the old mill and under the stone bridge before it reaches the town. In the "
    "morning the market opens early and people bring bread, fruit and fresh fish from the coast. Children "
    "walk to school along the water while their parents talk about the weather and the price of grain. "
    "Later the light turns warm over the hills, the shops close one by one, and the last boats come home "
    "with the evening tide. At night the streets are quiet and the only sound is the water moving slowly "
    "toward the sea."
).split()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sglang.launch_server")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--schedule-policy", default="fcfs",
                   choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key"])
    p.add_argument("--attention-backend", choices=["triton", "torch_native", "flex_attention", "fa3", "fa4",
                                                   "flashinfer", "flashmla", "trtllm_mha", "aiter"])
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--cuda-graph-bs", type=int, nargs="+")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--enable-torch-compile", action="store_true")
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--kv-cache-dtype", default="auto",
                   choices=["auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "fp4_e2m1"])
    p.add_argument("--quantization")
    p.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    return p.parse_args(argv)


def resolve(args: argparse.Namespace) -> dict:
    """What SGLang reports: its arguments with the GPU-dependent defaults filled in."""
    info = dict(vars(args))
    if info["chunked_prefill_size"] is None:
        info["chunked_prefill_size"] = 8192
    if info["cuda_graph_bs"] is None:
        if info["cuda_graph_max_bs"] is None:
            info["cuda_graph_max_bs"] = 160
        info["cuda_graph_bs"] = [1, 2, 4] + list(range(8, info["cuda_graph_max_bs"] + 1, 8))
    else:
        info["cuda_graph_max_bs"] = max(info["cuda_graph_bs"])
    if info["mem_fraction_static"] is None:
        info["mem_fraction_static"] = 0.88
    if info["attention_backend"] is None:
        info["attention_backend"] = "flashinfer"
    info["served_model_name"] = info["model_path"]
    info["random_seed"] = 1234
    return info


def server_args_line(info: dict) -> str:
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in info.items()) + ")"


class State:
    def __init__(self, args: argparse.Namespace, info: dict):
        self.args = args
        self.info = info
        self.lossy = info["kv_cache_dtype"] not in ("auto", "bf16", "bfloat16") or bool(info["quantization"])
        self.spec = bool(info["speculative_algorithm"])
        self.completions = 0
        self.running = 0
        self.lock = threading.Lock()
        self.token_s = float(os.environ.get("SGLANG_STANDIN_TOKEN_MS", "2")) / 1000
        fail = os.environ.get("SGLANG_STANDIN_FAIL_AFTER")
        self.fail_after = int(fail) if fail else None
        self.pool = int(info["mem_fraction_static"] * 200_000)

    def words(self, prompt: str, n: int) -> list[str]:
        start = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16) % len(PASSAGE)
        out = [PASSAGE[(start + i) % len(PASSAGE)] for i in range(n)]
        if self.lossy:
            out = [w if i % 7 != 6 else "and" for i, w in enumerate(out)]
        return out

    def begin(self) -> None:
        with self.lock:
            self.completions += 1
            self.running += 1
            if self.fail_after is not None and self.completions > self.fail_after:
                print("stand-in: simulated crash (CUDA error: an illegal memory access)", flush=True)
                os._exit(1)

    def end(self, tokens: int) -> None:
        with self.lock:
            used = self.running * tokens
            print(f"Decode batch. #running-req: {self.running}, #token: {used}, token usage: {used / self.pool:.2f}, "
                  f"gen throughput (token/s): {1 / max(self.token_s, 1e-6):.2f}, #queue-req: 0", flush=True)
            self.running -= 1

    def server_info(self) -> dict:
        accept = 2.0 if self.spec else None
        return {**self.info, "max_total_num_tokens": self.pool,
                "internal_states": [{"avg_spec_accept_length": accept, "last_gen_throughput": 0.0}],
                "version": "0.0.0+standin"}


def handler(state: State):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *a):  # SGLang logs requests only with --log-requests
            pass

        def _json(self, code: int, obj) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self._json(200, {})
            elif self.path in ("/server_info", "/get_server_info"):
                self._json(200, state.server_info())
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": state.info["model_path"], "object": "model"}]})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self):
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            except ValueError:
                return self._json(400, {"error": {"message": "body is not JSON"}})
            if self.path == "/v1/completions":
                return self._completion(body, chat=False)
            if self.path == "/v1/chat/completions":
                return self._completion(body, chat=True)
            self._json(404, {"detail": "Not Found"})

        def _completion(self, body: dict, chat: bool) -> None:
            state.begin()
            try:
                self._answer(body, chat)
            finally:
                state.end(int(body.get("max_tokens") or 16))

        def _answer(self, body: dict, chat: bool) -> None:
            prompt = (body["messages"][-1]["content"] if chat else body.get("prompt", "")) or ""
            n = int(body.get("max_tokens") or 16)
            if not body.get("ignore_eos"):
                n = min(n, 12)  # a real model stops at end-of-sequence
            words = state.words(str(prompt), n)
            usage = {"prompt_tokens": len(str(prompt).split()), "completion_tokens": n,
                     "total_tokens": len(str(prompt).split()) + n}
            finish = "length" if n == int(body.get("max_tokens") or 16) else "stop"
            if not body.get("stream"):
                text = " ".join(words)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                          if chat else {"index": 0, "text": " " + text, "finish_reason": finish})
                time.sleep(n * state.token_s)
                return self._json(200, {"id": "cmpl-standin", "object": "text_completion", "choices": [choice],
                                        "usage": usage, "model": state.info["model_path"]})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i, w in enumerate(words):
                time.sleep(state.token_s)
                chunk = {"id": "cmpl-standin", "object": "text_completion",
                         "choices": [{"index": 0, "text": " " + w,
                                      "finish_reason": finish if i == len(words) - 1 else None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            if (body.get("stream_options") or {}).get("include_usage"):
                self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return H


def main() -> None:
    args = parse(sys.argv[1:])
    info = resolve(args)
    stamp = time.strftime("[%Y-%m-%d %H:%M:%S]")
    print(f"{stamp} {server_args_line(info)}", flush=True)
    if os.environ.get("SGLANG_STANDIN_REFUSE"):
        print("ValueError: stand-in refused to start (simulated bad argument)", flush=True)
        sys.exit(1)
    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128  # the default backlog (5) drops concurrent connects: 1 s SYN retries

    server = Server((args.host, args.port), handler(State(args, info)))
    print(f"{stamp} The server is fired up and ready to roll!", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
