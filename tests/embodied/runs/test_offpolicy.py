"""SAC's bad input (named, before any worker starts) and the off-policy actor: UTD pacing, replay, exact resume."""

from __future__ import annotations

import copy
import math
import threading
import time
from pathlib import Path

import pytest
import torch

from embodied.config import ConfigError, load_config
from embodied.core.types import Trajectory
from embodied.policy.base import PolicySpec
from embodied.workers.actor_worker import ActorWorker

RECIPE = Path(__file__).resolve().parents[3] / "configs" / "reach_mlp_sac.yaml"
TINY = ["policy.hidden_sizes=[8]", "algorithm.critic_hidden_sizes=[8]", "algorithm.batch_size=4",
        "algorithm.learning_starts=6", "policy.action_chunk=2"]
SPEC = PolicySpec(state_dim=3, image_shape=None, action_dim=2, action_low=(-1.0,) * 2, action_high=(1.0,) * 2)


@pytest.mark.parametrize("override, field", [
    ("algorithm.utd_ratio=0", "algorithm.utd_ratio"),
    ("algorithm.utd_ratio=-1", "algorithm.utd_ratio"),
    ("algorithm.replay_capacity=100", "algorithm.replay_capacity"),  # below batch_size=256
    ("algorithm.num_critics=1", "algorithm.num_critics"),  # with critic_subset=2
    ("algorithm.critic_subset=3", "algorithm.critic_subset"),  # above num_critics=2
    ("algorithm.tau=0", "algorithm.tau"),
    ("algorithm.sync_every=0", "algorithm.sync_every"),
    ("actor.ema_decay=0.9", "actor.ema_decay"),
    ("actor.strategy=fsdp", "actor.strategy"),  # refused by name: the small nets stay whole on every rank
    ("cluster.placement=colocated", "cluster.placement"),  # overlap trains the module the rollouts would act with
    ("algorithm.n_step=0", "algorithm.n_step"),
    ("algorithm.critic_lr=0", "algorithm.critic_lr"),
])
def test_bad_sac_config_names_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(RECIPE, [override])


def test_n_step_with_another_algorithm_names_the_field():
    with pytest.raises(ConfigError, match=r"algorithm\.n_step: not a field of algorithm 'ppo' \(PPOConfig\)"):
        load_config(None, ["algorithm.name=ppo", "algorithm.n_step=3"])


def test_num_critics_one_with_a_plain_min_is_fine():
    cfg = load_config(RECIPE, ["algorithm.num_critics=1", "algorithm.critic_subset=1"])
    assert cfg.algorithm.num_critics == 1


def test_policy_without_a_tanh_gaussian_head_is_refused_by_the_config():
    with pytest.raises(ConfigError, match=r"policy\.type: algorithm\.name=sac trains a tanh-Gaussian head on the "
                                          r"policy's observation encoder, which policy\.type=vla does not offer"):
        load_config(None, ["algorithm.name=sac", "env.id=Reach-v0", "policy.type=vla"])


def test_policy_without_q_functions_is_refused_before_any_worker_starts(monkeypatch, tmp_path):
    from embodied.runs import train as runner

    def no_workers(*args, **kwargs):
        raise AssertionError("a worker started")

    monkeypatch.setattr(runner.Workers, "start", no_workers)
    cfg = load_config(None, ["algorithm.name=sac", "env.id=Reach-v0", "env.obs_mode=state", "policy.type=mlp",
                             f"experiment.output_dir={tmp_path}"])
    monkeypatch.setattr(type(cfg.algorithm), "policy_head", "")  # an algorithm that trains the policy as it is
    with pytest.raises(ConfigError, match=r"algorithm\.name=sac needs a policy with Q-functions.*policy\.type=mlp "
                                          r"has none"):
        runner.train(cfg)
    assert not any(tmp_path.iterdir())  # no run dir either


