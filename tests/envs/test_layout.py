"""Layout randomization of the built-in tasks (``envs/layout.py``; ``env.kwargs.layout_shift_x/y``, ``layout_swap``).

Over 1,000 resets the places spread over the configured range and stay valid (inside the reachable table
area, apart); swaps happen at their rate; the batched twins match the per-env path under randomization;
all-0 settings draw exactly what the tasks drew before; bad settings are refused naming the kwarg.
"""

from __future__ import annotations

import numpy as np
import pytest

from embodied.config import EnvConfig
from embodied.env_runtime.factory import check_env_config, make_vector_env
from embodied.envs.experts import expert_for
from embodied.envs.mujoco_base import TableTopEnv
from embodied.envs.pick_color import PickColorEnv
from embodied.envs.pick_place import PickPlaceEnv
from embodied.envs.push import PushEnv
from embodied.envs.reach import ReachEnv
from embodied.envs.stack import StackEnv
from tests.envs.test_batched_tasks import assert_same, pair

TASKS = [ReachEnv, PushEnv, PickPlaceEnv, StackEnv, PickColorEnv]
# The largest shift each task fits with the swap it is tested with (Push keeps a run-up behind its cube).
SETTINGS: dict[type, dict[str, float]] = {
    ReachEnv: dict(layout_shift_x=0.05, layout_shift_y=0.05),
    PushEnv: dict(layout_shift_x=0.04, layout_shift_y=0.04, layout_swap=0.5),
    PickPlaceEnv: dict(layout_shift_x=0.1, layout_shift_y=0.1, layout_swap=0.5),
    StackEnv: dict(layout_shift_x=0.1, layout_shift_y=0.1, layout_swap=0.5),
    PickColorEnv: dict(layout_shift_x=0.1, layout_shift_y=0.1, layout_swap=0.5),
}
# Where each object's position sits in ``states`` (start index of 3).
SLOTS: dict[type, tuple[int, ...]] = {ReachEnv: (4,), PushEnv: (4, 11), PickPlaceEnv: (4, 11), StackEnv: (4, 11),
                                      PickColorEnv: (4, 7, 10, 13)}
# Checksum of the first observations of seeds 0..9 and the generator's next draw, recorded before the settings
# existed: a setting of 0 must change neither a place nor the number of draws.
BEFORE: dict[type, tuple[float, float]] = {
    ReachEnv: (18.307423513033427, 0.8603936491828846),
    PushEnv: (56.73216160596348, 0.48494432697728806),
    PickPlaceEnv: (83.30402901605703, 0.005626050679392924),
    StackEnv: (193.50991565478034, 0.06515419737010752),
    PickColorEnv: (25.207813835382694, 0.7053337045894538),
}


def privileged_places(env: TableTopEnv) -> np.ndarray:
    """The objects' positions [k, 3] as the env holds them, in ``SLOTS`` order."""
    if isinstance(env, ReachEnv):
        return env.target_pos[None]
    if isinstance(env, (PushEnv, PickPlaceEnv)):
        return np.array([env.cube_pos, env.goal_pos])
    if isinstance(env, StackEnv):
        return np.array([env.top_pos, env.base_pos])
    return env.cube_positions


def reset_places(env: TableTopEnv, seeds: range) -> np.ndarray:
    """The objects' positions [len(seeds), k, 3] read from each reset's ``states``, checked against the env's."""
    out = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        places = np.array([obs["states"][i:i + 3] for i in SLOTS[type(env)]], dtype=np.float64)
        np.testing.assert_allclose(places, privileged_places(env), atol=1e-6)  # the state shows the moved poses
        out.append(places)
    return np.array(out)


def min_distance(env: TableTopEnv) -> float:
    """How far apart (x-y) the task keeps its objects at reset."""
    if isinstance(env, (PushEnv, PickPlaceEnv)):
        return env.min_goal_distance
    return getattr(env, "min_cube_distance", 0.0)


def default_extent(env: TableTopEnv) -> tuple[np.ndarray, np.ndarray]:
    """x-y box holding every unshifted placement region of the task."""
    regions = env._layout_regions().values()
    return np.min([r.low[:2] for r in regions], axis=0), np.max([r.high[:2] for r in regions], axis=0)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.__name__)
