"""``algorithm.name`` picks a registered config class, which is the ``algorithm:`` section: its own fields (a key it
does not have is refused by name), its own checks, and the capabilities the engine reads instead of the name."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from embodied.algorithms.dsrl_config import DSRLConfig
from embodied.algorithms.grpo_config import GRPOConfig
from embodied.algorithms.ppo_config import PPOConfig
from embodied.algorithms.sac_config import SACConfig
from embodied.config import (AlgorithmConfig, Config, ConfigError, OffPolicyConfig, OnPolicyConfig,
                             algorithm_config_class, config_from_dict, load_config, to_dict)
from embodied.core.registry import ALGORITHMS

ROOT = Path(__file__).resolve().parents[3]
BUILT_IN = {"ppo": PPOConfig, "grpo": GRPOConfig, "sac": SACConfig, "dsrl": DSRLConfig}
CAPABILITIES = ("off_policy", "records_observations", "needs_whole_episodes", "staleness_correction")


def error_of(overrides: list[str], path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


def test_each_name_stands_for_its_config_class_and_the_default_is_ppo():
    for name, cls in BUILT_IN.items():
        assert ALGORITHMS.resolve(name) is cls and algorithm_config_class(name) is cls
        assert cls().name == name
    assert type(Config().algorithm) is PPOConfig and type(load_config(None).algorithm) is PPOConfig
    assert type(load_config(None, ["algorithm.name=sac"]).algorithm) is SACConfig


def test_capabilities_are_declared_with_docs_and_read_by_kind():
    for name in CAPABILITIES:
        assert isinstance(getattr(AlgorithmConfig, name), bool)
    assert (SACConfig.off_policy, SACConfig.records_observations, DSRLConfig.off_policy) == (True, True, True)
    assert (PPOConfig.off_policy, GRPOConfig.off_policy) == (False, False)
    assert GRPOConfig.needs_whole_episodes and not PPOConfig.needs_whole_episodes
    assert PPOConfig.staleness_correction and not GRPOConfig.staleness_correction and not SACConfig.staleness_correction
    assert issubclass(PPOConfig, OnPolicyConfig) and issubclass(DSRLConfig, OffPolicyConfig)
    source = (ROOT / "embodied" / "config" / "schema.py").read_text()
    for name in CAPABILITIES:  # each capability has an attribute docstring under it
        after = source.split(f"    {name}: ClassVar[bool] = False\n", 1)[1]
        assert after.lstrip().startswith('"""'), name


def test_a_field_of_another_algorithm_is_refused_by_name():
    msg = error_of(["algorithm.name=sac", "algorithm.target_kl=0.02"])
    assert "algorithm.target_kl: not a field of algorithm 'sac' (SACConfig); its fields: name, " in msg
    assert "algorithm.gae_lambda: not a field of algorithm 'grpo' (GRPOConfig)" in error_of(
        ["algorithm.name=grpo", "algorithm.gae_lambda=0.9"])
    assert "algorithm.utd_ratio: not a field of algorithm 'ppo' (PPOConfig)" in error_of(["algorithm.utd_ratio=2"])
    assert "algorithm.noise_scale: not a field of algorithm 'sac'" in error_of(
        ["algorithm.name=sac", "algorithm.noise_scale=1.5"])
    # a near miss is suggested, as for every section
    assert error_of(["algorithm.update_epoch=2"]).endswith("(did you mean 'update_epochs'?)")


def test_the_schedule_is_the_on_policy_algorithms_and_refused_where_it_does_not_take_effect():
    assert "algorithm.anneal_lr: not a field of algorithm 'sac'" in error_of(
        ["algorithm.name=sac", "algorithm.anneal_lr=false"])
    assert "algorithm.adam_eps: not a field of algorithm 'dsrl'" in error_of(
        ["algorithm.name=dsrl", "algorithm.adam_eps=1e-8"])
    for old, value in (("actor.anneal_lr=false", False), ("actor.adam_eps=1e-8", 1e-8),
                       ("actor.lr_warmup_iterations=2", 2), ("actor.lr=0.001", 0.001)):
        field = old.partition("=")[0]  # an old recipe keeps loading, told where the field went
        with pytest.warns(FutureWarning, match=rf"override '{old}': {field}: moved to algorithm.{field.split('.')[1]}"):
            moved = load_config(None, [old])
        assert getattr(moved.algorithm, field.split(".")[1]) == value
    cfg = load_config(None, ["algorithm.name=grpo", "algorithm.anneal_lr=false", "algorithm.lr_warmup_iterations=3",
                             "env.auto_reset=false", "env.max_episode_steps=16"])
    assert (cfg.algorithm.anneal_lr, cfg.algorithm.lr_warmup_iterations, cfg.algorithm.adam_eps) == (False, 3, 1e-5)


def test_the_learning_rate_is_every_algorithm_s_and_a_saved_config_with_actor_lr_reads_it_there():
    from embodied.config import config_from_dict, to_dict

    for name in ("sac", "iql", "ppo"):
        assert load_config(None, [f"algorithm.name={name}", "algorithm.lr=0.002"]).algorithm.lr == 0.002
    raw = to_dict(load_config(None, ["algorithm.lr=0.005"]))
    raw["actor"]["lr"] = raw["algorithm"].pop("lr")  # as a checkpoint of format 3 saved it
    assert config_from_dict(raw).algorithm.lr == 0.005
    assert "algorithm.lr: Adam's learning rate must be > 0, got 0.0" in error_of(["algorithm.lr=0"])


