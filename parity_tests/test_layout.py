"""The layout of ``experiments/``: a small library beside one folder per study.

Every results folder but the benchmarks' has its study folder with a README; the library has at
most 12 top-level modules; no study imports another; module docstrings stay short; code says what
things are, not which issue or session made them.
"""

import ast
import re
from pathlib import Path

import pytest

from parity_tests.test_imports import imported_names, project_modules

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
STUDIES = EXPERIMENTS / "studies"
CODE_TREES = ("reference", "manifold_impl", "parity_tests", "experiments")
HISTORY = re.compile(r"(issue|session)s?\s+[0-9]+|finding\s+[0-9]+|\bissue:"
                     r"|\b(since|before)\s+(commit\s+|revision\s+)?(?=[0-9]{0,6}[a-f])[0-9a-f]{7,40}\b",
                     re.IGNORECASE)  # across a line break too; a figure may name the revision that measured it


def test_every_results_folder_has_its_study_folder_with_a_readme():
    results = {p.name for p in (EXPERIMENTS / "results").iterdir() if p.is_dir()} - {"bench"}
    assert results
    missing = sorted(name for name in results if not (STUDIES / name / "README.md").is_file())
    assert not missing, f"results folders without experiments/studies/<name>/README.md: {missing}"


def test_the_library_has_at_most_twelve_top_level_modules():
    modules = sorted(p.stem for p in EXPERIMENTS.glob("*.py") if p.stem != "__init__")
    assert len(modules) <= 12, modules


def test_no_study_imports_another():
    crossings = []
    for module, path in project_modules().items():
        parts = module.split(".")
        if parts[:2] != ["experiments", "studies"] or len(parts) < 3:
            continue
        for name in imported_names(module, path):
            other = name.split(".")
            if other[:2] == ["experiments", "studies"] and len(other) > 2 and other[2] != parts[2]:
                crossings.append(f"{module} imports {name}")
    assert not crossings, crossings


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_docstrings_are_short(path):
    docstring = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)), clean=False)
    assert docstring is None or len(docstring.splitlines()) <= 15


def test_the_history_pattern_catches_stories_not_figures():
    stories = ["(issue: foundation, item 6)", "see issue 12", "since bb020d3 the backward", "before commit 1539ad0",
               "in session\n3", "finding 4"]
    figures = ["measured at commit 1539ad0", "since 2000000 steps", "before the embedding floor", "the issue is"]
    assert [bool(HISTORY.search(text)) for text in stories + figures] == [True] * len(stories) + [False] * len(figures)


def test_code_names_no_issue_session_or_finding():
    hits = []
    for tree in CODE_TREES:
        for path in (ROOT / tree).rglob("*"):
            if not path.is_file() or "results" in path.relative_to(ROOT).parts or path.suffix in (".png", ".pt"):
                continue
            if path.name == "test_layout.py":  # the pattern itself
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            hits += [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
                     for match in HISTORY.finditer(text)]
    assert not hits, hits
