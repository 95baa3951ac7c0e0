"""``formats/safe_read.py``: only regular files inside their root are read, never blocking, bounded."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from perfwarden.formats import safe_read
from perfwarden.formats.safe_read import RefusedInput, is_regular, long_string, open_regular, read_bytes


@pytest.fixture
def root(tmp_path) -> Path:
    (tmp_path / "run" / "legs").mkdir(parents=True)
    (tmp_path / "run" / "legs" / "a.json").write_text('{"ok": 1}')
    (tmp_path / "outside.json").write_text('{"secret": 1}')
    return tmp_path / "run"


def refused(path, root, reason: str, match: str | None = None, **kw) -> RefusedInput:
    with pytest.raises(RefusedInput, match=match) as info:
        read_bytes(path, root, limit=kw.pop("limit", 1 << 20), what="record")
    assert info.value.reason == reason, info.value
    return info.value


def test_a_regular_file_inside_is_read_and_a_link_that_stays_inside_too(root):
    assert read_bytes(root / "legs" / "a.json", root, limit=100) == b'{"ok": 1}'
    (root / "alias.json").symlink_to(root / "legs" / "a.json")
    assert read_bytes(root / "alias.json", root, limit=100) == b'{"ok": 1}'
    assert is_regular(root / "alias.json", root)


def test_links_out_are_refused_wherever_the_link_is(root):
    (root / "out.json").symlink_to(root.parent / "outside.json")
    err = refused(root / "out.json", root, "outside", "resolves outside")
    assert "out.json" in str(err)
    (root / "legs" / "dir").symlink_to(root.parent, target_is_directory=True)  # a directory link out
    refused(root / "legs" / "dir" / "outside.json", root, "outside")
    refused(root / ".." / "outside.json", root, "outside")
    (root / "zero").symlink_to("/dev/zero")
    refused(root / "zero", root, "outside")


def test_fifos_devices_directories_and_missing_files_are_refused_without_blocking(root):
    os.mkfifo(root / "fifo")
    started = time.monotonic()
    refused(root / "fifo", root, "not_regular", "FIFO")
    assert time.monotonic() - started < 1
    refused("/dev/zero", None, "not_regular", "character device")
    refused(root / "legs", root, "not_regular", "directory")
    refused(root / "nope", root, "missing", "does not exist")
    assert not is_regular(root / "fifo", root) and not is_regular("/dev/null")


def test_sizes_are_bounded_and_the_bound_is_in_the_message(root):
    err = refused(root / "legs" / "a.json", root, "too_large", r"9 bytes, over the 4 bytes bound", limit=4)
    assert err.path.name == "a.json"
    big = root / "big"
    with open(big, "wb") as handle:
        handle.truncate(5 << 30)  # sparse: refused by its size, nothing is read
    refused(big, root, "too_large", r"5\.00? GiB|5 GiB")


def test_a_file_swapped_after_the_check_is_caught_on_the_descriptor(root, monkeypatch):
    """Between the stat and the open the file is replaced: by a FIFO (opened non-blocking, then refused
    by fstat), by a link out (O_NOFOLLOW refuses it), or its directory by a link out (/proc/self/fd)."""
    real_check = safe_read.check_regular
    target = root / "legs" / "a.json"

    def swap_to(kind: str):
        def check(path, r=None, what="file"):
            st = real_check(path, r, what)
            target.unlink()
            if kind == "fifo":
                os.mkfifo(target)
            else:
                target.symlink_to(root.parent / "outside.json")
            return st
        return check

    for kind in ("fifo", "link"):
        monkeypatch.setattr(safe_read, "check_regular", swap_to(kind))
        started = time.monotonic()
        with pytest.raises(RefusedInput):
            open_regular(target, root)
        assert time.monotonic() - started < 1
        target.unlink()
        target.write_text('{"ok": 1}')

    def swap_dir(path, r=None, what="file"):
        st = real_check(path, r, what)
        shutil.move(root / "legs", root.parent / "legs-elsewhere")
        (root / "legs").symlink_to(root.parent / "legs-elsewhere", target_is_directory=True)
        return st

    monkeypatch.setattr(safe_read, "check_regular", swap_dir)
    if os.path.exists("/proc/self/fd"):
        with pytest.raises(RefusedInput, match="outside"):
            open_regular(target, root)


def test_json_shape_bounds():
    assert long_string({"legs": {"baseline": "x" * 5000}}) == ("legs.baseline", 5000)
    assert long_string({"k" * 5000: 1})[1] == 5000
    assert long_string({"a": ["short"]}) is None
