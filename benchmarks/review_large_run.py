"""Review of a run with 1,000,000 request records: seconds to produce the report, size of the HTML.

Targets: the report in under 10 s, the HTML file under 5 MB. The review never re-reads the
per-request arrays: exact statistics come from the verdict's re-derived numbers, plots hold at most a
few hundred dots per leg, and the only raw bytes touched are the evidence lines findings cite (each
located with a memory-mapped newline scan and hashed to show whether it still matches its sha256 --
on this run those lines are whole reps of 250,000 requests, tens of MB each).

What is printed, all measured in one run of this script:

1. synthesis of the run with ``orchestrator.synth.make_rep`` (2 legs x ``--reps`` reps, ``--records`` requests
   in total; one candidate rep carries a contention sample so that a finding cites a huge bench line);
2. the audit of its patch claim (``audit_path``), saved as ``verdicts/001-patch.json``;
3. the review, timed (a) in-process -- load, terminal view at 80 columns, HTML render and write -- and
   (b) end to end as a user runs it: ``perfwarden review RUN --html FILE`` in a fresh process;
4. for reference, the review of the same run without a saved verdict (it audits on the fly).

Usage::

    python benchmarks/review_large_run.py                 # 1,000,000 records, 2 reps per leg
    python benchmarks/review_large_run.py --records 100000 --keep /tmp/big-run
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from perfwarden.auditor.audit import audit_path, write_verdict
from perfwarden.orchestrator.review.model import load_review
from perfwarden.orchestrator.review.report_html import render_review_html
from perfwarden.orchestrator.review.terminal import print_review
from perfwarden.orchestrator.synth import make_rep, write_claim, write_leg, write_manifest

TARGET_SECONDS = 10.0
TARGET_BYTES = 5_000_000
SERVER_INFO = {"model_path": "m", "tp_size": 1, "mem_fraction_static": 0.8, "attention_backend": "flashinfer",
               "max_running_requests": 64, "port": 30000}
HOG = {"loadavg_1m": 9.5, "ncpu": 16, "busy": [{"name": "stress-ng", "cpu_pct": 97.0}]}


def synthesize(run: Path, records: int, reps: int) -> None:
    """Two legs (baseline, candidate with a kernel patch), ``reps`` reps each, ``records`` requests
    in all; short outputs keep the file to a few hundred MB while the request count is the real one."""
    per_rep = records // (2 * reps)
    write_manifest(run, run_id=f"review-large-{records}", target="synthetic", model="model")
    for leg, role, tput in (("baseline", "baseline", 1000.0), ("candidate", "candidate", 1060.0)):
        lines = []
        for k in range(reps):
            contention = HOG if (role == "candidate" and k == reps - 1) else None
            lines.append(make_rep(leg, k, throughput=tput * (1 + 0.004 * (k - reps / 2)), n_requests=per_rep,
                                  output_len=4, input_len=32, contention=contention, start_step_s=0.002,
                                  started_at=1_700_000_000.0 + 120 * k + (60 if role == "candidate" else 0)))
        overlay = {"kernel_patches": [{"op": "rmsnorm", "impl": "fused_rmsnorm"}]} if role == "candidate" else None
        log = ["server ready"] + (["[perfwarden] op override rmsnorm -> fused_rmsnorm engaged"]
                                  if role == "candidate" else [])
        write_leg(run, leg, role, SERVER_INFO, lines, log_lines=log, overlay=overlay,
                  outputs=[f"The answer to question {i} is short and plain." for i in range(8)])
        del lines
    write_claim(run, {"seq": 1, "scope": "patch", "producer": "integrator",
                      "legs": {"baseline": "baseline", "candidate": "candidate"},
                      "lever": {"name": "rmsnorm_fused", "lever_class": "A", "kernel_ops": ["rmsnorm"]},
                      "headline": {"metric": "output_throughput", "value": 6.0},
                      "correctness": {"parity": "exact_text"}})


def review_in_process(run: Path, html: Path) -> tuple[float, int, int]:
    """(seconds, HTML bytes, widest terminal line) of load + terminal view + HTML render and write."""
    t0 = time.perf_counter()
    review = load_review(run)
    console = Console(file=io.StringIO(), width=80, record=True)
    print_review(review, console)
    page = render_review_html(review)
    html.write_text(page, "utf-8")
    seconds = time.perf_counter() - t0
    width = max((len(line) for line in console.export_text().splitlines()), default=0)
    return seconds, html.stat().st_size, width


def review_cli(run: Path, html: Path) -> tuple[float, int]:
    """Seconds of ``perfwarden review RUN --html FILE`` in a fresh interpreter (imports included)."""
    cmd = [sys.executable, "-c", "from perfwarden.cli.main import main; main()", "review", str(run),
           "--html", str(html)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"perfwarden review failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds, html.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=2, help="reps per leg")
    parser.add_argument("--keep", type=Path, default=None, help="build the run here and keep it")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfwarden-review-large-"))
    run = args.keep or work / "run"
    if run.exists():
        shutil.rmtree(run)
    try:
        t0 = time.perf_counter()
        synthesize(run, args.records, args.reps)
        size = sum(p.stat().st_size for p in run.glob("legs/*/bench_runs.jsonl"))
        print(f"synthesized {args.records:,} request records ({args.reps} reps x 2 legs x "
              f"{args.records // (2 * args.reps):,}) in {time.perf_counter() - t0:.1f} s; "
              f"bench files {size / 1e6:.0f} MB")

        t0 = time.perf_counter()
        verdict = audit_path(run, run / "claims" / "001-patch.json")
        write_verdict(run, verdict)
        cited = sorted({f"{e.file}:{e.line}" for f in verdict.findings for e in f.evidence if e.line})
        print(f"audit: {time.perf_counter() - t0:.1f} s -> {verdict.verdict} {verdict.action}, findings "
              f"{sorted({f.code for f in verdict.findings})}, evidence lines cited {cited}")

        seconds, nbytes, width = review_in_process(run, work / "in-process.html")
        print(f"review in-process (load + terminal 80 cols + HTML): {seconds:.2f} s, HTML {nbytes / 1e6:.3f} MB, "
              f"widest terminal line {width} chars")
        cli_s, cli_bytes = review_cli(run, work / "cli.html")
        ok = cli_s < TARGET_SECONDS and cli_bytes < TARGET_BYTES
        print(f"review end to end (perfwarden review RUN --html, fresh process): {cli_s:.2f} s, HTML "
              f"{cli_bytes / 1e6:.3f} MB  (targets < {TARGET_SECONDS:.0f} s and < {TARGET_BYTES / 1e6:.0f} MB: "
              f"{'MET' if ok else 'MISSED'})")

        (run / "verdicts" / "001-patch.json").unlink()
        fly_s, fly_bytes = review_cli(run, work / "on-the-fly.html")
        print(f"for reference, no saved verdict (review audits on the fly): {fly_s:.2f} s, HTML "
              f"{fly_bytes / 1e6:.3f} MB")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
