"""Preflight: `embodied train` and `embodied eval` run check-env's fast checks on one env before any worker
starts; a mistake stops the run with one message naming the class, its file and the fix (no run directory
left behind), and what only degrades results is a warning."""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from tests.toy_batched import PointMassBatch
from tests.toy_envs import CountingEnv

from embodied.cli import main as cli_main
from embodied.config import ConfigError, EnvConfig, load_config
from embodied.env_runtime.preflight import preflight
from embodied.evaluation.run import evaluate_checkpoint
from embodied.runs.train import train

ROOT = Path(__file__).resolve().parents[3]
HERE = "tests/embodied/env_runtime/test_preflight.py"


# -- user simulators with one mistake each ------------------------------------------------------------


class Seeded(CountingEnv):
    """CountingEnv whose observation depends only on the seed, so that reset(seed) repeats."""

    def _obs(self):
        return {"states": np.array([self.t, self.first_seed, self.np_random.random()], dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        self.first_seed = -1
        return super().reset(seed=seed, options=options)

    def render(self):
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[: 1 + self.t % 8, :, 1] = 200
        return frame


class FourTuple(Seeded):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class BoxObs(Seeded):
    """Our constructor convention, but a Box observation."""

    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0):
        super().__init__(max_episode_steps=max_episode_steps)
        self.observation_space = gym.spaces.Box(-1e9, 1e9, (3,), np.float32)

    def _obs(self):
        return np.zeros(3, np.float32)


class MisnamedKey(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0):
        super().__init__(max_episode_steps=max_episode_steps)
        self.observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1e9, 1e9, (3,), np.float32)})

    def _obs(self):
        return {"state": np.zeros(3, np.float32)}


class Float64Space(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0):
        super().__init__(max_episode_steps=max_episode_steps)
        self.observation_space = gym.spaces.Dict({"states": gym.spaces.Box(-1e9, 1e9, (3,), np.float64)})


class Float64States(Seeded):
    def _obs(self):
        return {"states": super()._obs()["states"].astype(np.float64)}


class DiscreteActions(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3)


class NotAnEnv:
    def __init__(self, obs_mode="state", max_episode_steps=50):
        pass


class NeverEnds(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0):
        super().__init__()  # ignores the time limit


class NaNObs(Seeded):
    def _obs(self):
        states = super()._obs()["states"]
        states[1] = np.nan if self.t >= 2 else states[1]
        return {"states": states}


class CrashInStep(Seeded):
    def step(self, action):
        raise RuntimeError("the physics engine diverged")


class WrongKwargType(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0, speed: float = 0.1):
        super().__init__(max_episode_steps=max_episode_steps)


class NoSuccess(Seeded):
    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {}


class IgnoresSeed(Seeded):
    def _obs(self):
        return {"states": np.array([self.t, 0.0, np.random.random()], dtype=np.float32)}


class NoRenderMode(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0):
        super().__init__(max_episode_steps=max_episode_steps)


class IgnoresAutoResetOff(PointMassBatch):
    def __init__(self, num_envs, auto_reset=True, **kwargs):
        super().__init__(num_envs, auto_reset=True, **kwargs)


class NoFinalObs(PointMassBatch):
    def chunk_step(self, actions):
        result = super().chunk_step(actions)
        result.final_obs = None
        return result


class BatchNoRender(PointMassBatch):
    def render(self):
        return None


def register(env_cls) -> str:
    """``module:Class``, as a user names their env (nothing is left registered for later tests)."""
    return f"{env_cls.__module__}:{env_cls.__qualname__}"


def toy_config(tmp_path: Path, env_cls, *overrides: str):
    """A seconds-long PPO run on ``env_cls`` with a small MLP."""
    return load_config(None, [
        f"env.id={register(env_cls)}", "env.num_envs=2", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=3",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "runner.iterations=1", "runner.eval_every=0",
        "runner.eval_episodes=2", "logger.backends=[]", "logger.progress_bar=false", "runner.plot=false",
        f"experiment.output_dir={tmp_path / 'runs'}", *overrides,
    ])


