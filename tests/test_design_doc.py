"""Every "design §N" the code cites names a section of docs/design.md, and its floor plan names every
package the project installs (issue 19 item 6): the design document is the project's own and current."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from source_tree import ROOT, source_files

DESIGN = ROOT / "docs" / "design.md"
SCANNED = (".py", ".md", ".toml")


CITATION = re.compile(r"design (§\d+(?:\s*(?:[-/,]|and)\s*§?\d+)*)")


def cited_sections(text: str) -> list[int]:
    """Section numbers a text cites as "design §N" (also "§3-§4", "§2/§4", "§2, §3")."""
    return [int(n) for match in CITATION.finditer(text) for n in re.findall(r"\d+", match.group(1))]


def doc_sections(text: str) -> set[int]:
    """Numbers of the document's top-level sections (``## N. Title``)."""
    return {int(n) for n in re.findall(r"^## (\d+)\. ", text, flags=re.M)}


def citations() -> dict[str, list[int]]:
    """Every file of the project that cites the design, with the sections it cites."""
    out = {}
    for path in source_files(*SCANNED):  # what git tracks: a run's output in the checkout is not the project's
        if path == DESIGN:
            continue
        found = cited_sections(path.read_text("utf-8", errors="replace"))
        if found:
            out[str(path.relative_to(ROOT))] = found
    return out


def test_the_parser_reads_every_citation_form():
    assert cited_sections("(design §2, §3) design §3-§4 design §2/§4: design §5.") == [2, 3, 3, 4, 2, 4, 5]
    assert cited_sections("issue 17 §5, the design page") == []


def test_every_design_citation_in_the_code_resolves():
    sections = doc_sections(DESIGN.read_text("utf-8"))
    cited = citations()
    assert sections and cited, "no sections or no citations found: the scan is broken"
    dangling = {f: [n for n in ns if n not in sections] for f, ns in cited.items()}
    assert not {f: ns for f, ns in dangling.items() if ns}, f"cited sections missing from docs/design.md: {dangling}"


def test_a_citation_of_a_missing_section_is_caught():
    sections = doc_sections(DESIGN.read_text("utf-8"))
    missing = max(sections) + 1
    assert [n for n in cited_sections(f"see design §{missing}") if n not in sections] == [missing]


def test_the_floor_plan_names_every_installed_package():
    """Section 1 lists each top-level folder pyproject installs as ``perfwarden.<name>``."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]["package-dir"]
    text = DESIGN.read_text("utf-8")
    floor_plan = text.split("## 1. ", 1)[1].split("\n## 2. ", 1)[0]
    missing = [folder for folder in dirs.values() if f"{folder}/" not in floor_plan]
    assert not missing, f"docs/design.md §1 does not place {missing}"
