"""Layout randomization of a LIBERO scene at training resets (``LiberoEnv``'s ``env.kwargs.layout_shift_x``,
``layout_shift_y`` and ``layout_swap``).

LIBERO places each object with a region sampler (robosuite's placement initializer) in a box of 5 cm or less,
so training placements barely vary and a state policy learns them by heart. LIBERO-PRO's layout suites move
the target alone: ``temp_x0.k`` and ``temp_y0.k`` shift the target's region by 0.7 k m (0.07 .. 0.35 m; along
x towards whichever side the task has room, along y always +) and park any object it would land on 10 m away;
``swap`` exchanges the target's place with one distractor's. Each object therefore moves here on its own, which
covers the target moving relative to the rest in every direction:

- **Shift.** After robosuite has placed the scene, every object standing on the workspace moves by its own
  offset, uniform in ``[-shift_x, shift_x] x [-shift_y, shift_y]``; objects resting on it move with it.
- **Target alone.** With probability ``layout_target_alone`` a reset shifts the target only and the other objects
  keep robosuite's placement, as LIBERO-PRO's layout axes move a scene. Independent shifts put the target at
  every place, but rarely near a given other object (the basket): their difference spreads twice as wide.
- **Swap.** With probability ``layout_swap`` the target (the task's first object of interest) first trades
  places with another object, drawn uniformly: a distractor, as LIBERO-PRO's Swap does, or in a scene with no
  distractor another object of interest.
- **Validity.** Each object's footprint (the x-y bounding box of its collision geoms as placed) keeps ``MARGIN``
  from every other footprint, fixtures included, and stays on the workspace: inside the table top, or on
  LIBERO-Object's floor within the arm's reach (the object's centre 0.30 .. 0.80 m from the robot's base, not
  behind it). A draw that breaks this is drawn again, ``MAX_TRIES`` times per object and ``MAX_LAYOUTS`` whole
  layouts, then a RuntimeError names the task and the range; objects near an edge so move less towards it.
- **Refused when built** (ValueError naming the kwarg, the range and the task): a range by which no object of
  the task can move, either way, and stay on the workspace; a swap with no object to trade places with.

The offsets come from the env's own seeded RandomState and are written to the objects' free joints, so no
scene is rebuilt and nothing global changes. Objects a task parks off the workspace stay where they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MARGIN = 0.01  # metres between two footprints: touching objects would push each other apart while settling
MAX_TRIES = 100  # offsets drawn for one object before the layout is drawn again
MAX_LAYOUTS = 20  # layouts (swap and offsets) drawn before a reset gives up
# The Panda on LIBERO-Object's floor (base at x = -0.6) picks objects 0.30 .. 0.80 m from its base: the scripted
# expert stalls closer (the arm cannot fold that far) and farther (out of reach at the grasp height). The ring holds
# LIBERO-PRO's shifted targets from 0.32 m (TempX0.5) to 0.80 m (TempX0.4); its 0.86 m ones are out of reach.
FLOOR_REACH = (0.30, 0.80)
PARKED = 5.0  # metres from the arena's origin: LIBERO-PRO parks the objects a shifted target would hit 10 m away
SUPPORT_TOL = 0.03  # a table geom whose top lies this close to the samplers' reference height is the table top
_BOX_CORNERS = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T.astype(np.float64)

Box = tuple[np.ndarray, np.ndarray]  # x-y (low, high)


@dataclass(frozen=True)
class LayoutSettings:
    """The three kwargs, checked: half-ranges of the shift (metres) and the swap probability."""

    shift: tuple[float, float] = (0.0, 0.0)
    swap: float = 0.0
    target_alone: float = 0.0  # probability that a reset shifts the target only

    @classmethod
    def parse(cls, shift_x: Any, shift_y: Any, swap: Any, where: str, target_alone: Any = 0.0) -> LayoutSettings:
        """ValueError naming ``env.kwargs.<kwarg>`` and ``where`` (the env) for a value that is not a finite number
        >= 0 (the probabilities: also <= 1)."""
        values = {"layout_shift_x": shift_x, "layout_shift_y": shift_y, "layout_swap": swap,
                  "layout_target_alone": target_alone}
        for kwarg, value in values.items():
            top = 1.0 if kwarg in ("layout_swap", "layout_target_alone") else math.inf
            number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
            if not number or not 0.0 <= float(value) <= top or not math.isfinite(float(value)):
                wanted = "a probability in [0, 1]" if top == 1.0 else "a half-range in metres, finite and >= 0"
                raise ValueError(f"env.kwargs.{kwarg}: {wanted}, got {value!r} ({where})")
        return cls((float(shift_x), float(shift_y)), float(swap), float(target_alone))

    @property
    def active(self) -> bool:
        return self.swap > 0.0 or self.shift != (0.0, 0.0)

    def describe(self) -> str:
        alone = f", layout_target_alone={self.target_alone:g}" if self.target_alone else ""
        return (f"layout_shift_x={self.shift[0]:g}, layout_shift_y={self.shift[1]:g}, layout_swap={self.swap:g}"
                f"{alone}")


@dataclass(frozen=True)
class Workspace:
    """Where an object may stand: a table top (its whole footprint inside ``low .. high``), or the floor within
    ``FLOOR_REACH`` of the robot's base at ``base`` (its centre, in front of the base)."""

    low: np.ndarray
    high: np.ndarray
    base: np.ndarray | None = None

    def holds(self, centre: np.ndarray, box: Box) -> bool:
        if self.base is None:
            return bool(np.all(box[0] >= self.low) and np.all(box[1] <= self.high))
        reach = float(np.hypot(*(centre - self.base)))
        return FLOOR_REACH[0] <= reach <= FLOOR_REACH[1] and centre[0] >= self.base[0]

    def describe(self) -> str:
        if self.base is None:
            return f"the table top x {self.low[0]:.2f}..{self.high[0]:.2f}, y {self.low[1]:.2f}..{self.high[1]:.2f} m"
        return (f"the floor within the arm's reach ({FLOOR_REACH[0]:.2f}..{FLOOR_REACH[1]:.2f} m from its base at "
                f"x {self.base[0]:.2f}, y {self.base[1]:.2f})")


