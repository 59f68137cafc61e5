"""The first-chunk probe trains and reports at toy sizes; its figures say what they claim."""

from __future__ import annotations

import numpy as np
import torch

from benchmarks.first_chunk_probe import main
from embodied.config import load_config
from embodied.runs.collect import collect
from embodied.runs.sft import sft

REACH = ["env.num_envs=8", "eval_env.num_envs=8", "env.max_episode_steps=30", "policy.action_chunk=2",
         "policy.hidden_sizes=[64, 64]", "policy.normalize_states=true", "sft.val_fraction=0.3"]
QUIET = ["logger.backends=[]", "logger.progress_bar=false", "runner.plot=false", "runner.eval_episodes=8"]


def test_training_on_first_chunks_beats_the_mean_and_a_checkpoint_is_probed(tmp_path, capsys):
    config = "configs/reach_mlp_ppo.yaml"
    demos = tmp_path / "reach"
    collect(load_config(config, REACH), episodes=40, out=demos)
    threads = torch.get_num_threads()
    try:
        trained = main([config, *REACH, "--dataset", str(demos), "--train-steps", "150", "--lr", "0.003",
                        "--report-every", "75", "--rows", "64", "--threads", "1"])
        text = capsys.readouterr().out
        assert "mean predictor, first chunk step, held out" in text and "chunk step" in text
        _, _, _, held = trained["training"][-1]
        _, _, mean = trained["chunk_steps"][0]
        assert held[:3].mean() < 0.7 * mean[:3].mean()  # it learnt where the target is
        run = sft(load_config(config, [*REACH, *QUIET, f"sft.dataset={demos}", "sft.epochs=30", "sft.lr=0.003",
                                       f"experiment.output_dir={tmp_path / 'runs'}"]))
        probed = main([config, *REACH, "--dataset", str(demos), "--checkpoint", str(run.run_dir), "--threads", "1"])
        untrained = main([config, *REACH, "--dataset", str(demos), "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    assert probed["training"] == []
    ours, fresh = probed["chunk_steps"][0][1], untrained["chunk_steps"][0][1]
    assert np.all(np.isfinite(ours)) and ours[:3].mean() < fresh[:3].mean()
