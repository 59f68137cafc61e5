"""The base of every transformers-backed policy (``policies/vla/``, ``policies/pi0/``), as LeRobot's
``policies/pretrained.py`` is the base of its policies: what they share is written here once, and each folder
keeps only its difference (as transformers' ``modular_<name>.py`` writes a model as the difference from its parent).

- ``configuration.py``: ``TransformersPolicyConfig``, the shared fields (``model_path``, ``device``, ``dtype``,
  ``lora_rank``, ``lora_alpha``, ``value_hidden``, ``gradient_checkpointing``, ``use_states``, ``use_wrist_image``,
  the ``flow_*`` log-prob fields) with their one-line docs and their checks (``validate``).
- ``modeling.py``: ``TransformersPolicy``, the shared machinery: device and dtype, LoRA through peft, FSDP units,
  activation checkpointing, eval mode in training, the checkpoint folder (the model or ``adapter/``,
  ``heads.pt``, ``embodied_policy.json``), and the hooks a subclass fills.
- ``folders.py``: ``policy.model_path`` to a folder (``tiny:NAME`` built once into the cache), the tokenizer.
- ``tiny.py``: the cache of tiny models built offline, and their tokenizer.

Adding one, say a policy over transformers' ``FooForConditionalGeneration``, is a folder ``policies/foo/``
with its configuration, modeling and processing, registered under ``[project.entry-points."embodied.policies"]``
(``foo = "embodied.policies.foo.configuration:FooConfig"``) and listed in ``pyproject.toml``'s packages::

    # policies/foo/configuration.py (no torch here: the config loader imports it)
    @dataclass
    class FooConfig(TransformersPolicyConfig):
        type: str = "foo"  # registered policy name
        model_path: str = "tiny:foo-tiny"  # (TransformersPolicyConfig's field) default: the tiny Foo
        foo_steps: int = 4  # what only Foo has, with its one-line doc

        model_class: ClassVar[str] = "embodied.policies.foo.modeling:FooPolicy"
        tiny_names: ClassVar[tuple[str, ...]] = ("foo-tiny",)

        def validate(self) -> list[str]:
            p = super().validate()  # model folder, LoRA, device, flow log-prob fields
            return p + ([f"policy.foo_steps: must be >= 1, got {self.foo_steps}"] if self.foo_steps < 1 else [])

    # policies/foo/modeling.py
    class FooPolicy(TransformersPolicy):
        def __init__(self, config: FooConfig, spec: PolicySpec) -> None:
            super().__init__(config, spec, resolve_model_path(config.model_path, "tiny-foo", config.tiny_names,
                                                              build_tiny_foo))
            self.tokenizer = load_tokenizer(self.model_dir)
            self.model = FooForConditionalGeneration.from_pretrained(self.model_dir, dtype=self.dtype_)
            self.value_head = self.make_value_head(self.model.config.hidden_size)  # policy.value_hidden wide
            self.setup_training()  # freeze(), LoRA, checkpointing, eval mode, the device

        def lora_targets(self):
            return r".*language_model.*\\.(q_proj|v_proj)", None  # (target_modules, modules_to_save)

        def head_modules(self):
            return {"value_head": self.value_head}  # what heads.pt holds

        # act, evaluate, value, forward_inputs: Foo's own (self.instructions(obs), self.uint8_images(...) help)

Everything else (``save_pretrained`` / ``load_pretrained``, ``fsdp_units``, ``train``, the device and dtype, the
shared config checks) is inherited; ``tests/policies/test_transformers_base.py`` builds such a policy over a
tiny model and checks what the base promises.
"""
