"""``ManiSkillBatchedEnv``: a batch of one ManiSkill task on GPU PhysX (``physx_cuda``) in one env worker.

The CUDA path, as the built-in tasks' native batched path (``envs/mujoco_batched.py``): the env factory builds it
through ``ManiSkillEnv.batched_twin`` when CUDA is available and ``env.vectorization`` is ``native``. One ManiSkill
env of ``num_envs`` parallel scenes steps the whole batch per sub-step; the chunk-step contract
(``envs/chunked.py``) is kept on the batch's tensors:

- a chunk's sub-step ``c`` steps every env; an env whose episode ended earlier in the chunk is stepped too (one
  batched call) but not executed: its reward is 0, its flags False, and its observation the terminal one;
- with ``auto_reset`` the done envs are reset together at the chunk boundary (ManiSkill's partial reset,
  ``options={"env_idx": ...}``), ``final_obs`` holding their terminal observations; without it they stay done;
- observations are computed on the device and cross to the host once per chunk, as the contract's numpy arrays.

Without CUDA, ``physx_cuda`` is refused with the reason; ``sim_backend: physx_cpu`` with ``num_envs: 1`` runs the
same code on the CPU (what the tests check of it here), and more CPU envs are refused (ManiSkill holds one CPU env
a process: build ``ManiSkillEnv`` per env instead, ``env.vectorization: per_env``).
"""

from __future__ import annotations

import functools
import pickle
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np

from embodied.core import pickles
from embodied.core.types import STATES, TASK_DESCRIPTIONS, ChunkStepResult, EpisodeStats, Obs
from embodied.envs.adapters.maniskill.observations import camera_map, sensor_cameras, to_layout
from embodied.envs.adapters.maniskill.sim import (
    RewardMode, SimBackend, check_options, cuda_available, host_array, import_maniskill, make_maniskill, to_numpy,
    to_torch)
from embodied.envs.adapters.maniskill.tasks import Task
from embodied.envs.adapters.maniskill.vulkan import ManiSkillSetupError
from embodied.envs.batched import check_chunk_actions


def choose_backend(task: Task, sim_backend: str, num_envs: int) -> str:
    """The PhysX backend a batch of ``num_envs`` runs on, or ``ManiSkillSetupError`` saying why it cannot."""
    cuda = cuda_available()
    if sim_backend == "auto":
        sim_backend = "physx_cuda" if cuda else "physx_cpu"
    if sim_backend == "physx_cuda" and not cuda:
        raise ManiSkillSetupError(
            f"{task.env_id}: a batch on GPU PhysX (physx_cuda) needs a CUDA device, and this machine has none "
            f"(torch.cuda.is_available() is False); on a CPU ManiSkill runs one env a process: env.vectorization: "
            f"per_env (ManiSkillEnv per env; what the env factory picks by itself without CUDA)")
    if sim_backend == "physx_cpu" and num_envs > 1:
        raise ManiSkillSetupError(
            f"{task.env_id}: ManiSkill's CPU PhysX (physx_cpu) holds one env, not {num_envs}: use physx_cuda on a "
            f"CUDA machine, or env.vectorization: per_env (ManiSkillEnv per env)")
    return sim_backend


