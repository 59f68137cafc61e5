"""The process that owns a run's wandb run: both ends of its pipe.

Training (:class:`embodied.logging.logger.WandbSink`) sends it JSON lines on stdin: first the start
(``{"init": {...wandb.init kwargs}, "summary": bool, "id_file": path}``), then ``{"log": metrics,
"step": n}`` and ``{"videos": {key: path}, "step": n}``; end of input finishes the run. It answers
on a pipe of its own with one JSON line: ``{"started": run_id}`` or ``{"error": repr}``.

Why a process: importing wandb and ``wandb.init`` take about a second of CPU, and on a thread of
the training process that second held the GIL the first iterations need. ``embodied train``
starts it (:func:`prestart`) as soon as the config says wandb is on, so wandb's import runs on the
other core while training imports torch; the sink takes that process over once the run dir exists.
A failed ``log`` or ``finish`` is printed to stderr (``[logging] wandb ... failed``), as the
training process prints its own sinks' failures, and the run goes on with the next row.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

_prestarted: list[WandbProcess] = []  # at most one: started by the CLI, taken by the run's sink


class WandbProcess:
    """Training's handle on the process: ``popen`` (rows go to its stdin) and ``status_fd`` (its answer)."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.popen = subprocess.Popen([sys.executable, "-m", "embodied.logging.wandb_process", str(write_fd)],
                                      stdin=subprocess.PIPE, pass_fds=(write_fd,))
        os.close(write_fd)
        self.status_fd = read_fd


def prestart() -> None:
    """Start the process now (it imports wandb and waits for a start); :func:`take` hands it over."""
    if not _prestarted:
        _prestarted.append(WandbProcess())


def take() -> WandbProcess:
    """The prestarted process if it is still alive, else a new one."""
    if _prestarted:
        process = _prestarted.pop()
        if process.popen.poll() is None:
            return process
        os.close(process.status_fd)
    return WandbProcess()


def main(status_fd: int) -> None:
    # Ctrl-C reaches the whole process group: training saves and closes stdin, and this process then
    # finishes the run. Dying on the signal would lose the run's last rows.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Logging yields the CPU to training: on a small machine wandb's start (this import, then wandb-core) would
    # otherwise take a core from the first iterations. wandb-core inherits the niceness.
    os.nice(10)
    try:
        import wandb  # before the start arrives: this is the part that runs beside training's start-up
    except Exception as exc:  # noqa: BLE001 - reported once the start arrives
        wandb, failure = None, exc
    line = sys.stdin.readline()
    if not line:
        return  # prestarted for a run that never began (a config error, a failed start)
    start = json.loads(line)
    with os.fdopen(status_fd, "w") as status:
        try:
            if wandb is None:
                raise failure
            quiet = not start["summary"]
            run = wandb.init(**start["init"], settings=wandb.Settings(quiet=quiet, silent=quiet))
            Path(start["id_file"]).write_text(run.id + "\n")
        except Exception as exc:  # noqa: BLE001 - reported to training, which switches the sink off
            status.write(json.dumps({"error": repr(exc)}) + "\n")
            return
        status.write(json.dumps({"started": run.id}) + "\n")
    for line in sys.stdin:
        message = json.loads(line)
        try:
            if "log" in message:
                run.log(message["log"], step=message["step"])
            else:
                # Videos written on another node of a Ray cluster are not here to upload: skip them.
                media = {key: wandb.Video(path, caption=Path(path).parent.name, format="mp4")
                         for key, path in message["videos"].items() if Path(path).is_file()}
                if media:
                    run.log(media, step=message["step"])
        except Exception as exc:  # noqa: BLE001 - an outage must not stop the run
            what = "log" if "log" in message else "video logging"
            print(f"[logging] wandb {what} failed (dropped): {exc!r}", file=sys.stderr, flush=True)
    try:
        run.finish()
    except Exception as exc:  # noqa: BLE001
        print(f"[logging] wandb close failed: {exc!r}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
