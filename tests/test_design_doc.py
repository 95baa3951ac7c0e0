"""Every "design §N" the code cites names a section of docs/design.md, and its floor plan names every
package the project installs (issue 19 item 6): the design document is the project's own and current."""

from __future__ import annotations

import fnmatch
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


# ------------------------------------------------------------------------------------------------
# The documents against the tree: every path they name exists, and the README stays a README.

README = ROOT / "README.md"
README_MAX_LINES = 300
README_COMMANDS = ["bash scripts/install.sh && .venv/bin/perfwarden run --target embedded", "bash scripts/test.sh"]
"""The two commands a new user types (``.ci/run`` runs them in order; tests/test_ci_run.py holds it to them)."""

LINKED_BEFORE_IT_LANDS: set[str] = set()
"""Documents the README links that are written in a tree merged separately. A name stays here only while
its file is absent: once it exists, the test asks for it to be taken out, so the exception cannot outlive
its reason."""

PATH_TOKEN = re.compile(r"(?<![\w./~$@-])((?:\.ci|[A-Za-z_][\w-]*)/[\w.*<>…/+-]*)")
PACKAGE_FOLDERS = sorted(
    tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]["package-dir"].values())
"""The top-level folders pyproject installs as ``perfwarden.<name>``."""
MODULE_TOKEN = re.compile(r"(?<![\w./])(?:perfwarden\.)?(" + "|".join(PACKAGE_FOLDERS) + r")\.(?!py\b)([a-z_]\w*)")
"""A dotted module name; ``redteam.py`` (the CLI's module of that name) is a file name, not one."""
LINK_TARGET = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
PLACEHOLDER = re.compile(r"<[^<>]*>|…")


def documents() -> list[Path]:
    """The README and every document under docs/."""
    return [README, *source_files(".md", under="docs")]


def tree_entries() -> tuple[set[str], set[str]]:
    """(files, folders) of the source tree, as paths relative to the root."""
    files = {str(path.relative_to(ROOT)) for path in source_files()}
    folders = {str(parent) for name in files for parent in Path(name).parents if str(parent) != "."}
    return files, folders


def exists(name: str, files: set[str], folders: set[str]) -> bool:
    """``name`` is a file or folder of the tree; ``*``, ``<placeholder>`` and ``…`` stand for any part."""
    name = name.rstrip("/") if name.endswith("/") else name
    pattern = PLACEHOLDER.sub("*", name)
    if "*" not in pattern:
        return name in files or name in folders
    return any(fnmatch.fnmatchcase(entry, pattern) for entry in files | folders)


def named_paths(text: str, top: set[str]) -> set[str]:
    """Paths a document names that start at a top-level entry of the tree (``formats/seal.py``,
    ``proof/fixtures/rw-*``): paths of a run directory (``legs/<leg>/…``), the home folder or outside the
    checkout are not the tree's."""
    found = set()
    for match in PATH_TOKEN.finditer(text):
        token = match.group(1).rstrip(".")
        if token.split("/", 1)[0] in top:
            found.add(token)
    return found


def linked_paths(document: Path, text: str) -> set[str]:
    """Targets of the document's relative markdown links, as paths from the root."""
    out = set()
    for target in LINK_TARGET.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (document.parent / target).resolve()
        if resolved.is_relative_to(ROOT):
            out.add(str(resolved.relative_to(ROOT)))
        else:
            out.add(target)
    return out


def named_modules(text: str, files: set[str], folders: set[str]) -> list[str]:
    """Dotted module names (``formats.records.Claim``, ``perfwarden.redteam.attack``) whose module is not in
    the tree."""
    missing = []
    for package, module in MODULE_TOKEN.findall(text):
        if f"{package}/{module}.py" not in files and f"{package}/{module}" not in folders:
            missing.append(f"{package}.{module}")
    return missing


def floor_plan_files(text: str, top: set[str]) -> dict[str, list[str]]:
    """Design §1's bullets (``- **harness/** …``) and the bare file and folder names each puts under its
    folder (``records.py``, ``opbench/``, ``cli*.py``)."""
    floor_plan = text.split("## 1. ", 1)[1].split("\n## 2. ", 1)[0]
    out: dict[str, list[str]] = {}
    for bullet in re.split(r"\n(?=- \*\*)", floor_plan):
        head = re.match(r"- \*\*([\w-]+)/\*\*", bullet)
        if head:
            names = re.findall(r"`([\w*.-]+(?:\.py|/))`", bullet)
            # a top-level folder named in another's bullet (the auditor "never imports ... `proof/`") is the
            # top-level one: the tree-wide check holds it
            out[head.group(1)] = [f"{head.group(1)}/{name}" for name in names if name.rstrip("/") not in top]
    return out