class ManiSkillBatchedEnv:
    """``num_envs`` envs of one ManiSkill task stepped as one batch (a ``BatchedEnv``; the task is ``task``)."""

    batched: ClassVar[bool] = True  # implements embodied.envs.batched.BatchedEnv
    task: ClassVar[Task]
    packages: ClassVar[tuple[str, ...]] = ("mani-skill", "sapien", "torch")

    def __init__(self, num_envs: int, auto_reset: bool = True,
                 obs_mode: Literal["state", "rgb", "state+rgb"] = "state", max_episode_steps: int | None = None,
                 render_mode: str | None = None, reward_mode: RewardMode | None = None,
                 control_mode: str | None = None, image_size: int = 128, cameras: list[str] | None = None,
                 sim_backend: SimBackend = "auto") -> None:
        t = self.task
        check_options(t, obs_mode, image_size, render_mode)
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        self.sim_backend = choose_backend(t, sim_backend, num_envs)
        self._args = dict(num_envs=num_envs, auto_reset=auto_reset, obs_mode=obs_mode,
                          max_episode_steps=max_episode_steps, render_mode=render_mode, reward_mode=reward_mode,
                          control_mode=control_mode, image_size=image_size, cameras=cameras, sim_backend=sim_backend)
        self.name = t.env_id
        self.num_envs, self.auto_reset, self.obs_mode, self.render_mode = num_envs, auto_reset, obs_mode, render_mode
        self.max_episode_steps = t.max_steps if max_episode_steps is None else int(max_episode_steps)
        # ManiSkill's own truncation is left off: this class counts steps per env and truncates at the cap.
        self.env = make_maniskill(t, obs_mode, num_envs, self.sim_backend, self.max_episode_steps + 1, render_mode,
                                  reward_mode, control_mode, image_size)
        u = self.env.unwrapped
        self.device = u.device
        self.cameras = camera_map(sensor_cameras(self.env), cameras, t.env_id) if obs_mode != "state" else {}
        space = u.single_action_space
        self.single_action_space = gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32),
                                                  dtype=np.float32)
        self.action_dim = int(self.single_action_space.shape[0])
        obs, _ = self.env.reset(seed=list(range(num_envs)))
        first = self._layout(obs)
        self.single_observation_space = gym.spaces.Dict(
            {k: gym.spaces.Box(-np.inf, np.inf, tuple(v.shape[1:]), np.float32) if k == STATES
             else gym.spaces.Box(0, 255, tuple(v.shape[1:]), np.uint8) for k, v in first.items()})
        self.metadata = {"render_fps": int(u.control_freq)}
        self._obs: dict[str, Any] = first  # tensors [N, ...] on the device
        self._zero_stats()

    def _zero_stats(self) -> None:
        n = self.num_envs
        self._elapsed = np.zeros(n, np.int64)
        self._finished = np.zeros(n, bool)
        self._ret, self._success_once, self._success_last = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)

    # -- the BatchedEnv protocol ---------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env (env ``i`` from ``seed + i``, the scene rebuilt); the batched first observation."""
        seeds = None if seed is None else [seed + i for i in range(self.num_envs)]
        # Seeded, the scene is rebuilt, as ManiSkillEnv.reset does and for its reason (stale contacts).
        obs, info = self.env.reset(seed=seeds, options={"reconfigure": True} if seeds is not None else None)
        self._obs = self._layout(obs)
        self._zero_stats()
        self._success_last[:] = host_array(info.get("success", np.zeros(self.num_envs, bool)))
        return self._batch(self._obs)

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """One action chunk float32 [B, C, A] under the chunk-step contract (the module docstring)."""
        import torch

        actions = check_chunk_actions(actions, self.num_envs, self.action_dim, self.name)
        n, chunk = actions.shape[:2]
        low, high = self.single_action_space.low, self.single_action_space.high
        on_device = torch.as_tensor(np.clip(actions, low, high), device=self.device)
        rewards, executed = np.zeros((n, chunk), np.float32), np.zeros((n, chunk), bool)
        terminations, truncations = np.zeros((n, chunk), bool), np.zeros((n, chunk), bool)
        dones = np.zeros(n, bool)
        live = ~self._finished
        for c in range(chunk):
            running = live & ~dones
            if not running.any():
                break
            obs, reward, terminated, _, info = self.env.step(on_device[:, c])
            layout = self._layout(obs)
            run = torch.as_tensor(running, device=self.device)
            self._obs = {k: torch.where(_rows(run, v), v, self._obs[k]) for k, v in layout.items()}
            r, term, success = host_array(reward).astype(np.float32), host_array(terminated), host_array(info["success"])
            self._elapsed[running] += 1
            trunc = running & ~term & (self._elapsed >= self.max_episode_steps)
            executed[:, c], rewards[running, c] = running, r[running]
            terminations[:, c], truncations[:, c] = running & term, trunc
            self._ret[running] += r[running]
            self._success_once[running] |= success[running]
            self._success_last[running] = success[running]
            dones |= running & (term | trunc)
        return self._finish_chunk(rewards, terminations, truncations, executed, dones)

    def _finish_chunk(self, rewards: np.ndarray, terminations: np.ndarray, truncations: np.ndarray,
                      executed: np.ndarray, dones: np.ndarray) -> ChunkStepResult:
        done_idx = np.flatnonzero(dones)
        episodes = [EpisodeStats(int(i), float(self._ret[i]), int(self._elapsed[i]), bool(self._success_once[i]),
                                 bool(self._success_last[i]), self.task.description) for i in done_idx]
        final_obs = self._batch(self._obs) if len(done_idx) else None
        if len(done_idx) and self.auto_reset:
            obs, _ = self.env.reset(options={"env_idx": _index(done_idx, self.device)})
            import torch

            fresh = self._layout(obs)
            mask = torch.as_tensor(dones, device=self.device)
            self._obs = {k: torch.where(_rows(mask, v), fresh[k], self._obs[k]) for k, v in self._obs.items()}
            self._elapsed[done_idx], self._ret[done_idx] = 0, 0.0
            self._success_once[done_idx] = self._success_last[done_idx] = False
        elif len(done_idx):
            self._finished[done_idx] = True
        return ChunkStepResult(self._batch(self._obs), rewards, terminations, truncations, executed, dones, final_obs,
                               episodes)

    def render(self) -> list[np.ndarray]:
        """One frame per env from ManiSkill's render camera (``render_mode="rgb_array"``)."""
        frames = host_array(self.env.render()).astype(np.uint8)
        return [frames[i] for i in range(self.num_envs)]

    def close(self) -> None:
        env, self.env = getattr(self, "env", None), None
        if env is not None:
            env.close()

    @property
    def finished(self) -> np.ndarray:
        """bool [B]: envs whose episode is over and not yet reset (only with ``auto_reset=False``)."""
        return self._finished.copy()

    def provenance(self) -> dict[str, Any]:
        """As ``ManiSkillEnv.provenance``, with this batch's backend."""
        driver = import_maniskill()
        return {"task": self.task.maniskill_id, "sim_backend": self.sim_backend, "obs_mode": self.obs_mode,
                "num_envs": self.num_envs, "cameras": self.cameras, "max_episode_steps": self.max_episode_steps,
                "vulkan": {"source": driver.source, "manifest": driver.manifest, "version": driver.version}}

    # -- exact resume (restarts, checkpoints) --------------------------------------------------

    def get_state(self) -> bytes:
        """The batch mid-episode: ManiSkill's simulator state, observations and episode counters, pickled."""
        u = self.env.unwrapped
        sim = {k: to_numpy(v) for k, v in u.get_state_dict().items()}
        obs = {k: to_numpy(v) for k, v in self._obs.items()}
        counters = (self._elapsed, self._finished, self._ret, self._success_once, self._success_last)
        return pickle.dumps((sim, obs, counters))

    def set_state(self, state: bytes) -> None:
        """Put back what ``get_state`` saved (PhysX's contact caches are not in ManiSkill's state: see
        docs/results/maniskill.md, exact resume)."""
        sim, obs, counters = pickles.loads(state)  # noqa: S301 - the run's own checkpoint
        u = self.env.unwrapped
        u.set_state_dict(to_torch(sim, self.device))
        self._obs = to_torch(obs, self.device)
        self._elapsed, self._finished, self._ret, self._success_once, self._success_last = counters

    # -- internals -----------------------------------------------------------------------------

    def _layout(self, raw: Any) -> dict[str, Any]:
        return to_layout(raw, self.obs_mode, self.cameras)

    def _batch(self, obs: dict[str, Any]) -> Obs:
        out: Obs = {k: host_array(v).astype(np.float32 if k == STATES else np.uint8) for k, v in obs.items()}
        out[TASK_DESCRIPTIONS] = [self.task.description] * self.num_envs
        return out


@functools.cache
def batched_class(task: Task) -> type:
    """The ``ManiSkillBatchedEnv`` subclass of ``task`` (what ``ManiSkillEnv.batched_twin`` offers on CUDA)."""
    name = f"{task.class_name}_Batched"
    doc = f"ManiSkill3's {task.maniskill_id} as one GPU batch (physx_cuda)."
    return type(name, (ManiSkillBatchedEnv,), {"task": task, "__doc__": doc, "__module__": __name__})


def __getattr__(name: str) -> Any:
    """The batched class of a task by name (so that it pickles), made on first use."""
    from embodied.envs.adapters.maniskill.tasks import BY_CLASS

    base = name.removesuffix("_Batched")
    if name.endswith("_Batched") and base in BY_CLASS:
        return batched_class(BY_CLASS[base])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _rows(mask: Any, like: Any) -> Any:
    """A bool [N] mask shaped to broadcast over ``like`` [N, ...]."""
    return mask.reshape(-1, *([1] * (like.ndim - 1)))


def _index(rows: np.ndarray, device: Any) -> Any:
    import torch

    return torch.as_tensor(rows, device=device, dtype=torch.long)
