"""SAC's bad input (named, before any worker starts) and the off-policy actor: UTD pacing, replay, exact resume."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from embodied.config import ConfigError, load_config
from embodied.policy import PolicySpec
from embodied.types import Trajectory
from embodied.workers.offpolicy_actor import OffPolicyActorWorker

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "reach_mlp_sac.yaml"
TINY = ["policy.hidden_sizes=[8]", "policy.critic_hidden_sizes=[8]", "algorithm.batch_size=4",
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
    ("algorithm.critic_warmup_iterations=2", "algorithm.critic_warmup_iterations"),
    ("actor.num_ranks=2", "actor.num_ranks"),
    ("algorithm.n_step=0", "algorithm.n_step"),
])
def test_bad_sac_config_names_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(RECIPE, [override])


def test_n_step_with_another_algorithm_names_the_field():
    with pytest.raises(ConfigError, match=r"algorithm\.n_step: .*algorithm\.name=ppo"):
        load_config(None, ["algorithm.name=ppo", "algorithm.n_step=3"])


def test_num_critics_one_with_a_plain_min_is_fine():
    cfg = load_config(RECIPE, ["algorithm.num_critics=1", "algorithm.critic_subset=1"])
    assert cfg.algorithm.num_critics == 1


def test_policy_without_q_functions_is_refused_before_any_worker_starts(monkeypatch, tmp_path):
    from embodied import runner

    def no_workers(*args, **kwargs):
        raise AssertionError("a worker started")

    monkeypatch.setattr(runner.Workers, "start", no_workers)
    cfg = load_config(None, ["algorithm.name=sac", "env.id=Reach-v0", "env.obs_mode=state", "policy.type=mlp",
                             f"experiment.output_dir={tmp_path}"])
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


def actor(*overrides: str) -> OffPolicyActorWorker:
    cfg = load_config(RECIPE, [*TINY, *overrides])
    return OffPolicyActorWorker(cfg.policy, SPEC, cfg.algorithm, cfg.actor, cfg.runner.iterations, seed=0)


def test_updates_wait_for_learning_starts_then_follow_the_utd_ratio():
    worker = actor("algorithm.utd_ratio=0.5")
    m = worker.update([transitions(T=1)], 1)  # 3 transitions < learning_starts=6
    assert m["sac/updates"] == 0 and m["replay/size"] == 3 and worker.version == 0
    m = worker.update([transitions(seed=1)], 2)  # 6 more: 0.5 * 6 = 3 updates
    assert m["sac/updates"] == 3 and worker.version == 3 and m["replay/size"] == 9
    m = worker.update([transitions(T=1, seed=2)], 3)  # 0.5 * 3 = 1.5: one now, half carried over
    assert m["sac/updates"] == 1
    m = worker.update([transitions(T=1, seed=3)], 4)
    assert m["sac/updates"] == 2 and worker.version == 6
    for key in ("sac/q_loss", "sac/actor_loss", "sac/alpha", "sac/entropy"):
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


def test_resume_without_replay_warns_that_it_is_not_exact():
    first = actor("algorithm.checkpoint_replay=false")
    first.update([transitions(T=4)], 1)
    state = copy.deepcopy(first.state())
    assert "replay" not in state
    second = actor("algorithm.checkpoint_replay=false")
    with pytest.warns(UserWarning, match="not exact"):
        second.load_state(state)
    assert len(second.replay) == 0 and second.version == first.version


class FakeWorkers:
    """Counts weight syncs; each update reports the gradient updates it made."""

    def __init__(self, updates: list[int]) -> None:
        self.updates, self.syncs = list(updates), []

    def sync_weights(self) -> int:
        self.syncs.append(len(self.updates))
        return 0

    def rollout(self, chunk_steps: int, iteration: int):
        from embodied.types import RolloutSummary

        return [RolloutSummary(iteration - 1, 8, [], 0, 1)]

    def update(self, rollout, iteration: int) -> dict[str, float]:
        return {"sac/updates": float(self.updates.pop(0))}


def test_weights_sync_every_sync_every_updates():
    from embodied.offpolicy_runner import OffPolicyIterations

    cfg = load_config(RECIPE, ["algorithm.sync_every=100"])
    workers = FakeWorkers([0, 64, 64, 64, 64])
    iterations = OffPolicyIterations(workers, cfg)  # type: ignore[arg-type]
    synced = [iterations(it)[0]["sac/synced"] for it in range(1, 6)]
    assert synced == [1.0, 0.0, 0.0, 1.0, 0.0]  # first, then once 128 >= 100 updates were made since


def save(worker: OffPolicyActorWorker, path: Path, iteration: int) -> Path:
    worker.save_checkpoint(str(path), {"iteration": iteration, "env_steps": 0})
    return path


def test_a_checkpoint_holds_replay_as_chunk_files_and_resumes_exactly(tmp_path):
    from embodied.checkpoint import load_checkpoint

    first = actor()
    first.update([transitions(T=4)], 1)
    path = save(first, tmp_path / "checkpoints" / "iter_000001", 1)
    assert (path / "replay" / "replay.json").is_file() and first.replay_files == {"written": 1, "linked": 0}
    state = load_checkpoint(path)["actor"]
    assert "replay" not in state and state["replay_dir"] == str(path / "replay")
    second = actor()
    second.load_state(state)
    assert len(second.replay) == 12
    # the resumed actor reuses the chunks of the checkpoint it resumed from where they did not change
    again = save(second, tmp_path / "checkpoints" / "iter_000001_again", 1)
    assert second.replay_files == {"written": 0, "linked": 1}
    assert (again / "replay" / "chunk_000000.bin").stat().st_ino == (path / "replay" / "chunk_000000.bin").stat().st_ino
    a, b = first.update([transitions(seed=5)], 2), second.update([transitions(seed=5)], 2)
    assert a == b
    for k, v in first.learner.critics.state_dict().items():
        assert torch.equal(v, second.learner.critics.state_dict()[k])
    save(second, tmp_path / "checkpoints" / "iter_000002", 2)
    assert second.replay_files == {"written": 1, "linked": 0}  # the one chunk grew: written again


def test_checkpoint_replay_false_writes_no_replay_folder(tmp_path):
    from embodied.checkpoint import load_checkpoint

    first = actor("algorithm.checkpoint_replay=false")
    first.update([transitions(T=4)], 1)
    path = save(first, tmp_path / "iter_000001", 1)
    assert not (path / "replay").exists()
    second = actor("algorithm.checkpoint_replay=false")
    with pytest.warns(UserWarning, match="not exact"):
        second.load_state(load_checkpoint(path)["actor"])
    assert len(second.replay) == 0


def test_a_full_disk_while_saving_replay_names_the_path_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import errno

    from embodied import replay as replay_module
    from embodied.atomic import DiskFullError
    from embodied.checkpoint import find_checkpoint, load_checkpoint

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
    assert worker.saved_replay == good / "replay"  # the next checkpoint reuses the good one's chunks
    assert find_checkpoint(tmp_path) == good
    resumed = actor()
    resumed.load_state(load_checkpoint(good)["actor"])
    assert len(resumed.replay) == 12 and resumed.version == 12  # iteration 1's 12 transitions and updates
    monkeypatch.undo()
    save(worker, target, 2)  # with room again the same checkpoint goes through
    assert load_checkpoint(target)["iteration"] == 2


def test_algorithm_n_step_reaches_the_actors_replay():
    worker = actor("algorithm.n_step=3", "algorithm.gamma=0.5")
    worker.update([transitions(T=4)], 1)  # 3 envs; chunks of 2 executed sub-steps, no episode ends
    discounts = worker.replay.storage["discount"][:12].reshape(4, 3)
    expected = torch.tensor([0.5 ** 6, 0.5 ** 6, 0.5 ** 4, 0.5 ** 2])  # windows of 3, 3, 2 (epoch end), 1 chunks
    assert torch.equal(discounts, expected[:, None].expand(4, 3))
