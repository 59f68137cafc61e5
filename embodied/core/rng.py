"""Each worker's own random stream, so that workers sharing a process draw as if they had one each.

Under ``cluster.backend: local`` every worker is a thread of one process, and torch has one global generator per
device for all of them: a rollout worker sampling actions and an actor whose learner builds a module lazily (its
init draws) would then take turns on one stream in whatever order the threads run, and two identical runs would
differ. So the rule is:

- **The actor owns the process's global generator** (``torch.manual_seed(experiment.seed)`` when it is built):
  module inits, dropout and whatever a learner draws without saying from what come from there, as in a
  single-process script.
- **A rollout worker draws from its own** ``RandomStream``: it acts inside ``drawing(stream)``, and policies draw
  their sampling noise through ``randn``/``randn_like``/``sample``/``randint`` below, which take the stream of
  the thread they run on (a ``ContextVar``: each thread sees its own) and fall back to the global generator when
  none is set (a policy used on its own, or the actor's learner).
- **Building under a fixed seed** (a worker's own module, DSRL's frozen policy) goes through ``seeded(seed)``:
  one process-wide lock, the global generator forked, seeded and restored, so two threads building at once
  neither race nor move the actor's stream.

A policy written for embodied draws through this module; one that calls ``dist.sample()`` or ``torch.randn``
directly still works, on the global generator (exact under Ray, where each worker is a process; under the local
backend its draws interleave with the actor's). docs/extending.md states the rule.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch.distributions import Categorical, Distribution, Independent, Normal

_STREAM: ContextVar[RandomStream | None] = ContextVar("embodied_random_stream", default=None)
_SEEDED = threading.RLock()  # re-entrant: a build under a seed may build another (a tiny model on first use)


class RandomStream:
    """One seed's generators, one per device drawn on (created at first use, each seeded with ``seed``)."""

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._generators: dict[str, torch.Generator] = {}

    def generator(self, device: torch.device | str | None = None) -> torch.Generator:
        """The generator for ``device`` (default: the CPU)."""
        key = _device_key(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=key).manual_seed(self.seed)
        return self._generators[key]

    def get_state(self) -> dict[str, torch.Tensor]:
        """Each device's generator state (for exact resume): ``{"cpu": ByteTensor, "cuda:0": ...}``."""
        return {key: g.get_state() for key, g in self._generators.items()}

    def set_state(self, state: dict[str, torch.Tensor] | torch.Tensor) -> None:
        """Restore ``get_state()``'s dict; a bare ByteTensor (checkpoints of before the streams: the process's
        CPU generator, which the rollout worker drew from) sets the CPU generator."""
        if isinstance(state, torch.Tensor):
            state = {"cpu": state}
        for key, value in state.items():
            self.generator(key).set_state(value)


def _device_key(device: torch.device | str | None) -> str:
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)


@contextmanager
def drawing(stream: RandomStream | None) -> Iterator[None]:
    """Draws made by this thread inside the block come from ``stream`` (None: the global generator)."""
    token = _STREAM.set(stream)
    try:
        yield
    finally:
        _STREAM.reset(token)


def active_stream() -> RandomStream | None:
    """The stream this thread draws from (None: the global generator)."""
    return _STREAM.get()


def current_generator(device: torch.device | str | None = None) -> torch.Generator | None:
    """The generator this thread draws from on ``device``: its stream's, or None (torch's global one)."""
    stream = _STREAM.get()
    return None if stream is None else stream.generator(device)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Global draws inside the block come from ``torch.manual_seed(seed)``; the global generator is restored
    after it, and one thread at a time runs such a block (building modules under a fixed seed)."""
    with _SEEDED, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def randn(shape: Sequence[int], device: torch.device | str | None = None,
          dtype: torch.dtype | None = None) -> torch.Tensor:
    """Standard normal noise of ``shape`` from this thread's stream (or the global generator)."""
    return torch.randn(tuple(shape), generator=current_generator(device), device=device, dtype=dtype)


def randn_like(like: torch.Tensor) -> torch.Tensor:
    return randn(like.shape, like.device, like.dtype)


def randint(high: int, shape: Sequence[int], device: torch.device | str | None = None) -> torch.Tensor:
    return torch.randint(high, tuple(shape), generator=current_generator(device), device=device)


def sample(dist: Distribution) -> torch.Tensor:
    """A draw of ``dist`` (a Normal, an Independent Normal or a Categorical) from this thread's stream; with no
    stream set, ``dist.sample()`` itself (so a policy used on its own draws from the global generator)."""
    if _STREAM.get() is None:
        return dist.sample()
    base = dist.base_dist if isinstance(dist, Independent) else dist
    with torch.no_grad():  # as dist.sample(): a draw, not a reparameterised sample
        return _draw(base)


def _draw(base: Distribution) -> torch.Tensor:
    if isinstance(base, Normal):
        return base.loc + base.scale * randn_like(base.loc)
    if isinstance(base, Categorical):
        probs = base.probs.reshape(-1, base.probs.shape[-1])
        drawn = torch.multinomial(probs, 1, generator=current_generator(probs.device))
        return drawn.reshape(base.probs.shape[:-1])
    raise TypeError(f"embodied.core.rng.sample: {type(base).__name__} is not drawn from a worker's stream (Normal, "
                    f"Categorical); draw it with randn/randint, or call dist.sample() on the global generator")
