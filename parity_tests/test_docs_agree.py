"""The documents agree: the README's results table quotes its studies, and every path they cite exists."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
NUMBER = r"[+−-]?\d[\d,]*(?:\.\d+)?(?:e[+−-]?\d{1,3})?%?(?![\w])"
NOT_YET_WRITTEN = {"experiments/results/bench/gpu"}  # the device check's output, written when a GPU runs it


def results_rows():
    """``[(answer, headline, study README)]`` of the README's "Results at a glance" table."""
    section = README.read_text().split("## Results at a glance", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        link = re.search(r"\]\(([^)]+)\)", cells[-1]) if len(cells) == 4 else None
        if link:
            rows.append((cells[1], cells[2], ROOT / link.group(1)))
    return rows


def value(text):
    """``(value, half a unit of its last digit)`` of a figure as written (``−0.72%``, ``1.9e-5``, ``8,700``)."""
    text = text.replace("−", "-").replace(",", "").rstrip("%")
    mantissa, _, exponent = text.partition("e")
    decimals = len(mantissa.partition(".")[2])
    return float(text), 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def quoted(figure, numbers):
    """Whether one of ``numbers`` (the source's figures) rounds to ``figure``."""
    target, half = value(figure)
    return any(abs(value(number)[0] - target) <= half * (1 + 1e-9) for number in numbers)


def figures(text):
    """The figures of ``text``, leaving out digits inside names and hashes (``S3``, ``c089602``; ``O(24)``
    gives 24)."""
    return re.findall(rf"(?<![\w.]){NUMBER}", text)


@pytest.mark.parametrize("answer, headline, source", results_rows(), ids=lambda x: str(x)[:30])
def test_every_figure_of_the_results_table_is_in_the_study_it_cites(answer, headline, source):
    """Each "mean ± half-width" of a headline is a row of one of the study's tables, rounded; every
    other figure of the row is somewhere in the study's README."""
    text = source.read_text()
    tables = "\n".join(line for line in text.splitlines() if line.startswith("|"))
    pairs = re.findall(rf"({NUMBER}) ± ({NUMBER})", tables)
    for mean, half in re.findall(rf"({NUMBER}) ± ({NUMBER})", headline):
        assert any(quoted(mean, [a]) and quoted(half, [b]) for a, b in pairs), (mean, half, source)
    numbers = figures(text)
    missing = [figure for figure in figures(f"{answer} {headline}") if not quoted(figure, numbers)]
    assert not missing, (missing, source)


def test_the_results_tables_best_group_arm_is_the_closest_to_the_lstm():
    """Claim 1's headline: the group arm of the smallest seed-paired gap to the LSTM (claims.json)."""
    claims = json.loads((ROOT / "experiments/results/charlm_v2/claims.json").read_text())["tinyshakespeare"]
    gaps = [c["windowed"] for c in claims["comparisons"]
            if c["claim"].startswith("1.") and c["comparison"].endswith(" − lstm")]
    best = min(gaps, key=lambda gap: gap["difference"])
    (headline,) = [h for _, h, _ in results_rows() if "behind the LSTM (Tiny Shakespeare)" in h]
    assert f"+{best['difference']:.2f} ± {best['half_width']:.2f}" in headline


def test_a_figure_is_quoted_only_where_the_source_rounds_to_it():
    assert quoted("+0.43", ["+0.429"]) and not quoted("+0.45", ["+0.429"])
    assert quoted("−0.72%", ["-0.72%"]) and quoted("1.9e-5", ["1.94e-5"]) and not quoted("1.9e-5", ["2.0e-5"])
    assert figures("S3 and O(24) at 0.20 / 0.29, T = 100") == ["24", "0.20", "0.29", "100"]


def cited_paths():
    """``(document, path)``: every markdown link of the READMEs and docs (relative to the document)
    and every ``experiments/results/...`` path they name (relative to the root; ``{a,b}`` expanded)."""
    def expand(path):
        braces = re.search(r"\{([^{}]*)\}", path)
        return [path] if braces is None else [
            full for choice in braces.group(1).split(",")
            for full in expand(path[:braces.start()] + choice + path[braces.end():])]

    documents = [README, *(ROOT / "experiments").rglob("README.md"), *(ROOT / "docs").rglob("*.md")]
    for document in documents:
        text = document.read_text()
        for link in re.findall(r"\]\(([^)#\s]+)", text):
            if not link.startswith(("http://", "https://")):
                yield document, document.parent / link
        for named in re.findall(r"experiments/results/[\w./{},*<>-]*", text):
            for path in expand(named.rstrip(".,")):
                if not re.search(r"[*<>]", path) and path.rstrip("/") not in NOT_YET_WRITTEN:
                    yield document, ROOT / path


def test_every_path_the_documents_cite_exists():
    missing = [f"{document.relative_to(ROOT)}: {path}" for document, path in cited_paths() if not path.exists()]
    assert not missing, missing
