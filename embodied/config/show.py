"""A config as a person reads it: every field with its value, where the value came from and the field's doc
(``embodied config show RECIPE``), and the short form a run prints at its start (only what differs from the
defaults). Torch-free."""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from embodied.config.loader import apply_overrides, load_config, read_yaml
from embodied.config.schema import Config

Source = Literal["default", "recipe", "override"]
_FIELD = re.compile(r"^\s+(\w+)\s*:[^=#]*(?:=[^#]*)?(?:#\s*(.*))?$")


@dataclass(frozen=True)
class Row:
    """One field of a config: its dotted path, value, where the value came from and its doc."""

    path: str
    value: Any
    source: Source
    doc: str


def field_docs(cls: type) -> dict[str, str]:
    """Each field's doc as the source gives it: the comment on its line, else the comment lines just above it
    (a subclass's over its bases')."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        above: list[str] = []
        for line in lines[1:]:
            text = line.strip()
            if text.startswith("#"):
                above.append(text.lstrip("# "))
                continue
            match = _FIELD.match(line) if line.startswith("    ") and not line.startswith("     ") else None
            if match and not text.startswith(("def ", "@", "return")):
                doc = (match[2] or " ".join(above)).strip()
                if doc:
                    docs[match[1]] = doc
            above = []
    return docs


def _walk(obj: Any, prefix: str) -> list[tuple[str, Any, str]]:
    """(path, value, doc) of every leaf field under dataclass ``obj``; nested dataclasses are walked into."""
    out = []
    docs = field_docs(type(obj))
    for f in dataclasses.fields(obj):
        value, path = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += _walk(value, f"{path}.")
        else:
            out.append((path, value, docs.get(f.name, "")))
    return out


def _given(raw: dict[str, Any], path: str) -> bool:
    node: Any = raw
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def rows(recipe: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> list[Row]:
    """Every field of the config ``recipe`` and ``overrides`` make (validated, as a run would load it)."""
    cfg = load_config(recipe, overrides)
    raw = read_yaml(Path(recipe)) if recipe is not None else {}
    overridden = apply_overrides({}, overrides)
    out = []
    for path, value, doc in _walk(cfg, ""):
        source: Source = ("override" if _given(overridden, path) else "recipe" if _given(raw, path) else "default")
        out.append(Row(path, value, source, doc))
    return out


def show(recipe: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> str:
    """The table ``embodied config show`` prints: one line a field, grouped by section."""
    lines, section = [], None
    for r in rows(recipe, overrides):
        head = r.path.split(".")[0]
        if head != section:
            section = head
            lines.append(f"{head}:")
        value = repr(r.value) if isinstance(r.value, str) else r.value
        doc = f"  # {r.doc}" if r.doc else ""
        lines.append(f"  {r.path.partition('.')[2]} = {value}  [{r.source}]{doc}")
    return "\n".join(lines)


def differences(cfg: Config) -> list[str]:
    """``section.field=value`` for each field whose value differs from its class's default (what a run prints at
    its start): the policy's and the algorithm's against their own registered classes' defaults."""
    out, defaults = [], {}
    for path, value, _ in _walk(cfg, ""):
        owner, name = _owner(cfg, path)
        cls = type(owner)
        if cls not in defaults:
            try:
                defaults[cls] = cls()
            except TypeError:  # a section without defaults for every field: show all of it
                defaults[cls] = None
        default = getattr(defaults[cls], name) if defaults[cls] is not None else object()
        if value != default:
            out.append(f"{path}={value}")
    return out


def _owner(cfg: Config, path: str) -> tuple[Any, str]:
    *parents, name = path.split(".")
    obj: Any = cfg
    for part in parents:
        obj = getattr(obj, part)
    return obj, name
