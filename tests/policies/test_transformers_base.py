"""The base of the transformers-backed policies (``policies/transformers_base/``): the shared fields are declared
once, a shared check is refused the same way for the VLA and π0, the shared machinery is not overridden, and a
new policy written as the package docstring shows (a model, a value head, two hooks) saves and loads its
checkpoint folder, LoRA or not, through the base alone; and folders the code before the base wrote
(``tests/policies/old_checkpoints/``, LoRA r=2, small heads) load and act as they did."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from embodied.policies.pi0.configuration import PI0PolicyConfig
from embodied.policies.pi0.modeling import PI0Policy
from embodied.policies.transformers_base.configuration import PER_POLICY_DEFAULTS, TransformersPolicyConfig
from embodied.policies.transformers_base.folders import load_tokenizer
from embodied.policies.transformers_base.modeling import (ADAPTER_DIR, HEADS_FILE, POLICY_FILE, TransformersPolicy,
                                                          resolve_device)
from embodied.policies.vla.configuration import VLAConfig
from embodied.policies.vla.modeling import VLAPolicy
from embodied.policies.vla.tiny import resolve_model_path
from embodied.policy.base import PolicySpec

SUBCLASSES = [(VLAConfig, VLAPolicy), (PI0PolicyConfig, PI0Policy)]
SHARED = {f.name: f for f in dataclasses.fields(TransformersPolicyConfig)}
SPEC = PolicySpec(state_dim=3, image_shape=(64, 64, 3), action_dim=2, action_low=(-1.0,) * 2, action_high=(1.0,) * 2)


@pytest.mark.parametrize("config_class", [c for c, _ in SUBCLASSES])
def test_the_shared_fields_are_declared_once(config_class):
    """A subclass redeclares a shared field only to give it its own default (as every policy config does with
    ``type``), with the base's type; the rest it inherits."""
    own = config_class.__dict__.get("__annotations__", {})
    redeclared = {name for name in own if name in SHARED}
    assert redeclared <= set(PER_POLICY_DEFAULTS), redeclared - set(PER_POLICY_DEFAULTS)
    for name in redeclared - {"type"}:
        assert own[name] == TransformersPolicyConfig.__annotations__[name], name
    fields = {f.name for f in dataclasses.fields(config_class)}
    assert set(SHARED) <= fields


def test_each_policy_keeps_its_defaults():
    vla, pi0 = VLAConfig(), PI0PolicyConfig()
    assert (vla.model_path, vla.use_states, vla.flow_logprob) == ("tiny:smolvlm-tiny", False, "sde")
    assert (pi0.model_path, pi0.use_states, pi0.flow_logprob) == ("tiny:pi0-tiny", True, "noise")
    for name in set(SHARED) - set(PER_POLICY_DEFAULTS) - {"action_chunk", "init_from"}:
        assert getattr(vla, name) == getattr(pi0, name) == SHARED[name].default, name