def refused(tmp_path: Path, env_cls, *overrides: str) -> str:
    """The ConfigError ``train`` raises for ``env_cls``; no run directory may be left."""
    with pytest.raises(ConfigError) as error:
        train(toy_config(tmp_path, env_cls, *overrides))
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a run directory was made for a run that never started"
    return str(error.value)


# -- mistakes stop the run before any worker starts ----------------------------------------------------


@pytest.mark.parametrize("env_cls, words, fix", [
    (FourTuple, "step() returned a tuple of 4 items", "return (obs, reward, terminated, truncated, info)"),
    (Float64States, "states is float64", "float32"),
    (NeverEnds, "no termination or truncation within max_episode_steps=6", "truncated=True"),
    (NaNObs, "step 2: states[1] is nan", "keep observations finite"),
    (CrashInStep, "RuntimeError: the physics engine diverged in step() at " + HERE, "see the traceback above"),
])
def test_a_broken_env_stops_train_with_the_check_s_message_and_fix(tmp_path, env_cls, words, fix):
    message = refused(tmp_path, env_cls)
    assert message.startswith(f"env.id '{register(env_cls)}' (")
    assert f"{env_cls.__name__} ({HERE})" in message, message  # the user's class and its file
    assert words in message and fix in message.split("fix:", 1)[1]
    assert "env.preflight=false" in message


def test_a_crash_shows_the_env_s_own_traceback(tmp_path):
    message = refused(tmp_path, CrashInStep)
    assert f'{HERE}", line' in message and 'raise RuntimeError("the physics engine diverged")' in message
    assert "embodied/check_env" not in message  # the user's frames, not the framework's


@pytest.mark.parametrize("env_cls, words", [
    (BoxObs, "observation_space must be a gymnasium.spaces.Dict"),
    (MisnamedKey, "got ['state']"),
    (Float64Space, "'states' must be a 1-D float32 Box"),
    (DiscreteActions, "Discrete action space"),
    (NotAnEnv, "is not a gymnasium env"),
])
def test_a_class_that_does_not_fit_is_named_before_anything_runs(tmp_path, env_cls, words):
    message = refused(tmp_path, env_cls)
    assert env_cls.__name__ in message and words in message
    assert "ix:" in message


def test_a_wrong_kwarg_type_is_named(tmp_path):
    message = refused(tmp_path, WrongKwargType, "env.kwargs.speed=fast")
    assert "env.kwargs.speed" in message and "float" in message


@pytest.mark.parametrize("env_cls, words", [
    (IgnoresAutoResetOff, "ran again (auto_reset=False ignored)"),
    (NoFinalObs, "final_obs is None"),
])
def test_a_batched_env_breaking_the_chunk_contract_stops_train(tmp_path, env_cls, words):
    message = refused(tmp_path, env_cls, "env.max_episode_steps=10")
    assert f"{env_cls.__name__} ({HERE})" in message and words in message


def test_videos_need_render_when_they_are_on(tmp_path):
    message = refused(tmp_path, NoRenderMode, "runner.eval_video=last")
    assert "render() frames for videos" in message and "render_mode" in message
    batched = refused(tmp_path, BatchNoRender, "runner.eval_video=last", "env.max_episode_steps=10")
    assert "render() returned NoneType None" in batched


