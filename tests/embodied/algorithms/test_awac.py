"""AWAC (``algorithm.name: awac``), SAC's learner with AWAC's policy objective: its loss against a plain loop, the
same numbers ``sac`` with ``awr_temperature`` logged before AWAC was an algorithm of its own, the refusal of its
field under ``sac``, and a saved ``sac`` config with the field set read as ``awac``."""

from __future__ import annotations

import dataclasses

import math
from pathlib import Path

import pytest
import torch

from embodied.algorithms.base import LearnerSpec, build_learner
from embodied.algorithms.awac import AWACLearner, advantage_weighted_loss
from embodied.algorithms.awac_config import AWACConfig
from embodied.algorithms.sac import SACLearner
from embodied.algorithms.sac_config import SACConfig
from embodied.algorithms.transitions import ReplaySample
from embodied.config import ConfigError, config_from_dict, load_config, to_dict
from embodied.core.registry import ALGORITHMS
from embodied.policy.base import PolicySpec, build_policy

RECIPE = Path(__file__).resolve().parents[3] / "configs" / "reach_mlp_sac.yaml"
TINY = ["policy.hidden_sizes=[8]", "algorithm.critic_hidden_sizes=[8]", "algorithm.batch_size=6",
        "policy.action_chunk=2"]
SPEC = PolicySpec(state_dim=3, image_shape=None, action_dim=2, action_low=(-1.0,) * 2, action_high=(1.0,) * 2)
KEYS = ("q_loss", "policy_loss", "alpha", "entropy", "q_mean", "target_mean", "bc_loss")


def test_advantage_weighted_loss_matches_loop_clamps_and_passes_no_gradient_to_the_advantage():
    g = torch.Generator().manual_seed(0)
    error = torch.rand(5, generator=g).requires_grad_(True)
    advantage = torch.tensor([-2.0, 0.0, 1.0, 3.0, 9.0], requires_grad=True)
    temperature, cap = 2.0, 50.0
    a, e = advantage.tolist(), error.tolist()
    expected = sum(min(math.exp(a[b] / temperature), cap) * e[b] for b in range(5)) / 5
    loss = advantage_weighted_loss(error, advantage, temperature, cap)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert advantage.grad is None  # the weights are constants: no gradient reaches the critics through them
    assert float(error.grad[4]) == pytest.approx(cap / 5)  # exp(4.5) = 90 is clamped to the cap



def batch(seed: int, n: int = 6) -> ReplaySample:
    g = torch.Generator().manual_seed(seed)
    return ReplaySample(obs={"states": torch.randn(n, 3, generator=g)},
                        actions=torch.rand(n, 2, 2, generator=g) * 2 - 1, reward=torch.randn(n, generator=g),
                        discount=torch.full((n,), 0.97), bootstrap=torch.rand(n, generator=g) < 0.8,
                        next_obs={"states": torch.randn(n, 3, generator=g)})


def three_steps(overrides: list[str], demo_rows: int) -> tuple[SACLearner, list[dict[str, float]], tuple[float, float]]:
    """The config's learner, its metrics over a critic-only step and two full ones on fixed batches, and the sums of
    the policy's and the critics' weights after them."""
    cfg = load_config(RECIPE, [*TINY, *overrides, "algorithm.critic_warmup_iterations=1"])
    torch.manual_seed(0)
    policy = build_policy(cfg.algorithm.worker_policy(cfg.policy), SPEC)
    learner = build_learner(cfg.algorithm, LearnerSpec(SPEC, 2, 0, 0.01, 1), policy)
    # iteration 1 is the critic warm-up (critics only), then two full steps
    metrics = [learner.update(dataclasses.replace(batch(i), demo_rows=demo_rows, iteration=i + 1)) for i in range(3)]
    with torch.no_grad():
        sums = (float(sum(p.double().sum() for p in policy.parameters())),
                float(sum(p.double().sum() for p in learner.critics.parameters())))
    return learner, metrics, sums


