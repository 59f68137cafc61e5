"""``policy.gradient_checkpointing``: the backbone's layers are recomputed in backward, and nothing else changes."""

from __future__ import annotations

import torch

from embodied.policies.vla.configuration import VLAConfig
from embodied.policies.vla.modeling import VLAPolicy
from embodied.policies.vla.tiny import resolve_model_path
from tests.policies import test_vla


def build(checkpointing: bool) -> VLAPolicy:
    resolve_model_path("tiny:smolvlm-tiny")  # built (drawing random weights) on first use: before the seed
    torch.manual_seed(0)
    return VLAPolicy(VLAConfig(model_path="tiny:smolvlm-tiny", action_chunk=2, gradient_checkpointing=checkpointing),
                     test_vla.spec())


def test_checkpointed_backbone_recomputes_its_layers_and_gives_the_same_loss_and_gradients():
    plain, checkpointed = build(False), build(True)
    checkpointed.train()  # as the actor holds it; the layers' own flag stays on, their dropout off
    obs = test_vla.observations(3)
    torch.manual_seed(1)
    with torch.no_grad():
        out = plain.act(obs)
    calls = {"plain": 0, "checkpointed": 0}
    for name, policy in (("plain", plain), ("checkpointed", checkpointed)):
        attention = policy.fsdp_units()[-1].self_attn
        attention.register_forward_hook(lambda *_, n=name: calls.__setitem__(n, calls[n] + 1))
    grads = []
    for policy in (plain, checkpointed):
        logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
        (logprobs.sum() + values.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None})
        grads[-1]["logprobs"] = logprobs.detach()
    assert calls == {"plain": 1, "checkpointed": 2}  # recomputed once in backward
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    assert not any(m.training for m in checkpointed.backbone.modules() if isinstance(m, torch.nn.Dropout))


def test_checkpointing_is_off_by_default():
    assert not build(False)._checkpointed
