"""Long runs: restarting an env worker many times leaks neither GL contexts nor memory, and the run
logs the resident memory of its processes (``sys/rss_mib/<worker>``)."""

from __future__ import annotations

import weakref
from pathlib import Path

import pytest

import embodied.runs.train as runner
from embodied.backends import LocalGroup, process_rss_mib
from embodied.channels import LocalChannel, route
from embodied.config import EnvConfig, load_config
from embodied.envs.mujoco_base import OffscreenRenderer
from embodied.workers.env_worker import EnvWorker
from embodied.workers.link import Link

RESTARTS = 20


def restarted_group(env_cfg: EnvConfig, restarts: int, after_each=None) -> None:
    """An env worker of ``env_cfg`` replaced ``restarts`` times, as ``EnvGroup.replace`` does (a new
    generation, no reset in the constructor, then the envs reset); ``after_each(i)`` after each."""
    link = Link(route(env_cfg.num_envs, 1, 1), LocalChannel("obs"), LocalChannel("actions"))
    group = LocalGroup(EnvWorker, [(0, env_cfg, link, 0, 1, "env", None)])
    try:
        for i in range(restarts):
            group.restart(0, (0, env_cfg, link, None, 1, "env", None))
            group.call_each("restore", [("restart test", i + 1, 100 * i)])[0].result(timeout=60)
            if after_each is not None:
                after_each(i)
    finally:
        group.call("close")[0].result(timeout=60)
        group.close()


