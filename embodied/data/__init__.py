"""Demonstrations: collected through the env workers, stored as a Hugging Face dataset, read back.

    from embodied.data import DemoDataset, collate
    data = DemoDataset("data/pick_place_state")       # datasets.load_from_disk works on it too
    obs, actions, executed = collate([data[0], data[1]])  # obs as Policy.act takes it

See ``embodied.data.format`` for the on-disk layout and ``embodied.data.collect`` for how
``embodied collect`` records scripted-expert episodes.
"""

from __future__ import annotations

from embodied.data.dataset import DemoDataset, check_compatible, collate
from embodied.data.format import FORMAT_VERSION, META_FILE, read_meta

__all__ = ["FORMAT_VERSION", "META_FILE", "DemoDataset", "check_compatible", "collate", "read_meta"]
