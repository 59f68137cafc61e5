"""Shared pytest fixtures: one Ray session for the whole test run."""

from __future__ import annotations

import os

# Set before any test imports wandb or mujoco: no network logging, headless rendering.
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("MUJOCO_GL", "egl")
# Tiny VLA backbones (policy.model_path: tiny:NAME) are built once per test run, into a fresh folder
# that Ray workers inherit too, so tests never depend on (or fill) the user's cache.
if "EMBODIED_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["EMBODIED_CACHE"] = tempfile.mkdtemp(prefix="embodied-test-cache-")
    atexit.register(shutil.rmtree, os.environ["EMBODIED_CACHE"], True)

import json  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

# A stand-in ``wandb`` package. The wandb sink runs wandb in a process of its own, so a monkeypatched
# ``wandb.init`` would not reach it: the fixture puts this package first on that process's PYTHONPATH.
FAKE_WANDB = """
import json, os


def _record(entry):
    with open(os.environ["FAKE_WANDB_LOG"], "a") as f:
        f.write(json.dumps(entry) + "\\n")


class Settings:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class Video:
    def __init__(self, path, caption=None, format=None):
        self.path, self.caption, self.format = path, caption, format


class Run:
    def __init__(self, **kwargs):
        self.id = kwargs.get("id") or "fake"
        self.fail_on = os.environ.get("FAKE_WANDB_FAIL", "")
        if self.fail_on == "init":
            raise RuntimeError("cannot reach wandb")
        kwargs["settings"] = kwargs["settings"].kwargs
        _record({"init": kwargs})

    def log(self, data, step):
        if self.fail_on == "log":
            raise ConnectionError("wandb is down")
        _record({"log": {k: {"Video": v.path} if isinstance(v, Video) else v for k, v in data.items()},
                 "step": step})

    def finish(self):
        if self.fail_on == "finish":
            raise ConnectionError("wandb is down")
        _record({"finish": True})


def init(**kwargs):
    return Run(**kwargs)
"""


@dataclass
class FakeWandbRun:
    """What the stand-in wandb recorded of one run."""

    init_kwargs: dict[str, Any]
    logged: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    finished: bool = False


class FakeWandb:
    """The stand-in wandb, seen from a test: ``fail_on`` (``init``, ``log`` or ``finish``) and its ``runs``."""

    def __init__(self, log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log, self.monkeypatch = log, monkeypatch

    def fail_on(self, method: str) -> None:
        self.monkeypatch.setenv("FAKE_WANDB_FAIL", method)

    def runs(self) -> list[FakeWandbRun]:
        runs: list[FakeWandbRun] = []
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        for entry in map(json.loads, lines):
            if "init" in entry:
                runs.append(FakeWandbRun(entry["init"]))
            elif "log" in entry:
                runs[-1].logged.append((entry["step"], entry["log"]))
            else:
                runs[-1].finished = True
        return runs


@pytest.fixture
def fake_wandb(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> FakeWandb:
    """wandb, offline, replaced in the wandb sink's process by a stand-in that records each call."""
    root = tmp_path_factory.mktemp("fake_wandb")
    (root / "wandb").mkdir()
    (root / "wandb" / "__init__.py").write_text(FAKE_WANDB)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FAKE_WANDB_LOG", str(root / "calls.jsonl"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    return FakeWandb(root / "calls.jsonl", monkeypatch)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the Ray session is a Ray test (``make test-fast`` leaves them out) without saying so.

    A test that runs Ray in a subprocess says so itself (``@pytest.mark.ray``).
    """
    for item in items:
        if "ray_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Start Ray once per test session (init costs seconds); shut it down at the end.

    Imports ``ray`` lazily so test runs that need no Ray never pay for it. A Ray session
    started by someone else is reused and left running.
    """
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(autouse=True)
def same_scheduling_after_each_test() -> Iterator[None]:
    """A test that left the process's main thread at another scheduling policy (libsvtav1, run as root, makes its
    caller SCHED_FIFO 99) would make every thread started later real-time: on 2 cores their spinning starves the
    rest and the run hangs. Put the policy back after each test (``embodied.data.lerobot.video.same_scheduling``)."""
    from embodied.data.lerobot.video import same_scheduling

    with same_scheduling():
        yield
