"""Tiny deterministic envs that pin the engine's contracts without a simulator."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from embodied.core.types import EnvFootprint, EvalEpisode


class CountingEnv(gym.Env):
    """State = [step count, episode index, first reset seed]; reward = action[0] (tests read what ran).

    The episode terminates at step ``terminate_at`` and is truncated at ``truncate_at``
    (whichever comes first; 0 disables); ``success`` is true from step ``success_at`` on.
    ``obs_mode``/``max_episode_steps`` make it constructible from an ``EnvConfig``.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, terminate_at: int = 0, truncate_at: int = 0, success_at: int = 10**9, action_dim: int = 2,
                 render_mode: str | None = None, obs_mode: str = "state", max_episode_steps: int = 0) -> None:
        self.terminate_at, self.success_at = terminate_at, success_at
        self.truncate_at = truncate_at or max_episode_steps
        self.observation_space = gym.spaces.Dict({"states": gym.spaces.Box(-1e9, 1e9, (3,), np.float32)})
        self.action_space = gym.spaces.Box(-10.0, 10.0, (action_dim,), np.float32)
        self.render_mode = render_mode
        self.t = 0
        self.episode = -1
        self.first_seed = -1
        self.task_description = "count"

    def _obs(self) -> dict:
        return {"states": np.array([self.t, self.episode, self.first_seed], dtype=np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None and self.first_seed < 0:
            self.first_seed = seed
        self.t, self.episode = 0, self.episode + 1
        return self._obs(), {"success": False}

    def step(self, action):
        self.t += 1
        terminated = self.terminate_at > 0 and self.t >= self.terminate_at
        truncated = self.truncate_at > 0 and self.t >= self.truncate_at and not terminated
        success = self.t >= self.success_at
        return self._obs(), float(action[0]), terminated, truncated, {"success": success}

    def render(self):
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[..., 0] = min(255, 20 * self.t)
        return frame


class FailingEnv(CountingEnv):
    """CountingEnv that raises ``ZeroDivisionError`` in ``step`` at step ``fail_at`` of env index ``fail_env``
    (the env's first reset seed tells which one it is: seeds are ``base + index``)."""

    def __init__(self, fail_at: int = 3, fail_env: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_at, self.fail_env = fail_at, fail_env

    def step(self, action):
        if self.t + 1 == self.fail_at and self.first_seed % 1000 == self.fail_env:
            return self._broken_physics()
        return super().step(action)

    def _broken_physics(self):
        return 1 / 0  # the line a user must see


class NanEnv(CountingEnv):
    """A CountingEnv whose env ``nan_env`` (told by its first reset seed, as in ``FailingEnv``) returns NaN in
    ``what`` ("reward", "obs" or "final_obs") at step ``nan_at``."""

    def __init__(self, nan_at: int = 3, nan_env: int = 1, what: str = "reward", **kwargs) -> None:
        super().__init__(**kwargs)
        self.nan_at, self.nan_env, self.what = nan_at, nan_env, what

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.first_seed % 1000 == self.nan_env and self.t == self.nan_at:
            if self.what == "reward":
                reward = float("nan")
            else:
                obs = {**obs, "states": np.full_like(obs["states"], np.nan)}
                if self.what == "final_obs":  # NaN only in a terminal obs, on a success step
                    terminated, info = True, {**info, "success": True}
        return obs, reward, terminated, truncated, info


def unstable_reach(**kwargs):
    """Reach-v0 with a 0.5 s physics step: MuJoCo goes unstable ("Nan, Inf or huge value in QACC") in a few steps."""
    from embodied.envs.reach import ReachEnv

    env = ReachEnv(**kwargs)
    env.model.opt.timestep = 0.5
    return env


class CrashingEnv(CountingEnv):
    """A CountingEnv whose env ``crash_env`` (by first reset seed) segfaults at step ``crash_at``, as a
    broken simulator extension would: the process dies without a Python exception."""

    def __init__(self, crash_at: int = 3, crash_env: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.crash_at, self.crash_env = crash_at, crash_env

    def step(self, action):
        if self.t + 1 == self.crash_at and self.first_seed % 1000 == self.crash_env:
            import ctypes

            ctypes.string_at(0)  # a read of address 0: a real segfault, on this thread
        return super().step(action)


class FaultyEnv(CountingEnv):
    """A CountingEnv that fails once per run, at its ``fault_at``-th call of ``fault_in`` ("step", "reset" or
    "render") since construction: the first env to get there creates the file ``marker`` (atomically, so one
    env in one process wins) and then ``fault``s: "raise" (ZeroDivisionError), "hang" (blocks forever) or
    "kill" (SIGKILLs its own process: a Ray env worker killed mid-epoch). With ``marker`` already present it
    never fails, which makes the same run without the fault."""

    def __init__(self, fault: str = "raise", fault_at: int = 3, marker: str = "", fault_in: str = "step",
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.fault, self.fault_at, self.marker, self.fault_in = fault, fault_at, marker, fault_in
        self.calls = 0  # of fault_in, since construction (a restored env goes on counting from its snapshot)

    def step(self, action):
        self._maybe_fail("step")
        return super().step(action)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._maybe_fail("reset")
        return super().reset(seed=seed, options=options)

    def render(self):
        self._maybe_fail("render")
        return super().render()

    def _maybe_fail(self, call: str) -> None:
        if call != self.fault_in:
            return
        self.calls += 1
        if self.calls == self.fault_at and self.marker and self._claim():
            if self.fault == "raise":
                self._broken_physics()
            if self.fault == "hang":
                import threading

                threading.Event().wait()  # the line a hung step is stuck on
            if self.fault == "kill":
                import os
                import signal

                os.kill(os.getpid(), signal.SIGKILL)

    def _claim(self, marker: str | None = None) -> bool:
        import os

        try:
            os.close(os.open(marker or self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def _broken_physics(self):
        return 1 / 0


class SporadicFaultEnv(FaultyEnv):
    """A FaultyEnv that raises once at each multiple of ``every`` calls of ``step`` since construction (a restored env
    counts on from its snapshot), each fault claimed by one env of the run through a marker file of its own
    (``<marker>.<calls>``): transient faults, one every ``every`` steps of the run, each passing on the exact replay."""

    def __init__(self, every: int = 60, **kwargs) -> None:
        super().__init__(**kwargs)
        self.every = every

    def _maybe_fail(self, call: str) -> None:
        if call != self.fault_in:
            return
        self.calls += 1
        if self.marker and self.calls % self.every == 0 and self._claim(f"{self.marker}.{self.calls}"):
            self._broken_physics()


class WearingOutEnv(CountingEnv):
    """A CountingEnv whose env ``fail_env`` (by first reset seed, as in ``FailingEnv``) raises in every step from its
    ``fault_from``-th since it was built, whatever its state: a simulator that gives out after a while in every process
    (a GL context, a license). The count is the env's own, so an exact replay from a snapshot fails where the original
    did, and envs rebuilt from fresh seeds run ``fault_from - 1`` steps before they fail too."""

    def __init__(self, fault_from: int = 3, fail_env: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fault_from, self.fail_env = fault_from, fail_env
        self.lifetime = 0  # steps since built

    def step(self, action):
        self.lifetime += 1
        if self.lifetime >= self.fault_from and self.first_seed % 1000 == self.fail_env:
            return self._broken_physics()
        return super().step(action)

    def _broken_physics(self):
        return 1 / 0  # the GL context is gone


class ReplayFaultEnv(CountingEnv):
    """A CountingEnv that raises at its ``fail_at``-th step after a reset with seed ``fail_seed``: a bug of the
    simulator from that initial state (a configuration that explodes). The count is the env's own state, so
    every replay from a snapshot taken before fails the same way; an env reset from another seed never does."""

    def __init__(self, fail_seed: int = 1, fail_at: int = 11, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_seed, self.fail_at = fail_seed, fail_at
        self.seeded, self.since_seeded = None, 0  # the last reset seed given, and the steps since

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.seeded, self.since_seeded = seed, 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.since_seeded += 1
        if self.seeded == self.fail_seed and self.since_seeded == self.fail_at:
            return self._broken_physics()
        return super().step(action)

    def _broken_physics(self):
        return 1 / 0  # the same line on every replay


class DyingBuildEnv(CountingEnv):
    """A CountingEnv whose first construction in a process other than the driver's (the pid the file ``marker``
    holds) kills that process: an env worker OOM-killed while the run starts. The process that removes the marker
    dies; later builds are plain."""

    def __init__(self, marker: str = "", **kwargs) -> None:
        import os
        import signal

        if marker and os.path.exists(marker) and open(marker).read() != str(os.getpid()):
            try:
                os.unlink(marker)
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        super().__init__(**kwargs)


class FlakyBuildEnv(CountingEnv):
    """A CountingEnv whose constructor raises (as an EGL initialisation that loses a race does) on the first
    ``fail_builds`` constructions counted in the file ``counter`` (shared by all its envs and processes)."""

    def __init__(self, counter: str = "", fail_builds: int = 1, **kwargs) -> None:
        from pathlib import Path

        path = Path(counter)
        built = int(path.read_text()) if path.exists() else 0
        path.write_text(str(built + 1))
        if built < fail_builds:
            raise RuntimeError(f"eglInitialize failed (EGL_NOT_INITIALIZED), construction {built + 1}")
        super().__init__(**kwargs)


class BallastEnv(CountingEnv):
    """A CountingEnv holding ``mib`` MiB of its own (a simulator's model and buffers), to make a leak of
    whole envs show in the process's memory."""

    def __init__(self, mib: int = 8, **kwargs) -> None:
        super().__init__(**kwargs)
        self.ballast = np.ones(mib * 2**20, dtype=np.uint8)  # touched: resident, not just reserved


class SlowEnv(CountingEnv):
    """A CountingEnv whose every step takes ``delay`` seconds (a simulator slower than the update)."""

    def __init__(self, delay: float = 0.01, **kwargs) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def step(self, action):
        import time

        time.sleep(self.delay)
        return super().step(action)


class EpisodeSetEnv(CountingEnv):
    """A suite with a published eval set (``tasks`` x ``states`` fixed episodes), one task per env.

    The env of batch index ``env_index`` starts with task ``env_index % tasks``; a reset whose options
    name another task switches to it (a "rebuild", recorded in ``builds``). ``states[2]`` is the
    episode's code ``100 * task_id + init_state`` (or the seed without options), which the echo
    policy turns into the reward, so an episode's return per step tells which episode it played.
    """

    footprint: ClassVar[EnvFootprint] = EnvFootprint(rss_mib=1.0, build_s=0.0)
    builds: ClassVar[list[tuple[int, int]]] = []  # (env_index, task) of every build and task switch, in order

    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0, env_index: int = 0, tasks: int = 3,
                 states: int = 4, render_mode: str | None = None) -> None:
        super().__init__(obs_mode=obs_mode, max_episode_steps=max_episode_steps, render_mode=render_mode)
        self.env_index, self.tasks, self.states = env_index, tasks, states
        self.task = env_index % tasks
        self.task_description = f"task {self.task}"
        EpisodeSetEnv.builds.append((env_index, self.task))

    @classmethod
    def eval_episodes(cls, tasks: int = 3, states: int = 4, **_: Any) -> list[EvalEpisode]:
        return [EvalEpisode(f"task {t}", {"task_id": t, "init_state": k}) for t in range(tasks) for k in range(states)]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed)
        if options is not None:
            if options["task_id"] != self.task:
                self.task = options["task_id"]
                EpisodeSetEnv.builds.append((self.env_index, self.task))
            self.first_seed = 100 * options["task_id"] + options["init_state"]
        self.task_description = f"task {self.task}"
        return self._obs(), info


class FaultyTwinEnv(FaultyEnv):
    """``FaultyEnv`` under another class and task: a second member of an env mixture with the same spaces."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.task_description = "count twin"


class _PickyExpert:
    """A scripted expert that needs its env built a certain way (``env.kwargs.terminate_at: 5``), and says so."""

    @classmethod
    def check_env_config(cls, kwargs: dict) -> str:
        got = kwargs.get("terminate_at")
        return "" if got == 5 else f"env.kwargs.terminate_at: this expert needs 5 (got {got!r})"

    def reset(self, env) -> None:
        """Nothing to forget."""

    def act(self, env, obs) -> np.ndarray:
        return np.ones(2, dtype=np.float32)


class PickyCountingEnv(CountingEnv):
    """``CountingEnv`` with an expert that checks the env's kwargs (``embodied collect`` asks it first)."""

    scripted_expert = _PickyExpert
