"""Several nodes (``ray.cluster_utils.Cluster``, each with its own CPUs and custom resources): every worker group
goes where ``cluster.*_resources`` send it, in placement groups (spread for the envs, packed for the learners),
and an actor rank that dies there stops the update naming it (the run-level stop, with the last checkpoint and the
resume command, is tested in ``tests/e2e/test_train.py``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embodied.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.ray
def test_groups_go_to_the_nodes_their_resources_name_in_placement_groups(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run([sys.executable, "-m", "tests.embodied.workers.cluster_nodes", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    nodes, placed = result["nodes"], result["placed"]
    for group in ("env", "eval_env"):  # strict_spread over the two nodes with "sim"
        assert sorted(placed[group]) == sorted([nodes["sim"], nodes["learner"]]), group
    assert placed["actor"] == [nodes["learner"]] * 2  # packed on the only node with "learner"
    assert placed["rollout"] == [nodes["learner"]] * 2
    assert nodes["head"] not in sum(placed.values(), [])  # the head (driver) runs no worker
    assert math.isfinite(result["loss"])
    assert result["lost"].startswith("actor rank 1 of 2 died during the update of iteration 2")


def test_custom_resources_the_backend_lacks_and_empty_placement_bundles_are_refused():
    from embodied.backends import LocalBackend
    from embodied.workers.resources import check_resources

    cfg = load_config(None, ["cluster.env_resources.resources={sim: 1}"])
    with pytest.raises(ConfigError, match=r"cluster.env_resources.resources.sim: the worker groups reserve 2 \(env: 2 "
                                          r"x 1\) but the local backend has 0"):
        check_resources(cfg, LocalBackend(), training=True)
    with pytest.raises(ConfigError, match=r"cluster.actor_resources.group_strategy: pack needs something to place"):
        load_config(None, ["cluster.backend=ray", "cluster.actor_resources.group_strategy=pack"])
    with pytest.raises(ConfigError, match=r"cluster.env_resources.group_strategy: placement groups are Ray's"):
        load_config(None, ["cluster.env_resources.group_strategy=spread", "cluster.env_resources.num_cpus=1"])


def test_the_old_name_of_a_groups_ray_strategy_is_refused_with_its_new_name():
    """``placement`` is cluster.placement's word (colocated or disaggregated); a group's Ray placement-group strategy
    is ``group_strategy``, and a recipe that still says ``*_resources.placement`` is told so."""
    for group in ("env", "rollout", "actor"):
        with pytest.raises(ConfigError, match=rf"cluster.{group}_resources.placement: renamed to "
                                              rf"cluster.{group}_resources.group_strategy \(the strategy of a Ray "
                                              r"placement group; 'placement' alone is cluster.placement"):
            load_config(None, ["cluster.backend=ray", f"cluster.{group}_resources.placement=pack"])
    cfg = load_config(None, ["cluster.backend=ray", "cluster.actor_resources.group_strategy=pack",
                             "cluster.actor_resources.num_cpus=1"])
    assert cfg.cluster.actor_resources.group_strategy == "pack"
