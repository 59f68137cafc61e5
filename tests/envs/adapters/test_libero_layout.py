"""LIBERO's layout randomization at training resets (``layout_shift_x``, ``layout_shift_y``, ``layout_swap``).

Overlaps are judged by MuJoCo's own collision detection (contacts between two objects' geoms), not by the
footprints the layout code keeps, and the floor's reach by the bodies' positions, so a wrong footprint or a
wrong write shows here. The refusals build their envs first, one at a time and closed; then two envs of
LIBERO-Object task 0 (one plain, one randomized) serve the rest of the module.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libero.libero", reason="pip install 'embodied[libero]'")
pytestmark = pytest.mark.libero

from embodied.envs.adapters.libero import layout as layout_mod  # noqa: E402
from embodied.envs.adapters.libero.env import LiberoGoal, LiberoObject  # noqa: E402
from embodied.envs.adapters.libero.layout import Arrangement, LayoutSettings, SceneLayout  # noqa: E402

SHIFT, SWAP = 0.3, 0.5
TARGET, BASKET = "alphabet_soup_1", "basket_1"  # task 0's objects of interest
RAW_LAYOUTS = 1000


# -- refused before a reset (each builds and closes its own env, before the module's envs exist) ------------


@pytest.mark.parametrize("kwargs, kwarg", [
    ({"layout_shift_x": -0.1}, "layout_shift_x"), ({"layout_shift_y": float("nan")}, "layout_shift_y"),
    ({"layout_shift_x": "0.3"}, "layout_shift_x"), ({"layout_swap": 1.5}, "layout_swap"),
    ({"layout_swap": True}, "layout_swap")])
def test_values_that_are_no_range_or_probability_are_refused_naming_the_kwarg_and_the_suite(kwargs, kwarg):
    with pytest.raises(ValueError, match=rf"env\.kwargs\.{kwarg}: .*LIBERO-Object-v0"):
        LiberoObject(obs_mode="state", task_ids=[0], **kwargs)


def test_randomization_with_fixed_training_init_states_is_refused():
    with pytest.raises(ValueError, match=r"env\.kwargs\.layout_\*: LIBERO-Object-v0.*train_init_states is 'fixed'"):
        LiberoObject(obs_mode="state", task_ids=[0], train_init_states="fixed", layout_swap=0.5)


def test_a_range_no_object_can_move_on_the_workspace_is_refused_when_the_env_is_built():
    with pytest.raises(ValueError, match=r"env\.kwargs\.layout_shift_y=2: the range cannot fit LIBERO-Object-v0 "
                                         r"task 0 \(pick_up_the_alphabet_soup.*floor within the arm's reach"):
        LiberoObject(obs_mode="state", task_ids=[0], layout_shift_y=2.0)


def test_a_swap_in_a_task_whose_target_is_a_fixture_is_refused_and_a_shift_is_not():
    # LIBERO-Goal task 0 opens a drawer: its one object of interest is the cabinet, a fixture
    with pytest.raises(ValueError, match=r"env\.kwargs\.layout_swap=0\.5: nothing to swap in LIBERO-Goal-v0 task 0 "
                                         r"\(open_the_middle_drawer.*wooden_cabinet_1"):
        LiberoGoal(obs_mode="state", task_ids=[0], layout_swap=0.5)


def test_a_hard_reset_moves_the_objects_of_the_scene_it_rebuilt():
    env = LiberoObject(obs_mode="state", task_ids=[0], hard_reset=True, layout_shift_x=SHIFT, layout_shift_y=SHIFT)
    try:
        for seed in (0, 1):
            obs, _ = env.reset(seed=seed)
            np.testing.assert_allclose(obs["states"][8:10], env.last_layout.after[TARGET], atol=0.01)
            assert not touching(env) and not off_the_floor_s_reach(env)
    finally:
        env.close()


# -- the module's two envs ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain():
    env = LiberoObject(obs_mode="state", task_ids=[0], max_episode_steps=10)
    yield env
    env.close()


@pytest.fixture(scope="module")
def randomized():
    env = LiberoObject(obs_mode="state", task_ids=[0], max_episode_steps=10, layout_shift_x=SHIFT,
                       layout_shift_y=SHIFT, layout_swap=SWAP)
    yield env
    env.close()


def touching(env) -> set[tuple[str, str]]:
    """Pairs of objects (or fixtures) whose geoms MuJoCo finds in contact now."""
    u = env.robosuite_env
    model, data = u.sim.model, u.sim.data
    roots = {model.body_name2id(o.root_body): n for n, o in {**u.objects_dict, **u.fixtures_dict}.items()}
    pairs = set()
    for c in data.contact[:data.ncon]:
        a, b = (roots.get(int(model.body_rootid[model.geom_bodyid[g]])) for g in (c.geom1, c.geom2))
        if a and b and a != b:
            pairs.add(tuple(sorted((a, b))))
    return pairs


def off_the_floor_s_reach(env) -> list[str]:
    """Objects whose body stands outside the arm's reach on LIBERO-Object's floor, from the bodies' positions."""
    u = env.robosuite_env
    base = u.sim.data.get_body_xpos(u.robots[0].robot_model.root_body)[:2]
    low, high = layout_mod.FLOOR_REACH
    out = []
    for name, body in u.obj_body_id.items():
        d = u.sim.data.body_xpos[body][:2] - base
        if not (low <= np.hypot(*d) <= high and d[0] >= 0):
            out.append(name)
    return out


