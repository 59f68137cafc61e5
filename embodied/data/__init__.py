"""Demonstrations: collected through the env workers, stored as a Hugging Face dataset, read back.

    embodied collect configs/pick_place_mlp_sft.yaml --episodes 200 --out data/pick_place

    from embodied.data import DemoDataset, collate
    data = DemoDataset("data/pick_place")              # datasets.load_from_disk reads it too
    obs, actions, executed = collate([data[0], data[1]])  # obs as Policy.act takes it

``embodied.data.format`` documents the on-disk layout (and why ``datasets``),
``embodied.data.collect`` how ``embodied collect`` records scripted-expert episodes, and
``embodied.data.dataset`` the reader.
"""

from __future__ import annotations

from embodied.data.dataset import DemoBatch, DemoDataset, DemoSample, check_compatible, collate
from embodied.data.format import FORMAT_VERSION, META_FILE, DemoEpisode, Meta, read_meta

__all__ = ["FORMAT_VERSION", "META_FILE", "DemoBatch", "DemoDataset", "DemoEpisode", "DemoSample", "Meta",
           "check_compatible", "collate", "read_meta"]
