"""Snapshots pickled before embodied's modules moved into layer subpackages still load."""

import pickle

import pytest

from embodied.core import pickles
from embodied.core.types import EpisodeStats


def pickled_under(obj: object, old: str, new: str) -> bytes:
    """``obj`` pickled as code before the move would have pickled it: its class under module ``old``."""
    data = pickle.dumps(obj, protocol=0)  # protocol 0 names classes as text lines, so the module can be swapped
    assert f"c{new}\n".encode() in data
    return data.replace(f"c{new}\n".encode(), f"c{old}\n".encode())


def test_a_class_of_a_moved_module_is_found_where_it_lives_now():
    stats = EpisodeStats(0, 1.5, 7, True, False, task="reach")
    old = pickled_under(stats, "embodied.types", "embodied.core.types")
    with pytest.raises(ModuleNotFoundError, match="embodied.types"):
        pickle.loads(old)
    assert pickles.loads(old) == stats


def test_a_pickle_of_today_loads_unchanged():
    stats = EpisodeStats(1, 0.0, 1, False, False)
    assert pickles.loads(pickle.dumps((stats, {"x": [1, 2]}))) == (stats, {"x": [1, 2]})


def test_every_moved_module_maps_to_one_that_exists():
    import importlib

    for new in pickles.MOVED_MODULES.values():
        importlib.import_module(new)
