"""Inputs at the documented bounds: a 256 MiB server log in a recorded run, a line at its bound in every
evidence file, and 20,000 saved verdicts.

Targets: the audit of a run whose server log is 256 MiB takes under 60 s on a 2-core machine, about the
time of reading the log (one pass serves every gate), and a 256 MiB log of distinct ``ENGAGED
op_override`` lines audits in under 15 s quiet, timed beside a plain log of the same size (ratio
printed); a 64 MiB line in any evidence file audits in under 1 GB of peak RSS: at the reader's bound in
``bench_runs.jsonl``, ``outputs.jsonl``, ``opbench.jsonl`` and a LoadGen detail log, over it (refused
unread) in ``profile.jsonl`` (bounded at 4 MiB), ``server_info.json`` and a claim, whose bounds (16 MiB for
``leg.json`` and ``server_info.json``, 1 MiB for a claim) are audited too; ``perfwarden review`` of 20,000 saved verdicts stays under 500 MB peak RSS and writes
an HTML page of sane size.

What is printed, all measured in one run of this script, each case in a fresh process (its peak RSS is
that process's ``VmHWM``; ``ru_maxrss`` where /proc is absent):

1. the recorded run ``proof/fixtures/rec-response-cache`` copied, its candidate's ``server.log`` grown
   to ``--log-mib`` by repeating its own request lines (the lines a long-running server writes);
2. ``audit_path`` on its claim: wall time, peak RSS, verdict;
3. beside it, a bare read of the same bytes in the same pieces: (a) read only, (b) read + sha256 +
   UTF-8 decode + split into lines (the least any line reader does), and the audit's ratio to each;
4. the same run with its log grown instead by distinct ``ENGAGED op_override op='opNNNNNNNN'`` lines
   (every line holds a mechanism's literals and a new kind) to the same size, audited the same way: wall
   and CPU seconds of each, and the ratio (CPU seconds say what the code costs on a shared machine);
5. one case per evidence file (``--line-mib``): a copy of a recorded run with one line of that file grown
   to the bound (texts for text fields, numbers for number arrays), audited in a fresh process: wall
   time, peak RSS, verdict;
6. a copy of the unpadded run with ``--verdicts`` saved verdicts (the audit's own verdict, one per
   claim seq), reviewed as a user does: ``perfwarden review RUN --html FILE``: wall time, peak RSS, HTML
   size;
7. the machine's load average before and after (the machine may be shared: read the times with it).

Usage::

    python benchmarks/big_inputs.py                       # 256 MiB logs, 64 MiB lines, 20,000 verdicts
    python benchmarks/big_inputs.py --log-mib 32 --line-mib 8 --verdicts 2000
    python benchmarks/big_inputs.py --only lines          # or: log, engaged, review
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

import record

FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
FIXTURE = FIXTURES / "rec-response-cache"
HARNESS_FIXTURE = FIXTURES / "rec-harness-clean"
PADDED_LEG = "cache"
CLAIM = "claims/001-patch.json"
HARNESS_CLAIM = "claims/001-harness.json"
AUDIT_TARGET_S = 60.0
ENGAGED_TARGET_S = 15.0
LINE_TARGET_MIB = 1024.0
REVIEW_TARGET_MIB = 500.0
RECORD_MIB, CLAIM_MIB = 16, 1
"""The bounds of ``leg.json``/``server_info.json`` and of a claim (``formats/safe_read.py``)."""

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

def cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

mode, target = sys.argv[1], sys.argv[2]
out = {}
t0, cpu0 = time.perf_counter(), cpu_s()
if mode == "audit":
    from perfwarden.auditor.audit import audit_path
    from perfwarden.auditor.claim_file import ClaimError
    t0, cpu0 = time.perf_counter(), cpu_s()
    try:
        v = audit_path(target, os.path.join(target, sys.argv[3]))
        out["verdict"] = f"{v.verdict} {v.action} {sorted({f.code for f in v.findings})}"
    except ClaimError as exc:  # a claim over its bound: refused (exit 3 at the CLI)
        out["verdict"] = f"refused: {str(exc)[:90]}"
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
    from perfwarden.cli.main import app
    try:
        sys.stdout = open(os.devnull, "w")
        app(["review", target, "--html", sys.argv[3]])
    except SystemExit as exc:
        out["exit"] = exc.code
out["seconds"] = time.perf_counter() - t0
out["cpu_s"] = cpu_s() - cpu0
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


def grow_engaged_log(path: Path, mib: int) -> int:
    """Append distinct ``ENGAGED op_override`` lines (a new op name each) until the log holds ``mib`` MiB."""
    target, size, k = mib << 20, path.stat().st_size, 0
    with open(path, "a", encoding="ascii") as handle:
        while True:
            block = "".join(f"2026-11-22T02:28:42.626 INFO perfwarden.embedded: ENGAGED op_override "
                            f"op='op{k + j:08d}' first call\n" for j in range(4096))
            if size + len(block) > target:
                break
            handle.write(block)
            size, k = size + len(block), k + 4096
    return path.stat().st_size


def _words(n_bytes: int) -> str:
    """English-like text of ``n_bytes`` ASCII characters (the coherence statistics read real words)."""
    sentence = "The river runs past the old mill and the children watch the water from the bridge. "
    return (sentence * (n_bytes // len(sentence) + 1))[:n_bytes]


def _numbers(n_bytes: int, value: str) -> str:
    """A JSON array body of ``value`` repeated to about ``n_bytes`` characters."""
    return ",".join([value] * max(1, n_bytes // (len(value) + 1)))


def _edit_line(path: Path, index: int, edit) -> None:
    lines = path.read_text().splitlines()
    record = json.loads(lines[index])
    lines[index] = edit(record)
    path.write_text("\n".join(lines) + "\n")


def _grow_field(path: Path, index: int, field: str, raw: str) -> None:
    """Line ``index`` of ``path`` with ``field`` set to the raw JSON ``raw`` (written without re-parsing)."""
    _edit_line(path, index, lambda rec: json.dumps({**rec, field: None}).replace(f'"{field}": null', f'"{field}": {raw}'))


def _pad_record(path: Path, n_bytes: int) -> None:
    """A JSON record file grown to about ``n_bytes`` by a long string field."""
    record = json.loads(path.read_text())
    record["padding"] = ""
    base = len(json.dumps(record))
    record["padding"] = _words(max(0, n_bytes - base))
    path.write_text(json.dumps(record))


def line_cases(mib: int) -> list[tuple[str, Path, str, object]]:
    """(name, fixture, claim, how to grow one of its files) for every evidence file's bound."""
    n = (mib << 20) - (16 << 10)  # the grown field; the rest of its line fits in the margin, under the bound
    record_n, claim_n = min(n, RECORD_MIB << 20) - 64, min(n, CLAIM_MIB << 20) - 64
    return [
        ("bench_runs.jsonl: one served text", FIXTURE, CLAIM, lambda run: _edit_line(
            run / "legs/cache/bench_runs.jsonl", 0,
            lambda rec: json.dumps({**rec, "generated_texts": [_words(n)] + rec["generated_texts"][1:]}))),
        ("bench_runs.jsonl: a per-request array", FIXTURE, CLAIM, lambda run: _grow_field(
            run / "legs/cache/bench_runs.jsonl", 0, "issue_delays", "[" + _numbers(n, "0.0123456789") + "]")),
        ("outputs.jsonl: the reference's text", FIXTURE, CLAIM, lambda run: _edit_line(
            run / "legs/base/outputs.jsonl", 3, lambda rec: json.dumps({**rec, "text": _words(n)}))),
        ("outputs.jsonl: token ids", FIXTURE, CLAIM, lambda run: _grow_field(
            run / "legs/base/outputs.jsonl", 3, "token_ids", "[" + _numbers(n, "49152") + "]")),
        ("opbench.jsonl: times_ms", HARNESS_FIXTURE, HARNESS_CLAIM, lambda run: _grow_field(
            run / "opbench/rmsnorm/opbench.jsonl", 0, "times_ms", "[" + _numbers(n, "0.0123456") + "]")),
        ("profile.jsonl: shapes", HARNESS_FIXTURE, HARNESS_CLAIM, lambda run: _grow_field(
            run / "profile/profile.jsonl", 1, "shapes", "[" + _numbers(n, "[1,5,576]") + "]")),
        ("mlperf_log_detail.txt: one line", FIXTURE, CLAIM, lambda run: _edit_mllog(
            run / "legs/cache/loadgen/rep-0/mlperf_log_detail.txt", n)),
        (f"server_info.json at {record_n + 64:,} bytes", FIXTURE, CLAIM, lambda run: _pad_record(
            run / "legs/base/server_info.json", record_n)),
        (f"leg.json at {record_n + 64:,} bytes", FIXTURE, CLAIM, lambda run: _pad_record(
            run / "legs/base/leg.json", record_n)),
        (f"claim at {claim_n + 64:,} bytes", FIXTURE, CLAIM, lambda run: _pad_record(run / CLAIM, claim_n)),
        (f"server_info.json at {mib << 20:,} bytes (over its bound)", FIXTURE, CLAIM, lambda run: _pad_record(
            run / "legs/base/server_info.json", mib << 20)),
        (f"claim at {mib << 20:,} bytes (over its bound)", FIXTURE, CLAIM, lambda run: _pad_record(run / CLAIM,
                                                                                                  mib << 20)),
    ]


