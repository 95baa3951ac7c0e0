"""Inputs at the documented bounds: a 256 MiB server log in a recorded run, and 20,000 saved verdicts.

Targets (issue 16, item 6): the audit of a run whose server log is 256 MiB takes under 60 s on a 2-core
machine, about the time of reading the log (one pass serves every gate); ``perfwarden review`` of
20,000 saved verdicts stays under 500 MB peak RSS and writes an HTML page of sane size.

What is printed, all measured in one run of this script, each case in a fresh process (its peak RSS is
that process's ``VmHWM``; ``ru_maxrss`` where /proc is absent):

1. the recorded run ``proof/fixtures/rec-response-cache`` copied, its candidate's ``server.log`` grown
   to ``--log-mib`` by repeating its own request lines (the lines a long-running server writes);
2. ``audit_path`` on its claim: wall time, peak RSS, verdict;
3. beside it, a bare read of the same bytes in the same pieces: (a) read only, (b) read + sha256 +
   UTF-8 decode + split into lines (the least any line reader does), and the audit's ratio to each;
4. a copy of the unpadded run with ``--verdicts`` saved verdicts (the audit's own verdict, one per
   claim seq), reviewed as a user does: ``perfwarden review RUN --html FILE``: wall time, peak RSS, HTML
   size;
5. the machine's load average before and after (the machine may be shared: read the times with it).

Usage::

    python benchmarks/big_inputs.py                       # 256 MiB log, 20,000 verdicts
    python benchmarks/big_inputs.py --log-mib 32 --verdicts 2000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "proof" / "fixtures" / "rec-response-cache"
PADDED_LEG = "cache"
CLAIM = "claims/001-patch.json"
AUDIT_TARGET_S = 60.0
REVIEW_TARGET_MIB = 500.0

_CHILD = r"""
import json, os, resource, sys, time

def peak_kib():
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

mode, target = sys.argv[1], sys.argv[2]
out = {}
t0 = time.perf_counter()
if mode == "audit":
    from perfwarden.auditor.audit import audit_path
    t0 = time.perf_counter()
    v = audit_path(target, os.path.join(target, sys.argv[3]))
    out["verdict"] = f"{v.verdict} {v.action} {sorted({f.code for f in v.findings})}"
elif mode in ("read", "lines"):
    import codecs, hashlib
    digest, decoder, lines, carry = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")("replace"), 0, ""
    with open(target, "rb") as handle:
        while piece := handle.read(1 << 20):
            if mode == "lines":
                digest.update(piece)
                parts = (carry + decoder.decode(piece)).splitlines()
                carry = parts.pop() if parts else ""
                lines += len(parts)
    out["lines"] = lines + (1 if carry else 0)
elif mode == "review":
    from perfwarden.orchestrator.cli import app
    try:
        sys.stdout = open(os.devnull, "w")
        app(["review", target, "--html", sys.argv[3]])
    except SystemExit as exc:
        out["exit"] = exc.code
out["seconds"] = time.perf_counter() - t0
out["peak_mib"] = peak_kib() / 1024
sys.stderr.write("RESULT " + json.dumps(out) + "\n")
"""


def child(*args: str) -> dict:
    """Run one case in a fresh interpreter; its timing and peak RSS."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True)
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"case {args[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(line[len("RESULT "):])


def grow_log(path: Path, mib: int) -> int:
    """Append the log's own request lines (those after the server started) until it holds ``mib`` MiB."""
    lines = path.read_bytes().splitlines(keepends=True)
    body = b"".join(ln for ln in lines if b"request done" in ln or b"response_cache STORE" in ln)
    target = mib << 20
    with open(path, "ab") as handle:
        size = path.stat().st_size
        while size + len(body) <= target:
            handle.write(body)
            size += len(body)
        tail = body[:target - size]
        handle.write(tail[:tail.rfind(b"\n") + 1])
    return path.stat().st_size


def save_verdicts(run: Path, n: int) -> None:
    """``n`` saved verdicts: the audit's own verdict of the run, once per claim seq."""
    from perfwarden.auditor.audit import audit_path

    verdict = audit_path(run, run / CLAIM).model_dump(mode="json")
    vdir = run / "verdicts"
    vdir.mkdir(exist_ok=True)
    for seq in range(1, n + 1):
        verdict["claim_seq"] = seq
        (vdir / f"{seq:05d}-{verdict['scope']}.json").write_text(json.dumps(verdict), "utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log-mib", type=int, default=256)
    parser.add_argument("--verdicts", type=int, default=20_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfwarden-big-inputs-"))
    load_before = os.getloadavg()
    try:
        run = work / "audit-run"
        shutil.copytree(FIXTURE / "run", run)
        log = run / "legs" / PADDED_LEG / "server.log"
        size = grow_log(log, args.log_mib)
        print(f"server log {log.relative_to(work)}: {size / 2**20:.1f} MiB ({size:,} bytes)")
        audit = child("audit", str(run), CLAIM)
        read = child("read", str(log))
        lines = child("lines", str(log))
        ok = audit["seconds"] < AUDIT_TARGET_S
        print(f"audit:               {audit['seconds']:7.1f} s  peak RSS {audit['peak_mib']:7.1f} MiB  -> "
              f"{audit['verdict']}  (target < {AUDIT_TARGET_S:.0f} s: {'MET' if ok else 'MISSED'})")
        print(f"bare read:           {read['seconds']:7.1f} s  peak RSS {read['peak_mib']:7.1f} MiB")
        print(f"bare read + lines:   {lines['seconds']:7.1f} s  peak RSS {lines['peak_mib']:7.1f} MiB  "
              f"({lines['lines']:,} lines; sha256 + UTF-8 decode + splitlines)")
        print(f"audit / bare read:   {audit['seconds'] / max(read['seconds'], 1e-9):7.1f} x time, "
              f"{audit['peak_mib'] / read['peak_mib']:.2f} x RSS")
        print(f"audit / read+lines:  {audit['seconds'] / max(lines['seconds'], 1e-9):7.1f} x time, "
              f"{audit['peak_mib'] / lines['peak_mib']:.2f} x RSS")
        shutil.rmtree(run)

        rrun = work / "review-run"
        shutil.copytree(FIXTURE / "run", rrun)
        t0 = time.perf_counter()
        save_verdicts(rrun, args.verdicts)
        print(f"\n{args.verdicts:,} saved verdicts written in {time.perf_counter() - t0:.1f} s "
              f"({sum(p.stat().st_size for p in (rrun / 'verdicts').iterdir()) / 2**20:.1f} MiB)")
        html = work / "review.html"
        review = child("review", str(rrun), str(html))
        ok = review["peak_mib"] < REVIEW_TARGET_MIB and review.get("exit") in (0, None)
        print(f"review --html:       {review['seconds']:7.1f} s  peak RSS {review['peak_mib']:7.1f} MiB  HTML "
              f"{html.stat().st_size / 2**20:.2f} MiB  exit {review.get('exit')}  "
              f"(target < {REVIEW_TARGET_MIB:.0f} MB: {'MET' if ok else 'MISSED'})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        print(f"\nload average (1, 5, 15 min) before {tuple(round(x, 2) for x in load_before)}, after "
              f"{tuple(round(x, 2) for x in os.getloadavg())}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