def test_places_spread_over_the_range_and_stay_valid(task: type) -> None:
    env = task(**SETTINGS[task])
    places = reset_places(env, range(1000))
    xy, shift = places[..., :2], np.array([SETTINGS[task]["layout_shift_x"], SETTINGS[task]["layout_shift_y"]])
    low, high = default_extent(env)
    assert (xy.reshape(-1, 2).min(0) < low - shift / 4).all() and (xy.reshape(-1, 2).max(0) > high + shift / 4).all()
    assert (xy >= low - shift - 1e-9).all() and (xy <= high + shift + 1e-9).all()
    margin = max(r.margin for r in env._layout_regions().values())  # with a swap every object keeps the strictest
    assert (xy >= env.workspace_low[:2] + margin - 1e-9).all() and (xy <= env.workspace_high[:2] - margin + 1e-9).all()
    if hasattr(env, "cube_half") and not isinstance(env, PickPlaceEnv):  # PickPlace's target may float
        np.testing.assert_allclose(places[..., 2], env.cube_half, atol=1e-6)  # resting on the table
    gaps = [np.linalg.norm(xy[:, i] - xy[:, j], axis=-1) for i in range(xy.shape[1]) for j in range(i)]
    assert all((gap >= min_distance(env) - 1e-9).all() for gap in gaps)  # never overlapping


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.__name__)
def test_without_settings_places_stay_in_the_default_regions(task: type) -> None:
    env = task()
    xy = reset_places(env, range(300))[..., :2]
    low, high = default_extent(env)
    assert (xy >= low).all() and (xy <= high).all()
    assert env.layout_swapped is None


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("explicit", [False, True], ids=["defaults", "explicit_zeros"])
def test_zero_settings_draw_exactly_what_the_tasks_drew_before(task: type, explicit: bool) -> None:
    zeros = dict(layout_shift_x=0.0, layout_shift_y=0.0, layout_swap=0.0) if explicit else {}
    env = task(**zeros)
    total = 0.0
    for seed in range(10):
        states = env.reset(seed=seed)[0]["states"].astype(np.float64)
        total += float(states @ np.arange(1, states.size + 1))
    checksum, next_draw = BEFORE[task]
    assert total == pytest.approx(checksum, rel=1e-12)
    assert env.np_random.random() == next_draw  # the same number of draws, to the bit


@pytest.mark.parametrize("task", [PushEnv, PickPlaceEnv, StackEnv, PickColorEnv], ids=lambda t: t.__name__)
def test_swaps_happen_at_their_rate(task: type) -> None:
    env = task(layout_swap=0.3)
    swaps = 0
    for seed in range(1000):
        env.reset(seed=seed)
        swaps += env.layout_swapped is not None
    assert 250 <= swaps <= 350  # 0.3 +- 3.5 standard deviations of 1,000 draws


@pytest.mark.parametrize("task", [PushEnv, PickPlaceEnv, StackEnv, PickColorEnv], ids=lambda t: t.__name__)
def test_a_swap_exchanges_the_places_drawn(task: type) -> None:
    """The places are drawn before the swap's own draw, so a seed gives the same places, two of them exchanged."""
    plain, always = task(), task(layout_swap=1.0)
    for seed in range(20):
        before, after = reset_places(plain, range(seed, seed + 1))[0], reset_places(always, range(seed, seed + 1))[0]
        i, j = always.layout_swapped
        expected = before[:, :2].copy()
        expected[[i, j]] = expected[[j, i]]
        np.testing.assert_allclose(after[:, :2], expected, atol=1e-6)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.__name__)
def test_the_batched_twin_matches_the_per_env_path_under_randomization(task: type) -> None:
    """Same seeds, same random actions: same observations (moved places included) across auto-resets."""
    per_env, twin = pair(task, 3, True, max_episode_steps=5, **SETTINGS[task])
    np.testing.assert_allclose(per_env.reset(seed=5)["states"], twin.reset(seed=5)["states"], atol=1e-6, rtol=0)
    rng = np.random.default_rng(1)
    for t in range(8):
        actions = rng.uniform(-1, 1, (3, 3, 4)).astype(np.float32)
        assert_same(per_env.chunk_step(actions), twin.chunk_step(actions), f"{task.__name__} chunk {t}")
    twin.close()