@dataclass(frozen=True)
class Mover:
    """An object robosuite places straight on the workspace: its free joint, and its collision geoms."""

    name: str
    qpos: int  # address of the free joint's x in qpos (y follows)
    region: np.ndarray  # x-y centre of its placement region (world)
    geoms: tuple[tuple[int, np.ndarray], ...]  # (geom id, geom-frame vertices)
    riders: tuple[int, ...] = ()  # qpos addresses of the objects placed on it, moved with it


@dataclass(frozen=True)
class Arrangement:
    """What one randomized reset did: each mover's x-y before and after, and the pair that traded places."""

    before: dict[str, np.ndarray]
    after: dict[str, np.ndarray]
    swapped: tuple[str, str] | None = None
    offsets: dict[str, np.ndarray] = field(default_factory=dict)  # after - the place it started from (swap first)


def geom_vertices(model: Any, geom: int) -> np.ndarray | None:
    """A collision geom's vertices in its own frame (primitives: their bounding box's corners), None for planes."""
    kind, size = int(model.geom_type[geom]), np.asarray(model.geom_size[geom], dtype=np.float64)
    if kind == 7:  # mesh
        start, count = model.mesh_vertadr[model.geom_dataid[geom]], model.mesh_vertnum[model.geom_dataid[geom]]
        return np.asarray(model.mesh_vert[start:start + count], dtype=np.float64)
    half = {2: size[[0, 0, 0]], 3: size[[0, 0, 1]] + [0, 0, size[0]], 4: size[:3], 5: size[[0, 0, 1]],
            6: size[:3]}.get(kind)  # sphere, capsule, ellipsoid, cylinder, box
    return None if half is None else _BOX_CORNERS * half