def test_what_the_off_policy_loop_cannot_run_with_is_refused_for_each_off_policy_algorithm():
    for name in ("sac", "dsrl"):
        msg = error_of([f"algorithm.name={name}", "actor.grad_accumulation_steps=2", "actor.ema_decay=0.9"])
        assert "actor.grad_accumulation_steps: algorithm.name=" + name in msg and "actor.ema_decay" in msg


def test_async_needs_an_algorithm_that_corrects_for_staleness():
    msg = error_of(["algorithm.name=grpo", "runner.mode=async", "cluster.placement=disaggregated"])
    assert "runner.mode: async trains on data of older weight versions, which algorithm.name=grpo does not" in msg
    assert load_config(None, ["runner.mode=async"]).runner.mode == "async"


def test_the_defaults_are_the_flat_configs_of_before():
    """No behaviour change: each algorithm's fields keep the defaults the one flat AlgorithmConfig had."""
    before = {"gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.2, "clip_vloss": True, "vf_coef": 0.5, "ent_coef": 0.0,
              "update_epochs": 4, "num_minibatches": 4, "max_grad_norm": 0.5, "reward_scale": 1.0,
              "normalize_advantages": True, "target_kl": None, "skip_nonfinite_updates": False,
              "critic_warmup_iterations": 0, "group_size": 8, "grpo_score": "return", "grpo_loss_mean": "token",
              "clip_coef_low": None, "clip_coef_high": None, "max_staleness": 1, "tau": 0.005, "num_critics": 2,
              "critic_subset": 2, "critic_layernorm": False, "utd_ratio": 1.0, "sync_every": 1, "overlap": True,
              "batch_size": 256, "replay_capacity": 100_000, "learning_starts": 1_000, "init_alpha": 0.1,
              "critic_lr": None, "target_entropy": None, "n_step": 1, "checkpoint_replay": True, "image_shift": 4,
              "demos": None, "demo_ratio": 0.5, "bc_weight": 0.0, "policy_q": "mean",
              "noise_scale": 1.0, "dsrl_features": "encoding", "noise_policy_hidden_sizes": [256, 256],
              "critic_hidden_sizes": [256, 256], "adam_eps": 1e-5, "anneal_lr": True, "lr_warmup_iterations": 0,
              "log_std_min": -5.0, "log_std_max": 2.0,  # the mlp_sac policy's of before
              "lr": 3e-4, "bootstrap_at_done": "truncated",
              "finite_horizon_gae": False}  # the last two: added later, their defaults the old behaviour
    seen = set()
    for cls in BUILT_IN.values():
        for field in dataclasses.fields(cls):
            if field.name != "name":
                assert getattr(cls(), field.name) == before[field.name], (cls.__name__, field.name)
                seen.add(field.name)
    assert seen == set(before)


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_a_config_round_trips_through_its_dict(name):
    overrides = [f"algorithm.name={name}"]
    if name == "grpo":
        overrides += ["env.auto_reset=false", "env.max_episode_steps=16"]
    if name == "dsrl":
        overrides += ["policy.type=vla", "policy.action_head=flow", "env.obs_mode=state+rgb", "policy.device=cpu"]
    try:
        cfg = load_config(None, overrides)
    except ConfigError as exc:  # dsrl needs a flow policy whose extras may be missing
        pytest.skip(str(exc))
    assert config_from_dict(to_dict(cfg)) == cfg and to_dict(cfg)["algorithm"]["name"] == name


def test_a_registered_algorithm_of_neither_kind_is_refused(monkeypatch):
    @dataclasses.dataclass
    class Bare(AlgorithmConfig):
        name: str = "bare"

    monkeypatch.setitem(ALGORITHMS._entries, "bare", Bare)
    assert "algorithm.name: bare's config Bare must subclass OnPolicyConfig" in error_of(["algorithm.name=bare"])


def test_grpo_refuses_a_critic_warm_up_it_has_no_critic_for():
    msg = error_of(["algorithm.name=grpo", "algorithm.critic_warmup_iterations=2", "env.auto_reset=false",
                    "env.max_episode_steps=16"])
    assert "algorithm.critic_warmup_iterations: not a field of algorithm 'grpo' (GRPOConfig)" in msg


def test_the_on_policy_base_holds_only_what_every_on_policy_learner_reads():
    """``OnPolicyConfig``: epochs, minibatches, the clip and the optimizer with its schedule, which REINFORCE, PPO
    and GRPO all read; PPO's loop and PPO's own fields live in their configs, and the engine asks methods (a
    warm-up, the staleness an async run may feed) that PPO's config answers with its fields."""
    from embodied.algorithms.grpo_config import GRPOConfig
    from embodied.algorithms.ppo_config import PPOConfig, PPOLoopConfig
    from embodied.config.algorithm import OnPolicyConfig

    shared = {f.name for f in dataclasses.fields(OnPolicyConfig)}
    assert shared == {"name", "lr", "update_epochs", "num_minibatches", "max_grad_norm", "adam_eps", "anneal_lr",
                      "lr_warmup_iterations"}
    loop = {f.name for f in dataclasses.fields(PPOLoopConfig)} - shared
    assert loop == {"target_kl", "skip_nonfinite_updates"} and issubclass(GRPOConfig, PPOLoopConfig)
    assert "critic_warmup_iterations" not in {f.name for f in dataclasses.fields(GRPOConfig)}
    assert (OnPolicyConfig().warmup_iterations(), OnPolicyConfig().staleness_limit()) == (0, 0)
    ppo = PPOConfig(critic_warmup_iterations=3, max_staleness=2)
    assert (ppo.warmup_iterations(), ppo.staleness_limit()) == (3, 2)
