"""Every gate is a pure function of loaded evidence (issue 19 item 4): it returns its findings, not-checked
notes and value in a ``GateResult`` instead of adding to the audit's shared findings or not-checked list.
Verdicts are unchanged (``perfwarden backtest`` agrees on every case before and after)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import perfwarden.auditor.gates as gates_pkg


def _gates():
    for info in pkgutil.iter_modules(gates_pkg.__path__):
        module = importlib.import_module(f"{gates_pkg.__name__}.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and name.startswith("check_"):
                yield f"{info.name}.{name}", fn


def test_no_gate_takes_shared_findings_and_every_gate_returns_a_gate_result():
    found = dict(_gates())
    assert len(found) >= 30
    shared = {name: [p for p in inspect.signature(fn).parameters if p in ("findings", "not_checked")]
              for name, fn in found.items()}
    assert {name: params for name, params in shared.items() if params} == {}
    returns = {name: str(inspect.signature(fn).return_annotation) for name, fn in found.items()}
    assert {name: ret for name, ret in returns.items() if not ret.startswith("GateResult")} == {}
