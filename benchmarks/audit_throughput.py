"""Auditor throughput and memory on 1,000,000 request records (design §7, first bullet).

What is measured, in ONE process run, interleaved and repeated (``--rounds``, median reported):

(a) **bare parse** -- the floor any auditor must pay: read each ``bench_runs.jsonl`` line by line
    (1 MiB chunks, see ``bare_lines``; faster than ``for line in open(path, "rb")``) and decode it with ``msgspec.json.Decoder(BareRep)``, where
    ``BareRep`` is a plain msgspec Struct holding exactly the per-request arrays the auditor decodes
    (``input_lens, output_lens, ttfts, itls, errors, latencies, request_starts, cache_hits``) plus
    ``duration``, typed the same way (``itls`` as ``list[list[float]]``). Why a typed Struct and not
    ``msgspec.json.decode(line)`` into dicts: the untyped decode also materializes what the auditor
    never touches (``generated_texts``, a few dozen aggregates), so it is *slower* and would flatter
    the ratio; a typed decode of the same fields is the fastest honest parse of the same data.
    Nothing is validated, hashed or computed.
(b) **full audit** -- ``audit_path`` on a patch claim over the two legs (re-derivation of every rep,
    sha256 of every input file, all patch gates), on a run *sealed* the way the harness seals it
    (``evidence.jsonl``, key beside the run directory, handed over as ``--key`` would), so the seal's
    verification -- chain MACs, every listed file against its sealed digest, the manifest's
    completeness -- is part of the time. The seal also lists each line's offset and length, so the
    audit reads a long rep line with one read of that length (every byte still checked: see
    ``formats/jsonl.iter_raw_lines``); (a) has no seal to say where lines end and assembles each from
    1 MiB chunks, as the audit does for a file no verified seal lists line by line. If the auditor cannot be imported yet (a gate module
    missing), ``RunLoader`` loading both legs is timed instead, and the script says so.

The ratio (b)/(a) is printed against its 0.9x target as the median of the per-round ratios (each
round times (a), (b) and (a) with the GC paused back to back, the three rotating through the three
positions round by round, so a slow spell on a shared machine hits every side of a round and no side
always runs first); the ratio of medians and of minima are printed too. The ratio to the GC-paused parse
is printed the same way against its 1.3x target (design §7).

Memory: the audit is run in a fresh subprocess per file size and its peak RSS (``VmHWM``, the same
high-water mark as ``getrusage(RUSAGE_SELF).ru_maxrss`` but not inherited over fork+exec from this
large benchmark process; ``ru_maxrss`` where /proc is absent) is reported next to the
interpreter+imports floor, for runs that hold the same rep size but 4x the reps (file 4x larger: the
peak must not move), and for a run with 4x larger reps (the peak follows the largest *line*, i.e. one rep, never the file: a
bench_runs line is one JSON object per rep, so one rep's arrays are the unit that must be held).

The synthetic file is written by streaming: per rep, numpy draws the arrays, and the JSON is written
in blocks of requests, so the generator never holds a rep's JSON text or Python lists in memory.
Values are realistic sglang-like numbers: per-request ``ttfts`` (~0.1 s, lognormal), ``itls`` lists of
~30 gaps (~20 ms), ``latencies`` = ttft + sum(itls), ``request_starts``, short ``generated_texts``,
``errors`` (empty strings, a few real failures), and the line aggregates, all written with Python's
float repr as sglang's ``json.dumps`` does.

Usage::

    python benchmarks/audit_throughput.py                       # 1M records, 3 rounds, memory at 250k/1M
    python benchmarks/audit_throughput.py --records 200000 --rounds 1 --no-memory   # quick
    python benchmarks/audit_throughput.py --sglang-native --no-memory   # files without 'latencies'
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import record

from perfwarden.formats import seal
from perfwarden.orchestrator.synth import write_claim, write_leg, write_manifest

TARGET_RATIO = 0.9
TARGET_GC_PAUSED_RATIO = 1.3
WORDS = ("the model said that a quick answer is often the best one when the question is clear and "
         "short so we keep it brief and plain").split()


class BareRep(msgspec.Struct):
    """The per-request fields the auditor reads, typed as the auditor types them (see docstring)."""

    duration: float | None = None
    input_lens: list[int] | None = None
    output_lens: list[int] | None = None
    ttfts: list[float] | None = None
    itls: list[list[float]] | None = None
    errors: list[str | None] | None = None
    latencies: list[float] | None = None
    request_starts: list[float] | None = None
    cache_hits: list[int] | None = None


# ------------------------------------------------------------------------------------------ synth


def _fmt(values) -> str:
    return ",".join(map(repr, values))


def write_rep_line(handle, leg: str, rep: int, n: int, rng: np.random.Generator, speed: float,
                   block: int = 5000, latencies: bool = True) -> None:
    """Stream one rep's JSON object (one line) into ``handle``."""
    ttfts = rng.lognormal(np.log(0.1), 0.3, n)
    n_gaps = np.clip(rng.poisson(30, n), 1, 80)
    offsets = np.concatenate([[0], np.cumsum(n_gaps)])
    gaps = rng.lognormal(np.log(0.02 / speed), 0.25, int(offsets[-1]))
    out_lens = n_gaps + 1
    in_lens = np.random.default_rng(1000 + rep).integers(64, 512, n)  # both legs run the same prompts
    lat = ttfts + np.add.reduceat(gaps, offsets[:-1])
    n_err = max(1, n // 2000)
    err_idx = set(rng.choice(n, n_err, replace=False).tolist())
    ok = np.array([i not in err_idx for i in range(n)])
    duration = float(lat.sum() / 64.0)  # ~64 requests in flight on average (peaks ~75: max_concurrency 128)
    tot_out = int(out_lens[ok].sum())
    ttft_ms = ttfts[ok] * 1000
    tpot_ms = (lat[ok] - ttfts[ok]) * 1000 / (out_lens[ok] - 1)
    head = {
        "schema_version": 1, "leg": leg, "rep": rep, "backend": "sglang", "dataset_name": "random",
        "request_rate": "inf", "max_concurrency": 128, "server_info": None, "duration": duration,
        "completed": int(ok.sum()), "total_input_tokens": int(in_lens[ok].sum()), "total_output_tokens": tot_out,
        "request_throughput": float(ok.sum() / duration), "output_throughput": tot_out / duration,
        "total_throughput": (tot_out + int(in_lens[ok].sum())) / duration,
        "mean_ttft_ms": float(ttft_ms.mean()), "median_ttft_ms": float(np.median(ttft_ms)),
        "p99_ttft_ms": float(np.percentile(ttft_ms, 99)),
        "mean_tpot_ms": float(tpot_ms.mean()), "median_tpot_ms": float(np.median(tpot_ms)),
        "p99_tpot_ms": float(np.percentile(tpot_ms, 99)),
        "median_itl_ms": float(np.median(gaps) * 1000), "p99_itl_ms": float(np.percentile(gaps, 99) * 1000),
        "median_e2e_latency_ms": float(np.median(lat[ok]) * 1000),
        "p99_e2e_latency_ms": float(np.percentile(lat[ok], 99) * 1000), "accept_length": None,
        "contention": {"loadavg_1m": 0.4, "ncpu": 16, "busy": []},
        "started_at": 1_700_000_000.0 + rep * 120.0 + (60.0 if leg == "candidate" else 0.0),
    }
    text = json.dumps(head, separators=(",", ":"))
    handle.write(text[:-1])

    def array(name: str, fmt_block) -> None:
        handle.write(f',"{name}":[')
        for s in range(0, n, block):
            e = min(n, s + block)
            handle.write(("," if s else "") + fmt_block(s, e))
        handle.write("]")

    array("input_lens", lambda s, e: _fmt(in_lens[s:e].tolist()))
    array("output_lens", lambda s, e: _fmt(out_lens[s:e].tolist()))
    array("ttfts", lambda s, e: _fmt(ttfts[s:e].tolist()))
    if latencies:  # perfwarden's own arrays; sglang's file has neither
        array("latencies", lambda s, e: _fmt(lat[s:e].tolist()))
        # Starts spread so that every request ends inside the rep, as measured ones do.
        spread = max(duration - float(lat.max()), 0.0) / n
        array("request_starts", lambda s, e: _fmt((np.arange(s, e) * spread).tolist()))

    def itl_block(s: int, e: int) -> str:
        g = gaps[offsets[s]:offsets[e]].tolist()
        parts = []
        for i in range(s, e):
            a, b = offsets[i] - offsets[s], offsets[i + 1] - offsets[s]
            parts.append("[" + _fmt(g[a:b]) + "]")
        return ",".join(parts)

    array("itls", itl_block)

    def text_block(s: int, e: int) -> str:
        idx = rng.integers(0, len(WORDS), (e - s, 6))
        return ",".join(json.dumps(" ".join(WORDS[j] for j in row)) if i + s not in err_idx else '""'
                        for i, row in enumerate(idx))

    array("generated_texts", text_block)
    array("errors", lambda s, e: ",".join('"HTTP 503: server overloaded"' if i in err_idx else '""'
                                          for i in range(s, e)))
    handle.write("}\n")


def build_run(run: Path, records: int, reps: int, seed: int = 0, latencies: bool = True) -> Path:
    """A run with baseline and candidate legs, ``reps`` reps each, ``records`` requests in total."""
    per_rep = records // (2 * reps)
    marker = run / ".complete"
    want = f"{records} {reps} {seed} {latencies} v3"  # v3: consistent timelines, one prompt set, sealed
    if marker.is_file() and marker.read_text() == want and key_file(run).is_file():
        return run
    if run.exists():
        shutil.rmtree(run)
    key_file(run).unlink(missing_ok=True)
    key_file(run).with_suffix(".head").unlink(missing_ok=True)
    seal.forget(run)
    write_manifest(run, run_id=f"throughput-{records}")
    chain = seal.begin(run, key_file=key_file(run))  # as the harness seals a run it records
    server_info = {"model_path": "m", "tp_size": 1, "mem_fraction_static": 0.8, "attention_backend": "flashinfer",
                   "max_running_requests": 64, "op_overrides": {}}
    outputs = [f"The answer to question {i} is short and plain." for i in range(8)]
    rng = np.random.default_rng(seed)
    for leg, role, speed in (("baseline", "baseline", 1.0), ("candidate", "candidate", 1.05)):
        overlay = {"kernel_patches": [{"op": "rmsnorm", "impl": "fused_rmsnorm"}]} if role == "candidate" else None
        log = ["server ready"] + (["[perfwarden] op override rmsnorm -> fused_rmsnorm engaged"]
                                  if role == "candidate" else [])
        info = {**server_info, "op_overrides": {"rmsnorm": "fused_rmsnorm"}} if overlay else server_info
        leg_dir = write_leg(run, leg, role, info, [], log_lines=log, outputs=outputs, overlay=overlay)
        with open(leg_dir / "bench_runs.jsonl", "w", encoding="utf-8", buffering=1 << 20) as handle:
            for k in range(reps):
                write_rep_line(handle, leg, k, per_rep, rng, speed, latencies=latencies)
        chain.adopt_lines(leg_dir / "bench_runs.jsonl", seal.bench_meta)  # one sealed entry per rep line
    write_claim(run, {"seq": 1, "scope": "patch", "producer": "integrator",
                      "legs": {"baseline": "baseline", "candidate": "candidate"},
                      "lever": {"name": "rmsnorm_fused", "lever_class": "A", "kernel_ops": ["rmsnorm"]},
                      "headline": {"metric": "output_throughput", "value": 5.0},
                      "correctness": {"parity": "exact_text"}})
    seal.forget(run)
    marker.write_text(want)
    return run


def key_file(run: Path) -> Path:
    """The run's seal key, kept beside (never inside) the run directory."""
    return run.with_name(run.name + ".key")


def bench_files(run: Path) -> list[Path]:
    return sorted(run.glob("legs/*/bench_runs.jsonl"))


# ---------------------------------------------------------------------------------------- timing


def bare_lines(path: Path, chunk_size: int = 1 << 20):
    """Newline-terminated lines of ``path``, read in 1 MiB chunks, a long line joined once.

    Faster than ``for line in open(path, "rb")`` on multi-MB lines (1.14 s vs 0.73 s for the 719 MB
    run here), so the bare baseline does not pay for a slow reader the auditor does not use.
    """
    pieces: list[bytes] = []
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            start = 0
            while (nl := chunk.find(b"\n", start)) >= 0:
                if pieces:
                    pieces.append(chunk[start:nl])
                    yield b"".join(pieces)
                    pieces = []
                else:
                    yield chunk[start:nl]
                start = nl + 1
            if start < len(chunk):
                pieces.append(chunk[start:])


def bare_parse(run: Path) -> int:
    decoder = msgspec.json.Decoder(BareRep)
    n = 0
    for path in bench_files(run):
        for line in bare_lines(path):
            n += len(decoder.decode(line).errors)
    return n


def bare_parse_gc_paused(run: Path) -> int:
    """The bare parse with the cyclic GC paused, as the auditor pauses it while bench lines stream
    (each generation-0 collection otherwise re-walks every freshly decoded list): the strictest floor,
    printed beside the defined one so the GC pause is not mistaken for a faster audit."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return bare_parse(run)
    finally:
        if enabled:
            gc.enable()


def _auditor():
    """(callable, description) of the fullest auditor path importable right now."""
    try:
        from perfwarden.auditor.audit import audit_path

        def full(run: Path) -> str:
            verdict = audit_path(run, run / "claims" / "001-patch.json", key=key_file(run))
            return f"{verdict.verdict} {sorted({f.code for f in verdict.findings})}"

        return full, "audit_path (patch claim, all gates)"
    except ImportError as exc:
        from perfwarden.auditor.evidence import RunLoader
        def loader(run: Path) -> str:
            rl = RunLoader(run)
            n = sum(r.n_requests for leg in ("baseline", "candidate") for r in rl.leg(leg).reps)
            return f"{n} requests re-derived, read problems {[p.kind for p in rl.problems]}"

        return loader, f"RunLoader on both legs (audit_path not importable: {exc})"


def timed(fn, *args) -> tuple[float, object]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


@dataclass(frozen=True)
class Throughput:
    """One throughput measurement: medians over the rounds and the paired ratios."""

    bare_s: float
    audit_s: float
    ratio: float
    paired: list[float]
    gc_paused_ratio: float


def throughput(run: Path, rounds: int) -> Throughput:
    audit, what = _auditor()
    size = sum(p.stat().st_size for p in bench_files(run))
    print(f"files: {len(bench_files(run))} bench_runs.jsonl, {size / 1e6:.0f} MB")
    print(f"(b) = {what}")
    bare_parse(run)  # warm the page cache once, untimed
    bare_t, audit_t, strict_t = [], [], []
    for r in range(rounds):
        sides = [("bare", bare_parse), ("audit", audit), ("bare-gc-paused", bare_parse_gc_paused)]
        order = sides[r % 3:] + sides[:r % 3]
        for name, fn in order:
            t, out = timed(fn, run)
            {"bare": bare_t, "audit": audit_t, "bare-gc-paused": strict_t}[name].append(t)
            print(f"  round {r + 1} {name:14s} {t:7.3f} s   -> {out if name == 'audit' else f'{out} requests'}")
    b, a = statistics.median(bare_t), statistics.median(audit_t)
    paired = [x / y for x, y in zip(audit_t, bare_t)]
    ratio = statistics.median(paired)
    print(f"bare msgspec parse : median {b:.3f} s ({size / 1e6 / b:.0f} MB/s)  rounds {[round(x, 3) for x in bare_t]}")
    print(f"full audit         : median {a:.3f} s ({size / 1e6 / a:.0f} MB/s)  rounds {[round(x, 3) for x in audit_t]}")
    print(f"ratio audit/bare   : {ratio:.2f}x median of the per-round (adjacent, paired) ratios "
          f"{[round(x, 2) for x in paired]}; ratio of medians {a / b:.2f}x, of minima {min(audit_t) / min(bare_t):.2f}x"
          f"  (target <= {TARGET_RATIO}x: {'MET' if ratio <= TARGET_RATIO else 'MISSED'})")
    strict_paired = [x / y for x, y in zip(audit_t, strict_t)]
    strict = statistics.median(strict_paired)
    print(f"ratio audit/bare with the GC paused in both: {strict:.2f}x median of the per-round ratios "
          f"{[round(x, 2) for x in strict_paired]} (bare-gc-paused median {statistics.median(strict_t):.3f} s)"
          f"  (target <= {TARGET_GC_PAUSED_RATIO}x: {'MET' if strict <= TARGET_GC_PAUSED_RATIO else 'MISSED'})")
    return Throughput(bare_s=b, audit_s=a, ratio=ratio, paired=paired, gc_paused_ratio=strict)


# ---------------------------------------------------------------------------------------- memory

_CHILD = r"""
import resource, sys, time
from pathlib import Path
mode, run = sys.argv[1], Path(sys.argv[2])
sys.path.insert(0, sys.argv[3])
import audit_throughput as at
fn = {"bare": at.bare_parse, "none": (lambda run: None)}.get(mode) or at._auditor()[0]
floor = at.peak_rss_kib()
t0 = time.perf_counter(); fn(run); t = time.perf_counter() - t0
print(floor, at.peak_rss_kib(), t)
"""


def peak_rss_kib() -> int:
    """Peak resident set of this process image, KiB.

    ``VmHWM`` from /proc/self/status where available: ``getrusage(RUSAGE_SELF).ru_maxrss`` is the
    same high-water mark but Linux carries it over fork+exec, so a child started from this (large)
    benchmark process would report the parent's peak. Falls back to ``ru_maxrss`` elsewhere.
    """
    try:
        with open("/proc/self/status") as handle:
            for text in handle:
                if text.startswith("VmHWM:"):
                    return int(text.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak_rss_mib(mode: str, run: Path) -> tuple[float, float, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(run), str(Path(__file__).parent)],
                         check=True, capture_output=True, text=True).stdout.split()
    return int(out[0]) / 1024, int(out[1]) / 1024, float(out[2])


def memory(base: Path, records: int, reps: int) -> list[tuple[int, float, float, str]]:
    """Peak RSS per case, printed; returns (records, floor MiB, audit peak MiB, case) per case."""
    print("\npeak RSS (VmHWM) of a fresh process per case, MiB; 'floor' = interpreter + imports before reading")
    cases = [(records // 4, reps, "reference: 1/4 of the records"),
             (records, reps * 4, "same rep size, 4x the reps (file 4x larger)"),
             (records, reps, "4x larger reps (one line = one rep holds 4x the requests)")]
    print(f"  {'records':>9} {'reps/leg':>8} {'req/rep':>8} {'file MB':>8} {'floor':>7} {'audit':>7} {'bare':>7}  case")
    peaks = []
    for rec, rp, label in cases:
        run = build_run(base / f"run-{rec}-{rp}", rec, rp)
        size = sum(p.stat().st_size for p in bench_files(run)) / 1e6
        floor, audit_peak, _ = peak_rss_mib("audit", run)
        _, bare_peak, _ = peak_rss_mib("bare", run)
        print(f"  {rec:>9} {rp:>8} {rec // (2 * rp):>8} {size:>8.0f} {floor:>7.0f} {audit_peak:>7.0f} {bare_peak:>7.0f}  {label}")
        peaks.append((rec, floor, audit_peak, label))
    return peaks


def figures(args: argparse.Namespace, measured: Throughput,
            peaks: list[tuple[int, float, float, str]]) -> list[record.Figure]:
    """The run's figures for ``--record``."""
    kind = ", sglang-native lines" if args.sglang_native else ""
    out = [record.Figure(
        f"audit / bare msgspec parse of the same {args.records:,} request records ({args.reps} reps per leg{kind}), "
        "seal verification included",
        f"**{measured.ratio:.2f}x** (bare {measured.bare_s:.3f} s, audit {measured.audit_s:.3f} s; paired rounds "
        f"{', '.join(f'{x:.2f}' for x in measured.paired)}); {measured.gc_paused_ratio:.2f}x against a GC-paused "
        "bare parse")]
    if peaks:
        out.append(record.Figure(
            f"peak RSS of the audit in a fresh process, {args.records:,} request records ({args.reps} reps per leg)",
            "; ".join(f"{peak:.0f} MiB at {rec:,} records, {label}" for rec, _, peak, label in peaks)
            + f"; interpreter and imports {peaks[0][1]:.0f} MiB"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5, help="reps per leg")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "perfwarden-audit-throughput")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--sglang-native", action="store_true",
                        help="no per-request 'latencies'/'request_starts' (as sglang writes): e2e is re-derived "
                             "as ttft + fsum(itls) per request")
    parser.add_argument("--clean", action="store_true", help="delete the synthesized runs afterwards")
    record.add_flag(parser)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    suffix = "-sglang" if args.sglang_native else ""
    run = build_run(args.workdir / f"run-{args.records}-{args.reps}{suffix}", args.records, args.reps,
                    latencies=not args.sglang_native)
    print(f"synthesized {args.records} request records ({args.reps} reps x 2 legs x "
          f"{args.records // (2 * args.reps)} requests) in {time.perf_counter() - t0:.1f} s at {run}")
    measured = throughput(run, args.rounds)
    peaks = [] if args.no_memory else memory(args.workdir, args.records, args.reps)
    if args.clean:
        shutil.rmtree(args.workdir)
    record.record("audit_throughput.py", figures(args, measured, peaks), args.record)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
