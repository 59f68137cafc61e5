"""Ray actors with a mailbox: a ``RayChannel`` delivers into the worker's own process while it runs its calls.

``ray`` is imported lazily (inside the functions), so importing this module stays light: it is what every
process that receives a mailbox actor's handle loads.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from embodied.channels.ray_channel import _MAILBOX, MAILBOX_GROUP, _inbox


def mailbox_actor(cls: type, **options: Any) -> Any:
    """``ray.remote(**options)`` of ``cls`` with a ``_embodied_deliver`` method in its own concurrency
    group, so a ``RayChannel`` can hand it items while it runs (or waits in) its other methods; in the
    same group ``_embodied_rss_mib`` reports the process's memory (the runner logs it every iteration),
    ``_embodied_node_id`` its node, and the methods ``cls.concurrent_methods`` names run.

    A class importable by name travels as that name: the actor class Ray ships holds one forwarding
    method per public method of ``cls`` and builds ``cls`` inside the actor. Why: every process that
    receives an actor's handle (a producer that delivers into it, a channel's directory) loads the
    actor's class, and loading ``cls`` itself would import its module there (a rollout worker's
    imports torch, seconds in an env worker that never needs it). A class defined inside a function or in
    a script's ``__main__`` travels by value instead, as a subclass.
    """
    name = f"{cls.__module__}:{cls.__qualname__}"
    # A class of a script (__main__ here is Ray's worker there) or of a function's body: by value
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__ or _imported(name) is not cls:
        return _mailbox_subclass(cls, **options)
    concurrent = set(getattr(cls, "concurrent_methods", ()))
    body: dict[str, Any] = {"_embodied_class": name}
    for method in dir(cls):
        member = getattr(cls, method)
        if not method.startswith("_") and callable(member) and not isinstance(member, type):
            body[method] = _forward(method, concurrent=method in concurrent)
    mailbox = type(cls.__name__, (_Mailbox,), body)  # named as the worker: Ray's process title (ray::EnvWorker)
    mailbox.__qualname__ = cls.__qualname__
    return _remote(mailbox, options)


def _imported(name: str) -> Any:
    """The object ``module:qualname`` names (importing the module), or None."""
    module, _, qualname = name.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def _forward(method: str, concurrent: bool = False) -> Any:
    """An actor method that calls ``method`` of the worker the mailbox holds (``concurrent``: in the mailbox's
    concurrency group, beside the worker's own calls)."""
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._embodied_worker, method)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = method
    return _in_group(forward) if concurrent else forward


def _in_group(function: Any) -> Any:
    """``function`` as an actor method of the mailbox concurrency group: what ``@ray.method(concurrency_group=
    ...)`` does, without importing ``ray`` where this module is imported."""
    function.__ray_concurrency_group__ = MAILBOX_GROUP
    return function


class _Mailbox:
    """Base of the actor classes ``mailbox_actor`` makes of an importable worker class (``_embodied_class``):
    builds the worker in the actor and receives channel deliveries beside its calls."""

    _embodied_class = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import ray

        _MAILBOX["handle"] = ray.get_runtime_context().current_actor
        self._embodied_worker = _imported_class(self._embodied_class)(*args, **kwargs)

    @_in_group
    def _embodied_deliver(self, channel_id: str, key: str, sender: str, seq: int, item: Any) -> None:
        _inbox(channel_id, key).add(sender, seq, item)

    def _embodied_rss_mib(self) -> float | None:
        from embodied.core.process_memory import process_rss_mib

        return process_rss_mib()

    @_in_group
    def _embodied_node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def _imported_class(name: str) -> type:
    found = _imported(name)
    if not isinstance(found, type):
        raise ImportError(f"{name} is not importable in this Ray worker (its Python path: the run's code snapshot "
                          "and the installed packages)")
    return found


def _mailbox_subclass(cls: type, **options: Any) -> Any:
    """``mailbox_actor`` for a class that is not importable by name: a subclass, shipped by value, that takes its
    delivery, memory and node methods from ``_Mailbox`` (importable, so they travel by name)."""
    import ray

    class Mailbox(cls, _Mailbox):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # This class travels by value (cloudpickle), with copies of the globals it names: the process's real
            # registry is reached through the module.
            from embodied.channels import ray_channel

            ray_channel._MAILBOX["handle"] = ray.get_runtime_context().current_actor
            cls.__init__(self, *args, **kwargs)

    for name in getattr(cls, "concurrent_methods", ()):  # run beside the worker's own calls, as deliveries do
        setattr(Mailbox, name, _in_mailbox_group(getattr(cls, name)))
    Mailbox.__name__, Mailbox.__qualname__ = cls.__name__, cls.__qualname__
    return _remote(Mailbox, options)


def _remote(mailbox: type, options: dict[str, Any]) -> Any:
    """``ray.remote`` of ``mailbox`` with the mailbox concurrency group beside any the options name."""
    import ray

    groups = {**options.pop("concurrency_groups", {}), MAILBOX_GROUP: 1}
    return ray.remote(concurrency_groups=groups, **options)(mailbox)


def _in_mailbox_group(method: Any) -> Any:
    """``method`` as a Ray actor method of the mailbox's concurrency group (a wrapper: ``method`` stays as it is)."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return method(self, *args, **kwargs)

    return _in_group(wrapper)
