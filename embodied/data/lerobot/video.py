"""Camera frames in mp4 files, through PyAV: decoded by timestamp, encoded as LeRobot's writer does.

Why PyAV: it decodes in this process, seeking to the keyframe before a timestamp and decoding
forward to the frame at it (LeRobot's own ``pyav`` backend does the same), with FFmpeg's codecs
linked in: its wheels decode AV1 with libdav1d and encode it with libsvtav1, so nothing else is
installed. imageio-ffmpeg would pipe a new ffmpeg subprocess per read and cannot seek into an open
file; torchcodec wheels pin torch versions this project does not use.

    reader = VideoReader(path, fps=10)
    frame = reader.frame_at(2.5)                  # uint8 [H, W, 3], the frame whose timestamp is 2.5 s
    with VideoEncoder(path, fps=10) as encoder:   # AV1 (libsvtav1), yuv420p, a keyframe every 2 frames
        encoder.add(frame)
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

TOLERANCE_S = 1e-4  # a decoded frame is "the frame at t" within this many seconds (LeRobot's tolerance_s)


class FrameError(ValueError):
    """A video lacks the frame asked for, or cannot be read; the message names the file."""


@dataclass(frozen=True)
class VideoCodec:
    """How camera streams are encoded; the default is LeRobot's (``RGBEncoderConfig``)."""

    encoder: str = "libsvtav1"  # FFmpeg encoder (AV1)
    pix_fmt: str = "yuv420p"
    gop: int = 2  # a keyframe every `gop` frames: any frame decodes from at most gop - 1 before it
    crf: int = 30  # quality (lower: better and bigger)
    preset: int = 12  # libsvtav1 speed preset (12: fastest; the library maps it to its fastest, 11)

    def options(self) -> dict[str, str]:
        """FFmpeg codec options."""
        return {"g": str(self.gop), "crf": str(self.crf), "preset": str(self.preset)}

    def feature_info(self, probe: VideoProbe) -> dict[str, Any]:
        """The ``info`` of a video feature in ``meta/info.json``, as LeRobot writes it."""
        return {"video.height": probe.height, "video.width": probe.width, "video.codec": probe.codec,
                "video.pix_fmt": self.pix_fmt, "video.fps": round(probe.fps), "video.channels": 3, "has_audio": False,
                "video.g": self.gop, "video.crf": self.crf, "video.preset": self.preset, "video.fast_decode": 0,
                "video.video_backend": "pyav", "video.extra_options": {}, "is_depth_map": False}


AV1 = VideoCodec()


@dataclass(frozen=True)
class VideoProbe:
    """What a video file's header says."""

    frames: int
    fps: float
    width: int
    height: int
    codec: str  # canonical name, e.g. "av1"


def probe(path: Path) -> VideoProbe:
    """Frame count, rate, size and codec of the first video stream of ``path``."""
    import av

    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            frames = stream.frames or sum(1 for p in container.demux(stream) if p.size)  # mp4 headers count them
            return VideoProbe(int(frames), float(stream.average_rate or stream.guessed_rate or 0), stream.width,
                              stream.height, stream.codec_context.codec.canonical_name)
    except (av.FFmpegError, IndexError) as exc:
        raise FrameError(f"{path}: not a readable video ({exc})") from None


class VideoReader:
    """One open video file: the frame at a timestamp, decoded on demand.

    Reading forward (the next frame or two) goes on decoding where the last read stopped; any
    other timestamp seeks to the keyframe at or before it and decodes forward from there.
    """

    def __init__(self, path: Path, fps: float) -> None:
        import av

        self.path, self.fps = Path(path), fps
        try:
            self._container = av.open(str(path))
            self._stream = self._container.streams.video[0]
        except (av.FFmpegError, IndexError) as exc:
            raise FrameError(f"{path}: not a readable video ({exc})") from None
        self._time_base = self._stream.time_base
        self._frames: Any = None  # the decoding iterator, positioned after the frame at self._last
        self._last = -math.inf  # timestamp (s) of the last decoded frame

    def frame_at(self, t: float) -> np.ndarray:
        """uint8 [H, W, 3]: the frame whose timestamp is ``t`` seconds (within ``TOLERANCE_S``)."""
        import av

        if self._frames is None or not self._last + TOLERANCE_S < t <= self._last + 2.0 / self.fps + TOLERANCE_S:
            self._seek(t)
        try:
            for frame in self._frames:
                if frame.pts is None:
                    continue
                self._last = float(frame.pts * self._time_base)
                if self._last < t - TOLERANCE_S:
                    continue
                if self._last > t + TOLERANCE_S:
                    self._frames = None
                    raise FrameError(f"{self.path}: no frame at {t:.4f} s (the next one is at {self._last:.4f} s)")
                return frame.to_ndarray(format="rgb24")
        except av.FFmpegError as exc:
            self._frames = None
            raise FrameError(f"{self.path}: cannot decode the frame at {t:.4f} s ({exc})") from None
        self._frames = None
        raise FrameError(f"{self.path}: the video ends before {t:.4f} s (its last frame is at {self._last:.4f} s)")

    def _seek(self, t: float) -> None:
        target = max(math.floor((t - TOLERANCE_S) / self._time_base), 0)
        self._container.seek(target, stream=self._stream, backward=True, any_frame=False)
        self._frames = self._container.decode(self._stream)
        self._last = -math.inf

    def close(self) -> None:
        self._frames = None
        self._container.close()


