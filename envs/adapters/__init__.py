"""Other simulator suites behind the observation and episode contract of ``embodied.envs.chunked``.

- ``gymnasium_env.GymnasiumEnv``: any env registered with gymnasium (the registry's fallback
  for ids embodied does not know);
- ``fetch``: gymnasium-robotics' Fetch tasks (``pip install embodied[robotics]``);
- ``metaworld``: Meta-World v3 tasks (``pip install embodied[metaworld]``).

Importing this package imports no suite; each module imports its own when it is loaded.
"""
