"""Older checkpoints in today's form: the one place that knows how a checkpoint's contents changed.

Every checkpoint's manifest says its format (``FORMAT_VERSION``; a folder without a manifest is format 1).
``load_checkpoint`` hands each trainer state it reads to ``migrate``, which applies, in order, every change a
checkpoint of its format predates, so the code that reads a checkpoint knows only today's form.

Two kinds of change are listed:

- the engine's own (``ENGINE_MOVES``): where the engine keeps a thing in the actor's entry;
- an algorithm's (``AlgorithmConfig.checkpoint_moves``): where its learner or policy keeps a thing, declared beside
  the algorithm's config, so that the engine names no algorithm. The algorithm is the one the checkpoint's config
  names, read in today's form (``embodied.config.loader.saved_form``: the config's own renames).

A move is ``KeyMove(old, new, since, why)``: dotted paths into the actor's entry (``"sac.actor_optimizer"``), or a
state dict's path and a prefix of its keys (``"policy:actor."``), or, with ``old`` empty, a key a format added and
the value a checkpoint without it stands for (``default``); ``since`` is the first format that writes ``new``. A move applies only where ``old`` is present and ``new`` is not, so a checkpoint written while a
format was being changed (format 2 spans several) is brought forward whatever it holds. The per-rank shares of an
off-policy checkpoint (``rank_shares``) are moved as the entry is.
"""

from __future__ import annotations

import copy
from typing import Any

from embodied.config.schema import KeyMove, algorithm_config_class
from embodied.core.registry import UnknownNameError

FORMAT_VERSION = 4  # 1: trainer.pt (+ policy/) without a manifest; 2: a manifest; 3: migrate.py's moves applied;
#                   4: SAC's actor a head on the policy's encoder (its encoder's keys under "encoder.")

__all__ = ["ENGINE_MOVES", "FORMAT_VERSION", "KeyMove", "migrate", "migrate_actor"]

# The engine's own moves (none yet: what moved so far was an algorithm's).
ENGINE_MOVES: tuple[KeyMove, ...] = ()


def migrate(state: dict[str, Any], version: int) -> dict[str, Any]:
    """``state`` (a checkpoint's trainer state, of format ``version``) in today's form, changed in place."""
    actor = state.get("actor")
    if version < FORMAT_VERSION and isinstance(actor, dict):
        migrate_actor(actor, algorithm_moves(state.get("config")), version)
    return state


def migrate_actor(actor: dict[str, Any], moves: tuple[KeyMove, ...], version: int = 1) -> dict[str, Any]:
    """An actor entry of format ``version`` in today's form, in place: the engine's moves, then ``moves`` (the
    algorithm's). The actor worker calls it with its algorithm's moves on what it resumes from, which may be a
    state without a config to name the algorithm (a moved entry is left as it is: every move is checked)."""
    entries = [actor, *[share for share in actor.get("rank_shares") or [] if isinstance(share, dict)]]
    for move in (*ENGINE_MOVES, *moves):
        if move.since > version:
            for entry in entries:
                apply(entry, move)
    return actor


def algorithm_moves(config: Any) -> tuple[KeyMove, ...]:
    """The moves the algorithm of a saved ``config`` declares (none when it names no known algorithm)."""
    from embodied.config.loader import saved_form  # the config's own renames, e.g. an algorithm that split off

    if not isinstance(config, dict) or not isinstance(config.get("algorithm"), dict):
        return ()
    name = saved_form(config).get("algorithm", {}).get("name")
    try:
        return tuple(algorithm_config_class(str(name)).checkpoint_moves) if name else ()
    except (UnknownNameError, ImportError, TypeError):
        return ()


def apply(entry: dict[str, Any], move: KeyMove) -> None:
    """``move`` in ``entry`` (the actor's entry, or one rank's share of it), in place."""
    if ":" in move.old:  # "<state dict>:<prefix>": a prefix of a state dict's keys
        (where, old), (_, new) = move.old.split(":"), move.new.split(":")
        table = _get(entry, where)
        if isinstance(table, dict):
            for key in [k for k in table if k.startswith(old) and new + k[len(old):] not in table]:
                table[new + key[len(old):]] = table.pop(key)
        return
    parent_new, _, key_new = move.new.rpartition(".")
    if not move.old:  # a key that format adds: its value where a checkpoint has none
        target = _get(entry, parent_new) if parent_new else entry
        if isinstance(target, dict) and key_new not in target:
            target[key_new] = copy.deepcopy(move.default)
        return
    parent_old, _, key_old = move.old.rpartition(".")
    source = _get(entry, parent_old) if parent_old else entry
    target = _get(entry, parent_new) if parent_new else entry
    if isinstance(source, dict) and isinstance(target, dict) and key_old in source and key_new not in target:
        target[key_new] = source.pop(key_old)


def _get(entry: dict[str, Any], path: str) -> Any:
    node: Any = entry
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node
