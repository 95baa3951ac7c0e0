"""Measure that the keys the auditor calls inert are inert on the embedded target.

Three launches of the embedded server with one configuration: A, then B with the keys under test
flipped (another port, hence another pid and start time; the default max_batch_size given explicitly,
so ``explicit_knobs`` differs), then A again (A2: the noise between two identical launches). Each
launch serves the same greedy requests; the keys flipped are read from the servers' own
``/server_info`` (every flattened key whose value differs between A and B), not assumed. B is inert
when its outputs equal A's and A2's token for token and its throughput is within the noise band
(twice the A/A2 difference, at least 5% on a shared machine) of theirs. The result is written to
``auditor/data/inert_measurements.json``, which the registry requires for every entry marked
``measured`` (``registry.inert_entries``).

    python benchmarks/inert_keys.py [--out auditor/data/inert_measurements.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["The capital of France is", "Water boils at", "A short poem about the sea:", "Three primary colours are"]
MAX_TOKENS = 16
ROUNDS = 2
FLOOR = 0.05
"""Smallest relative band: two identical launches on a shared 2-core machine differ by a few percent."""
START_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def flatten(obj: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in obj.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def launch(sets: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    args = [sys.executable, "-m", "perfwarden.harness.embedded_server", "--port", str(port)]
    for item in sets:
        args += ["--set", item]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the embedded server exited with {proc.returncode} during start-up")
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("the embedded server did not become healthy")


def complete(url: str, prompt: str) -> tuple[str, int]:
    body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}
    answer = httpx.post(url + "/v1/completions", json=body, timeout=600.0).json()
    return answer["choices"][0]["text"], answer["usage"]["completion_tokens"]


def measure(sets: list[str]) -> dict:
    proc, url = launch(sets)
    try:
        info = httpx.get(url + "/server_info", timeout=10.0).json()
        throughputs, texts = [], None
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            for _ in range(ROUNDS):
                t0 = time.perf_counter()
                answers = list(pool.map(lambda p: complete(url, p), PROMPTS))
                throughputs.append(sum(n for _, n in answers) / (time.perf_counter() - t0))
                texts = texts or [t for t, _ in answers]
                if [t for t, _ in answers] != texts:
                    raise SystemExit("one launch answered the same greedy requests differently")
        return {"info": info, "texts": texts, "throughput": statistics.median(throughputs)}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "auditor" / "data" / "inert_measurements.json")
    args = parser.parse_args()
    base = ["threads=2"]
    a = measure(base)
    b = measure(base + ["max_batch_size=1"])  # the default, given explicitly
    a2 = measure(base)
    fa, fb = (flatten({k: v for k, v in x["info"].items() if k != "internal_states"}) for x in (a, b))
    flipped = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
    ref = (a["throughput"] + a2["throughput"]) / 2
    band = max(FLOOR, 2 * abs(a["throughput"] - a2["throughput"]) / ref)
    delta = (b["throughput"] - ref) / ref
    same_output = a["texts"] == b["texts"] == a2["texts"]
    result = {"target": "embedded", "keys_flipped": flipped, "outputs_identical": same_output,
              "throughput_tok_s": {"A": a["throughput"], "B": b["throughput"], "A2": a2["throughput"]},
              "relative_delta": delta, "noise_band": band, "inert": same_output and abs(delta) <= band,
              "requests": {"prompts": len(PROMPTS), "max_tokens": MAX_TOKENS, "rounds": ROUNDS, "temperature": 0},
              "loadavg_1m": os.getloadavg()[0], "cpus": os.cpu_count(),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "command": "python benchmarks/inert_keys.py"}
    doc = ("Measurements behind levers.json 'inert' entries marked 'measured' (benchmarks/inert_keys.py): "
           "launches A, B (keys flipped, read from the servers' /server_info) and A2 (noise) of the embedded target.")
    args.out.write_text(json.dumps({"_doc": doc, "measurements": {"embedded-relaunch": result}}, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
