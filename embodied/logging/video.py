"""Episode videos: text overlay, tiling, and mp4 encoding on a background thread.

    writer = VideoWriter()
    writer.submit(out_dir, episodes, names, "grid.mp4", cfg)  # returns at once
    writer.take_written()                                      # mp4s finished since the last call
    writer.close()                                             # flush and join (also at exit)

Everything costly (resizing, overlay, tiling, imageio-ffmpeg encoding) runs on the writer thread,
off the env worker's hot path. A file is encoded to ``name.mp4.tmp`` and renamed when complete,
so an ``.mp4`` is never half-written; a failed job removes its temp file and is reported.
"""

from __future__ import annotations

import atexit
import math
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from embodied.config.schema import VideoConfig
from embodied.core.atomic import atomic_path
from embodied.core.types import EpisodeFrames

SUCCESS_GREEN = (60, 220, 90)


def write_mp4(path: Path, frames: Sequence[np.ndarray], fps: int) -> Path:
    """Encode uint8 [H, W, 3] frames (H, W even) to ``path`` atomically with imageio-ffmpeg."""
    import imageio_ffmpeg

    if not frames:
        raise ValueError(f"{path}: no frames to write")
    height, width = frames[0].shape[:2]
    with atomic_path(path) as tmp:
        # "-f mp4": ffmpeg cannot guess the container from the .tmp suffix.
        writer = imageio_ffmpeg.write_frames(str(tmp), (width, height), fps=fps, codec="libx264", quality=7,
                                             macro_block_size=1, output_params=["-f", "mp4", "-threads", "1"],
                                             ffmpeg_log_level="error")
        try:
            writer.send(None)  # start ffmpeg
            for t, frame in enumerate(frames):
                if frame.shape != (height, width, 3):
                    raise ValueError(f"{path}: frame {t} has shape {frame.shape}, expected {(height, width, 3)}")
                writer.send(np.ascontiguousarray(frame, dtype=np.uint8))
        finally:
            writer.close()  # waits for ffmpeg to finish the file (or stops it) before the rename or removal
    return path


def episode_frames(rec: EpisodeFrames, cfg: VideoConfig) -> list[np.ndarray]:
    """The episode's frames resized to ``cfg.size`` and, with ``cfg.overlay``, annotated."""
    out = []
    ret = 0.0
    for t, (frame, reward, success) in enumerate(zip(rec.frames, rec.rewards, rec.successes)):
        ret += reward
        image = Image.fromarray(frame)
        if image.size != (cfg.size, cfg.size):
            image = image.resize((cfg.size, cfg.size), Image.BILINEAR)
        if cfg.overlay:
            _annotate(image, t, reward, ret, success, rec.task)
        out.append(np.asarray(image))
    return out


def tile(episodes: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """One grid frame per time step; an episode that ended holds its terminal frame."""
    n = len(episodes)
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    height, width = episodes[0][0].shape[:2]
    length = max(len(e) for e in episodes)
    grid = []
    for t in range(length):
        canvas = np.zeros((rows * height, cols * width, 3), dtype=np.uint8)
        for k, frames in enumerate(episodes):
            r, c = divmod(k, cols)
            canvas[r * height : (r + 1) * height, c * width : (c + 1) * width] = frames[min(t, len(frames) - 1)]
        grid.append(canvas)
    return grid


def _annotate(image: Image.Image, t: int, reward: float, ret: float, success: bool, task: str) -> None:
    draw = ImageDraw.Draw(image)
    font = _font(max(8, image.size[0] // 18))
    pad = max(2, image.size[0] // 64)
    text = dict(font=font, stroke_width=1, stroke_fill=(0, 0, 0))
    draw.text((pad, pad), f"t={t} r={reward:+.2f} R={ret:+.2f}", fill=(255, 255, 255), **text)
    if success:
        draw.text((pad, pad + font.size + pad), "success", fill=SUCCESS_GREEN, **text)
    if task:
        lines = wrap_text(task, lambda t: draw.textlength(t, font=font), image.size[0] - 2 * pad)
        line_height = font.size + pad
        top = image.size[1] - len(lines) * line_height - pad
        for i, line in enumerate(lines):
            draw.text((pad, top + i * line_height), line, fill=(255, 255, 200), **text)


def wrap_text(text: str, width_of: Callable[[str], float], max_width: float, max_lines: int = 3) -> list[str]:
    """Words of ``text`` in lines no wider than ``max_width``; past ``max_lines`` the last line ends in '...'."""
    lines: list[str] = []
    for word in text.split():
        if lines and width_of(f"{lines[-1]} {word}") <= max_width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    if len(lines) > max_lines:
        last = " ".join(lines[max_lines - 1:])
        while len(last) > 4 and width_of(last + "...") > max_width:
            last = last[:-1]
        lines = lines[:max_lines - 1] + [last.rstrip() + "..."]
    return lines


def _lower_priority() -> None:
    """Nice this thread (and so the ffmpeg it starts) below training: on Linux nice is per thread."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass  # not Linux: encode at normal priority


@lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


@dataclass
class VideoReport:
    """What a worker's video writer finished since it was last asked."""

    paths: list[str]  # mp4 files written completely
    errors: list[str]  # one line per failure (rendering or encoding)

    @staticmethod
    def merge(reports: Sequence[VideoReport]) -> VideoReport:
        return VideoReport([p for r in reports for p in r.paths], [e for r in reports for e in r.errors])


@dataclass
class _Job:
    out_dir: Path
    episodes: list[EpisodeFrames]
    names: list[str]  # one file name per episode
    grid_name: str | None  # the tiled video of all episodes, if any
    cfg: VideoConfig


class VideoWriter:
    """A queue of video jobs encoded by one background thread; see the module docstring."""

    def __init__(self) -> None:
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._written: list[Path] = []
        self._errors: list[str] = []

    def submit(self, out_dir: Path, episodes: list[EpisodeFrames], names: list[str], grid_name: str | None,
               cfg: VideoConfig) -> None:
        """Queue one mp4 per episode (``names``) and, with ``grid_name``, their tiled grid."""
        if not episodes:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="VideoWriter", daemon=True)
            self._thread.start()
            # Daemon threads still run during atexit: a normal exit (or Ctrl-C) waits for queued videos.
            atexit.register(self.close)
        self._queue.put(_Job(Path(out_dir), episodes, names, grid_name, cfg))

    def take_written(self) -> list[Path]:
        """Videos completed since the last call."""
        with self._lock:
            done, self._written = self._written, []
        return done

    def take_errors(self) -> list[str]:
        """Failures since the last call, one line each."""
        with self._lock:
            errors, self._errors = self._errors, []
        return errors

    def flush(self) -> None:
        """Block until every queued video is written (or has failed)."""
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        """Flush and stop the thread (safe to call twice)."""
        if self._thread is None:
            return
        atexit.unregister(self.close)
        self._queue.put(None)
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        _lower_priority()
        while (job := self._queue.get()) is not None:
            try:
                self._encode(job)
            except Exception as exc:  # noqa: BLE001 - a bad video must not kill the thread
                with self._lock:
                    self._errors.append(f"writing videos to {job.out_dir} failed: {exc!r}")
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _encode(self, job: _Job) -> None:
        clips = [episode_frames(rec, job.cfg) for rec in job.episodes]
        paths = [job.out_dir / name for name in job.names]
        if job.grid_name is not None:
            clips.append(tile(clips))
            paths.append(job.out_dir / job.grid_name)
        for path, frames in zip(paths, clips):
            write_mp4(path, frames, job.cfg.fps)
            with self._lock:
                self._written.append(path)
