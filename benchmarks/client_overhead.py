"""How much does the LoadGen client add to p50 TTFT versus a bare httpx streaming client? (design §7)

Both clients hit the same local scripted server (``tests/fake_openai_server.py`` in a subprocess, so
its CPU stays out of this process) with a fixed tiny delay before the first chunk, at concurrency 1,
4 and 16, in one run. Runs are interleaved -- every round measures every (concurrency, client) pair,
and the client order alternates between rounds (A B, B A, ...) -- so drift and other tenants' load hit
both clients alike. Target: the LoadGen client adds <= 1 ms to p50 TTFT.

- ``bare``: one ``httpx.AsyncClient`` on ``asyncio.run``, N requests behind a semaphore of size c,
  TTFT = first SSE chunk with text minus the moment just before ``client.stream``.
- ``loadgen``: ``perfwarden.harness.loadgen_client.run_rep``, LoadGen Offline scenario issuing the same
  N samples in one query, ``max_concurrency=c``; TTFT as recorded in ``bench_runs.jsonl``, i.e. the
  same send-to-first-chunk interval, measured on the SUT's loop thread while LoadGen runs.

TTFT from "request sent" is what bench lines record; the hand-off from LoadGen's ``IssueQuery`` to
the send is recorded separately per request (``issue_delays``), and this script reports its p50 from
a short Server-scenario run at a low rate (where requests never wait for a slot).

Usage: ``python benchmarks/client_overhead.py [--rounds 5] [--per-slot 10] [--json out.json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from perfwarden.harness.contention import sample_contention
from perfwarden.harness.loadgen_client import LoadSettings, completions_url, models_url, request_payload, run_rep
from perfwarden.harness.prompts import random_word_prompts

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCIES = (1, 4, 16)


def start_server(first_token_delay: float, token_delay: float, tokens: int) -> tuple[subprocess.Popen, str]:
    """Launch the fake server in its own process; return it and its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake_openai_server.py"), "--tokens", str(tokens),
         "--first-token-delay", str(first_token_delay), "--token-delay", str(token_delay)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"fake server did not report its port: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


async def _bare_run(base_url: str, payloads: list[dict], concurrency: int) -> list[float]:
    """The reference client: as little as possible between the socket and the clock."""
    url = completions_url(base_url)
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30.0, trust_env=False) as client:
        await client.get(models_url(base_url))  # same warm-up the SUT does

        async def one(payload: dict) -> float:
            async with sem:
                ttft = None
                t0 = time.perf_counter()
                async with client.stream("POST", url, json=payload) as resp:
                    async for line in resp.aiter_lines():
                        if ttft is None and line.startswith("data:") and line[5:].strip() != "[DONE]":
                            obj = json.loads(line[5:])
                            if obj.get("choices") and obj["choices"][0].get("text"):
                                ttft = time.perf_counter() - t0
                if ttft is None:
                    raise RuntimeError("bare client saw no token")
                return ttft

        return list(await asyncio.gather(*(one(p) for p in payloads)))


def bare_ttfts(base_url: str, prompts, concurrency: int, max_tokens: int) -> list[float]:
    settings = LoadSettings(max_tokens=max_tokens)
    return asyncio.run(_bare_run(base_url, [request_payload(p.text, settings) for p in prompts], concurrency))


def loadgen_ttfts(base_url: str, prompts, concurrency: int, max_tokens: int, out_dir: Path) -> list[float]:
    settings = LoadSettings(scenario="Offline", target_qps=1.0, min_duration_s=0.01, max_duration_s=60.0,
                            min_query_count=len(prompts), max_concurrency=concurrency, max_tokens=max_tokens,
                            request_timeout_s=30.0)
    result = run_rep(base_url, prompts, settings, out_dir)
    bad = [r.error for r in result.records if not r.ok]
    if bad:
        raise RuntimeError(f"LoadGen client saw errors: {bad[:3]!r}")
    return [r.ttft_s for r in result.records]


def handoff_delays(base_url: str, prompts, max_tokens: int, out_dir: Path) -> list[float]:
    """IssueQuery -> request sent, Server scenario at a rate low enough that nothing waits."""
    settings = LoadSettings(scenario="Server", target_qps=20.0, min_duration_s=2.0, max_duration_s=30.0,
                            max_tokens=max_tokens, request_timeout_s=30.0)
    result = run_rep(base_url, prompts, settings, out_dir)
    return [r.start_s - r.issued_s for r in result.records]


