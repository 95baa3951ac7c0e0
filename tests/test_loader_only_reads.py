"""The loader only reads (issue 27 §2): ``auditor/evidence.py`` states what it met as facts and adds no
finding; the reading gate makes each fact a finding by the evidence model's ``reading`` table."""

from __future__ import annotations

import ast
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
