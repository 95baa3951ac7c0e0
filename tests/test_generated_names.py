"""Folders the op bench generates never carry a source suffix, whatever the candidate is called.

The lab names each backend by its spec, an absolute ``path.py:function``; its worker's folder under
``opbench/<op>/work/`` was that name with unsafe characters replaced and cut at 60 characters, so from a
clone path of the right length the folder ended in ``.py`` (the issue's
``work/03-..._rmsnorm_eps_outside.py/``) and every tool that takes ``*.py`` to be a file failed on it.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfwarden.harness.opbench.runner import WORK_STEM_CHARS, work_folder_name

SAFE = re.compile(r"^\d{2,}(-[A-Za-z0-9_-]+)?$")
ADVERSARIAL = [
    "", ".py", "x.py", "..", "../../etc/passwd.json", "a/b/c.py:rmsnorm", "a\\b\\c.py:fn", "report.md",
    "/tmp/" + "d" * 500 + "/k.py:rmsnorm", "k" * 500 + ".py", "名前.py", "\x1b[31m.py", "-rf", "_.json",
    "perfwarden.harness.ops.reference:rmsnorm", "x.py.", "x.py/", "x:y.jsonl", "CON", " .py ",
]


def check(name: str, index: int) -> None:
    assert SAFE.match(name), name
    assert Path(name).suffix == "" and "." not in name, name
    assert len(name) <= len(f"{index:02d}") + 1 + WORK_STEM_CHARS, name


@pytest.mark.parametrize("backend", ADVERSARIAL)
def test_adversarial_backend_names_give_a_plain_folder_name(backend):
    check(work_folder_name(3, backend), 3)


@given(index=st.integers(0, 10_000), backend=st.text(max_size=2_000))
def test_any_backend_name_gives_a_plain_folder_name(index, backend):
    check(work_folder_name(index, backend), index)


@given(backend=st.text(max_size=200), other=st.text(max_size=200), i=st.integers(0, 500), j=st.integers(0, 500))
def test_two_workers_of_one_bench_never_share_a_folder(backend, other, i, j):
    if i != j:
        assert work_folder_name(i, backend) != work_folder_name(j, other)


def test_the_stem_names_the_file_and_function_whatever_the_clone_path():
    for clone in ("/tmp/pwclone", "/home/someone/src/perfwarden", "/x"):
        spec = f"{clone}/harness/ops/alternatives/rmsnorm_eps_outside.py:rmsnorm"
        assert work_folder_name(3, spec) == "03-rmsnorm_eps_outside_py_rmsnorm"


@pytest.mark.integration
def test_a_bench_from_a_clone_path_that_cut_the_name_at_py_writes_no_py_folder():
    """The real op bench (sandboxed workers) on a candidate whose spec, with unsafe characters replaced,
    is exactly 60 characters up to ``.py``: the length the old name was cut at."""
    pytest.importorskip("torch")
    from perfwarden.harness.opbench.runner import run_opbench_for_lab
    from perfwarden.harness.ops.alternatives import for_op

    home = Path(tempfile.mkdtemp(prefix="pw")).resolve()  # short: the 60-character name fits under it
    try:
        stem_chars = 60 - len(f"{home}/") - len(".py")
        candidate = home / ("c" * stem_chars + ".py")
        shutil.copy(for_op("rmsnorm", ("alternative",))[0].path, candidate)
        assert len(re.sub(r"[^A-Za-z0-9_.-]", "_", f"{candidate}")) == 60  # what the old name kept, to '.py'
        run_opbench_for_lab(home / "run", "rmsnorm", [f"{candidate}:rmsnorm"], [[4, 64]], iters=2, warmup=1,
                            trials=3)
        folders = [p for p in (home / "run").rglob("*") if p.is_dir()]
        work = home / "run" / "opbench" / "rmsnorm" / "work"
        assert sorted(p.name for p in work.iterdir() if p.is_dir()) == ["00-reference", f"01-{'c' * 40}"]
        assert not [p for p in folders if p.suffix], [p for p in folders if p.suffix]
    finally:
        shutil.rmtree(home, ignore_errors=True)
