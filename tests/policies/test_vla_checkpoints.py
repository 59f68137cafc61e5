"""VLA weight sync (only what trains travels) and checkpoint folders that transformers / peft open alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied.algorithms.ppo_config import PPOConfig
from embodied.checkpoint.store import load_checkpoint, save_checkpoint
from embodied.config import ActorConfig
from embodied.policies.vla.configuration import VLAConfig
from embodied.policies.vla.modeling import VLAPolicy
from embodied.workers.actor_worker import ActorWorker
from embodied.workers.rollout_worker import MultiStepRolloutWorker
from tests.policies.test_vla import observations, spec


def tensor_bytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def actor(**fields) -> ActorWorker:
    cfg = VLAConfig(model_path="tiny:smolvlm-tiny", **{"action_chunk": 2, **fields})
    return ActorWorker(cfg, spec(), PPOConfig(), ActorConfig(), total_iterations=10, seed=0)


def perturb(policy: torch.nn.Module) -> None:
    """Stand-in for training: move every trainable parameter."""
    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))


def test_lora_weight_sync_sends_only_adapters_and_heads_and_the_copy_acts_identically():
    a = actor(lora_rank=4, action_head="gaussian")
    trainable = {n: p for n, p in a.policy.named_parameters() if p.requires_grad}
    assert set(a.optimizer.param_groups[0]["params"]) == set(trainable.values())  # the optimizer sees only them
    perturb(a.policy)
    version, state = a.weights()
    sent = tensor_bytes(state)
    assert set(state) == set(trainable)  # the tiny backbone has no buffers in its state dict
    assert sent == sum(p.numel() * p.element_size() for p in trainable.values())
    assert sent < 0.15 * tensor_bytes(a.policy.state_dict())
    rollout = MultiStepRolloutWorker(0, a.policy.config, spec(), None, None)
    assert rollout.sync_weights((version, state)) == version
    obs = observations(3)
    with torch.no_grad():
        ours, theirs = a.policy.act(obs, deterministic=True), rollout.policy.act(obs, deterministic=True)
    assert torch.equal(ours.actions, theirs.actions) and torch.equal(ours.values, theirs.values)


def test_full_finetuning_sends_the_whole_model():
    a = actor()
    _, state = a.weights()
    assert tensor_bytes(state) == tensor_bytes(a.policy.state_dict())


def test_sync_refuses_weights_of_another_model():
    rollout = MultiStepRolloutWorker(0, VLAConfig(action_chunk=2), spec(), None, None)
    with pytest.raises(ValueError, match="unknown parameters"):
        rollout.sync_weights((1, {"not.a.parameter": torch.zeros(1)}))


@pytest.mark.parametrize("lora", [0, 4])
def test_a_checkpoint_folder_reloads_exactly_and_opens_with_transformers_alone(tmp_path, lora):
    from transformers import AutoModelForImageTextToText

    a = actor(lora_rank=lora, use_states=True)
    perturb(a.policy)
    path = a.save_checkpoint(str(tmp_path / "iter_000001"), {"iteration": 1, "env_steps": 0})
    state = load_checkpoint(path)
    assert "policy" not in state["actor"] and state["actor"]["policy_dir"].endswith("policy")
    policy_dir = tmp_path / "iter_000001" / "policy"
    assert {"action_tokenizer.json", "heads.pt", "embodied_policy.json"} <= {p.name for p in policy_dir.iterdir()}

    b = actor(lora_rank=lora, use_states=True)
    b.load_state(state["actor"])
    obs = observations(4)
    with torch.no_grad():
        want, got = a.policy.act(obs, deterministic=True), b.policy.act(obs, deterministic=True)
    assert torch.equal(want.actions, got.actions) and torch.equal(want.values, got.values)
    assert b.version == a.version

    inputs = a.policy.forward_inputs(obs)
    pixels = a.policy.processor.pixel_inputs([inputs["main_images"], inputs["wrist_images"]], torch.device("cpu"),
                                             torch.float32)
    if lora:
        from peft import PeftModel

        base = AutoModelForImageTextToText.from_pretrained(a.policy.model_dir)
        opened = PeftModel.from_pretrained(base, policy_dir / "adapter")
    else:
        opened = AutoModelForImageTextToText.from_pretrained(policy_dir / "backbone")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        theirs = opened(input_ids=ids, attention_mask=mask, **pixels).logits
        # The policy's own backbone, through the same HF forward (the state token aside, it is the same model).
        ours = a.policy.backbone(input_ids=ids, attention_mask=mask, **pixels).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)


def test_a_checkpoint_of_another_action_dimension_is_refused(tmp_path):
    a = actor()
    save_checkpoint(tmp_path / "ck", {"actor": {"version": 0}}, a.policy)
    other = VLAPolicy(VLAConfig(action_chunk=2), spec(action_dim=3))
    with pytest.raises(ValueError, match="3"):
        other.load_pretrained(tmp_path / "ck" / "policy")
    lora = VLAPolicy(VLAConfig(action_chunk=2, lora_rank=4), spec())
    with pytest.raises(FileNotFoundError, match="adapter"):
        lora.load_pretrained(tmp_path / "ck" / "policy")
    assert np.isfinite(a.policy.value(observations(2)).numpy()).all()
