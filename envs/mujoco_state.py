"""The numerical state of an ``MjData``: snapshots that pickle without leaking, and whether it went unstable."""

from __future__ import annotations

import mujoco
import numpy as np


class MjDataState:
    """An ``MjData`` as its integration state (``mjSTATE_INTEGRATION``: what makes the next ``mj_step``
    exact) plus its warning counters, which ``mujoco_unstable`` reads.

    Pickling the ``MjData`` itself is exact too, but MuJoCo 3.3's bindings leak every unpickled one
    (about its size: 0.1 MiB for Reach-v0, a few MiB for a LIBERO scene), once per env at every
    exact restart or resume. ``restore`` rebuilds it from the model and recomputes the positions
    (bodies, sites, cameras) the env and its renderer read before the next step.
    """

    SPEC = mujoco.mjtState.mjSTATE_INTEGRATION

    def __init__(self, values: np.ndarray, warnings: np.ndarray) -> None:
        self.values, self.warnings = values, warnings  # float64 [mj_stateSize]; int64 [mjNWARNING, 2]

    @classmethod
    def of(cls, model: mujoco.MjModel, data: mujoco.MjData) -> MjDataState:
        values = np.empty(mujoco.mj_stateSize(model, cls.SPEC))
        mujoco.mj_getState(model, data, values, cls.SPEC)
        warnings = np.array([(w.number, w.lastinfo) for w in data.warning], dtype=np.int64)
        return cls(values, warnings)

    def restore(self, model: mujoco.MjModel) -> mujoco.MjData:
        data = mujoco.MjData(model)
        mujoco.mj_setState(model, data, self.values, self.SPEC)
        for warning, (number, lastinfo) in zip(data.warning, self.warnings):
            warning.number, warning.lastinfo = int(number), int(lastinfo)
        mujoco.mj_kinematics(model, data)  # positions only: the integration state stays as saved
        mujoco.mj_comPos(model, data)
        mujoco.mj_camlight(model, data)
        return data


UNSTABLE_WARNINGS = (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQPOS,
                     mujoco.mjtWarning.mjWARN_BADQVEL)


def mujoco_unstable(data: mujoco.MjData) -> bool:
    """Whether the simulation went unstable since the last ``mj_resetData``.

    MuJoCo answers "Nan, Inf or huge value in QACC" by resetting the state and counting a warning
    (``data.warning``), so the warning counters, not the state, are what tell.
    """
    return any(data.warning[w].number > 0 for w in UNSTABLE_WARNINGS) or not np.isfinite(data.qacc).all()
