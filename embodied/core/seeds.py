"""Every reset seed of a run, from one place: named ranges of offsets from ``experiment.seed`` that never meet.

A reset gives env ``i`` of a batch the seed ``base + i`` (GRPO: group ``j`` the seed ``base + j``); each kind of
reset draws its bases from its own range, so a training episode never starts where an eval episode does, whatever
the iteration or the restart:

| range | offsets from experiment.seed | what starts there |
|---|---|---|
| training | [0, 2^16) | the run's first reset: env ``i`` at ``+ i`` |
| collect | [0, 10^6 - 2^16) | ``embodied collect``'s episode ``k`` at ``+ k``: training data, so it may meet the training range, never another |
| eval | [10^6, 10^6 + 2^24) | eval episode ``k`` at ``+ 10^6 + k`` |
| fresh | [5 10^8, 5 10^8 + 2^13 10^5) | envs rebuilt after the ``r``-th restart's replayed fault: ``+ 5 10^8 + r 10^5 + i`` |
| restart | [1.4 10^9, 1.4 10^9 + 2^13 10^5) | a replaced env worker after ``r`` restarts: ``+ 1.4 10^9 + r 10^5 + i`` |
| iteration | [2.3 10^9, 2.3 10^9 + 2^20 10^3) | GRPO's iteration ``k``: group ``j`` at ``+ 2.3 10^9 + k 10^3 + j`` |

Every base is a multiple of 1,000 (of a batch's stride), so ``seed % 1000`` of an env's first reset names its index in
the batch (or the eval episode) whatever the range: what the test envs that fail on one env read.
The sizes bound what a run may ask: at most ``MAX_ENVS`` envs in a batch, ``MAX_GROUPS`` GRPO groups, 2^24 eval
episodes, 10^6 - 2^16 collected episodes, 2^13 restarts of each kind, 2^20 iterations; each function refuses an index
past its range (``ValueError``). Seeds stay below 2^32 (numpy's ``RandomState`` range) for ``experiment.seed``
below 9 10^8. ``tests/embodied/core/test_seeds.py`` proves the ranges disjoint.
"""

from __future__ import annotations

MAX_ENVS = 2**16  # envs in one reset of a batch
ENV_STRIDE = 100_000  # between two bases of one kind (restarts): more than MAX_ENVS, a multiple of 1,000
MAX_GROUPS = 1_000  # GRPO groups in one reset (the stride between two iterations' bases)
EVAL = 1_000_000  # eval episode k starts from experiment.seed + EVAL + k (the offset runs recorded so far used)
EVAL_EPISODES = 2**24
COLLECT, COLLECT_EPISODES = 0, EVAL - 2**16  # demonstrations are training data: they start where training may
FRESH, RESTART, ITERATION = 500_000_000, 1_400_000_000, 2_300_000_000
RESTARTS = 2**13  # restarts of each kind a run can seed apart
ITERATIONS = 2**20


def _index(value: int, limit: int, what: str) -> int:
    if not 0 <= value < limit:
        raise ValueError(f"{what} {value} is outside the seed range reserved for it [0, {limit})")
    return value


def eval_seed(seed: int, episode: int) -> int:
    """The reset seed of eval episode ``episode``."""
    return seed + EVAL + _index(episode, EVAL_EPISODES, "eval episode")


def collect_seed(seed: int, episode: int) -> int:
    """The reset seed of ``embodied collect``'s episode ``episode`` (a round: env ``i`` at ``+ i``); never an eval
    episode's."""
    return seed + COLLECT + _index(episode, COLLECT_EPISODES, "collected episode")


def fresh_seed(seed: int, restart: int) -> int:
    """The base of the envs rebuilt after a replayed fault at the run's ``restart``-th restart (env ``i``: ``+ i``)."""
    return seed + FRESH + ENV_STRIDE * _index(restart, RESTARTS, "restart")


def restart_seed(seed: int, restarts: int) -> int:
    """The base a replaced env worker resets from after the run's ``restarts``-th restart (env ``i``: ``+ i``)."""
    return seed + RESTART + ENV_STRIDE * _index(restarts, RESTARTS, "restart")


def iteration_seed(seed: int, iteration: int) -> int:
    """The base of an algorithm's per-iteration reset (GRPO) at ``iteration`` (group ``j``: ``+ j``)."""
    return seed + ITERATION + MAX_GROUPS * _index(iteration, ITERATIONS, "iteration")


def ranges() -> dict[str, tuple[int, int]]:
    """Each range's offsets ``[low, high)``, as the table above gives them."""
    return {"training": (0, MAX_ENVS), "eval": (EVAL, EVAL + EVAL_EPISODES),
            "collect": (COLLECT, COLLECT + COLLECT_EPISODES), "fresh": (FRESH, FRESH + RESTARTS * ENV_STRIDE),
            "restart": (RESTART, RESTART + RESTARTS * ENV_STRIDE),
            "iteration": (ITERATION, ITERATION + ITERATIONS * MAX_GROUPS)}
