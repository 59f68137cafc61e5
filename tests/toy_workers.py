"""A light worker class importable by name (``tests.toy_workers:Echo``): its Ray actor imports no torch and starts
in about a second. A class defined in a test module is not importable in a Ray worker (pytest imports the module by
its file's basename)."""

from __future__ import annotations


class Echo:
    """Answers with what it was built from."""

    def __init__(self, value: int) -> None:
        self.value = value

    def get(self) -> int:
        return self.value
