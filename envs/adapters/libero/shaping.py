"""A dense reward for LIBERO-Object's pick-and-place tasks (``env.kwargs.reward_type: dense``).

LIBERO's own reward is success alone (1 on the step its check passes, which ends the episode). That is the
benchmark's, and the default. Off-policy RL from a few demonstrations has nothing to follow until its own
chunks reach the goal, so this module stages the task as robosuite's ``PickPlace`` does and as our MuJoCo
tasks do (``envs.mujoco_base.staged_reward``): from task progress ``p`` in [0, 1] the reward is
``0.8 p - 1`` before success and 0 on it. It is negative until success, so ending the episode early never
pays and the success step is always worth taking.

Progress (privileged state, read from the simulator like the scripted expert's):

- ``reach``: ``closeness`` of the grip site to the object (1 at 0, 0.24 at 20 cm);
- ``grasp``: robosuite's ``_check_grasp`` (both fingers' pads touch the object's geoms);
- ``lift``: while grasped, the object's rise toward ``LIFT_CLEARANCE`` over the basket's rim, in [0, 1];
- ``place``: ``lift`` times the ``closeness`` of the object to the basket's ``contain_region`` in the plane;

``p = (reach + grasp + lift + 2 place) / 5``. Letting go over the basket drops the object in, which LIBERO's
check counts as success. Evaluation reads success, never this reward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied.envs.adapters.libero.expert import GRIP_SITE, body_top
from embodied.envs.mujoco_base import closeness, staged_reward

LIFT_CLEARANCE = 0.06  # metres of the object's origin over the basket's rim at which lift is complete
REACH_SCALE = 0.2  # metres: reach's closeness is 0.24 here (the hand starts about 0.3 m away)
PLACE_SCALE = 0.2  # metres in the plane between the object and the basket's contain region
SHAPED_SUITES = ("LIBERO-Object-v0",)
REGION = "_contain_region"  # the basket's site that LIBERO's success check reads


class PickPlaceShaping:
    """The staged reward of one LIBERO-Object scene; ``reset`` after every episode start, then call it each step.

    The object is ``obj_of_interest[0]`` and the basket ``obj_of_interest[1]`` (or its region), as LIBERO's own
    success check reads them (the object's body inside the site ``<basket>_contain_region``).
    """

    def reset(self, raw_env: Any) -> None:
        """Read the scene after a reset: the bodies, the grip site, the basket's rim and the object's height."""
        e = raw_env
        sim = e.sim
        self.env = e
        # LIBERO-PRO's Task files name the region itself ("basket_1_contain_region"), the base suite's the basket.
        self.obj, basket = e.obj_of_interest[0], e.obj_of_interest[1].removesuffix(REGION)
        self.obj_id = e.obj_body_id[self.obj]
        self.region = sim.model.site_name2id(f"{basket}{REGION}")
        self.grip_site = sim.model.site_name2id(GRIP_SITE)
        rim_z = body_top(sim, e.obj_body_id[basket])
        self.start_z = float(sim.data.body_xpos[self.obj_id][2])
        self.lift_z = max(rim_z + LIFT_CLEARANCE, self.start_z + 1e-3)

    def progress(self) -> tuple[float, dict[str, float]]:
        """Task progress in [0, 1] and its terms (``reach``, ``grasp``, ``lift``, ``place``)."""
        e = self.env
        data = e.sim.data
        obj = data.body_xpos[self.obj_id]
        reach = closeness(float(np.linalg.norm(data.site_xpos[self.grip_site] - obj)), REACH_SCALE)
        grasp = float(e._check_grasp(gripper=e.robots[0].gripper, object_geoms=e.objects_dict[self.obj]))
        lift = grasp * float(np.clip((obj[2] - self.start_z) / (self.lift_z - self.start_z), 0.0, 1.0))
        place = lift * closeness(float(np.linalg.norm(obj[:2] - data.site_xpos[self.region][:2])), PLACE_SCALE)
        terms = {"reach": reach, "grasp": grasp, "lift": lift, "place": place}
        return (reach + grasp + lift + 2.0 * place) / 5.0, terms

    def __call__(self, success: bool) -> float:
        """The step's reward: ``staged_reward(progress, success)``, in [-1, -0.2] before success and 0 on it."""
        return staged_reward(self.progress()[0], success)
