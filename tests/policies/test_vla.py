"""The VLA policy: tiny backbones, prompts and pixels, the three action heads, exact replay, LoRA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied.config import ConfigError, load_config
from embodied.policies.vla.action_tokenizer import ActionTokenizer
from embodied.policies.vla.configuration import TINY_NAMES, VLAConfig
from embodied.policies.vla.modeling import VLAPolicy
from embodied.policies.vla.tiny import TINY_BACKBONES, build_tiny_vla, resolve_model_path
from embodied.policy.base import PolicySpec

HEADS = ["tokens", "autoregressive", "gaussian"]
INSTRUCTIONS = ["pick up the red cube", "pick up the blue cube", "pick up the green cube", "pick up the yellow cube"]


def spec(action_dim: int = 4, states: int = 16, wrist: bool = True) -> PolicySpec:
    return PolicySpec(state_dim=states, image_shape=(64, 64, 3), action_dim=action_dim,
                      action_low=(-1.0,) * action_dim, action_high=(1.0,) * action_dim,
                      wrist_image_shape=(64, 64, 3) if wrist else None)


def observations(batch: int = 6, seed: int = 0, size: int = 64) -> dict:
    rng = np.random.default_rng(seed)
    return {"main_images": rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8),
            "wrist_images": rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8),
            "states": rng.normal(size=(batch, 16)).astype(np.float32),
            "task_descriptions": [INSTRUCTIONS[i % 4] for i in range(batch)]}


def make(backbone: str = "smolvlm-tiny", **fields) -> VLAPolicy:
    torch.manual_seed(0)
    cfg = VLAConfig(model_path=f"tiny:{backbone}", **{"action_chunk": 2, **fields})
    return VLAPolicy(cfg, spec())


def test_named_tiny_backbones_agree_with_the_builder():
    assert set(TINY_NAMES) == set(TINY_BACKBONES)


@pytest.mark.parametrize("backbone", sorted(TINY_BACKBONES))
def test_a_tiny_backbone_loads_with_transformers_alone_and_gives_identical_logits(tmp_path, backbone):
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    path = build_tiny_vla(tmp_path / backbone, backbone)
    policy = VLAPolicy(VLAConfig(model_path=str(path), action_chunk=2), spec())
    model = AutoModelForImageTextToText.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    assert 1e6 < n < 1e7  # a few million parameters
    assert len(tokenizer) + 256 == model.config.get_text_config().vocab_size  # the last 256 ids: action bins
    inputs = policy.forward_inputs(observations(2))
    pixels = policy.processor.pixel_inputs([inputs["main_images"], inputs["wrist_images"]], torch.device("cpu"),
                                           torch.float32)
    extra = {"mm_token_type_ids": (inputs["input_ids"] == model.config.image_token_id).int()} \
        if "image_grid_thw" in pixels else {}
    with torch.no_grad():
        ours = policy.backbone(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], **pixels,
                               **extra).logits
        theirs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], **pixels,
                       **extra).logits
    assert torch.isfinite(ours).all()
    assert torch.equal(ours, theirs)


def test_tiny_model_paths_are_built_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path))
    path = resolve_model_path("tiny:smolvlm-tiny")
    assert path == tmp_path / "tiny-vla" / "smolvlm-tiny" and (path / "config.json").is_file()
    stamp = (path / "config.json").stat().st_mtime_ns
    assert resolve_model_path("tiny:smolvlm-tiny") == path
    assert (path / "config.json").stat().st_mtime_ns == stamp  # not rebuilt
    assert resolve_model_path(str(tmp_path / "mine")) == tmp_path / "mine"


def test_a_tiny_model_built_by_two_processes_at_once_is_published_by_the_first_and_never_missing(tmp_path,
                                                                                                monkeypatch):
    """Another process publishes the folder while this one builds: this build is dropped, the published folder
    stays where it is (a reader in the other process never finds the name missing), and no staging folder is left."""
    from embodied.policies.vla.tiny import cached_tiny

    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path))
    target = tmp_path / "tiny-vla" / "toy"

    def build(path, name):
        path.mkdir()
        (path / "config.json").write_text('{"mine": true}')
        target.mkdir()  # the other process's rename lands first
        (target / "config.json").write_text('{"theirs": true}')
        return path

    assert cached_tiny("tiny-vla", "toy", build) == target
    assert (target / "config.json").read_text() == '{"theirs": true}'
    assert sorted(p.name for p in target.parent.iterdir()) == ["toy"]
    assert cached_tiny("tiny-vla", "toy", lambda path, name: pytest.fail("built again")) == target


@pytest.mark.parametrize("backbone", sorted(TINY_BACKBONES))
def test_prompts_have_one_length_with_the_images_tokens_in_place(backbone):
    policy = make(backbone)
    proc = policy.processor
    prompt = proc.prompts(["reach the red target", "pick up the red cube and place it at the green target"])
    assert prompt.input_ids.shape == prompt.attention_mask.shape == (2, proc.length)
    image_tokens = (prompt.input_ids == proc.image_token_id).sum(1)
    assert image_tokens.tolist() == [2 * proc.tokens_per_image] * 2  # main + wrist
    assert prompt.attention_mask[0].sum() < prompt.attention_mask[1].sum()  # shorter instruction: more padding
    assert prompt.attention_mask[:, -1].all()  # left padding: every prompt ends at the same index
    with pytest.raises(ValueError, match="policy.max_instruction_tokens"):
        proc.prompts(["pick up the red cube " * 20])


def test_qwen_pixels_match_the_transformers_image_processor_patch_layout():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    policy = make("qwen2_5_vl-tiny")
    proc = policy.processor
    images = torch.from_numpy(observations(2)["main_images"])
    ours = proc.pixel_inputs([images], torch.device("cpu"), torch.float32)
    assert ours["image_grid_thw"].tolist() == [[1, proc.grid, proc.grid]] * 2
    x = images.permute(0, 3, 1, 2).float() / 255.0
    x = ((x - proc.mean) / proc.std).numpy()
    reference = np.concatenate([Qwen2VLImageProcessorPil.patchify(None, x[i], proc.patch, proc.merge,
                                                                  proc.temporal)[0] for i in range(2)])
    np.testing.assert_allclose(ours["pixel_values"].numpy(), reference, rtol=0, atol=1e-6)


def test_images_of_another_size_are_resized_to_the_configured_size():
    policy = make("smolvlm-tiny", image_size=32)
    assert policy.processor.image_size == 32 and policy.processor.tokens_per_image == 4
    out = policy.act(observations(2, size=48))
    assert out.actions.shape == (2, 2, 4)


@pytest.mark.parametrize("backbone,head,lora", [("smolvlm-tiny", h, r) for h in HEADS for r in (0, 4)]
                         + [("qwen2_5_vl-tiny", h, 4) for h in HEADS])
def test_evaluate_replays_act_so_the_first_ppo_ratio_is_one(backbone, head, lora):
    policy = make(backbone, action_head=head, lora_rank=lora, use_states=True)
    with torch.no_grad():
        out = policy.act(observations(6))
    granularity = {"tokens": (6, 2, 4), "autoregressive": (6, 2, 4), "gaussian": (6, 2)}[head]
    assert out.logprobs.shape == granularity and out.values.shape == (6,)
    assert out.forward_inputs["main_images"].dtype == torch.uint8  # no float pixels in a rollout
    assert not any(v.is_floating_point() and v.dim() > 2 for v in out.forward_inputs.values())
    policy.train()
    minibatch = torch.tensor([4, 1, 3])  # another batch composition than act saw
    logprobs, entropy, values = policy.evaluate({k: v[minibatch] for k, v in out.forward_inputs.items()},
                                                out.actions[minibatch])
    ratio = (logprobs - out.logprobs[minibatch]).exp()
    assert (ratio - 1).abs().max() < 1e-5
    assert (values - out.values[minibatch]).abs().max() < 1e-5
    assert entropy.shape == logprobs.shape and (entropy > 0).all()
    loss = -(ratio * torch.randn_like(ratio)).mean() + values.square().mean()
    loss.backward()
    grads = [p.grad for p in policy.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(p.grad is None for p in policy.parameters() if not p.requires_grad)


@pytest.mark.parametrize("head", HEADS)
def test_greedy_actions_are_deterministic_and_inside_the_action_space(head):
    policy = make(action_head=head)
    obs = observations(4)
    with torch.no_grad():
        a, b = policy.act(obs, deterministic=True), policy.act(obs, deterministic=True)
    assert torch.equal(a.actions, b.actions)
    if head != "gaussian":  # bin centres lie inside the bounds
        assert a.actions.abs().max() < 1.0


def test_token_heads_act_in_bin_centres_of_the_action_space():
    policy = VLAPolicy(VLAConfig(model_path="tiny:smolvlm-tiny", action_chunk=2, action_bins=8),
                       PolicySpec(0, (64, 64, 3), 2, (0.0, -2.0), (1.0, 2.0)))
    with torch.no_grad():
        out = policy.act(observations(3))
    centres0 = (torch.arange(8) + 0.5) / 8  # [0, 1] cut into 8 bins
    centres1 = (torch.arange(8) + 0.5) / 8 * 4 - 2
    assert all(torch.isclose(centres0, v, atol=1e-6).any() for v in out.actions[..., 0].flatten())
    assert all(torch.isclose(centres1, v, atol=1e-6).any() for v in out.actions[..., 1].flatten())


def test_action_tokenizer_round_trip_and_token_ids(tmp_path):
    tok = ActionTokenizer(256, 1000, [-1.0, 0.0], [1.0, 10.0])
    assert tok.first_token_id == 744
    actions = torch.tensor([[-1.0, 0.0], [0.999, 10.0], [0.0, 5.0], [3.0, -4.0]])
    bins = tok.encode(actions)
    assert bins[0].tolist() == [0, 0] and bins[1].tolist() == [255, 255] and bins[3].tolist() == [255, 0]
    assert torch.equal(tok.encode(tok.decode(bins)), bins)  # bin centres map back to their bins
    assert (tok.decode(bins) - actions.clamp(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 10.0]))).abs().max() \
        <= torch.tensor([1 / 256, 10 / 512]).max() + 1e-6
    tok.save(tmp_path)
    assert ActionTokenizer.load(tmp_path) == tok
    with pytest.raises(ValueError, match="high > low"):
        ActionTokenizer(256, 1000, [1.0], [1.0])
    with pytest.raises(ValueError, match="do not fit"):
        ActionTokenizer(256, 100, [-1.0], [1.0])


def test_bfloat16_backbone_acts_and_evaluates_finitely():
    policy = make(dtype="bfloat16", lora_rank=4)
    assert policy.backbone.dtype == torch.bfloat16
    with torch.no_grad():
        out = policy.act(observations(3))
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    assert torch.isfinite(logprobs).all() and torch.isfinite(values).all()
    assert logprobs.dtype == values.dtype == torch.float32
    assert (logprobs - out.logprobs).abs().max() < 1e-2


def test_lora_trains_only_adapters_and_heads():
    policy = make(lora_rank=4, action_head="gaussian", use_states=True)
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or n.split(".")[0] in ("value_head", "head", "state_proj")
                             for n in trainable)
    assert not any("vision" in n for n in trainable)  # the default targets are the language model's
    full = sum(p.numel() for p in policy.parameters())
    assert sum(p.numel() for n, p in policy.named_parameters() if p.requires_grad) < 0.15 * full


# -- bad input --------------------------------------------------------------------------------


def test_the_instruction_template_writes_the_task_into_the_prompt():
    plain = make("paligemma-tiny").processor
    templated = make("paligemma-tiny", instruction_template="Task: {task}, State: ;\nAction: ").processor
    ids = templated.prompts(["pick up the red cube"]).input_ids[0]
    kept = ids[templated.prompts(["pick up the red cube"]).attention_mask[0].bool()].tolist()
    words = templated._ids("Task: pick up the red cube, State: ;\nAction: ")
    assert kept == templated._prefix + words + templated._suffix  # PaliGemma's: images, <bos>, the text, "\n"
    assert plain.prompts(["pick up the red cube"]).attention_mask.sum() < len(kept)
    with pytest.raises(ValueError, match="policy.max_instruction_tokens: the instruction 'Task: "):
        templated.prompts(["pick up the red cube " * 8])


def vla_config_errors(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["env.id=PickColor-v0", "env.obs_mode=rgb", "policy.type=vla", *overrides])
    return str(info.value)


def test_a_model_folder_without_config_tokenizer_or_stats_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    msg = vla_config_errors(f"policy.model_path={tmp_path / 'empty'}", "policy.action_norm=model_stats")
    assert "policy.model_path" in msg and "no config.json" in msg and "no tokenizer" in msg
    assert "action_stats.json" in msg
    assert "is not a folder" in vla_config_errors(f"policy.model_path={tmp_path / 'missing'}")
    assert "unknown tiny backbone 'nope'" in vla_config_errors("policy.model_path=tiny:nope")


def test_numeric_fields_and_cuda_are_checked_before_any_worker(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    msg = vla_config_errors("policy.device=cuda", "policy.action_bins=1", "policy.temperature=0",
                            "policy.lora_rank=-1")
    for field in ("policy.device", "policy.action_bins", "policy.temperature", "policy.lora_rank"):
        assert field in msg
    assert "no CUDA device" in msg
    assert "never writes the task" in vla_config_errors("policy.instruction_template=Task")
    assert "{task} as its only field (KeyError" in vla_config_errors("policy.instruction_template='{goal} {task}'")


def test_action_statistics_of_another_dimension_name_both_numbers(tmp_path):
    import json

    path = build_tiny_vla(tmp_path / "m", "smolvlm-tiny")
    (path / "action_stats.json").write_text(json.dumps({"q01": [-1.0] * 7, "q99": [1.0] * 7}))
    with pytest.raises(ValueError, match="7 action dimensions but the env's action space has 4"):
        VLAPolicy(VLAConfig(model_path=str(path), action_norm="model_stats"), spec())
    (path / "action_stats.json").write_text(json.dumps({"q01": [-0.5] * 4, "q99": [0.5] * 4}))
    policy = VLAPolicy(VLAConfig(model_path=str(path), action_norm="model_stats"), spec())
    assert policy.action_tokenizer.low == [-0.5] * 4


def test_an_env_without_images_or_instructions_is_refused():
    with pytest.raises(ValueError, match="needs images.*env.obs_mode"):
        VLAPolicy(VLAConfig(), PolicySpec(16, None, 4, (-1.0,) * 4, (1.0,) * 4))
    with pytest.raises(ValueError, match="policy.use_states"):
        VLAPolicy(VLAConfig(use_states=True), spec(states=0))
    policy = make()
    obs = observations(2)
    del obs["task_descriptions"]
    with pytest.raises(ValueError, match="task_descriptions"):
        policy.act(obs)
    with pytest.raises(ValueError, match="task_descriptions"):
        policy.act({**observations(2), "task_descriptions": ["", ""]})


def test_a_lora_target_that_matches_no_module_is_named():
    with pytest.raises(ValueError, match=r"policy.lora_target_modules: \['qkv_nope'\] match no module"):
        make(lora_rank=4, lora_target_modules=["q_proj", "qkv_nope"])
    assert "policy.lora_target_modules" in vla_config_errors("policy.lora_target_modules=[q_proj]")


def test_cuda_device_without_cuda_is_refused_at_build(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="policy.device: 'cuda'"):
        make(device="cuda")
    assert make(device="auto").device_ == torch.device("cpu")


@pytest.mark.parametrize("head", ["tokens", "gaussian"])
def test_each_placeholder_slot_has_its_own_embedding_and_the_gaussian_a_map_per_slot(head):
    """Identical placeholder tokens are told apart by learned slot embeddings, which train and sync."""
    policy = make(action_head=head)
    assert policy.head.slots.shape == (policy.head.size, policy.backbone.config.get_text_config().hidden_size)
    assert any(k.endswith("head.slots") for k in policy.trainable_state())
    obs = observations(2)
    with torch.no_grad():
        before = policy.act(obs, deterministic=True)
        policy.head.slots.add_(torch.randn_like(policy.head.slots))
        after = policy.act(obs, deterministic=True)
    # The slots reach the placeholders' hidden states (gaussian: the means; tokens: the bin scores).
    changed = after.actions if head == "gaussian" else after.logprobs
    assert not torch.allclose(before.actions if head == "gaussian" else before.logprobs, changed)
    if head == "gaussian":
        with torch.no_grad():  # zero weights: each slot's mean is its own bias, in normalized units
            policy.head.mean_weight.zero_()
            policy.head.mean_bias.copy_(torch.linspace(-0.9, 0.9, policy.head.size))
        actions = policy.act(obs, deterministic=True).actions
        expected = torch.linspace(-0.9, 0.9, policy.head.size).view(2, 4)  # bounds [-1, 1]: normalized = raw
        torch.testing.assert_close(actions[0], expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(actions[1], expected, atol=1e-5, rtol=0)