@pytest.fixture(scope="module")
def raw_layouts(randomized) -> tuple[list[Arrangement], int]:
    """RAW_LAYOUTS layouts of the randomized env's scene, each drawn from robosuite's own placement and checked
    by MuJoCo's collision detection; returns them and how many had an overlap or an object off the floor."""
    env = randomized
    env.robosuite_env.reset()  # robosuite's placement, not yet moved
    sim, layout = env.robosuite_env.sim, env._scene_layout()
    placed, rng, bad = sim.data.qpos.copy(), np.random.RandomState(0), 0
    arrangements = []
    for _ in range(RAW_LAYOUTS):
        sim.data.qpos[:] = placed
        arrangements.append(layout.apply(rng))
        bad += bool(touching(env) or off_the_floor_s_reach(env))
    return arrangements, bad


# -- (a) spread and validity ----------------------------------------------------------------------------------


def test_a_thousand_layouts_never_overlap_nor_leave_the_floor_s_reach(raw_layouts):
    arrangements, bad = raw_layouts
    assert len(arrangements) == RAW_LAYOUTS and bad == 0


def test_the_offsets_spread_over_the_configured_range(raw_layouts):
    offsets = np.array([o for a in raw_layouts[0] for o in a.offsets.values()])
    assert np.all(offsets.min(axis=0) <= -0.9 * SHIFT) and np.all(offsets.max(axis=0) >= 0.9 * SHIFT)
    assert np.all(np.abs(offsets) <= SHIFT + 1e-9)
    target = np.array([a.offsets[TARGET] for a in raw_layouts[0]])
    assert np.all(target.std(axis=0) > 0.1)  # uniform over +-0.3 m has 0.17; robosuite's own 5 cm box far less


def test_full_training_resets_differ_from_robosuite_s_placements_and_stay_valid(plain, randomized):
    plain_xy = [plain.reset(seed=s)[0]["states"][8:10] for s in range(4)]
    moved = []
    for s in range(8):
        obs, _ = randomized.reset(seed=s)
        assert not touching(randomized) and not off_the_floor_s_reach(randomized), s
        moved.append(obs["states"][8:10])
    home = np.mean(plain_xy, axis=0)
    assert max(np.linalg.norm(p - home) for p in plain_xy) < 0.03  # robosuite's box: 5 cm at most
    assert sum(np.linalg.norm(p - home) > 0.05 for p in moved) >= 5


def test_the_same_seed_gives_the_same_layout(randomized):
    first = randomized.reset(seed=11)[0]
    after = dict(randomized.last_layout.after)
    second = randomized.reset(seed=11)[0]
    np.testing.assert_array_equal(first["states"], second["states"])
    assert all(np.array_equal(after[n], randomized.last_layout.after[n]) for n in after)


# -- (b) eval untouched ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("init_state", [0, 7])
def test_eval_resets_on_fixed_init_states_are_exactly_those_of_a_plain_env(plain, randomized, init_state):
    randomized.reset(seed=3)  # a randomized training reset just before
    before = randomized.last_layout
    options = {"task_id": 0, "init_state": init_state}
    a, _ = randomized.reset(options=options)
    b, _ = plain.reset(options=options)
    np.testing.assert_array_equal(a["states"], b["states"])
    for field in ("qpos", "qvel"):
        np.testing.assert_array_equal(getattr(randomized.robosuite_env.sim.data, field),
                                      getattr(plain.robosuite_env.sim.data, field))
    assert randomized.last_layout is before  # no layout was drawn


