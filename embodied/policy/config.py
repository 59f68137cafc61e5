"""``PolicyConfig``, the base of every policy's configuration dataclass, ``PolicySpec`` (what the env tells a
policy), and the lookup of a configuration by name.

Apart from ``embodied.policy.base`` (the torch interface) so that loading a config imports no torch: the
CLI reads the config first and starts what can run beside torch's import (the wandb process).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from embodied.core.registry import POLICIES


@dataclass(frozen=True)
class PolicySpec:
    """What the env tells a policy at build time."""

    state_dim: int  # S, 0 when the obs mode has no states
    image_shape: tuple[int, ...] | None  # (H, W, 3) of main images, None without images
    action_dim: int  # A
    action_low: tuple[float, ...]  # per-dimension bounds of the env's action space
    action_high: tuple[float, ...]
    wrist_image_shape: tuple[int, ...] | None = None  # (H, W, 3) of wrist images, None without them


@dataclass
class PolicyConfig:
    """Fields every policy has. Subclasses add their own, each with a default and a doc line."""

    type: str = field(default_factory=lambda: default_policy_type())  # registered policy name (`embodied list policies`)
    action_chunk: int = 1  # C: actions emitted per inference, executed open-loop by the env
    init_from: str | None = None  # checkpoint (folder or run dir) whose policy weights training starts from, e.g. SFT's

    model_class: ClassVar[str] = ""  # "module:attr" of the Policy subclass built from this config
    # Fields that shape the weights (besides type and action_chunk): a checkpoint whose policy
    # differs in one of them cannot be loaded by policy.init_from, which says so up front.
    architecture_fields: ClassVar[tuple[str, ...]] = ()
    # "module:attr" of a callable (config, spec) -> ``embodied.policy.encoder.FeatureEncoder``: the policy's
    # perception apart from its heads, which an algorithm with an actor of its own puts its head on (SAC). Empty:
    # the policy offers none.
    encoder_class: ClassVar[str] = ""
    # Fields of the policy's own heads: an algorithm that puts its head on the encoder instead reads none of them,
    # and refuses one set to other than its default (never ignored).
    head_fields: ClassVar[tuple[str, ...]] = ()
    # Deprecated type names a recipe or a saved config may still give for this config, each with the field values
    # the old type implied where this config's defaults differ (read with a warning by the config loader).
    aliases: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def folder_defaults(cls, section: dict[str, Any]) -> dict[str, Any]:
        """Field values the model folder named in the YAML ``policy:`` section (``section``, raw) declares, used
        where the section leaves a field unset (a LeRobot folder's ``n_action_steps`` for ``action_chunk``, say);
        read without torch or weights, by the config loader. The default declares none."""
        return {}

    def required_observations(self) -> set[str]:
        """What the env must give: a subset of {"states", "images"} (checked against env.obs_mode up front)."""
        return set()

    def flow_noise(self) -> bool:
        """Whether the policy turns a given initial noise into actions by a flow's Euler loop (``steer``), so that
        ``algorithm.name=dsrl`` can steer it; the default has no such noise."""
        return False

    def head_sizes(self) -> list[int]:
        """Widths of the hidden layers the policy puts over its encoder's features, which a head built over the
        encoder by an algorithm takes too; [] by default."""
        return []

    def own_head_problems(self, algorithm: str) -> list[str]:
        """The ``head_fields`` set to other than their defaults, for an ``algorithm`` that builds its own head."""
        return [f"policy.{f.name}: algorithm.name={algorithm} puts its own head on policy.type={self.type}'s encoder, "
                f"which does not read this field of the policy's own heads; leave it out"
                for f in dataclasses.fields(self) if f.name in type(self).head_fields and getattr(self, f.name) != _default(f)]

    def architecture(self) -> dict[str, Any]:
        """The ``architecture_fields`` and their values: what a checkpoint loaded by ``policy.init_from`` must
        match."""
        return {name: getattr(self, name) for name in type(self).architecture_fields}

    def architecture_default(self, name: str) -> Any:
        """Field ``name``'s default: what a checkpoint saved before the field existed had."""
        found = [f for f in dataclasses.fields(self) if f.name == name]
        return _default(found[0]) if found else None

    def validate(self) -> list[str]:
        """Problems only this policy type can see, each prefixed by its field path (``policy.x``).

        Called by the config loader before any worker starts; the default finds none.
        """
        return []

    def spec_problems(self, spec: PolicySpec) -> list[str]:
        """Problems between this policy and the env's spaces (``spec``) that need no model weights, at most a
        checkpoint's ``config.json``: dimensions above what the model takes, cameras, statistics of other sizes.

        A type that overrides it is checked against one env built in the driver before any worker starts
        (``embodied.env_runtime.preflight.check_policy_fits``); the default finds none and costs no env.
        """
        return []


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return f.default


def policy_config_class(name: str) -> type[PolicyConfig]:
    """The registered configuration dataclass for ``policy.type: name``."""
    cls = POLICIES.resolve(name)
    if not (isinstance(cls, type) and issubclass(cls, PolicyConfig)):
        raise TypeError(f"policy {name!r} resolves to {cls!r}, which is not a PolicyConfig subclass")
    return cls


DEFAULT_POLICY = "embodied.policies:DEFAULT_TYPE"  # the default recipe's policy type, which the engine does not name


def default_policy_type() -> str:
    """``policy.type`` when a config leaves it out."""
    from embodied.core.registry import load_entry_point

    return str(load_entry_point(DEFAULT_POLICY))
