"""The loader only reads (issue 27 §2): ``auditor/evidence.py`` states what it met as facts and adds no
finding; the reading gate makes each fact a finding by the evidence model's ``reading`` table."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from perfwarden.auditor.audit import audit_path
from perfwarden.auditor.evidence import RunLoader
from perfwarden.auditor.gates import reading
from perfwarden.auditor.model.schema import evidence_model

ROOT = Path(__file__).resolve().parents[1]
LOADER = ROOT / "auditor" / "evidence.py"
FIXTURES = ROOT / "proof" / "fixtures"


def _tree() -> ast.Module:
    return ast.parse(LOADER.read_text("utf-8"))


def test_the_loader_imports_nothing_that_makes_findings():
    imported = {(node.module, alias.name) for node in ast.walk(_tree()) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert not [i for i in imported if i[0] == "perfwarden.auditor.findings"], imported
    calls = [node.func for node in ast.walk(_tree()) if isinstance(node, ast.Call)]
    assert not [c for c in calls if isinstance(c, ast.Attribute) and c.attr == "add"
                and isinstance(c.value, ast.Attribute) and c.value.attr == "findings"]


def _choices(expr: ast.expr) -> set[str]:
    """The string literals an expression evaluates to (a literal, or either arm of a conditional)."""
    if isinstance(expr, ast.IfExp):
        return _choices(expr.body) | _choices(expr.orelse)
    return {expr.value} if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else set()


def _stated_kinds() -> set[str]:
    """Every kind the loader states: the literals passed to ``met`` and those its ``*_kind`` helpers return."""
    kinds: set[str] = set()
    for node in ast.walk(_tree()):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "met" and node.args:
            kinds |= _choices(node.args[0])
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "kind" for t in node.targets):
            kinds |= _choices(node.value)  # ``kind = ... if ... else ...`` then ``met(kind, ...)``
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_kind"):
            kinds |= {k for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None
                      for k in _choices(r.value)}
    return kinds


def test_every_kind_the_loader_states_is_a_row_of_the_reading_table():
    stated = _stated_kinds() | {"torn_tail", "empty_file", "missing_field"}  # report_issues passes these through
    table = set(evidence_model().reading)
    assert stated <= table, sorted(stated - table)
    assert table <= stated, f"rows no reading states: {sorted(table - stated)}"


def test_a_corrupt_leg_is_stated_by_the_loader_and_judged_by_the_gate():
    run = FIXTURES / "int-rep-absurd-id" / "run"
    loader = RunLoader(run)
    loader.leg("cand")
    assert loader.problems and not hasattr(loader, "findings")
    judged = reading.check_reading(loader.problems).findings
    assert {f.code for f in judged} == {"EVIDENCE_CORRUPT"} and all(f.gate == "evidence" for f in judged)
    verdict = audit_path(run, run / "claims" / "001-patch.json")
    assert {f.message for f in judged} <= {f.message for f in verdict.findings}


def _foreign_leg(tmp_path: Path, extra: dict) -> Path:

    run = tmp_path / "run"
    (run / "legs" / "a").mkdir(parents=True)
    src = ROOT / "tests" / "data" / "vllm-bench-serve" / "results.jsonl"
    lines = [json.loads(x) for x in src.read_text().splitlines() if x.strip()]
    (run / "legs" / "a" / "bench_runs.jsonl").write_text("".join(json.dumps({**x, **extra}) + "\n" for x in lines))
    (run / "claims").mkdir()
    (run / "claims" / "b.json").write_text(json.dumps({"legs": {"baseline": "a"}, "producer": "integrator",
                                                        "scope": "baseline", "seq": 1}))
    return run


def test_a_foreign_tools_statistics_are_listed_and_a_field_with_no_role_is_fail_closed(tmp_path):
    run = _foreign_leg(tmp_path / "near", {"p95_ttft_ms": 12.0})
    verdict = audit_path(run, run / "claims" / "b.json")
    assert not [f for f in verdict.findings if f.code == "UNKNOWN_KNOB"]
    assert any("not judged" in n and "p95_ttft_ms" in n for n in verdict.not_checked)
    run = _foreign_leg(tmp_path / "unknown", {"speculative_accept_rate": 0.7})
    verdict = audit_path(run, run / "claims" / "b.json")
    found = [f for f in verdict.findings if f.code == "UNKNOWN_KNOB"]
    assert [(f.severity, f.measured) for f in found] == [("FLAG", ["speculative_accept_rate"])]
    assert verdict.verdict != "PASS"
