"""A minibatch split over actor ranks (a gloo process group of Ray actors) or over micro-batches (gradient
accumulation) takes the same step as the whole minibatch on one rank: the ranks' and parts' losses are
shares of the whole minibatch's means (``Averages``), and their gradients are summed."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from embodied.algorithms.base import Averages
from embodied.algorithms.ppo_config import PPOConfig
from embodied.config import ActorConfig, Config
from embodied.config.schema import ClusterConfig
from embodied.core.types import Trajectory
from embodied.policies.mlp.configuration import MLPConfig
from embodied.policies.pi0.configuration import PI0PolicyConfig
from embodied.policies.pi05.configuration import PI05PolicyConfig
from embodied.policies.vla.configuration import VLAConfig
from embodied.policy.base import Policy, PolicySpec
from embodied.workers.actor_worker import ActorWorker
from tests.policies import test_pi0, test_vla

MLP_SPEC = PolicySpec(state_dim=5, image_shape=None, action_dim=3, action_low=(-1.0,) * 3, action_high=(1.0,) * 3)
TOL = dict(rtol=1e-4, atol=1e-6)  # fp32: sums over the ranks' shares round differently from one sum


def mlp_obs(n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"states": (torch.randn(n, 5, generator=g) * 3 + 1).numpy()}


CASES = {
    "mlp": (lambda: MLPConfig(action_chunk=2, hidden_sizes=[16, 16], normalize_states=True), MLP_SPEC, mlp_obs),
    "vla": (lambda: VLAConfig(model_path="tiny:smolvlm-tiny", action_chunk=2), test_vla.spec(),
            lambda n, seed: test_vla.observations(n, seed)),
    "vla-lora": (lambda: VLAConfig(model_path="tiny:smolvlm-tiny", action_chunk=2, lora_rank=4), test_vla.spec(),
                 lambda n, seed: test_vla.observations(n, seed)),
    # π0 itself: the prefix's KV cache carries the gradient into the VLM; under LoRA only adapters and projections train.
    "pi0": (lambda: PI0PolicyConfig(action_chunk=2), test_pi0.SPEC, lambda n, seed: test_pi0.observations(n, seed)),
    "pi0-lora": (lambda: PI0PolicyConfig(action_chunk=2, lora_rank=4), test_pi0.SPEC,
                 lambda n, seed: test_pi0.observations(n, seed)),
    # π0.5 on π0's machinery: the same, through the adaRMS expert and the state in the prompt.
    "pi05": (lambda: PI05PolicyConfig(action_chunk=2, max_instruction_tokens=48), test_pi0.SPEC,
             lambda n, seed: test_pi0.observations(n, seed)),
}


def rollout(policy: Policy, obs: dict, steps: int, seed: int) -> Trajectory:
    """``steps`` chunk steps acted by ``policy``; one env's episode ends mid-chunk, so masks differ across rows."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    with torch.no_grad():
        outs = [policy.act(obs) for _ in range(steps)]
    n, chunk = outs[0].actions.shape[:2]
    stack = lambda key: torch.stack([getattr(o, key) for o in outs])  # noqa: E731
    executed = torch.ones(steps, n, chunk, dtype=torch.bool)
    executed[0, 0, 1:] = False  # env 0's episode ends at the first sub-step of the first chunk
    dones = torch.zeros(steps, n, dtype=torch.bool)
    dones[0, 0] = True
    return Trajectory(
        forward_inputs={k: torch.stack([o.forward_inputs[k] for o in outs]) for k in outs[0].forward_inputs},
        actions=stack("actions"), logprobs=stack("logprobs"), values=stack("values"),
        rewards=torch.randn(steps, n, chunk, generator=g) * executed, executed=executed, dones=dones,
        terminated=dones.clone(), final_values=torch.zeros(steps, n), next_values=torch.zeros(n), version=0)


def actor_args(kind: str, accumulation: int = 1, ranks: int = 1) -> tuple:
    config, spec, _ = CASES[kind]
    algo = PPOConfig(update_epochs=1, num_minibatches=1, normalize_advantages=True, max_grad_norm=1e9, adam_eps=1e-2,
                     anneal_lr=False, lr=1e-2)
    # Adam's first step is lr * g / (|g| + eps): with a small eps it turns the rounding of a near-zero gradient
    # into a step of the learning rate's size, so the comparison uses a large one.
    return (config(), spec, algo, ActorConfig(num_ranks=ranks,
                                              grad_accumulation_steps=accumulation), 3, 0)


