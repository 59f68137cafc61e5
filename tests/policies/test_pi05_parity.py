"""Our π0.5 acts as LeRobot 0.6.1's own π0.5 on folders LeRobot built and saved, stage by stage, within 1e-4.

The folders and LeRobot's recorded stages are under ``parity/pi05/`` (made by ``benchmarks/parity/`` with
``lerobot_pi05_record.py``, which says how to make them again); these tests need no LeRobot.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.parity.parity_pi0 import STAGES, table
from benchmarks.parity.parity_pi05 import TOLERANCE, check_case
from embodied.config.loader import from_dict
from embodied.policies.pi0.folders import camera_sources, read_config_json
from embodied.policy.config import PolicyConfig

PARITY = Path(__file__).resolve().parent / "parity" / "pi05"
TOKENIZER = PARITY / "tokenizer"
CASES = sorted(p.parent.name for p in PARITY.glob("*/case.json"))


def test_the_recorded_cases_cover_what_a_pi05_folder_varies():
    assert {"quantiles_no_resize", "quantiles_non_integral_raw_tasks_wide_states", "quantiles_libero_empty_camera",
            "mean_std_lm_head_only"} <= set(CASES)
    for case in CASES:
        meta = json.loads((PARITY / case / "case.json").read_text())
        assert meta["lerobot"] == "0.6.1" and meta["policy"] == "pi05" and meta["tokenizer_max_length"] == 200


@pytest.mark.parametrize("case", CASES)
def test_every_stage_matches_lerobot_within_tolerance(case):
    result = check_case(PARITY / case, TOKENIZER)
    assert set(result.differences) == set(STAGES)
    assert result.first_differing is None, f"{case}: first differing stage {result.first_differing}\n" + \
        table([result])
    assert max(result.differences.values()) <= TOLERANCE


def test_the_libero_folders_settings_are_read_where_the_yaml_is_silent():
    folder = PARITY / "quantiles_libero_empty_camera" / "lerobot"
    config = from_dict(PolicyConfig, {"type": "pi05", "model_path": str(folder)}, "policy")
    assert config.action_chunk == 10  # its n_action_steps, of chunks of 50
    saved = read_config_json(folder)
    assert saved["empty_cameras"] == 1
    assert camera_sources(None, True, True, saved) == ["main_images", "wrist_images", "empty"]


def test_a_lerobot_pi05_folder_loads_every_tensor_under_our_names():
    """Every tensor LeRobot saved comes back under our names (adaRMS dense layers, time MLP, the expert's lm_head as
    its unused embedding); the VLM's embedding is embed_tokens where the folder has it, else its lm_head."""
    from safetensors.torch import load_file

    from embodied.policies.pi05.pretrained import lerobot_key, load_pi05

    for case in ("quantiles_libero_empty_camera", "mean_std_lm_head_only"):
        folder = PARITY / case / "lerobot"
        model, _, source = load_pi05(folder, torch.float32, str(TOKENIZER))
        assert source == "LeRobot"
        mine = model.state_dict()
        theirs = {k.removeprefix("model."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
        for key, value in theirs.items():
            if key == "paligemma_with_expert.paligemma.lm_head.weight":
                embed = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
                assert torch.equal(mine["model.vlm.language_model.embed_tokens.weight"],
                                   theirs.get(embed, value)), case
                continue
            assert torch.equal(mine[lerobot_key(key)], value), key
        assert any(".dense." in lerobot_key(k) for k in theirs)


def test_the_folders_normalisation_mode_is_read():
    from embodied.policies.pi05.configuration import folder_mode

    assert folder_mode(read_config_json(PARITY / "mean_std_lm_head_only" / "lerobot")) == "mean_std"
    assert folder_mode(read_config_json(PARITY / "quantiles_no_resize" / "lerobot")) == "quantiles"


def test_full_size_pi05_parameter_counts():
    """π0.5 at LeRobot's sizes (gemma_2b VLM, gemma_300m expert, SigLIP so400m at 224), built on the meta device."""
    from embodied.policies.pi05.model import PI05ForConditionalGeneration
    from embodied.policies.pi05.pretrained import lerobot_pi05_config, parameter_split

    with torch.device("meta"):
        model = PI05ForConditionalGeneration(lerobot_pi05_config({"type": "pi05"}))
    split = parameter_split(model)
    assert round(split["vlm"] / 1e6) == 2923 and round(split["dit"] / 1e6) == 691
    assert round(split["dit_adarms"] / 1e6, 1) == 116.5 and round(split["dit_unused_embed"] / 1e6) == 263
    assert round(split["projections"] / 1e6, 3) == 2.166
