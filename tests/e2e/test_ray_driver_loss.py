"""Ray: when the driver dies (SIGKILL) no env, rollout or actor process outlives it by more than a few
seconds, and a run that loses the cluster it runs on stops naming its last checkpoint and the command
that resumes it. Real runs in subprocesses: a local Ray the driver starts, and `ray start --head` on
loopback. Only processes these tests start are killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from embodied.backends import check_reachable
from tests.e2e.ray_head import alive, descendants, kill_all, start_head, stop_head, token_env

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # Ray runs in subprocesses
ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "reach_mlp_ppo.yaml"
WORKERS = ("ray::EnvWorker", "ray::MultiStepRolloutWorker", "ray::ActorWorker")
OUTLIVE_S = 10.0  # "a few seconds": Ray reports a dead driver's job within about one of them
# Slow envs (20 steps a second) keep the run going while the test looks at it.
RUN = ["env.id=tests.toy_envs:SlowEnv", "env.kwargs={delay: 0.05}", "env.num_envs=2", "eval_env.num_envs=2",
       "env.preflight=false", "cluster.backend=ray", "policy.type=mlp", "policy.hidden_sizes=[8]",
       "policy.action_chunk=2", "rollout.chunk_steps=4", "algorithm.num_minibatches=1", "runner.iterations=1000",
       "runner.eval_every=0", "runner.checkpoint_every=2", "logger.backends=[console]", "logger.progress_bar=false",
       "runner.plot=false"]


def title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode().strip()
    except OSError:
        return ""


def start_run(out: Path, env: dict[str, str], *overrides: str, until: str = "it 1:") -> tuple[subprocess.Popen, Path]:
    """``embodied train`` in a subprocess; returns once its log shows ``until`` (by then every worker is up)."""
    log = out / "driver.log"
    out.mkdir(parents=True, exist_ok=True)
    driver = subprocess.Popen([sys.executable, "-m", "embodied.cli", "train", str(RECIPE), *RUN, *overrides,
                               f"experiment.output_dir={out / 'runs'}"], cwd=ROOT, env=env,
                              stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while until not in log.read_text():
        assert driver.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    return driver, log


def gone_within(pids: list[int], seconds: float) -> list[str]:
    """The titles of ``pids`` still alive after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [title(p) for p in pids if alive(p)]


def test_no_worker_outlives_a_sigkilled_driver_that_started_its_own_ray(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    driver, _ = start_run(tmp_path, env)
    below = descendants(driver.pid)  # Ray's own processes and the workers, all started by the driver
    workers = [p for p in below if title(p).startswith(WORKERS)]
    try:
        assert len(workers) == 4, [title(p) for p in below]  # env, eval env, rollout, actor
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        assert gone_within(workers, OUTLIVE_S) == []
    finally:
        kill_all(below)  # what Ray itself leaves (its dashboard and runtime-env agents linger)


@pytest.fixture(scope="module")
def loopback_head(tmp_path_factory) -> Iterator[tuple[str, dict[str, str], subprocess.Popen]]:
    """`ray start --head` on a free loopback port (token authentication on, as Ray now defaults to)."""
    env = token_env(PYTHONPATH=str(ROOT))
    port, head = start_head(env, tmp_path_factory.mktemp("ray_head") / "head.log")
    try:
        yield f"127.0.0.1:{port}", env, head
    finally:
        stop_head(head)


def test_no_worker_outlives_a_sigkilled_driver_on_an_existing_cluster(tmp_path, loopback_head):
    address, env, head = loopback_head
    driver, _ = start_run(tmp_path, env, f"cluster.address={address}")
    workers = [p for p in descendants(head.pid) if title(p).startswith(WORKERS)]
    assert len(workers) == 4, [title(p) for p in descendants(head.pid)]
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert gone_within(workers, OUTLIVE_S) == []
    check_reachable(address, 5)  # the cluster itself stays up


def test_a_run_that_loses_its_cluster_stops_naming_its_checkpoint_and_the_resume_command(tmp_path, loopback_head):
    address, env, head = loopback_head
    driver, log = start_run(tmp_path, env, f"cluster.address={address}", until="it 3:")  # a checkpoint at 2
    below = descendants(head.pid)  # before the kill: Ray's agents, orphaned by it, linger and are killed here
    try:
        kill_all([p for p in below if "gcs_server" in title(p) or "raylet" in title(p)])  # the head goes
        started = time.monotonic()
        code = driver.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        kill_all([driver.pid, *below])
    text = log.read_text()
    assert code == 1 and took < 30, text[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert "no longer accepts connections" in text and f"its last checkpoint is {run_dir}/checkpoints/iter_" in text
    assert f"resume with: embodied train {RECIPE} " in text and f"runner.resume_from={run_dir}" in text
    assert (run_dir / "checkpoints" / "iter_000002" / "trainer.pt").is_file()