def shares(kind: str) -> list[Trajectory]:
    """Two rollout ranks' trajectories (2 envs x 3 chunk steps each), acted by the initial policy."""
    policy = ActorWorker(*actor_args(kind)).policy
    obs = CASES[kind][2]
    return [rollout(policy, obs(2, seed), 3, seed) for seed in (1, 2)]


def trained_state(actor: ActorWorker) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in actor.policy.state_dict().items()}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], before: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    assert any(not torch.equal(before[k], a[k]) for k in a)  # the step moved something
    for k in a:
        torch.testing.assert_close(b[k], a[k], **TOL, msg=lambda m: f"{k}: {m}")


@pytest.mark.parametrize("kind", ["mlp", "vla", "pi0", "pi05"])
@pytest.mark.filterwarnings("ignore:policy.type=pi05.*no normalization statistics")
def test_accumulated_micro_batches_take_the_whole_minibatch_step(kind):
    trajectories = shares(kind)
    whole, split = ActorWorker(*actor_args(kind)), ActorWorker(*actor_args(kind, accumulation=3))
    before = trained_state(whole)
    m1 = whole.update(trajectories, 1)
    m2 = split.update(trajectories, 1)
    assert_same(trained_state(whole), trained_state(split), before)
    for key in ("train/loss", "train/policy_loss", "train/value_loss", "train/approx_kl", "train/grad_norm"):
        assert math.isclose(m1[key], m2[key], rel_tol=1e-4, abs_tol=1e-6), key


def test_averages_of_parts_add_up_to_the_whole_mean():
    g = torch.Generator().manual_seed(0)
    x, executed = torch.randn(6, 4, generator=g), torch.rand(6, 4, generator=g) > 0.3
    adv = torch.randn(6, generator=g)
    averages = Averages(executed, adv)
    whole = (x * executed).sum() / executed.sum()
    parts = sum(averages.mean(x[rows], executed[rows]) for rows in torch.arange(6).chunk(3))
    torch.testing.assert_close(parts, whole)
    normalized = torch.cat([averages.normalize(adv[rows]) for rows in torch.arange(6).chunk(3)])
    torch.testing.assert_close(normalized, (adv - adv.mean()) / (adv.std() + 1e-8))


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(set(CASES) - {"pi05"}))  # π0.5's sync is π0's code (76 s more here)
def test_two_gloo_ranks_take_the_single_rank_step(kind, ray_session):
    from embodied.backends import RayBackend
    from embodied.workers.launch import start_actor_group

    trajectories = shares(kind)
    single = ActorWorker(*actor_args(kind))
    before = trained_state(single)
    expected_metrics = single.update(trajectories, 1)

    policy_cfg, spec, algo, actor_cfg, iterations, seed = actor_args(kind, ranks=2)
    cfg = Config()
    cfg.policy, cfg.algorithm, cfg.actor = policy_cfg, algo, actor_cfg
    cfg.runner.iterations, cfg.experiment.seed = iterations, seed
    backend = RayBackend(ClusterConfig(backend="ray"))
    group = start_actor_group(cfg, backend, spec)
    try:
        metrics = backend.wait(group.call_each("update", [([trajectories[0]], 1), ([trajectories[1]], 1)]))
        states = backend.wait(group.call("state"))
        version, weights = backend.wait(group.call("weights"))[0]
    finally:
        import ray

        for actor in group.actors:
            ray.kill(actor)
    assert metrics[0] == metrics[1]  # every rank reports the whole minibatch
    for key in ("train/loss", "train/policy_loss", "train/value_loss", "train/approx_kl", "train/grad_norm"):
        assert math.isclose(metrics[0][key], expected_metrics[key], rel_tol=1e-4, abs_tol=1e-6), key
    whole = single.state()["policy"]
    for rank_state in states:
        assert_same(whole, rank_state["policy"], before if not single.policy.exports_pretrained else
                    {k: v for k, v in before.items() if k in whole})
    assert version == 1 and weights.keys() == single.policy.trainable_state().keys()


