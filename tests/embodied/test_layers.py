"""The layers of the code: no module imports one of a layer above its own, and no imports go in a circle.

Every module under ``embodied/``, ``envs/`` and ``policies/`` belongs to one component (``embodied.data``,
``embodied.workers``, ``envs``...), and each component to one layer of ``LAYERS``. A module may import
its own layer and those below; an import that points up a layer fails the test, naming both modules.
Within a layer, neither modules nor components may import each other in a circle: the test names each
circle as the path of imports that closes it. Imports inside functions and under ``TYPE_CHECKING`` count
too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from embodied.layers import LAYERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("embodied", "envs", "policies")
ALIASES = {"embodied.envs": "envs", "embodied.policies": "policies"}  # the same packages, as installed

# Declared once, in embodied/layers.py (lowest first); docs/architecture.md ("Layers") draws the same picture.
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


def canonical(module: str, modules: set[str]) -> str | None:
    """The module of ours that an import names (installed aliases resolved, a name imported from a module
    trimmed to that module); None for a module not under our packages."""
    for alias, real in ALIASES.items():
        if module == alias or module.startswith(alias + "."):
            module = real + module[len(alias):]
    while module not in modules and "." in module:
        module = module.rpartition(".")[0]
    return module if module in modules else None


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, at any depth (itself left out)."""
    modules = {module_name(p) for p in paths}
    known = modules | set(ALIASES)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in paths:
        me = module_name(path)
        graph[me] |= {t for imported, _ in imports(path, known) if (t := canonical(imported, modules)) not in (None, me)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of ``graph``, one per group of nodes that reach each other (its strongly connected
    components of two or more), each as a path from its smallest node back to it: ``[a, b, c, a]``."""
    found, done = [], set()
    for start in sorted(graph):
        if start in done:
            continue
        group = reachable(graph, start) & {n for n in graph if start in reachable(graph, n)}
        done |= group
        if len(group) > 1:
            found.append(shortest_path_back(graph, start, group))
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """``start`` and every node its arrows lead to."""
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def shortest_path_back(graph: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """The shortest path of arrows inside ``group`` from ``start`` back to itself (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, set()) & group):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is in a circle but no path leads back to it")


def component_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows between components that the modules' imports draw (a component's own imports left out)."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = component(module)
        out.setdefault(mine, set()).update(component(t) for t in targets if component(t) != mine)
    return out


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
    assert not undeclared, f"components with no layer in LAYERS (embodied/layers.py): {sorted(undeclared)}"
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
        assert "imports embodied.workers.group (workers:" in str(exc)
    else:
        raise AssertionError("the upward import was not seen")


def test_no_imports_go_in_a_circle():
    graph = import_graph(sources())
    circles = [("modules", c) for c in cycles(graph)] + [("components", c) for c in cycles(component_graph(graph))]
    assert not circles, "imports that go in a circle:\n" + "\n".join(f"{kind}: {' -> '.join(c)}" for kind, c in circles)


def test_the_cycle_check_names_each_circle_of_a_synthetic_graph():
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a", "d"}, "d": set(), "e": {"a", "f"}, "f": {"e"}, "g": {"d"}}
    assert cycles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []  # a chain is not a circle
    assert cycles(component_graph({"embodied.x.a": {"embodied.y.b"}, "embodied.y.b": {"embodied.x.c"},
                                   "embodied.x.c": set()})) == [["embodied.x", "embodied.y", "embodied.x"]]


def test_the_cycle_check_sees_the_channel_placement_circle_put_back(monkeypatch):
    """The circle issue 41 removed: the Ray channel's mailbox reading its memory through ``embodied.backends``,
    which itself builds on the channels (one component layer, so the layer check alone did not see it)."""
    probe = ROOT / "embodied" / "channels" / "ray_channel.py"
    original = Path.read_text
    text = original(probe) + "\n\ndef _probe():\n    from embodied.backends import process_rss_mib\n"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text if self == probe else original(self, *a, **k))
    with pytest.raises(AssertionError) as failure:
        test_no_imports_go_in_a_circle()
    assert "components: embodied.backends -> embodied.channels -> embodied.backends" in str(failure.value)
    assert "modules: embodied.backends -> embodied.backends.ray_backend -> embodied.channels.ray_channel -> " in str(failure.value)