@pytest.mark.parametrize("fields,message", [
    ({"lora_rank": -1}, "policy.lora_rank: must be >= 0 (0: no LoRA), got -1"),
    ({"flow_noise_level": 0.0}, "policy.flow_noise_level: must be > 0 (a in sigma_t = a * sqrt(t / (1 - t))), got 0.0"),
    ({"flow_noise_std_min": 0.3}, "policy.flow_noise_std_min / flow_noise_std_max: need 0 < min <= max, got 0.3 > "
                                  "0.16"),
    ({"flow_noise_std_min": 0.0}, "policy.flow_noise_std_min: must be > 0, got 0.0"),
    ({"flow_logprob": "ode"}, "policy.flow_logprob: unknown mode 'ode'; known: sde, noise"),
    ({"device": "cuda"}, "policy.device: 'cuda' but torch sees no CUDA device here (use cpu or auto)"),
])
def test_a_shared_check_is_refused_the_same_way_for_vla_and_pi0(fields, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    vla = VLAConfig(action_head="flow", **fields).validate()
    pi0 = PI0PolicyConfig(**fields).validate()
    assert message in vla and message in pi0, (vla, pi0)


def test_an_unknown_tiny_model_is_named_with_the_policys_own_names():
    assert VLAConfig(model_path="tiny:nope").validate() == [
        "policy.model_path: unknown tiny backbone 'nope'; known: tiny:smolvlm-tiny, tiny:qwen2_5_vl-tiny, "
        "tiny:paligemma-tiny"]
    assert PI0PolicyConfig(model_path="tiny:nope").validate() == [
        "policy.model_path: unknown tiny π0 'nope'; known: tiny:pi0-tiny"]


def test_the_flow_fields_are_checked_only_where_there_is_a_flow():
    assert VLAConfig(flow_noise_level=0.0).validate() == []  # a tokens head draws no flow noise
    assert VLAConfig(action_head="flow", flow_noise_level=0.0).validate()


@pytest.mark.parametrize("policy_class", [p for _, p in SUBCLASSES])
def test_the_shared_machinery_is_written_once(policy_class):
    assert issubclass(policy_class, TransformersPolicy)
    for name in ("__init__", "save_pretrained", "load_pretrained", "fsdp_units", "train", "setup_training",
                 "_add_lora", "_enable_checkpointing", "_load_model_weights", "instructions", "uint8_images",
                 "flow_noise_shape"):
        assert name in TransformersPolicy.__dict__ and (name == "__init__" or name not in policy_class.__dict__), name


def test_cuda_without_cuda_is_refused_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="policy.device: 'cuda' but torch sees no CUDA device"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


# -- a new policy, written as the package docstring shows ----------------------------------------------


@dataclasses.dataclass
class ToyConfig(TransformersPolicyConfig):
    type: str = "toy"  # registered policy name
    model_path: str = "tiny:smolvlm-tiny"  # (TransformersPolicyConfig's field) default: the tiny SmolVLM

    tiny_names = ("smolvlm-tiny",)


class ToyPolicy(TransformersPolicy):
    """A value head over the mean of the instruction's token embeddings: just enough to be a policy."""

    def __init__(self, config: ToyConfig, spec: PolicySpec) -> None:
        from transformers import AutoModelForImageTextToText

        super().__init__(config, spec, resolve_model_path(config.model_path))
        self.tokenizer = load_tokenizer(self.model_dir)
        self.model = AutoModelForImageTextToText.from_pretrained(self.model_dir, dtype=self.dtype_)
        hidden = self.model.config.get_text_config().hidden_size
        self.value_head = self.make_value_head(hidden)
        self.setup_training()

    def lora_targets(self):
        return r".*text_model.*\.(q_proj|v_proj)", None

    def head_modules(self):
        return {"value_head": self.value_head}

    def forward_inputs(self, obs):
        ids = [self.tokenizer(text)["input_ids"][:4] for text in self.instructions(obs)]
        return {"input_ids": torch.tensor(ids), "main_images": self.uint8_images(obs["main_images"])}

    def value(self, obs):
        return self._value(self.forward_inputs(obs))

    def _value(self, inputs):
        embeds = self.model.get_input_embeddings()(inputs["input_ids"].to(self.device_))
        return self.value_head(embeds.float().mean(1)).squeeze(-1)

    def act(self, obs, deterministic=False):
        raise NotImplementedError

    def evaluate(self, forward_inputs, actions):
        raise NotImplementedError


def obs(batch: int = 2) -> dict:
    return {"main_images": np.zeros((batch, 64, 64, 3), np.uint8),
            "task_descriptions": ["pick up the red cube", "reach the red target"][:batch]}


def perturb(policy: nn.Module) -> None:
    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))


@pytest.mark.parametrize("lora", [0, 4])
def test_a_new_policy_saves_and_loads_its_folder_through_the_base(tmp_path, lora):
    torch.manual_seed(0)
    policy = ToyPolicy(ToyConfig(lora_rank=lora), SPEC)
    assert policy.fsdp_units() and not policy.model.training
    policy.train()
    assert policy.value_head.training and not policy.model.training  # dropout stays off
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    if lora:
        assert trainable and all("lora_" in n or n.startswith("value_head.") for n in trainable)
    perturb(policy)
    policy.save_pretrained(tmp_path / "policy")
    files = {p.name for p in (tmp_path / "policy").iterdir()}
    assert {HEADS_FILE, POLICY_FILE} <= files
    assert (ADAPTER_DIR in files) == bool(lora) and ("config.json" in files) == (not lora)
    meta = json.loads((tmp_path / "policy" / POLICY_FILE).read_text())
    assert meta["config"]["lora_rank"] == lora and meta["base_model"] == str(policy.model_dir)

    torch.manual_seed(1)
    fresh = ToyPolicy(ToyConfig(lora_rank=lora), SPEC)
    assert not torch.equal(fresh.value(obs()), policy.value(obs()))
    fresh.load_pretrained(tmp_path / "policy")
    ours, theirs = policy.trainable_state(), fresh.trainable_state()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert torch.equal(fresh.value(obs()), policy.value(obs()))


