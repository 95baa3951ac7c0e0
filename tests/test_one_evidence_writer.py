"""One writer for evidence (issue 19 item 4): a plain JSONL append on a sealed run's evidence made the run
look tampered, and two functions named ``append_jsonl`` (plain and sealed) made that mistake one import
away. Now ``seal.append_jsonl`` is the only evidence appender and the plain one refuses evidence paths of a
sealed run before writing anything."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from perfwarden.auditor.audit import audit_path
from perfwarden.formats import records, safe_write, seal
from perfwarden.formats.records import SealedEvidenceWrite, append_unsealed_jsonl, jsonl_text
from perfwarden.orchestrator.synth import make_rep
from perfwarden.proof.seal_cases import sealed_clean

from source_tree import source_files

ROOT = Path(__file__).resolve().parents[1]
CLAIM = "claims/001-patch.json"


def _sealed(tmp_path: Path) -> Path:
    fixture = tmp_path / "fx"
    fixture.mkdir()
    sealed_clean(fixture)
    return fixture


def _audit(fixture: Path):
    run = fixture / "run"
    return audit_path(run, run / CLAIM, key=fixture / "seal.key")


def test_one_function_named_append_jsonl_in_the_code():
    found = []
    folders = ("formats", "harness", "orchestrator", "agents", "auditor", "redteam", "verify", "cli", "proof")
    for path in sorted(p for folder in folders for p in source_files(".py", under=folder) if "fixtures" not in p.parts):
        text = path.read_text("utf-8")
        if "append_jsonl" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "append_jsonl":
                found.append(str(path.relative_to(ROOT)))
    assert found == ["formats/seal.py"]


def test_why_a_plain_line_in_sealed_evidence_reads_as_tampering(tmp_path):
    fixture = _sealed(tmp_path)
    bench = fixture / "run" / "legs" / "base" / "bench_runs.jsonl"
    safe_write.append_line(bench, jsonl_text(make_rep("base", 5, throughput=100.0)).encode(), fixture / "run")
    assert "EVIDENCE_TAMPERED" in {f.code for f in _audit(fixture).findings if f.severity == "FAIL"}


@pytest.mark.parametrize("rel", ["legs/base/bench_runs.jsonl", "profile/profile.jsonl", "opbench/x/opbench.jsonl",
                                 "quality/q.jsonl", "evidence.jsonl"])
def test_the_plain_writer_refuses_a_sealed_runs_evidence(tmp_path, rel):
    fixture = _sealed(tmp_path)
    run = fixture / "run"
    target = run / rel
    before = target.read_bytes() if target.is_file() else None
    with pytest.raises(SealedEvidenceWrite, match="seal.append_jsonl"):
        append_unsealed_jsonl(target, {"leg": "base", "rep": 5}, run)
    assert (target.read_bytes() if target.is_file() else None) == before
    verdict = _audit(fixture)
    assert verdict.verdict == "PASS" and verdict.seal == "sealed", verdict.findings


def test_the_evidence_writer_seals_and_the_plain_writer_keeps_non_evidence(tmp_path):
    fixture = _sealed(tmp_path)
    run = fixture / "run"
    seal.begin(run, key_file=fixture / "seal.key")
    seal.append_jsonl(run / "legs" / "base" / "extra.jsonl", {"leg": "base", "note": 1})
    append_unsealed_jsonl(run / "events.jsonl", {"node": "setup"}, run)  # not evidence: plain, never sealed
    seal.forget(run)
    assert json.loads((run / "events.jsonl").read_text().splitlines()[-1]) == {"node": "setup"}
    verdict = _audit(fixture)
    assert verdict.seal == "sealed" and "EVIDENCE_TAMPERED" not in {f.code for f in verdict.findings}


def test_outside_any_sealed_run_the_plain_writer_writes(tmp_path):
    append_unsealed_jsonl(tmp_path / "legs" / "a.jsonl", {"x": 1}, tmp_path)  # no evidence.jsonl: no sealed run
    assert records.sealed_run_of(tmp_path / "legs" / "a.jsonl") is None
    assert (tmp_path / "legs" / "a.jsonl").read_text() == '{"x":1}\n'
