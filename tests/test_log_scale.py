"""Issue 16 item 6: one streaming pass over each server log serves every gate.

The reference below is the gates' line-by-line reading as it was before the one-pass reader (each gate
re-scanned ``data.decode().splitlines()``): the record must say exactly what it said, on every
fixture log and on generated logs cut into awkward pieces (line breaks of every kind, CRLF split across
pieces, invalid UTF-8, letters that only fold to ASCII under ``re.IGNORECASE``).
"""

from __future__ import annotations

import random
import re
import shutil
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from perfwarden.auditor import serverlog
from perfwarden.auditor.audit import audit_path
from perfwarden.auditor.serverlog import (ERROR_PATTERNS, FATAL_PATTERNS, NOT_ENGAGED_RX, SIGNAL_GUARDS,
                                          SIGNAL_PATTERNS, fold, parse_server_log, scan_server_log,
                                          usage_patterns)
from perfwarden.formats import safe_read
from perfwarden.orchestrator.paths import default_fixture_roots

FIXTURES = default_fixture_roots()[0]
OPS = ("rmsnorm", "silu_and_mul", "rotary")


# ------------------------------------------------------------------------------- the old reading


def _reference(lines: list[str], ops=OPS) -> dict:
    """What the gates read from ``lines`` before the one-pass reader (their code, verbatim in effect)."""
    signals = []
    for i, text in enumerate(lines, 1):
        if NOT_ENGAGED_RX.search(text):
            continue
        for family, rx in SIGNAL_PATTERNS:
            m = rx.search(text)
            if m:
                detail = m.group(1).lower() if family == "kernel_override" and m.groups() else None
                signals.append((family, i, text.strip()[:200], detail))
                break
    accepted = drafted = 0
    rates, first, rate_error = [], None, False
    try:
        for i, text in enumerate(lines, 1):
            if m := re.search(r"prompt_lookup rid=\S+ verify_steps=\d+ drafted=(\d+) accepted=(\d+)", text):
                drafted, accepted, first = drafted + int(m.group(1)), accepted + int(m.group(2)), first or i
            elif m := re.search(r"Accepted: (\d+) tokens, Drafted: (\d+) tokens", text):
                accepted, drafted, first = accepted + int(m.group(1)), drafted + int(m.group(2)), first or i
            elif m := re.search(r"\baccept rate:\s*([0-9.]+)", text):
                rates.append(float(m.group(1)))
                first = first or i
    except ValueError:  # "accept rate: 1.2.3": the gate failed on it (and still does)
        rate_error = True
    rate = ("error",) if rate_error else (accepted / drafted, first) if drafted > 0 else (
        (float(np.mean(rates)), first) if rates else (None, None))
    crash = {}
    for failed in (False, True):
        crash[failed] = next(((i, t.strip()[:160]) for i, t in enumerate(lines, 1)
                              if FATAL_PATTERNS.search(t) or (failed and ERROR_PATTERNS.search(t))), None)
    peaks = {}
    for pattern in usage_patterns():
        peak = None
        for text in lines:
            m = re.search(pattern, text)
            if m:
                try:
                    value = float(m.group(1))
                except ValueError:
                    continue
                peak = value if peak is None else max(peak, value)
        peaks[pattern] = peak
    engaged, refused = {}, {}
    for op in ops:
        rx = re.compile(rf"\b{re.escape(op)}\b", re.IGNORECASE)
        engaged[op] = next((i for i, t in enumerate(lines, 1) if rx.search(t) and re.search(
            r"\bengaged\b", t, re.IGNORECASE) and not NOT_ENGAGED_RX.search(t)), None)
        refused[op] = next((i for i, t in enumerate(lines, 1)
                            if op.lower() in t.lower() and NOT_ENGAGED_RX.search(t)), None)
    copies, problems = parse_server_log(lines)
    return {"n_lines": len(lines), "signals": signals, "rate": rate, "crash": crash, "peaks": peaks,
            "engaged": engaged, "refused": refused, "copies": copies, "problems": problems}