def transitions(T=2, N=3, seed=0, version=0) -> Trajectory:
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(T + 1, N, 3, generator=g)
    return Trajectory(
        forward_inputs={"states": states[:-1]}, actions=torch.rand(T, N, 2, 2, generator=g) * 2 - 1,
        logprobs=torch.zeros(T, N), values=torch.zeros(T, N), rewards=torch.randn(T, N, 2, generator=g),
        executed=torch.ones(T, N, 2, dtype=torch.bool), dones=torch.zeros(T, N, dtype=torch.bool),
        terminated=torch.zeros(T, N, dtype=torch.bool), final_values=torch.zeros(T, N), next_values=torch.zeros(N),
        version=version, observations={"states": states[:-1]}, next_observations={"states": states[1:]})


def actor(*overrides: str) -> ActorWorker:
    cfg = load_config(RECIPE, [*TINY, *overrides])
    return ActorWorker(cfg.algorithm.worker_policy(cfg.policy), SPEC, cfg.algorithm, cfg.actor,
                                cfg.runner.iterations, seed=0)


def test_updates_wait_for_learning_starts_then_follow_the_utd_ratio():
    worker = actor("algorithm.utd_ratio=0.5")
    m = worker.update([transitions(T=1)], 1)  # 3 transitions < learning_starts=6
    assert m["offpolicy/updates"] == 0 and m["replay/size"] == 3 and worker.version == 0
    m = worker.update([transitions(seed=1)], 2)  # 6 more: 0.5 * 6 = 3 updates
    assert m["offpolicy/updates"] == 3 and worker.version == 3 and m["replay/size"] == 9
    m = worker.update([transitions(T=1, seed=2)], 3)  # 0.5 * 3 = 1.5: one now, half carried over
    assert m["offpolicy/updates"] == 1
    m = worker.update([transitions(T=1, seed=3)], 4)
    assert m["offpolicy/updates"] == 2 and worker.version == 6
    for key in ("sac/q_loss", "sac/policy_loss", "sac/alpha", "sac/entropy"):
        assert math.isfinite(m[key]), key


def test_critics_actor_and_alpha_move():
    worker = actor("algorithm.utd_ratio=2")
    critics = {k: v.clone() for k, v in worker.learner.critics.state_dict().items()}
    targets = {k: v.clone() for k, v in worker.learner.target_critics.state_dict().items()}
    policy = {k: v.clone() for k, v in worker.policy.state_dict().items()}
    alpha = worker.learner.log_alpha.item()
    worker.update([transitions(T=4)], 1)
    assert all(not torch.equal(v, worker.learner.critics.state_dict()[k]) for k, v in critics.items())
    assert any(not torch.equal(v, worker.learner.target_critics.state_dict()[k]) for k, v in targets.items())
    assert any(not torch.equal(v, worker.policy.state_dict()[k]) for k, v in policy.items())
    assert worker.learner.log_alpha.item() != alpha


def test_with_normalize_states_the_actor_merges_each_epochs_states_and_the_target_encoder_follows():
    worker = actor("policy.normalize_states=true", "algorithm.utd_ratio=1")
    epoch = transitions(T=4)
    worker.update([epoch], 1)
    states = epoch.forward_inputs["states"].flatten(0, 1).double()
    encoder = worker.policy.feature_encoder
    assert torch.allclose(encoder.state_mean.double(), states.mean(0), atol=1e-4)
    assert torch.allclose(encoder.state_var.double(), states.var(0, unbiased=False), atol=1e-3)
    before = [b.clone() for b in encoder.buffers()]  # what the next update standardizes by (observe comes after it)
    assert any(not torch.equal(t, b) for t, b in zip(worker.learner.target_encoder.buffers(), before))
    worker.update([transitions(T=1, seed=1)], 2)  # its TD targets standardize as its critics do
    assert all(torch.equal(t, b) for t, b in zip(worker.learner.target_encoder.buffers(), before, strict=True))
    still = actor("policy.normalize_states=true", "policy.freeze_state_statistics=true")
    still.update([epoch], 1)
    assert torch.equal(still.policy.feature_encoder.state_mean, torch.zeros(3))


