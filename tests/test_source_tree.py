"""The tests that read the source tree read what git tracks, never a run's output in the checkout.

The README's first command writes ``runs/<time>/`` into the checkout; its second runs the tests that
scan the source (module and function sizes, design citations, the import contract, ...). A work folder
named like a source file (``.../work/03-...eps_outside.py/``) made those scans fail with
IsADirectoryError, and a generated module would have been judged as the project's own code.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from source_tree import ROOT, source_files
from test_code_size import FUNCTION_LINES, all_offenders, project_files
from test_design_doc import citations


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=60)


def test_the_source_is_what_git_tracks_or_would_track(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("/runs/\n")
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    (repo / "pkg" / "gone.py").write_text("y = 2\n")
    git(repo, "add", ".gitignore", "pkg/mod.py", "pkg/gone.py")
    (repo / "pkg" / "gone.py").unlink()  # tracked, deleted in the work tree: nothing to read
    (repo / "pkg" / "new.py").write_text("z = 3\n")  # not added yet, not ignored: the developer's new module
    (repo / "runs" / "t" / "work" / "03-x_eps_outside.py").mkdir(parents=True)  # a folder named like source
    (repo / "runs" / "t" / "generated").mkdir(parents=True)
    (repo / "runs" / "t" / "generated" / "kernel.py").write_text("k = 4\n")  # generated, ignored
    assert source_files(".py", root=repo) == [repo / "pkg" / "mod.py", repo / "pkg" / "new.py"]
    assert source_files(".py", under="pkg", root=repo) == [repo / "pkg" / "mod.py", repo / "pkg" / "new.py"]
    assert source_files(root=repo) == [repo / ".gitignore", repo / "pkg" / "mod.py", repo / "pkg" / "new.py"]


def test_outside_a_git_checkout_the_scan_is_skipped_not_guessed(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    with pytest.raises(pytest.skip.Exception, match="not a git checkout"):
        source_files(".py", root=tmp_path)


@pytest.fixture
def planted_run():
    """A run's output in the checkout, where the README's first command writes it (``runs/``, which git
    ignores): a work folder named like a source file, and a generated module with an over-long function
    and a citation of a design section that does not exist. Removed afterwards. If git did not ignore
    ``runs/``, the scans would read it and the test fails: that is the contract too."""
    run = ROOT / "runs" / f"pytest-planted-{uuid.uuid4().hex}"
    try:
        (run / "opbench" / "rmsnorm" / "work" / "03-_tmp_pw_harness_ops_alternatives_rmsnorm_eps_outside.py").mkdir(
            parents=True)
        body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES + 5))
        (run / "generated").mkdir()
        dangling = "design " + "§99"  # split: this file is scanned too, and must not cite it itself
        (run / "generated" / "kernel.py").write_text(f'"""see {dangling}"""\n\n\ndef long():\n{body}\n')
        yield run
    finally:
        shutil.rmtree(run, ignore_errors=True)


@pytest.mark.slow  # scans every source file of the project
def test_a_runs_output_in_the_checkout_is_not_read_as_source(planted_run):
    rel = planted_run.relative_to(ROOT).as_posix()
    assert not [p for p in project_files() if p.is_relative_to(planted_run)]
    assert not [key for key in all_offenders() if key.startswith(rel)]
    assert not [path for path in citations() if path.startswith(rel)]
