"""LiberoObjectExpert.resync: the phase re-derived from the simulator's state where something else drove it (DAgger's
labels on a policy's states), and left alone where the expert drove itself."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="pip install 'embodied[libero]'")
pytestmark = [pytest.mark.libero, pytest.mark.slow]

from embodied.envs.adapters.libero.env import LiberoObject  # noqa: E402
from embodied.envs.adapters.libero.expert import CLOSE, OPEN, LiberoObjectExpert  # noqa: E402


@pytest.fixture(scope="module")
def env():
    env = LiberoObject(obs_mode="state", max_episode_steps=280, task_ids=[0])
    yield env
    env.close()


def _run(env, expert, obs, steps, resync=False):
    """``steps`` steps of ``expert`` (resynced before each if asked): (obs, success, steps taken)."""
    for t in range(1, steps + 1):
        if resync:
            expert.resync(env)
        obs, _, terminated, truncated, info = env.step(expert.act(env, obs))
        if terminated or truncated:
            return obs, bool(info["success"]), t
    return obs, False, steps


def test_an_expert_that_did_not_drive_takes_over_a_grasp_it_never_made_after_resync(env):
    obs, _ = env.reset(options={"task_id": 0, "init_state": 0})
    driver, stale = LiberoObjectExpert(), LiberoObjectExpert()
    driver.reset(env)
    stale.reset(env)  # the labeller whose phase stayed at the start: "approach"
    for _ in range(200):  # the driver grasps the soup can and lifts it a little
        obs, *_ = env.step(driver.act(env, obs))
        if driver.phase == "lift" and driver.timer >= 3:
            break
    assert driver.phase == "lift" and stale.phase == "approach"
    stale_label = stale.act(env, obs)
    assert stale_label[6] == OPEN  # without resync: "open" on a can held in the air, a label that drops it
    stale.reset(env)
    stale.resync(env)
    assert stale.phase == "lift" and abs(stale.grasp_offset - driver.grasp_offset) < 0.005
    label = stale.act(env, obs)
    assert label[6] == CLOSE and label[2] > 0  # keep holding, go up
    _, success, steps = _run(env, stale, obs, 200)
    assert success and steps < 150  # it carries the can into the basket from there


def test_resync_on_the_expert_s_own_states_keeps_its_episode(env):
    obs, _ = env.reset(options={"task_id": 0, "init_state": 3})
    expert = LiberoObjectExpert()
    expert.reset(env)
    _, plain, plain_steps = _run(env, expert, obs, 280)
    obs, _ = env.reset(options={"task_id": 0, "init_state": 3})
    expert.reset(env)
    _, synced, synced_steps = _run(env, expert, obs, 280, resync=True)
    assert plain and synced and abs(synced_steps - plain_steps) <= 10


def test_an_open_hand_lined_up_over_the_can_is_descending_not_sent_back_up(env):
    obs, _ = env.reset(options={"task_id": 0, "init_state": 0})
    driver = LiberoObjectExpert()
    driver.reset(env)
    for _ in range(120):  # the driver comes down over the can, fingers open
        obs, *_ = env.step(driver.act(env, obs))
        if driver.phase == "descend" and driver.timer >= 4:
            break
    assert driver.phase == "descend"
    stale = LiberoObjectExpert()
    stale.reset(env)
    assert stale.act(env, obs)[2] > 0  # approach's label: back up to the hover height
    stale.reset(env)
    stale.resync(env)
    assert stale.phase == "descend" and stale.act(env, obs)[2] < 0  # resynced: keep coming down
    _, success, _ = _run(env, stale, obs, 250)
    assert success
    np.testing.assert_equal(stale.phase, "release")


def test_a_can_still_held_where_it_was_to_be_let_go_keeps_the_label_open_here(env):
    obs, _ = env.reset(options={"task_id": 0, "init_state": 1})
    expert = LiberoObjectExpert()
    expert.reset(env)
    for _ in range(200):  # the expert carries the can over the basket and starts to let go
        obs, *_ = env.step(expert.act(env, obs))
        if expert.phase == "release":
            break
    assert expert.phase == "release"
    anchor, synced = expert.anchor.copy(), []
    for _ in range(20):  # a policy that keeps the fingers closed there
        expert.resync(env)
        synced.append(expert.act(env, obs))
        obs, *_ = env.step(np.array([0, 0, 0, 0, 0, 0, CLOSE], dtype=np.float32))
    synced = np.array(synced)
    assert expert.phase == "release" and expert.timer <= 1  # restarted each step: its 12-step fallback never runs
    assert np.all(synced[:, 6] == OPEN) and np.abs(synced[:, 2]).max() < 0.3  # open here, at the same height
    np.testing.assert_allclose(expert.anchor, anchor)
