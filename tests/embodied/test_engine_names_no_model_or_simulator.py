"""The engine names no model and no simulator, as it names no algorithm (``test_engine_names_no_algorithm``): no
``.py`` under ``embodied/`` outside ``embodied/algorithms/`` holds a registered policy type or env id as a string
(whole, compared against, or inside an f-string), or imports the module a policy or a task is registered from. The
default recipe's policy and task come from the registries' packages (``embodied.policies:DEFAULT_TYPE``,
``embodied.envs:DEFAULT_ID``), what a policy or env offers from its class. Generic env machinery (the batched and
chunked env protocols, the gymnasium adapter every gymnasium id goes through, the experts' registry) is not a
simulator.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
from pathlib import Path

from tests.embodied.test_engine_names_no_algorithm import ROOT, engine_files

GENERIC = {"embodied.envs.adapters.gymnasium_env"}  # any gymnasium id: the engine's own adapter


def registered() -> tuple[set[str], set[str]]:
    """The names the installed packages declare (policy types, env ids, env sets: entry points, not what a test
    registered at run time) and the modules they are declared in."""
    names, modules = set(), set()
    for group in ("embodied.policies", "embodied.envs", "embodied.env_sets"):
        for ep in importlib.metadata.entry_points(group=group):
            names.add(ep.name)
            modules.add(ep.value.split(":")[0])
    return names, modules - GENERIC


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def hits(path: Path, names: set[str], modules: set[str], root: Path = ROOT) -> list[str]:
    where, tree = path.relative_to(root), ast.parse(path.read_text(), str(path))
    docs, found = _docstrings(tree), []
    words = re.compile(rf"(?<![\w.-])({'|'.join(re.escape(n) for n in sorted(names, key=len, reverse=True))})(?![\w-])")
    compared = {id(c) for node in ast.walk(tree) if isinstance(node, ast.Compare)
                for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)}
    formatted = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                 for v in node.values if isinstance(v, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            if text in names or ((id(node) in compared or id(node) in formatted) and words.search(text)):
                found.append(f"{where}:{node.lineno}: string {text[:60]!r}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if any(node.module == m or node.module.startswith(m + ".") or m.startswith(node.module + ".")
                   and node.module.count(".") > 1 for m in modules):
                found.append(f"{where}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if a.name in modules]
    return found


def test_the_registries_are_read_and_the_scan_catches_what_it_must(tmp_path):
    names, modules = registered()
    assert {"mlp", "cnn", "Reach-v0", "PickColor-v0"} <= names and "embodied.envs.reach" in modules
    bad = tmp_path / "bad.py"
    bad.write_text('"""Docs may say Reach-v0."""\nfrom embodied.envs.reach import ReachEnv\n'
                   'if cfg.policy.type == "cnn":\n    x = f"{a} on PickColor-v0"\n'
                   'ok = ["cnn_features", "a help text naming Reach-v0 as an example", "MLP"]\n')
    found = [h.split(": ", 1)[1] for h in hits(bad, names, modules, tmp_path)]
    assert found == ["from embodied.envs.reach import ...", "string 'cnn'", "string ' on PickColor-v0'"]


def test_engine_names_no_model_or_simulator():
    names, modules = registered()
    found = [hit for path in engine_files() for hit in hits(path, names, modules)]
    assert not found, ("the engine names a model or a simulator; read it from the registry or from what the class "
                       "offers:\n  " + "\n  ".join(found))
