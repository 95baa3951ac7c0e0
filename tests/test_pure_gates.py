"""Every gate is a pure function of loaded evidence (issue 19 item 4): it returns its findings, not-checked
notes and value in a ``GateResult`` instead of adding to the audit's shared findings or not-checked list.
Verdicts are unchanged (``perfwarden backtest`` agrees on every case before and after)."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
from pathlib import Path

import msgspec
import pytest

import perfwarden.auditor.gates as gates_pkg
from perfwarden.auditor.evidence import line_evidence
from perfwarden.formats.jsonl import LineRef, read_jsonl
from perfwarden.verify.backtest import _audit_blind


class OutputLineProbe(msgspec.Struct):
    a: int


def _gates():
    for info in pkgutil.iter_modules(gates_pkg.__path__):
        module = importlib.import_module(f"{gates_pkg.__name__}.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and name.startswith("check_"):
                yield f"{info.name}.{name}", fn


def test_no_gate_takes_shared_findings_and_every_gate_returns_a_gate_result():
    found = dict(_gates())
    assert len(found) >= 30
    shared = {name: [p for p in inspect.signature(fn).parameters if p in ("findings", "not_checked", "loader")]
              for name, fn in found.items()}
    assert {name: params for name, params in shared.items() if params} == {}
    returns = {name: str(inspect.signature(fn).return_annotation) for name, fn in found.items()}
    assert {name: ret for name, ret in returns.items() if not ret.startswith("GateResult")} == {}


FIXTURES = Path(__file__).resolve().parents[1] / "proof" / "fixtures"
CITING = ("geak-i1-specdecode", "geak-i2-drift", "geak-i5-ttft", "geak-n2-selfcompare", "geak-n5-gibberish")
"""Fixtures whose verdicts cite JSONL lines (drift, parity, coherence, op bench rows) from clean files."""


def _verdicts(fixture: Path) -> list[dict]:
    out = []
    for rel, verdict in _audit_blind(fixture):
        data = verdict.model_dump(mode="json")
        for key in ("audited_at", "duration_s"):
            data.pop(key, None)
        out.append(data)
    return out


@pytest.mark.parametrize("name", CITING)
def test_gates_cite_loaded_lines_without_opening_a_file_again(monkeypatch, name):
    """The loader reads; gates judge: with re-reading a line made impossible, every verdict is the same
    (before, each cited line was re-read from its file by the gate: the gate degraded)."""
    fixture = FIXTURES / name
    expected = _verdicts(fixture)
    assert any(ref.get("sha256") and ref.get("line") for v in expected for f in v["findings"] for ref in f["evidence"])

    def reread(self):
        raise AssertionError(f"a gate re-read {self.path.name} line {self.line}")

    monkeypatch.setattr(LineRef, "raw", reread)
    monkeypatch.setattr(LineRef, "sha256", reread)
    assert _verdicts(fixture) == expected


def test_a_line_the_loader_did_not_read_has_nothing_to_cite(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n')
    with pytest.raises(ValueError, match="not read by the evidence loader"):
        line_evidence(tmp_path, LineRef(path, 1, 0, 8))
    cited = read_jsonl(path, OutputLineProbe, cite=True).records[0][0]
    assert line_evidence(tmp_path, cited).sha256 == hashlib.sha256(b'{"a": 1}').hexdigest()
