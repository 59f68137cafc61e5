"""Short, real training runs on both backends, and the default recipe to its success target."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from embodied.checkpoint.store import load_checkpoint
from embodied.config import load_config
from embodied.env_runtime.factory import policy_spec
from embodied.policy.base import build_policy
from embodied.runs.train import train

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "reach_mlp_ppo.yaml"
SHORT = ["runner.iterations=3", "env.num_envs=8", "eval_env.num_envs=4", "runner.eval_episodes=8",
         "rollout.chunk_steps=8", "runner.eval_every=2", "logger.progress_bar=false"]


def initial_parameters(cfg) -> dict[str, torch.Tensor]:
    """The parameters the actor starts from (it seeds torch with experiment.seed, then builds)."""
    from embodied.envs.reach import ReachEnv

    env = ReachEnv()
    spec = policy_spec(env.observation_space, env.action_space)
    env.close()
    torch.manual_seed(cfg.experiment.seed)
    return build_policy(cfg.policy, spec).state_dict()


def check_run(cfg, result) -> None:
    assert len(result.history) == cfg.runner.iterations
    for metrics in result.history:
        for key in ("train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl", "train/clip_frac",
                    "time/rollout", "time/update", "env_steps_per_s"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0
    assert result.final_eval["eval/episodes"] >= cfg.runner.eval_episodes
    saved = load_checkpoint(result.checkpoint)["actor"]["policy"]
    before = initial_parameters(cfg)
    assert saved.keys() == before.keys()
    assert any(not torch.equal(saved[k], before[k]) for k in before), "training changed no parameter"
    assert (result.run_dir / "metrics.jsonl").read_text().count("\n") == cfg.runner.iterations


@pytest.mark.slow
def test_short_run_local(tmp_path):
    cfg = load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path}"])
    check_run(cfg, train(cfg))


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("strategy, mode", [("fsdp", "sync"), ("ddp", "async")])
def test_two_actor_ranks_train_and_resume_into_one(tmp_path, ray_session, strategy, mode):
    """Rollout ranks 0 and 1 train on actor ranks 0 and 1 of one gloo process group (sync, or async: the actor
    asks for epoch k's trajectories while k + 1 rolls out); the checkpoint rank 0 writes resumes into a one-rank
    actor on the local backend. (DDP in sync mode: its step against one rank's is ``test_actor_ranks``'s, and its
    run here would add nothing the two cases do not train.)"""
    ranks = [*SHORT, "cluster.backend=ray", "cluster.num_env_workers=2", "cluster.num_rollout_workers=2",
             "actor.num_ranks=2", f"actor.strategy={strategy}", f"runner.mode={mode}",
             "runner.eval_video=none"]  # videos recorded on Ray: test_ray_backend_starts_and_stops_its_own_ray
    cfg = load_config(RECIPE, [*ranks, f"experiment.output_dir={tmp_path}"])
    first = train(cfg)
    check_run(cfg, first)
    assert {"sys/rss_mib/actor0", "sys/rss_mib/actor1"} <= first.history[-1].keys()
    if mode == "async":  # async on Ray: the staleness bound holds, and no rollout was left over at the end
        assert all(m["train/staleness_max"] <= cfg.algorithm.max_staleness for m in first.history)
        assert first.discarded == 0
    # Ranks, backend and strategy may change on resume; the mode changes what the run computes, so an async run
    # resumed in sync mode is told (runner.resume_changed), as a user would be.
    told = ["runner.resume_changed=true"] if mode == "async" else []
    resumed = train(load_config(RECIPE, [*SHORT, "runner.iterations=4", f"experiment.output_dir={tmp_path}",
                                         f"runner.resume_from={first.run_dir}", *told]))
    assert len(resumed.history) == 1 and math.isfinite(resumed.history[-1]["train/loss"])  # iteration 4 alone


@pytest.mark.slow
def touch_after_checkpoint(marker: Path, output_dir: Path, iteration: int) -> None:
    """Create ``marker`` (a dying toy policy's signal) once a run under ``output_dir`` wrote the checkpoint of
    ``iteration`` (from a thread: the run goes on meanwhile)."""
    import threading

    def touch() -> None:
        deadline = time.monotonic() + 300
        pattern = f"*/checkpoints/iter_{iteration:06d}/manifest.json"
        while time.monotonic() < deadline and not list(output_dir.glob(pattern)):
            time.sleep(0.1)
        marker.touch()

    threading.Thread(target=touch, daemon=True).start()


@pytest.mark.ray
def test_an_actor_rank_that_dies_stops_the_run_naming_it_its_last_checkpoint_and_the_resume_command(
        tmp_path, ray_session):
    from embodied.checkpoint.store import find_checkpoint
    from embodied.backends import ActorLostError
    from embodied.core.registry import POLICIES

    POLICIES.register("dying_mlp", "tests.toy_policies:DyingMLPConfig", overwrite=True)
    marker = tmp_path / "die"
    cfg = load_config(RECIPE, [*SHORT, "runner.iterations=60", "runner.checkpoint_every=1", "runner.eval_every=0",
                               "cluster.backend=ray", "cluster.num_rollout_workers=2", "actor.num_ranks=2",
                               "policy.type=dying_mlp", f"policy.marker={marker}", f"experiment.output_dir={tmp_path}"])

    touch_after_checkpoint(marker, tmp_path, 2)
    with pytest.raises(ActorLostError, match=r"actor rank [01] of 2 died during the update of iteration \d+ .*the "
                                             r"run stopped: its last checkpoint is .*iter_0000\d\d\. Resume it with "
                                             r"runner.resume_from=") as lost:
        train(cfg)
    run_dir = lost.value.run_dir
    assert load_checkpoint(find_checkpoint(run_dir))["iteration"] >= 2  # the last checkpoint is whole and valid


@pytest.mark.ray
def test_a_rollout_worker_that_dies_stops_the_run_naming_it_its_last_checkpoint_and_the_resume_command(
        tmp_path, ray_session):
    """A rollout worker is not replaced (env workers are): its death stops the run as an actor rank's does, with the
    last checkpoint and the resume command, not Ray's own traceback."""

    from embodied.backends import WorkerLostError
    from embodied.core.registry import POLICIES

    POLICIES.register("dying_act_mlp", "tests.toy_policies:DyingActMLPConfig", overwrite=True)
    marker = tmp_path / "die"
    cfg = load_config(RECIPE, [*SHORT, "runner.iterations=60", "runner.checkpoint_every=1", "runner.eval_every=0",
                               "cluster.backend=ray", "cluster.placement=disaggregated", "policy.type=dying_act_mlp",
                               f"policy.marker={marker}", f"experiment.output_dir={tmp_path}"])

    touch_after_checkpoint(marker, tmp_path, 1)
    with pytest.raises(WorkerLostError, match=r"a worker's process died in iteration \d+: MultiStepRolloutWorker "
                                              r"\(\w+\); the run cannot replace it; the run stopped: its last "
                                              r"checkpoint is .*iter_0000\d\d\. Resume it with runner.resume_from="):
        train(cfg)


@pytest.mark.ray
def test_a_worker_that_dies_while_the_run_starts_stops_it_with_a_clear_error_not_rays_traceback(tmp_path, ray_session):
    from embodied.backends import WorkerLostError

    marker = tmp_path / "die"
    marker.write_text(str(os.getpid()))  # the driver builds one env too (its preflight), and is spared
    cfg = load_config(RECIPE, [*SHORT, "runner.iterations=2", "runner.eval_every=0", "cluster.backend=ray",
                               "env.id=tests.toy_envs:DyingBuildEnv", "policy.type=mlp",
                               f'env.kwargs={{"marker": "{marker}"}}', "eval_env.id=tests.toy_envs:CountingEnv",
                               "eval_env.kwargs={}", f"experiment.output_dir={tmp_path}"])
    with pytest.raises(WorkerLostError, match=r"a worker's process died while the run was starting: EnvWorker \(\w+\); "
                                              r"the run stopped: it saved no checkpoint yet .*runner.resume_from="):
        train(cfg)
    assert not marker.exists()  # a worker claimed it


def learning_figures(result) -> list[dict[str, float]]:
    """Every metric that depends on the run's numbers (not on how fast the machine ran it)."""
    return [{k: v for k, v in m.items() if k.startswith(("train/", "eval/", "rollout/"))} for m in result.history]


@pytest.mark.slow
@pytest.mark.ray
def test_a_short_ray_run_repeats_the_local_run_of_its_seed_exactly(tmp_path, ray_session):
    """A short run on Ray trains and evaluates as the local one does, to the bit: each worker is its own process
    there, so every RNG that acts must be seeded from experiment.seed, and the local backend with the same placement
    (disaggregated: rollout workers act on a synced copy) is then the same run, evals too. The Ray fault and resume
    tests rely on this to take their reference runs on the local backend.
    (One test: a separate short Ray run trained the same path again; a second Ray run of the seed is implied.)"""
    same = [*SHORT, "cluster.num_env_workers=2", "cluster.num_rollout_workers=1", "cluster.placement=disaggregated",
            "runner.eval_video=none"]  # the learning figures are compared, not the videos
    cfgs = [load_config(RECIPE, [*same, f"experiment.output_dir={tmp_path / backend}", f"cluster.backend={backend}"])
            for backend in ("ray", "local")]
    runs = [train(cfg) for cfg in cfgs]
    check_run(cfgs[0], runs[0])
    on_ray, local = (learning_figures(r) for r in runs)
    assert on_ray[-1]["train/policy_loss"] != 0.0 and any(k.startswith("eval/") for k in on_ray[-1])
    assert on_ray == local


@pytest.mark.slow
@pytest.mark.ray
def test_ray_backend_starts_and_stops_its_own_ray(tmp_path):
    """With no address and no Ray running, the run starts a local Ray and stops it at the end; its last eval's
    videos (the recipe's runner.eval_video: last), rendered and encoded in the eval env workers' processes, are there."""
    cmd = [sys.executable, "-m", "embodied.cli", "train", str(RECIPE), *SHORT, "runner.iterations=2",
           "cluster.backend=ray", f"experiment.output_dir={tmp_path}"]
    env = {**os.environ, "WANDB_MODE": "disabled", "RAY_ADDRESS": ""}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final eval: success_rate=" in proc.stdout
    assert "Started a local Ray instance" in proc.stderr
    videos = list(tmp_path.glob("*/videos/iter_000002/*.mp4"))
    assert videos and all(v.stat().st_size > 0 for v in videos)


@pytest.mark.slow
def test_default_recipe_reaches_target_success(tmp_path):
    """The recipe `make train` runs, unchanged but for where it writes: >= 90% eval success."""
    cfg = load_config(RECIPE, [f"experiment.output_dir={tmp_path}", "logger.progress_bar=false"])
    result = train(cfg)
    assert result.final_eval["eval/success_rate"] >= 0.9, result.final_eval


def test_an_unreachable_cluster_address_fails_within_the_timeout_and_leaves_no_run_dir(tmp_path, capsys):
    from embodied.cli import main

    started = time.monotonic()
    code = main(["train", str(RECIPE), "cluster.backend=ray", "cluster.address=127.0.0.1:1",
                 "cluster.connect_timeout_s=0.5", f"experiment.output_dir={tmp_path / 'runs'}"])
    assert code == 2 and time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "cluster.address: cannot reach Ray at '127.0.0.1:1' within cluster.connect_timeout_s=0.5 s" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_training_joins_an_existing_ray_cluster_and_leaves_it_running(tmp_path):
    """`ray start --head` on loopback (token authentication on, as Ray now defaults to), a short run
    against it through cluster.address, then the head is stopped by the test, not by the run."""
    from embodied.backends import check_reachable
    from tests.e2e.ray_head import start_head, stop_head, token_env

    env = token_env()
    port, head = start_head(env, tmp_path / "head.log")
    try:
        run = subprocess.run([sys.executable, "-m", "embodied.cli", "train", str(RECIPE), "cluster.backend=ray",
                              f"cluster.address=127.0.0.1:{port}", "runner.iterations=2", "runner.eval_every=0",
                              "runner.eval_video=none", "env.num_envs=8", "eval_env.num_envs=4",
                              "runner.eval_episodes=4", "logger.progress_bar=false",
                              f"experiment.output_dir={tmp_path}"],
                             env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        assert list(tmp_path.glob("*/checkpoints/iter_000002/trainer.pt"))
        check_reachable(f"127.0.0.1:{port}", 5)  # the run disconnected; the cluster is still up
    finally:
        stop_head(head)
