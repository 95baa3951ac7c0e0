"""Type-check the project with mypy under pyproject.toml's ``[tool.mypy]`` settings.

    .venv/bin/python scripts/typecheck.py [mypy options]

The editable install maps ``perfwarden.<name>`` to the folder ``<name>/`` through an import hook that
setuptools puts in site-packages. mypy finds a module by walking folders and never runs an import hook,
so it cannot see the project as Python imports it. This script lays the mapping out as links,
``.typecheck/perfwarden/<name> -> ../../<folder>``, one per entry of ``[tool.setuptools] package-dir``
(the table the install itself reads, so the two cannot disagree); ``[tool.mypy] mypy_path`` points at
``.typecheck``. mypy's messages name the links; they are printed with the checkout's own paths
(``formats/seal.py``) so that an editor opens the file. The exit status is mypy's: 0 clean, 1 errors,
2 a usage error (this script's own refusals included).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINKS = Path(".typecheck") / "perfwarden"
NAMESPACE = "perfwarden."
# A link's name and target come from pyproject.toml: a plain identifier and one folder of the checkout,
# never a path that leaves it.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class LayoutError(ValueError):
    """pyproject.toml's package-dir table cannot be laid out as one link per package."""


def package_folders(pyproject: Mapping[str, object]) -> dict[str, str]:
    """``{link name: folder}`` for each ``perfwarden.<name>`` of ``[tool.setuptools] package-dir``."""
    tool = pyproject.get("tool")
    setuptools = tool.get("setuptools") if isinstance(tool, dict) else None
    table = setuptools.get("package-dir") if isinstance(setuptools, dict) else None
    if not isinstance(table, dict) or not table:
        raise LayoutError("pyproject.toml has no [tool.setuptools] package-dir table")
    folders: dict[str, str] = {}
    for package, folder in table.items():
        name = package.removeprefix(NAMESPACE)
        if not package.startswith(NAMESPACE) or not IDENTIFIER.fullmatch(name):
            raise LayoutError(f"package-dir names {package!r}: expected perfwarden.<name>")
        if not isinstance(folder, str) or not IDENTIFIER.fullmatch(folder):
            raise LayoutError(f"package-dir maps {package!r} to {folder!r}: expected one folder of the checkout")
        folders[name] = folder
    return folders


def lay_out_links(root: Path, folders: Mapping[str, str]) -> None:
    """Make ``root/.typecheck/perfwarden`` hold exactly one link per package, each to its folder.

    Each link is written under a temporary name and renamed into place, so two checks started at once
    both end with the same links instead of one failing on the other's half-made one.
    """
    tree = root / LINKS
    tree.mkdir(parents=True, exist_ok=True)
    for entry in tree.iterdir():
        if entry.name not in folders and entry.is_symlink():
            entry.unlink()  # a package dropped from package-dir must not stay visible to mypy
    for name, folder in folders.items():
        target = Path("..", "..", folder)
        link = tree / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        if link.exists() and not link.is_symlink():
            raise LayoutError(f"{link} is not a link: remove it so that the check can lay out its own")
        partial = tree / f".{name}.{os.getpid()}"
        partial.unlink(missing_ok=True)
        partial.symlink_to(target, target_is_directory=True)
        os.replace(partial, link)


def real_paths(lines: Iterable[str], folders: Mapping[str, str]) -> Iterable[str]:
    """mypy's output lines, each link path (``.typecheck/perfwarden/harness/x.py``) as the checkout's."""
    prefixes = {f"{LINKS.as_posix()}/{name}/": f"{folder}/" for name, folder in folders.items()}
    for line in lines:
        for linked, real in prefixes.items():
            line = line.replace(linked, real)
        yield line


def main(argv: list[str]) -> int:
    try:
        folders = package_folders(tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8")))
        lay_out_links(ROOT, folders)
    except (LayoutError, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"typecheck: {exc}", file=sys.stderr)
        return 2
    with subprocess.Popen([sys.executable, "-m", "mypy", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as mypy:
        assert mypy.stdout is not None  # stdout=PIPE
        for line in real_paths(mypy.stdout, folders):
            sys.stdout.write(line)
    return mypy.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
