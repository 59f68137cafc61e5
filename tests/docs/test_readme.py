"""README.md stays short and true: its make targets and CLI commands exist, every recipe has a row, links resolve."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from embodied import cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Recipes whose row comes with their measured result (issue 55, item 4: DAgger); every other one has a row.
ROW_PENDING: set[str] = set()  # recipes whose row is still to come
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def code_lines(text: str) -> list[str]:
    blocks = re.findall(r"```(?:bash)?\n(.*?)```", text, flags=re.S)
    return [line for block in blocks for line in block.splitlines()]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 170


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.M))
    used = {m for line in code_lines(README.read_text()) for m in re.findall(r"^make ([\w-]+)", line)}
    used |= set(re.findall(r"`make ([\w-]+)", README.read_text()))
    assert {"train", "test", "test-fast"} <= used
    assert used <= targets, used - targets


def help_of(*command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        cli.main([*command, "--help"])
    assert exit_.value.code == 0, command
    return out.getvalue()


def test_cli_block_names_every_command_with_real_flags():
    lines = [line for line in code_lines(README.read_text()) if line.startswith("embodied ")]
    named = set()
    for line in lines:
        words = line.split("#")[0].split()
        command = words[1:3] if words[1] == "data" else words[1:2]
        named.add(" ".join(command))
        text = help_of(*command)
        for flag in re.findall(r"(--[\w-]+)", line.split("#")[0]):
            assert flag in text, (line, flag)
    top = help_of()
    listed = set(re.search(r"\{([\w,-]+)\}", top).group(1).split(","))
    assert {c.split()[0] for c in named} == listed
    assert "data info" in named


def test_every_recipe_has_a_row():
    rows = set(re.findall(r"^\| \[\w+\]\(configs/([\w.]+\.yaml)\)", README.read_text(), flags=re.M))
    recipes = {p.name for p in (ROOT / "configs").glob("*.yaml")}
    assert rows <= recipes, rows - recipes
    assert recipes - ROW_PENDING <= rows, (recipes - ROW_PENDING) - rows


@pytest.mark.parametrize("page", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: {target}"


def test_every_registered_algorithm_and_policy_is_named():
    """The README names every ``algorithm.name`` and ``policy.type`` the installed packages register."""
    import importlib.metadata

    text = README.read_text()
    for group in ("embodied.algorithms", "embodied.policies"):
        missing = [ep.name for ep in importlib.metadata.entry_points(group=group) if f"`{ep.name}`" not in text]
        assert not missing, f"README.md does not name {group} {missing}"
