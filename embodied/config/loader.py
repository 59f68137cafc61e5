"""YAML + ``key=value`` overrides -> a validated ``Config``.

    cfg = load_config("configs/reach_mlp_ppo.yaml", ["env.num_envs=16", "cluster.backend=ray"])

Every error names the field path (and the file), and all problems are reported at once, before
any worker starts. What types alone cannot catch is checked in ``validate.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from dataclasses import dataclass
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from embodied.config.schema import AlgorithmConfig, Config, algorithm_config_class, default_algorithm_name
from embodied.config.validate import validate
from embodied.core.registry import POLICIES, UnknownNameError
from embodied.policy.config import PolicyConfig, default_policy_type, policy_config_class


class ConfigError(ValueError):
    """A config problem; the message names the field path(s) and the source."""


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load a YAML recipe (or the defaults when ``path`` is None), apply overrides, validate."""
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        raw = read_yaml(Path(path))
    raw = apply_overrides(raw, overrides)
    notes: list[str] = []
    raw = move_fields(raw, notes)  # an old recipe (or override) keeps loading, told where each field went
    for note in notes:
        warnings.warn(f"{_blame(note, overrides, source)}: {note}; it was read there, write it there", FutureWarning,
                      stacklevel=2)
    try:
        cfg = from_dict(Config, raw, "")
    except ConfigError as exc:
        raise ConfigError(f"{_blame(str(exc), overrides, source)}: {exc}") from None
    problems = validate(cfg)
    if problems:
        raise ConfigError(f"{source}: invalid config:\n  " + "\n  ".join(problems))
    return cfg


def _blame(message: str, overrides: list[str] | tuple[str, ...], source: str) -> str:
    """The override that set the field a message names, else the YAML file."""
    for item in reversed(overrides):
        key = item.partition("=")[0].strip()
        if message.startswith(f"{key}:") or f"'{key}'" in message or message.startswith(f"{key}["):
            return f"override {item!r}"
    return source


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Rebuild a validated Config from ``to_dict`` output (e.g. stored in a checkpoint, maybe before a field moved or
    was renamed: ``saved_form``)."""
    cfg = from_dict(Config, saved_form(raw), "")
    problems = validate(cfg)
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))
    return cfg


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config (YAML/JSON-serializable)."""
    return dataclasses.asdict(cfg)


