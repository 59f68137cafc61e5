"""Metrics to ``metrics.jsonl`` in the run dir (always) and to the sinks ``logger.backends`` names:
``console`` (a tqdm bar with ETA, env-steps/s and success), ``wandb`` (offline unless configured,
videos as ``wandb.Video``; the run id kept in ``wandb_id.txt`` so a resumed run continues it) and
``tensorboard`` (scalars under ``<run_dir>/tensorboard``).

A sink that cannot start is reported and left out. A sink that fails later stays on: every failure
is reported on the console (what was dropped, and why), ``metrics.jsonl`` keeps the rows it could not
write and retries them with the next one, and a full disk is remembered in ``disk_full`` for the
runner, which saves a checkpoint and stops. A logging outage alone never stops training.
"""

from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from embodied.config import LoggerConfig
from embodied.core.atomic import atomic_path, disk_full
from embodied.logging import wandb_process

CONSOLE_KEYS = {"env/success_rate": "succ", "env/return": "ret", "eval/success_rate": "eval_succ",
                "env_steps_per_s": "sps", "train/approx_kl": "kl",
                "sft/train_loss": "loss", "sft/val_loss": "val_loss"}  # the last two: embodied sft
WANDB_ID_FILE = "wandb_id.txt"


class Sink(Protocol):
    """One logging backend."""

    name: str

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record ``metrics`` at ``step``."""

    def log_videos(self, videos: dict[str, Path], step: int) -> None:
        """Record finished mp4 files (by metric key) at ``step``; sinks without video support ignore them."""

    def close(self) -> None: ...


class MetricLogger:
    """Fan-out of ``log(metrics, step, videos)`` to ``metrics.jsonl`` and the configured sinks.

    ``start_step`` > 0 continues a resumed run: lines of ``metrics.jsonl`` past it are dropped
    (they were logged after the checkpoint) and the wandb run ``wandb_id`` is continued.
    """

    def __init__(self, cfg: LoggerConfig, run_dir: Path, name: str, config: dict[str, Any], total: int,
                 start_step: int = 0, wandb_id: str | None = None) -> None:
        makers: dict[str, Callable[[], Sink | None]] = {
            "console": lambda: ConsoleSink(name, total, start_step, cfg.progress_bar),
            "wandb": lambda: WandbSink.start(cfg, run_dir, name, config, wandb_id),
            "tensorboard": lambda: TensorBoardSink(run_dir / "tensorboard", start_step),
        }
        self.sinks: list[Sink] = []
        self.disk_full: str | None = None  # "no space left ... <path>" once a sink hit a full disk
        self.run_dir = run_dir
        for sink_name, make in [("metrics.jsonl", lambda: JsonlSink(run_dir / "metrics.jsonl", start_step)),
                                *((b, makers[b]) for b in cfg.backends)]:
            try:
                sink = make()
            except Exception as exc:  # noqa: BLE001 - no backend is reason enough to stop training
                warnings.warn(f"{sink_name} logging could not start, switching it off: {exc!r}", stacklevel=2)
                continue
            if sink is not None:
                self.sinks.append(sink)

    @property
    def wandb_id(self) -> str | None:
        """The wandb run id, for checkpoints (None without a wandb sink)."""
        return next((s.run_id for s in self.sinks if isinstance(s, WandbSink)), None)

    def log(self, metrics: dict[str, float], step: int, videos: dict[str, Path] | None = None) -> None:
        """Metrics of iteration ``step`` and the videos finished since the last call."""
        for sink in list(self.sinks):
            self._guard(sink, "log", lambda: sink.log(metrics, step))
        if videos:
            self.log_videos(videos, step)

    def log_videos(self, videos: dict[str, Path], step: int) -> None:
        if not videos:
            return
        for sink in list(self.sinks):
            self._guard(sink, "video logging", lambda: sink.log_videos(videos, step))

    def close(self) -> None:
        for sink in list(self.sinks):
            self._guard(sink, "close", sink.close)
        self.sinks = []

    def _guard(self, sink: Sink, what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - an outage must not stop training
            pending = getattr(sink, "pending", None)
            kept = f" ({len(pending)} rows kept to retry)" if pending else " (dropped)"
            # printed, not warnings.warn: Python shows a repeated warning once, and each drop must show
            print(f"[logging] {sink.name} {what} failed{kept}: {exc!r}", file=sys.stderr, flush=True)
            if disk_full(exc, self.run_dir):
                self.disk_full = f"no space left on device: {sink.name} could not write in {self.run_dir}"


class JsonlSink:
    """One JSON line per ``log`` call: the run's own record, read by ``embodied plot``."""

    name = "metrics.jsonl"

    def __init__(self, path: Path, start_step: int) -> None:
        self.pending: list[str] = []  # rows not yet written (a write failed); retried with the next row
        if start_step > 0 and path.exists():
            kept = []
            for number, line in enumerate(path.read_text().splitlines(), 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # torn by a crash mid-write: the row is lost, the file is not
                    warnings.warn(f"{path}:{number}: dropping a line that is not JSON (cut off by a crash?)",
                                  stacklevel=2)
                    continue
                if row.get("step", 0) <= start_step:
                    kept.append(line)
            with atomic_path(path) as tmp:
                tmp.write_text("".join(line + "\n" for line in kept))
        # A raw descriptor: a failed write leaves nothing in a buffer to be written twice later.
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(self, metrics: dict[str, float], step: int) -> None:
        # Wall-clock time (Unix seconds) of each row, so runs can be lined up and timed afterwards.
        self.pending.append(json.dumps({"step": step, "time": round(time.time(), 3), **metrics}) + "\n")
        self.flush()

    def flush(self) -> None:
        """Write the pending rows; on failure they stay pending (a row is written whole or not at all)."""
        at = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            self._write("".join(self.pending).encode())
        except OSError:
            try:
                os.ftruncate(self.fd, at)  # no torn row: the next attempt writes them all again
            except OSError:
                pass
            raise
        self.pending = []

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def log_videos(self, videos: dict[str, Path], step: int) -> None:
        pass  # the files are in the run dir already

    def close(self) -> None:
        try:
            if self.pending:
                self.flush()
        finally:
            os.close(self.fd)


class ConsoleSink:
    """A tqdm bar (ETA, env-steps/s, success) or, without it, a line per iteration; eval lines below it."""

    name = "console"

    def __init__(self, name: str, total: int, start_step: int, progress_bar: bool) -> None:
        self.bar = tqdm(total=total, initial=start_step, desc=name, unit="it", file=sys.stdout,
                        disable=not progress_bar, dynamic_ncols=True)
        self.video_dirs: set[Path] = set()  # announced once each: videos finish one by one

    def log(self, metrics: dict[str, float], step: int) -> None:
        shown = {short: f"{metrics[k]:.3g}" for k, short in CONSOLE_KEYS.items()
                 if k in metrics and not math.isnan(metrics[k])}
        if self.bar.disable:
            print(f"it {step}: " + " ".join(f"{k}={v}" for k, v in shown.items()), flush=True)
        else:
            self.bar.set_postfix(shown, refresh=False)
            self.bar.update(step - self.bar.n)
        if "eval/success_rate" in metrics:
            self.bar.write(f"[eval @ it {step}] {format_eval(metrics)}")

    def log_videos(self, videos: dict[str, Path], step: int) -> None:
        for folder in sorted({p.parent for p in videos.values()} - self.video_dirs):
            self.video_dirs.add(folder)
            self.bar.write(f"[videos] {folder}")

    def close(self) -> None:
        self.bar.close()


def format_eval(metrics: dict[str, float]) -> str:
    """``success 0.94 [0.80, 0.98] return -0.42 len 3.8 (32 episodes)`` from ``eval/*`` metrics."""
    m = metrics
    text = f"success {m['eval/success_rate']:.3g}"
    if "eval/success_ci_low" in m:
        text += f" [{m['eval/success_ci_low']:.2f}, {m['eval/success_ci_high']:.2f}]"
    return (text + f" return {m.get('eval/return', math.nan):.3g} len {m.get('eval/episode_len', math.nan):.3g}"
            f" ({int(m.get('eval/episodes', 0))} episodes)")


class WandbSink:
    """A wandb run (``logger.wandb_mode``, overridden by ``$WANDB_MODE``), resumable by id, in a process
    of its own (:mod:`embodied.logging.wandb_process`).

    Importing wandb and ``wandb.init`` take about a second of CPU; on a thread here they held the GIL
    that the first iterations need, so they run beside training instead. Rows go to that process over
    its stdin, written by a thread of this one, so a slow or stuck wandb never blocks training. A start
    that fails is warned about at the next ``log`` (or at ``close``) and the sink is off; a ``log`` that
    fails there is printed to stderr by that process (``[logging] wandb log failed``), and the next goes on.
    """

    name = "wandb"
    close_timeout_s = 120.0  # wandb's finish syncs the run; past this the process is killed

    def __init__(self, start: dict[str, Any], run_id: str) -> None:
        self.failed = False
        self._run_id = run_id
        self._status: dict[str, str] | None = None  # the process's answer to the start
        handle = wandb_process.take()
        self.process = handle.popen
        self._rows: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._rows.put(_line(start))
        self._writer = threading.Thread(target=self._write, name="wandb-rows", daemon=True)
        self._reader = threading.Thread(target=self._read, args=(handle.status_fd,), name="wandb-status", daemon=True)
        self._writer.start()
        self._reader.start()

    @classmethod
    def start(cls, cfg: LoggerConfig, run_dir: Path, name: str, config: dict[str, Any],
              wandb_id: str | None) -> WandbSink | None:
        """The sink, or None when wandb is disabled; ``wandb_id`` continues that run."""
        mode = wandb_mode(cfg)
        if mode == "disabled":
            return None
        run_id = wandb_id or uuid.uuid4().hex[:12]
        init = {"project": cfg.project, "name": name, "dir": str(run_dir), "mode": mode, "config": config,
                "id": run_id, "resume": "allow", "reinit": "finish_previous"}
        # summary: wandb's banner and ~30-line run summary at the end only if logger.wandb_summary asks for them.
        return cls({"init": init, "summary": cfg.wandb_summary, "id_file": str(run_dir / WANDB_ID_FILE)}, run_id)

    @property
    def run_id(self) -> str | None:
        """The run's id (known before it has started), None once its start failed."""
        return None if self.failed else self._run_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._send({"log": metrics, "step": step})

    def log_videos(self, videos: dict[str, Path], step: int) -> None:
        self._send({"videos": {key: str(path) for key, path in videos.items()}, "step": step})

    def close(self) -> None:
        self._reader.join()  # the start's answer (or the process's end)
        self._check()
        self._rows.put(None)  # end of input: the process finishes the run
        self._writer.join()
        try:
            self.process.wait(timeout=self.close_timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise TimeoutError(f"wandb did not finish the run in {self.close_timeout_s:.0f} s; "
                               "its process was killed") from None

    def _send(self, message: dict[str, Any]) -> None:
        self._check()
        if not self.failed:
            self._rows.put(_line(message))

    def _check(self) -> None:
        """Switch the sink off, with a warning, once the process says its start failed or has died."""
        if self.failed:
            return
        if not self._reader.is_alive() and self._status is None:  # its status pipe closed without an answer
            self._status = {"error": f"the wandb process exited with code {self.process.wait()} before it "
                                     "started the run"}
        if self._status is not None and "error" in self._status:
            problem = f"could not start, switching it off: {self._status['error']}"
        elif self.process.poll() not in (None, 0):
            problem = f"stopped, switching it off: its process exited with code {self.process.returncode}"
        else:
            return
        self.failed = True
        warnings.warn(f"{self.name} logging {problem}", stacklevel=4)

    def _read(self, fd: int) -> None:
        with os.fdopen(fd) as status:
            line = status.readline()
        if line:
            self._status = json.loads(line)

    def _write(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            while (data := self._rows.get()) is not None:
                stdin.write(data)
                stdin.flush()
        except OSError:
            pass  # the process died: _check reports it
        finally:
            try:
                stdin.close()
            except OSError:
                pass


def wandb_mode(cfg: LoggerConfig) -> str:
    """``logger.wandb_mode``, unless ``$WANDB_MODE`` overrides it."""
    return os.environ.get("WANDB_MODE", cfg.wandb_mode)


def prestart_wandb(cfg: LoggerConfig) -> None:
    """Start wandb's process now if this run logs to wandb, so that its import runs beside torch's."""
    if "wandb" in cfg.backends and wandb_mode(cfg) != "disabled":
        wandb_process.prestart()


def _line(message: dict[str, Any]) -> bytes:
    # default=str: a config may hold paths; metrics are floats, and NaN passes (json writes NaN).
    return (json.dumps(message, default=str) + "\n").encode()


class TensorBoardSink:
    """Scalars for TensorBoard (``tensorboard --logdir RUN_DIR/tensorboard``)."""

    name = "tensorboard"

    def __init__(self, log_dir: Path, start_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops events a crashed run logged after the checkpoint it resumes from.
        self.writer = SummaryWriter(str(log_dir), purge_step=start_step + 1 if start_step else None, flush_secs=10)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(key, value, global_step=step)

    def log_videos(self, videos: dict[str, Path], step: int) -> None:
        pass  # scalars only

    def close(self) -> None:
        self.writer.close()


def read_wandb_id(run_dir: Path) -> str | None:
    """The wandb run id a run dir recorded, if any."""
    path = run_dir / WANDB_ID_FILE
    return (path.read_text().strip() or None) if path.is_file() else None
