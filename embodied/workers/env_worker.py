"""``EnvWorker``: steps the envs of one env rank and trades shards with its rollout ranks."""

from __future__ import annotations

import ctypes
import faulthandler
import pickle
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embodied.channels import Shard
from embodied.config import EnvConfig
from embodied.config.schema import ExpertLabels, VideoConfig
from embodied.core import pickles
from embodied.core.numerics import check_env_result, check_reset_obs
from embodied.core.timing import Busy
from embodied.core.types import ChunkStepResult, EnvError, Obs, PeerFailure, PeerFailureError, obs_slice
from embodied.data.format import OBS_KEYS, DemoEpisode
from embodied.env_runtime.factory import make_vector_env, policy_spec
from embodied.envs.batched import BatchedEnv, RecordingBatchedEnv
from embodied.logging.video import VideoReport, VideoWriter
from embodied.policy.config import PolicySpec
from embodied.workers.faults import StepWatch
from embodied.workers.link import Link


def limit_torch_threads(n: int) -> None:
    """At most ``n`` torch intra-op threads in this process, for envs that run torch themselves. An env worker does
    not import torch (it starts faster without it): set now if something loaded it, else through OMP_NUM_THREADS,
    which torch reads when it loads."""
    import os

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    else:
        os.environ["OMP_NUM_THREADS"] = str(n)