# What the same three steps logged at commit 48302f1, before AWAC was an algorithm of its own: ``algorithm.name: sac``
# with ``algorithm.awr_temperature`` (the case's overrides, less ``algorithm.name=awac``), each metric in ``KEYS``'
# order under "sac/", then the weights' sums. Bitwise the same here; compared to float rounding across machines.
BEFORE = {
    "awac": (["algorithm.name=awac", "algorithm.awr_temperature=1.0"], 0, [
        (2.2354331016540527, 1.617144227027893, 0.09999999403953552, -0.3225158154964447,
         -0.01902213878929615, 0.17818379402160645, 0.0),
        (3.8289873600006104, 1.8560127019882202, 0.09999999403953552, -1.1238698959350586,
         -0.10074862837791443, -0.30204740166664124, 0.0),
        (1.0233806371688843, 1.2003685235977173, 0.09900498390197754, 0.42000970244407654,
         0.0018252531299367547, 0.24765992164611816, 0.0),
    ], (0.29837064631283283, -3.709321486297995)),
    "awac_t5_min": (["algorithm.name=awac", "algorithm.awr_temperature=5.0", "algorithm.policy_q=min"], 0, [
        (2.2354331016540527, 1.585473656654358, 0.09999999403953552, -0.3225158154964447,
         -0.01902213878929615, 0.17818379402160645, 0.0),
        (3.8289873600006104, 1.8779038190841675, 0.09999999403953552, -1.1238698959350586,
         -0.10074862837791443, -0.30204740166664124, 0.0),
        (1.0196254253387451, 1.2294601202011108, 0.09900498390197754, 0.4205477237701416,
         0.0018252531299367547, 0.24669568240642548, 0.0),
    ], (0.2724125003442168, -3.709360516630113)),
    "awac_bc": (["algorithm.name=awac", "algorithm.awr_temperature=1.0", "algorithm.bc_weight=0.5",
                 "algorithm.demos=data/x"], 2, [
        (2.2354331016540527, 1.6875340938568115, 0.09999999403953552, -0.3225158154964447,
         -0.01902213878929615, 0.17818379402160645, 0.07038983702659607),
        (3.8289873600006104, 2.003450632095337, 0.09999999403953552, -1.1238698959350586,
         -0.10074862837791443, -0.30204740166664124, 0.1474379301071167),
        (1.0188384056091309, 1.2421718835830688, 0.09900498390197754, 0.42032527923583984,
         0.0018252531299367547, 0.24530084431171417, 0.035359129309654236),
    ], (0.24293911922723055, -3.7095592378173023)),
    "sac_bc": (["algorithm.bc_weight=0.5", "algorithm.demos=data/x"], 2, [
        (2.2354331016540527, 0.13264329731464386, 0.09999999403953552, -0.3225158154964447,
         -0.01902213878929615, 0.17818379402160645, 0.07038983702659607),
        (3.8289873600006104, 0.3457372784614563, 0.09999999403953552, -1.1238698959350586,
         -0.10074862837791443, -0.30204740166664124, 0.1474379301071167),
        (1.0604311227798462, -0.048476312309503555, 0.09900498390197754, 0.6465149521827698,
         0.0018252531299367547, 0.2655729353427887, 0.03563082590699196),
    ], (0.3925359984859824, -3.707447685301304)),
}


@pytest.mark.parametrize("case", sorted(BEFORE))
def test_awac_by_name_logs_what_sac_with_awr_temperature_logged(case):
    overrides, demo_rows, before, before_sums = BEFORE[case]
    learner, metrics, sums = three_steps(overrides, demo_rows)
    assert type(learner) is (AWACLearner if "algorithm.name=awac" in overrides else SACLearner)
    for step, (logged, expected) in enumerate(zip(metrics, before, strict=True)):
        assert list(logged) == [f"{learner.name}/{key}" for key in KEYS]  # SAC's names, under the learner's own
        for key, value in zip(KEYS, expected, strict=True):
            assert math.isclose(logged[f"{learner.name}/{key}"], value, rel_tol=1e-5, abs_tol=1e-7), (step, key)
    assert sums == pytest.approx(before_sums, rel=1e-5, abs=1e-7)


def test_awac_is_registered_and_is_sac_with_its_own_two_fields():
    assert ALGORITHMS.resolve("awac") is AWACConfig and AWACConfig().name == "awac"
    assert AWACConfig.algorithm_class == "embodied.algorithms.awac:AWACLearner"
    assert AWACLearner.name == "awac"  # its own keys; older ones are moved (AWACConfig.checkpoint_moves)
    assert ("sac", "awac") in {(m.old, m.new) for m in AWACConfig.checkpoint_moves}
    assert {"awr_temperature", "awr_max_weight"} <= set(AWACConfig.__dataclass_fields__)
    assert "awr_temperature" not in SACConfig.__dataclass_fields__
    cfg = load_config(RECIPE, ["algorithm.name=awac"])
    assert type(cfg.algorithm) is AWACConfig and cfg.algorithm.policy_q == "mean"
    assert config_from_dict(to_dict(cfg)) == cfg