class VideoPool:
    """At most ``max_open`` open ``VideoReader``s, the least recently used closed first.

    A pool belongs to one process: after a fork (a ``DataLoader`` worker) it reopens its files
    instead of sharing the parent's decoders.
    """

    def __init__(self, fps: float, max_open: int = 16) -> None:
        self.fps, self.max_open = fps, max_open
        self._readers: OrderedDict[Path, VideoReader] = OrderedDict()
        self._pid = os.getpid()

    def frame_at(self, path: Path, t: float) -> np.ndarray:
        """The frame of ``path`` at ``t`` seconds (see ``VideoReader.frame_at``)."""
        if self._pid != os.getpid():
            self._readers, self._pid = OrderedDict(), os.getpid()
        reader = self._readers.get(path)
        if reader is None:
            reader = self._readers[path] = VideoReader(path, self.fps)
            while len(self._readers) > self.max_open:
                self._readers.popitem(last=False)[1].close()
        self._readers.move_to_end(path)
        return reader.frame_at(t)

    @property
    def open_files(self) -> int:
        return len(self._readers)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


@contextlib.contextmanager
def same_scheduling() -> Iterator[None]:
    """Put back the calling thread's scheduling policy if a call inside changed it.

    libsvtav1, run as root, makes the thread that drives it ``SCHED_FIFO`` at priority 99, and every thread that
    thread starts afterwards inherits it: torch's and llvmpipe's worker threads then spin at real-time priority,
    starve the thread they wait for, and the process hangs (seen on a 2-core machine, in the test suite)."""
    if not hasattr(os, "sched_getscheduler"):  # not Linux
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if os.sched_getscheduler(0) != policy or os.sched_getparam(0) != param:
            os.sched_setscheduler(0, policy, param)


class VideoEncoder:
    """Frames appended in order to one mp4 (frame ``k`` at ``k / fps`` seconds); the encoder never leaves the
    calling thread at another scheduling policy (``same_scheduling``)."""

    def __init__(self, path: Path, fps: int, codec: VideoCodec = AV1) -> None:
        self.path, self.fps, self.codec = Path(path), fps, codec
        self.frames = 0
        self._container: Any = None
        self._stream: Any = None

    def add(self, image: np.ndarray) -> None:
        """Append one uint8 [H, W, 3] frame."""
        import av

        if self._container is None:
            with same_scheduling():
                self._open(image.shape)
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
        frame.pts, frame.time_base = self.frames, Fraction(1, self.fps)
        with same_scheduling():
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        self.frames += 1

    def _open(self, shape: tuple[int, ...]) -> None:
        import av

        height, width = shape[0], shape[1]
        if len(shape) != 3 or shape[2] != 3:
            raise ValueError(f"{self.path}: frames must be uint8 [H, W, 3], got shape {shape}")
        if height % 2 or width % 2:
            raise ValueError(f"{self.path}: {self.codec.pix_fmt} video needs an even width and height, "
                             f"the frames are {height} x {width}")
        os.environ.setdefault("SVT_LOG", "1")  # libsvtav1 prints its whole configuration to stderr otherwise
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._container = av.open(str(self.path), "w")
        self._stream = self._container.add_stream(self.codec.encoder, rate=self.fps, options=self.codec.options())
        self._stream.pix_fmt, self._stream.width, self._stream.height = self.codec.pix_fmt, width, height
        self._stream.time_base = Fraction(1, self.fps)

    @property
    def size_bytes(self) -> int:
        """Bytes written so far (the encoder holds a few frames back until ``close``)."""
        return self.path.stat().st_size if self.path.exists() else 0

    def close(self) -> None:
        """Flush the encoder and finish the file."""
        if self._container is None:
            return
        with same_scheduling():
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
        self._container = None

    def abort(self) -> None:
        """Close the file without flushing the encoder (after a failed write: the file is thrown away)."""
        container, self._container = self._container, None
        if container is not None:
            try:
                with same_scheduling():
                    container.close()
            except Exception:  # noqa: BLE001 - a full disk fails the trailer too; the first error is the one
                pass

    def __enter__(self) -> VideoEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