def _edit_mllog(path: Path, n_bytes: int) -> None:
    lines = path.read_text().splitlines()
    lines.insert(3, ':::MLLOG {"key": "padding", "value": "' + _words(n_bytes) + '", "time_ms": 0.01, '
                 '"namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {"is_error": false, '
                 '"is_warning": false, "file": "x", "line_no": 1, "pid": 1, "tid": 1}}')
    path.write_text("\n".join(lines) + "\n")


def run_line_cases(work: Path, mib: int) -> list[record.Figure]:
    print(f"\none line at its reader's bound ({mib} MiB for JSONL lines), each audited in a fresh process "
          f"(target peak RSS < {LINE_TARGET_MIB:.0f} MiB):")
    peaks: list[tuple[float, str]] = []
    for name, fixture, claim, grow in line_cases(mib):
        run = work / "line-run"
        shutil.copytree(fixture / "run", run)
        grow(run)
        result = child("audit", str(run), claim)
        ok = result["peak_mib"] < LINE_TARGET_MIB
        print(f"  {name:<52} {result['seconds']:6.1f} s  peak RSS {result['peak_mib']:7.1f} MiB "
              f"({'MET' if ok else 'MISSED'})  -> {result['verdict'][:110]}")
        peaks.append((result["peak_mib"], name))
        shutil.rmtree(run)
    worst, where = max(peaks)
    return [record.Figure(f"one line or record at its reader's bound ({mib} MiB for JSONL lines), {len(peaks)} cases over "
                          "the evidence files, each audited in a fresh process: the largest peak RSS",
                          f"**{worst:.1f} MiB** ({where}); every case under {LINE_TARGET_MIB:.0f} MiB: "
                          f"{'yes' if worst < LINE_TARGET_MIB else 'NO'}")]