class _Loader(yaml.SafeLoader):
    """YAML 1.1 (PyYAML's) reads ``3e-4`` as a string; YAML 1.2 and people read it as a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def _mapping_without_duplicates(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    """A YAML mapping; a key given twice is an error (PyYAML would keep the last one silently)."""
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first given on line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def parse_yaml(text: Any) -> Any:
    """YAML with 1.2-style floats (``3e-4``), for recipes and override values alike."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        with path.open() as stream:  # a stream, so YAML's error marks name the file
            data = parse_yaml(stream)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def apply_overrides(raw: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``a.b.c=value`` pairs merged into a copy of ``raw``; values are parsed as YAML scalars/lists."""
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} must look like 'section.field=value'")
        try:
            value = parse_yaml(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: cannot parse value: {exc}") from None
        node = out
        parts = key.strip().split(".")
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:  # absent, or left null by the recipe: the override opens the section
                node[part] = {}
            child = node[part]
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {'.'.join(parts[: i + 1])} is not a section")
            node = child
        node[parts[-1]] = value
    return out


# -- typed conversion -------------------------------------------------------------------------


def from_dict(cls: type, data: Any, path: str) -> Any:
    """Build dataclass ``cls`` from ``data``, checking keys and types; ``path`` prefixes errors."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__} {data!r}")
    if cls is PolicyConfig:
        cls = _policy_class(data, path)
        data = {**cls.folder_defaults(data), **data}  # what the model folder says, where the YAML is silent
    elif cls is AlgorithmConfig:
        data = {"name": default_algorithm_name(), **data}  # the section names its algorithm, as the config says
        cls = _algorithm_class(data, path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise ConfigError(_unknown_field(cls, path, str(unknown[0]), list(fields), data.get("name")))
    kwargs = {name: _convert(hints[name], data.get(name, {}), _join(path, name)) for name in fields
              if name in data or dataclasses.is_dataclass(hints[name])}  # absent section: its defaults
    return cls(**kwargs)


def _policy_class(data: dict[str, Any], path: str) -> type[PolicyConfig]:
    name = data.get("type", default_policy_type())
    try:
        return policy_config_class(str(name))
    except (UnknownNameError, ImportError, TypeError) as exc:
        raise ConfigError(f"{_join(path, 'type')}: {exc}") from None


def _algorithm_class(data: dict[str, Any], path: str) -> type[AlgorithmConfig]:
    try:
        return algorithm_config_class(str(data["name"]))
    except (UnknownNameError, ImportError, TypeError) as exc:
        raise ConfigError(f"{_join(path, 'name')}: {exc}") from None


@dataclass(frozen=True)
class FieldChange:
    """A config field that moved or was renamed: an old recipe is told where it went, a saved config is read in
    today's form (``saved_form``). ``old`` and ``new`` are either dotted paths (a field moved to another section)
    or bare names (a field renamed in place, in every section whose class has ``new`` and not ``old``)."""

    old: str
    new: str
    since: int  # the checkpoint format (embodied.checkpoint.migrate.FORMAT_VERSION) whose saved configs hold ``new``
    why: str


# Every field change, in one table (a field that split off into an algorithm of its own: AlgorithmConfig.split_off).
FIELD_CHANGES = (
    FieldChange("actor.lr", "algorithm.lr", 4, "the optimizer's settings are the algorithm's"),
    FieldChange("actor.adam_eps", "algorithm.adam_eps", 3, "the optimizer's settings are the algorithm's"),
    FieldChange("actor.anneal_lr", "algorithm.anneal_lr", 3, "the optimizer's settings are the algorithm's"),
    FieldChange("actor.lr_warmup_iterations", "algorithm.lr_warmup_iterations", 3,
                "the optimizer's settings are the algorithm's"),
    FieldChange("policy.critic_hidden_sizes", "algorithm.critic_hidden_sizes", 3, "the critics are SAC's, not the "
                "policy's"),
    FieldChange("placement", "group_strategy", 3, "the strategy of a Ray placement group; 'placement' alone is "
                "cluster.placement: colocated or disaggregated"),
    FieldChange("actor_q", "policy_q", 3, "what the policy maximises over the critics; 'actor' is the training worker"),
    FieldChange("noise_actor_hidden_sizes", "noise_policy_hidden_sizes", 3, "the noise policy's layers; 'actor' is "
                "the training worker"),
    FieldChange("noise_critic_hidden_sizes", "critic_hidden_sizes", 3, "SAC's critics' widths, DSRL's among them"),
    *(FieldChange(f"policy.{name}", f"algorithm.{name}", 4, "a head the algorithm puts on the policy's encoder is "
                  "the algorithm's") for name in ("log_std_min", "log_std_max")),
    *(FieldChange(f"runner.{name}", f"runner.faults.{name}", 3, "what a run does when env workers fail is one "
                  "subsection") for name in ("max_worker_restarts", "restart_window", "max_total_restarts",
                                             "restart_backoff_s", "restart_backoff_max_s", "broken_env_iterations")),
)
MOVED = {c.old: c.new for c in FIELD_CHANGES if "." in c.old}  # section.field -> section[.subsection].field
RENAMED = {c.old: c for c in FIELD_CHANGES if "." not in c.old}  # field -> its change, within a section


def saved_form(raw: dict[str, Any], notes: list[str] | None = None) -> dict[str, Any]:
    """A config written before fields moved (``MOVED``), were renamed (``RENAMED``) or split off into an algorithm of
    their own (``AlgorithmConfig.split_off``) in today's form (a copy): a checkpoint's config, or an old recipe (whose
    loader is told each move, in ``notes``)."""
    out = move_fields(raw, notes)
    if isinstance(out.get("algorithm"), dict):
        _split_off(out["algorithm"])
    _rename(Config, out, "")
    return out


def move_fields(raw: dict[str, Any], notes: list[str] | None = None) -> dict[str, Any]:
    """``raw`` (a copy) with every field that moved to another section (``MOVED``) in its new place; each move
    is told in ``notes``."""
    out = copy.deepcopy(raw)
    for old, new in MOVED.items():
        *parents, key = old.split(".")
        section = _section(out, parents)
        if isinstance(section, dict) and key in section:
            value = section.pop(key)
            *to, to_key = new.split(".")
            target = _section(out, to, create=True)
            if isinstance(target, dict):
                target.setdefault(to_key, value)
                if notes is not None:
                    notes.append(f"{old}: moved to {new} ({next(c.why for c in FIELD_CHANGES if c.old == old)})")
    _policy_alias(out, notes)
    return out


def _policy_alias(out: dict[str, Any], notes: list[str] | None) -> None:
    """A deprecated ``policy.type`` (a registered config's ``PolicyConfig.aliases``) as that config's type, with the
    field values the old type implied, in place."""
    policy = out.get("policy")
    name = policy.get("type") if isinstance(policy, dict) else None
    if not isinstance(name, str) or name in POLICIES:
        return
    for registered in POLICIES.names(declared_order=True):
        try:
            cls = policy_config_class(registered)
        except (ImportError, TypeError, UnknownNameError):
            continue
        if name in cls.aliases:
            policy["type"] = registered
            for key, value in cls.aliases[name].items():
                policy.setdefault(key, copy.deepcopy(value))
            if notes is not None:
                notes.append(f"policy.type: {name} is deprecated, read as policy.type={registered} (an algorithm that "
                             f"trains a head of its own puts it on the policy's encoder)")
            return


def _section(data: dict[str, Any], path: list[str], create: bool = False) -> Any:
    """The nested dict at ``path`` (None where a part is missing or not a dict; ``create``: made where missing)."""
    node: Any = data
    for part in path:
        if create and isinstance(node, dict) and node.get(part) is None:
            node[part] = {}
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _split_off(section: dict[str, Any]) -> None:
    """A saved ``algorithm:`` section with a field its algorithm has since split off (``AlgorithmConfig.split_off``),
    in place: set (not null), the section is that algorithm's when its config extends the saved one's (every other
    field still fits; else ``from_dict`` refuses the field by name); null, the field goes (``to_dict`` saved every
    field)."""
    try:
        cls = _algorithm_class({"name": default_algorithm_name(), **section}, "algorithm")
    except ConfigError:
        return  # from_dict says what is wrong
    for key, name in cls.split_off.items():
        if key in section and section[key] is None:
            del section[key]
        elif key in section:
            try:
                if issubclass(_algorithm_class({"name": name}, "algorithm"), cls):
                    section["name"] = name
                    return
            except ConfigError:
                continue


def _rename(cls: type, data: Any, path: str) -> None:
    """``RENAMED`` fields of ``cls`` (its registered subclass for a policy or algorithm section) and of its sections,
    in place."""
    if not isinstance(data, dict):
        return
    try:
        if cls is PolicyConfig:
            cls = _policy_class(data, path)
        elif cls is AlgorithmConfig:
            cls = _algorithm_class({"name": default_algorithm_name(), **data}, path)
    except ConfigError:
        return  # from_dict says what is wrong
    fields = {f.name for f in dataclasses.fields(cls)}
    for old, change in RENAMED.items():
        if old in data and change.new in fields and old not in fields:
            data.setdefault(change.new, data.pop(old))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]) and f.name in data:
            _rename(hints[f.name], data[f.name], _join(path, f.name))


