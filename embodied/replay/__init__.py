"""Replay buffers of off-policy learners: the chunk-transition buffer (``buffer``) and the demonstrations mixed into
its batches (``demos``)."""

from embodied.core import moved as _moved

# The names of the module this package replaced (``replay.py``) import from here for a release,
# with a warning.
__getattr__ = _moved.old_names(__name__)
