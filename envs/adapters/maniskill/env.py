"""``ManiSkillEnv``: one ManiSkill3 task env (CPU PhysX, one env) behind embodied's observation and episode contract.

Ids are ``ManiSkill-<ManiSkill's id>`` (``ManiSkill-PickCube-v1``; ``tasks.TASKS`` lists them, ``embodied list
envs`` shows them with those needing a download marked). Configs::

    env: {id: ManiSkill-PickCube-v1, obs_mode: state, num_envs: 8,
          kwargs: {reward_mode: normalized_dense, control_mode: pd_joint_delta_pos}}

- **Observations**: ``observations``'s docstring (state, rgb, state+rgb; cameras by ManiSkill's names).
- **Episodes** are ManiSkill's: ``terminated`` on its ``success`` (or ``fail``), ``truncated`` after
  ``max_episode_steps`` (default: the task's registered cap, ``tasks.TASKS``); ``info["success"]`` is its success.
  A seeded reset rebuilds the scene (so a seed starts the same episode whatever ran before: evals repeat); an
  unseeded one (auto-reset) is ManiSkill's plain reset, whose first observation may keep the last contacts.
  ``reward_mode`` is ManiSkill's (``sparse``, ``dense``, ``normalized_dense``; None: the task's default, its first
  supported mode); ``control_mode`` too (None: the robot's default, ``pd_joint_delta_pos`` for the Panda).
- **Backends**: this class is the CPU path, ManiSkill's ``physx_cpu`` with one env in it, since ManiSkill refuses
  ``num_envs > 1`` on the CPU; the env worker holds several of them. On a CUDA machine the env factory builds the
  batched twin instead (``batched.ManiSkillBatchedEnv``, ``physx_cuda``, a whole batch in one process) unless
  ``env.vectorization: per_env``. ``sim_backend: physx_cuda`` here is refused with the reason.
- **Exact resume**: an env pickles as its constructor's arguments, ManiSkill's simulator state
  (``get_state_dict``), its RNGs, episode seed and step count; unpickled, it is rebuilt, reset with the episode's
  seed (what the episode drew at its start, e.g. a goal) and the state put back (``__setstate__``).
- **Vulkan**: ``vulkan.choose_driver`` picks the driver before SAPIEN starts; an env that cannot start Vulkan
  raises ``ManiSkillSetupError`` naming what is missing and the fix.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np

from embodied.core.types import STATES, EnvFootprint, Obs
from embodied.envs.adapters.maniskill.observations import camera_map, sensor_cameras, to_layout
from embodied.envs.adapters.maniskill.sim import (
    RewardMode, SimBackend, check_options, cuda_available, host_array, import_maniskill, make_maniskill, to_numpy,
    to_torch)
from embodied.envs.adapters.maniskill.tasks import Task, missing_assets
from embodied.envs.adapters.maniskill.vulkan import ManiSkillSetupError

# What the RNGs of a ManiSkill env are called (exact resume puts them back).
RNG_ATTRS: tuple[str, ...] = ("_main_seed", "_episode_seed", "_main_rng", "_batched_main_rng", "_episode_rng",
                              "_batched_episode_rng")


class ManiSkillEnv(gym.Env):
    """A ManiSkill3 task on CPU PhysX, one env (the task is the subclass's ``task``)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 20}
    task: ClassVar[Task]
    # Measured on a 2-core CPU with the private lavapipe (PickCube, state): about 1 s to build, ~60 MiB an env; the
    # first env of a process adds ~900 MiB (torch, SAPIEN, the Vulkan driver).
    footprint: ClassVar[EnvFootprint] = EnvFootprint(rss_mib=60, build_s=1.0, process_mib=900)
    packages: ClassVar[tuple[str, ...]] = ("mani-skill", "sapien", "torch")  # versions in eval.json

    @classmethod
    def default_max_episode_steps(cls) -> int:
        """The task's registered episode cap (ManiSkill's ``max_episode_steps``)."""
        return cls.task.max_steps

    @classmethod
    def unavailable(cls) -> str:
        """Why this task cannot run here ("" if it can): the assets it needs and ManiSkill's download command."""
        return missing_assets(cls.task)

    @classmethod
    def batched_twin(cls, obs_mode: str) -> type | None:
        """On a CUDA machine, the GPU batch (``ManiSkillBatchedEnv`` of this task); None on a CPU, where ManiSkill
        holds one env a process and the env worker holds several of this class."""
        if not cuda_available():
            return None
        from embodied.envs.adapters.maniskill.batched import batched_class

        return batched_class(cls.task)

    def __init__(
        self,
        obs_mode: Literal["state", "rgb", "state+rgb"] = "state",
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        reward_mode: RewardMode | None = None,
        control_mode: str | None = None,
        image_size: int = 128,
        cameras: list[str] | None = None,
        sim_backend: SimBackend = "auto",
    ) -> None:
        t = self.task
        check_options(t, obs_mode, image_size, render_mode)
        if sim_backend == "physx_cuda":
            raise ManiSkillSetupError(cuda_refusal(t))
        self._args = dict(obs_mode=obs_mode, max_episode_steps=max_episode_steps, render_mode=render_mode,
                          reward_mode=reward_mode, control_mode=control_mode, image_size=image_size, cameras=cameras,
                          sim_backend=sim_backend)
        self.obs_mode, self.render_mode, self.image_size = obs_mode, render_mode, image_size
        self.max_episode_steps = t.max_steps if max_episode_steps is None else int(max_episode_steps)
        self.env = make_maniskill(t, obs_mode, 1, "physx_cpu", self.max_episode_steps, render_mode, reward_mode,
                                  control_mode, image_size)
        u = self.env.unwrapped
        try:
            self.cameras = camera_map(sensor_cameras(self.env), cameras, t.env_id) if obs_mode != "state" else {}
        except ValueError:
            self.env.close()
            raise
        space = self.env.action_space
        shape = space.shape[1:] if len(space.shape) == 2 else space.shape  # ManiSkill's batched space: [1, A]
        low = np.broadcast_to(space.low, space.shape).reshape(-1, *shape)[0].astype(np.float32)
        high = np.broadcast_to(space.high, space.shape).reshape(-1, *shape)[0].astype(np.float32)
        self.action_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.reward_mode, self.control_mode = u.reward_mode, u.control_mode
        self.metadata = {**self.metadata, "render_fps": int(u.control_freq)}
        self._steps = 0
        obs, _ = self.env.reset(seed=0)  # the spaces from a real observation (ManiSkill's sizes vary by task)
        self.observation_space = gym.spaces.Dict(
            {k: gym.spaces.Box(-np.inf, np.inf, v.shape[1:], np.float32) if k == STATES
             else gym.spaces.Box(0, 255, v.shape[1:], np.uint8) for k, v in self._layout(obs).items()})

    # -- the gymnasium API ---------------------------------------------------------------------

    @property
    def task_description(self) -> str:
        return self.task.description

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"{self.task.env_id}: reset takes no options, got {sorted(options)}")
        # A seeded reset rebuilds the scene (ManiSkill's reconfigure, about 0.2 s for PickCube): a plain one keeps
        # the last step's contacts, so the first observation's contact fields (PickCube's is_grasped) came from the
        # episode before and one seed did not always start one episode (ManiSkill's evals reconfigure too).
        obs, info = self.env.reset(seed=seed, options={"reconfigure": True} if seed is not None else None)
        self._steps = 0
        return self._numpy(obs), {"success": _flag(info.get("success", False))}

    def step(self, action: np.ndarray) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        import torch

        action = np.clip(np.asarray(action, np.float32).reshape(self.action_space.shape), self.action_space.low,
                         self.action_space.high)
        obs, reward, terminated, truncated, info = self.env.step(torch.from_numpy(action)[None])
        self._steps += 1
        truncated = _flag(truncated) or self._steps >= self.max_episode_steps
        return (self._numpy(obs), float(np.asarray(reward, np.float32).reshape(-1)[0]), _flag(terminated),
                truncated and not _flag(terminated), {"success": _flag(info.get("success", False))})

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """ManiSkill's render camera at ``image_size`` (uint8 [S, S, 3]) when made with ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array":
            return None
        return np.asarray(self.env.render()[0].cpu().numpy(), dtype=np.uint8)

    def close(self) -> None:
        env, self.env = getattr(self, "env", None), None
        if env is not None:
            env.close()

    def provenance(self) -> dict[str, Any]:
        """What can move an eval number beside the package versions: the driver, backend, modes, cameras, caps."""
        driver = import_maniskill()
        return {"task": self.task.maniskill_id, "sim_backend": "physx_cpu", "obs_mode": self.obs_mode,
                "reward_mode": self.reward_mode, "control_mode": self.control_mode, "image_size": self.image_size,
                "cameras": self.cameras, "max_episode_steps": self.max_episode_steps,
                "vulkan": {"source": driver.source, "manifest": driver.manifest, "version": driver.version,
                           "device": render_device(self.env)}}

    # -- exact resume --------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        u = self.env.unwrapped
        sim = {k: to_numpy(v) for k, v in u.get_state_dict().items()}
        rngs = {a: _plain_rng(getattr(u, a)) for a in RNG_ATTRS if hasattr(u, a)}  # plain data: pickled with the rest
        return {"args": self._args, "sim": sim, "rngs": rngs, "steps": self._steps,
                "elapsed": to_numpy(u._elapsed_steps)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        import torch

        self.__init__(**state["args"])
        u = self.env.unwrapped
        rngs = state["rngs"]
        self.env.reset(seed=int(np.asarray(rngs["_episode_seed"]).reshape(-1)[0]))  # what the episode drew at start
        for name, value in rngs.items():
            setattr(u, name, _batched_rng(value))
        u.set_state_dict(to_torch(state["sim"], u.device))
        u._elapsed_steps[:] = torch.as_tensor(state["elapsed"], device=u.device)
        self._steps = state["steps"]

    # -- internals -----------------------------------------------------------------------------

    def _layout(self, raw: Any) -> dict[str, Any]:
        return to_layout(raw, self.obs_mode, self.cameras)

    def _numpy(self, raw: Any) -> Obs:
        return {k: np.array(v[0].cpu().numpy(), dtype=np.float32 if k == STATES else np.uint8, copy=True)
                for k, v in self._layout(raw).items()}


def cuda_refusal(task: Task) -> str:
    """Why ``physx_cuda`` is refused on the per-env path."""
    if not cuda_available():
        return (f"{task.env_id}: env.kwargs.sim_backend physx_cuda needs a CUDA device, and this machine has none "
                f"(torch.cuda.is_available() is False); use physx_cpu (or auto), one env a process")
    return (f"{task.env_id}: physx_cuda runs as one batch of envs in one env worker (ManiSkillBatchedEnv), which the "
            f"env factory builds when env.vectorization is native; this per-env path is physx_cpu")


def render_device(env: Any) -> str:
    """The name of the Vulkan device SAPIEN renders with."""
    try:
        return str(env.unwrapped._render_device.name)
    except Exception:  # noqa: BLE001 - informative only
        return ""


def _plain_rng(value: Any) -> Any:
    """ManiSkill's ``BatchedRNG`` proxies every method to its generators, pickling too: its generators instead."""
    return ("BatchedRNG", list(value.rngs)) if type(value).__name__ == "BatchedRNG" else value


def _batched_rng(value: Any) -> Any:
    if isinstance(value, tuple) and value and value[0] == "BatchedRNG":
        from mani_skill.envs.utils.randomization.batched_rng import BatchedRNG

        return BatchedRNG.from_rngs(value[1])
    return value


def _flag(value: Any) -> bool:
    return bool(host_array(value).reshape(-1)[0])