def body_geoms(model: Any, root: int) -> tuple[tuple[int, np.ndarray], ...]:
    """The collision geoms of body ``root`` and every body below it, with their vertices."""
    found = []
    for geom in range(model.ngeom):
        body = model.geom_bodyid[geom]
        colliding = model.geom_contype[geom] or model.geom_conaffinity[geom]
        if colliding and (body == root or _descends(model, body, root)):
            verts = geom_vertices(model, geom)
            if verts is not None:
                found.append((geom, verts))
    return tuple(found)


def _descends(model: Any, body: int, root: int) -> bool:
    while body > 0:
        body = int(model.body_parentid[body])
        if body == root:
            return True
    return False


def footprint(data: Any, geoms: tuple[tuple[int, np.ndarray], ...]) -> Box:
    """The x-y bounding box of ``geoms`` where they are now."""
    points = np.concatenate([verts @ data.geom_xmat[g].reshape(3, 3).T + data.geom_xpos[g] for g, verts in geoms])
    return points[:, :2].min(axis=0), points[:, :2].max(axis=0)


def _apart(box: Box, others: list[Box]) -> bool:
    low, high = box[0] - MARGIN, box[1] + MARGIN
    return all(np.any(high <= o[0]) or np.any(low >= o[1]) for o in others)


