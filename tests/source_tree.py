"""The project's source files, as git sees them: what the tests that read the source tree read.

A walk of the checkout (``rglob("*.py")``) reads whatever lies there: the README's first command writes
``runs/<time>/`` into the checkout, with generated code and work folders, and a folder whose name ends in
``.py`` made such a walk fail (IsADirectoryError) or a generated file count as the project's code. Git
already knows the difference: the source is every file it tracks, plus a new file not yet added that it
would not ignore (``git ls-files --cached --others --exclude-standard``); the run's output, the venvs
and caches are ignored (``.gitignore``). Outside a git checkout (an unpacked archive) nothing tells the
source from generated output, so a test that needs the list is skipped and says why, rather than
guessing from a walk.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_A_CHECKOUT = "not a git checkout (or no git): the project's source files cannot be told from generated output"


class NotACheckout(RuntimeError):
    """``git ls-files`` cannot list ``root``."""


def listed_files(root: Path = ROOT) -> list[str]:
    """Paths, relative to ``root``, of every file git tracks or would track under ``root``."""
    try:
        done = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                               "--", "."], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NotACheckout(f"git ls-files could not run: {exc}") from None
    if done.returncode != 0:
        raise NotACheckout(done.stderr.decode("utf-8", "replace").strip())
    return sorted({name for name in done.stdout.decode("utf-8", "surrogateescape").split("\0") if name})


def source_files(*suffixes: str, under: str = "", root: Path = ROOT) -> list[Path]:
    """The regular files of the source (see the module docstring) under ``root/under`` whose names end in
    one of ``suffixes`` (every file when none is given), sorted. Skips the calling test outside a git
    checkout."""
    try:
        names = listed_files(root)
    except NotACheckout as exc:
        pytest.skip(f"{NOT_A_CHECKOUT}: {exc}")
    prefix = f"{under.strip('/')}/" if under else ""
    paths = [root / name for name in names if name.startswith(prefix) and (not suffixes or name.endswith(suffixes))]
    # a tracked file deleted in the work tree, or replaced by a folder, is not a file to read
    return [path for path in paths if path.is_file()]
