"""SAC's policy head is SAC's: ``policy.type: mlp`` / ``cnn`` under SAC build the tanh-Gaussian policy
(``AlgorithmConfig.policy_head``, ``PolicyConfig.with_head``), ``mlp_sac`` / ``cnn_sac`` stay as aliases, the critics'
widths are ``algorithm.critic_hidden_sizes``, the old names are refused naming the new ones, and what was saved under
them still loads (a saved config, ``policy.init_from``, the learner's optimizer key)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from embodied.checkpoint.store import check_init_from, save_policy_checkpoint
from embodied.config import ConfigError, config_from_dict, load_config, to_dict
from embodied.policies.cnn.configuration import CNNConfig, SquashedCNNConfig
from embodied.policies.mlp.configuration import MLPConfig, SquashedMLPConfig
from embodied.policies.mlp.squashed import SquashedMLPPolicy
from tests.embodied.runs.test_offpolicy import RECIPE, SPEC, TINY, actor, transitions
from tests.policies.test_cnn_sac import RECIPE as CNN_RECIPE


def test_mlp_under_sac_is_the_tanh_gaussian_mlp_with_the_same_fields():
    cfg = load_config(RECIPE, ["policy.normalize_states=true", "policy.hidden_sizes=[64, 32]"])
    assert isinstance(cfg.policy, MLPConfig) and cfg.policy.type == "mlp"
    built = cfg.algorithm.worker_policy(cfg.policy)
    assert built == SquashedMLPConfig(action_chunk=4, hidden_sizes=[64, 32], normalize_states=True)
    assert cfg.algorithm.trained_policy(cfg.policy) == built


def test_cnn_under_sac_is_the_tanh_gaussian_cnn_with_the_same_fields():
    cfg = load_config(CNN_RECIPE)
    assert isinstance(cfg.policy, CNNConfig)
    built = cfg.algorithm.worker_policy(cfg.policy)
    assert isinstance(built, SquashedCNNConfig) and built.type == "cnn_sac"
    shared = {f.name for f in dataclasses.fields(SquashedCNNConfig)} - {"type", "log_std_min", "log_std_max"}
    assert {name: getattr(built, name) for name in shared} == {name: getattr(cfg.policy, name) for name in shared}


@pytest.mark.parametrize("alias, config", [("mlp_sac", SquashedMLPConfig), ("cnn_sac", SquashedCNNConfig)])
def test_the_old_types_are_aliases_that_sac_builds_as_they_are(alias, config):
    recipe = RECIPE if alias == "mlp_sac" else CNN_RECIPE
    cfg = load_config(recipe, [f"policy.type={alias}"])
    assert type(cfg.policy) is config and cfg.algorithm.worker_policy(cfg.policy) is cfg.policy


def test_mlp_and_its_alias_build_the_same_policy_and_critics_and_log_the_same_updates():
    plain, alias = actor("algorithm.utd_ratio=0.5"), actor("algorithm.utd_ratio=0.5", "policy.type=mlp_sac")
    assert isinstance(plain.policy, SquashedMLPPolicy) and type(alias.policy) is type(plain.policy)
    for a, b in ((plain.policy, alias.policy), (plain.learner.critics, alias.learner.critics)):
        assert list(a.state_dict()) == list(b.state_dict())
        assert all(torch.equal(x, b.state_dict()[k]) for k, x in a.state_dict().items())
    for it, trajectory in enumerate([transitions(T=4), transitions(T=2, seed=3), transitions(seed=5)], 1):
        assert plain.update([trajectory], it) == alias.update([trajectory], it)
    assert plain.learner.critics.layers[0].weight.shape[-1] == 8  # TINY's algorithm.critic_hidden_sizes=[8]


@pytest.mark.parametrize("recipe, override, message", [
    (RECIPE, "algorithm.actor_q=min", "algorithm.actor_q: renamed to algorithm.policy_q"),
    ("dsrl", "algorithm.actor_q=min", "algorithm.actor_q: renamed to algorithm.policy_q"),
    ("dsrl", "algorithm.noise_actor_hidden_sizes=[8]",
     "algorithm.noise_actor_hidden_sizes: renamed to algorithm.noise_policy_hidden_sizes"),
    ("dsrl", "algorithm.noise_critic_hidden_sizes=[8]",
     "algorithm.noise_critic_hidden_sizes: renamed to algorithm.critic_hidden_sizes"),
    (RECIPE, "policy.activation=relu", "policy.activation: algorithm.name=sac trains policy.type=mlp with a "
                                       "tanh_gaussian head (mlp_sac), which has no such field"),
    (RECIPE, "algorithm.critic_hidden_sizes=[]", "algorithm.critic_hidden_sizes: need at least one layer"),
])
def test_old_names_are_refused_naming_the_new_place(recipe, override, message):
    if recipe == "dsrl":
        recipe = RECIPE.parent / "pick_color_tinyvla_flow_dsrl.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(recipe, [override])
    assert message in str(err.value)


def saved_before_the_move() -> dict:
    """A SAC run's config as a checkpoint saved it before the move: mlp_sac, the critics' widths in the policy
    section, the policy's ensemble reduction as actor_q."""
    raw = to_dict(load_config(RECIPE, [*TINY, "policy.type=mlp_sac", "algorithm.policy_q=min"]))
    raw["policy"]["critic_hidden_sizes"] = raw["algorithm"].pop("critic_hidden_sizes")
    raw["algorithm"]["actor_q"] = raw["algorithm"].pop("policy_q")
    return raw


