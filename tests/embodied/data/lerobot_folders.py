"""LeRobot folders built by hand from LeRobot's documented layout (pandas, pyarrow and PyAV; not embodied's writer).

Frame ``f`` of episode ``e`` has states ``[e, f, 0.5]``, action ``[10 e + f, -f]`` and camera images
of one grey level, ``frame_value(e, f)`` (``255 -`` that on the wrist camera), far enough from its
neighbours' that a decoded frame tells which one it is.
"""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

FPS = 10
SIZE = (32, 48)  # H, W of the hand-built videos
ALOHA = {"main": "observation.images.cam_high", "wrist": "observation.images.cam_left_wrist"}
TASKS = ["open the drawer", "close the drawer"]


def frame_value(episode: int, frame: int) -> int:
    return (40 * episode + 9 * frame) % 200 + 20


def states(episode: int, frame: int) -> list[float]:
    return [float(episode), float(frame), 0.5]


def action(episode: int, frame: int) -> list[float]:
    return [10.0 * episode + frame, -float(frame)]


def encode(path: Path, values: list[int], size: tuple[int, int] = SIZE, fps: int = FPS) -> None:
    """One mp4 of flat frames of those grey levels, encoded as LeRobot's writer does (AV1, yuv420p, g=2)."""
    import av

    os.environ.setdefault("SVT_LOG", "1")  # libsvtav1 prints its configuration otherwise
    path.parent.mkdir(parents=True, exist_ok=True)
    from embodied.data.lerobot.video import same_scheduling

    with same_scheduling(), av.open(str(path), "w") as out:  # libsvtav1 would leave this thread real-time
        stream = out.add_stream("libsvtav1", rate=fps, options={"g": "2", "crf": "30", "preset": "12"})
        stream.pix_fmt, stream.height, stream.width = "yuv420p", *size
        for k, v in enumerate(values):
            frame = av.VideoFrame.from_ndarray(np.full((*size, 3), v, np.uint8), format="rgb24")
            frame.pts, frame.time_base = k, Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def features(state_dim: int = 3, action_dim: int = 2, cameras: dict[str, str] = ALOHA,
             camera_dtype: str = "video") -> dict:
    out = {"observation.state": {"dtype": "float32", "shape": [state_dim], "names": None}}
    for name in cameras.values():
        out[name] = {"dtype": camera_dtype, "shape": [*SIZE, 3], "names": ["height", "width", "channels"]}
    out["action"] = {"dtype": "float32", "shape": [action_dim], "names": None}
    for name, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                        ("index", "int64"), ("task_index", "int64")):
        out[name] = {"dtype": dtype, "shape": [1], "names": None}
    return out


def frames_table(lengths: list[int], episodes: list[int] | None = None) -> Any:
    """The data rows of those episodes (states and actions as plain lists, as pandas writes them)."""
    import pandas as pd

    rows, index = [], 0
    for e, n in zip(episodes or range(len(lengths)), lengths):
        for f in range(n):
            rows.append({"observation.state": states(e, f), "action": action(e, f), "timestamp": np.float32(f / FPS),
                         "frame_index": f, "episode_index": e, "index": index, "task_index": e % 2})
            index += 1
    return pd.DataFrame(rows)


