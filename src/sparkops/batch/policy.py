"""Which ready call goes next: a pure, swappable function of the ready set.

The default is FIFO. A step-aware order (favour the step whose prefix is hot in the cache)
only has to be another function with the same signature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class ReadyCall(Protocol):
    """What a policy may look at: the step the call is for and when it became ready."""

    step: str
    ready_seq: int


Policy = Callable[[Sequence[ReadyCall]], int]


def fifo(ready: Sequence[ReadyCall]) -> int:
    """Oldest ready call first (index 0: the ready list is kept in arrival order)."""
    return 0


POLICIES: dict[str, Policy] = {"fifo": fifo}
