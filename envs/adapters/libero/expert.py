"""A privileged-state scripted expert for LIBERO-Object ("pick up the X and place it in the basket").

The expert reads the simulator of ``env.robosuite_env`` (a LIBERO ``Libero_Floor_Manipulation``)
every step, so it is closed loop on where the object, the basket and the gripper are now:

- the object to pick is ``obj_of_interest[0]``, the basket ``obj_of_interest[1]``; their poses are
  the bodies ``obj_body_id[name]`` (``<name>_main``), the same bodies ``_check_success`` reads;
- success is the object's body origin inside the site ``<basket>_contain_region`` (an axis-aligned
  box, z lower bound 1 cm below), so the object only has to be dropped into the basket;
- the gripper is the site ``gripper0_grip_site`` (between the fingertips; the fingers reach 1 cm
  below it, the palm starts 3 cm above it) and its frame: the fingers close along its x axis,
  its z axis points down the fingers.

Object shapes come from their collision geoms (boxes and convex meshes), read once per episode in
the body frame and moved with the body every step: they give the object's top and bottom, where
to grasp it and which way to turn the hand so that the fingers close across its narrow side (the
butter, cream cheese and pudding boxes are wider than the open gripper along their long side).

Phases (re-checked every step, so a missed grasp or a dropped object starts over):
``approach`` (open, rise to a travel height, move over the object and turn the hand),
``descend`` (straight down to the grasp height), ``close``, ``lift`` (until the object's bottom
clears the basket's rim), ``carry`` (the object's centre over the basket's), ``lower`` (to just
above the rim), ``release`` (open, then back off upwards).

Actions follow LIBERO's OSC_POSE controller (robosuite's ``osc_pose.json``, 20 Hz): ``[:3]`` moves
the position goal by ``0.05 m * action`` from the current end-effector position, ``[3:6]`` turns
the orientation goal by the world-frame axis-angle ``0.5 rad * action``, ``[6]`` is the gripper
(-1 open, +1 closed). The arm covers about a quarter of the commanded offset per step (about
12 mm per step at 1.0), so the expert commands a proportional offset each step instead of
planning in steps.

    expert = LiberoObjectExpert()
    env.reset(); expert.reset(env)
    action = expert.act(env, obs)  # float32 [7] in [-1, 1]
"""

from __future__ import annotations

from typing import Any

import numpy as np

OPEN, CLOSE = -1.0, 1.0
POS_SCALE = 0.05  # metres of position-goal offset per unit of action (osc_pose.json output_max)
ROT_SCALE = 0.5  # radians of orientation-goal offset per unit of action
GRIP_SITE = "gripper0_grip_site"
FINGER_JOINTS = ("gripper0_finger_joint1", "gripper0_finger_joint2")


def _quat2mat(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def _axis_angle(r: np.ndarray) -> np.ndarray:
    """Axis-angle vector (axis * angle) of rotation matrix ``r``, robust near 0 and pi."""
    cos = np.clip((np.trace(r) - 1.0) / 2.0, -1.0, 1.0)
    angle = float(np.arccos(cos))
    if angle < 1e-6:
        return np.zeros(3)
    if angle > np.pi - 1e-3:  # sin ~ 0: the axis is the column of r + I with the largest norm
        m = r + np.eye(3)
        axis = m[:, int(np.argmax(np.linalg.norm(m, axis=0)))]
        return axis / np.linalg.norm(axis) * angle
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]]) / (2.0 * np.sin(angle))
    return axis * angle


def _collision_vertices(sim: Any, body_id: int) -> list[np.ndarray]:
    """Body-frame vertices of each collision geom of a body (boxes as their 8 corners)."""
    m = sim.model
    geoms = []
    for g in range(m.ngeom):
        if m.geom_bodyid[g] != body_id or (m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0):
            continue
        if m.geom_type[g] == 7:  # mesh
            mesh = m.geom_dataid[g]
            start = m.mesh_vertadr[mesh]
            verts = np.array(m.mesh_vert[start : start + m.mesh_vertnum[mesh]])
        else:  # box (and, roughly, any other primitive): its bounding box
            corners = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
            verts = corners * np.array(m.geom_size[g][:3])
        geoms.append(verts @ _quat2mat(m.geom_quat[g]).T + m.geom_pos[g])
    return geoms


