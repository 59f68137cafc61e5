"""The recipe profile: each activity's share of an iteration from the workers' reports, and the envs alone."""

from __future__ import annotations

import pytest

from benchmarks.profile_recipe import main, profile_rows


def row(steps: int, **seconds: float) -> dict:
    return {"env_steps": steps, "time/iteration": 2.0, "time/update": 1.0, "time/actor_wait": 0.5, **seconds}


def test_shares_average_the_workers_of_a_kind_over_the_kept_iterations():
    rows = [row(100, **{"busy/env0/step": 2.0}),  # left out (skip=1)
            row(200, **{"busy/env0/step": 1.0, "busy/env1/step": 0.6, "busy/rollout0/act": 0.2, "busy/actor0/learn": 0.8}),
            {"eval/success_rate": 1.0},  # an eval row: not an iteration
            row(300, **{"busy/env0/step": 1.0, "busy/env1/step": 1.0, "busy/rollout0/act": 0.4, "busy/actor0/learn": 0.6})]
    shares, wall, rate = profile_rows(rows, skip=1)
    assert shares["env step"] == pytest.approx((0.8 / 2 + 1.0 / 2) / 2)  # each iteration: mean of the two workers
    assert shares["rollout act"] == pytest.approx((0.1 + 0.2) / 2)
    assert shares["actor learn"] == pytest.approx(0.35)
    assert shares["actor update (the driver's wait for it)"] == pytest.approx(0.5)
    assert shares["driver waits for the rollout"] == pytest.approx(0.25)
    assert shares["driver, the rest (logging, reports, calls)"] == pytest.approx(0.25)
    assert wall == 2.0 and rate == pytest.approx(200 / 4.0)  # 100 steps an iteration, 2 s each
    with pytest.raises(ValueError, match="no training iteration after the first 3"):
        profile_rows(rows, skip=3)


def test_an_on_policy_loops_wait_for_its_rollout_is_the_drivers_wait_not_the_rest():
    on_policy = {"env_steps": 100, "time/iteration": 2.0, "time/update": 0.2, "time/rollout": 1.7}
    shares, _, _ = profile_rows([on_policy], skip=0)
    assert shares["driver waits for the rollout"] == pytest.approx(0.85)
    assert shares["driver, the rest (logging, reports, calls)"] == pytest.approx(0.05)


@pytest.mark.slow
def test_the_profile_runs_a_recipe_and_steps_its_envs_alone(capsys):
    figures = main(["configs/reach_mlp_sac.yaml", "--iterations", "5", "--skip", "2", "--alone-chunks", "5",
                    "env.num_envs=4", "eval_env.num_envs=2", "runner.eval_episodes=2", "algorithm.learning_starts=16",
                    "env.preflight=false"])
    shares = figures["shares"]
    assert shares["env step"] > 0 and shares["rollout act"] > 0 and shares["actor learn"] > 0
    assert all(0 <= v <= 1.5 for v in shares.values())  # shares of one iteration (the env's wait may overlap)
    assert figures["train_steps_per_s"] > 0 and figures["alone_steps_per_s"] > 0
    assert "| training / alone |" in capsys.readouterr().out
