"""Snapshots pickled before embodied's modules moved into layer subpackages still load."""

import io
import pickle
import warnings

from embodied.core import moved, pickles
from embodied.core.types import EpisodeStats


def pickled_under(obj: object, old: str, new: str) -> bytes:
    """``obj`` pickled as code before the move would have pickled it: its class under module ``old``."""
    data = pickle.dumps(obj, protocol=0)  # protocol 0 names classes as text lines, so the module can be swapped
    assert f"c{new}\n".encode() in data
    return data.replace(f"c{new}\n".encode(), f"c{old}\n".encode())


def test_a_class_of_a_moved_module_is_found_where_it_lives_now_without_a_warning():
    stats = EpisodeStats(0, 1.5, 7, True, False, task="reach")
    old = pickled_under(stats, "embodied.types", "embodied.core.types")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old path's FutureWarning would fail here
        assert pickles.loads(old) == stats


def test_a_class_of_a_module_whose_name_a_package_took_is_found_by_its_name():
    from embodied.checkpoint.store import ResumePoint

    assert moved.current_home("embodied.checkpoint", "ResumePoint") == "embodied.checkpoint.store"
    assert moved.current_home("embodied.evaluation", "EvalReport") == "embodied.evaluation.stats"
    assert moved.current_home("embodied.placement.local", "LocalBackend") == "embodied.backends.local"
    assert moved.current_home("embodied.core.types", "EpisodeStats") == "embodied.core.types"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pickles._Unpickler(io.BytesIO()).find_class("embodied.checkpoint", "ResumePoint") is ResumePoint


def test_a_pickle_of_today_loads_unchanged():
    stats = EpisodeStats(1, 0.0, 1, False, False)
    assert pickles.loads(pickle.dumps((stats, {"x": [1, 2]}))) == (stats, {"x": [1, 2]})


def test_every_moved_module_maps_to_one_that_exists():
    import importlib

    for new in [*moved.MOVED_MODULES.values(), *moved.MOVED_PACKAGES.values()]:
        importlib.import_module(new)
    for package, homes in moved.BECAME_PACKAGES.items():
        for new, names in homes.items():
            module = importlib.import_module(new)
            assert [n for n in names if not hasattr(module, n)] == [], (package, new)
