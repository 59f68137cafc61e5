"""The engine names no algorithm: every ``.py`` under ``embodied/`` outside ``embodied/algorithms/`` is free of the
built-in algorithms' names as string constants (``"sac"``, a ``"sac/..."`` metric key, docstrings included) and of
imports from their modules (``embodied.algorithms.sac`` and the like). What an algorithm needs of the engine is a
declared capability of its config class (``embodied.config.algorithm``), and what trains is found through the
registry, so a new algorithm is a new module and a registry entry. No exemptions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "embodied"
NAMES = ("ppo", "grpo", "sac", "dsrl", "awac", "dagger", "crossq", "rloo", "iql")
# Metric keys also may not carry RLPD's name: demonstrations in replay are the engine's ("replay/demo_share").
METRIC = re.compile(rf"(?<![a-z0-9_])({'|'.join((*NAMES, 'rlpd'))})/", re.IGNORECASE)  # "sac/updates", not "isac/"
MODULE = re.compile(rf"^embodied\.algorithms\.({'|'.join(NAMES)})(\.|$)")  # not ppo_config: a config is torch-free


def engine_files() -> list[Path]:
    return sorted(p for p in ENGINE.rglob("*.py") if (ENGINE / "algorithms") not in p.parents)


def hits(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: what`` for each algorithm name the file's code holds (``file`` relative to ``root``)."""
    found = []
    where = path.relative_to(root)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.strip().lower() in NAMES or METRIC.search(text):
                found.append(f"{where}:{node.lineno}: string {text[:60]!r}")
        elif isinstance(node, ast.ImportFrom) and node.module and MODULE.match(node.module):
            found.append(f"{where}:{node.lineno}: from {node.module} import "
                         f"{', '.join(alias.name for alias in node.names)}")
        elif isinstance(node, ast.ImportFrom) and node.module == "embodied.algorithms":
            found += [f"{where}:{node.lineno}: from embodied.algorithms import {alias.name}"
                      for alias in node.names if alias.name in NAMES]
        elif isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno}: import {alias.name}" for alias in node.names
                      if MODULE.match(alias.name)]
    return found


def test_the_scan_sees_the_engine():
    files = engine_files()
    assert ENGINE / "runs" / "train.py" in files and ENGINE / "workers" / "replay_training.py" in files
    assert not any("algorithms" in p.relative_to(ENGINE).parts for p in files)


def test_the_scan_catches_names_metric_keys_and_learner_imports(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('from embodied.algorithms.sac import SACLearner\nimport embodied.algorithms.ppo\n'
                   'if cfg.algorithm.name == "GRPO":\n    metrics["dsrl/updates"] = 1\n'
                   'ok = ["isac/x", "grpo_score", "embodied.algorithms.ppo_config:PPOConfig"]\n')
    found = [h.split(": ", 1)[1] for h in hits(bad, tmp_path)]
    assert found == ["from embodied.algorithms.sac import SACLearner", "import embodied.algorithms.ppo",
                     "string 'GRPO'", "string 'dsrl/updates'"]


def test_engine_names_no_algorithm():
    found = [hit for path in engine_files() for hit in hits(path)]
    assert not found, ("the engine names an algorithm; declare a capability on its config class instead "
                       "(embodied.config.algorithm):\n  " + "\n  ".join(found))
