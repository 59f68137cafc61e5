"""A Ray head of the test's own (`ray start --head` on loopback) and the process-tree helpers that clean up after
it: several slow tests join a run to an existing cluster this way."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embodied.backends import check_reachable
from embodied.config import ConfigError


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(
                    int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def token_env(**extra: str) -> dict[str, str]:
    """This process's environment with token authentication on (as Ray now defaults to) and wandb off."""
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), "WANDB_MODE": "disabled",
            **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(env: dict[str, str], log: Path, tries: int = 3) -> tuple[int, subprocess.Popen]:
    """`ray start --head --block` on a free loopback port, retried on a fresh port when the head exits or does not
    listen within 120 s (the port probed free can be taken before Ray binds it; a loaded machine starts slowly).
    Fails with the head's own output, which is what says why."""
    for attempt in range(1, tries + 1):
        port = free_port()
        with log.open("a") as out:  # the head holds its own copy of the file
            head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--port",
                                     str(port), "--num-cpus", "2", "--block", "--include-dashboard", "false",
                                     "--disable-usage-stats"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        deadline = time.monotonic() + 120
        while head.poll() is None and time.monotonic() < deadline:
            try:
                check_reachable(f"127.0.0.1:{port}", 2)
                return port, head
            except ConfigError:  # not listening yet
                continue
        stop_head(head)
        with log.open("a") as f:
            f.write(f"\n-- try {attempt} on port {port}: the head {'exited' if head.poll() else 'did not listen'}\n")
    pytest.fail(f"`ray start --head` did not listen in {tries} tries; its output:\n{log.read_text()[-4000:]}")


def stop_head(head: subprocess.Popen) -> None:
    below = descendants(head.pid)
    head.terminate()
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        head.kill()
    kill_all(below)