def test_embodied_train_exits_2_with_the_message_on_stderr(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = cli_main(["train", "configs/reach_mlp_ppo.yaml", f"env.id={register(FourTuple)}",
                     "env.max_episode_steps=6", f"experiment.output_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: env.id") and "a tuple of 4 items" in err
    assert not any(tmp_path.iterdir())


def test_eval_runs_the_preflight_on_the_eval_env_before_loading_anything(tmp_path):
    cfg = toy_config(tmp_path, Seeded, f"eval_env.id={register(NeverEnds)}")
    with pytest.raises(ConfigError, match=r"(?s)eval_env.id '[\w.]*:NeverEnds'.*no termination"):
        evaluate_checkpoint(cfg, tmp_path / "no-checkpoint-needed", 2, tmp_path / "out")
    with pytest.raises(ConfigError, match="render"):
        evaluate_checkpoint(toy_config(tmp_path, NoRenderMode), tmp_path / "x", 2, tmp_path / "out", video=True)
    assert not (tmp_path / "out").exists()


# -- what only degrades results: one warning, and the run goes on ---------------------------------------


@pytest.mark.parametrize("env_cls, words", [
    (NoSuccess, "info has no 'success' key, so success_rate reads 0"),
    (IgnoresSeed, "reset(seed=0) twice gave different first observations"),
])
def test_degrading_findings_warn_once_and_the_run_goes_on(tmp_path, env_cls, words):
    with pytest.warns(UserWarning) as caught:
        result = train(toy_config(tmp_path, env_cls))
    ours = [str(w.message) for w in caught if words in str(w.message)]
    assert len(ours) == 1 and f"{env_cls.__name__} ({HERE})" in ours[0] and "fix:" in ours[0]
    assert len(result.history) == 1 and result.checkpoint is not None


def test_env_preflight_false_skips_it(tmp_path, monkeypatch):
    import embodied.runs.train

    calls = []
    monkeypatch.setattr(embodied.runs.train, "preflight_run", lambda *a, **k: calls.append(a))
    train(toy_config(tmp_path, Seeded, "env.preflight=false"))
    assert calls == []
    train(toy_config(tmp_path, Seeded))
    assert len(calls) == 1


def test_the_eval_env_is_checked_too_when_it_differs(tmp_path):
    message = refused(tmp_path, Seeded, f"eval_env.id={register(FourTuple)}")
    assert message.startswith(f"eval_env.id '{register(FourTuple)}'")


# -- the built-in tasks pass in well under a few seconds ------------------------------------------------


@pytest.mark.parametrize("env_id, obs_mode, steps", [("Reach-v0", "state", 50), ("PickColor-v0", "rgb", 80)])
def test_builtin_tasks_pass_quietly_and_quickly(env_id, obs_mode, steps, recwarn):
    t0 = time.perf_counter()
    preflight(EnvConfig(id=env_id, obs_mode=obs_mode, max_episode_steps=steps), "env", video=True)
    assert time.perf_counter() - t0 < 15  # measured ~0.3 s (Reach) and ~1 s (PickColor, rgb); CI machines vary
    assert not [w for w in recwarn if "preflight" in str(w.message) or "fix:" in str(w.message)]


def test_frames_are_checked_on_the_path_the_eval_videos_take(monkeypatch):
    """A built-in task has two paths (per env, and its batched twin); the preflight renders only the eval's,
    with one GL context."""
    from embodied.envs.mujoco_base import OffscreenRenderer
    from embodied.envs.mujoco_batched import TableTopBatchedEnv

    contexts, batched_frames = [], []
    make, render = OffscreenRenderer.__init__, TableTopBatchedEnv.render
    monkeypatch.setattr(OffscreenRenderer, "__init__", lambda self, *a, **k: contexts.append(1) or make(self, *a, **k))
    monkeypatch.setattr(TableTopBatchedEnv, "render", lambda self: batched_frames.append(1) or render(self))
    cfg = EnvConfig(id="Reach-v0", obs_mode="state", max_episode_steps=50)
    for vectorization, batched in (("per_env", False), ("native", True)):
        contexts.clear(), batched_frames.clear()
        preflight(cfg, "env", video=True, video_vectorization=vectorization)
        assert len(contexts) == 1 and bool(batched_frames) == batched, vectorization
    contexts.clear()
    preflight(cfg, "env", video=False)
    assert contexts == []
