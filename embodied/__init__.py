"""embodied: reinforcement-learning fine-tuning of robot policies coupled to simulators.

Importing this package loads neither a simulator nor a model library; those are found through
``embodied.registry`` when a config names them.
"""

from __future__ import annotations

__version__ = "0.1.0"