@pytest.fixture
def gl_contexts(monkeypatch) -> weakref.WeakSet:
    """Every ``OffscreenRenderer`` (one GL context each) made from now on, while it is alive."""
    made: weakref.WeakSet = weakref.WeakSet()
    init = OffscreenRenderer.__init__

    def tracked(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        made.add(self)

    monkeypatch.setattr(OffscreenRenderer, "__init__", tracked)
    return made


def test_restarting_an_env_worker_20_times_leaks_no_gl_contexts(gl_contexts):
    """Reach-v0 with rgb observations holds one GL context per env from its first reset. Counted without a
    garbage collection: a replaced worker's contexts must be freed at once, not whenever a full pass runs."""
    env_cfg = EnvConfig(id="Reach-v0", num_envs=2, obs_mode="rgb", kwargs={"image_size": 16})

    def live() -> int:
        return sum(1 for r in list(gl_contexts) if r._gl is not None)

    counts: list[int] = []
    restarted_group(env_cfg, RESTARTS, lambda i: counts.append(live()))
    assert counts == [2] * RESTARTS  # the live worker's two envs, never the replaced workers' too
    assert live() == 0


def test_restarting_an_env_worker_20_times_leaks_no_memory():
    """Each worker's envs hold 2 x 8 MiB: 20 leaked workers would be 320 MiB; the bound is 48 MiB."""
    env_cfg = EnvConfig(id="tests.toy_envs:BallastEnv", num_envs=2, kwargs={"mib": 8})
    rss: list[float] = []
    restarted_group(env_cfg, RESTARTS, lambda i: rss.append(process_rss_mib()))  # no gc.collect() either
    growth = max(rss[RESTARTS // 4:]) - rss[RESTARTS // 4 - 1]  # after a warm-up of 5 restarts
    assert growth < 48, f"RSS grew {growth:.0f} MiB over {RESTARTS - RESTARTS // 4} restarts: {rss}"


def test_restarts_leave_nothing_in_the_channels_under_earlier_generations():
    """A failed worker leaves items under its generation's keys (its first observations, say); moving
    the exchange to a new generation drops them, so twenty restarts leave no trail of queued arrays."""
    link = Link(route(4, 2, 1)[:1], LocalChannel("obs"), LocalChannel("actions"))
    for generation in range(RESTARTS):
        link.move_to(generation)
        for shard in link.shards:
            link.to_rollout.put(link.key(shard), "an observation nobody read")
            link.to_env.put(link.key(shard), "an action nobody read")
    assert list(link.to_rollout._queues) == list(link.to_env._queues) == [f"env0-rollout0/{RESTARTS - 1}"]


def test_each_iteration_logs_the_resident_memory_of_the_driver(tmp_path: Path):
    cfg = load_config(None, [
        "env.id=tests.toy_envs:CountingEnv", "env.num_envs=2", "eval_env.num_envs=2", "env.preflight=false",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=2",
        "algorithm.num_minibatches=1", "runner.iterations=2", "runner.eval_every=0", "runner.eval_episodes=2",
        "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false",
        f"experiment.output_dir={tmp_path}"])
    result = runner.train(cfg)
    for metrics in result.history:
        assert 50 < metrics["sys/rss_mib/driver"] < 1e5
        assert not [k for k in metrics if k.startswith("sys/rss_mib/") and k != "sys/rss_mib/driver"]  # threads
    # On Ray every worker process logs its own: test_replayed_faults' Ray run checks them.


def test_a_replacement_env_worker_hands_freed_memory_back_first(monkeypatch):
    """On the local backend a replaced worker's envs are freed in the driver's process; glibc keeps those pages
    unless asked (a soak's driver grew 2-16 MiB a restart), so each replacement trims the heap before it builds."""
    import embodied.workers.env_worker as env_worker

    assert env_worker.release_freed_memory()  # Linux: glibc's malloc_trim is there
    trims: list[int] = []
    monkeypatch.setattr(env_worker, "release_freed_memory", lambda: trims.append(1) or True)
    restarted_group(EnvConfig(id="tests.toy_envs:CountingEnv", num_envs=2), 3)
    assert len(trims) == 3  # once per replacement, not for the first worker (built with a seed)


def test_a_long_run_keeps_a_bounded_history_in_memory(tmp_path, monkeypatch):
    """Each iteration's metrics (~3.6 KB) kept for good grew a soak's driver by ~12 MiB an hour; the run keeps
    the last HISTORY_KEPT to 2 x HISTORY_KEPT iterations, and metrics.jsonl every one."""
    import json

    monkeypatch.setattr(runner, "HISTORY_KEPT", 2)
    cfg = load_config(None, ["env.id=tests.toy_envs:CountingEnv", "env.num_envs=2", "eval_env.num_envs=2",
                             "env.max_episode_steps=4", "env.preflight=false", "policy.type=mlp",
                             "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=2",
                             "algorithm.num_minibatches=1", "runner.iterations=7", "runner.eval_every=0",
                             "runner.checkpoint_every=0", "logger.backends=[console]", "logger.progress_bar=false",
                             "runner.plot=false", f"experiment.output_dir={tmp_path}"])
    result = runner.train(cfg)
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 7 and len(result.history) == 4  # trimmed to 2 at the 5th, then the 6th and 7th
    assert [m["env_steps"] for m in result.history] == [r["env_steps"] for r in rows[-4:]]


def test_env_workers_map_simulator_buffers_so_that_freeing_them_returns_them():
    """MuJoCo's MjData arena is 13 MiB for Reach-v0, mostly never touched. Once glibc raised its mmap threshold
    past that (it does after the first such block is freed), rebuilt envs came from the heap and left resident
    holes: a soak's driver grew ~226 MiB/h. An env worker pins the threshold, so the blocks are mapped and
    unmapped whole: building and freeing 20 MjData leaves the heap as it was. Measured in a process of its own,
    where no other test's threads allocate meanwhile."""
    import ctypes
    import json
    import subprocess
    import sys

    import embodied.workers.env_worker as env_worker

    script = """
import ctypes, json, mujoco
from embodied.config import EnvConfig
from tests.embodied.workers.test_restart_leaks import restarted_group

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                              "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
restarted_group(EnvConfig(id="Reach-v0", num_envs=2), 1)  # builds an env worker, as a run does
model = mujoco.MjModel.from_xml_string("<mujoco><size memory='13M'/><worldbody><body><freejoint/>"
                                       "<geom size='.1'/></body></worldbody></mujoco>")
before = mallinfo2()
datas = [mujoco.MjData(model) for _ in range(20)]
held = mallinfo2()
del datas
after = mallinfo2()
print(json.dumps({"mapped_held": held.hblkhd - before.hblkhd, "mapped_left": after.hblkhd - before.hblkhd,
                  "heap_grew": after.arena - before.arena}))
"""
    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc >= 2.33")
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    assert m["mapped_held"] >= 20 * 13 << 20  # each arena a mapping of its own
    assert m["mapped_left"] < 1 << 20  # all handed back
    assert m["heap_grew"] < 32 << 20  # and the heap never held them (260 MiB without the pin)
    assert env_worker.MMAP_THRESHOLD_BYTES < 13 << 20


def test_a_failed_env_workers_envs_are_freed_when_it_is_replaced_not_at_a_full_collection(tmp_path, monkeypatch):
    """A worker's exception reached the driver with frames holding the worker and its envs, in a cycle that only
    Python's rare full collections free: a soak kept up to five replaced workers' envs alive. Errors now cross the
    worker boundary without their frames' variables, and the driver lets go of a handled failure's frames. With
    the collector off, the env that raised is gone once the run ends."""
    import gc

    from tests.embodied.workers.test_faults import faulty_config
    from tests.toy_envs import FaultyEnv

    raised: list[weakref.ref] = []
    broken = FaultyEnv._broken_physics

    def tracked(self):
        raised.append(weakref.ref(self))
        return broken(self)

    monkeypatch.setattr(FaultyEnv, "_broken_physics", tracked)
    gc.collect()
    gc.disable()
    try:
        result = runner.train(faulty_config(tmp_path, "raise", tmp_path / "fault.marker"))
        assert result.history[-1]["workers/restarts"] == 1.0 and len(raised) == 1  # the fault did happen
        assert raised[0]() is None, "the failed worker's env outlived its replacement"
    finally:
        gc.enable()
