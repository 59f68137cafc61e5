"""π0 as a policy (policy.type: pi0) on the tiny config: acting and exact replay, log-probs through the shared
Flow-SDE / Flow-Noise strategies with padding left out, π0's SFT loss, LoRA, checkpoints that transformers opens
alone, LeRobot folders, normalization statistics and the bad input named before anything trains."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.config import ConfigError, load_config
from embodied.policies.flow_logprob import CHAIN, step_distribution
from embodied.policies.pi0.configuration import PI0PolicyConfig
from embodied.policies.pi0.modeling import PI0Policy
from embodied.policies.pi0.pretrained import resolve_model_path
from embodied.policy.base import PolicySpec

SPEC = PolicySpec(state_dim=7, image_shape=(64, 64, 3), action_dim=4, action_low=(-1.0,) * 4, action_high=(1.0,) * 4,
                  wrist_image_shape=(48, 64, 3))
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def make(spec: PolicySpec = SPEC, **fields) -> PI0Policy:
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="no normalization statistics") if "norm_stats" not in fields else _nothing():
        return PI0Policy(PI0PolicyConfig(**({"action_chunk": 3} | fields)), spec)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def observations(batch: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    colours = ["red", "green", "blue", "yellow"]
    return {"main_images": rng.integers(0, 255, (batch, 64, 64, 3), dtype=np.uint8),
            "wrist_images": rng.integers(0, 255, (batch, 48, 64, 3), dtype=np.uint8),
            "states": rng.standard_normal((batch, 7)).astype(np.float32),
            "task_descriptions": [f"pick up the {colours[i % 4]} cube" for i in range(batch)]}


@pytest.fixture(scope="module")
def noise_policy() -> PI0Policy:
    return make(flow_logprob="noise")


def test_greedy_loop_equals_transformers_sample_actions(noise_policy):
    policy = noise_policy
    torch.manual_seed(3)
    out = policy.act(observations(4), deterministic=True)
    chain = out.forward_inputs[CHAIN]
    reference = policy.model.sample_actions(state=policy._state(out.forward_inputs), noise=chain[:, 0],
                                            num_steps=policy.steps, **policy._prompt_inputs(out.forward_inputs))
    assert (reference - chain[:, -1]).abs().max() <= 1e-5
    assert torch.allclose(out.actions, policy.env_actions(reference), atol=1e-5)
    assert out.actions.shape == (4, 3, 4) and out.logprobs.shape == (4, 3) and out.values.shape == (4,)


@pytest.mark.parametrize("mode", ["sde", "noise"])
def test_evaluate_replays_act_in_one_pass_so_the_first_ppo_ratio_is_one(mode):
    policy = make(flow_logprob=mode)
    torch.manual_seed(1)
    out = policy.act(observations(6))
    logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
    assert (logprobs - out.logprobs).abs().max() <= 1e-5  # exp(new - old) = 1 within 1e-5
    assert torch.allclose(values, out.values, atol=1e-6)
    assert logprobs.shape == entropy.shape == (6, 3)


def test_only_executed_positions_and_env_dimensions_are_stochastic_and_scored(noise_policy):
    policy = noise_policy
    torch.manual_seed(2)
    out = policy.act(observations(3))
    chain = out.forward_inputs[CHAIN]
    prefix = policy._prefix(out.forward_inputs)
    velocity = policy._velocity(prefix)
    times = torch.linspace(1, 0, policy.steps + 1)
    for k in range(policy.steps):
        x, t = chain[:, k], times[k].expand(3)
        v, features = velocity(x, t, 1)
        ode, _ = step_distribution(policy.logprob, x, v, features, t, 1 / policy.steps, None, None)
        moved = (chain[:, k + 1] - ode).abs() > 1e-5
        assert moved[:, :3, :4].any()  # the executed entries draw noise
        assert not moved[:, :, 4:].any() and not moved[:, 3:, :].any()  # padded dims and the 4th position: the ODE
    # Changing a padded dimension of the recorded action changes nothing scored.
    changed = dict(out.forward_inputs)
    changed[CHAIN] = chain.clone()
    changed[CHAIN][:, -1, :, 10] += 5.0
    assert torch.allclose(policy.evaluate(changed, out.actions)[0], out.logprobs, atol=1e-5)


def test_gradients_reach_vision_tower_projector_vlm_and_expert_through_the_cache(noise_policy):
    policy = noise_policy
    out = policy.act(observations(2))
    policy.zero_grad()
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    (logprobs.sum() + values.sum()).backward()
    reached = {n.split(".")[2] if n.startswith("model.model.") else n.split(".")[0]
               for n, p in policy.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert {"vlm", "dit", "value_head", "noise_std"} <= reached
    vlm = policy.model.model.vlm
    for part in ("vision_tower.", "multi_modal_projector.", "language_model.layers.0."):
        grads = [p.grad for n, p in vlm.named_parameters() if n.startswith(part)]
        assert grads and all(g is not None and g.abs().sum() > 0 for g in grads), part
    assert not policy.model.model.dit.embed_tokens.weight.requires_grad  # π0 never reads it
    policy.zero_grad()


def test_sft_is_pi0s_flow_matching_loss_masked_past_the_episode_and_the_env_dimensions(noise_policy):
    policy = noise_policy
    out = policy.act(observations(4))
    executed = torch.tensor([[True, True, True], [True, True, False], [True, False, False], [True, True, True]])
    other = out.actions.clone()
    other[1, 2] += 3.0  # not executed
    other[2, 1:] -= 2.0
    losses = []
    for actions in (out.actions, other):
        torch.manual_seed(5)
        losses.append(policy.supervised_loss(out.forward_inputs, actions, executed))
    assert torch.allclose(losses[0], losses[1])
    # The same loss the model computes itself with noise and time fixed, restricted to the scored entries.
    torch.manual_seed(6)
    noise = torch.randn(4, policy.chunk_size, policy.max_action_dim)
    target = policy.model_actions(out.actions)
    t = torch.full((4,), 0.3)
    full = policy.model(state=policy._state(out.forward_inputs), noise=noise, timestep=t, actions=target,
                        **policy._prompt_inputs(out.forward_inputs))
    assert torch.allclose(full.loss, ((full.logits - (noise - target)) ** 2).mean())
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-3)
    before = float(losses[0])
    for _ in range(30):
        torch.manual_seed(5)
        loss = policy.supervised_loss(out.forward_inputs, out.actions, executed)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(loss) < before


def test_statistics_come_from_the_folder_else_the_env_bounds_and_sft_fits_them(tmp_path):
    policy = make()
    assert policy.stats_source == "env bounds"
    assert torch.allclose(policy.env_actions(torch.ones(1, 4, 32)), torch.ones(1, 3, 4))  # +1 normalized = high
    states = torch.randn(20, 7) * 3 + 1
    actions = torch.randn(5, 3, 4) * 0.2 + 0.5
    executed = torch.ones(5, 3, dtype=torch.bool)
    policy.fit_statistics([({"states": states}, actions, executed)])
    assert policy.stats_source == "demonstrations"
    assert torch.allclose(policy.state_mean, states.mean(0), atol=1e-5)
    assert torch.allclose(policy.action_std, actions.reshape(-1, 4).std(0, correction=0), atol=1e-5)
    # Statistics saved with a checkpoint come back, and a folder's are kept through SFT.
    policy.save_pretrained(tmp_path / "policy")
    again = make(norm_stats=str(tmp_path / "policy" / "norm_stats.json"))
    assert torch.equal(again.action_mean, policy.action_mean)
    again.fit_statistics([({"states": states * 0}, actions * 0, executed)])
    assert torch.equal(again.action_mean, policy.action_mean)


def test_a_policy_started_from_a_checkpoint_takes_its_statistics_without_the_bounds_warning(tmp_path, recwarn):
    trained = make()
    executed = torch.ones(5, 3, dtype=torch.bool)
    trained.fit_statistics([({"states": torch.randn(20, 7) * 3 + 1}, torch.randn(5, 3, 4) * 0.2 + 0.5, executed)])
    trained.save_pretrained(tmp_path / "policy")
    recwarn.clear()
    # policy.init_from: the checkpoint's statistics replace the bounds before any use, so nothing warns of them.
    started = PI0Policy(PI0PolicyConfig(action_chunk=3, init_from=str(tmp_path)), SPEC)
    assert not [w for w in recwarn if "normalization statistics" in str(w.message)]
    started.load_pretrained(tmp_path / "policy")
    assert torch.equal(started.action_mean, trained.action_mean) and torch.equal(started.state_std, trained.state_std)


def test_statistics_of_other_dimensions_than_the_env_are_refused_naming_both(tmp_path):
    stats = {"state_mean": [0.0] * 7, "state_std": [1.0] * 7, "actions_mean": [0.0] * 6, "actions_std": [1.0] * 6}
    (tmp_path / "processor_config.json").write_text(json.dumps(stats))  # PI0Processor's format
    with pytest.raises(ValueError, match="6 action dimensions, the env's action space has 4"):
        make(norm_stats=str(tmp_path / "processor_config.json"))


def test_lerobot_normalizer_statistics_are_read(tmp_path):
    from safetensors.torch import save_file

    from embodied.policies.pi0.processing import folder_stats

    save_file({"observation.state.mean": torch.zeros(7), "observation.state.std": torch.ones(7) * 2,
               "action.mean": torch.ones(4), "action.std": torch.ones(4) * 3},
              str(tmp_path / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    stats = folder_stats(tmp_path)
    assert stats.state_std == [2.0] * 7 and stats.action_mean == [1.0] * 4 and "LeRobot" in stats.source


def test_a_checkpoint_opens_with_transformers_alone_and_reloads_to_the_same_chunks(tmp_path, noise_policy):
    from transformers import PI0ForConditionalGeneration

    policy = noise_policy
    with torch.no_grad():
        policy.value_head[0].bias.add_(0.5)
    policy.save_pretrained(tmp_path / "policy")
    alone = PI0ForConditionalGeneration.from_pretrained(tmp_path / "policy")
    for (name, a), b in zip(policy.model.state_dict().items(), alone.state_dict().values()):
        assert torch.equal(a, b), name
    fresh = make(flow_logprob="noise")
    fresh.load_pretrained(tmp_path / "policy")
    obs = observations(3)
    chunks = []
    for p in (policy, fresh):
        torch.manual_seed(9)
        out = p.act(obs, deterministic=True)
        chunks.append((out.actions, out.values))
    assert torch.equal(chunks[0][0], chunks[1][0]) and torch.equal(chunks[0][1], chunks[1][1])


def test_a_saved_checkpoint_acts_the_same_under_transformers_alone_from_its_processor_settings(tmp_path,
                                                                                               noise_policy):
    """The other direction a user takes: our folder, opened by transformers' PI0ForConditionalGeneration and fed by
    hand from what processor_config.json says (PI0Processor's statistics, our prompt, cameras, resize and executed
    actions), gives our chunk from the same noise, with none of our code."""
    import torch.nn.functional as F
    from transformers import AutoTokenizer, PI0ForConditionalGeneration

    noise_policy.save_pretrained(tmp_path / "policy")
    folder = tmp_path / "policy"
    settings = json.loads((folder / "processor_config.json").read_text())
    ours = settings["embodied"]
    model = PI0ForConditionalGeneration.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vision = model.config.vlm_config.vision_config
    side = vision.image_size
    obs = observations(3, seed=4)
    obs["task_descriptions"][1] = "put_the cube  in the bowl\n"

    def pixels(images: np.ndarray) -> torch.Tensor:  # LeRobot's resize_with_pad_torch, as the settings say
        x = torch.as_tensor(images).permute(0, 3, 1, 2).float() / 255
        h, w = x.shape[-2:]
        ratio = max(w / side, h / side)
        nh, nw = int(h / ratio), int(w / ratio)
        x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False).clamp(0, 1)
        top, left = (side - nh) // 2, (side - nw) // 2
        return F.pad(x, (left, side - nw - left, top, side - nh - top)) * 2 - 1

    bos = tokenizer.convert_tokens_to_ids("<bos>")
    images = [model.config.vlm_config.image_token_id] * ((side // vision.patch_size) ** 2 * len(ours["cameras"]))
    rows = []
    for text in obs["task_descriptions"]:
        ids = tokenizer(text if text.endswith("\n") else text + "\n")["input_ids"]
        rows.append(images + ([bos] + ids if ids[0] != bos else ids)[:ours["tokenizer_max_length"]])
    length = len(images) + ours["tokenizer_max_length"]
    input_ids = torch.tensor([r + [tokenizer.pad_token_id] * (length - len(r)) for r in rows])
    attention_mask = torch.tensor([[1] * len(r) + [0] * (length - len(r)) for r in rows])
    state = (torch.as_tensor(obs["states"]) - torch.tensor(settings["state_mean"])) / \
        (torch.tensor(settings["state_std"]) + 1e-8)
    state = F.pad(state, (0, settings["max_state_dim"] - state.shape[1]))
    noise = torch.randn(3, settings["chunk_size"], model.config.max_action_dim, generator=torch.Generator().manual_seed(5))
    chunk = model.sample_actions(state=state, input_ids=input_ids, noise=noise, attention_mask=attention_mask,
                                 pixel_values=torch.stack([pixels(obs[c]) for c in ours["cameras"]], 1),
                                 pixel_attention_mask=torch.ones(3, len(ours["cameras"]), dtype=torch.bool),
                                 num_steps=ours["num_inference_steps"])
    action_dim = len(settings["actions_mean"])
    alone = chunk[:, :ours["n_action_steps"], :action_dim] * (torch.tensor(settings["actions_std"]) + 1e-8) + \
        torch.tensor(settings["actions_mean"])
    mine = noise_policy.act(obs, deterministic=True, noise=noise).actions
    assert ours["cameras"] == ["main_images", "wrist_images"] and alone.shape == mine.shape == (3, 3, 4)
    assert (alone - mine).abs().max() <= 1e-5


def test_lora_trains_adapters_and_projections_and_saves_a_peft_adapter(tmp_path):
    from peft import PeftModel
    from transformers import PI0ForConditionalGeneration

    policy = make(lora_rank=4, flow_logprob="sde")
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert any("lora_A" in n and ".vlm.language_model." in n for n in trainable)
    assert any("lora_A" in n and ".dit." in n for n in trainable)
    assert not any("vision_tower" in n for n in trainable)  # SigLIP has q_proj too; the targets leave it
    assert any("action_out_proj" in n for n in trainable) and "value_head.0.weight" in trainable
    assert set(policy.trainable_state()) >= {n for n in trainable}
    assert not any("lora" not in n and ".layers." in n for n in policy.trainable_state())
    out = policy.act(observations(2))
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    (logprobs.sum() + values.sum()).backward()
    assert all(p.grad is not None for n, p in policy.named_parameters() if p.requires_grad and "lora_B" in n)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n or "action_out_proj" in n:
                p.add_(0.01)
    policy.save_pretrained(tmp_path / "policy")
    assert (tmp_path / "policy" / "adapter" / "adapter_config.json").is_file()
    base = PI0ForConditionalGeneration.from_pretrained(resolve_model_path("tiny:pi0-tiny"))
    alone = PeftModel.from_pretrained(base, tmp_path / "policy" / "adapter").merge_and_unload()
    torch.manual_seed(4)
    greedy = policy.act(observations(2), deterministic=True)
    chain = greedy.forward_inputs[CHAIN]
    reference = alone.sample_actions(state=policy._state(greedy.forward_inputs), noise=chain[:, 0],
                                     num_steps=policy.steps, **policy._prompt_inputs(greedy.forward_inputs))
    assert (reference - chain[:, -1]).abs().max() <= 1e-5
    fresh = make(lora_rank=4, flow_logprob="sde")
    fresh.load_pretrained(tmp_path / "policy")
    torch.manual_seed(4)
    assert torch.equal(fresh.act(observations(2), deterministic=True).actions, greedy.actions)


def test_vision_tower_checkpointing_gives_the_same_gradients():
    grads = []
    for flag in (False, True):
        policy = make(gradient_checkpointing=flag)
        policy.train()
        torch.manual_seed(0)
        out = policy.act(observations(2))
        logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
        (logprobs.sum() + values.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None})
        if flag:
            assert "activation checkpointing: the vision tower's 2 layers only" in policy.describe()
            assert policy._checkpointed and all(layer.training for layer in policy._checkpointed)
            assert not any(m.gradient_checkpointing for m in policy.model.model.dit.modules()
                           if hasattr(m, "gradient_checkpointing") and m not in policy._checkpointed)
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-4), name


def assert_vlm_seeded_from(policy, paligemma: Path) -> dict[str, torch.Tensor]:
    """Every VLM tensor equals the PaliGemma folder's (the shared vocabulary rows); returns the folder's tensors."""
    from transformers import PaliGemmaForConditionalGeneration

    source = PaliGemmaForConditionalGeneration.from_pretrained(paligemma).model.state_dict()
    for key, value in policy.model.model.vlm.state_dict().items():
        rows = min(len(value), len(source[key])) if value.dim() else None
        assert torch.equal(value[:rows], source[key][:rows]), key
    return source


def test_a_paligemma_folder_seeds_the_vlm_and_a_wrong_one_is_named(tmp_path):
    from embodied.policies.vla.tiny import resolve_model_path as vla_path

    paligemma = vla_path("tiny:paligemma-tiny")  # the tokens head's backbone: the same tokenizer, 256 bins more
    policy = make(init_vlm_from=str(paligemma))
    source = assert_vlm_seeded_from(policy, paligemma)
    assert len(source["language_model.embed_tokens.weight"]) > len(policy.model.model.vlm.get_input_embeddings().weight)
    with pytest.raises(ConfigError, match="policy.init_vlm_from: .* is not a PaliGemma save_pretrained folder"):
        pick_color(f"policy.init_vlm_from={resolve_model_path('tiny:pi0-tiny')}", tmp_path=tmp_path)


def test_describe_prints_the_vlm_expert_and_trainable_split(noise_policy):
    line = noise_policy.describe()
    assert "VLM" in line and "action expert" in line and "trainable" in line and "unused embed_tokens" in line


# -- bad input -------------------------------------------------------------------------------------


def pick_color(*overrides: str, tmp_path: Path):
    return load_config(CONFIGS / "pick_color_pi0tiny_ppo.yaml", [*overrides, f"experiment.output_dir={tmp_path}"])


@pytest.mark.parametrize("override,message", [
    ("policy.flow_steps=0", "policy.flow_steps: must be >= 1"),
    ("policy.flow_logprob=ode", "policy.flow_logprob"),
    ("policy.model_path=tiny:pi0-huge", "unknown tiny π0 'pi0-huge'"),
    ("policy.max_cameras=0", "policy.max_cameras: must be >= 1"),
])
def test_bad_settings_are_named_before_any_worker(override, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        pick_color(override, tmp_path=tmp_path)


def test_a_model_path_that_is_not_a_pi0_is_refused(tmp_path):
    folder = tmp_path / "paligemma"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "paligemma"}))
    with pytest.raises(ConfigError, match="is not a π0: its config.json says model_type='paligemma'"):
        pick_color(f"policy.model_path={folder}", tmp_path=tmp_path)
    (folder / "config.json").write_text(json.dumps({"model_type": "pi0", "chunk_size": 4}))
    with pytest.raises(ConfigError, match="policy.action_chunk: 8 executed actions, but the checkpoint predicts "
                                          "chunks of 4"):
        pick_color(f"policy.model_path={folder}", "policy.action_chunk=8", tmp_path=tmp_path)


@pytest.mark.parametrize("spec,fields,message", [
    (PolicySpec(7, (64, 64, 3), 40, (-1.0,) * 40, (1.0,) * 40), {}, "env action dimension 40 exceeds"),
    (PolicySpec(33, (64, 64, 3), 4, (-1.0,) * 4, (1.0,) * 4), {}, "env state dimension 33 exceeds"),
    (SPEC, {"action_chunk": 5}, "policy.action_chunk: 5 executed actions, but"),
    (SPEC, {"max_cameras": 1}, "policy.max_cameras: the env gives 2 cameras"),
])
def test_sizes_beyond_the_checkpoint_are_refused_naming_the_field(spec, fields, message):
    with pytest.raises(ValueError, match=message):
        PI0Policy(PI0PolicyConfig(**({"action_chunk": 3} | fields)), spec)


@pytest.mark.parametrize("fields,overrides,message", [
    ({"max_action_dim": 2}, [], "env action dimension 4 exceeds max_action_dim 2 of policy.model_path"),
    ({"max_state_dim": 3}, ["policy.use_states=true", "env.obs_mode=state+rgb"],
     "env state dimension \\d+ exceeds .*max_state_dim 3"),
    ({}, ["policy.max_cameras=1"], "policy.max_cameras: the env gives 2 cameras"),
])
def test_the_env_is_checked_against_the_checkpoint_before_any_worker_or_weights(fields, overrides, message,
                                                                                  tmp_path, monkeypatch):
    """train, sft and eval read the checkpoint's config.json against one env's spaces before starting anything:
    the folder holds no weights, so reaching the model would fail otherwise."""
    from embodied.evaluation import run as evaluation
    from embodied.runs import train as runner
    from embodied.runs import sft

    folder = tmp_path / "pi0"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "pi0", "chunk_size": 4} | fields))
    cfg = pick_color(f"policy.model_path={folder}", "env.preflight=false", *overrides, tmp_path=tmp_path)
    monkeypatch.setattr(runner, "Workers", None)  # starting any worker would fail loudly
    with pytest.raises(ConfigError, match=f"(?s)policy.type=pi0 does not fit env.id 'PickColor-v0'.*{message}"):
        runner.check_before_start(cfg)
    monkeypatch.setattr(sft, "open_dataset", lambda cfg: None)
    monkeypatch.setattr(sft, "make_run_dir", None)
    with pytest.raises(ConfigError, match=f"(?s)does not fit eval_env.id 'PickColor-v0'.*{message}"):
        sft.sft(cfg)
    with pytest.raises(ConfigError, match=message):
        evaluation.evaluate_checkpoint(cfg, tmp_path / "nothing", 2, tmp_path / "eval")
    assert not list(tmp_path.glob("pick_color*")), "no run dir is made"


def test_statistics_of_other_sizes_than_the_env_are_named_before_any_worker(tmp_path):
    from embodied.runs.train import check_before_start

    stats = tmp_path / "norm_stats.json"
    stats.write_text(json.dumps({"state_mean": [], "state_std": [], "action_mean": [0.0] * 7,
                                 "action_std": [1.0] * 7, "source": "test"}))
    cfg = pick_color(f"policy.norm_stats={stats}", "env.preflight=false", tmp_path=tmp_path)
    with pytest.raises(ConfigError, match="policy.norm_stats: the normalization statistics .* have 7 action "
                                          "dimensions, the env's action space has 4"):
        check_before_start(cfg)


def test_bfloat16_acts_replays_and_learns():
    policy = make(dtype="bfloat16", flow_logprob="noise")
    assert policy.model.model.vlm.language_model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    torch.manual_seed(0)
    out = policy.act(observations(3))
    assert out.actions.dtype == torch.float32 and torch.isfinite(out.actions).all()
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    assert (logprobs - out.logprobs).abs().max() < 1e-2 * out.logprobs.abs().max().clamp_min(1.0)  # bf16 rounding
    loss = policy.supervised_loss(out.forward_inputs, out.actions, torch.ones(3, 3, dtype=torch.bool))
    (loss + logprobs.sum() + values.sum()).backward()
    assert torch.isfinite(loss)
    assert policy.model.action_out_proj.weight.grad is not None