def test_the_factory_passes_the_settings_to_the_twin() -> None:
    cfg = EnvConfig(id="Stack-v0", num_envs=2, kwargs={"layout_shift_x": 0.1, "layout_swap": 0.5})
    check_env_config(cfg)
    venv = make_vector_env(cfg, 2)
    assert venv.proto.layout.swap == 0.5 and venv.proto.layout.shift[0] == 0.1
    venv.close()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.__name__)
def test_the_experts_solve_randomized_layouts(task: type) -> None:
    env = task(**SETTINGS[task])
    expert, failed = expert_for(env), []
    for seed in range(30):
        obs, _ = env.reset(seed=seed)
        expert.reset(env)
        terminated = truncated = False
        while not (terminated or truncated):
            obs, _, terminated, truncated, info = env.step(expert.act(env, obs))
        if not info["success"]:
            failed.append(seed)
    assert len(failed) <= 1, f"{task.__name__}: the expert failed seeds {failed}"


@pytest.mark.parametrize(("task", "kwargs", "match"), [
    (ReachEnv, dict(layout_swap=0.5), r"env\.kwargs\.layout_swap=0\.5: ReachEnv has a single object"),
    (ReachEnv, dict(layout_shift_x=0.06), r"env\.kwargs\.layout_shift_x=0\.06 cannot fit ReachEnv.*at most 0\.05"),
    (PushEnv, dict(layout_shift_y=0.1), r"layout_shift_y=0\.1 cannot fit PushEnv: its cube region y in \[-0\.12, "
                                        r"0\.12\].*at most 0\.07"),
    (PushEnv, dict(layout_shift_x=0.07, layout_swap=0.5), r"layout_shift_x=0\.07 cannot fit PushEnv: its goal.*"
                                                          r"at most 0\.04"),
    (StackEnv, dict(layout_shift_x=0.2), r"layout_shift_x=0\.2 cannot fit StackEnv.*\[-0\.25, 0\.25\]"),
    (StackEnv, dict(layout_shift_x=-0.1), r"env\.kwargs\.layout_shift_x must be a finite number >= 0"),
    (StackEnv, dict(layout_shift_y=float("inf")), r"env\.kwargs\.layout_shift_y must be a finite number >= 0"),
    (PickColorEnv, dict(layout_swap=1.5), r"env\.kwargs\.layout_swap must be a number in \[0, 1\]"),
    (PickPlaceEnv, dict(layout_swap=True), r"env\.kwargs\.layout_swap must be"),
])
def test_bad_settings_are_refused_naming_the_kwarg(task: type, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        task(**kwargs)
    with pytest.raises(ValueError, match=match):  # the twin builds its task with the same arguments
        task.batched_twin("state")(num_envs=1, **kwargs)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.__name__)
def test_the_reachable_area_lies_on_the_table(task: type) -> None:
    """Places are checked against the workspace's x-y: a cube there, rotated any way, stays on the table."""
    env = task()
    table = env.model.geom("table")
    half = np.sqrt(2) * getattr(env, "cube_half", 0.0)  # a turned cube's half-diagonal
    assert np.allclose(env.model.geom_pos[table.id][:2], 0.0)
    reach = np.maximum(-env.workspace_low[:2], env.workspace_high[:2])  # per axis, from the table's centre
    assert (reach + half <= env.model.geom_size[table.id][:2]).all()


def test_the_reset_benchmark_runs_at_toy_sizes(capsys) -> None:
    """``benchmarks/builtin_layout_reset.py`` end to end (no timing assertions; its figures are in the report)."""
    from benchmarks.builtin_layout_reset import main

    rows = main(["--rounds", "1", "--resets", "2", "--num-envs", "2", "--episodes", "1"])
    assert set(rows) == {t.__name__ for t in TASKS}
    assert all(v > 0 for row in rows.values() for k, v in row.items() if k.endswith("_us"))
    assert "ratio" in capsys.readouterr().out
