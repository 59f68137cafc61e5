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
    # The kind of action head the built policy has (a Gaussian, a tanh-squashed Gaussian, a flow, ...), and the
    # registered types that are this type with another head (``with_head``): an algorithm that trains a head of its
    # own (``AlgorithmConfig.policy_head``) builds that variant from this config's fields.
    head: ClassVar[str] = ""
    heads: ClassVar[dict[str, str]] = {}

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

    def with_head(self, kind: str, algorithm: str) -> PolicyConfig:
        """This policy with the action head ``kind`` that ``algorithm`` trains: itself when it has that head, else
        its registered variant (``heads``) with the fields the two share; ``ValueError`` when it has no such
        variant, or sets a field the variant lacks to other than its default (refused, never ignored)."""
        if self.head == kind:
            return self
        if kind not in self.heads:
            raise ValueError(f"policy.type: algorithm.name={algorithm} trains a {kind} action head, which "
                             f"policy.type={self.type} has no variant with")
        variant = policy_config_class(self.heads[kind])
        theirs = {f.name for f in dataclasses.fields(variant) if f.init} - {"type"}
        dropped = [f.name for f in dataclasses.fields(self)
                   if f.init and f.name not in theirs and f.name != "type" and getattr(self, f.name) != _default(f)]
        if dropped:
            raise ValueError(f"policy.{dropped[0]}: algorithm.name={algorithm} trains policy.type={self.type} with a "
                             f"{kind} head ({variant.type}), which has no such field; leave it out")
        return variant(**{name: getattr(self, name) for name in theirs if hasattr(self, name)})

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
