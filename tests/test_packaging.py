"""Every package folder installs under perfwarden.* (the package list in pyproject.toml is explicit)."""

from __future__ import annotations

import tomllib
from source_tree import ROOT, source_files


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top in ("agents", "auditor", "harness", "orchestrator", "proof", "redteam", "skills"):
        for init in source_files("/__init__.py", under=top):
            found.add("perfwarden." + ".".join(init.parent.relative_to(ROOT).parts))
    assert found == listed