def test_critic_warmup_iterations_move_the_critics_and_leave_the_actor_and_temperature():
    worker = actor("algorithm.utd_ratio=2", "algorithm.critic_warmup_iterations=1")
    policy = {k: v.clone() for k, v in worker.policy.state_dict().items()}
    critics = {k: v.clone() for k, v in worker.learner.critics.state_dict().items()}
    alpha = worker.learner.log_alpha.item()
    m = worker.update([transitions(T=4)], 1)
    assert m["offpolicy/critic_warmup"] == 1.0 and m["offpolicy/updates"] == 24 and math.isfinite(m["sac/policy_loss"])
    assert all(torch.equal(v, worker.policy.state_dict()[k]) for k, v in policy.items())
    assert worker.learner.log_alpha.item() == alpha
    assert all(not torch.equal(v, worker.learner.critics.state_dict()[k]) for k, v in critics.items())
    m = worker.update([transitions(seed=1)], 2)
    assert m["offpolicy/critic_warmup"] == 0.0
    assert any(not torch.equal(v, worker.policy.state_dict()[k]) for k, v in policy.items())
    assert worker.learner.log_alpha.item() != alpha


def test_critic_lr_sets_the_critics_learning_rate_and_defaults_to_the_actors():
    both = actor("algorithm.lr=0.001")
    assert [g["lr"] for g in both.learner.critic_optimizer.param_groups] == [0.001]
    apart = actor("algorithm.lr=0.001", "algorithm.critic_lr=0.01")
    assert [g["lr"] for g in apart.learner.critic_optimizer.param_groups] == [0.01]
    assert [g["lr"] for g in apart.learner.policy_optimizer.param_groups] == [0.001]


def test_state_resumes_learner_and_replay_exactly():
    first = actor()
    first.update([transitions(T=4)], 1)
    state = copy.deepcopy(first.state())  # as a checkpoint holds it: optimizer states share storage otherwise
    assert state["replay"]["size"] == 12
    second = actor()
    second.load_state(state)
    a, b = first.update([transitions(seed=5)], 2), second.update([transitions(seed=5)], 2)
    assert a == b
    for k, v in first.learner.critics.state_dict().items():
        assert torch.equal(v, second.learner.critics.state_dict()[k])


def test_replay_saved_by_two_ranks_is_refused_by_one_naming_the_field():
    first = actor()
    first.update([transitions(T=4)], 1)
    state = copy.deepcopy(first.state())
    mine = {"generator": state.pop("generator"), "replay": state.pop("replay")}
    state["rank_shares"] = [mine, mine]  # as two ranks save it
    with pytest.raises(ValueError, match=r"saved by 2 actor rank\(s\).*actor\.num_ranks=2 \(this run has 1\)"):
        actor().load_state(state)


def test_resume_without_replay_warns_that_it_is_not_exact():
    first = actor("algorithm.checkpoint_replay=false")
    first.update([transitions(T=4)], 1)
    state = copy.deepcopy(first.state())
    assert "replay" not in state
    second = actor("algorithm.checkpoint_replay=false")
    with pytest.warns(UserWarning, match="not exact"):
        second.load_state(state)
    assert len(second.training.replay) == 0 and second.version == first.version


def test_several_ranks_need_a_batch_they_split_evenly():
    ranks = ["cluster.backend=ray", "actor.num_ranks=2", "cluster.num_rollout_workers=2"]
    assert load_config(RECIPE, ranks).actor.num_ranks == 2  # data-parallel SAC is allowed
    with pytest.raises(ConfigError, match=r"algorithm\.batch_size: each of actor\.num_ranks=2 ranks"):
        load_config(RECIPE, [*ranks, "algorithm.batch_size=255"])


def test_colocated_placement_is_fine_without_overlap():
    cfg = load_config(RECIPE, ["cluster.placement=colocated", "algorithm.overlap=false"])
    assert cfg.cluster.placement == "colocated"