def run_log_cases(work: Path, mib: int) -> list[record.Figure]:
    """The plain-padded log (the request lines a server writes) and the ENGAGED-padded one, audited."""
    results = {}
    for kind, grow in (("plain", grow_log), ("engaged", grow_engaged_log)):
        run = work / f"log-{kind}"
        shutil.copytree(FIXTURE / "run", run)
        log = run / "legs" / PADDED_LEG / "server.log"
        size = grow(log, mib)
        results[kind] = child("audit", str(run), CLAIM)
        r = results[kind]
        print(f"audit, {kind + ' log':<12} {size / 2**20:6.1f} MiB: {r['seconds']:7.1f} s wall, {r['cpu_s']:7.1f} s CPU, "
              f"peak RSS {r['peak_mib']:7.1f} MiB -> {r['verdict'][:100]}")
        if kind == "plain":
            read, lines = child("read", str(log)), child("lines", str(log))
            results["lines"] = lines
            print(f"  bare read:         {read['seconds']:7.1f} s  peak RSS {read['peak_mib']:7.1f} MiB")
            print(f"  bare read + lines: {lines['seconds']:7.1f} s  peak RSS {lines['peak_mib']:7.1f} MiB  "
                  f"({lines['lines']:,} lines; sha256 + UTF-8 decode + splitlines)")
            print(f"  audit / read+lines: {r['seconds'] / max(lines['seconds'], 1e-9):6.1f} x time "
                  f"(target audit < {AUDIT_TARGET_S:.0f} s: {'MET' if r['seconds'] < AUDIT_TARGET_S else 'MISSED'})")
        shutil.rmtree(run)
    plain, engaged = results["plain"], results["engaged"]
    print(f"engaged / plain: {engaged['seconds'] / plain['seconds']:.2f} x wall, "
          f"{engaged['cpu_s'] / plain['cpu_s']:.2f} x CPU; engaged log {engaged['seconds']:.1f} s wall, "
          f"{engaged['cpu_s']:.1f} s CPU (target < {ENGAGED_TARGET_S:.0f} s quiet: "
          f"{'MET' if engaged['seconds'] < ENGAGED_TARGET_S else 'MISSED' + (' (CPU ' + ('met' if engaged['cpu_s'] < ENGAGED_TARGET_S else 'missed') + ')')})")
    lines = results["lines"]
    return [record.Figure(f"audit of a recorded run whose server log is {mib} MiB of its own request lines, "
                          "beside a bare read + sha256 + line split of the same bytes",
                          f"**{plain['seconds']:.1f} s**, peak RSS {plain['peak_mib']:.1f} MiB "
                          f"({plain['seconds'] / max(lines['seconds'], 1e-9):.1f}x the bare read's "
                          f"{lines['seconds']:.1f} s, {lines['peak_mib']:.0f} MiB)"),
            record.Figure(f"audit of the same run with a {mib} MiB server log of distinct ENGAGED lines",
                          f"{engaged['seconds']:.1f} s wall, {engaged['cpu_s']:.1f} s CPU, peak RSS "
                          f"{engaged['peak_mib']:.1f} MiB ({engaged['seconds'] / plain['seconds']:.2f}x the plain "
                          "log's wall time)")]