# -- (c) swap -------------------------------------------------------------------------------------------------


def test_the_target_trades_places_with_a_distractor_at_the_configured_rate(raw_layouts, randomized):
    swapped = [a.swapped for a in raw_layouts[0] if a.swapped is not None]
    assert abs(len(swapped) / RAW_LAYOUTS - SWAP) < 0.06
    partners = {p for t, p in swapped}
    assert {t for t, _ in swapped} == {TARGET}
    assert partners == {"salad_dressing_1", "cream_cheese_1", "milk_1", "tomato_sauce_1", "butter_1"}  # not the basket


def test_a_swap_alone_puts_each_of_the_two_exactly_in_the_other_s_place(randomized):
    env = randomized
    env.robosuite_env.reset()
    sim = env.robosuite_env.sim
    label = "LIBERO-Object-v0 task 0"
    layout = SceneLayout.of(env.robosuite_env, LayoutSettings((0.0, 0.0), SWAP), label)
    placed, rng, count = sim.data.qpos.copy(), np.random.RandomState(1), 0
    for _ in range(300):
        sim.data.qpos[:] = placed
        a = layout.apply(rng)
        assert not touching(env)
        if a.swapped is None:
            assert all(np.array_equal(a.after[n], a.before[n]) for n in a.before)
            continue
        count += 1
        t, p = a.swapped
        assert np.array_equal(a.after[t], a.before[p]) and np.array_equal(a.after[p], a.before[t])
        assert all(np.array_equal(a.after[n], a.before[n]) for n in a.before if n not in a.swapped)
        body = env.robosuite_env.obj_body_id[t]
        np.testing.assert_allclose(sim.data.body_xpos[body][:2], a.before[p], atol=1e-9)  # written to the scene
    assert abs(count / 300 - SWAP) < 0.1


def test_target_alone_moves_the_target_only_at_the_configured_rate(randomized):
    env = randomized
    env.robosuite_env.reset()
    sim = env.robosuite_env.sim
    alone = 0.4
    layout = SceneLayout.of(env.robosuite_env, LayoutSettings((SHIFT, SHIFT), 0.0, alone), "task 0")
    placed, rng, lone = sim.data.qpos.copy(), np.random.RandomState(2), []
    for _ in range(300):
        sim.data.qpos[:] = placed
        a = layout.apply(rng)
        assert not touching(env) and not off_the_floor_s_reach(env)
        still = [n for n in a.before if n != TARGET and np.array_equal(a.after[n], a.before[n])]
        if len(still) == len(a.before) - 1:  # every other object kept robosuite's placement
            lone.append(a.offsets[TARGET])
    assert abs(len(lone) / 300 - alone) < 0.1
    lone = np.array(lone)
    assert np.all(lone.min(axis=0) <= -0.7 * SHIFT) and np.all(lone.max(axis=0) >= 0.7 * SHIFT)


@pytest.mark.parametrize("value", [-0.1, 1.5, "half"])
def test_target_alone_outside_zero_one_is_refused_naming_the_kwarg(value):
    with pytest.raises(ValueError, match=r"env\.kwargs\.layout_target_alone: a probability in \[0, 1\].*LIBERO"):
        LayoutSettings.parse(0.1, 0.1, 0.0, "LIBERO-Object-v0", value)


# -- (d) no layout found --------------------------------------------------------------------------------------


def test_a_scene_that_cannot_take_a_layout_raises_naming_the_task_and_the_range(randomized, monkeypatch):
    layout = randomized._scene_layout()
    monkeypatch.setattr(layout_mod, "FLOOR_REACH", (0.0, 0.05))  # nowhere on the floor is in reach any more
    with pytest.raises(RuntimeError, match=r"LIBERO-Object-v0 task 0 \(pick_up_the_alphabet_soup.*no valid layout.*"
                                           r"layout_shift_x=0\.3, layout_shift_y=0\.3, layout_swap=0\.5"):
        layout.apply(np.random.RandomState(0))


# -- (e) the state observation --------------------------------------------------------------------------------


def test_the_state_observation_holds_the_moved_poses(randomized):
    for seed in (21, 22, 23):
        obs, _ = randomized.reset(seed=seed)
        after = randomized.last_layout.after
        # slot 0 the target, slot 1 the basket: position (3) first; settling moves them by millimetres
        np.testing.assert_allclose(obs["states"][8:10], after[TARGET], atol=0.01)
        np.testing.assert_allclose(obs["states"][18:20], after[BASKET], atol=0.01)
