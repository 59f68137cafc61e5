"""The docs stay readable in an evening: each guide (``docs/**/*.md`` outside ``docs/results/``) is under 400 lines,
``docs/architecture.md`` under 600, all guides together under 3,000; measured studies live in ``docs/results/``.
Every relative markdown link in ``README.md`` and ``docs/**/*.md`` points at a file that exists (and, for a
markdown page, at a heading it has)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.test_readme import anchors  # GitHub's anchors of a page's headings, as README's links use them

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def guides() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if RESULTS not in p.parents)


def length(page: Path) -> int:
    return len(page.read_text().splitlines())


def test_the_scan_sees_the_guides_and_the_results():
    names = {p.relative_to(DOCS).as_posix() for p in guides()}
    assert {"architecture.md", "extending.md", "running.md", "sft_then_rl.md"} <= names
    assert not any(name.startswith("results/") for name in names)
    assert (RESULTS / "algorithms.md").exists()


@pytest.mark.parametrize("page", guides(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_each_guide_is_short(page):
    limit = 600 if page == DOCS / "architecture.md" else 400
    assert length(page) < limit, f"{page.relative_to(ROOT)} has {length(page)} lines (limit {limit})"


def test_all_guides_together_are_short():
    total = sum(length(p) for p in guides())
    assert total < 3000, f"the guides outside docs/results/ have {total} lines together (limit 3,000)"


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_files_that_exist(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to what does not exist: {broken}"
