"""The import boundaries (issue 19) hold, and the check is real: ``lint-imports`` runs the contracts in
pyproject.toml (``[tool.importlinter]``) on this tree, and fails on a copy with one forbidden import added.

The contracts: no arrow runs up the layers (proof > cli > verify > orchestrator | redteam > agents | auditor
> harness | skills > formats), the formats import no other package, the harness imports nothing above it,
the auditor imports only the formats and the skills, the running system never imports proof/, and no
package's modules import each other in a cycle; imports under ``if TYPE_CHECKING:`` count.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from source_tree import ROOT, source_files

PACKAGES = tuple(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
"""Every top-level folder the project installs as ``perfwarden.<name>`` (each folder is its package's name)."""
LINT = ("import sys; from importlinter.cli import lint_imports_command; "
        "sys.argv[0] = 'lint-imports'; sys.exit(lint_imports_command())")


def lint_imports(config: Path, pythonpath: str | None) -> subprocess.CompletedProcess:
    """``lint-imports`` with this interpreter (the project's environment), no cache written anywhere."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-c", LINT, "--config", str(config), "--no-cache", "--no-logo"],
                          cwd=config.parent, env=env, capture_output=True, text=True, timeout=120)


def test_every_package_is_a_root_of_the_contract():
    roots = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    assert sorted(roots) == sorted(f"perfwarden.{p}" for p in PACKAGES)


def test_no_contract_waives_an_import():
    """A cycle or an upward arrow is split, never waived: an ``ignore_imports`` entry hides the edge from
    every contract (the op bench's phases <-> runner cycle was waived so until its types moved out)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert {c["name"]: c["ignore_imports"] for c in contracts if c.get("ignore_imports")} == {}


def test_type_only_imports_count():
    """An import under ``if TYPE_CHECKING:`` is an edge too: a type-only arrow up or a type-only cycle is
    split (a Protocol where the type is used), never left out of the graph."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert not config.get("exclude_type_checking_imports", False)


def test_the_auditor_may_import_only_the_formats_and_the_skills():
    """The auditor's contract forbids every other package, a package added later included."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [auditor] = [c for c in contracts if c.get("source_modules") == ["perfwarden.auditor"]]
    allowed = {"perfwarden.auditor", "perfwarden.formats", "perfwarden.skills"}
    assert sorted(auditor["forbidden_modules"]) == sorted(f"perfwarden.{p}" for p in PACKAGES
                                                          if f"perfwarden.{p}" not in allowed)


def test_the_import_contract_holds():
    spec = importlib.util.find_spec("perfwarden.harness")
    where = [Path(p).resolve() for p in spec.submodule_search_locations]
    if ROOT / "harness" not in where:
        pytest.skip(f"perfwarden.harness resolves to {where}, not this checkout: the contract would check another tree")
    r = lint_imports(ROOT / "pyproject.toml", None)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def _copy_tree(dst: Path) -> Path:
    """The packages' Python files and pyproject.toml, under a ``perfwarden`` namespace folder of their own."""
    ns = dst / "perfwarden"
    for pkg in PACKAGES:
        for src in source_files(".py", under=pkg):
            rel = src.relative_to(ROOT)
            if "fixtures" in rel.parts or "__pycache__" in rel.parts:
                continue
            (ns / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, ns / rel)
    shutil.copyfile(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return ns


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A copy of the tree that holds the contract (checked once), resolved from the copy itself."""
    root = tmp_path_factory.mktemp("contract")
    _copy_tree(root)
    where = subprocess.run([sys.executable, "-c", "import perfwarden.harness as h; print(*h.__path__)"],
                           env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).resolve() == (root / "perfwarden" / "harness").resolve(), where.stdout
    clean = lint_imports(root / "pyproject.toml", str(root))
    assert clean.returncode == 0, clean.stdout + clean.stderr  # the copy holds: the plant is what breaks it
    return root


@pytest.mark.parametrize("module,line,contract", [
    ("auditor/stats.py", "from perfwarden.orchestrator import exit_codes", "the auditor imports only"),
    ("auditor/stats.py", "from perfwarden.harness import sandbox", "the auditor imports only"),
    ("harness/targets.py", "from perfwarden.agents import base", "the harness imports nothing above it"),
    ("formats/seal.py", "from perfwarden.harness import sandbox", "no arrow runs up"),
    ("formats/seal.py", "from perfwarden.auditor import stats", "the formats import no other perfwarden package"),
    ("verify/backtest.py", "from perfwarden.cli import main", "no arrow runs up"),
    ("orchestrator/graph.py", "from perfwarden.redteam import attack", "no arrow runs up"),
    ("harness/sandbox_limits.py", "from perfwarden.harness.sandbox import Limits", "no import cycle"),
    ("orchestrator/paths.py", "import perfwarden.proof.build_cases", "the running system never imports proof/"),
    ("harness/opbench/phases.py", "from perfwarden.harness.opbench import runner", "no import cycle"),
])
def test_a_planted_violation_breaks_the_contract(copy, module, line, contract):
    target = copy / "perfwarden" / module
    text = target.read_text()
    target.write_text(text + f"\n{line}  # planted by tests/test_import_contract.py\n")
    try:
        r = lint_imports(copy / "pyproject.toml", str(copy))
    finally:
        target.write_text(text)
    assert r.returncode != 0
    broken = r.stdout.split("Broken contracts", 1)[-1]
    package, leaf = f"perfwarden.{module[:-3].replace('/', '.')}".rsplit(".", 1)
    # a forbidden import is named in full; a cycle by its package and its members (``.runner -> .phases``)
    assert contract in broken and package in broken and f".{leaf}" in broken, r.stdout