class SceneLayout:
    """The layout randomization of one built scene: what moves, what stays, where things may stand."""

    def __init__(self, env: Any, settings: LayoutSettings, label: str, movers: list[Mover],
                 obstacles: list[tuple[tuple[int, np.ndarray], ...]], workspace: Workspace, target: str | None,
                 partners: list[str]) -> None:
        self.env, self.settings, self.label = env, settings, label
        self.movers, self.obstacles, self.workspace = movers, obstacles, workspace
        self.target, self.partners = target, partners

    @classmethod
    def of(cls, env: Any, settings: LayoutSettings, label: str) -> SceneLayout:
        """Read the scene of robosuite env ``env`` (LIBERO's, as placed by its last reset) and check that
        ``settings`` can be realized there; ``label`` names the task in errors."""
        env.sim.forward()  # a freshly built scene holds its placement in qpos only: its geoms' poses follow here
        movers, obstacles, reference_z = _scene_parts(env)
        workspace = _workspace(env, reference_z)
        if workspace is None:
            raise ValueError(f"env.kwargs.layout_*: {label} stands its objects neither on a table top nor on the "
                             f"floor ({settings.describe()}); leave layout randomization off for it")
        movers = [m for m in movers if np.abs(m.region).max() < PARKED]
        interest = list(env.obj_of_interest)
        names = [m.name for m in movers]
        target = interest[0] if interest and interest[0] in names else None
        partners = [n for n in names if n != target and n not in interest] or [
            n for n in names if n != target and n in interest]
        layout = cls(env, settings, label, movers, obstacles, workspace, target, partners)
        layout.check(interest[0] if interest else "none")
        return layout

    def check(self, first_of_interest: str) -> None:
        """ValueError naming the kwarg unless each configured shift moves some object both ways on the workspace
        and a swap has an object to trade the target's place with."""
        s = self.settings
        if s.swap > 0 and (self.target is None or not self.partners):
            what = (f"its target (first object of interest: {first_of_interest}) does not stand on the workspace by "
                    f"itself" if self.target is None else f"no other object to trade places with {self.target}")
            raise ValueError(f"env.kwargs.layout_swap={s.swap:g}: nothing to swap in {self.label}: {what} (objects on "
                             f"the workspace: {', '.join(m.name for m in self.movers) or 'none'}); leave layout_swap at 0")
        data = self.env.sim.data
        for axis, kwarg in enumerate(("layout_shift_x", "layout_shift_y")):
            if s.shift[axis] == 0.0:
                continue
            for sign in (1.0, -1.0):
                step = np.zeros(2)
                step[axis] = sign * s.shift[axis]
                if not any(self._fits(m, m.region + step, data) for m in self.movers):
                    raise ValueError(
                        f"env.kwargs.{kwarg}={s.shift[axis]:g}: the range cannot fit {self.label}: no object of it "
                        f"moved by {sign * s.shift[axis]:+g} m along {'xy'[axis]} stays on {self.workspace.describe()}"
                        f"; use a smaller range")

    def _fits(self, mover: Mover, centre: np.ndarray, data: Any) -> bool:
        low, high = footprint(data, mover.geoms)
        here = data.qpos[mover.qpos:mover.qpos + 2]
        return self.workspace.holds(centre, (low - here + centre, high - here + centre))

    def apply(self, rng: np.random.RandomState) -> Arrangement:
        """Move the objects of the placed scene (robosuite's reset just ran) to a random valid layout drawn from
        ``rng``, write it to their free joints and recompute the scene; RuntimeError when none is found."""
        sim = self.env.sim  # a hard reset builds a new one (of the same model: the addresses and ids hold)
        data = sim.data
        sim.forward()  # the geoms' poses from qpos as it stands (robosuite's reset has them; a caller may not)
        before = {m.name: data.qpos[m.qpos:m.qpos + 2].copy() for m in self.movers}
        shapes = {m.name: tuple(b - before[m.name] for b in footprint(data, m.geoms)) for m in self.movers}
        fixed = [footprint(data, geoms) for geoms in self.obstacles]
        for _ in range(MAX_LAYOUTS):
            swapped = self._draw_swap(rng)
            start = dict(before)
            if swapped is not None:
                start[swapped[0]], start[swapped[1]] = before[swapped[1]], before[swapped[0]]
            alone = self._draw_alone(rng)
            after = self._draw_places(rng, start, shapes, fixed, alone)
            if after is not None:
                self._write(before, after)
                offsets = {n: after[n] - start[n] for n in after}
                return Arrangement(before, after, swapped, offsets)
        raise RuntimeError(f"{self.label}: no valid layout in {MAX_LAYOUTS} tries of {MAX_TRIES} draws per object "
                           f"({self.settings.describe()}, on {self.workspace.describe()}); use smaller ranges")

    def _draw_swap(self, rng: np.random.RandomState) -> tuple[str, str] | None:
        if self.settings.swap == 0.0 or rng.random_sample() >= self.settings.swap:
            return None  # no draw at all without a swap: a shift alone draws only its offsets
        assert self.target is not None
        return self.target, self.partners[rng.randint(len(self.partners))]

    def _draw_alone(self, rng: np.random.RandomState) -> bool:
        if self.settings.target_alone == 0.0 or self.target is None:
            return False  # no draw at all: settings without it draw what they drew before it existed
        return bool(rng.random_sample() < self.settings.target_alone)

    def _draw_places(self, rng: np.random.RandomState, start: dict[str, np.ndarray],
                     shapes: dict[str, tuple[np.ndarray, np.ndarray]], fixed: list[Box],
                     alone: bool = False) -> dict[str, np.ndarray] | None:
        """Each mover's new x-y, in order (the target first, so its offset is the least cut), or None if one
        finds no valid place; ``alone``: only the target moves."""
        taken, after = list(fixed), {}
        # alone: the others stay, so they are placed first and the target's draws go round them
        order = sorted(self.movers, key=lambda m: m.name == self.target) if alone else self.movers
        for m in order:
            shift = np.array(self.settings.shift) if not alone or m.name == self.target else np.zeros(2)
            tries = MAX_TRIES if shift.any() else 1
            for _ in range(tries):
                centre = start[m.name] + (rng.uniform(-shift, shift) if shift.any() else 0.0)
                box = (centre + shapes[m.name][0], centre + shapes[m.name][1])
                if self.workspace.holds(centre, box) and _apart(box, taken):
                    taken.append(box)
                    after[m.name] = centre
                    break
            else:
                return None
        return after

    def _write(self, before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> None:
        qpos = self.env.sim.data.qpos
        for m in self.movers:
            delta = after[m.name] - before[m.name]
            for address in (m.qpos, *m.riders):
                qpos[address:address + 2] += delta
        self.env.sim.forward()


def _scene_parts(env: Any) -> tuple[list[Mover], list[tuple[tuple[int, np.ndarray], ...]], float]:
    """The movers (objects placed straight on the workspace, the target first), the obstacles (fixtures and
    everything else that stays) and the samplers' reference height (the workspace's surface)."""
    model = env.sim.model
    fixtures = set(getattr(env, "fixtures_dict", {}))
    regions: dict[str, np.ndarray] = {}
    reference_z = 0.0
    for sampler in env.placement_initializer.samplers.values():
        reference_z = float(np.asarray(sampler.reference_pos)[2])
        for obj in sampler.mujoco_objects:
            if obj.name not in fixtures and obj.joints:
                x = np.mean(getattr(sampler, "x_ranges", None) or [sampler.x_range])
                y = np.mean(getattr(sampler, "y_ranges", None) or [sampler.y_range])
                regions[obj.name] = np.array([x, y]) + np.asarray(sampler.reference_pos)[:2]
    carriers = _carriers(env)
    movers = []
    interest = [n for n in env.obj_of_interest if n in regions][:1]
    for name in interest + [n for n in regions if n not in interest]:
        obj = env.objects_dict[name]
        riders = tuple(model.get_joint_qpos_addr(env.objects_dict[r].joints[-1])[0]
                       for r, c in carriers.items() if c == name and env.objects_dict[r].joints)
        movers.append(Mover(name, model.get_joint_qpos_addr(obj.joints[-1])[0], regions[name],
                            body_geoms(model, model.body_name2id(obj.root_body)), riders))
    staying = [o for n, o in {**env.objects_dict, **env.fixtures_dict}.items()
               if n not in regions and carriers.get(n) not in regions]
    obstacles = [body_geoms(model, model.body_name2id(o.root_body)) for o in staying]
    return movers, [g for g in obstacles if g], reference_z


def _carriers(env: Any) -> dict[str, str]:
    """Object -> the object it was placed on (LIBERO's conditional samplers), followed down to the one standing on
    the workspace."""
    on: dict[str, str] = {}
    for composite in (env.conditional_placement_initializer, env.conditional_placement_on_objects_initializer):
        for name, sampler in composite.samplers.items():
            reference = (composite.sample_args.get(name) or {}).get("reference")
            for obj in sampler.mujoco_objects:
                if isinstance(reference, str):
                    on[obj.name] = reference
    resolved = {}
    for name, below in on.items():
        seen = {name}
        while below in on and below not in seen:
            seen.add(below)
            below = on[below]
        resolved[name] = below
    return resolved


def _workspace(env: Any, reference_z: float) -> Workspace | None:
    """The table top (the largest colliding geom of a ``*table*`` body whose top lies at the samplers' reference
    height), the reach on the floor for LIBERO's floor scenes, or None."""
    model, data = env.sim.model, env.sim.data
    best: tuple[float, Box] | None = None
    for body in range(1, model.nbody):
        if "table" not in (model.body_id2name(body) or ""):
            continue
        for geom, verts in body_geoms(model, body):
            points = verts @ data.geom_xmat[geom].reshape(3, 3).T + data.geom_xpos[geom]
            low, high = points[:, :2].min(axis=0), points[:, :2].max(axis=0)
            area = float(np.prod(high - low))
            if abs(points[:, 2].max() - reference_z) <= SUPPORT_TOL and (best is None or area > best[0]):
                best = (area, (low, high))
    if best is not None:
        return Workspace(best[1][0], best[1][1])
    if getattr(env, "_arena_type", None) == "floor":
        base = np.asarray(data.get_body_xpos(env.robots[0].robot_model.root_body))[:2].copy()
        return Workspace(np.full(2, -np.inf), np.full(2, np.inf), base)
    return None
