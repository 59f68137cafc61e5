"""``EnsembleLinear``: ``E`` independent linear layers applied in one batched matmul, the building block of every
ensemble in the project (SAC's and CrossQ's critics, the MLP policy's actors with ``policy.ensemble_size``)."""

from __future__ import annotations

import math

import torch
from torch import nn


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied to [E, B, n_in] in one batched matmul."""

    def __init__(self, ensemble: int, n_in: int, n_out: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(n_in)  # nn.Linear's default init, per member
        self.weight = nn.Parameter(torch.empty(ensemble, n_in, n_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, n_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)
