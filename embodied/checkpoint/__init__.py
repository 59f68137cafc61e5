"""Checkpoints: the folder format (``store``), and the HMAC signatures that let a resume trust a checkpoint's pickled
env snapshots (``trust``)."""

from embodied.core import moved as _moved

# The names of the module this package replaced (``checkpoint.py``) import from here for a release,
# with a warning.
__getattr__ = _moved.old_names(__name__)
