"""The actor's ranks as one trainer: a ``torch.distributed`` process group over ``actor.num_ranks`` actor workers.

``ActorWorker`` trains through a ``Ranks`` object and never counts ranks itself. ``Ranks()`` is one rank
alone: every collective is the identity and nothing changes from a single-process actor. ``ProcessGroup``
joins a process group (gloo on the CPU, nccl on GPUs; rendezvous at the TCP address that rank 0 picked,
see ``embodied.workers.launch.start_actor_group``) and applies the strategy:

- ``ddp``: every rank holds the whole policy (rank 0's initial weights broadcast to all); after a
  minibatch's backward passes, the gradients are summed over the ranks in one coalesced all-reduce.
- ``fsdp``: torch's FSDP2 (``fully_shard``) shards parameters, gradients and optimizer state; each unit
  the policy names (``Policy.fsdp_units``, e.g. a backbone's decoder layers) is sharded on its own, then
  the root. Gradients are reduce-scattered during backward (averaged by FSDP, of a loss scaled by the
  number of ranks: a sum).

Sum, not mean: a minibatch split over the ranks has each rank's loss already normalised by the whole
minibatch's counts (``embodied.algorithms.base.Averages``), so the ranks' gradients add up to the one
gradient of the whole minibatch.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any, Literal

import torch

Strategy = Literal["ddp", "fsdp"]


class Ranks:
    """One rank alone (also the base of ``ProcessGroup``): collectives are the identity."""

    rank: int = 0
    size: int = 1
    strategy: Strategy = "ddp"

    @property
    def is_main(self) -> bool:
        """Whether this rank writes checkpoints and answers for the group (rank 0)."""
        return self.rank == 0

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over the ranks (no gradient)."""
        return x

    def sum_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Each value summed over the ranks (the same keys, in the same order, on every rank)."""
        return stats

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's ``x`` (equal shapes) concatenated along dim 0, in rank order."""
        return x

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order."""
        return [obj]

    def gather_to_main(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` (picklable), in rank order, on rank 0 only (None elsewhere): what one rank writes,
        without a copy of every rank's on every other."""
        return [obj]

    def prepare(self, policy: torch.nn.Module) -> None:
        """Make the ranks' copies one model (broadcast, or shard); before the optimizer is built."""

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate this rank's share of a minibatch's loss (gradients accumulate into ``.grad``)."""
        loss.backward()

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over the ranks (None stays None: the same on every rank)."""

    def full(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` with every sharded tensor gathered whole (a collective under fsdp: every rank calls it)."""
        return state

    def close(self) -> None:
        """Leave the process group."""


def rendezvous_address() -> str:
    """``host:port`` of a free TCP port on this node, where the process group's store will listen."""
    host = socket.gethostbyname(socket.gethostname())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return f"{host}:{port}"


def resolve_backend(name: str) -> str:
    """``actor.dist_backend``: auto is nccl where CUDA is, else gloo."""
    if name == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return name


class ProcessGroup(Ranks):
    """Rank ``rank`` of ``size`` in a ``torch.distributed`` process group joined at ``address`` (TCP)."""

    def __init__(self, rank: int, size: int, address: str, backend: str, strategy: Strategy,
                 timeout_s: float = 600.0) -> None:
        import torch.distributed as dist

        self.dist, self.rank, self.size, self.strategy = dist, rank, size, strategy
        self.backend = resolve_backend(backend)
        dist.init_process_group(self.backend, init_method=f"tcp://{address}", rank=rank, world_size=size,
                                timeout=timedelta(seconds=timeout_s))
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        moved = t.detach().to(self.device, copy=True)
        self.dist.all_reduce(moved)
        return moved.to(t.device)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        return self._reduce(x)

    def sum_stats(self, stats: dict[str, float]) -> dict[str, float]:
        summed = self._reduce(torch.tensor(list(stats.values()), dtype=torch.float64))
        return dict(zip(stats, summed.tolist()))

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        moved = x.detach().to(self.device).contiguous()
        parts = [torch.empty_like(moved) for _ in range(self.size)]
        self.dist.all_gather(parts, moved)
        return torch.cat(parts).to(x.device)

    def gather_objects(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        self.dist.all_gather_object(out, obj)
        return out

    def gather_to_main(self, obj: Any) -> list[Any] | None:
        out: list[Any] | None = [None] * self.size if self.is_main else None
        self.dist.gather_object(obj, out, dst=0)
        return out

    def prepare(self, policy: torch.nn.Module) -> None:
        if self.strategy == "fsdp":
            self._shard(policy)
            return
        with torch.no_grad():  # the same initial weights everywhere (LoRA's and the heads' random init included)
            for tensor in [*policy.parameters(), *policy.buffers()]:
                moved = tensor.data.to(self.device)
                self.dist.broadcast(moved, src=0)
                tensor.data.copy_(moved)

    def _shard(self, policy: torch.nn.Module) -> None:
        from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

        for unit in policy.fsdp_units():  # type: ignore[operator]
            fully_shard(unit)
        fully_shard(policy)
        for method in ("evaluate", "act", "supervised_loss"):  # entry points besides forward gather the shards
            if callable(getattr(policy, method, None)):
                register_fsdp_forward_method(policy, method)

    def backward(self, loss: torch.Tensor) -> None:
        if self.strategy == "fsdp":
            # FSDP2 averages what it reduce-scatters (a sum with a divide factor gloo cannot apply: PREMUL_SUM), so
            # the loss is scaled by the number of ranks and the average is the sum.
            loss = loss * self.size
        loss.backward()

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        if self.strategy == "fsdp":
            return  # reduce-scattered during backward
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads]).to(self.device)
        self.dist.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def full(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        from torch.distributed.tensor import DTensor

        return {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in state.items()}

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()
