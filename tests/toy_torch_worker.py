"""A worker class whose module imports torch: what a Ray actor's handle must not import where it is received."""

from __future__ import annotations

import torch


class TorchWorker:
    concurrent_methods = ("peek",)  # runs in the mailbox's concurrency group, beside the worker's own calls

    def __init__(self, value: int) -> None:
        self.value = value

    def double(self) -> int:
        return int(torch.tensor(self.value) * 2)

    def peek(self) -> int:
        return self.value
