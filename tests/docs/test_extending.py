"""docs/extending.md and the pages it splits into (extending_offpolicy.md, extending_policy.md) stay true: their code
is the examples' code (``docs/examples/my_algo``, ``my_policy``), each example trains on Reach through
``embodied.runs.train.train``, the checks the pages name refuse what they say they refuse, and every ``Class.attr``
they name exists."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import torch

from embodied.checkpoint.store import load_checkpoint
from embodied.config import ConfigError, load_config
from embodied.core.registry import ALGORITHMS, POLICIES
from embodied.runs.train import train

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / name for name in ("extending.md", "extending_offpolicy.md", "extending_policy.md")]
EXAMPLES = ROOT / "docs" / "examples"
FILES = ["my_algo/reinforce_config.py", "my_algo/reinforce.py", "reach_reinforce.yaml", "my_algo/td3_config.py",
         "my_algo/td3.py", "reach_td3.yaml",
         "my_policy/configuration.py", "my_policy/modeling.py", "reach_linear_ppo.yaml"]
REINFORCE, LINEAR, TD3 = (EXAMPLES / name for name in ("reach_reinforce.yaml", "reach_linear_ppo.yaml",
                                                        "reach_td3.yaml"))
# Seconds, not minutes: 4 envs, 10-step episodes, a tiny network, 2 iterations, no eval before the last.
TINY = ["env.num_envs=4", "env.max_episode_steps=10", "eval_env.num_envs=2", "runner.eval_episodes=2",
        "runner.iterations=2", "runner.eval_every=0", "logger.backends=[]", "logger.progress_bar=false",
        "runner.plot=false", "policy.action_chunk=2", "rollout.chunk_steps=5"]


@pytest.fixture(autouse=True)
def examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # as `PYTHONPATH=docs/examples` in the doc's commands


def config(recipe: Path, tmp_path: Path, *overrides: str):
    return load_config(recipe, [*TINY, f"experiment.output_dir={tmp_path}", *overrides])


def refusal(recipe: Path, tmp_path: Path, *overrides: str) -> str:
    """The ConfigError that loading (or starting) the run raises; no run directory is made."""
    with pytest.raises(ConfigError) as error:
        train(config(recipe, tmp_path, *overrides))
    assert not any(tmp_path.iterdir()), "a run directory was made for a run that never started"
    return str(error.value)


# -- the page shows the examples' code, and names what exists ----------------------------------------------------


def doc_text() -> str:
    return "\n".join(page.read_text() for page in DOCS)


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", doc_text(), flags=re.S)


def test_doc_shows_the_example_files_verbatim():
    shown = blocks("python") + blocks("yaml")
    for name in FILES:
        assert (EXAMPLES / name).read_text() in shown, name


def test_every_command_of_the_doc_is_run_here():
    commands = set(re.findall(r"^embodied (\S+) (\S+)", doc_text(), flags=re.M))
    assert commands == {("train", "docs/examples/reach_reinforce.yaml"),
                        ("train", "docs/examples/reach_linear_ppo.yaml")}


def named_attributes() -> set[tuple[str, str]]:
    return set(re.findall(r"`([A-Z]\w+)\.(\w+)`", doc_text()))


def test_every_class_attribute_the_doc_names_exists():
    from embodied.algorithms.base import LearnerSpec, OffPolicyLearner, OnPolicyLearner, UpdateContext
    from embodied.algorithms.transitions import ReplaySample
    from embodied.algorithms.dagger import DAggerLearner
    from embodied.algorithms.dagger_config import DAggerConfig
    from embodied.algorithms.sac import SACLearner
    from embodied.config.algorithm import OffPolicyConfig, OnPolicyConfig, TDConfig
    from embodied.config.schema import AlgorithmConfig
    from embodied.envs.chunked import ChunkedVectorEnv
    from embodied.policy.base import Policy
    from embodied.policy.config import PolicyConfig
    from embodied.core.types import ChunkStepResult, Trajectory

    known = {c.__name__: c for c in (LearnerSpec, ReplaySample, OnPolicyLearner, OffPolicyLearner, UpdateContext, DAggerLearner, DAggerConfig,
                                     SACLearner, OnPolicyConfig, OffPolicyConfig, TDConfig, AlgorithmConfig, ChunkedVectorEnv,
                                     Policy, PolicyConfig, ChunkStepResult, Trajectory)}
    named = named_attributes()
    assert {("DAggerLearner", "update"), ("PolicyConfig", "spec_problems")} <= named  # the scan sees them
    for cls_name, attr in sorted(named):
        cls = known[cls_name]
        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        in_init = re.search(rf"self\.{attr}\b", inspect.getsource(cls))  # an attribute __init__ sets
        assert hasattr(cls, attr) or attr in fields or in_init, \
            f"the extending pages name {cls_name}.{attr}, which does not exist"


def test_the_capabilities_the_doc_names_are_algorithm_config_s():
    from embodied.config.schema import AlgorithmConfig

    text = doc_text()
    for name in ("off_policy", "records_observations", "needs_whole_episodes", "staleness_correction",
                 "needs_q_functions", "expert_labels", "worker_policy"):
        assert f"`{name}" in text and hasattr(AlgorithmConfig, name), name


# -- an algorithm: REINFORCE --------------------------------------------------------------------------------------


def test_returns_to_go_against_the_sum():
    from my_algo.reinforce import returns_to_go

    rewards = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 0.0]])
    got = returns_to_go(rewards, 0.5)
    want = torch.tensor([[sum(rewards[k, n] * 0.5 ** (k - t) for k in range(t, 3)) for n in range(2)]
                         for t in range(3)])
    torch.testing.assert_close(got, want)


def test_reinforce_trains_on_reach(tmp_path):
    result = train(config(REINFORCE, tmp_path))
    assert len(result.history) == 2 and result.checkpoint is not None
    for row in result.history:
        assert {"train/policy_loss", "train/grad_norm", "reinforce/return_mean"} <= set(row)
        assert row["env/episodes"] == 4  # one whole episode per env per iteration (needs_whole_episodes)
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0


def test_td3_trains_on_reach_and_resumes_exactly(tmp_path):
    short = ["algorithm.batch_size=16", "algorithm.learning_starts=16", "rollout.chunk_steps=4",
             "runner.checkpoint_every=1", "algorithm.critic_hidden_sizes=[16]", "policy.hidden_sizes=[16]"]
    whole = train(config(TD3, tmp_path / "whole", *short, "runner.iterations=4"))
    assert any("td3/actor_loss" in row for row in whole.history) and "td3/critic_loss" in whole.history[-1]
    first = train(config(TD3, tmp_path / "parts", *short, "runner.iterations=2"))
    resumed = train(config(TD3, tmp_path / "parts", *short, "runner.iterations=4",
                           f"runner.resume_from={first.run_dir}"))
    pa, pb = (load_checkpoint(r.checkpoint)["actor"]["policy"] for r in (whole, resumed))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_the_register_call_of_the_doc_gives_a_short_name(monkeypatch, tmp_path):
    ALGORITHMS.names()  # the entry points read, then a copy to register into (undone after the test)
    monkeypatch.setattr(ALGORITHMS, "_entries", dict(ALGORITHMS._entries))
    [snippet] = [b for b in blocks("python") if "ALGORITHMS.register" in b]
    exec(snippet, {})
    cfg = config(REINFORCE, tmp_path, "algorithm.name=reinforce")
    assert type(cfg.algorithm).__name__ == "ReinforceConfig" and cfg.algorithm.name == "reinforce"


@pytest.mark.parametrize("override,words", [
    ("algorithm.clip_coef=0.2", "algorithm.clip_coef: not a field of algorithm"),  # unknown fields, by name
    ("algorithm.gamma=1.5", "algorithm.gamma: must be in (0, 1]"),  # its validate()
    ("algorithm.target_kl=0.1", "algorithm.target_kl: not a field of algorithm"),  # PPO's loop's, not the family's
    ("env.auto_reset=true", "env.auto_reset: algorithm.name=my_algo.reinforce_config:ReinforceConfig runs one "
                            "episode per env"),  # needs_whole_episodes
    ("rollout.chunk_steps=3", "rollout.chunk_steps: algorithm.name=my_algo.reinforce_config:ReinforceConfig needs "
                              "whole episodes"),
    ("runner.mode=async", "does not correct for"),  # no staleness_correction
])
def test_reinforce_checks_refuse_before_any_worker(tmp_path, override, words):
    assert words in refusal(REINFORCE, tmp_path, override)


# -- a policy: a linear Gaussian -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(EXAMPLES))
        return train(config(LINEAR, tmp_path_factory.mktemp("linear")))


def test_linear_policy_trains_with_ppo_on_reach(linear_run):
    assert len(linear_run.history) == 2 and linear_run.checkpoint is not None
    assert {"train/policy_loss", "train/value_loss", "train/approx_kl"} <= set(linear_run.history[-1])
    assert 0.0 <= linear_run.final_eval["eval/success_rate"] <= 1.0


@pytest.mark.parametrize("override,words", [
    ("policy.state_indices=[1,1]", "policy.state_indices: distinct indices >= 0"),  # validate()
    ("policy.state_indices=[7,10]", "policy.state_indices: the env's states have 10 entries"),  # spec_problems
    ("env.obs_mode=rgb", "env.obs_mode: policy.type=my_policy.configuration:LinearConfig needs states"),
    ("policy.hidden_sizes=[8]", "unknown field 'policy.hidden_sizes'"),  # the MLP's field: not the linear's
])
def test_linear_policy_checks_refuse_before_any_worker(tmp_path, override, words):
    assert words in refusal(LINEAR, tmp_path, override)


def test_init_from_refuses_other_architecture_fields(linear_run, tmp_path):
    message = refusal(LINEAR, tmp_path, f"policy.init_from={linear_run.checkpoint}", "policy.state_indices=[8,9]")
    assert "its policy.state_indices is [7, 8, 9], this config's is [8, 9]" in message


def test_init_from_the_same_architecture_starts_from_its_weights(linear_run, tmp_path):
    result = train(config(LINEAR, tmp_path, f"policy.init_from={linear_run.checkpoint}", "runner.iterations=1"))
    assert result.checkpoint is not None


def test_a_registered_short_policy_name(monkeypatch, tmp_path):
    POLICIES.names()
    monkeypatch.setattr(POLICIES, "_entries", dict(POLICIES._entries))
    [snippet] = [b for b in blocks("python") if "POLICIES.register" in b]
    exec(snippet, {})
    cfg = config(LINEAR, tmp_path, "policy.type=linear")
    assert type(cfg.policy).__name__ == "LinearConfig" and cfg.policy.state_indices == [7, 8, 9]