def test_every_path_the_documents_name_is_in_the_tree():
    files, folders = tree_entries()
    top = {name.split("/", 1)[0] for name in files}
    missing: dict[str, list[str]] = {}
    for document in documents():
        text = document.read_text("utf-8")
        names = named_paths(text, top) | linked_paths(document, text)
        gone = sorted(n for n in names if not exists(n, files, folders) and n not in LINKED_BEFORE_IT_LANDS)
        gone += named_modules(text, files, folders)
        if gone:
            missing[str(document.relative_to(ROOT))] = gone
    assert not missing, f"paths and modules the documents name that are not in the tree: {missing}"


def test_the_floor_plan_places_every_file_it_names_under_its_folder():
    files, folders = tree_entries()
    plan = floor_plan_files(DESIGN.read_text("utf-8"), {name.split("/", 1)[0] for name in files})
    assert {"harness", "auditor", "agents", "orchestrator", "proof"} <= set(plan), "the §1 bullets were not found"
    missing = {folder: [n for n in names if not exists(n, files, folders)] for folder, names in plan.items()}
    assert not {k: v for k, v in missing.items() if v}, f"docs/design.md §1 names files its folders lack: {missing}"


def test_every_file_the_floor_plan_names_exists():
    """Design §1 as a whole, its diagram included: every path it names (``harness/llm_client.py``,
    ``orchestrator/persona_model.py``) and every file a bullet puts under its folder is in the tree, and the
    diagram draws every installed package."""
    files, folders = tree_entries()
    top = {name.split("/", 1)[0] for name in files}
    text = DESIGN.read_text("utf-8")
    floor_plan = text.split("## 1. ", 1)[1].split("\n## 2. ", 1)[0]
    named = named_paths(floor_plan, top) | {n for names in floor_plan_files(text, top).values() for n in names}
    assert len(named) > 50, f"the §1 scan found only {sorted(named)}"
    missing = sorted(n for n in named if not exists(n, files, folders))
    assert not missing, f"docs/design.md §1 names paths that are not in the tree: {missing}"
    diagram = floor_plan.split("```", 2)[1]
    drawn = {line.split("/", 1)[0] for line in diagram.splitlines() if re.match(r"[a-z]+/ ", line)}
    assert set(PACKAGE_FOLDERS) <= drawn, f"the §1 diagram does not draw {set(PACKAGE_FOLDERS) - drawn}"


def test_a_linked_document_written_elsewhere_is_excused_only_while_it_is_absent():
    files, _ = tree_entries()
    landed = sorted(LINKED_BEFORE_IT_LANDS & files)
    assert not landed, f"{landed} now exist: take them out of LINKED_BEFORE_IT_LANDS"


def test_the_path_check_catches_a_moved_file():
    files, folders = {"harness/seal.py", "proof/fixtures/rw-a/answer_key.json"}, {"harness", "proof", "proof/fixtures",
                                                                                   "proof/fixtures/rw-a"}
    top = {"harness", "proof"}
    text = ("`harness/seal.py`, `harness/old.py`, `proof/fixtures/rw-*`, `proof/fixtures/cond-*`, legs/<leg>/x, "
            "../shared/design.md, `harness.seal.append_jsonl`, `harness.gone.X`")
    names = named_paths(text, top)
    assert names == {"harness/seal.py", "harness/old.py", "proof/fixtures/rw-*", "proof/fixtures/cond-*"}
    assert sorted(n for n in names if not exists(n, files, folders)) == ["harness/old.py", "proof/fixtures/cond-*"]
    assert named_modules(text, files, folders) == ["harness.gone"]


def test_the_readme_is_for_users():
    """At most 300 lines, the two commands as its first code block, no dated figures (they live in
    docs/benchmarks.md)."""
    text = README.read_text("utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md has {len(text.splitlines())} lines"
    block = re.search(r"^```(?:bash|sh)?\n(.*?)^```", text, flags=re.M | re.S)
    assert block and block.start() == text.index("```"), "README.md's first code block was not found"
    assert [line for line in block.group(1).splitlines() if line.strip()] == README_COMMANDS
    dated = re.findall(r"\b20\d\d-\d\d-\d\d\b", text)
    assert not dated, f"dated figures belong in docs/benchmarks.md, not the README: {dated}"
