"""LeRobot datasets (v3.0; v2.0/v2.1 read too), read for SFT and written by ``embodied collect --format lerobot``.

    from embodied.data.lerobot import LeRobotDemos, write_lerobot
    data = LeRobotDemos("data/libero", action_chunk=8)   # one DemoSample per frame, chunks built at load
    write_lerobot(Path("data/pick_color"), episodes, meta, fps=20)

LeRobot itself is not a dependency (its releases pin Python, torch, transformers and datasets
versions this project does not use); the layout it documents is read and written here with
pyarrow, ``datasets`` features and PyAV:

- ``layout``: ``meta/info.json``, the episodes table, the tasks, parquet reading (v3 and v2);
- ``mapping``: which feature feeds ``states``, ``main_images``, ``wrist_images``, ``actions``;
- ``video``: frames by timestamp (PyAV, libdav1d for AV1) and AV1 encoding (libsvtav1);
- ``reader``: ``LeRobotDemos``, the torch dataset SFT trains on, with a bounded frame cache;
- ``stats`` and ``writer``: ``write_lerobot``, a v3.0 folder LeRobot's own reader loads.

docs/lerobot.md is the user's guide.
"""

from __future__ import annotations

from embodied.data.lerobot.layout import SUPPORTED_VERSIONS, Feature, LeRobotError, LeRobotInfo
from embodied.data.lerobot.mapping import KNOWN_NAMES
from embodied.data.lerobot.reader import LeRobotDemos
from embodied.data.lerobot.video import AV1, FrameError, VideoCodec
from embodied.data.lerobot.writer import FEATURE_NAMES, FileLimits, LeRobotWriter, lerobot_writer, write_lerobot

__all__ = ["AV1", "FEATURE_NAMES", "KNOWN_NAMES", "SUPPORTED_VERSIONS", "Feature", "FileLimits", "FrameError",
           "LeRobotDemos", "LeRobotError", "LeRobotInfo", "LeRobotWriter", "VideoCodec", "lerobot_writer",
           "write_lerobot"]
