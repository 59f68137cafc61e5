"""docs/architecture.md is a reference that matches the tree: every repository path it names exists (relative to the
repository root or to ``embodied/``, as the page writes them), and every ``path.py:name`` it names is defined there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
# Where a path the page names may start: the repository's folders and the engine package's.
BASES = (ROOT, ROOT / "embodied")


def named_paths() -> list[str]:
    """Code spans that are repository paths: a file or folder whose first part is a folder of the repository (or of
    ``embodied/``); the layouts of data folders the page describes (``meta/info.json``, ``replay/rank_K/``) are not."""
    spans = set(re.findall(r"`([\w./-]+(?:\.(?:py|yaml|md|json)|/)(?::\w+)?)`", PAGE.read_text()))
    found = []
    for span in sorted(spans):
        path = span.split(":")[0]
        first = path.split("/")[0]
        if "/" in path and any((base / first).is_dir() for base in BASES) and first not in ("checkpoints", "replay",
                                                                                              "policy", "meta"):
            found.append(span)
    return found


def resolve(path: str) -> Path | None:
    return next((base / path for base in BASES if (base / path).exists()), None)


def test_every_path_the_page_names_exists():
    paths = named_paths()
    assert len(paths) > 100  # the scan sees the page's paths
    missing = [p for p in paths if resolve(p.split(":")[0]) is None]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_path_and_name_pair_is_defined_there():
    pairs = [p for p in named_paths() if ":" in p and p.split(":")[0].endswith(".py")]
    assert len(pairs) >= 5  # the scan sees them
    for pair in pairs:
        path, name = pair.split(":")
        tree = ast.parse(resolve(path).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
        defined |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        assert name in defined, f"docs/architecture.md names {pair}, which {path} does not define"
