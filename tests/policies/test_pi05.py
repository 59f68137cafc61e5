"""π0.5 (policy.type: pi05) on the tiny config: π0's loop over π0.5's model (transformers' sample_actions), exact
replay, log-probs, the adaRMS expert, the state in the prompt, quantile normalisation, SFT, LoRA, bf16, FSDP units,
DSRL, checkpoints, and the bad input named with its field and folder."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.models.gemma.modeling_gemma import GemmaModel

from embodied.config import ConfigError, load_config
from embodied.policies.flow_logprob import CHAIN
from embodied.policies.pi05.configuration import PI05PolicyConfig
from embodied.policies.pi05.modeling import PI05Policy
from embodied.policies.pi05.processing import discretize, normalize, prompt_text, unnormalize
from embodied.policy.base import PolicySpec
from tests.policies.test_pi0 import SPEC, assert_vlm_seeded_from, observations

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
pytestmark = pytest.mark.filterwarnings("ignore:policy.type=pi05.*no normalization statistics")


def make(spec: PolicySpec = SPEC, **fields) -> PI05Policy:
    torch.manual_seed(0)
    return PI05Policy(PI05PolicyConfig(**({"action_chunk": 3, "max_instruction_tokens": 48} | fields)), spec)


@pytest.fixture(scope="module")
def noise_policy() -> PI05Policy:
    return make(flow_logprob="noise")


def test_greedy_loop_equals_pi0s_sample_actions_over_the_pi05_model(noise_policy):
    policy = noise_policy
    torch.manual_seed(3)
    out = policy.act(observations(4), deterministic=True)
    chain = out.forward_inputs[CHAIN]
    reference = policy.model.sample_actions(state=policy._state(out.forward_inputs), noise=chain[:, 0],
                                            num_steps=policy.steps, **policy._prompt_inputs(out.forward_inputs))
    assert (reference - chain[:, -1]).abs().max() <= 1e-5
    assert out.actions.shape == (4, 3, 4) and out.logprobs.shape == (4, 3) and out.values.shape == (4,)


@pytest.mark.parametrize("mode", ["sde", "noise"])
def test_evaluate_replays_act_so_the_first_ppo_ratio_is_one(mode):
    policy = make(flow_logprob=mode)
    torch.manual_seed(1)
    out = policy.act(observations(5))
    logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
    assert (logprobs - out.logprobs).abs().max() <= 1e-5
    assert torch.allclose(values, out.values, atol=1e-6) and entropy.shape == (5, 3)


def test_the_expert_is_conditioned_on_time_through_adarms_and_has_no_state_input(noise_policy):
    model = noise_policy.model
    layer = model.model.dit.layers[0]
    assert not hasattr(layer.input_layernorm, "weight") and not hasattr(model.model.dit.norm, "weight")
    assert not hasattr(model.embed_action_time, "state_proj")
    x = torch.randn(2, noise_policy.chunk_size, 32)
    a, b = (model.embed_action_time(None, x, torch.full((2,), t)) for t in (0.2, 0.9))
    assert torch.equal(a.embeds, b.embeds) and not torch.allclose(a.cond, b.cond)  # time only in the condition


def test_a_tiny_pi05_starts_with_open_gates_so_its_expert_computes_what_a_gemma_expert_does(noise_policy):
    # LeRobot's init leaves the gates near zero, where a tiny expert trained from scratch stayed (10-16% on
    # PickColor against 39-43% with them open): the tiny folder opens them, LeRobot's init is kept for loading.
    expert = noise_policy.model.model.dit
    for dense in (m for m in expert.modules() if getattr(m, "adarms", False)):
        width = dense.out_features // 3
        assert not dense.weight.any() and not dense.bias[:2 * width].any() and (dense.bias[2 * width:] == 1).all()
    gemma = GemmaModel(expert.config).eval()
    missing, unexpected = gemma.load_state_dict(expert.state_dict(), strict=False)
    assert all(k.endswith("norm.weight") for k in missing) and all(".dense." in k for k in unexpected)
    with torch.no_grad():
        for name in missing:
            gemma.get_parameter(name).zero_()  # Gemma's norm scales x by (1 + weight)
        x = torch.randn(2, 5, expert.config.hidden_size)
        cond = torch.randn(2, expert.config.hidden_size)  # any time: open gates ignore it until dense learns
        ours = expert(inputs_embeds=x, adarms_cond=cond).last_hidden_state
        assert torch.allclose(ours, gemma(inputs_embeds=x).last_hidden_state, atol=1e-5)


def test_the_state_is_discretised_into_the_prompt_as_lerobot_writes_it(noise_policy):
    bins = discretize(np.array([-1.5, -1.0, -0.995, 0.0, 0.999, 1.0, 2.0], dtype=np.float32))
    assert bins.tolist() == [-1, 0, 0, 128, 255, 255, 255]
    assert prompt_text(" pick_up the\ncube ", np.array([3, 250])) == "Task: pick up the cube, State: 3 250;\nAction: "
    policy = noise_policy
    obs = observations(2)
    ids = policy.forward_inputs(obs)["input_ids"]
    text = policy.tokenizer.decode(ids[0, policy.inputs.tokens_per_image * 2:], skip_special_tokens=True)
    state = normalize(torch.as_tensor(obs["states"][0]), "quantiles", policy.state_lo, policy.state_hi).numpy()
    assert text.startswith(f"Task: pick up the red cube, State: {' '.join(map(str, discretize(state)))};")
    moved = dict(obs, states=obs["states"] + 0.5)
    assert not torch.equal(policy.forward_inputs(moved)["input_ids"], ids)  # the state changes the prompt


def test_quantile_normalisation_is_lerobots_and_inverts():
    lo, hi = torch.tensor([0.0, -2.0, 1.0]), torch.tensor([4.0, 2.0, 1.0])
    x = torch.tensor([[1.0, 0.0, 1.0]])
    y = normalize(x, "quantiles", lo, hi)
    assert torch.allclose(y[0, :2], torch.tensor([-0.5, 0.0])) and torch.isfinite(y).all()  # zero range: eps
    assert torch.allclose(unnormalize(y, "quantiles", lo, hi), x)
    assert torch.allclose(unnormalize(normalize(x, "mean_std", lo, hi + 1), "mean_std", lo, hi + 1), x)


def test_gradients_reach_the_vlm_and_the_adarms_expert(noise_policy):
    policy = noise_policy
    out = policy.act(observations(2))
    policy.zero_grad()
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    (logprobs.sum() + values.sum()).backward()
    named = dict(policy.named_parameters())
    for name in ("model.model.vlm.language_model.layers.0.self_attn.q_proj.weight",
                 "model.model.dit.layers.0.input_layernorm.dense.weight", "model.model.dit.norm.dense.weight",
                 "model.embed_action_time.action_in_proj.weight"):
        assert named[name].grad is not None and named[name].grad.abs().sum() > 0, name
    # The dense layers start at zero (LeRobot's init): time reaches the expert once they have moved.
    assert named["model.embed_action_time.time_mlp_in.weight"].grad.abs().sum() == 0
    policy.zero_grad()


def test_sft_is_pi0s_flow_loss_masked_and_learns(noise_policy):
    policy = noise_policy
    out = policy.act(observations(4))
    executed = torch.tensor([[True, True, True], [True, True, False], [True, False, False], [True, True, True]])
    other = out.actions.clone()
    other[1, 2] += 3.0
    losses = []
    for actions in (out.actions, other):
        torch.manual_seed(5)
        losses.append(policy.supervised_loss(out.forward_inputs, actions, executed))
    assert torch.allclose(losses[0], losses[1])
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-3)
    for _ in range(15):
        torch.manual_seed(5)
        loss = policy.supervised_loss(out.forward_inputs, out.actions, executed)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(loss.detach()) < float(losses[0].detach())


def test_sft_fits_quantiles_and_a_checkpoint_reloads_to_the_same_chunks(tmp_path):
    policy = make()
    states, actions = torch.randn(200, 7) * 3 + 1, torch.randn(50, 3, 4) * 0.2 + 0.5
    policy.fit_statistics([({"states": states}, actions, torch.ones(50, 3, dtype=torch.bool))])
    assert policy.stats_source == "demonstrations" and policy.norm_mode == "quantiles"
    assert torch.allclose(policy.state_lo, torch.quantile(states.double(), 0.01, dim=0).float())
    with torch.no_grad():
        policy.value_head[0].bias.add_(0.5)
    policy.save_pretrained(tmp_path / "policy")
    assert json.loads((tmp_path / "policy" / "norm_stats.json").read_text())["mode"] == "quantiles"
    assert json.loads((tmp_path / "policy" / "config.json").read_text())["model_type"] == "pi05"
    fresh = make()
    fresh.load_pretrained(tmp_path / "policy")
    chunks = []
    for p in (policy, fresh):
        torch.manual_seed(9)
        out = p.act(observations(3), deterministic=True)
        chunks.append((out.actions, out.values))
    assert torch.equal(chunks[0][0], chunks[1][0]) and torch.equal(chunks[0][1], chunks[1][1])
    # The saved folder is itself a π0.5 folder: policy.model_path takes it, statistics and all.
    again = make(model_path=str(tmp_path / "policy"))
    assert torch.equal(again.action_hi, policy.action_hi)


def test_policy_normalization_mean_std_survives_the_bounds_stand_in_and_sft_fits_mean_std(tmp_path):
    # The env-bounds stand-in once came back as quantiles and reset the mode, so SFT fitted q01/q99 although
    # policy.normalization said mean_std.
    spec = dataclasses.replace(SPEC, action_low=(-2.0, 0.0, 1.0, -1.0), action_high=(0.0, 4.0, 2.0, 1.0))
    policy = make(spec, normalization="mean_std")
    assert policy.norm_mode == "mean_std" and policy.stats_source == "env bounds"
    bounds = torch.tensor([spec.action_low, spec.action_high], dtype=torch.float32)[:, None]  # [2, 1, A]
    assert torch.allclose(policy.model_actions(bounds)[:, 0, :4], torch.tensor([[-1.0], [1.0]]).expand(2, 4),
                          atol=1e-6)
    actions = torch.randn(50, 3, 4) * 0.2 + 0.5
    policy.fit_statistics([({"states": torch.randn(200, 7)}, actions, torch.ones(50, 3, dtype=torch.bool))])
    assert policy.norm_mode == "mean_std" and policy.stats_source == "demonstrations"
    flat = actions.reshape(-1, 4).double()
    assert torch.allclose(policy.action_lo, flat.mean(0).float()) and \
        torch.allclose(policy.action_hi, flat.std(0, correction=0).float())
    policy.save_pretrained(tmp_path / "policy")
    fresh = make(spec)  # as RL's recipe opens the SFT checkpoint: no policy.normalization, the checkpoint's mode
    fresh.load_pretrained(tmp_path / "policy")
    assert fresh.norm_mode == "mean_std" and torch.equal(fresh.action_hi, policy.action_hi)

def test_lora_trains_adapters_and_projections_only_and_reloads(tmp_path):
    policy = make(lora_rank=4, flow_logprob="sde")
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert any("lora_A" in n and ".dit." in n for n in trainable)
    assert any("time_mlp_in" in n for n in trainable) and "value_head.0.weight" in trainable
    assert not any("vision_tower" in n for n in trainable)
    assert not any("lora" not in n and ".layers." in n for n in policy.trainable_state())
    assert not any(".dense." in n for n in trainable)  # the adaRMS layers stay fixed, as under LeRobot's and openpi's
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.add_(0.01)
    policy.save_pretrained(tmp_path / "policy")
    assert (tmp_path / "policy" / "adapter" / "adapter_config.json").is_file()
    fresh = make(lora_rank=4, flow_logprob="sde")
    fresh.load_pretrained(tmp_path / "policy")
    for p in (policy, fresh):
        torch.manual_seed(4)
        p.last = p.act(observations(2), deterministic=True).actions
    assert torch.equal(policy.last, fresh.last)


def test_fsdp_units_are_every_transformer_layer_including_the_adarms_ones(noise_policy):
    from embodied.policies.pi05.model import PI05DecoderLayer

    units = noise_policy.fsdp_units()
    assert sum(isinstance(u, PI05DecoderLayer) for u in units) == len(noise_policy.model.model.dit.layers) == 4
    assert len(units) == 4 + 4 + 2  # expert, language model, SigLIP


def test_bfloat16_acts_replays_and_learns():
    policy = make(dtype="bfloat16", flow_logprob="noise")
    assert policy.model.model.dit.layers[0].input_layernorm.dense.weight.dtype == torch.bfloat16
    torch.manual_seed(0)
    out = policy.act(observations(3))
    assert out.actions.dtype == torch.float32 and torch.isfinite(out.actions).all()
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    assert (logprobs - out.logprobs).abs().max() < 1e-2 * out.logprobs.abs().max().clamp_min(1.0)
    loss = policy.supervised_loss(out.forward_inputs, out.actions, torch.ones(3, 3, dtype=torch.bool))
    (loss + logprobs.sum() + values.sum()).backward()
    assert torch.isfinite(loss) and policy.model.action_out_proj.weight.grad is not None


def test_dsrl_steers_the_executed_noise(noise_policy, monkeypatch):
    frozen = noise_policy
    obs = observations(2)
    noise = torch.randn(2, 3, 4)
    full = torch.zeros(2, frozen.chunk_size, frozen.max_action_dim)
    full[:, :3, :4] = noise
    monkeypatch.setattr(torch, "randn", lambda *args, **kwargs: full.clone())
    own = frozen.act(obs, deterministic=True)
    monkeypatch.undo()
    steering = frozen.steer(obs)
    assert torch.allclose(steering.decode(noise), own.actions, atol=1e-6)
    assert steering.features.shape == (2, frozen.flow_feature_size())


# -- bad input -------------------------------------------------------------------------------------


def folder(tmp_path: Path, name: str, config: dict) -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_a_pi0_folder_given_as_pi05_and_the_reverse_are_named(tmp_path):
    from embodied.policies.pi0.configuration import PI0PolicyConfig

    pi0 = folder(tmp_path, "pi0", {"type": "pi0", "chunk_size": 10})
    assert any("is a π0, not a π0.5: its config.json says type='pi0' (use policy.type: pi0)" in p and str(pi0) in p
               for p in PI05PolicyConfig(model_path=str(pi0)).validate())
    pi05 = folder(tmp_path, "pi05", {"type": "pi05", "chunk_size": 10})
    assert any("is a π0.5, not a π0: its config.json says type='pi05' (use policy.type: pi05)" in p and str(pi05) in p
               for p in PI0PolicyConfig(model_path=str(pi05)).validate())
    from embodied.policies.pi05.pretrained import load_pi05

    with pytest.raises(ValueError, match="is a π0, not a π0.5"):  # also when the config check was skipped
        load_pi05(pi0, torch.float32, None)
    act = folder(tmp_path, "act", {"type": "act"})
    assert any("is not a π0.5: its config.json says type='act'" in p for p in
               PI05PolicyConfig(model_path=str(act)).validate())


def test_statistics_missing_for_the_folders_mode_are_named(tmp_path):
    from safetensors.torch import save_file

    from embodied.policies.pi05.processing import folder_stats

    save_file({"observation.state.mean": torch.zeros(7), "observation.state.std": torch.ones(7),
               "action.mean": torch.zeros(4), "action.std": torch.ones(4)},
              str(tmp_path / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    assert folder_stats(tmp_path, "mean_std").action_hi == [1.0] * 4
    with pytest.raises(ValueError, match=f"policy.model_path '{tmp_path}': its normalization_mapping asks for "
                                         "quantiles statistics but .* lacks \\['observation.state.q01'"):
        folder_stats(tmp_path, "quantiles")


def test_a_tokenizer_larger_than_the_vocabulary_is_named(tmp_path):
    from transformers import AutoTokenizer

    from embodied.policies.pi05.pretrained import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("tiny:pi05-tiny"))
    tokenizer.add_tokens([f"<extra{i}>" for i in range(50)])
    tokenizer.save_pretrained(tmp_path / "tok")
    with pytest.raises(ValueError, match=f"policy.tokenizer_path: the tokenizer of '{tmp_path / 'tok'}' has 450 ids, "
                                         "more than the vocabulary of 400"):
        make(tokenizer_path=str(tmp_path / "tok"))


def test_a_state_longer_than_max_state_dim_is_named_with_the_folder():
    with pytest.raises(ValueError, match="env state dimension 33 exceeds max_state_dim 32 of policy.model_path "
                                         "'tiny:pi05-tiny'"):
        make(PolicySpec(33, (64, 64, 3), 4, (-1.0,) * 4, (1.0,) * 4))


def test_bad_settings_are_named_before_any_worker(tmp_path):
    cfg = CONFIGS / "pick_color_pi05tiny_ppo.yaml"
    for override, message in (("policy.model_path=tiny:pi05-huge", "unknown tiny π0.5 'pi05-huge'"),
                              ("policy.normalization=minmax", "policy.normalization")):
        with pytest.raises(ConfigError, match=message):
            load_config(cfg, [override, f"experiment.output_dir={tmp_path}"])


def test_a_paligemma_folder_seeds_the_vlm_and_a_wrong_one_is_named(tmp_path):
    """π0.5's VLM is π0's PaliGemma: a tokens-head SFT's backbone seeds it as it seeds π0's (PickColor's recipe)."""
    from embodied.policies.pi05.pretrained import resolve_model_path
    from embodied.policies.vla.tiny import resolve_model_path as vla_path

    paligemma = vla_path("tiny:paligemma-tiny")  # the same tokenizer, 256 action bins more
    policy = make(init_vlm_from=str(paligemma))
    assert_vlm_seeded_from(policy, paligemma)
    unseeded = make()
    assert not torch.equal(policy.model.model.vlm.get_input_embeddings().weight,
                           unseeded.model.model.vlm.get_input_embeddings().weight)
    expert, expert_unseeded = policy.model.model.dit.state_dict(), unseeded.model.model.dit.state_dict()
    assert all(torch.equal(expert[k], expert_unseeded[k]) for k in expert)  # the adaRMS expert is left as built
    assert not [p for p in PI05PolicyConfig(init_vlm_from=str(paligemma)).validate() if "init_vlm_from" in p]
    problems = PI05PolicyConfig(init_vlm_from=str(resolve_model_path("tiny:pi05-tiny"))).validate()
    assert any("policy.init_vlm_from:" in p and "is not a PaliGemma save_pretrained folder" in p for p in problems)
