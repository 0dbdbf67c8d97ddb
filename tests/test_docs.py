"""The docs name tests as the proof of their promises: every test they name exists."""

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))
# `tests/x.py::test_y`, `x.py::test_y` (under tests/reliability), or `…::test_y` (the last file).
REF = re.compile(r"`((?:tests/)?[\w/]*\.py|…)::(test_\w+?)(?:\[[^\]]*\])?(?:…)?`")


def functions_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def references(doc: Path) -> list[tuple[str, str, bool]]:
    """(file, name, is_prefix) for every test reference in `doc`, in order."""
    found, last = [], ""
    for m in REF.finditer(doc.read_text()):
        where, name = m.group(1), m.group(2)
        if where != "…":
            last = where if where.startswith("tests/") else f"tests/reliability/{where}"
        found.append((last, name, m.group(0).endswith("…`")))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_test_a_doc_names_exists(doc: Path):
    missing = []
    for file, name, prefix in references(doc):
        path = REPO / file
        names = functions_in(path) if path.exists() else set()
        ok = any(n.startswith(name) for n in names) if prefix else name in names
        if not ok:
            missing.append(f"{file}::{name}")
    assert not missing, f"{doc.name} names tests that do not exist: {missing}"


def test_the_reliability_page_names_tests():
    assert len(references(REPO / "docs" / "reliability.md")) >= 40


PAGES = [REPO / "README.md", REPO / "bench" / "README.md", *DOCS]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MODULE = re.compile(r"python -m ([\w.]*[a-z_])\b(?![\w.])")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_and_module_a_page_names_exists(page: Path):
    """A page's relative links and `python -m` commands name files and modules that exist: a
    README that names a file or command that no longer exists is a trap for a newcomer."""
    text = page.read_text()
    missing = [
        link
        for link in LINK.findall(text)
        if "://" not in link and not (page.parent / link).exists()
    ]
    for module in MODULE.findall(text):
        path = REPO / module.replace(".", "/")
        ours = module.split(".")[0] in ("bench", "backfill_assets")
        if ours and not (path.with_suffix(".py").exists() or (path / "__init__.py").exists()):
            missing.append(f"python -m {module}")
    assert not missing, f"{page.name} names what does not exist: {missing}"
