"""The policy contract: the ``Policy`` interface every policy implements and ``build_policy`` (``base``), the
``policy:`` section's base config class (``config``), and what an off-policy learner asks of a policy (``q_functions``).
"""

from embodied.core import moved as _moved

# The names of the module this package replaced (``policy.py``) import from here for a release,
# with a warning.
__getattr__ = _moved.old_names(__name__)
