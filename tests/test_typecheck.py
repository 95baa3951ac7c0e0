"""The type check is part of the suite: mypy, under pyproject.toml's ``[tool.mypy]``, finds no error.

CI runs the suite, so a change that breaks a type fails CI like a failing test. The settings live in
pyproject.toml (which packages, which are strict); scripts/typecheck.py lays out the links mypy needs
to see ``perfwarden.<name>`` as the folder ``<name>/``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "typecheck.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("typecheck_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))


@pytest.mark.slow
def test_the_project_type_checks_with_no_error() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found"), done.stdout[-2000:]


def test_no_module_is_exempt_from_the_check() -> None:
    """Every module is held at zero errors: an ``ignore_errors`` override would let a module's errors pass
    unseen (third-party modules without types are another matter: ``ignore_missing_imports``)."""
    mypy = _pyproject()["tool"]["mypy"]  # type: ignore[index]  # the shape pyproject.toml has, read as data
    exempt = [o["module"] for o in mypy["overrides"] if o.get("ignore_errors")]
    assert not exempt, f"modules exempt from the type check: {exempt}"


def _strict_flags_of_mypy() -> set[str]:
    """The flags ``mypy --help`` says ``--strict`` turns on, as config keys (``warn_return_any``)."""
    text = subprocess.run([sys.executable, "-m", "mypy", "--help"], capture_output=True, text=True,
                          timeout=60, check=True).stdout
    block = re.search(r"--strict\s+Strict mode; enables the following flags:(.*?)\n  --", text, re.S)
    assert block is not None, "mypy --help no longer lists what --strict turns on"
    joined = re.sub(r"-\n\s*", "-", block.group(1))  # a flag wrapped at its hyphen
    flags = {flag.strip().removeprefix("--") for flag in joined.split(",")}
    return {flag.removeprefix("no-").replace("-", "_") if flag == "no-implicit-reexport"
            else flag.replace("-", "_") for flag in flags}


def test_the_strict_packages_set_every_flag_of_strict() -> None:
    """``strict`` cannot be set per module, so the strict override lists its flags one by one: a flag a
    newer mypy adds to --strict must be added too, or "strict" quietly means less."""
    mypy = _pyproject()["tool"]["mypy"]  # type: ignore[index]  # the shape pyproject.toml has, read as data
    strict = next(o for o in mypy["overrides"] if "perfwarden.harness.*" in o["module"])
    global_only = {"warn_unused_configs", "warn_redundant_casts"}  # mypy reads these only globally
    expected = _strict_flags_of_mypy() - global_only
    assert expected <= set(strict), f"flags of --strict missing from the strict override: {expected - set(strict)}"
    assert strict["implicit_reexport"] is False
    assert all(strict[flag] is True for flag in expected if flag != "implicit_reexport")
    assert all(mypy[flag] is True for flag in global_only & _strict_flags_of_mypy())


def test_the_links_follow_package_dir(tmp_path: Path) -> None:
    script = _script()
    folders = script.package_folders(_pyproject())
    assert folders["harness"] == "harness" and set(folders) >= {"auditor", "harness", "orchestrator"}
    (tmp_path / ".typecheck" / "perfwarden").mkdir(parents=True)
    (tmp_path / ".typecheck" / "perfwarden" / "dropped").symlink_to(tmp_path)
    script.lay_out_links(tmp_path, {"harness": "harness"})
    links = tmp_path / ".typecheck" / "perfwarden"
    assert sorted(p.name for p in links.iterdir()) == ["harness"]
    assert (links / "harness").readlink() == Path("..", "..", "harness")


@pytest.mark.parametrize("package_dir", [
    {"perfwarden.harness": "../elsewhere"},
    {"perfwarden.harness": "/etc"},
    {"other.harness": "harness"},
    {"perfwarden.a.b": "harness"},
    {},
])
def test_a_package_dir_that_leaves_the_checkout_is_refused(package_dir: dict[str, str]) -> None:
    script = _script()
    with pytest.raises(script.LayoutError):
        script.package_folders({"tool": {"setuptools": {"package-dir": package_dir}}})


def test_a_folder_in_the_way_of_a_link_is_refused(tmp_path: Path) -> None:
    script = _script()
    (tmp_path / ".typecheck" / "perfwarden" / "harness").mkdir(parents=True)
    with pytest.raises(script.LayoutError):
        script.lay_out_links(tmp_path, {"harness": "harness"})


def test_messages_name_the_checkouts_paths() -> None:
    script = _script()
    lines = [".typecheck/perfwarden/harness/seal.py:3: error: x  [misc]\n"]
    assert list(script.real_paths(lines, {"harness": "harness"})) == ["harness/seal.py:3: error: x  [misc]\n"]