def test_a_folder_of_the_other_kind_is_refused_naming_what_it_holds(tmp_path):
    torch.manual_seed(0)
    ToyPolicy(ToyConfig(), SPEC).save_pretrained(tmp_path / "full")
    with pytest.raises(FileNotFoundError, match=r"has no LoRA adapter/ \(a fully trained model\?\) but "
                                                r"policy.lora_rank is 4"):
        ToyPolicy(ToyConfig(lora_rank=4), SPEC).load_pretrained(tmp_path / "full")
    ToyPolicy(ToyConfig(lora_rank=4), SPEC).save_pretrained(tmp_path / "lora")
    with pytest.raises(ValueError, match="holds a LoRA adapter but policy.lora_rank is 0"):
        ToyPolicy(ToyConfig(), SPEC).load_pretrained(tmp_path / "lora")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"holds no model \(neither config.json nor adapter/\)"):
        ToyPolicy(ToyConfig(), SPEC).load_pretrained(tmp_path / "empty")


def test_a_checkpoint_without_a_head_is_refused_by_name(tmp_path):
    policy = ToyPolicy(ToyConfig(), SPEC)
    policy.save_pretrained(tmp_path / "policy")
    torch.save({}, tmp_path / "policy" / HEADS_FILE)
    with pytest.raises(ValueError, match=r"heads.pt lacks \['value_head'\]"):
        policy.load_pretrained(tmp_path / "policy")


def test_missing_instructions_and_float_images_are_named_with_the_policy_type():
    policy = ToyPolicy(ToyConfig(), SPEC)
    with pytest.raises(ValueError, match="policy.type=toy reads an instruction per env"):
        policy.forward_inputs({**obs(), "task_descriptions": ["", ""]})
    with pytest.raises(ValueError, match=r"policy.type=toy expects uint8 images \[B, H, W, 3\], got torch.float32"):
        policy.forward_inputs({**obs(), "main_images": np.zeros((2, 64, 64, 3), np.float32)})


# -- folders the code before the base wrote ------------------------------------------------------------

OLD = Path(__file__).resolve().parent / "old_checkpoints"  # written by 3e511e7's VLAPolicy / PI0Policy (LoRA r=2)


def old_observations() -> dict:
    rng = np.random.default_rng(0)
    return {"main_images": rng.integers(0, 255, (2, 64, 64, 3), dtype=np.uint8),
            "states": rng.standard_normal((2, 3)).astype(np.float32),
            "task_descriptions": ["pick up the red cube", "reach the red target"]}


@pytest.mark.filterwarnings("ignore:policy.type=pi0")
@pytest.mark.parametrize("name,policy_class,config", [
    ("vla_lora", VLAPolicy, VLAConfig(action_chunk=1, action_head="gaussian", lora_rank=2, value_hidden=8,
                                      use_states=True)),
    ("pi0_lora", PI0Policy, PI0PolicyConfig(action_chunk=2, lora_rank=2, value_hidden=8, flow_logprob="noise")),
])
def test_a_checkpoint_folder_written_before_the_base_loads_and_acts_as_it_did(name, policy_class, config):
    """The folders (peft's adapter/, heads.pt, the policy's own files, embodied_policy.json) and the chunks and
    values the policy that wrote them gave on these observations, greedy, from the same noise."""
    spec = PolicySpec(3, (64, 64, 3), 2, (-1.0,) * 2, (1.0,) * 2)
    torch.manual_seed(1)
    policy = policy_class(config, spec)
    policy.load_pretrained(OLD / name)
    torch.manual_seed(5)
    with torch.no_grad():
        out = policy.act(old_observations(), deterministic=True)
    then = torch.load(OLD / name / "acted.pt")
    torch.testing.assert_close(out.actions, then["actions"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.values, then["values"], rtol=1e-5, atol=1e-5)
