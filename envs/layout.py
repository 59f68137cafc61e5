"""Layout randomization of the built-in tasks at reset (``env.kwargs.layout_shift_x``, ``layout_shift_y``,
``layout_swap``), written once for the per-env tasks and, through them, their batched twins.

A task samples each object's (or goal's) place uniformly in its own placement box. With a shift, every
draw first moves that box by an offset uniform in ``[-shift_x, shift_x] x [-shift_y, shift_y]`` (one
offset per object, drawn from the env's own generator just before the place). With a swap probability,
a reset exchanges the places of two of the task's objects. A place must lie in the reachable table area
(the workspace's x-y, which lies on the table), less the task's margin for that object (Push keeps a
run-up behind its cube), and keep the task's distance from the others. A shift that would move a
placement box out of that area is refused when the env is built (with a swap, every box must fit the
strictest margin, since any object may take another's place); a draw too close to another object is
drawn again, offset included, a bounded number of times.

With every setting 0 nothing extra is drawn: the generator's stream, and so every seeded layout, is the
one the tasks drew before these settings existed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

MAX_TRIES = 1000  # draws per object before a layout is given up: the tasks' boxes leave plenty of room
Box = tuple[np.ndarray, np.ndarray]  # (low, high) of an x-y area


class Region(NamedTuple):
    """Where a task places one kind of object: the box ``low .. high`` (x-y first; any further axes are not
    shifted), and the ``margin`` (metres) its place must keep inside the reachable area (e.g. a push's run-up)."""

    low: np.ndarray
    high: np.ndarray
    margin: float = 0.0


def _check_number(name: str, value: object, upper: float = np.inf) -> float:
    """``value`` as a float in ``[0, upper]``, else ValueError naming ``env.kwargs.<name>``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not (
            0.0 <= value <= upper and np.isfinite(value)):
        bound = "a finite number >= 0" if upper == np.inf else f"a number in [0, {upper:g}]"
        raise ValueError(f"env.kwargs.{name} must be {bound}, got {value!r}")
    return float(value)


def _check_fit(task: str, shift: np.ndarray, what: str, region: Region, margin: float, area: Box) -> None:
    """ValueError naming the kwarg unless ``region`` (``what``, for the message) moved by up to ``shift`` stays
    ``margin`` inside ``area``."""
    for axis, kwarg in enumerate(("layout_shift_x", "layout_shift_y")):
        low, high = area[0][axis] + margin, area[1][axis] - margin
        room = min(region.low[axis] - low, high - region.high[axis])
        if shift[axis] > room + 1e-12:  # float slack: a shift that exactly fills the room fits
            inset = f" (kept {margin:g} m inside)" if margin else ""
            raise ValueError(
                f"env.kwargs.{kwarg}={shift[axis]:g} cannot fit {task}: its {what} {'xy'[axis]} in "
                f"[{region.low[axis]:g}, {region.high[axis]:g}] shifted by up to +-{shift[axis]:g} m leaves the "
                f"reachable table area {'xy'[axis]} in [{low:g}, {high:g}]{inset}; at most {max(room, 0.0):g} fits")


@dataclass(frozen=True)
class Layout:
    """How one env moves its scene at each reset; built by :meth:`make`, which checks that it fits."""

    shift: np.ndarray  # float64 [2]: half-ranges of each object's offset in x and y, metres
    swap: float  # probability that a reset exchanges the places of two objects
    bound: tuple[float, float, float, float]  # x0, y0, x1, y1: the area every place lies in (reachable table)
    shifts: bool  # whether placement regions move at all (kept as a plain bool: a reset asks it per draw)

    @classmethod
    def make(cls, task: str, shift_x: float, shift_y: float, swap: float, regions: dict[str, Region],
             bound: Box, swappable: str | None) -> Layout:
        """Check the settings against ``task``'s placement ``regions`` and ``bound``; ValueError naming the kwarg.

        ``swappable`` says what a swap exchanges (e.g. "the two cubes"), None where the task has one object only.
        A swap may put any of the task's objects in another's place, so with ``swap`` > 0 every region must fit
        the strictest margin of them all.
        """
        shift = np.array([_check_number("layout_shift_x", shift_x), _check_number("layout_shift_y", shift_y)])
        swap = _check_number("layout_swap", swap, upper=1.0)
        if swap > 0 and swappable is None:
            raise ValueError(f"env.kwargs.layout_swap={swap!r}: {task} has a single object, nothing to swap; "
                             "leave layout_swap at 0")
        if shift.any() and not regions:
            raise ValueError(f"env.kwargs.layout_shift_x/y={shift[0]:g}/{shift[1]:g}: {task} declares no placement "
                             "region to shift; leave them at 0")
        area = (np.asarray(bound[0], dtype=float)[:2], np.asarray(bound[1], dtype=float)[:2])
        strictest = max((r.margin for r in regions.values()), default=0.0)
        for name, region in regions.items():
            _check_fit(task, shift, f"{name} region", region, region.margin, area)
            if swap > 0 and strictest > region.margin:
                _check_fit(task, shift, f"{name} region (layout_swap > 0 exchanges {swappable}, so it keeps the "
                           "strictest margin)", region, strictest, area)
        return cls(shift, swap, (*map(float, area[0]), *map(float, area[1])), bool(shift.any()))

    def place(self, rng: np.random.Generator, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """A point uniform in the box ``low .. high`` moved in x-y by a fresh offset, uniform in +-``shift`` and
        drawn first. Without a shift, exactly the draw of ``mujoco_base.uniform`` (``low + (high - low) * random()``).
        """
        if not self.shifts:
            return low + (high - low) * rng.random(np.shape(low))
        offset = self.shift * (2.0 * rng.random(2) - 1.0)
        p = low + (high - low) * rng.random(np.shape(low))
        p[:2] += offset
        return p

    def inside(self, xy: np.ndarray) -> bool:
        """Whether ``xy`` (its first two coordinates) lies in the reachable table area."""
        x0, y0, x1, y1 = self.bound
        x, y = float(xy[0]), float(xy[1])  # plain floats: a reset checks every draw, numpy's overhead would dominate
        return x0 - 1e-12 <= x <= x1 + 1e-12 and y0 - 1e-12 <= y <= y1 + 1e-12

    def apart(self, rng: np.random.Generator, n: int, low: np.ndarray, high: np.ndarray, min_dist: float,
              avoid: tuple[np.ndarray, ...] = ()) -> np.ndarray:
        """``n`` :meth:`place` draws [n, dim], each inside the area and ``min_dist`` from the others and ``avoid``.

        A draw that misses is drawn again, offset included, at most ``MAX_TRIES`` times (RuntimeError).
        """
        points: list[np.ndarray] = []
        for _ in range(n):
            for _ in range(MAX_TRIES):
                p = self.place(rng, low, high)
                # Unshifted boxes lie inside the area (``make`` checked them): no check, the draws of before.
                inside = self.inside(p) if self.shifts else True
                if inside and all(np.linalg.norm(p - q) >= min_dist for q in (*points, *avoid)):
                    break
            else:
                raise RuntimeError(f"could not place {n} points {min_dist} apart in {low}..{high} "
                                   f"shifted by up to +-{self.shift}")
            points.append(p)
        return np.array(points)

    def swap_pair(self, rng: np.random.Generator, n: int) -> tuple[int, int] | None:
        """Which two of ``n`` objects exchange places this reset, or None (no draw at all when ``swap`` is 0).

        With two objects the pair is (0, 1); with more, two distinct indices drawn uniformly.
        """
        if self.swap == 0.0 or not rng.random() < self.swap:
            return None
        if n == 2:
            return 0, 1
        i, j = rng.choice(n, size=2, replace=False)
        return int(i), int(j)


def swapped(points: np.ndarray, pair: tuple[int, int] | None) -> np.ndarray:
    """``points`` [n, ...] with rows ``pair`` exchanged (a copy), or as they are for None."""
    if pair is None:
        return points
    out = np.array(points, copy=True)
    i, j = pair
    out[[i, j]] = out[[j, i]]
    return out
