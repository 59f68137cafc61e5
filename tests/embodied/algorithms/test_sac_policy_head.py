"""SAC's policy head is SAC's: under SAC, ``policy.type: mlp`` / ``cnn`` name the encoder that SAC's tanh-Gaussian
actor reads (``AlgorithmConfig.policy_head``, the ``embodied.policy_heads`` registry, ``PolicyConfig.encoder_class``);
``mlp_sac`` / ``cnn_sac`` are deprecated aliases that warn, the critics' widths are ``algorithm.critic_hidden_sizes``,
the old names are refused naming the new ones, and what was saved under them still loads (a saved config,
``policy.init_from``, the learner's optimizer key, the actor's old state-dict keys)."""

from __future__ import annotations

import pytest
import torch

from embodied.checkpoint.store import check_init_from, save_policy_checkpoint
from embodied.config import ConfigError, config_from_dict, load_config, to_dict
from embodied.algorithms.sac_actor import TanhGaussianActor
from embodied.algorithms.sac_config import TanhGaussianConfig
from embodied.checkpoint.migrate import migrate
from embodied.core.registry import UnknownNameError
from embodied.policies.cnn.configuration import CNNConfig
from embodied.policies.mlp.configuration import MLPConfig
from tests.embodied.algorithms.test_sac_actor_cnn import RECIPE as CNN_RECIPE
from tests.embodied.runs.test_offpolicy import RECIPE, SPEC, TINY, actor, transitions


def test_mlp_under_sac_is_the_tanh_gaussian_head_over_the_mlp_encoder():
    cfg = load_config(RECIPE, ["policy.normalize_states=true", "policy.hidden_sizes=[64, 32]",
                               "algorithm.log_std_min=-4"])
    assert isinstance(cfg.policy, MLPConfig) and cfg.policy.type == "mlp"
    built = cfg.algorithm.worker_policy(cfg.policy)
    assert built == TanhGaussianConfig(type="mlp/tanh_gaussian", action_chunk=4, encoder=cfg.policy,
                                       hidden_sizes=[64, 32], log_std_min=-4.0)
    assert cfg.algorithm.trained_policy(cfg.policy) == built


def test_cnn_under_sac_is_the_tanh_gaussian_head_over_the_cnn_encoder():
    cfg = load_config(CNN_RECIPE)
    assert isinstance(cfg.policy, CNNConfig)
    built = cfg.algorithm.worker_policy(cfg.policy)
    assert isinstance(built, TanhGaussianConfig) and built.type == "cnn/tanh_gaussian" and built.encoder == cfg.policy
    assert built.hidden_sizes == cfg.policy.hidden_sizes
    assert built.architecture()["channels"] == cfg.policy.channels  # init_from checks the encoder's shape too


def test_a_policy_without_an_encoder_is_refused_by_name_and_an_unknown_head_lists_the_known(monkeypatch):
    from embodied.algorithms.sac_config import SACConfig
    from embodied.policies.vla.configuration import VLAConfig

    with pytest.raises(ValueError, match=r"policy.type=vla does not offer \(PolicyConfig.encoder_class"):
        SACConfig().trained_policy(VLAConfig())
    cfg = load_config(RECIPE)
    monkeypatch.setattr(type(cfg.algorithm), "policy_head", "squashed_beta")
    with pytest.raises(UnknownNameError, match="tanh_gaussian"):
        cfg.algorithm.trained_policy(cfg.policy)


@pytest.mark.parametrize("alias, config, obs_mode", [("mlp_sac", MLPConfig, "state"), ("cnn_sac", CNNConfig, "rgb")])
def test_the_old_types_are_aliases_that_warn_and_keep_their_widths(alias, config, obs_mode):
    with pytest.warns(FutureWarning, match=f"policy.type: {alias} is deprecated, read as policy.type={config().type}"):
        cfg = load_config(None, ["algorithm.name=sac", f"policy.type={alias}", f"env.obs_mode={obs_mode}"])
    # cnn_sac's own default widths were [256, 256], the CNN's are [256]: the alias keeps its own
    assert type(cfg.policy) is config and cfg.algorithm.worker_policy(cfg.policy).hidden_sizes == [256, 256]


def test_mlp_and_its_alias_build_the_same_policy_and_critics_and_log_the_same_updates():
    plain = actor("algorithm.utd_ratio=0.5")
    with pytest.warns(FutureWarning, match="mlp_sac"):
        alias = actor("algorithm.utd_ratio=0.5", "policy.type=mlp_sac")
    assert isinstance(plain.policy, TanhGaussianActor) and type(alias.policy) is type(plain.policy)
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
    (RECIPE, "policy.activation=relu", "policy.activation: algorithm.name=sac puts its own head on policy.type=mlp's "
                                       "encoder, which does not read this field"),
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
    raw = to_dict(load_config(RECIPE, [*TINY, "algorithm.policy_q=min", "algorithm.log_std_max=1.5"]))
    raw["policy"] = {**{k: v for k, v in raw["policy"].items() if k not in ("activation", "init_log_std")},
                     "type": "mlp_sac", "log_std_min": raw["algorithm"].pop("log_std_min"),
                     "log_std_max": raw["algorithm"].pop("log_std_max")}
    raw["policy"]["critic_hidden_sizes"] = raw["algorithm"].pop("critic_hidden_sizes")
    raw["algorithm"]["actor_q"] = raw["algorithm"].pop("policy_q")
    return raw


def test_a_config_saved_before_the_move_is_read_in_todays_form():
    cfg = config_from_dict(saved_before_the_move())
    assert cfg.policy.type == "mlp" and cfg.algorithm.critic_hidden_sizes == [8]
    assert cfg.algorithm.log_std_max == 1.5  # the alias's head field, now SAC's
    assert cfg.algorithm.policy_q == "min"


def test_init_from_a_checkpoint_of_the_alias_fits_the_plain_type_under_sac(tmp_path):
    worker = actor()
    for name, config in (("old", saved_before_the_move()), ("ppo", to_dict(load_config(None, ["policy.type=mlp"])))):
        save_policy_checkpoint(tmp_path / name, worker.policy, worker.optimizer, 0, SPEC,
                               {"iteration": 0, "env_steps": 0, "config": config})
    cfg = load_config(RECIPE, [*TINY])
    trained = cfg.algorithm.trained_policy(cfg.policy)
    assert check_init_from(str(tmp_path / "old"), trained) == tmp_path / "old"
    with pytest.raises(ValueError, match="it holds a policy.type='mlp' policy, this config trains 'mlp/tanh_gaussian'"):
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


def test_a_checkpoint_of_the_policy_types_before_the_move_loads_its_actor_under_the_encoder():
    """Format 3 kept the MLP actor's states under ``states.`` (the CNN's encoder under ``features.``); format 4's actor
    holds its encoder as ``encoder.`` (``SACConfig.checkpoint_moves``)."""
    worker = actor()
    worker.update([transitions(T=4)], 1)
    entry = worker.state()
    old = {k.replace("encoder.", "states.", 1) if k.startswith("encoder.") else k: v for k, v in entry["policy"].items()}
    state = {"config": to_dict(load_config(RECIPE, [*TINY])), "actor": {**entry, "policy": old}}
    migrated = migrate(state, 3)["actor"]["policy"]
    assert list(migrated) == list(entry["policy"]) or set(migrated) == set(entry["policy"])
    fresh = actor()
    fresh.load_state(migrate({"config": state["config"], "actor": {**entry, "policy": old}}, 3)["actor"])
    assert all(torch.equal(v, fresh.policy.state_dict()[k]) for k, v in worker.policy.state_dict().items())