def test_several_ranks_need_ray_and_an_even_split():
    from embodied.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"actor.num_ranks: 2 ranks need cluster.backend=ray"):
        load_config("configs/reach_mlp_ppo.yaml", ["actor.num_ranks=2"])
    with pytest.raises(ConfigError, match=r"num_rollout_workers=1 must be a multiple"):
        load_config("configs/reach_mlp_ppo.yaml", ["actor.num_ranks=2", "cluster.backend=ray"])
    with pytest.raises(ConfigError, match=r"does not split into 1 ranks x 7 micro-batches"):
        load_config("configs/reach_mlp_ppo.yaml", ["actor.grad_accumulation_steps=7"])


def test_nccl_without_a_gpu_is_refused():
    from embodied.config import ConfigError, load_config

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: nccl is allowed")
    with pytest.raises(ConfigError, match=r"actor.dist_backend: nccl needs CUDA GPUs"):
        load_config("configs/reach_mlp_ppo.yaml", ["actor.dist_backend=nccl"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mlp", "vla-lora", "pi0-lora"])
def test_fsdp_ranks_take_the_single_rank_step_and_checkpoint_in_the_one_process_format(kind, ray_session, tmp_path):
    """FSDP2 over two gloo ranks: the same step as one rank; rank 0 writes the one-process checkpoint format
    (gathered), which resumes into one rank and back into two."""
    from embodied.checkpoint.store import load_checkpoint
    from embodied.backends import RayBackend
    from embodied.workers.launch import start_actor_group

    trajectories = shares(kind)
    single = ActorWorker(*actor_args(kind))
    before = trained_state(single)
    single.update(trajectories, 1)

    policy_cfg, spec, algo, actor_cfg, iterations, seed = actor_args(kind, ranks=2)
    cfg = Config()
    cfg.policy, cfg.algorithm, cfg.actor = policy_cfg, algo, dataclasses.replace(actor_cfg, strategy="fsdp")
    cfg.runner.iterations, cfg.experiment.seed = iterations, seed
    backend = RayBackend(ClusterConfig(backend="ray"))
    group = start_actor_group(cfg, backend, spec)
    try:
        backend.wait(group.call_each("update", [([trajectories[0]], 1), ([trajectories[1]], 1)]))
        states = backend.wait(group.call("state"))
        backend.wait(group.call("save_checkpoint", str(tmp_path / "ckpt"), {"iteration": 1}))
        saved = load_checkpoint(tmp_path / "ckpt")
        backend.wait(group.call("load_state", saved["actor"]))  # a one-process checkpoint back into two ranks
        again = backend.wait(group.call("state"))[0]
    finally:
        import ray

        for actor in group.actors:
            ray.kill(actor)
    assert states[1] == {}  # rank 0 answers for the sharded group
    whole = single.state()
    assert_same(whole["policy"], states[0]["policy"], {k: v for k, v in before.items() if k in whole["policy"]})
    assert states[0]["optimizer"]["state"].keys() == whole["optimizer"]["state"].keys()
    for index, moments in whole["optimizer"]["state"].items():
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(states[0]["optimizer"]["state"][index][name], moments[name], rtol=1e-3,
                                       atol=1e-7)
    resumed = ActorWorker(*actor_args(kind))  # the checkpoint into one rank
    resumed.load_state(saved["actor"] | ({"policy": states[0]["policy"]} if "policy_dir" not in saved["actor"] else {}))
    for k, v in resumed.state()["policy"].items():
        torch.testing.assert_close(v, states[0]["policy"][k])
    for k, v in again["policy"].items():
        torch.testing.assert_close(v, states[0]["policy"][k])


def test_more_actor_ranks_than_the_cluster_has_cpus_for_is_refused_before_any_worker():
    from embodied.config import ConfigError, load_config
    from embodied.workers.resources import check_resources

    class TwoCPUs:
        def available(self) -> dict[str, float]:
            return {"CPU": 2.0, "GPU": 0.0, "memory_mib": float("inf")}

    cfg = load_config("configs/reach_mlp_ppo.yaml", ["cluster.backend=ray", "actor.num_ranks=3",
                                                     "cluster.num_rollout_workers=3", "env.num_envs=12",
                                                     "cluster.actor_resources.num_cpus=1"])
    with pytest.raises(ConfigError, match=r"cluster.actor_resources.num_cpus: the worker groups reserve 3 CPUs "
                                          r"\(actor: 3 x 1\) but the ray backend has 2 \(the actor group is "
                                          r"actor.num_ranks=3 ranks\)"):
        check_resources(cfg, TwoCPUs(), training=True)


def test_fsdp_on_one_rank_warns_that_nothing_is_sharded():
    from embodied.config import load_config
    from embodied.backends import LocalBackend
    from embodied.workers.launch import start_actor_group

    cfg = load_config("configs/reach_mlp_ppo.yaml", ["actor.strategy=fsdp"])
    backend = LocalBackend()
    try:
        with pytest.warns(UserWarning, match=r"actor.strategy=fsdp with actor.num_ranks=1: there is nothing to shard"):
            start_actor_group(cfg, backend, MLP_SPEC)
    finally:
        backend.shutdown()


def test_a_grpo_group_straddling_rollout_ranks_is_refused_with_several_actor_ranks():
    from embodied.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"algorithm.group_size: with actor.num_ranks=2, a GRPO group must sit on "
                                          r"one rollout rank"):
        load_config(None, ["cluster.backend=ray", "actor.num_ranks=2", "algorithm.name=grpo",
                           "cluster.num_rollout_workers=2", "env.num_envs=12", "algorithm.group_size=4",
                           "algorithm.num_minibatches=1"])


@pytest.mark.slow
def test_two_gloo_sac_ranks_hold_their_own_replay_and_stay_identical(ray_session, tmp_path):
    """SAC on two ranks: each rank's replay holds its own rollout rank's share, both make the updates the UTD ratio
    owes for what both received, and the all-reduced gradients keep the actor, critics and temperature identical;
    a checkpoint gathers both shares, writes each as the chunk files of replay/rank_K/ and resumes each into its own
    rank."""
    import json

    import ray

    from embodied.checkpoint.store import load_checkpoint
    from embodied.config import load_config
    from embodied.backends import RayBackend
    from embodied.workers.launch import start_actor_group
    from tests.embodied.runs.test_offpolicy import RECIPE, SPEC, TINY, transitions

    cfg = load_config(RECIPE, [*TINY, "cluster.backend=ray", "actor.num_ranks=2", "cluster.num_rollout_workers=2",
                               "algorithm.utd_ratio=0.5", "algorithm.n_step=2"])
    backend = RayBackend(cfg.cluster)
    groups = [start_actor_group(cfg, backend, SPEC) for _ in range(2)]  # the run, and one resumed from its checkpoint
    group, resumed = groups
    try:
        before = backend.wait(group.call("state"))[0]
        first = [[transitions(T=2, seed=1)], [transitions(T=2, seed=2)]]  # 6 transitions per rank
        metrics = backend.wait(group.call_each("update", [(share, 1) for share in first]))
        assert metrics[0] == metrics[1]  # the whole batch's numbers on every rank
        assert metrics[0]["offpolicy/transitions_received"] == 12 and metrics[0]["replay/size"] == 12
        assert metrics[0]["offpolicy/updates"] == 6  # 0.5 x 12, learning_starts=6 reached by both ranks together
        states = backend.wait(group.call("state"))
        first_rank, second_rank = states
        for key, value in first_rank["policy"].items():
            assert torch.equal(value, second_rank["policy"][key]), key
        for name in ("critics", "target_critics"):
            for key, value in first_rank["sac"][name].items():
                assert torch.equal(value, second_rank["sac"][name][key]), (name, key)
        assert torch.equal(first_rank["sac"]["log_alpha"], second_rank["sac"]["log_alpha"])
        assert any(not torch.equal(v, states[0]["policy"][k]) for k, v in before["policy"].items())  # it trained
        shares = states[0]["rank_shares"]
        assert [s["replay"]["size"] for s in shares] == [6, 6]
        states_seen = [s["replay"]["storage"]["obs/states"] for s in shares]
        assert not torch.equal(*states_seen)  # each rank its own rollout rank's transitions

        path = str(tmp_path / "ckpt")
        backend.wait(group.call("save_checkpoint", path, {"iteration": 1}))
        saved = load_checkpoint(path)["actor"]
        assert not any("replay" in share for share in saved["rank_shares"])  # not in trainer.pt: chunk files
        on_disk = [json.loads((tmp_path / "ckpt" / "replay" / f"rank_{r}" / "replay.json").read_text()) for r in (0, 1)]
        assert [m["size"] for m in on_disk] == [6, 6]
        backend.wait(resumed.call("load_state", saved))
        second = [[transitions(T=1, seed=3)], [transitions(T=1, seed=4)]]
        going_on = backend.wait(group.call_each("update", [(share, 2) for share in second]))
        again = backend.wait(resumed.call_each("update", [(share, 2) for share in second]))
        assert going_on == again  # each rank resumed its own replay share and streams
    finally:
        for g in groups:
            for actor in g.actors:
                ray.kill(actor)


def image_transitions(T: int, N: int, seed: int) -> Trajectory:
    """Chunk transitions from a camera env as a rollout worker records them: uint8 images, chunks [T, N, 2, 2]."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (T + 1, N, 32, 32, 3), generator=g, dtype=torch.uint8)
    return Trajectory(
        forward_inputs={"main_images": images[:-1]}, actions=torch.rand(T, N, 2, 2, generator=g) * 2 - 1,
        logprobs=torch.zeros(T, N), values=torch.zeros(T, N), rewards=torch.randn(T, N, 2, generator=g),
        executed=torch.ones(T, N, 2, dtype=torch.bool), dones=torch.zeros(T, N, dtype=torch.bool),
        terminated=torch.zeros(T, N, dtype=torch.bool), final_values=torch.zeros(T, N), next_values=torch.zeros(N),
        version=0, observations={"main_images": images[:-1]}, next_observations={"main_images": images[1:]})


@pytest.mark.slow
def test_two_gloo_cnn_sac_ranks_keep_the_encoder_and_its_target_identical(ray_session):
    """cnn_sac on two ranks: the target encoder starts as rank 0's (join_group broadcasts it beside the target
    critics), the encoder's gradients are all-reduced with the critics', and after updates on different replay shares
    (each its own random shifts) the encoder, its target, the critics and the actor are the same on both ranks."""
    import ray

    from embodied.config import load_config
    from embodied.backends import RayBackend
    from embodied.workers.launch import start_actor_group

    recipe = Path(__file__).resolve().parents[3] / "configs" / "reach_cnn_sac.yaml"
    cfg = load_config(recipe, ["cluster.backend=ray", "actor.num_ranks=2", "cluster.num_rollout_workers=2",
                               "policy.action_chunk=2", "policy.channels=[8, 16]", "policy.kernel_sizes=[8, 4]",
                               "policy.strides=[4, 2]", "policy.image_features=16", "policy.hidden_sizes=[16]",
                               "algorithm.critic_hidden_sizes=[16]", "algorithm.batch_size=4",
                               "algorithm.learning_starts=4", "algorithm.num_critics=2", "algorithm.n_step=2"])
    spec = PolicySpec(state_dim=0, image_shape=(32, 32, 3), action_dim=2, action_low=(-1.0,) * 2,
                      action_high=(1.0,) * 2)
    backend = RayBackend(cfg.cluster)
    group = start_actor_group(cfg, backend, spec)
    try:
        before = backend.wait(group.call("state"))
        for key, value in before[0]["sac"]["target_encoder"].items():
            assert torch.equal(value, before[1]["sac"]["target_encoder"][key]), key
        shares = [[image_transitions(T=2, N=2, seed=1)], [image_transitions(T=2, N=2, seed=2)]]
        metrics = backend.wait(group.call_each("update", [(share, 1) for share in shares]))
        assert metrics[0] == metrics[1] and metrics[0]["offpolicy/updates"] == 8
        first, second = backend.wait(group.call("state"))
        for key, value in first["policy"].items():
            assert torch.equal(value, second["policy"][key]), key
        for name in ("critics", "target_critics", "target_encoder"):
            for key, value in first["sac"][name].items():
                assert torch.equal(value, second["sac"][name][key]), (name, key)
        moved = before[0]["sac"]["target_encoder"]
        assert any(not torch.equal(v, moved[k]) for k, v in first["sac"]["target_encoder"].items())  # it follows
        assert first["rank_shares"][0]["replay"]["storage"]["obs/main_images"].dtype == torch.uint8
    finally:
        for actor in group.actors:
            ray.kill(actor)
