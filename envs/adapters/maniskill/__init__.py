"""ManiSkill3 (``pip install 'embodied[maniskill]'``): its tasks as env ids ``ManiSkill-<id>`` (``tasks``).

- ``tasks``: the id table, what needs a download, and the env classes the entry points name;
- ``env.ManiSkillEnv``: one env on CPU PhysX (the CPU path: several in an env worker);
- ``batched.ManiSkillBatchedEnv``: a batch on GPU PhysX in one env worker (the CUDA path);
- ``observations``: ManiSkill's observations in embodied's layout; ``vulkan``: which Vulkan driver SAPIEN uses.

Importing this package imports neither ManiSkill nor SAPIEN. docs/maniskill.md is the guide.
"""
