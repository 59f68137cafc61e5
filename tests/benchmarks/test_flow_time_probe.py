"""The flow-time probe mixes x_t at the true time and tells the model another: a fresh tiny π0.5 (its adaRMS
``dense`` weights zero) cannot see the time at all, a fresh tiny π0 (time added to every action token) can."""

from __future__ import annotations

import pytest

from benchmarks.flow_time_probe import TOLD, main
from embodied.config import load_config
from embodied.runs.collect import collect

PI05, PI0 = "configs/pick_color_pi05tiny_sft.yaml", "configs/pick_color_pi0tiny_sft.yaml"
pytestmark = pytest.mark.filterwarnings("ignore:policy.type=pi0.*no normalization statistics")
SMALL = ["env.num_envs=2", "eval_env.num_envs=2", "env.max_episode_steps=12", "policy.flow_steps=3"]


@pytest.mark.slow
def test_a_fresh_pi05_ignores_the_time_exactly_and_a_fresh_pi0_does_not(tmp_path, capsys):
    demos = tmp_path / "demos"
    collect(load_config(PI05, SMALL), episodes=2, out=demos)
    probe = ["--dataset", str(demos), "--times", "0.1", "0.9", "--threads", "1"]
    pi05 = main([PI05, *SMALL, "sft.val_fraction=0.5", *probe])
    pi0 = main([PI0, *SMALL, "sft.val_fraction=0.5", *probe])
    assert "told a random t" in capsys.readouterr().out
    for t in (0.1, 0.9):
        assert pi05[t]["true t"] > 0 and all(pi05[t][told] == pi05[t]["true t"] for told in TOLD)
        assert all(pi0[t][told] != pi0[t]["true t"] for told in TOLD[1:])
    assert pi05[0.1]["true t"] != pi05[0.9]["true t"]  # x_t itself is mixed at the probed time
