"""No issue numbers in the project's code: a comment, docstring or string says why the code is as it is,
and which issue asked for it is history, which lives in git. A reference such as ``issue 17 §3`` means
nothing to a reader who never saw the tracker, and it outlives the reason it stood in for.

The scan reads the whole text of every source file (``.py`` and ``.sh``) git lists under the installed
package's folders and the project's scripts -- tests and generated fixtures left out -- so a reference
wrapped across lines or comment markers (``issue`` / ``# 17``) is found too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from source_tree import ROOT, source_files

FOLDERS = ("agents", "auditor", "benchmarks", "cli", "formats", "harness", "orchestrator", "proof", "redteam", "scripts",
           "skills", "verify")
"""The project's code outside its tests."""

SUFFIXES = (".py", ".sh")

GENERATED = ("proof/fixtures/", "proof/mlperf_fixtures/")
"""Fixtures the builders wrote: frozen data, never edited by hand (tests/test_code_size.py leaves them out too)."""

ISSUE_REFERENCE = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)
"""``issue 17``, ``Issue 9's``, ``issues 12 and 13``, ``issue #30``, ``issue`` and ``17`` on two lines."""

FROZEN_ANSWER_TEXT: dict[str, tuple[str, ...]] = {
    "proof/build_cases.py": ("under issue 9 rule 10 (decided)",),
    "proof/build_integrity.py": ("(issue 12): impossible, corrupt.",),
    "proof/build_judgement_cases.py": ("(issue 9 judgement rules; synthetic raw)",),
    "proof/build_random_weights.py": ("(issue 10 §3: performance-only runs on ",),
    "proof/build_stats_cases.py": ("(issue 17 §5: the producer's choices ",),
    "proof/record_cases.py": ("whatever the headline (issue 9 rule 5). ",),
}
"""Text a fixture builder writes into a committed answer key (a rationale or a provenance line). An answer
key is frozen before the auditor meets it and never relabelled to suit the code, so its builder keeps
writing the same words, issue number included. Each entry must still be in its builder and in a committed
``proof/fixtures/*/answer_key.json``: the list cannot excuse anything else."""


def issue_references(text: str, excused: tuple[str, ...] = ()) -> list[tuple[int, str]]:
    """(line number, matched text) of every issue reference in ``text`` outside an occurrence of one of
    the ``excused`` phrases."""
    spans = [(m.start(), m.end()) for phrase in excused for m in re.finditer(re.escape(phrase), text)]
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in ISSUE_REFERENCE.finditer(text)
            if not any(start <= m.start() and m.end() <= end for start, end in spans)]


def code_files() -> list[Path]:
    """Every source file of the project's code (see the module docstring), generated fixtures left out."""
    return [path for path in source_files(*SUFFIXES)
            if (rel := path.relative_to(ROOT).as_posix()).startswith(tuple(f"{folder}/" for folder in FOLDERS))
            and not rel.startswith(GENERATED)]


def answer_key_texts() -> list[str]:
    """The decoded text of every committed fixture's answer key (escapes such as ``\\u00a7`` read as ``§``)."""
    keys = [path for path in source_files(".json", under="proof/fixtures") if path.name == "answer_key.json"]
    return [json.dumps(json.loads(path.read_text("utf-8")), ensure_ascii=False) for path in keys]


def test_the_scan_finds_every_form_of_reference() -> None:
    """The scan is real: it finds a reference in a comment, a docstring, a string and an f-string, wrapped
    across lines, in any case, and leaves alone words that only look alike."""
    planted = ('"""Issue 9\'s rule."""\n'
               "x = 1  # see issue\n"
               "# 17 for why\n"
               "y = f'{x} (issue #30)'\n"
               "z = 'as issues 12 and 13 say'\n"
               "w = 'the client issued 5 requests; reissue 3; before_issue17.json'\n")
    assert [line for line, _ in issue_references(planted)] == [1, 2, 4, 5]
    assert issue_references(planted, excused=("(issue #30)",)) == [(1, "Issue 9"), (2, "issue\n# 17"),
                                                                    (5, "issues 12")]


def test_no_issue_numbers_in_the_code() -> None:
    files = code_files()
    assert any(path.name == "audit.py" for path in files), "the scan found none of the project's code"
    found = [f"{path.relative_to(ROOT).as_posix()}:{line}: {text!r}"
             for path in files
             for line, text in issue_references(path.read_text("utf-8"),
                                                FROZEN_ANSWER_TEXT.get(path.relative_to(ROOT).as_posix(), ()))]
    assert not found, ("issue numbers in the code -- say why the code is as it is, not which issue asked for "
                       "it (history lives in git):\n" + "\n".join(found))


def test_the_frozen_answer_text_is_in_its_builder_and_an_answer_key() -> None:
    """An excused phrase is one a builder still writes and a committed answer key still holds; a stale
    entry would excuse a reference nobody froze."""
    keys = answer_key_texts()
    assert keys, "no committed answer key found under proof/fixtures"
    for rel, phrases in FROZEN_ANSWER_TEXT.items():
        source = (ROOT / rel).read_text("utf-8")
        for phrase in phrases:
            assert phrase in source, f"{rel} no longer writes {phrase!r}: drop it from FROZEN_ANSWER_TEXT"
            assert ISSUE_REFERENCE.search(phrase), f"{phrase!r} holds no issue reference: drop it"
            assert any(phrase in key for key in keys), f"{phrase!r} ({rel}) is in no committed answer key"