class FakeWorkers:
    """The driver's side of the workers, in order: weight syncs, rollout epochs (each in the producer thread) and
    updates, with the weight version each acted with or started from. ``updates``: gradient updates per iteration;
    ``hold``: the updates of these iterations wait (up to 5 s) for the next epoch to start, so an overlap shows in the
    order of events; ``epoch_s``, ``update_s``, ``sync_s``: how long an epoch, an update and a weight load take."""

    colocated = False

    def __init__(self, updates: list[int], hold: tuple[int, ...] = (), fail_at: int | None = None,
                 epoch_s: float = 0.01, update_s: float = 0.0, sync_s: float = 0.0) -> None:
        self.updates, self.hold, self.fail_at = list(updates), hold, fail_at
        self.epoch_s, self.update_s, self.sync_s = epoch_s, update_s, sync_s
        self.version = self.held = 0
        self.events: list[tuple] = []
        self.lock = threading.Lock()
        self.started = threading.Condition(self.lock)
        self.backend = self.actor_group = self.rollout_group = self

    # backend / group protocol
    def wait(self, handles, timeout=None):
        return handles

    def call(self, method: str, *args):
        if method == "weights":  # queued before the update submitted after it: the version from before it
            return [(self.version, None)]
        assert method == "sync_weights"
        self.log("sync", args[0][0])
        time.sleep(self.sync_s)
        self.held = args[0][0]
        return [self.held]

    def __len__(self) -> int:
        return 1

    def log(self, *event) -> None:
        with self.lock:
            self.events.append(event)
            self.started.notify_all()

    def rollout(self, chunk_steps: int, iteration: int):
        from embodied.core.types import RolloutSummary

        self.log("rollout", iteration, self.held)
        if iteration == self.fail_at:
            raise RuntimeError(f"rollout {iteration} failed")
        time.sleep(self.epoch_s)
        self.log("rollout done", iteration)
        return [RolloutSummary(iteration - 1, 8, [], self.held, 1)]

    def update(self, rollout, iteration: int) -> dict[str, float]:
        self.log("update", iteration, self.version)
        if iteration in self.hold:
            with self.started:
                self.started.wait_for(lambda: ("rollout", iteration + 1, self.version) in self.events, timeout=5)
        time.sleep(self.update_s)
        updates = self.updates.pop(0)
        self.version += updates
        self.log("update done", iteration)
        return {"offpolicy/updates": float(updates)}


def run_fake(workers: FakeWorkers, *overrides: str, iterations: int = 5) -> list[dict[str, float]]:
    from embodied.runs.offpolicy_iterations import OffPolicyIterations

    cfg = load_config(RECIPE, [f"runner.iterations={iterations}", "runner.checkpoint_every=0", *overrides])
    loop = OffPolicyIterations(workers, cfg)  # type: ignore[arg-type]
    try:
        history = []
        for it in range(1, iterations + 1):
            history.append(loop(it)[0])
            if cfg.runner.checkpoints_at(it):
                loop.pause()
                workers.log("checkpoint", it)
                loop.resume()
            assert loop.produced == loop.started  # at rest between iterations: evals and checkpoints see no epoch
        return history
    finally:
        assert loop.close() == 0


@pytest.mark.parametrize("overlap", ["true", "false"])
def test_weights_sync_every_sync_every_updates(overlap):
    history = run_fake(FakeWorkers([0, 64, 64, 64, 64]), "algorithm.sync_every=100", f"algorithm.overlap={overlap}")
    # First, then once 128 >= 100 updates were made since: before epoch 4 in turn, during update 4 (for epoch 5)
    # overlapped.
    assert [m["offpolicy/synced"] for m in history] == [1.0, 0.0, 0.0, 1.0, 0.0]


def test_overlap_runs_the_next_epoch_during_the_updates_with_the_weights_from_before_them():
    workers = FakeWorkers([3, 3, 3, 3, 3], hold=(1, 2, 3, 4))
    history = run_fake(workers, "algorithm.sync_every=1")
    order = [e[:2] for e in workers.events if e[0] in ("rollout", "update", "update done")]
    for it in range(1, 5):  # epoch it + 1 starts after update it started and before it ended
        assert order.index(("update", it)) < order.index(("rollout", it + 1)) < order.index(("update done", it))
    acted = {e[1]: e[2] for e in workers.events if e[0] == "rollout"}
    assert acted == {1: 0, 2: 0, 3: 3, 4: 6, 5: 9}  # epoch it + 1 acts with the weights from before update it
    assert [m["offpolicy/overlap"] for m in history] == [1.0, 1.0, 1.0, 1.0, 0.0]  # nothing after the last
    assert all(m["time/actor_wait"] >= 0 and m["time/rollout_wait"] >= 0 and m["time/sync"] >= 0 for m in history)


