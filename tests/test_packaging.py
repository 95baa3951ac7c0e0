"""Every package folder installs under perfwarden.* (the package list in pyproject.toml is explicit)."""

from __future__ import annotations

import tomllib
from source_tree import ROOT, source_files


def test_every_package_folder_is_listed_in_pyproject():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for top in setuptools["package-dir"].values():
        for init in source_files("/__init__.py", under=top):
            found.add("perfwarden." + ".".join(init.parent.relative_to(ROOT).parts))
    assert found == listed


def test_the_sandbox_mounts_every_package():
    """A sandboxed worker imports perfwarden's code from the package folders the sandbox mounts read-only: a
    package missing there (the formats every harness module reads) fails the worker's first import."""
    from perfwarden.harness import sandbox

    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert sorted(sandbox._PACKAGES) == sorted(dirs)