def _record(log: serverlog.ServerLog, ops=OPS) -> dict:
    try:
        rate = log.acceptance_rate()
    except ValueError:
        rate = ("error",)
    return {"n_lines": log.n_lines, "signals": [(s.family, s.line, s.text, s.detail) for s in log.signals],
            "rate": rate, "crash": {f: log.crash_line(f) for f in (False, True)},
            "peaks": log.usage_peaks, "engaged": log.engaged, "refused": log.refused, "copies": log.copies,
            "problems": log.problems}


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)] or [b""]


def _same(data: bytes, size: int) -> None:
    lines = data.decode("utf-8", "replace").splitlines()
    got, want = _record(scan_server_log(_pieces(data, size), "server.log", OPS)), _reference(lines)
    if isinstance(want["rate"][0], float) and isinstance(got["rate"][0], float) and want["rate"][0] != float("inf"):
        # fsum vs numpy's pairwise sum: the last bits may differ
        assert got["rate"][0] == pytest.approx(want["rate"][0], rel=1e-12)
        got["rate"], want["rate"] = got["rate"][1], want["rate"][1]
    assert got == want


# ------------------------------------------------------------------------------- tests


def test_one_pass_reads_every_fixture_log_as_the_gates_did():
    logs = sorted(FIXTURES.glob("*/run/legs/*/server.log"))
    assert len(logs) > 100
    for path in logs:
        _same(path.read_bytes(), 1 << 20)


FRAGMENTS = [
    "INFO perfwarden.embedded: effective_config {\"threads\": 2, \"op_overrides\": {}}",
    "effective_config {\"threads\": ", "ENGAGED op_override op='rmsnorm' first call", "ENGAGED response_cache size=8",
    "ENGAGED prompt_lookup n=3", "override rmsnorm engaged", "rmsnorm not engaged", "RMSNorm engaged=0",
    "rotary override: 0 calls", "response cache hit rid=7", "Response-Cache HIT", "response_cache STORE key=1",
    "prompt_lookup rid=r1 verify_steps=4 drafted=12 accepted=7", "Accepted: 5 tokens, Drafted: 9 tokens",
    "accept len: 2.5 accept rate: 0.41", "accept rate: 1.2.3", "accept rate: " + "9" * 400, "SpecDecoding metrics: x", "token usage: 0.83",
    "kv_usage=0.4", "kv_usage=1.2.3", "server_args=ServerArgs(model_path='/m', tp_size=8)",
    "server_args=ServerArgs(tp_size=", "Segmentation fault (core dumped)", "ſegmentation fault", "KİLLED",
    "\u212ailled", "Worker 3 died", "RuntimeError: boom", "Traceback (most recent call last):", "CUDA error: x",
    "exited with code 1", "silu_and_mul ENGAGED", "\"op_override_calls\": {\"rotary\": 3}",
    "request done rid=cmpl-1 e2e_ms=12.5", "plain text", "", "\xff\xfe broken", "é ü ✓",
]
BREAKS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("seed", range(40))
def test_one_pass_reads_generated_logs_cut_anywhere_as_the_gates_did(seed):
    rng = random.Random(seed)
    parts = []
    for _ in range(rng.randint(0, 60)):
        parts.append(rng.choice(FRAGMENTS) + rng.choice(BREAKS))
    text = "".join(parts) + (rng.choice(FRAGMENTS) if rng.random() < 0.5 else "")
    data = text.encode("utf-8", "surrogateescape").replace("\xff\xfe".encode(), b"\xff\xfe")
    if rng.random() < 0.3:
        data = data.replace(b"\xc3\xa9", b"\xc3")  # a truncated UTF-8 sequence before whatever follows
    _same(data, rng.choice([1, 2, 3, 5, 7, 64, 1 << 20]))


def test_an_overlong_line_cuts_the_log_there_wherever_the_pieces_fall():
    bound = 50
    long = "x" * 120 + " Segmentation fault"
    data = ("ok\r\n" + "token usage: 0.5\n" + long + "\r\nKilled\n").encode()
    for size in (1, 3, 17, 1 << 20):
        log = scan_server_log(_pieces(data, size), "server.log", (), bound)
        assert log.long_line is not None and log.long_line.line == 3 and log.long_line.chars == len(long)
        assert log.n_lines == 3 and log.fatal is None  # the cut line holds no crash; the log is not read past it
        assert log.usage_peaks["token usage: ([0-9.]+)"] == 0.5