def test_a_scheduled_checkpoint_starts_no_next_epoch_and_the_epoch_after_it_gets_fresh_weights():
    workers = FakeWorkers([3, 3, 3, 3, 3], hold=(1, 3))
    run_fake(workers, "runner.checkpoint_every=2", "algorithm.sync_every=100")
    order = [e[:2] for e in workers.events]
    assert order.index(("update done", 2)) < order.index(("checkpoint", 2)) < order.index(("rollout", 3))
    assert order.index(("rollout", 2)) < order.index(("update done", 1))  # elsewhere overlapped
    assert order.index(("rollout", 4)) < order.index(("update done", 3))
    syncs = [e for e in workers.events if e[0] == "sync"]
    assert syncs == [("sync", 0), ("sync", 6), ("sync", 12)]  # at the start and after each checkpoint only


def test_without_overlap_rollouts_and_updates_take_turns():
    workers = FakeWorkers([3, 3, 3, 3])
    run_fake(workers, "algorithm.overlap=false", iterations=4)
    kinds = [e[:2] for e in workers.events if e[0] not in ("sync", "checkpoint")]
    assert kinds == [(k, it) for it in range(1, 5) for k in ("rollout", "rollout done", "update", "update done")]
    assert {e[1]: e[2] for e in workers.events if e[0] == "rollout"} == {1: 0, 2: 3, 3: 6, 4: 9}


@pytest.mark.parametrize("overlap", ["true", "false"])
def test_the_waits_are_timed_where_they_happen(overlap):
    """In turn the actor waits through each weight load and epoch, and the rollouts through each update, in the
    iteration of that update; overlapped, an update longer than an epoch leaves the rollouts waiting for about the
    difference, and the actor waits for no epoch after the first."""
    workers = FakeWorkers([1, 1, 1], epoch_s=0.1, update_s=0.4, sync_s=0.05)
    history = run_fake(workers, "algorithm.sync_every=1", f"algorithm.overlap={overlap}", iterations=3)
    for m in history:
        assert m["time/rollout"] >= 0.1 and m["time/update"] >= 0.4
    loads = sum(e[0] == "sync" for e in workers.events)  # overlapped, epoch 2 acts with epoch 1's weights
    assert loads == (2 if overlap == "true" else 3)
    assert sum(m["time/sync"] >= 0.05 for m in history) == loads  # the epochs that loaded weights, each its own
    if overlap == "false":
        assert all(m["time/actor_wait"] >= 0.15 and m["time/rollout_wait"] >= 0.4 for m in history)
    else:  # epoch it + 1 (0.05 s of weights, 0.1 s) runs during update it (0.4 s); the last iteration starts none
        assert history[0]["time/actor_wait"] >= 0.15
        assert all(m["time/actor_wait"] < 0.1 for m in history[1:])
        assert all(m["time/rollout_wait"] >= 0.15 for m in history[:-1])


def test_a_failed_epoch_is_raised_by_the_iteration_that_would_train_on_it():
    from embodied.runs.offpolicy_iterations import OffPolicyIterations

    workers = FakeWorkers([3, 3, 3], fail_at=3)
    loop = OffPolicyIterations(workers, load_config(RECIPE, ["runner.iterations=3", "runner.checkpoint_every=0"]))
    try:
        loop(1)
        loop(2)  # epoch 3 failed during update 2: iteration 2 is complete (the runner checkpoints it)
        with pytest.raises(RuntimeError, match="rollout 3 failed"):
            loop(3)
    finally:
        loop.close()


def save(worker: ActorWorker, path: Path, iteration: int) -> Path:
    worker.save_checkpoint(str(path), {"iteration": iteration, "env_steps": 0})
    return path


