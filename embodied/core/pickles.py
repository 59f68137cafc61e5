"""Unpickling the run's own snapshots across the move of embodied's modules into layer subpackages.

Env snapshots in a checkpoint (``envs/<rank>.pkl``) are pickles, which name each object's class by its module. A
checkpoint written before the move (a0acb30) names ``embodied.types`` where the class now lives in
``embodied.core.types``; ``loads`` finds such a class at its new home (the table of moves is
``embodied.core.moved``'s), so those checkpoints still resume, without the old path's warning.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from embodied.core.moved import current_home


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        # Straight to the new home: through an old module name the class would come with the alias's warning.
        return super().find_class(current_home(module, name), name)


def loads(data: bytes) -> Any:
    """``pickle.loads``, with classes of modules that moved found where they are now."""
    return _Unpickler(io.BytesIO(data)).load()