def _unknown_field(cls: type, path: str, key: str, fields: list[str], name: Any = None) -> str:
    """The error for a key ``cls`` has no field for: a moved field says where it went, an algorithm's section names
    the algorithm, and a near miss is suggested."""
    where = _join(path, key)
    close = difflib.get_close_matches(key, fields, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    change = RENAMED.get(key)
    if change is not None and change.new in fields:
        return f"{where}: renamed to {_join(path, change.new)} ({change.why})"
    split = getattr(cls, "split_off", {}).get(key)
    if split:
        return (f"{where}: not a field of algorithm {name!r} ({cls.__name__}) any more, it split off into algorithm "
                f"{split!r}; use algorithm.name: {split} (a null {key} was {name!r} without it: leave it out)")
    if where in MOVED:
        return (f"{where}: moved to {MOVED[where]}, the algorithm's section, where it takes effect (an algorithm "
                f"whose config has no such field refuses it)")
    if issubclass(cls, AlgorithmConfig):
        return f"{where}: not a field of algorithm {name!r} ({cls.__name__}); its fields: {', '.join(fields)}{hint}"
    return f"unknown field {where!r}{hint}; known fields of {path or 'the config'}: {', '.join(fields)}"


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: {value!r} matches none of {tp}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{path}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__} {value!r}")
        items = [_convert(args[0] if args else Any, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__} {value!r}")
        return dict(value)
    return _scalar(tp, value, path)


def _scalar(tp: Any, value: Any, path: str) -> Any:
    if tp is Any:
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (bool, str) and isinstance(value, tp):
        return value
    raise ConfigError(f"{path}: expected {getattr(tp, '__name__', tp)}, got {type(value).__name__} {value!r}")