def median_ci(values: list[float], seed: int = 0, n_boot: int = 2000) -> tuple[float, float]:
    """Bootstrap 95% CI of the median of per-round differences (rounds are the unit, not requests)."""
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    meds = np.median(rng.choice(arr, size=(n_boot, arr.size), replace=True), axis=1)
    return float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def _describe(sample: dict) -> str:
    if sample.get("error"):
        return sample["error"]
    busy = ", ".join(f"{p['name']}({p['pid']}) {p['cpu_pct']:.0f}%" for p in sample["busy"][:3]) or "none"
    return f"loadavg {sample['loadavg'][0]:.2f}, machine busy {sample['cpu_busy_pct']}%, other busy: {busy}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-slot", type=int, default=10, help="requests per concurrency slot per run")
    parser.add_argument("--first-token-delay", type=float, default=0.002)
    parser.add_argument("--token-delay", type=float, default=0.001)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    server, base_url = start_server(args.first_token_delay, args.token_delay, args.tokens)
    before = sample_contention(0.5, exclude_pids=[server.pid])
    ttfts: dict[tuple[str, int], list[float]] = {(k, c): [] for k in ("bare", "loadgen") for c in CONCURRENCIES}
    paired: dict[int, list[float]] = {c: [] for c in CONCURRENCIES}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm = random_word_prompts(8, 16, seed=99)
            bare_ttfts(base_url, warm, 4, args.tokens)  # warm the server's code paths once
            loadgen_ttfts(base_url, warm, 4, args.tokens, Path(tmp) / "warm")
            t_start = time.perf_counter()
            for rnd in range(args.rounds):
                for c in CONCURRENCIES:
                    prompts = random_word_prompts(c * args.per_slot, 16, range_ratio=0.5, seed=rnd * 100 + c)
                    order = ("bare", "loadgen") if rnd % 2 == 0 else ("loadgen", "bare")
                    p50 = {}
                    for kind in order:
                        if kind == "bare":
                            got = bare_ttfts(base_url, prompts, c, args.tokens)
                        else:
                            got = loadgen_ttfts(base_url, prompts, c, args.tokens, Path(tmp) / f"r{rnd}-c{c}")
                        ttfts[(kind, c)] += got
                        p50[kind] = statistics.median(got)
                    paired[c].append(p50["loadgen"] - p50["bare"])
            handoff = handoff_delays(base_url, random_word_prompts(40, 16, seed=7), args.tokens,
                                     Path(tmp) / "handoff")
            elapsed = time.perf_counter() - t_start
        after = sample_contention(0.5, exclude_pids=[server.pid])
    finally:
        server.terminate()
        server.wait(timeout=10)

    rows = []
    print(f"client overhead: fake server first-token delay {args.first_token_delay * 1000:.1f} ms, "
          f"{args.tokens} tokens x {args.token_delay * 1000:.1f} ms, {args.rounds} interleaved rounds, "
          f"{os.cpu_count()} CPUs, {elapsed:.1f} s")
    print(f"contention at start: {_describe(before)}")
    print(f"contention at end:   {_describe(after)}")
    print(f"{'conc':>4} {'n/client':>8} {'p50 bare ms':>12} {'p50 loadgen ms':>15} {'added ms':>9} "
          f"{'per-round median added ms [95% CI]':>36}")
    for c in CONCURRENCIES:
        bare, lgen = ttfts[("bare", c)], ttfts[("loadgen", c)]
        row = {"concurrency": c, "n_per_client": len(bare),
               "p50_ttft_bare_ms": 1000 * float(np.median(bare)),
               "p50_ttft_loadgen_ms": 1000 * float(np.median(lgen)),
               "per_round_added_ms": [1000 * d for d in paired[c]]}
        row["added_ms"] = row["p50_ttft_loadgen_ms"] - row["p50_ttft_bare_ms"]
        row["added_ms_median_of_rounds"] = 1000 * statistics.median(paired[c])
        lo, hi = median_ci([1000 * d for d in paired[c]])
        row["added_ms_median_of_rounds_ci95"] = [lo, hi]
        rows.append(row)
        ci = f"{row['added_ms_median_of_rounds']:.3f} [{lo:.3f}, {hi:.3f}]"
        print(f"{c:>4} {len(bare):>8} {row['p50_ttft_bare_ms']:>12.3f} {row['p50_ttft_loadgen_ms']:>15.3f} "
              f"{row['added_ms']:>9.3f} {ci:>36}")
    handoff_ms = 1000 * float(np.median(handoff))
    print(f"LoadGen IssueQuery -> request sent (Server, 20 QPS, n={len(handoff)}): p50 {handoff_ms:.3f} ms, "
          f"p99 {1000 * float(np.percentile(handoff, 99)):.3f} ms")
    for r in rows:
        lo, hi = r["added_ms_median_of_rounds_ci95"]
        r["verdict"] = "met" if hi <= 1.0 else "NOT met" if lo > 1.0 else "inconclusive (CI straddles 1 ms)"
    print("target <= 1 ms added at p50 (judged on the per-round CI): "
          + "; ".join(f"c={r['concurrency']}: {r['verdict']}" for r in rows))
    out = {"rows": rows, "handoff_p50_ms": handoff_ms, "rounds": args.rounds, "elapsed_s": elapsed,
           "contention": {"start": before, "end": after},
           "server": {"first_token_delay_s": args.first_token_delay, "token_delay_s": args.token_delay,
                      "tokens": args.tokens}}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