def body_top(sim: Any, body_id: int) -> float:
    """World height of a body's highest collision point now (a basket's rim)."""
    verts = np.concatenate(_collision_vertices(sim, body_id))
    r = sim.data.body_xmat[body_id].reshape(3, 3)
    return float((verts @ r.T + sim.data.body_xpos[body_id])[:, 2].max())


class LiberoObjectExpert:
    """Pick the named object, carry it over the basket and drop it in (LIBERO-Object).

    Reads privileged state from ``env.robosuite_env``: the object's and basket's bodies and
    collision geoms, the basket's ``contain_region`` site, the grip site and finger joints. The
    phases are ``approach``, ``descend``, ``close``, ``lift``, ``carry``, ``lower`` and
    ``release`` (see the module docstring); a grasp that fails or an object that falls on the
    way starts the approach over.
    """

    travel_z = 0.21  # grip-site height for moving around: the fingertips clear the tallest object (0.146 m)
    hover = 0.04  # above the object's top before coming straight down
    grasp_depth = 0.022  # grip site this far below the object's top: the palm (3 cm up) stays clear of it
    floor_clearance = 0.013  # lowest grip-site height: the fingertips reach 1 cm below it
    band = 0.015  # geoms reaching this close below the grip site count as what the fingers squeeze
    rim_clearance = 0.03  # the object's bottom this far over the basket's rim while carrying
    drop_clearance = 0.01  # and this far when letting go
    gain = 2.0  # position action per metre of error, in units of POS_SCALE (a quarter lands per step)
    rot_gain = 1.5  # rotation action per radian of error, in units of ROT_SCALE

    def __init__(self) -> None:
        self.phase, self.timer = "approach", 0
        self.obj = ""

    def reset(self, env: Any) -> None:
        """Forget the last episode and read the scene: object, basket, shapes."""
        e = env.robosuite_env
        sim = e.sim
        self.obj, basket = e.obj_of_interest[0], e.obj_of_interest[1].removesuffix("_contain_region")  # LIBERO-PRO's
        self.obj_id = e.obj_body_id[self.obj]
        self.obj_geoms = _collision_vertices(sim, self.obj_id)
        basket_id = e.obj_body_id[basket]
        self.region = f"{basket}_contain_region"
        self.rim_z = body_top(sim, basket_id)  # the basket is not moved during an episode
        self.grip_site = sim.model.site_name2id(GRIP_SITE)
        self.finger_qpos = [sim.model.get_joint_qpos_addr(j) for j in FINGER_JOINTS]
        self.finger_qvel = [sim.model.get_joint_qvel_addr(j) for j in FINGER_JOINTS]
        m = sim.model
        self.obj_geom_ids = {g for g in range(m.ngeom) if m.geom_bodyid[g] == self.obj_id}
        self.finger_geom_ids = [{g for g in range(m.ngeom) if (m.geom_id2name(g) or "").startswith(f"gripper0_finger{i}_")}
                                for i in (1, 2)]
        self.phase, self.timer = "approach", 0
        self.yaw = None  # chosen closing direction (radians) for the current grasp
        self.grasp_offset = 0.0  # object bottom below the grip site once held

    # --- state ------------------------------------------------------------------------------

    def _object(self, sim: Any) -> list[np.ndarray]:
        """World-frame vertices of the object's collision geoms, one array per geom."""
        r = sim.data.body_xmat[self.obj_id].reshape(3, 3)
        p = sim.data.body_xpos[self.obj_id]
        return [v @ r.T + p for v in self.obj_geoms]

    def _gap(self, sim: Any) -> float:
        """Finger opening (sum of the two finger joints: about 0.078 open, 0.002 closed on nothing)."""
        q = sim.data.qpos
        return float(q[self.finger_qpos[0]] - q[self.finger_qpos[1]])

    def _grasp_plan(self, sim: Any, geoms: list[np.ndarray]) -> tuple[np.ndarray, float, float]:
        """Grasp point (x, y), grip-site height and the hand yaw (closing direction) for the object.

        The yaw is the one that closes the fingers across the narrowest side of what they squeeze;
        the hand's current yaw is kept when it is within a few millimetres of that (a can is
        round: no need to turn).
        """
        top = max(float(g[:, 2].max()) for g in geoms)
        z = max(top - self.grasp_depth, self.floor_clearance)
        # What the fingers squeeze: geoms that reach up into the pads' band (a bottle's neck,
        # not its wider body; a milk carton's box under its gable).
        near = [g for g in geoms if g[:, 2].max() > z - self.band] or geoms
        xy = np.concatenate(near)[:, :2]
        now = self._heading(sim)
        yaws = np.concatenate([[now], now + np.radians(np.arange(5.0, 180.0, 5.0))])
        dirs = np.stack([np.cos(yaws), np.sin(yaws)])  # [2, n] closing directions
        u = xy @ dirs
        widths = u.max(0) - u.min(0)
        k = 0 if widths[0] <= widths.min() + 0.004 else int(np.argmin(widths))
        yaw = float((yaws[k] - now + np.pi / 2) % np.pi - np.pi / 2 + now)  # the same grasp turned least
        c, s = np.cos(yaw), np.sin(yaw)
        cu = 0.5 * (u[:, k].max() + u[:, k].min())
        w = xy @ np.array([-s, c])
        cw = 0.5 * (w.max() + w.min())
        return np.array([cu * c - cw * s, cu * s + cw * c]), z, yaw

    def _heading(self, sim: Any) -> float:
        """The hand's yaw: direction of the grip site's x axis (the fingers' closing direction)."""
        r = sim.data.site_xmat[self.grip_site].reshape(3, 3)
        return float(np.arctan2(r[1, 0], r[0, 0]))

    # --- actions ----------------------------------------------------------------------------

    def _action(self, sim: Any, target: np.ndarray, grip: float, speed: float = 1.0) -> np.ndarray:
        """Position action toward ``target`` (grip site), orientation toward fingers-down at ``self.yaw``."""
        pos = sim.data.site_xpos[self.grip_site]
        move = np.clip(self.gain * (np.asarray(target) - pos) / POS_SCALE, -speed, speed)
        current = sim.data.site_xmat[self.grip_site].reshape(3, 3)
        yaw = self._heading(sim) if self.yaw is None else self.yaw  # None: only level the hand
        c, s = np.cos(yaw), np.sin(yaw)
        # Columns: x = closing direction (horizontal), z = straight down, y = z cross x.
        desired = np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])
        turn = np.clip(self.rot_gain * _axis_angle(desired @ current.T) / ROT_SCALE, -1.0, 1.0)
        return np.concatenate([move, turn, [grip]]).astype(np.float32)

    def _switch(self, phase: str, anchor: np.ndarray | None = None) -> None:
        self.phase, self.timer = phase, 0
        if anchor is not None:
            self.anchor = np.array(anchor, dtype=np.float64)  # where the hand holds still in this phase

    def act(self, env: Any, obs: Any) -> np.ndarray:
        """One step of the current phase."""
        e = env.robosuite_env
        sim = e.sim
        self.timer += 1
        pos = sim.data.site_xpos[self.grip_site].copy()
        geoms = self._object(sim)
        allv = np.concatenate(geoms)
        bottom = float(allv[:, 2].min())
        centre = 0.5 * (allv.min(0) + allv.max(0))
        gap = self._gap(sim)

        if self.phase in ("lift", "carry", "lower"):
            # Held means: fingers stopped on something and the object hangs where it was taken.
            held = gap > 0.004 and abs((pos[2] - bottom) - self.grasp_offset) < 0.02
            if not held:
                self._switch("approach")
        if self.phase == "release":
            region = sim.data.get_site_xpos(self.region)
            if self.timer > 25 and np.linalg.norm(centre[:2] - region[:2]) > 0.08:
                self._switch("approach")  # it fell outside: go get it again
            else:
                target = self.anchor.copy()  # open where the object was let go (the fingers take ~8 steps)
                if gap > 0.07 or self.timer > 12:
                    # Open. An object still between the fingers (not fallen) is first centred
                    # between them, so that no pad still pressed against it drags it up along
                    # (a milk carton sticks to a pad); then back off upwards.
                    between = abs(pos[2] - centre[2]) < 0.1
                    if between and np.linalg.norm(centre[:2] - pos[:2]) > 0.008:
                        target[:2] = centre[:2]
                    else:
                        target = np.array([*pos[:2], self.anchor[2] + 0.08])
                return self._action(sim, target, OPEN)

        if self.phase == "approach":
            xy, z, self.yaw = self._grasp_plan(sim, geoms)
            if gap < 0.07:  # open (and up off whatever is below) before anything else
                return self._action(sim, (pos[0], pos[1], max(pos[2], z + 0.02)), OPEN)
            hover = max(z + self.hover, self.travel_z if np.linalg.norm(pos[:2] - xy) > 0.05 else 0.0)
            if np.linalg.norm(pos[:2] - xy) > 0.01 and pos[2] < hover - 0.03:
                return self._action(sim, (pos[0], pos[1], hover), OPEN)  # up first: do not sweep objects
            if np.linalg.norm(pos[:2] - xy) < 0.006 and abs(pos[2] - hover) < 0.03 and self._yaw_error(sim) < 0.1:
                self._switch("descend")
            return self._action(sim, (*xy, hover), OPEN)

        if self.phase == "descend":
            xy, z, _ = self._grasp_plan(sim, geoms)
            if abs(pos[2] - z) < 0.004 and np.linalg.norm(pos[:2] - xy) < 0.005:
                self._switch("close", (*xy, z))
            if np.linalg.norm(pos[:2] - xy) > 0.02:
                self._switch("approach")  # the object moved away: line up again
            return self._action(sim, (*xy, z), OPEN, speed=0.6)

        if self.phase == "close":
            if self.timer >= 10:
                if gap > 0.004:  # fingers stopped on the object
                    self.grasp_offset = float(pos[2] - bottom)
                    self._switch("lift")
                else:
                    self._switch("approach")
            return self._action(sim, self.anchor, CLOSE)

        region = sim.data.get_site_xpos(self.region)
        carry_z = self.rim_z + self.rim_clearance + self.grasp_offset  # grip height with the bottom over the rim
        if self.phase == "lift":
            if pos[2] > carry_z - 0.01:
                self._switch("carry")
            return self._action(sim, (pos[0], pos[1], carry_z + 0.01), CLOSE)
        if self.phase == "carry":
            offset = region[:2] - centre[:2]
            if np.linalg.norm(offset) < 0.012:
                self._switch("lower")
            return self._action(sim, (*(pos[:2] + offset), carry_z), CLOSE)
        if self.phase == "lower":
            drop_z = self.rim_z + self.drop_clearance + self.grasp_offset
            offset = region[:2] - centre[:2]
            if pos[2] < drop_z + 0.005:
                self._switch("release", pos)
            return self._action(sim, (*(pos[:2] + offset), drop_z), CLOSE, speed=0.5)
        return self._action(sim, pos, OPEN)

    # --- resync (DAgger: labels on states a policy drove into) --------------------------------

    def _squeezed(self, sim: Any) -> bool:
        """Both fingers touch the object now (MuJoCo contacts between their geoms and the object's)."""
        touching = [False, False]
        for i in range(sim.data.ncon):
            c = sim.data.contact[i]
            for a, b in ((c.geom1, c.geom2), (c.geom2, c.geom1)):
                if b in self.obj_geom_ids:
                    for k, finger in enumerate(self.finger_geom_ids):
                        touching[k] |= a in finger
        return all(touching)

    def resync(self, env: Any) -> None:
        """Re-derive the phase (and its anchor, grasp offset and yaw) from the simulator's state, before labelling a
        state a policy drove into (DAgger): the phase this expert carried along may no longer fit it. The object
        squeezed by both fingers: ``close`` while they still close on it (or the expert's own close is running),
        else ``lower`` over the basket, ``carry`` at carrying height, ``lift`` below it, with the grasp offset of the
        grasp the policy made. Fingers partly closed on nothing at the grasp pose: ``close``; open and lined up over
        the grasp point between it and the hover height: ``descend``; else ``approach``. A release runs on while the
        fingers open or have let go; the object still squeezed where it was to be let go restarts it (the label stays
        "open here", not "back off upwards" with the object in hand); lifted from there, the phase is re-derived.
        Otherwise the timer restarts only when the phase changes."""
        if not self.obj:
            return
        sim = env.robosuite_env.sim
        pos = sim.data.site_xpos[self.grip_site].copy()
        gap = self._gap(sim)
        qv = sim.data.qvel
        speed = qv[self.finger_qvel[0]] - qv[self.finger_qvel[1]]  # of the gap: < 0 closing, > 0 opening
        squeezed = gap > 0.004 and self._squeezed(sim)
        if self.phase == "release":
            if not squeezed or speed > 0.01:
                return  # let go, or letting go: the release runs on
            if pos[2] < self.anchor[2] + 0.02:  # still held where it was to be let go: open there, from now
                self.timer = 0
                return
        geoms = self._object(sim)
        allv = np.concatenate(geoms)
        bottom = float(allv[:, 2].min())
        centre = 0.5 * (allv.min(0) + allv.max(0))
        xy, z, yaw = self._grasp_plan(sim, geoms)
        off_xy, anchor = float(np.linalg.norm(pos[:2] - xy)), None
        # The expert's own close still running where it began (the fingers take a few steps to leave "open").
        closing_here = self.phase == "close" and self.timer < 10 and np.linalg.norm(pos - self.anchor) < 0.015
        if squeezed:
            if closing_here or speed < -0.01:  # the gap still shrinks
                phase, anchor = "close", (self.anchor if self.phase == "close" else pos)
            else:
                self.grasp_offset = float(pos[2] - bottom)
                carry_z = self.rim_z + self.rim_clearance + self.grasp_offset
                over = np.linalg.norm(sim.data.get_site_xpos(self.region)[:2] - centre[:2])
                if over < (0.03 if self.phase == "lower" else 0.012) and pos[2] < carry_z + 0.02:
                    phase = "lower"
                else:
                    phase = "carry" if pos[2] > carry_z - 0.01 else "lift"
        elif closing_here:
            phase = "close"
        elif gap < 0.07:
            at_grasp = off_xy < 0.01 and abs(pos[2] - z) < 0.01
            phase = "close" if at_grasp and self.phase != "close" else "approach"
            anchor = (*xy, z)
        else:
            self.yaw = yaw if self.phase != "descend" else self.yaw
            lined_up = off_xy < (0.02 if self.phase == "descend" else 0.01) and self._yaw_error(sim) < 0.15
            phase = "descend" if lined_up and z - 0.01 < pos[2] < z + self.hover + 0.03 else "approach"
        if phase != self.phase:
            self._switch(phase, anchor)

    def _yaw_error(self, sim: Any) -> float:
        """Radians between the hand's heading and the planned ``self.yaw``."""
        d = self.yaw - self._heading(sim)
        return abs(float((d + np.pi) % (2 * np.pi) - np.pi))
