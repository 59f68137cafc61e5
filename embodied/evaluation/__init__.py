"""Evaluation: what an eval measures and reports (``stats``), and the eval runs: periodic eval during training and
``embodied eval`` (``run``). The worker that plays the episodes is ``embodied.workers.evaluator``."""

from embodied.core import moved as _moved

# The names of the module this package replaced (``evaluation.py``) import from here for a release,
# with a warning.
__getattr__ = _moved.old_names(__name__)