def test_a_config_saved_before_the_move_is_read_in_todays_form():
    cfg = config_from_dict(saved_before_the_move())
    assert cfg.policy.type == "mlp_sac" and cfg.algorithm.critic_hidden_sizes == [8]
    assert cfg.algorithm.policy_q == "min"


def test_init_from_a_checkpoint_of_the_alias_fits_the_plain_type_under_sac(tmp_path):
    worker = actor()
    for name, config in (("old", saved_before_the_move()), ("ppo", to_dict(load_config(None, ["policy.type=mlp"])))):
        save_policy_checkpoint(tmp_path / name, worker.policy, worker.optimizer, 0, SPEC,
                               {"iteration": 0, "env_steps": 0, "config": config})
    cfg = load_config(RECIPE, [*TINY])
    trained = cfg.algorithm.trained_policy(cfg.policy)
    assert check_init_from(str(tmp_path / "old"), trained) == tmp_path / "old"
    with pytest.raises(ValueError, match="it holds a policy.type='mlp' policy, this config trains 'mlp_sac'"):
        check_init_from(str(tmp_path / "ppo"), trained)  # PPO's Gaussian MLP: another head


def test_the_worker_reads_the_optimizer_key_of_checkpoints_before_the_rename():
    """SAC's ``actor_optimizer`` of before is moved to ``policy_optimizer`` (``SACConfig.checkpoint_moves``)."""
    first = actor()
    first.update([transitions(T=4)], 1)
    entry = first.state()
    entry["sac"]["actor_optimizer"] = entry["sac"].pop("policy_optimizer")
    second = actor()
    second.load_state(entry)
    assert second.learner.policy_optimizer.state_dict()["state"].keys() == \
        first.learner.policy_optimizer.state_dict()["state"].keys()
    assert all(torch.equal(a["exp_avg"], b["exp_avg"]) for a, b in zip(
        first.learner.policy_optimizer.state_dict()["state"].values(),
        second.learner.policy_optimizer.state_dict()["state"].values(), strict=True))


def test_a_moved_field_of_an_old_recipe_is_read_in_its_new_place_with_a_warning():
    with pytest.warns(FutureWarning, match="policy.critic_hidden_sizes: moved to algorithm.critic_hidden_sizes"):
        cfg = load_config(None, ["algorithm.name=sac", "policy.critic_hidden_sizes=[8]"])
    assert cfg.algorithm.critic_hidden_sizes == [8]