def release_freed_memory() -> bool:
    """Hand the heap memory this process has freed back to the system (glibc's ``malloc_trim``); whether it could.

    Why: on the local backend a replaced env worker's envs are freed inside the driver's process, between the
    allocations of rollouts and updates, and glibc keeps the pages they leave (holes in its heap). Without
    this, a soak of Reach-v0 with a restart every 75 s grew the driver by 2 to 16 MiB a restart (Python's
    objects did not grow); with it, flat. A Ray env worker is a process of its own, replaced whole.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library of this process: glibc's on Linux
    except (OSError, AttributeError):  # macOS, musl without it: their allocators return memory on their own
        return False
    trim(0)
    return True


# glibc serves an allocation this large or larger with its own mmap, returned whole when freed. Left alone,
# glibc raises its threshold to the size of each large block freed (up to 32 MiB): after the first env is
# freed, MuJoCo's MjData arenas (13-15 MiB each for the built-in tasks, mostly never touched) come from the
# heap, and every restart or replay that rebuilds them leaves resident holes there. A Reach soak's driver grew
# ~226 MiB/h that way while its objects stayed flat. Below the threshold (rollout arrays, a tiny VLA's
# activations) the heap keeps serving.
MMAP_THRESHOLD_BYTES = 8 << 20


def pin_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold for this process (``mallopt(M_MMAP_THRESHOLD)``, which also stops its
    dynamic raising); whether it could (not on other C libraries, whose allocators behave otherwise)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(-3, nbytes))  # -3: M_MMAP_THRESHOLD in glibc's malloc.h; returns 1 on success


@dataclass
class _Stage:
    """One pipeline stage of an env worker: contiguous shards, their vector env, its current obs."""

    shards: list[Shard]
    venv: BatchedEnv
    obs: Obs | None = None

    @property
    def start(self) -> int:
        return self.shards[0].start

    def rows(self, shard: Shard) -> tuple[int, int]:
        """The shard's rows in this stage's batch."""
        return shard.start - self.start, shard.stop - self.start


def _plain_step(stage: _Stage, actions: np.ndarray) -> ChunkStepResult:
    """A stage's envs run the policy's chunks as they are."""
    return stage.venv.chunk_step(actions)


class EnvWorker:
    """Owns the vector env (a ``BatchedEnv``) of its slice of the batch; steps it, and records eval videos.

    With ``video`` the envs are made with ``render_mode='rgb_array'`` and ``eval_epoch`` can record
    the first ``video.max_videos`` episodes of the eval set; a background ``VideoWriter`` encodes them.
    """

    # Answered beside the worker's own calls (an async run's driver asks while epochs run): its timings.
    concurrent_methods: ClassVar[tuple[str, ...]] = ("take_busy",)

    def __init__(self, rank: int, env_cfg: EnvConfig, link: Link, seed: int | None, torch_threads: int = 1,
                 section: str = "env", video: VideoConfig | None = None, expert: ExpertLabels | None = None) -> None:
        """Build the envs of ``link``'s shards and reset them from ``seed`` (None: not reset, a replacement
        worker whose envs ``restore`` sets). With ``expert`` (the algorithm's ``expert_labels``) every training
        chunk step is labelled by the envs' scripted experts (``labelled_chunk_step``)."""
        if seed is None:  # a replacement: what the replaced worker's envs freed goes back to the system first
            release_freed_memory()
        pin_mmap_threshold()  # simulators' large buffers (MjData arenas) are mapped, and unmapped when freed
        limit_torch_threads(torch_threads)
        # A segfault in a simulator prints the Python stack of every thread (Ray runs env methods on
        # threads of its own; Ray's own handler shows only the main thread's).
        try:
            faulthandler.enable(file=sys.__stderr__, all_threads=True)
        except (AttributeError, ValueError, OSError):  # no real stderr (e.g. a captured or closed one)
            pass
        self.rank, self.link, self.seed, self.video, self.expert = rank, link, seed, video, expert
        self.busy = Busy()  # seconds stepping, waiting and sending since the driver last asked (take_busy)
        self.env_id = env_cfg.id
        render_mode = "rgb_array" if video else None
        self.stages = [
            _Stage(shards, make_vector_env(env_cfg, sum(s.size for s in shards), section, render_mode=render_mode,
                                           name=f"{env_cfg.id}[{section} rank {rank} stage {i}]",
                                           first_index=shards[0].start))
            for i, shards in enumerate(link.stage_shards())
        ]
        if video is not None and len(self.stages) > 1:
            raise ValueError("eval env workers record videos with a single pipeline stage")
        if video is not None and not hasattr(self.venv, "record"):
            self.stages[0].venv = RecordingBatchedEnv(self.venv)  # videos from the simulator's render()
        self.writer = VideoWriter()
        self._video_errors: list[str] = []
        self._reported: set[str] = set()  # each video problem is reported once
        # A step that runs past env.step_timeout_s is reported by this watchdog: the hung thread cannot.
        # (on_hang holds the link, not this worker: a cycle through the watchdog would leave a replaced worker,
        # its envs and their GL contexts, to the garbage collector's next full pass)
        self.watch = StepWatch(env_cfg.step_timeout_s, env_cfg.id, rank,
                               lambda error: link.fail(link.to_rollout, PeerFailure(str(error), error)))
        if seed is not None:
            self._reset(seed)

    @property
    def venv(self) -> BatchedEnv:
        """The vector env of the first stage (eval workers, which record videos, have only one)."""
        return self.stages[0].venv

    def spec(self) -> PolicySpec:
        """Observation and action layout, for building the policy."""
        return policy_spec(self.venv.single_observation_space, self.venv.single_action_space)

    def run_epoch(self, chunk_steps: int, reset_seed: int | None = None, iteration: int = 0,
                  group_size: int = 1) -> int:
        """Send the current obs, then answer ``chunk_steps`` action chunks; returns sub-steps run.

        ``reset_seed`` resets every env first: env ``i`` of the batch gets ``reset_seed + i // group_size``
        (GRPO's groups share a seed); ``iteration`` only labels errors.
        """
        with self._failure_sent_to_peers():
            if reset_seed is not None:
                self._reset(reset_seed, group_size)
            return self._exchange(chunk_steps, f"iteration {iteration}", self._stepper(iteration))

    def eval_epoch(self, chunk_steps: int, reset_seed: int, episode_ids: list[int], video_dir: str | None,
                   options: list[dict[str, Any] | None] | None = None, record: list[int] = ()) -> int:
        """One eval round over the whole batch's lists: env ``i`` plays eval episode ``episode_ids[i]``, reset
        with seed ``reset_seed + i`` (and ``options[i]``, a suite's fixed episode, when given); episodes named
        in ``record`` are recorded and queued for encoding into ``video_dir``."""
        lo, hi = self.link.start, self.link.start + self.link.num_envs
        mine = episode_ids[lo:hi]
        with self._failure_sent_to_peers():
            self._reset(reset_seed, options=None if options is None else options[lo:hi])
            with self.watch.watching(self.venv, lo, "starting eval videos (render())"):  # a render() may hang
                recorded = self._start_recording(mine, record) if video_dir is not None else []
            executed = self._exchange(chunk_steps, f"eval episodes from {mine[0]}")
        if recorded:
            self._queue_videos(Path(video_dir), mine)
        return executed

    def collect_round(self, chunk: int, chunk_steps: int, reset_seed: int, noise: float = 0.0) -> list[DemoEpisode]:
        """One episode per env, driven by its scripted expert (the env config must have auto-reset off).

        Env ``i`` of the batch (global index) is reset to seed ``reset_seed + i``, then runs up to
        ``chunk_steps`` expert chunks of ``chunk`` sub-steps (``expert_chunk_step``, executing with
        action ``noise`` drawn from a generator seeded by the round and this worker's first env).
        Returns the episodes that ended, in env order.
        """
        stage = self.stages[0]  # collect builds its env workers with one pipeline stage
        self._reset(reset_seed)
        obs, history, ended = stage.obs, [], {}  # ended: env -> (chunk steps, its EpisodeStats)
        rng = np.random.default_rng((reset_seed, stage.start))
        for t in range(chunk_steps):
            result, actions = stage.venv.expert_chunk_step(chunk, noise, rng)
            history.append((obs, actions, result.executed, result.rewards))
            ended |= {e.env_index: (t + 1, e) for e in result.episodes}
            obs = result.obs
            if len(ended) == stage.venv.num_envs:
                break

        def rows(i: int, steps: int, part: int) -> np.ndarray:
            return np.stack([h[part][i] for h in history[:steps]])

        return [DemoEpisode(seed=reset_seed + stage.start + i, task=stats.task, success=stats.success_once,
                            obs={k: np.stack([h[0][k][i] for h in history[:steps]]) for k in OBS_KEYS if k in obs},
                            actions=rows(i, steps, 1), executed=rows(i, steps, 2), rewards=rows(i, steps, 3))
                for i, (steps, stats) in sorted(ended.items())]

    def take_busy(self) -> dict[str, float]:
        """Seconds spent stepping the envs, waiting for action chunks and sending results since the last call
        (``embodied.core.timing``)."""
        return self.busy.take()

    def provenance(self) -> dict[str, Any]:
        """The env's own account of what can move an eval number (its ``provenance()``), or {}."""
        envs = getattr(self.venv, "envs", None)
        source = envs[0].unwrapped if envs else self.venv
        describe = getattr(source, "provenance", None)
        return dict(describe()) if callable(describe) else {}

    def expert_name(self) -> str:
        """The class name of the scripted expert of this worker's envs."""
        return type(self.venv.experts[0]).__name__

    def take_videos(self, wait: bool = False) -> VideoReport:
        """Videos written (and failures) since the last call; ``wait`` first finishes the queued ones."""
        if wait:
            self.writer.flush()
        errors, self._video_errors = self._video_errors + self.writer.take_errors(), []
        return VideoReport([str(p) for p in self.writer.take_written()], errors)

    def get_state(self) -> list[bytes | str]:
        """Per pipeline stage, its envs mid-episode and current observations, pickled (exact resume);
        a str instead says why a stage cannot be saved (its vector env has no ``get_state``, or an
        env does not pickle)."""
        states: list[bytes | str] = []
        for stage in self.stages:
            getter = getattr(stage.venv, "get_state", None)
            if getter is None:
                states.append(f"{type(stage.venv).__name__} has no get_state()")
                continue
            try:
                states.append(pickle.dumps((getter(), stage.obs)))
            except Exception as exc:  # noqa: BLE001 - an env that does not pickle only loses exact resume
                states.append(f"{self.env_id} does not pickle: {exc!r}")
        return states

    def set_state(self, states: list[bytes]) -> None:
        """Put back what ``get_state`` saved (same stages and envs per stage)."""
        for stage, state in zip(self.stages, states, strict=True):
            venv_state, stage.obs = pickles.loads(state)  # noqa: S301 - the run's own checkpoint
            stage.venv.set_state(venv_state)

    def restore(self, states: list[bytes | str] | str, generation: int, seed: int) -> bool:
        """After a restart: exchange on keys of ``generation``, and put each stage's envs back to what
        ``get_state`` saved; a stage that could not be saved (a str), or every stage when ``states`` is
        a str (why: e.g. a fault that replayed), is reset from ``seed`` instead. Returns whether every
        stage was restored."""
        self.link.move_to(generation)
        if isinstance(states, str):
            states = [states] * len(self.stages)
        for stage, state in zip(self.stages, states, strict=True):
            if isinstance(state, bytes):
                venv_state, stage.obs = pickles.loads(state)  # noqa: S301 - this run's own snapshot
                stage.venv.set_state(venv_state)
            else:
                with self.watch.watching(stage.venv, stage.start, f"reset seed {seed} after a restart"):
                    stage.obs = stage.venv.reset(seed=seed + stage.start)
        return all(isinstance(state, bytes) for state in states)

    def relink(self, generation: int) -> None:
        """Exchange on the keys of ``generation`` (after failed workers of the group were replaced)."""
        self.link.move_to(generation)

    def close(self) -> None:
        self.watch.close()
        self.writer.close()
        for stage in self.stages:
            stage.venv.close()

    # -- internals ---------------------------------------------------------------------------

    def _reset(self, seed: int, group_size: int = 1, options: list[dict[str, Any] | None] | None = None) -> None:
        """Reset every stage; global env ``i`` gets ``seed + i // group_size`` (and ``options``, one per env of
        this worker, with one stage: eval)."""
        where = f"reset seed {seed}"
        for stage in self.stages:
            with self.watch.watching(stage.venv, stage.start, where), self._located(stage, where):
                if options is not None:
                    stage.obs = stage.venv.reset(seed=seed + stage.start, options=options)
                elif group_size == 1:
                    stage.obs = stage.venv.reset(seed=seed + stage.start)
                else:
                    seeds = [seed + (stage.start + j) // group_size for j in range(stage.venv.num_envs)]
                    try:
                        stage.obs = stage.venv.reset(seeds=seeds)
                    except TypeError as exc:
                        raise TypeError(f"{type(stage.venv).__name__}.reset takes no per-env seeds "
                                        f"(reset(seeds=[...])), which algorithm.group_size > 1 needs: {exc}") from None
            check_reset_obs(stage.obs, self.env_id, stage.start, f"env worker {self.rank}, reset seed {seed}")

    def _stepper(self, iteration: int) -> Callable[[_Stage, np.ndarray], ChunkStepResult]:
        """How a training epoch steps a stage's envs: the policy's chunks, or, when the algorithm asked for expert
        labels, the same labelled by the envs' scripted experts, each env's chunk being the expert's with the
        mixture's probability for ``iteration`` (drawn per stage from the run's seed, the iteration and the stage's
        first env index, so a resumed run draws the same)."""
        expert = self.expert
        if expert is None:
            return _plain_step
        mix = expert.mix_at(iteration)
        streams = {stage.start: np.random.default_rng([expert.seed, iteration, stage.start]) for stage in self.stages}
        return lambda stage, actions: stage.venv.labelled_chunk_step(actions, mix, streams[stage.start])

    def _exchange(self, chunk_steps: int, label: str,
                  step: Callable[[_Stage, np.ndarray], ChunkStepResult] = _plain_step) -> int:
        """Send the current obs, then answer ``chunk_steps`` action chunks stage by stage (``step``: how a stage's
        envs run one; the policy's chunks as they are by default).

        Stages are stepped in order, so with two stages the rollout workers infer one half
        while this worker steps the other.
        """
        busy = self.busy
        for stage in self.stages:
            for shard in stage.shards:
                with busy("send"):
                    self.link.to_rollout.put(self.link.key(shard), obs_slice(stage.obs, *stage.rows(shard)))
        executed = 0
        for t in range(chunk_steps):
            for stage in self.stages:
                with busy("wait"):
                    parts = [self._get_actions(s) for s in stage.shards]
                actions = parts[0] if len(parts) == 1 else np.concatenate(parts)
                where = f"{label}, chunk step {t}"
                with self.watch.watching(stage.venv, stage.start, where), self._located(stage, where), busy("step"):
                    result = step(stage, actions)
                check_env_result(result, self.env_id, stage.start, f"env worker {self.rank}, {label}, chunk step {t}")
                for shard in stage.shards:
                    rows = stage.rows(shard)  # a shard that is the whole stage goes as it is (slice() copies episodes)
                    whole = rows == (0, len(result.dones))
                    with busy("send"):
                        self.link.to_rollout.put(self.link.key(shard), result if whole else result.slice(*rows))
                stage.obs = result.obs
                executed += int(result.executed.sum())
        return executed

    @contextmanager
    def _located(self, stage: _Stage, where: str) -> Iterator[None]:
        """Say where in the run an env error happened (global env index, this worker, ``where``); the env's
        traceback stays."""
        try:
            yield
        except EnvError as exc:
            raise exc.located(stage.start, f"env worker {self.rank}, {where}") from None

    @contextmanager
    def _failure_sent_to_peers(self) -> Iterator[None]:
        """On an error, tell the rollout ranks at once rather than leave them waiting out the timeout;
        also when a rollout rank failed, so that its other rollout ranks stop too."""
        try:
            yield
        except Exception as exc:
            self.link.fail(self.link.to_rollout, PeerFailure(f"env worker {self.rank} failed: {exc!r}"))
            raise

    def _get_actions(self, shard: Shard) -> np.ndarray:
        item = self.link.to_env.get(self.link.key(shard), timeout=self.link.timeout)
        if isinstance(item, PeerFailure):
            raise PeerFailureError(item.message)
        return item

    def _start_recording(self, episode_ids: list[int], record: list[int]) -> list[int]:
        """Record this worker's envs whose eval episode index is in ``record``."""
        if self.video is None:
            raise RuntimeError(f"env worker {self.rank} was made without a VideoConfig: it cannot record")
        wanted = set(record)
        envs = [i for i, k in enumerate(episode_ids) if k in wanted]
        if envs:
            self.venv.record(envs)
        return envs

    def _queue_videos(self, out_dir: Path, episode_ids: list[int]) -> None:
        try:
            self._submit_videos(out_dir, episode_ids)
        except Exception as exc:  # noqa: BLE001 - the eval round itself went fine
            self._report_once(f"queueing eval videos failed: {exc!r}")

    def _submit_videos(self, out_dir: Path, episode_ids: list[int]) -> None:
        error = self.venv.recording_error  # read before record(()) clears it
        self.venv.record(())
        episodes = sorted(self.venv.take_recordings(), key=lambda e: e.env_index)
        if error:
            self._report_once(error)
        if not episodes:
            return
        indices = [episode_ids[e.env_index] for e in episodes]
        names = [f"episode_{k:03d}.mp4" for k in indices]
        grid = f"grid_{indices[0]:03d}-{indices[-1]:03d}.mp4" if self.video.grid and len(episodes) > 1 else None
        self.writer.submit(out_dir, episodes, names, grid, self.video)

    def _report_once(self, message: str) -> None:
        if message not in self._reported:
            self._reported.add(message)
            self._video_errors.append(message)
