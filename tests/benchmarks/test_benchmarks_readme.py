"""``benchmarks/README.md`` is the one index of the benchmarks: it names every one, and every path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "benchmarks" / "README.md"
# A repository path the README names: benchmarks/... or docs/... (not inside another path, e.g. runs/benchmarks/).
PATH = re.compile(r"(?<![\w./-])((?:benchmarks|docs)/[\w./-]*)")
# A relative markdown link, resolved against benchmarks/.
LINK = re.compile(r"\]\(([^)#\s:]+)\)")


def test_readme_names_every_benchmark_and_only_paths_that_exist():
    text = README.read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert scripts, "no benchmarks/*.py found"
    wanted = [f"benchmarks/{name}" for name in scripts]
    wanted += ["benchmarks/parity/", "benchmarks/vla_bench/", "embodied bench", "benchmarks/parity/README.md"]
    missing = [name for name in wanted if name not in text]
    assert not missing, f"benchmarks/README.md does not name {missing}"

    named = {m.rstrip(".,;:") for m in PATH.findall(text)}
    assert any(p.startswith("benchmarks/") for p in named)
    absent = sorted(p for p in named if not (ROOT / p).exists())
    assert not absent, f"benchmarks/README.md names paths that do not exist: {absent}"

    links = LINK.findall(text)
    broken = sorted(link for link in links if not (README.parent / link).exists())
    assert not broken, f"benchmarks/README.md links to files that do not exist: {broken}"