def run_review_case(work: Path, verdicts: int) -> list[record.Figure]:
    rrun = work / "review-run"
    shutil.copytree(FIXTURE / "run", rrun)
    t0 = time.perf_counter()
    save_verdicts(rrun, verdicts)
    print(f"\n{verdicts:,} saved verdicts written in {time.perf_counter() - t0:.1f} s "
          f"({sum(p.stat().st_size for p in (rrun / 'verdicts').iterdir()) / 2**20:.1f} MiB)")
    html = work / "review.html"
    review = child("review", str(rrun), str(html))
    ok = review["peak_mib"] < REVIEW_TARGET_MIB and review.get("exit") in (0, None)
    print(f"review --html:       {review['seconds']:7.1f} s  peak RSS {review['peak_mib']:7.1f} MiB  HTML "
          f"{html.stat().st_size / 2**20:.2f} MiB  exit {review.get('exit')}  "
          f"(target < {REVIEW_TARGET_MIB:.0f} MB: {'MET' if ok else 'MISSED'})")
    return [record.Figure(f"perfwarden review --html of {verdicts:,} saved verdicts",
                          f"**{review['seconds']:.1f} s**, peak RSS **{review['peak_mib']:.1f} MiB**, HTML "
                          f"{html.stat().st_size / 2**20:.2f} MiB, exit {review.get('exit')}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log-mib", type=int, default=256)
    parser.add_argument("--line-mib", type=int, default=64)
    parser.add_argument("--verdicts", type=int, default=20_000)
    parser.add_argument("--only", choices=("log", "lines", "review"), action="append",
                        help="run only these parts (repeatable; default: all)")
    record.add_flag(parser)
    args = parser.parse_args()
    parts = set(args.only or ("log", "lines", "review"))
    work = Path(tempfile.mkdtemp(prefix="perfwarden-big-inputs-"))
    load_before = os.getloadavg()
    figures: list[record.Figure] = []
    try:
        if "log" in parts:
            figures += run_log_cases(work, args.log_mib)
        if "lines" in parts:
            figures += run_line_cases(work, args.line_mib)
        if "review" in parts:
            figures += run_review_case(work, args.verdicts)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        print(f"\nload average (1, 5, 15 min) before {tuple(round(x, 2) for x in load_before)}, after "
              f"{tuple(round(x, 2) for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    record.record("big_inputs.py", figures, args.record)


if __name__ == "__main__":
    main()
