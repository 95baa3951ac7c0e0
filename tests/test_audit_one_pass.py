"""The auditor reads each bench file once (issue 17, audit throughput), and what it judges of that file
comes from that one pass: served texts included, on lines of any size the bench bound allows."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from perfwarden.formats import jsonl, safe_read
from perfwarden.orchestrator.synth import COHERENT_TEXTS, reps

from auditor_cases import audit, build, codes

SAME = [t + " More." for t in COHERENT_TEXTS[:8]]
LONG = 8 << 20
"""A long line (a rep of tens of thousands of requests is longer still)."""


def _served(leg: str, values: list[float], offset: float, last_texts: list[str] | None = None,
            pad: int = 0) -> list[dict]:
    """Reps naming their prompts (8 served + 1 failed request each); the last rep serves prompts of its
    own (``q..``) with ``last_texts`` and carries ``pad`` bytes of text on its failed request."""
    lines = reps(leg, values, offset, errors=1)
    for k, line in enumerate(lines):
        last = k == len(lines) - 1
        line["prompt_ids"] = [f"{'q' if last else 'p'}{i:02d}" for i in range(9)]
        line["generated_texts"] = list(last_texts if last and last_texts else SAME) + [""]
    lines[-1]["generated_texts"][-1] = "x" * pad
    return lines


def test_each_bench_file_is_opened_once(tmp_path, monkeypatch):
    """Served texts come from the loader's own pass: a second read cost a full pass over a
    million-request file and judged bytes other than the ones the loader hashed."""
    opened: list[str] = []
    real = jsonl.open_regular

    def counting(path, *args, **kwargs):
        opened.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(jsonl, "open_regular", counting)
    claim = build(tmp_path, base_reps=_served("base", [100.0, 101.2, 99.1, 100.6, 99.7], 0),
                  cand_reps=_served("cand", [110.3, 109.6, 111.0, 110.1, 109.2], 1))
    v = audit(tmp_path, claim)
    assert not any(n.startswith("served parity") for n in v.not_checked)  # the served check was made
    assert opened.count("bench_runs.jsonl") == 2  # once per leg


@pytest.mark.slow
def test_served_parity_is_judged_on_a_rep_line_over_the_generic_line_bound(tmp_path):
    """A 100k-request rep is one line of tens of MB, over the generic 64 MiB record bound but inside the
    bench bound: its served texts count. The former second reader skipped such lines, so texts that
    differ only there passed unseen."""
    pad = safe_read.LINE_BYTES + 1
    upper = [t.upper() for t in SAME]
    claim = build(tmp_path, base_reps=_served("base", [100.0, 101.2, 99.1, 100.6, 99.7], 0, pad=pad),
                  cand_reps=_served("cand", [110.3, 109.6, 111.0, 110.1, 109.2], 1, upper, pad=pad))
    v = audit(tmp_path, claim)
    assert v.verdict == "FAIL" and "PARITY_MISMATCH" in codes(v, "FAIL"), [(f.code, f.message[:200]) for f in v.findings]
    f = next(f for f in v.findings if f.code == "PARITY_MISMATCH" and f.gate == "served")
    assert any(e.line == 5 for e in f.evidence)


def test_a_long_cited_line_is_hashed_off_the_decoding_thread(tmp_path, monkeypatch):
    """A cited line's own sha256 runs beside its decode, not on the decoding thread (~0.4 s of a
    million-request audit), and is the sha256 of exactly the line's bytes."""
    line = b'{"schema_version":1,"leg":"a","rep":0,"generated_texts":["' + b"y" * LONG + b'"]}'
    path = tmp_path / "bench_runs.jsonl"
    path.write_bytes(b'{"schema_version":1,"leg":"a","rep":1}\n' + line + b"\n")
    threads: list[str] = []
    real = jsonl.hashlib.sha256

    def recording(data=b"", *args, **kwargs):
        if len(data) >= LONG:
            threads.append(threading.current_thread().name)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(jsonl.hashlib, "sha256", recording)
    issues: list = []
    out = list(jsonl.iter_jsonl(path, jsonl.BenchRunLine, issues, real(), cite=True))
    assert not issues and [ref.line for ref, _ in out] == [1, 2]
    assert out[1][0].digest == real(line).hexdigest() and out[1][0].head == line[:jsonl.CITE_HEAD_BYTES]
    assert out[0][0].digest == real(b'{"schema_version":1,"leg":"a","rep":1}').hexdigest()
    assert threads and threading.main_thread().name not in threads


def test_a_long_line_that_does_not_decode_still_cites_its_sha256(tmp_path):
    """The corrupt-line path takes the pending digest too (no digest is left over for the next line)."""
    bad = b'{"schema_version":1,"bogus":"' + b"z" * LONG + b'"}'
    good = b'{"schema_version":1,"leg":"a","rep":1}'
    path = tmp_path / "bench_runs.jsonl"
    path.write_bytes(bad + b"\n" + good + b"\n")
    issues: list = []
    out = list(jsonl.iter_jsonl(path, jsonl.BenchRunLine, issues, hashlib.sha256(), cite=True))
    assert [i.kind for i in issues] == ["corrupt"] and issues[0].ref.digest == hashlib.sha256(bad).hexdigest()
    assert [ref.digest for ref, _ in out] == [hashlib.sha256(good).hexdigest()]


def test_segment_sums_without_a_terminator_copy():
    """Per-request gap sums: empty requests first, between and last (the last one once needed a copy
    of every gap with a terminator appended)."""
    import numpy as np

    from perfwarden.auditor.rederive import _segment_sums

    lists = [[], [0.5, 0.25], [], [], [1.0], [0.125, 0.125, 0.25], [], []]
    lens = np.array([len(g) for g in lists], dtype=np.intp)
    gaps = np.array([x for g in lists for x in g])
    assert _segment_sums(gaps, lens).tolist() == [sum(g) for g in lists]
    assert _segment_sums(np.zeros(0), np.zeros(3, dtype=np.intp)).tolist() == [0.0, 0.0, 0.0]
    assert _segment_sums(np.zeros(0), np.zeros(0, dtype=np.intp)).tolist() == []
