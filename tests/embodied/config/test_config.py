"""The config loader: every recipe loads, overrides apply, and every bad input names its field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from embodied.config import Config, ConfigError, EnvConfig, config_from_dict, load_config, to_dict
from embodied.config.schema import EvalEnvConfig
from embodied.policies.mlp.configuration import MLPConfig

ROOT = Path(__file__).resolve().parents[3]
# Recipes for a model folder downloaded by the user: loaded and validated with a stand-in folder by
# the test named here instead.
NEEDS_A_MODEL = {"libero_spatial_vla_gpu.yaml": "tests/e2e/test_libero_recipe.py",
                 "libero_pi0_ppo_gpu.yaml": "tests/e2e/test_libero_recipe.py",
                 "libero_pi05_ppo_gpu.yaml": "tests/e2e/test_pi05_recipe.py"}
RECIPES = sorted(p for p in (ROOT / "configs").glob("*.yaml") if p.name not in NEEDS_A_MODEL)


def test_there_are_recipes():
    assert RECIPES, "configs/ holds no YAML recipes"
    assert all((ROOT / test).is_file() for test in NEEDS_A_MODEL.values())


@pytest.mark.parametrize("path", RECIPES, ids=[p.name for p in RECIPES])
def test_every_recipe_loads(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    # Every recipe round-trips through the plain-dict form a checkpoint stores.
    assert config_from_dict(to_dict(cfg)) == cfg


def test_defaults_load_without_a_file():
    cfg = load_config(None)
    assert cfg == Config(policy=MLPConfig())
    assert isinstance(cfg.policy, MLPConfig)


# -- overrides ----------------------------------------------------------------------------------


def test_scalar_overrides_reach_their_fields():
    cfg = load_config(ROOT / "configs" / "reach_mlp_ppo.yaml", [
        "env.num_envs=8", "cluster.backend=ray", "algorithm.gamma=0.9", "algorithm.anneal_lr=false",
        "experiment.name=my run", "algorithm.lr=1", "cluster.num_env_workers=2",
    ])
    assert cfg.env.num_envs == 8
    assert cfg.cluster.backend == "ray"
    assert cfg.algorithm.gamma == 0.9
    assert cfg.algorithm.anneal_lr is False
    assert cfg.experiment.name == "my run"
    assert cfg.algorithm.lr == 1.0 and isinstance(cfg.algorithm.lr, float)  # int widened to float
    assert cfg.cluster.num_env_workers == 2


def test_list_overrides():
    cfg = load_config(None, ["policy.hidden_sizes=[32, 16]", "logger.backends=[console]"])
    assert cfg.policy.hidden_sizes == [32, 16]
    assert cfg.logger.backends == ["console"]
    cfg = load_config(None, ["logger.backends=[]"])
    assert cfg.logger.backends == []


def test_null_overrides():
    cfg = load_config(None, ["eval_env.num_envs=null", "algorithm.target_kl=null", "cluster.address=null"])
    assert cfg.eval_env.num_envs is None and cfg.algorithm.target_kl is None and cfg.cluster.address is None
    cfg = load_config(None, ["algorithm.target_kl=0.02", "eval_env.num_envs=4"])
    assert cfg.algorithm.target_kl == 0.02 and cfg.eval_env.num_envs == 4


def test_dict_override_and_later_override_wins():
    cfg = load_config(None, ["env.kwargs={reward_type: sparse}", "env.num_envs=4", "env.num_envs=6"])
    assert cfg.env.kwargs == {"reward_type": "sparse"}
    assert cfg.env.num_envs == 6
    cfg = load_config(None, ["env.kwargs.reward_type=sparse"])
    assert cfg.env.kwargs == {"reward_type": "sparse"}


def test_override_of_a_recipe_value(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("env:\n  num_envs: 4\npolicy:\n  hidden_sizes: [8]\n")
    cfg = load_config(recipe, ["policy.hidden_sizes=[32]"])
    assert cfg.env.num_envs == 4 and cfg.policy.hidden_sizes == [32]
    assert recipe.read_text() == "env:\n  num_envs: 4\npolicy:\n  hidden_sizes: [8]\n"  # file untouched


def test_empty_yaml_gives_defaults(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    assert load_config(empty) == load_config(None)


# -- errors name the field path -----------------------------------------------------------------


def error_of(overrides: list[str], path: str | Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


def test_unknown_key_suggests_the_close_one():
    msg = error_of(["env.num_env=4"])
    assert "env.num_env" in msg and "did you mean 'num_envs'" in msg


def test_unknown_section_is_named():
    msg = error_of(["enviroment.num_envs=4"])
    assert "enviroment" in msg


def test_unknown_key_in_a_recipe_names_the_file(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("algorithm:\n  gama: 0.9\n")
    msg = error_of([], recipe)
    assert str(recipe) in msg and "algorithm.gama" in msg and "did you mean 'gamma'" in msg


def test_unknown_policy_field_is_checked_against_the_policy_subclass():
    msg = error_of(["policy.hidden_size=[32]"])
    assert "policy.hidden_size" in msg and "did you mean 'hidden_sizes'" in msg


@pytest.mark.parametrize("override, path", [
    ("env.num_envs=abc", "env.num_envs"),
    ("env.num_envs=true", "env.num_envs"),  # a bool is not an int
    ("env.num_envs=2.5", "env.num_envs"),
    ("algorithm.gamma=high", "algorithm.gamma"),
    ("algorithm.anneal_lr=1", "algorithm.anneal_lr"),
    ("experiment.name=3", "experiment.name"),
    ("policy.hidden_sizes=32", "policy.hidden_sizes"),
    ("policy.hidden_sizes=[32, x]", "policy.hidden_sizes[1]"),
    ("env.kwargs=[1]", "env.kwargs"),
    ("env=3", "env"),
])
def test_wrong_type_names_the_field(override, path):
    msg = error_of([override])
    assert f"{path}:" in msg or f"{path!r}" in msg, msg


def test_unknown_env_id_lists_known_ids_and_suggests():
    msg = error_of(["env.id=Reach-v1"])
    assert "env.id" in msg and "Reach-v0" in msg and "did you mean 'Reach-v0'" in msg
    assert "Known:" in msg


def test_unknown_eval_env_id_is_named_under_eval_env():
    msg = error_of(["eval_env.id=Rech-v0"])
    assert "eval_env.id" in msg and "Reach-v0" in msg


def test_direct_entry_point_env_id_is_accepted():
    cfg = load_config(None, ["env.id=tests.toy_envs:CountingEnv"])
    assert cfg.env.id == "tests.toy_envs:CountingEnv"


def test_unknown_policy_type():
    msg = error_of(["policy.type=mpl"])
    assert "policy.type" in msg and "mlp" in msg and "did you mean 'mlp'" in msg


def test_policy_type_that_is_not_a_config_class():
    msg = error_of(["policy.type=collections:OrderedDict"])
    assert "policy.type" in msg and "not a PolicyConfig subclass" in msg


@pytest.mark.parametrize("field", ["policy.init_from", "runner.resume_from"])
def test_an_empty_checkpoint_path_is_refused_not_read_as_none(field):
    msg = error_of([f"{field}="])  # e.g. field=$RUN with $RUN unset
    assert f"{field}: an empty path" in msg
    section, name = field.split(".")
    assert getattr(getattr(load_config(None, [f"{field}=null"]), section), name) is None


def test_action_chunk_zero():
    msg = error_of(["policy.action_chunk=0"])
    assert "policy.action_chunk" in msg and ">= 1" in msg


@pytest.mark.parametrize("value", [0, -3])
def test_num_envs_not_positive(value):
    msg = error_of([f"env.num_envs={value}", "algorithm.num_minibatches=1", "cluster.num_env_workers=1",
                    "cluster.num_rollout_workers=1"])
    assert "env.num_envs" in msg and ">= 1" in msg


def test_eval_num_envs_not_positive():
    msg = error_of(["eval_env.num_envs=0"])
    assert "eval_env.num_envs" in msg


@pytest.mark.parametrize("field", ["num_env_workers", "num_rollout_workers"])
def test_more_worker_ranks_than_envs(field):
    msg = error_of(["env.num_envs=4", f"cluster.{field}=5"])
    assert f"cluster.{field}" in msg and "env.num_envs=4" in msg


def test_all_problems_are_reported_at_once():
    msg = error_of(["policy.action_chunk=0", "algorithm.gamma=0", "rollout.chunk_steps=0"])
    assert "policy.action_chunk" in msg and "algorithm.gamma" in msg and "rollout.chunk_steps" in msg


def test_address_needs_ray():
    msg = error_of(["cluster.address=auto"])
    assert "cluster.address" in msg
    assert load_config(None, ["cluster.address=auto", "cluster.backend=ray"]).cluster.address == "auto"


@pytest.mark.parametrize("override, path", [
    ("cluster.backend=slurm", "cluster.backend"),
    ("env.obs_mode=depth", "env.obs_mode"),
    ("eval_env.obs_mode=depth", "eval_env.obs_mode"),
    ("logger.backends=[console, carrier_pigeon]", "logger.backends[1]"),
    ("algorithm.policy_q=median", "algorithm.policy_q"),
])
def test_bad_literal_names_the_choices(override, path):
    msg = error_of(["algorithm.name=sac", override] if override.startswith("algorithm.") else [override])
    assert path in msg and "is not one of" in msg, msg


@pytest.mark.parametrize("override", ["env.num_envs", "=4", " =4"])
def test_malformed_override(override):
    msg = error_of([override])
    assert repr(override) in msg and "section.field=value" in msg


def test_override_into_a_scalar_is_not_a_section():
    with pytest.raises(ConfigError, match="env.num_envs is not a section"):
        load_config(None, ["env.num_envs=4", "env.num_envs.x=1"])


def test_a_dotted_override_opens_a_section_the_recipe_left_null(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("env:\n  id: Reach-v0\n  kwargs: null\neval_env:\n  kwargs: null\n")
    cfg = load_config(recipe, ["eval_env.kwargs.task_ids=[0]", "env.kwargs.reward_type=dense"])
    assert cfg.eval_env.kwargs == {"task_ids": [0]} and cfg.env.kwargs == {"reward_type": "dense"}


def test_missing_file():
    msg = error_of([], "configs/missing.yaml")
    assert "configs/missing.yaml" in msg and "does not exist" in msg


def test_yaml_syntax_error_names_the_file(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("env:\n  num_envs: [1, 2\n")
    msg = error_of([], bad)
    assert str(bad) in msg and "not valid YAML" in msg


def test_top_level_not_a_mapping(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- env\n- policy\n")
    msg = error_of([], bad)
    assert str(bad) in msg and "mapping" in msg and "list" in msg


def test_section_not_a_mapping_in_a_file(tmp_path):
    bad = tmp_path / "section.yaml"
    bad.write_text("env: Reach-v0\n")
    msg = error_of([], bad)
    assert str(bad) in msg and "env: expected a mapping" in msg


# -- eval env and round trip ---------------------------------------------------------------------


def test_resolved_eval_env_inherits_env_fields_and_never_auto_resets():
    cfg = load_config(None, ["env.num_envs=8", "env.max_episode_steps=30", "env.obs_mode=state+rgb",
                             "env.kwargs={reward_type: sparse}"])
    assert cfg.eval_env == EvalEnvConfig()
    ev = cfg.resolved_eval_env()
    assert ev == EnvConfig(id="Reach-v0", num_envs=8, obs_mode="state+rgb", max_episode_steps=30,
                           auto_reset=False, kwargs={"reward_type": "sparse"}, vectorization="per_env")
    ev.kwargs["x"] = 1
    assert cfg.env.kwargs == {"reward_type": "sparse"}  # a copy, not the training env's dict


def test_resolved_eval_env_takes_its_own_fields():
    cfg = load_config(None, ["env.auto_reset=true", "eval_env.num_envs=3", "eval_env.max_episode_steps=7",
                             "eval_env.obs_mode=state+rgb", "eval_env.kwargs={image_size: 32}",
                             "eval_env.id=tests.toy_envs:CountingEnv"])
    ev = cfg.resolved_eval_env()
    assert ev == EnvConfig(id="tests.toy_envs:CountingEnv", num_envs=3, obs_mode="state+rgb", max_episode_steps=7,
                           auto_reset=False, kwargs={"image_size": 32}, vectorization="per_env")  # eval's default
    native = load_config(None, ["eval_env.vectorization=native"]).resolved_eval_env()
    assert native.vectorization == "native"


def test_to_dict_round_trip():
    cfg = load_config(None, ["policy.hidden_sizes=[32]", "algorithm.target_kl=0.1", "env.kwargs={a: 1}",
                             "eval_env.num_envs=2", "logger.backends=[console]"])
    raw = to_dict(cfg)
    assert isinstance(raw, dict) and raw["policy"]["type"] == "mlp" and raw["policy"]["hidden_sizes"] == [32]
    back = config_from_dict(raw)
    assert back == cfg
    assert isinstance(back.policy, MLPConfig)


def test_config_from_dict_validates():
    raw = to_dict(load_config(None))
    raw["policy"]["action_chunk"] = 0
    with pytest.raises(ConfigError, match="policy.action_chunk"):
        config_from_dict(raw)
    raw = to_dict(load_config(None))
    raw["env"]["bogus"] = 1
    with pytest.raises(ConfigError, match="env.bogus"):
        config_from_dict(raw)


def test_more_worker_ranks_than_eval_envs_is_named():
    with pytest.raises(ConfigError, match=r"cluster.num_env_workers: 3 ranks for eval_env.num_envs=2"):
        load_config(None, ["env.num_envs=8", "eval_env.num_envs=2", "cluster.num_env_workers=3"])


@pytest.mark.parametrize("overrides,expected", [
    (["policy.type=mlp", "env.obs_mode=rgb"], "env.obs_mode: policy.type=mlp needs states, which 'rgb' does not give"),
    (["policy.type=cnn", "env.obs_mode=state"], "env.obs_mode: policy.type=cnn needs images"),
    (["policy.type=vla", "env.obs_mode=state+rgb", "eval_env.obs_mode=state"], "eval_env.obs_mode: policy.type=vla"),
    (["policy.type=vla", "policy.use_states=true", "env.obs_mode=rgb"], "use state+rgb"),
])
def test_the_observations_a_policy_needs_are_checked_against_obs_mode(overrides, expected):
    assert expected in error_of(overrides)


def test_yaml_floats_with_an_exponent_and_no_dot_are_floats(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("actor:\n  lr: 3e-4\nalgorithm:\n  adam_eps: 1E-5\n  ent_coef: 1e-3\n")
    cfg = load_config(path, ["algorithm.vf_coef=5e-1"])
    assert (cfg.algorithm.lr, cfg.algorithm.adam_eps, cfg.algorithm.ent_coef, cfg.algorithm.vf_coef) == (3e-4, 1e-5, 1e-3, 0.5)


def test_an_override_typo_names_the_override_not_the_file(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("env:\n  num_envs: 4\n")
    msg = error_of(["env.num_env=3"], path)
    assert msg.startswith("override 'env.num_env=3'") and "did you mean 'num_envs'" in msg
    assert error_of(["algorithm.lr=fast"], path).startswith("override 'algorithm.lr=fast'")
    path.write_text("env:\n  num_env: 4\n")
    assert error_of([], path).startswith(str(path))


def test_an_unknown_algorithm_lists_the_registered_ones():
    msg = error_of(["algorithm.name=dqn"])
    assert "algorithm.name: unknown algorithm 'dqn'" in msg and "grpo, iql, ppo, rloo, sac" in msg


def test_grpo_needs_groups_whole_episodes_and_no_auto_reset():
    msg = error_of(["algorithm.name=grpo", "algorithm.group_size=5", "env.num_envs=32", "env.max_episode_steps=50",
                    "rollout.chunk_steps=10", "policy.action_chunk=4"])
    assert "algorithm.group_size: env.num_envs=32 is not a multiple of group_size=5" in msg
    assert "env.auto_reset: algorithm.name=grpo runs one episode per env" in msg
    assert "rollout.chunk_steps: algorithm.name=grpo needs whole episodes" in msg
    assert "40 sub-steps < env.max_episode_steps=50" in msg
    assert "algorithm.group_size: GRPO compares" in error_of(["algorithm.name=grpo", "algorithm.group_size=1"])
    cfg = load_config(None, ["algorithm.name=grpo", "algorithm.group_size=4", "env.num_envs=8", "env.auto_reset=false",
                             "env.max_episode_steps=40", "rollout.chunk_steps=10", "policy.action_chunk=4"])
    assert cfg.algorithm.name == "grpo"
    assert "algorithm.clip_coef_high: must be > 0" in error_of(["algorithm.name=grpo", "algorithm.clip_coef_high=0"])
    assert "algorithm.critic_warmup_iterations" in error_of(["algorithm.critic_warmup_iterations=-1"])


def test_a_key_given_twice_in_yaml_is_an_error_naming_file_and_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("env:\n  num_envs: 4\n  id: Reach-v0\n  num_envs: 8\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "duplicate key 'num_envs'" in message and "first given on line 2" in message
    assert str(path) in message and "line 4" in message


@pytest.mark.parametrize(("override", "expected"), [
    ("algorithm.lr=.inf", "algorithm.lr: must be a finite number, got inf"),
    ("algorithm.lr=.nan", "algorithm.lr: Adam's learning rate must be > 0, got nan"),
    ("algorithm.adam_eps=0", "algorithm.adam_eps: must be > 0"),
    ("experiment.seed=-1", "experiment.seed: must be in [0, 2**32)"),
    ("experiment.seed=4294967296", "experiment.seed: must be in [0, 2**32)"),
    ("algorithm.target_kl=0", "algorithm.target_kl: must be > 0"),
    ("algorithm.ent_coef=.inf", "algorithm.ent_coef: must be a finite number"),
    ("algorithm.vf_coef=-1", "algorithm.vf_coef: must be >= 0"),
    ("policy.hidden_sizes=[]", "policy.hidden_sizes: need at least one layer"),
    ("policy.hidden_sizes=[64,0]", "policy.hidden_sizes: need at least one layer, every width >= 1"),
    ("policy.init_log_std=.nan", "policy.init_log_std: must be a finite number"),
    ("sft.max_grad_norm=0", "sft.max_grad_norm: must be > 0"),
    ("algorithm.reward_scale=0", "algorithm.reward_scale: must be > 0"),
])
def test_numeric_ranges_and_non_finite_numbers_are_refused_once(override, expected):
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs" / "reach_mlp_ppo.yaml", [override])
    message = str(err.value)
    assert expected in message
    assert message.count(override.split("=")[0] + ":") == 1  # one problem per field, not one per check


def test_sft_features_map_our_keys_to_dataset_feature_names_or_null():
    cfg = load_config(None, ["sft.features.main_images=observation.images.top", "sft.features.wrist_images=null"])
    assert cfg.sft.features == {"main_images": "observation.images.top", "wrist_images": None}
    assert load_config(None, ["sft.epochs=3"]).sft.features == {}  # the usual names are looked up
    assert load_config(None).sft is None  # a recipe without an sft: section has none
    for override, expected in (("sft.features.camera=x", "sft.features.camera: unknown key; the keys are states, "
                                                         "main_images, wrist_images, actions"),
                               ("sft.features.states=3", "sft.features.states: a feature name (string) or null"),
                               ("sft.frame_cache_mb=-1", "sft.frame_cache_mb: must be >= 0")):
        with pytest.raises(ConfigError, match=re.escape(expected)):
            load_config(None, [override])
