"""``make_vector_env``: argument checks up front, the classes it builds and what it tells the policy (a ``BatchedEnv``
of one's own under the chunk-step contract: ``tests/envs/test_batched_env.py``)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from tests.toy_batched import PointMassBatch
from tests.toy_envs import CountingEnv

from embodied.backends import LocalBackend
from embodied.config import ConfigError, EnvConfig, load_config
from embodied.core.registry import ENVS, PluginError
from embodied.core.types import STATES
from embodied.env_runtime.factory import check_env_config, make_vector_env, policy_spec
from embodied.envs.batched import BatchedEnv, is_batched
from embodied.envs.chunked import ChunkedVectorEnv
from embodied.policy.base import PolicySpec, build_policy
from embodied.workers.group import Workers

BATCHED_ID = "tests.toy_batched:PointMassBatch"
COUNTING_ID = "tests.toy_envs:CountingEnv"
PLAIN_ID = "tests.plain_envs:PointReach"  # a plain gymnasium class: render_mode and its own max_steps


# -- constructor arguments are checked before any env is built ----------------------------------


@pytest.mark.parametrize("env_id", [COUNTING_ID, BATCHED_ID, "Reach-v0"])
def test_unknown_kwargs_key_names_the_field(env_id):
    cfg = EnvConfig(id=env_id, kwargs={"bogus_option": 1})
    with pytest.raises(ConfigError) as info:
        make_vector_env(cfg, 2)
    msg = str(info.value)
    assert "env.kwargs.bogus_option" in msg and "does not accept" in msg


def test_unknown_kwargs_key_under_eval_env():
    cfg = EnvConfig(id=COUNTING_ID, kwargs={"terminate_at": 3, "colour": "red"})
    with pytest.raises(ConfigError, match=r"eval_env\.kwargs\.colour") as info:
        make_vector_env(cfg, 2, section="eval_env")
    assert "terminate_at" not in str(info.value).split("does not accept")[1].split(";")[0]


def test_constructor_without_the_standard_arguments_names_them():
    cfg = EnvConfig(id="tests.embodied.env_runtime.test_env_factory:bare_env")
    with pytest.raises(ConfigError, match=r"env\.obs_mode, env\.max_episode_steps"):
        make_vector_env(cfg, 1)


def bare_env():
    """An env constructor that takes none of the standard arguments."""
    raise AssertionError("must not be called")


def test_gymnasium_envs_are_wrapped_and_batched_envs_built_directly():
    venv = make_vector_env(EnvConfig(id=COUNTING_ID, kwargs={"terminate_at": 3}), 3)
    assert isinstance(venv, ChunkedVectorEnv) and venv.num_envs == 3
    venv.close()
    assert not is_batched(CountingEnv) and is_batched(PointMassBatch)
    venv = make_vector_env(EnvConfig(id=BATCHED_ID, auto_reset=False, max_episode_steps=7,
                                     kwargs={"speed": 0.2}), 4, render_mode="rgb_array")
    assert isinstance(venv, PointMassBatch) and isinstance(venv, BatchedEnv)
    assert (venv.num_envs, venv.auto_reset, venv.max_episode_steps, venv.speed) == (4, False, 7, 0.2)
    assert venv.render_mode == "rgb_array"


# -- plain gymnasium classes: kwargs checked against their own signature, bad input refused --------


def test_the_issues_plain_class_builds_through_the_adapter():
    cfg = EnvConfig(id=PLAIN_ID, max_episode_steps=7, kwargs={"max_steps": 100, "speed": 0.2})
    check_env_config(cfg)  # no longer "does not accept ['obs_mode', 'max_episode_steps']"
    venv = make_vector_env(cfg, 2)
    try:
        assert venv.reset(seed=0)[STATES].shape == (2, 4) and venv.envs[0].max_episode_steps == 7
    finally:
        venv.close()


def test_unknown_kwargs_of_a_plain_class_name_the_field_and_its_parameters():
    with pytest.raises(ConfigError) as info:
        check_env_config(EnvConfig(id=PLAIN_ID, kwargs={"max_step": 20}), "eval_env")
    msg = str(info.value)
    assert msg.startswith("eval_env.kwargs.max_step: env 'tests.plain_envs:PointReach' (tests.plain_envs.PointReach)")
    assert "['render_mode', 'max_steps', 'speed', 'mode']" in msg and "success_key" in msg


@pytest.mark.parametrize("env_id, key, value, words", [
    (PLAIN_ID, "max_steps", "20", "takes max_steps: int, got str '20'"),
    (PLAIN_ID, "max_steps", 2.5, "takes max_steps: int, got float 2.5"),
    (PLAIN_ID, "speed", "fast", "takes speed: float, got str 'fast'"),
    (PLAIN_ID, "mode", "medium", "takes mode: Literal['easy', 'hard'], got str 'medium'"),
    (PLAIN_ID, "render_mode", 3, "takes render_mode: str | None, got int 3"),
    (PLAIN_ID, "image_size", "64", "takes image_size: int, got str '64'"),  # an option of the adapter
    (COUNTING_ID, "terminate_at", "3", "takes terminate_at: int, got str '3'"),  # our convention too
    (BATCHED_ID, "speed", [0.1], "takes speed: float, got list [0.1]"),
])
def test_a_constructor_kwarg_of_the_wrong_type_fails_before_any_env_is_built(env_id, key, value, words):
    with pytest.raises(ConfigError) as info:
        check_env_config(EnvConfig(id=env_id, kwargs={key: value}))
    msg = str(info.value)
    assert msg.startswith(f"env.kwargs.{key}: env '{env_id}'") and words in msg and "Fix:" in msg


def test_right_types_pass_including_ints_for_floats():
    check_env_config(EnvConfig(id=PLAIN_ID, kwargs={"speed": 1, "max_steps": 9, "mode": "hard", "render_mode": None}))
    check_env_config(EnvConfig(id=BATCHED_ID, kwargs={"speed": 1}))


@pytest.mark.parametrize("env_id, words", [
    ("tests.plain_envs:NotAnEnv", "is not a gymnasium env: it subclasses neither gymnasium.Env"),
    ("tests.plain_envs:HalfConvention", "takes obs_mode but not max_episode_steps"),
])
def test_classes_that_are_no_gymnasium_env_or_ambiguous_fail_in_the_config_check(env_id, words):
    with pytest.raises(ConfigError) as info:
        check_env_config(EnvConfig(id=env_id))
    msg = str(info.value)
    assert msg.startswith(f"env.id: env '{env_id}' ({env_id.replace(':', '.')})") and words in msg
    assert "Fix: " in msg


@pytest.mark.parametrize("env_id, words", [
    ("tests.plain_envs:OwnConventionWrongKeys", "its observation keys must be among ['states', 'main_images', "
                                                "'wrist_images']; got ['goal', 'pos']. Fix: rename them"),
    ("tests.plain_envs:OwnConventionFloat64", "'states' must be a 1-D float32 Box; got Box(-1.0, 1.0, (4,), float64)"
                                              ". Fix: declare Box(..., shape=(S,), dtype=np.float32)"),
    ("tests.plain_envs:ChoosesDiscretely", "has a Discrete action space"),
])
def test_bad_spaces_are_refused_when_the_env_is_built_naming_the_class_and_the_fix(env_id, words):
    cls = env_id.replace(":", ".") if "OwnConvention" in env_id else env_id
    with pytest.raises(PluginError) as info:  # the framework's finding, not wrapped as a crash of the env
        make_vector_env(EnvConfig(id=env_id), 2)
    msg = str(info.value)
    assert cls in msg and words in msg, msg


def test_adapter_options_on_a_class_of_our_convention_say_why():
    with pytest.raises(ConfigError, match=r"env.kwargs.success_key: .*options of the gymnasium adapter"):
        check_env_config(EnvConfig(id=COUNTING_ID, kwargs={"success_key": "done"}))


def test_a_plain_class_trains_with_the_mlp(tmp_path):
    from embodied.runs.train import train

    cfg = load_config(None, [
        f"env.id={PLAIN_ID}", "env.num_envs=4", "env.max_episode_steps=12", "env.kwargs={speed: 0.2}",
        "eval_env.num_envs=2", "runner.eval_episodes=2", "runner.iterations=2", "runner.eval_every=0",
        "policy.type=mlp", "policy.action_chunk=2", "policy.hidden_sizes=[16]", "rollout.chunk_steps=4",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=1", "logger.progress_bar=false",
        "logger.backends=[console]", "runner.plot=false", f"experiment.output_dir={tmp_path}",
    ])
    result = train(cfg)
    assert len(result.history) == 2 and all(math.isfinite(m["train/policy_loss"]) for m in result.history)
    assert result.final_eval["eval/episodes"] >= 2


def test_policy_spec_from_the_spaces():
    venv = PointMassBatch(num_envs=2)
    spec = policy_spec(venv.single_observation_space, venv.single_action_space)
    assert spec == PolicySpec(state_dim=6, image_shape=None, action_dim=2, action_low=(-1.0, -1.0),
                              action_high=(1.0, 1.0))
    venv = PointMassBatch(num_envs=2, obs_mode="rgb", image_size=8)
    spec = policy_spec(venv.single_observation_space, venv.single_action_space)
    assert spec.state_dim == 0 and spec.image_shape == (8, 8, 3)


# -- the toy BatchedEnv through the workers ------------------------------------------------------


@pytest.fixture
def local_backend():
    backend = LocalBackend()
    yield backend
    backend.shutdown()


def test_batched_env_trains_through_the_workers(local_backend):
    cfg = load_config(None, [
        f"env.id={BATCHED_ID}", "env.num_envs=5", "env.max_episode_steps=7", "env.kwargs={speed: 0.05}",
        "eval_env.num_envs=3", "cluster.num_env_workers=2", "cluster.num_rollout_workers=2",
        "policy.type=mlp", "policy.action_chunk=3", "policy.hidden_sizes=[16]",
        "rollout.chunk_steps=4", "algorithm.num_minibatches=2", "algorithm.update_epochs=2", "runner.iterations=2",
    ])
    workers = Workers.start(cfg, local_backend)
    try:
        assert workers.spec == PolicySpec(6, None, 2, (-1.0, -1.0), (1.0, 1.0))
        assert workers.sync_weights() == 0
        rollout = workers.rollout(cfg.rollout.chunk_steps)
        trajectories = workers.take_trajectories(rollout)
        traj_envs = sum(t.actions.shape[1] for t in trajectories)
        assert traj_envs == 5
        for t in trajectories:
            assert t.actions.shape[0] == 4 and t.actions.shape[2:] == (3, 2)
            assert t.logprobs.shape == t.values.shape == t.actions.shape[:2]
        # 12 sub-steps with episodes of 7: every env truncates once, in chunk step 3 (sub-step 7).
        dones = np.concatenate([t.dones.numpy() for t in trajectories], axis=1)
        assert dones.sum() >= 5
        steps = sum(t.num_env_steps for t in trajectories)
        assert 5 * 7 <= steps <= 5 * 12
        metrics = workers.update(workers.rollout(cfg.rollout.chunk_steps), iteration=1)
        assert metrics and all(math.isfinite(v) for v in metrics.values()), metrics
        assert workers.sync_weights() == 1
        episodes = workers.evaluate(episodes=3)
        assert len(episodes) == 3 and all(e.length <= 7 for e in episodes)
    finally:
        workers.close()


def test_mlp_policy_builds_from_the_batched_env_spec():
    cfg = load_config(None, ["policy.hidden_sizes=[8]", "policy.action_chunk=2"])
    venv = PointMassBatch(num_envs=4)
    obs = venv.reset(seed=0)
    policy = build_policy(cfg.policy, policy_spec(venv.single_observation_space, venv.single_action_space))
    out = policy.act(obs)
    result = venv.chunk_step(out.actions.numpy())
    assert result.rewards.shape == (4, 2)


def test_control_frequency_is_the_envs_render_fps_or_none():
    from embodied.config import EnvConfig
    from embodied.env_runtime.factory import control_frequency

    assert control_frequency(EnvConfig(id="Reach-v0")) == 20.0  # 1 / (timestep x frame_skip)
    assert control_frequency(EnvConfig(id="tests.plain_envs:PointReach")) == 10.0  # through the adapter
    assert control_frequency(EnvConfig(id="tests.toy_envs:CountingEnv")) is None  # declares none


def test_control_frequency_builds_no_env_where_the_class_declares_it(monkeypatch):
    """collect and sft read the rate; built for it, a LIBERO env cost the driver seconds and about a GB."""
    from embodied.config import EnvConfig
    from embodied.env_runtime.factory import control_frequency
    from embodied.envs.adapters.libero.env import LiberoEnv
    from embodied.envs.mujoco_base import TableTopEnv

    for env_id in ("Reach-v0", "Push-v0", "PickPlace-v0", "Stack-v0", "PickColor-v0"):  # the class says what its envs do
        env = ENVS.resolve(env_id)()
        assert ENVS.resolve(env_id).control_frequency() == env.metadata["render_fps"] == 20, env_id
        env.close()

    def refusing(init):
        @functools.wraps(init)  # the same signature: the registry still takes the class as it is
        def refuse(self, *args, **kwargs):
            raise AssertionError(f"{type(self).__name__} was built to read its control frequency")
        return refuse

    monkeypatch.setattr(TableTopEnv, "__init__", refusing(TableTopEnv.__init__))
    monkeypatch.setattr(LiberoEnv, "__init__", refusing(LiberoEnv.__init__))
    assert control_frequency(EnvConfig(id="Reach-v0")) == 20.0
    assert control_frequency(EnvConfig(id="LIBERO-Object-v0", obs_mode="state+rgb",
                                       kwargs={"task_ids": [0], "image_size": 128})) == 20.0


def test_an_env_that_declares_its_episode_cap_keeps_it_unless_the_config_sets_one(monkeypatch):
    """A LIBERO recipe that left env.max_episode_steps out cut every episode at 50 steps, the schema's default then,
    with no error: the suites' published caps (220-520) never applied. Now the env's own cap holds."""
    from embodied.env_runtime.factory import episode_steps
    from embodied.envs.adapters.libero.env import LiberoEnv

    given: list[int] = []

    @functools.wraps(LiberoEnv.__init__)  # the same signature: the registry still takes the class as it is
    def record(self, *args, **kwargs):
        given.append(kwargs["max_episode_steps"])
        raise RuntimeError("recorded, not built")

    monkeypatch.setattr(LiberoEnv, "__init__", record)
    for env_id, steps in (("LIBERO-Object-v0", None), ("LIBERO-10-v0", None), ("LIBERO-Object-v0", 60)):
        cfg = EnvConfig(id=env_id, num_envs=1, max_episode_steps=steps, build_retries=0)
        with pytest.raises(Exception, match="recorded, not built"):
            make_vector_env(cfg, 1)
    assert given == [280, 520, 60]  # the suites' published caps; a config that sets one wins

    for vectorization in ("per_env", "native"):  # a built-in task: PickPlace-v0 declares 100
        venv = make_vector_env(EnvConfig(id="PickPlace-v0", num_envs=1, vectorization=vectorization), 1)
        assert getattr(venv, "envs", [venv])[0].max_episode_steps == 100
        venv.close()
    venv = make_vector_env(EnvConfig(id="PickPlace-v0", num_envs=1, max_episode_steps=30), 1)
    assert venv.max_episode_steps == 30
    venv.close()
    assert episode_steps(EnvConfig(id="tests.toy_envs:CountingEnv")) == 50  # declares none (its default 0 is no cap)
    assert episode_steps(load_config(None, ["env.id=Stack-v0"]).resolved_eval_env()) == 150  # eval envs too


def test_grpo_checks_whole_episodes_against_the_envs_own_cap_before_any_worker_starts(tmp_path):
    from embodied.runs.train import check_before_start

    overrides = ["env.id=PickPlace-v0", "algorithm.name=grpo", "env.auto_reset=false", "env.num_envs=8",
                 "algorithm.group_size=4", "policy.action_chunk=4", "env.preflight=false"]
    cfg = load_config(None, [*overrides, "rollout.chunk_steps=20"])  # 80 sub-steps: the config cannot tell
    with pytest.raises(ConfigError, match=r"rollout.chunk_steps: algorithm.name=grpo needs whole episodes, "
                                          r"but 20 chunk steps x "
                                          r"policy.action_chunk=4 = 80 sub-steps < env.max_episode_steps=100 "
                                          r"\(the env's own cap"):
        check_before_start(cfg)
    check_before_start(load_config(None, [*overrides, "rollout.chunk_steps=25"]))


def test_eval_envs_step_per_env_by_default_and_training_envs_natively():
    """A batched twin gives one frame per chunk step and matches the per-env path to ~1e-13: eval envs default to
    the per-env path, so videos get a frame per sub-step and an eval's numbers do not depend on --video."""
    from embodied.config import load_config
    from embodied.envs.chunked import ChunkedVectorEnv
    from embodied.env_runtime.factory import make_vector_env

    cfg = load_config(None, ["env.id=Reach-v0", "env.num_envs=2"])
    native, evaluation = make_vector_env(cfg.env, 2), make_vector_env(cfg.resolved_eval_env(), 2, "eval_env")
    try:
        assert getattr(type(native), "batched", False) and not isinstance(native, ChunkedVectorEnv)
        assert isinstance(evaluation, ChunkedVectorEnv)
    finally:
        native.close()
        evaluation.close()
