"""``benchmarks/record.py`` writes a benchmark run's figures into ``docs/benchmarks.md``, and the document
it writes stays well formed: one block per script, one row per figure, each row saying where it came from.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from source_tree import ROOT

BENCHMARKS = ROOT / "benchmarks"
WIRED = ("audit_throughput.py", "big_inputs.py", "aa_power.py", "fuzz.py", "fuzz_llm.py", "search_quality.py",
         "scale_out.py")
"""The scripts whose figures the issues cite: each takes ``--record`` and hands its figures to the helper."""


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_record", BENCHMARKS / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


record = _load()


def figure(measures: str, value: str):
    return record.Figure(measures=measures, value=value)


def rows_of(text: str, script: str):
    lines = text.splitlines()
    span = record.find_block(lines, script)
    assert span is not None, f"no block for {script}"
    return record.block_rows(lines, span)


def test_a_first_run_appends_the_scripts_block_with_one_row_per_figure(tmp_path, monkeypatch):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# figures\n\nprose written by hand\n")
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py", "--rounds", "3", "--record", str(doc)])
    record.record("x.py", [figure("audit / bare", "**1.22x**"), figure("peak RSS", "188 MiB")], doc)
    text = doc.read_text()
    assert text.startswith("# figures\n\nprose written by hand\n")
    rows = rows_of(text, "x.py")
    assert [(r.measures, r.value) for r in rows] == [("audit / bare", "**1.22x**"), ("peak RSS", "188 MiB")]
    for row in rows:
        assert re.match(r"^\d{4}-\d\d-\d\d \(", row.date), row.date
        assert "cores" in row.machine and re.match(r"^[\d.]+ / [\d.]+ / [\d.]+$", row.load)
        assert row.command == "`python benchmarks/x.py --rounds 3`", "the command without --record and its document"


def test_a_second_run_replaces_the_rows_it_measured_again_and_keeps_everything_else(tmp_path):
    doc = tmp_path / "benchmarks.md"
    record.record("x.py", [figure("mode a", "1"), figure("mode b", "2")], doc)
    record.record("y.py", [figure("other", "9")], doc)
    doc.write_text(doc.read_text() + "\nhand-written notes after the blocks\n")
    before = doc.read_text()
    record.record("x.py", [figure("mode b", "3"), figure("mode c", "4")], doc)
    after = doc.read_text()
    assert [(r.measures, r.value) for r in rows_of(after, "x.py")] == [("mode a", "1"), ("mode b", "3"), ("mode c", "4")]
    assert [(r.measures, r.value) for r in rows_of(after, "y.py")] == [("other", "9")]
    outside = lambda text: re.sub(r"<!-- begin benchmarks/x\.py.*?<!-- end benchmarks/x\.py -->", "", text, flags=re.S)
    assert outside(after) == outside(before), "only the script's own block changes"


def test_pipes_and_line_breaks_in_a_figure_survive_rewrites_unchanged(tmp_path):
    doc = tmp_path / "benchmarks.md"
    value = "a | b\nc `x|y`"
    record.record("x.py", [figure("m | n", value)], doc)
    record.record("x.py", [figure("other", "1")], doc)
    record.record("x.py", [figure("other", "2")], doc)
    rows = rows_of(doc.read_text(), "x.py")
    assert [(r.measures, r.value) for r in rows] == [("m | n", "a | b c `x|y`"), ("other", "2")]


@pytest.mark.parametrize("broken", [
    "<!-- end benchmarks/x.py -->\n",
    "<!-- begin benchmarks/x.py: rows -->\n| a |\n",
    "<!-- begin benchmarks/x.py: r -->\n<!-- end benchmarks/x.py -->\n<!-- begin benchmarks/x.py: r -->\n<!-- end benchmarks/x.py -->\n",
    "<!-- begin benchmarks/y.py: r -->\n<!-- begin benchmarks/x.py: r -->\n<!-- end benchmarks/x.py -->\n",
    "<!-- begin benchmarks/x.py: r -->\n| only | two |\n<!-- end benchmarks/x.py -->\n",
])
def test_a_document_with_broken_blocks_is_refused_with_exit_3_and_left_as_it_was(tmp_path, capsys, broken):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(broken)
    with pytest.raises(SystemExit) as stop:
        record.record("x.py", [figure("m", "1")], doc)
    assert stop.value.code == 3
    assert "not recorded" in capsys.readouterr().err
    assert doc.read_text() == broken


def test_a_link_or_a_folder_in_place_of_the_document_is_refused(tmp_path):
    target = tmp_path / "elsewhere.md"
    target.write_text("# someone else's file\n")
    link = tmp_path / "benchmarks.md"
    link.symlink_to(target)
    with pytest.raises(SystemExit):
        record.record("x.py", [figure("m", "1")], link)
    assert target.read_text() == "# someone else's file\n"
    folder = tmp_path / "dir.md"
    folder.mkdir()
    with pytest.raises(SystemExit):
        record.record("x.py", [figure("m", "1")], folder)


def test_without_the_flag_nothing_is_written(tmp_path):
    record.record("x.py", [figure("m", "1")], None)
    assert not list(tmp_path.iterdir())


def test_two_figures_of_one_run_must_measure_different_things(tmp_path):
    with pytest.raises(SystemExit):
        record.record("x.py", [figure("m", "1"), figure("m ", "2")], tmp_path / "b.md")


@pytest.mark.parametrize("args, kept", [
    (["--record"], []),
    (["--record", "docs/x.md", "--seed", "1"], ["--seed", "1"]),
    (["--record=docs/x.md", "--seed", "1"], ["--seed", "1"]),
    (["--seed", "1", "--record", "--inputs", "5"], ["--seed", "1", "--inputs", "5"]),
    (["--modes", "a b"], ["--modes", "a b"]),
])
def test_the_recorded_command_is_the_run_without_recording(args, kept):
    assert record.command_line("s.py", args) == " ".join(["python", "benchmarks/s.py", *(
        f"'{a}'" if " " in a else a for a in kept)])


def test_the_benchmarks_document_is_well_formed():
    """Every row of docs/benchmarks.md, in a script's block or recorded by hand, says what it measures, the
    figure, when, where, at what load and how; every block names a script that writes it."""
    text = (ROOT / "docs" / "benchmarks.md").read_text("utf-8")
    lines = text.splitlines()
    scripts = sorted({m.group(1) for m in re.finditer(r"^<!-- begin benchmarks/(\S+?):", text, flags=re.M)})
    assert scripts, "no blocks in docs/benchmarks.md"
    for script in scripts:
        assert record.block_rows(lines, record.find_block(lines, script)), f"the block of {script} has no rows"
        source = (BENCHMARKS / script).read_text("utf-8")
        assert f'record.record("{script}"' in source, f"{script} has a block but never records into it"
    header = record.HEADER.splitlines()
    tables = [n for n, line in enumerate(lines) if line == header[0]]
    assert tables, "no table in docs/benchmarks.md"
    covered: set[int] = set()
    for start in tables:
        assert lines[start + 1] == header[1], f"line {start + 2}: not the separator of the figures' table"
        end = start + 2
        while end < len(lines) and lines[end].startswith("|"):
            row = record.parse_row(lines[end], f"line {end + 1}")
            assert all(row.cells()), f"line {end + 1}: an empty cell"
            assert re.match(r"^\d{4}-\d\d-\d\d\b", row.date), f"line {end + 1}: {row.date!r} is not a date"
            assert row.command.startswith("`"), f"line {end + 1}: the command is not quoted as code"
            covered.add(end)
            end += 1
        assert end > start + 2, f"line {start + 1}: a table without rows"
    other = [n + 1 for n, line in enumerate(lines) if line.startswith("|") and n not in covered
             and n not in tables and n - 1 not in tables]
    assert not other, f"tables other than the figures' format at lines {other}"


@pytest.mark.parametrize("script", WIRED)
def test_each_cited_benchmark_takes_record_off_by_default(script):
    """Each script adds the flag to its parser and hands its figures to the helper; the flag's default
    writes nothing."""
    source = (BENCHMARKS / script).read_text("utf-8")
    assert "record.add_flag(parser)" in source and "record.record(" in source and "args.record" in source
    parser = __import__("argparse").ArgumentParser()
    record.add_flag(parser)
    assert parser.parse_args([]).record is None
    assert parser.parse_args(["--record"]).record == record.DOC


@pytest.mark.slow
def test_a_real_benchmark_run_records_its_figures(tmp_path):
    """The fuzz on a few inputs, as a user runs it with ``--record DOC``: its figure lands in DOC."""
    doc = tmp_path / "benchmarks.md"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "fuzz.py"), "--inputs", "4", "--workers", "1",
                           "--chunk", "2", "--record", str(doc)], capture_output=True, text=True, timeout=240,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = rows_of(doc.read_text(), "fuzz.py")
    assert [r.measures for r in rows] == ["mutated inputs through every command and reader, 4 inputs, seed 0"]
    assert rows[0].value.startswith("4 inputs in ") and "all **0**" in rows[0].value
    assert rows[0].command == "`python benchmarks/fuzz.py --inputs 4 --workers 1 --chunk 2`"