def test_bounded_records_keep_exact_counts():
    lines = [f"response cache hit rid={i}" for i in range(5 * serverlog.MAX_SIGNALS)]
    log = scan_server_log([("\n".join(lines) + "\n").encode()], "server.log")
    assert len(log.signals) == serverlog.MAX_SIGNALS
    assert log.signal_count("response_cache", hit=True) == len(lines)
    cfg = [f'effective_config {{"threads": {i % 3}}}' for i in range(serverlog.MAX_COPIES + 50)]
    log = scan_server_log([("\n".join(cfg) + "\n").encode()], "server.log")
    assert len(log.copies) == serverlog.MAX_COPIES
    assert len(log.problems) == 1 and log.problems[0].startswith(
        f"50 configuration line(s) after the first {serverlog.MAX_COPIES} are not read")


def test_every_signal_pattern_has_a_guard_and_folding_covers_ignorecase():
    assert len(SIGNAL_GUARDS) == len(SIGNAL_PATTERNS)
    letter = re.compile("[a-z]", re.IGNORECASE)
    for cp in range(sys.maxunicode + 1):
        c = chr(cp)
        if letter.fullmatch(c):
            assert len(fold(c)) == 1 and b"a" <= fold(c) <= b"z", hex(cp)


def _grown_run(tmp_path: Path, mib: int) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "rec-response-cache" / "run", run)
    log = run / "legs" / "cache" / "server.log"
    body = b"".join(ln for ln in log.read_bytes().splitlines(keepends=True) if b"request done" in ln)
    with open(log, "ab") as handle:
        for _ in range((mib << 20) // len(body)):
            handle.write(body)
    return run, log


@pytest.mark.slow
def test_a_server_log_is_read_once_in_pieces_and_never_held(tmp_path, monkeypatch):
    """Every byte of the log is read exactly once, in pieces of at most 1 MiB, and the audit's memory
    stays far below the log's size (it used to be read whole, held as bytes, text and a list of lines,
    and scanned again by each gate)."""
    run, log = _grown_run(tmp_path, 8)
    size = log.stat().st_size
    reads: list[int] = []
    real_open = safe_read.open_regular

    class Counted:
        def __init__(self, handle):
            self.handle = handle

        def read(self, n=-1):
            data = self.handle.read(n)
            reads.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    def open_regular(path, *args, **kwargs):
        handle = real_open(path, *args, **kwargs)
        return Counted(handle) if Path(path).resolve() == log.resolve() else handle

    monkeypatch.setattr(safe_read, "open_regular", open_regular)
    tracemalloc.start()
    try:
        verdict = audit_path(run, run / "claims" / "001-patch.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "CACHING_SUSPECTED" in {f.code for f in verdict.findings}
    assert sum(reads) == size  # once: no gate, check or digest reads it again
    assert max(reads) <= 1 << 20  # streamed, never whole
    assert peak < size / 2, (peak, size)


def test_the_persona_excerpt_reads_only_the_end_of_a_big_log(tmp_path, monkeypatch):
    """The LLM persona shows a log's last lines: it reads the end of the file, not the whole 8 MiB again."""
    from perfwarden.auditor import persona
    from perfwarden.formats.records import Verdict

    log = tmp_path / "legs" / "a" / "server.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"".join(b"INFO request done line %07d\n" % i for i in range(300_000)))
    reads: list[int] = []
    real_open = safe_read.open_regular

    def counted(path, *args, **kwargs):
        handle = real_open(path, *args, **kwargs)
        read = handle.read

        def read_counted(n=-1):
            data = read(n)
            reads.append(len(data))
            return data
        handle.read = read_counted
        return handle

    monkeypatch.setattr(safe_read, "open_regular", counted)
    monkeypatch.setattr(persona, "open_regular", counted, raising=False)
    verdict = Verdict(scope="patch", claim="claims/001-patch.json", verdict="FAIL", action="eject", legs={"a": {}})
    text = persona.raw_excerpts(tmp_path, verdict)
    assert "line 0299999" in text and "line 0299960" in text and "line 0299959" not in text
    assert sum(reads) <= 1 << 20, sum(reads)
