"""Our π0 acts as LeRobot 0.6.1's own π0 on folders LeRobot built and saved, stage by stage, within 1e-4.

The folders and LeRobot's recorded stages are under ``parity/pi0/`` (made by ``benchmarks/parity/``, which says
how to make them again); these tests need no LeRobot. Each case varies one thing a user's folder varies.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.parity.parity_pi0 import STAGES, TOLERANCE, check_case, table
from embodied.config.loader import from_dict
from embodied.policies.pi0.configuration import PI0PolicyConfig
from embodied.policies.pi0.folders import camera_sources, read_config_json
from embodied.policies.pi0.pretrained import lerobot_pi0_config, load_pi0
from embodied.policy.config import PolicyConfig

PARITY = Path(__file__).resolve().parent / "parity" / "pi0"
TOKENIZER = PARITY / "tokenizer"
CASES = sorted(p.parent.name for p in PARITY.glob("*/case.json"))


def test_the_recorded_cases_cover_what_a_folder_varies():
    assert {"tied_no_resize", "untied_no_resize", "untied_non_integral_ratios", "untied_empty_camera",
            "untied_raw_instructions", "untied_long_chunk", "untied_truncated_instruction",
            "untied_two_cameras_integral"} <= set(CASES)
    for case in CASES:
        meta = json.loads((PARITY / case / "case.json").read_text())
        assert meta["lerobot"] == "0.6.1", case


@pytest.mark.parametrize("case", CASES)
def test_every_stage_matches_lerobot_within_tolerance(case):
    result = check_case(PARITY / case, TOKENIZER)
    assert set(result.differences) == set(STAGES)
    assert result.first_differing is None, f"{case}: first differing stage {result.first_differing}\n" + \
        table([result])
    assert max(result.differences.values()) <= TOLERANCE


def test_the_folder_settings_are_read_where_the_yaml_is_silent():
    folder = PARITY / "untied_long_chunk" / "lerobot"
    config = from_dict(PolicyConfig, {"type": "pi0", "model_path": str(folder)}, "policy")
    assert config.action_chunk == json.loads((folder / "config.json").read_text())["n_action_steps"] == 50
    mine = from_dict(PolicyConfig, {"type": "pi0", "model_path": str(folder), "action_chunk": 8}, "policy")
    assert mine.action_chunk == 8  # the user's value wins
    assert PI0PolicyConfig.folder_defaults({"model_path": "tiny:pi0-tiny"}) == {}


def test_cameras_map_onto_the_folders_and_a_mismatch_names_both():
    empty = read_config_json(PARITY / "untied_empty_camera" / "lerobot")
    assert camera_sources(None, True, True, empty) == ["main_images", "wrist_images", "empty"]
    assert camera_sources(["wrist_images", "empty", "main_images"], True, True, empty) == \
        ["wrist_images", "empty", "main_images"]
    one = read_config_json(PARITY / "untied_no_resize" / "lerobot")
    assert camera_sources(None, False, True, one) == ["main_images"]
    with pytest.raises(ValueError, match=r"env gives 2 cameras \(main_images, wrist_images\) but the folder's π0 "
                                         r"takes 1 \(observation.images.base_0_rgb\)"):
        camera_sources(None, True, True, one)
    with pytest.raises(ValueError, match=r"2 given .* for the folder's 3 cameras \(observation.images.base_0_rgb"):
        camera_sources(["main_images", "wrist_images"], True, True, empty)
    with pytest.raises(ValueError, match="asks for wrist_images, but the env gives only main_images"):
        camera_sources(["main_images", "wrist_images", "empty"], True, False, empty)
    assert "policy.cameras" in PI0PolicyConfig(cameras=["main_images", "left"]).validate()[0]


def test_a_tied_folder_loads_without_the_embedding_warning(recwarn):
    check_case(PARITY / "tied_no_resize", TOKENIZER)
    assert not [w for w in recwarn if "embed_tokens" in str(w.message)]


def test_a_camera_mismatch_is_named_before_any_worker_or_weights():
    from embodied.policy.base import PolicySpec

    config = PI0PolicyConfig(model_path=str(PARITY / "untied_no_resize" / "lerobot"), tokenizer_path=str(TOKENIZER),
                             action_chunk=5)
    spec = PolicySpec(state_dim=6, image_shape=(56, 56, 3), action_dim=4, action_low=(-1.0,) * 4,
                      action_high=(1.0,) * 4, wrist_image_shape=(56, 56, 3))
    problems = config.spec_problems(spec)
    assert any("env gives 2 cameras (main_images, wrist_images)" in p and "observation.images.base_0_rgb" in p
               for p in problems), problems


def test_a_lerobot_pi0_folder_loads_every_tensor_it_holds_with_sizes_read_off_its_weights():
    """A folder LeRobot 0.6.1 built and saved (tests/policies/parity/pi0): its config.json names gemma_2b and
    gemma_300m, its weights are tiny; every tensor comes back under transformers' names, the VLM's embedding from
    embed_tokens (LeRobot's trained one), not from the lm_head transformers' mapping would put there."""
    from safetensors.torch import load_file

    folder = PARITY / "untied_no_resize" / "lerobot"
    with pytest.warns(UserWarning, match="lm_head and embed_tokens differ.*using embed_tokens"):
        model, _, source = load_pi0(folder, torch.float32, str(PARITY / "tokenizer"))
    assert source == "LeRobot"
    text = model.config.vlm_config.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size, text.head_dim) == (64, 2, 128, 8)
    assert model.config.dit_config.hidden_size == 32 and model.config.vlm_config.vision_config.hidden_size == 64
    theirs = {k.removeprefix("model."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    mine = model.state_dict()
    renames = [("paligemma_with_expert.paligemma.model.", "model.vlm."),
               ("paligemma_with_expert.gemma_expert.model.", "model.dit."),
               ("paligemma_with_expert.gemma_expert.lm_head.", "model.dit.embed_tokens."),
               ("state_proj", "embed_action_time.state_proj"), ("action_in_proj", "embed_action_time.action_in_proj"),
               ("action_time_mlp", "embed_action_time.action_time_mlp")]
    for key, value in theirs.items():
        if key == "paligemma_with_expert.paligemma.lm_head.weight":
            continue  # π0 has no VLM head: LeRobot never reads it
        for old, new in renames:
            key = key.replace(old, new) if key.startswith(old) else key
        key = key.replace("vision_tower.vision_model.", "vision_tower.")  # SigLIP's inner module, flattened
        assert torch.equal(mine[key], value), key


def test_lerobot_configs_translate_into_pi0config_shapes():
    from transformers import PI0Config

    pc = lerobot_pi0_config({"type": "pi0", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
                             "chunk_size": 50, "n_action_steps": 10, "max_state_dim": 32, "max_action_dim": 32,
                             "num_steps": 10})
    default = PI0Config()
    assert pc.dit_config.hidden_size == default.dit_config.hidden_size == 1024
    assert pc.vlm_config.text_config.hidden_size == 2048 and pc.num_inference_steps == 10
    with pytest.raises(ValueError, match="paligemma_variant='gemma_7b' is unknown"):
        lerobot_pi0_config({"type": "pi0", "paligemma_variant": "gemma_7b"})
