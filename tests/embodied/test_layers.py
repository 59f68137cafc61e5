"""The layers of the code: no module imports one of a layer above its own.

Every module under ``embodied/``, ``envs/`` and ``policies/`` belongs to one component (``embodied.data``,
``embodied.workers``, ``envs``...), and each component to one layer of ``LAYERS``. A module may import
its own layer and those below; an import that points up a layer fails the test, naming both modules.
Imports inside functions and under ``TYPE_CHECKING`` count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("embodied", "envs", "policies")
ALIASES = {"embodied.envs": "envs", "embodied.policies": "policies"}  # the same packages, as installed

# Lowest first; declared here only. docs/architecture.md ("Layers") draws the same picture.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation: types, registries, files", ["embodied", "embodied.types", "embodied.registry", "embodied.atomic",
                                              "embodied.numerics"]),
    ("contracts: the policy interface, configs", ["embodied.policy", "embodied.policy_config",
                                                  "embodied.config", "embodied.trust", "embodied.stop"]),
    ("components: simulators, policies, datasets, algorithms, transport, files of a run",
     ["envs", "policies", "embodied.data", "embodied.algorithms", "embodied.channels", "embodied.placement",
      "embodied.checkpoint", "embodied.logger", "embodied.wandb_process", "embodied.plot", "embodied.video", "embodied.eval_plan",
      "embodied.env_catalog"]),
    ("env machinery: building and checking envs", ["embodied.env_factory", "embodied.check_env",
                                                   "embodied.preflight"]),
    ("workers", ["embodied.workers"]),
    ("runs: training, resume, eval, SFT, collection, benchmarks",
     ["embodied.evaluation", "embodied.runner", "embodied.async_runner", "embodied.resume", "embodied.sft",
      "embodied.collect", "embodied.bench"]),
    ("entry point", ["embodied.cli"]),
]
LAYER_OF = {component: i for i, (_, components) in enumerate(LAYERS) for component in components}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def component(module: str) -> str:
    """The component a module belongs to: ``envs``, ``policies``, ``embodied`` itself or ``embodied.<name>``."""
    for alias, real in ALIASES.items():
        if module == alias or module.startswith(alias + "."):
            module = real + module[len(alias):]
    parts = module.split(".")
    return parts[0] if parts[0] != "embodied" or len(parts) == 1 else ".".join(parts[:2])


def imports(path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(module imported, line) for every import of ours in the file, at any depth, relative ones resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:  # ``from embodied import data`` imports the module embodied.data
                full = f"{base}.{alias.name}"
                found.append((full if full in known else base, node.lineno))
    return [(m, line) for m, line in found if m.split(".")[0] in PACKAGES]


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_no_module_imports_one_of_a_layer_above():
    known = {module_name(p) for p in sources()} | set(ALIASES)
    undeclared, upward = set(), []
    for path in sources():
        mine = component(module_name(path))
        if mine not in LAYER_OF:
            undeclared.add(mine)
            continue
        for imported, line in imports(path, known):
            theirs = component(imported)
            if theirs not in LAYER_OF:
                undeclared.add(theirs)
            elif LAYER_OF[theirs] > LAYER_OF[mine]:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {module_name(path)} ({LAYERS[LAYER_OF[mine]][0]}) "
                              f"imports {imported} ({LAYERS[LAYER_OF[theirs]][0]})")
    assert not undeclared, f"components with no layer in LAYERS (tests/embodied/test_layers.py): {sorted(undeclared)}"
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_every_declared_component_exists():
    found = {component(module_name(p)) for p in sources()}
    assert sorted(set(LAYER_OF) - found) == []


def test_the_guard_sees_an_upward_import(tmp_path, monkeypatch):
    """A module of embodied.data that imports the worker layer, as embodied/data/collect.py once did, is found."""
    fake = ROOT / "embodied" / "data" / "_layer_probe.py"
    monkeypatch.setattr(f"{__name__}.sources", lambda: [fake])
    fake_text = "def f():\n    from embodied.workers.group import start_env_group\n"
    original = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: fake_text if self == fake else original(self, *a, **k))
    try:
        test_no_module_imports_one_of_a_layer_above()
    except AssertionError as exc:
        assert "embodied/data/_layer_probe.py:2: embodied.data._layer_probe (components" in str(exc)
        assert "imports embodied.workers.group (workers)" in str(exc)
    else:
        raise AssertionError("the upward import was not seen")