def build_v3(root: Path, lengths: tuple[int, ...] = (6, 9, 5),
             video_files: tuple[tuple[int, ...], ...] = ((0, 1), (2,)), cameras: dict[str, str] = ALOHA) -> Path:
    """A v3.0 folder: every episode in one data file; each camera's episodes in ``video_files`` mp4s (the
    second episode of a file starts at an offset)."""
    import pandas as pd

    (root / "meta").mkdir(parents=True)
    info = {"codebase_version": "v3.0", "fps": FPS, "features": features(cameras=cameras),
            "total_episodes": len(lengths), "total_frames": sum(lengths), "total_tasks": 2, "chunks_size": 1000,
            "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "robot_type": "hand-built",
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "splits": {"train": f"0:{len(lengths)}"}}
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    data = root / "data/chunk-000/file-000.parquet"
    data.parent.mkdir(parents=True)
    frames_table(list(lengths)).to_parquet(data, index=False)
    pd.DataFrame({"task_index": [0, 1]}, index=pd.Index(TASKS, name="task")).to_parquet(root / "meta/tasks.parquet")
    episodes = [{"episode_index": e, "tasks": [TASKS[e % 2]], "length": n, "data/chunk_index": 0,
                 "data/file_index": 0, "dataset_from_index": sum(lengths[:e]), "dataset_to_index": sum(lengths[:e + 1]),
                 "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0} for e, n in enumerate(lengths)]
    for camera, name in cameras.items():
        for file, held in enumerate(video_files):
            values = [frame_value(e, f) for e in held for f in range(lengths[e])]
            encode(root / f"videos/{name}/chunk-000/file-{file:03d}.mp4",
                   values if camera == "main" else [255 - v for v in values])
            start = 0
            for e in held:
                episodes[e] |= {f"videos/{name}/chunk_index": 0, f"videos/{name}/file_index": file,
                                f"videos/{name}/from_timestamp": start / FPS,
                                f"videos/{name}/to_timestamp": (start + lengths[e]) / FPS}
                start += lengths[e]
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    path.parent.mkdir(parents=True)
    pd.DataFrame(episodes).to_parquet(path, index=False)
    return root


def build_v21(root: Path, lengths: tuple[int, ...] = (4, 6)) -> Path:
    """A v2.1 folder: one parquet and one mp4 per camera and episode, episodes.jsonl and tasks.jsonl."""
    (root / "meta").mkdir(parents=True)
    info = {"codebase_version": "v2.1", "fps": FPS, "features": features(), "total_episodes": len(lengths),
            "total_frames": sum(lengths), "total_tasks": 2, "chunks_size": 1000,
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"}
    (root / "meta/info.json").write_text(json.dumps(info))
    lines = [json.dumps({"episode_index": e, "tasks": [TASKS[e % 2]], "length": n}) for e, n in enumerate(lengths)]
    (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    (root / "meta/tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n"
                                                   for i, t in enumerate(TASKS)))
    for e, n in enumerate(lengths):
        path = root / f"data/chunk-000/episode_{e:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        frames_table([n], [e]).to_parquet(path, index=False)
        for camera, name in ALOHA.items():
            values = [frame_value(e, f) for f in range(n)]
            encode(root / f"videos/chunk-000/{name}/episode_{e:06d}.mp4",
                   values if camera == "main" else [255 - v for v in values])
    return root


def build_images(root: Path, lengths: tuple[int, ...] = (3, 4)) -> Path:
    """A v3.0 folder whose camera is PNGs in the data parquet (dtype image: a struct of bytes and path, as
    ``datasets.Image`` stores it), one row group per episode."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    build_v3(root, lengths, video_files=(), cameras={})
    info = json.loads((root / "meta/info.json").read_text())
    info["features"] = features(cameras={"main": "observation.images.image"}, camera_dtype="image")
    info["video_path"] = None
    (root / "meta/info.json").write_text(json.dumps(info))
    frames = frames_table(list(lengths))

    def png(v: int) -> dict:
        buffer = io.BytesIO()
        Image.fromarray(np.full((*SIZE, 3), v, np.uint8)).save(buffer, format="PNG")
        return {"bytes": buffer.getvalue(), "path": None}

    images = pa.array([png(frame_value(e, f)) for e, f in zip(frames.episode_index, frames.frame_index)],
                      type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    table = pa.Table.from_pandas(frames, preserve_index=False).append_column("observation.images.image", images)
    with pq.ParquetWriter(root / "data/chunk-000/file-000.parquet", table.schema) as writer:
        start = 0
        for n in lengths:  # one row group per episode, as LeRobot writes them
            writer.write_table(table.slice(start, n))
            start += n
    return root