@pytest.mark.parametrize("overrides", [["algorithm.awr_temperature=1"], ["algorithm.awr_temperature=null"],
                                       ["algorithm.name=dsrl", "algorithm.awr_temperature=1"]])
def test_awr_temperature_under_another_algorithm_is_refused_naming_awac(overrides):
    with pytest.raises(ConfigError, match=r"algorithm\.awr_temperature: not a field of algorithm '(sac|dsrl)' "
                                          r"\((SAC|DSRL)Config\) any more, it split off into algorithm 'awac'; use "
                                          r"algorithm\.name: awac"):
        load_config(RECIPE, overrides)


def saved_by_sac(awr_temperature: float | None) -> dict:
    """A SAC run's config as a checkpoint saved it before AWAC was an algorithm: every field, awr_temperature too."""
    raw = to_dict(load_config(RECIPE, [*TINY, "algorithm.policy_q=min"]))
    raw["algorithm"]["awr_temperature"] = awr_temperature
    return raw


def test_a_saved_sac_config_with_awr_temperature_is_read_as_awac():
    cfg = config_from_dict(saved_by_sac(2.0))
    assert type(cfg.algorithm) is AWACConfig and cfg.algorithm.name == "awac"
    assert (cfg.algorithm.awr_temperature, cfg.algorithm.awr_max_weight, cfg.algorithm.policy_q) == (2.0, 100.0, "min")
    assert cfg.algorithm.critic_hidden_sizes == [8]  # every other field as saved


def test_a_saved_sac_config_with_a_null_awr_temperature_is_sac_without_it():
    raw = saved_by_sac(None)
    raw["algorithm"]["actor_q"] = raw["algorithm"].pop("policy_q")  # and older still: renamed fields too
    cfg = config_from_dict(raw)
    assert type(cfg.algorithm) is SACConfig and cfg.algorithm.policy_q == "min"
    assert config_from_dict(to_dict(cfg)) == cfg


def test_a_sac_learners_state_resumes_in_awacs_learner():
    """A ``sac`` + ``awr_temperature`` run's learner was ``SACLearner``: its state (a checkpoint's ``sac`` entry)
    loads into the learner its saved config now builds, AWAC's."""
    first, _, _ = three_steps([], 0)
    cfg = config_from_dict(saved_by_sac(1.0))
    second = build_learner(cfg.algorithm, LearnerSpec(SPEC, 2, 0, 0.01, 1),
                           build_policy(cfg.algorithm.worker_policy(cfg.policy), SPEC))
    assert type(second) is AWACLearner
    second.load_state_dict(first.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(first.critics.state_dict().values(),
                                                 second.critics.state_dict().values(), strict=True))


def test_an_awac_checkpoint_saved_under_sac_s_keys_resumes_into_awac_s_learner():
    """Before AWAC had its own name its runs saved the learner as ``sac``: ``embodied.checkpoint.migrate`` moves the
    keys (``AWACConfig.checkpoint_moves``), from a checkpoint folder or from an entry without a config."""
    from embodied.workers.actor_worker import ActorWorker

    cfg = load_config(RECIPE, [*TINY, "algorithm.name=awac"])
    first = ActorWorker(cfg.algorithm.worker_policy(cfg.policy), SPEC, cfg.algorithm, cfg.actor, 1, 0)
    with torch.no_grad():
        for p in first.learner.critics.parameters():
            p.add_(1.0)
    state = first.state()
    assert "awac" in state and "awac_counters" in state  # its own keys now
    old = {("sac" + k[len("awac"):] if k.startswith("awac") else k): v for k, v in state.items()}
    second = ActorWorker(cfg.algorithm.worker_policy(cfg.policy), SPEC, cfg.algorithm, cfg.actor, 1, 1)
    second.load_state(old)
    for a, b in zip(first.learner.critics.parameters(), second.learner.critics.parameters(), strict=True):
        assert torch.equal(a, b)