def test_a_checkpoint_holds_replay_as_chunk_files_and_resumes_exactly(tmp_path):
    from embodied.checkpoint.store import load_checkpoint

    first = actor()
    first.update([transitions(T=4)], 1)
    path = save(first, tmp_path / "checkpoints" / "iter_000001", 1)
    assert (path / "replay" / "replay.json").is_file() and first.training.replay_files == {"written": 1, "linked": 0}
    state = load_checkpoint(path)["actor"]
    assert "replay" not in state and state["replay_dir"] == str(path / "replay")
    second = actor()
    second.load_state(state)
    assert len(second.training.replay) == 12
    # the resumed actor reuses the chunks of the checkpoint it resumed from where they did not change
    again = save(second, tmp_path / "checkpoints" / "iter_000001_again", 1)
    assert second.training.replay_files == {"written": 0, "linked": 1}
    assert (again / "replay" / "chunk_000000.bin").stat().st_ino == (path / "replay" / "chunk_000000.bin").stat().st_ino
    a, b = first.update([transitions(seed=5)], 2), second.update([transitions(seed=5)], 2)
    assert a == b
    for k, v in first.learner.critics.state_dict().items():
        assert torch.equal(v, second.learner.critics.state_dict()[k])
    save(second, tmp_path / "checkpoints" / "iter_000002", 2)
    assert second.training.replay_files == {"written": 1, "linked": 0}  # the one chunk grew: written again


def test_checkpoint_replay_false_writes_no_replay_folder(tmp_path):
    from embodied.checkpoint.store import load_checkpoint

    first = actor("algorithm.checkpoint_replay=false")
    first.update([transitions(T=4)], 1)
    path = save(first, tmp_path / "iter_000001", 1)
    assert not (path / "replay").exists()
    second = actor("algorithm.checkpoint_replay=false")
    with pytest.warns(UserWarning, match="not exact"):
        second.load_state(load_checkpoint(path)["actor"])
    assert len(second.training.replay) == 0


def test_a_full_disk_while_saving_replay_names_the_path_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import errno

    from embodied.replay import buffer as replay_module
    from embodied.core.atomic import DiskFullError
    from embodied.checkpoint.store import find_checkpoint, load_checkpoint

    checkpoints = tmp_path / "checkpoints"
    worker = actor()
    worker.update([transitions(T=4)], 1)
    good = save(worker, checkpoints / "iter_000001", 1)
    before = {p.relative_to(good): p.read_bytes() for p in good.rglob("*") if p.is_file()}
    worker.update([transitions(seed=5)], 2)

    def full(path, parts):
        path.write_bytes(bytes(parts[0])[:5])  # a few bytes got out before the disk filled
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(replay_module, "_write_chunk", full)
    target = checkpoints / "iter_000002"
    with pytest.raises(DiskFullError, match=r"no space left on device writing checkpoint .*iter_000002"):
        save(worker, target, 2)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["iter_000001"]  # no half-written one, no temp folder
    assert {p.relative_to(good): p.read_bytes() for p in good.rglob("*") if p.is_file()} == before
    assert worker.training.saved_replay == good / "replay"  # the next checkpoint reuses the good one's chunks
    assert find_checkpoint(tmp_path) == good
    resumed = actor()
    resumed.load_state(load_checkpoint(good)["actor"])
    assert len(resumed.training.replay) == 12 and resumed.version == 12  # iteration 1's 12 transitions and updates
    monkeypatch.undo()
    save(worker, target, 2)  # with room again the same checkpoint goes through
    assert load_checkpoint(target)["iteration"] == 2


def test_algorithm_n_step_reaches_the_actors_replay():
    worker = actor("algorithm.n_step=3", "algorithm.gamma=0.5")
    worker.update([transitions(T=4)], 1)  # 3 envs; chunks of 2 executed sub-steps, no episode ends
    discounts = worker.training.replay.storage["discount"][:12].reshape(4, 3)
    expected = torch.tensor([0.5 ** 6, 0.5 ** 6, 0.5 ** 4, 0.5 ** 2])  # windows of 3, 3, 2 (epoch end), 1 chunks
    assert torch.equal(discounts, expected[:, None].expand(4, 3))

