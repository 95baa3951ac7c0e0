"""Modules under 900 lines, functions under 100: an AST scan of every Python file git tracks in the
project, generated data left out. A newcomer reads a function in one screenful and a module in one
sitting; a longer one is split into named steps."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from source_tree import ROOT, source_files

MODULE_LINES = 900
FUNCTION_LINES = 100

GENERATED = ("proof/fixtures/", "proof/mlperf_fixtures/")
"""Generated data: fixtures written by the builders, never edited by hand."""

ALLOWED: dict[str, str] = {
}
"""Known offenders another engineer is splitting, with the owner: ``<path suffix>::<function>`` or a
module's ``<path suffix>``. The lead empties this at merge; an entry that no longer offends fails
``test_the_allow_list_names_only_current_offenders``."""


def project_files() -> list[Path]:
    """Every Python file of the project's source (what git tracks: tests/source_tree.py), generated data
    left out."""
    return [path for path in source_files(".py") if not path.relative_to(ROOT).as_posix().startswith(GENERATED)]


def offenders(path: Path, rel: str) -> list[tuple[str, int]]:
    """(key, lines) of the module if it is too long, and of each function (nested ones too) that is."""
    text = path.read_text("utf-8")
    found = []
    if text.count("\n") > MODULE_LINES:
        found.append((rel, text.count("\n")))
    for node in ast.walk(ast.parse(text, filename=rel)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > FUNCTION_LINES:
                found.append((f"{rel}::{node.name}", lines))
    return found


def allowed(key: str) -> str | None:
    """The owner of an allow-listed offender (matched by path suffix), else None."""
    return next((owner for entry, owner in ALLOWED.items() if key.endswith(entry)), None)


def all_offenders() -> dict[str, int]:
    return {key: lines for path in project_files()
            for key, lines in offenders(path, path.relative_to(ROOT).as_posix())}


@pytest.mark.slow  # over 2 s on a 2-core machine: the full suite runs it
def test_no_module_over_900_lines_and_no_function_over_100():
    found = {k: n for k, n in all_offenders().items() if allowed(k) is None}
    assert not found, ("split these into small named steps (design §8): "
                       + ", ".join(f"{k} ({n} lines)" for k, n in sorted(found.items())))


@pytest.mark.slow  # over 2 s on a 2-core machine: the full suite runs it
def test_the_allow_list_names_only_current_offenders():
    current = all_offenders()
    stale = [entry for entry in ALLOWED if not any(k.endswith(entry) for k in current)]
    assert not stale, f"no longer over the limit, remove from ALLOWED: {stale}"


def test_the_scan_sees_the_project_and_catches_a_long_function(tmp_path):
    files = {p.relative_to(ROOT).as_posix() for p in project_files()}
    assert {"formats/records.py", "tests/test_code_size.py"} <= files
    assert not any(f.startswith(GENERATED) for f in files)
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    long = tmp_path / "long.py"
    long.write_text(f"def too_long():\n{body}\n\n\ndef short():\n    return 1\n" + "\n" * MODULE_LINES)
    assert [k for k, _ in offenders(long, "x/long.py")] == ["x/long.py", "x/long.py::too_long"]
