"""Demonstrations: stored as a Hugging Face dataset or a LeRobot folder, read back (``embodied.runs.collect`` records them).

    embodied collect configs/pick_place_mlp_sft.yaml --episodes 200 --out data/pick_place
    embodied collect configs/pick_place_mlp_sft.yaml --episodes 200 --out data/pp_lerobot --format lerobot
    embodied data info data/pp_lerobot

    from embodied.data import collate, open_demonstrations
    data = open_demonstrations("data/pick_place")        # either format; datasets.load_from_disk reads ours too
    obs, actions, executed = collate([data[0], data[1]])  # obs as Policy.act takes it

``embodied.data.format`` documents embodied's on-disk layout (and why ``datasets``),
``embodied.data.lerobot`` LeRobot's (read and written), ``embodied.data.demonstrations`` the one
interface SFT reads both through, ``embodied.data.info`` what ``embodied data info`` prints, and
``embodied.data.dataset`` the reader of embodied's format. Recording scripted-expert episodes
(``embodied collect``) drives env workers, a layer above this package: it is ``embodied.runs.collect``,
beside ``embodied.runs.sft``; this package imports nothing above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from embodied.core.registry import lazy_attributes

if TYPE_CHECKING:
    from embodied.data.dataset import DemoBatch, DemoDataset, DemoSample, check_compatible, collate
    from embodied.data.demonstrations import Demonstrations, ReadOptions, detect_format, open_demonstrations
    from embodied.data.format import FORMAT_VERSION, META_FILE, DemoEpisode, Meta, read_meta

# Loaded on first use (PEP 562): an env worker records episodes with ``format.DemoEpisode`` and must not pay for
# the readers' torch and ``datasets`` imports.
_WHERE = {"DemoBatch": "dataset", "DemoDataset": "dataset", "DemoSample": "dataset", "check_compatible": "dataset",
          "collate": "dataset", "Demonstrations": "demonstrations", "ReadOptions": "demonstrations",
          "detect_format": "demonstrations", "open_demonstrations": "demonstrations", "FORMAT_VERSION": "format",
          "META_FILE": "format", "DemoEpisode": "format", "Meta": "format", "read_meta": "format"}
__all__ = sorted(_WHERE)

__getattr__ = lazy_attributes(__name__, _WHERE)
