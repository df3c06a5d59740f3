"""One run's hooks: how the parts of a running job reach the person and each other.

Built once by batch/job.py and handed to every part at construction: the engine (its fates,
its check requests, the unheld-answer rule), the pool (stall changes), the serving watch,
the sampler, and, through its `Stopper`, the signal handlers. Nothing is wired in afterwards:
before this, the job set outlets on objects that already ran (`engine.pool.on_change = ...`,
`engine.fates.truncation.on_warning = ...`, `signals.engine = engine`), so a part could not
be read alone, and one built without them failed only when it first spoke.

Without a job (the engine's unit tests) every outlet is quiet and the epoch stays 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkops.batch.stall import StallChange


@dataclass(frozen=True)
class Stop:
    """Why a job stopped before its input was done (every unfinished record resumes).

    kind: "signal" (SIGINT/SIGTERM; `signum` set), "fail-fast" (the first calls all failed
    with one cause), "no-answer" (no endpoint answered for --retry-for seconds), "stalled"
    (every endpoint stalled), "unheld" (answers outside a constrained step's allowed set),
    "serving-changed" (--strict-serving saw an endpoint's identity
    change, batch/serving.py) or "model-changed" (--strict-serving saw answers from a model
    other than the pipeline's).
    """

    kind: str
    message: str
    signum: int | None = None


class Stopper:
    """The run's stop: the first reason wins and wakes the dispatcher.

    Its own object because a stop may come before the hooks can be built (a signal during the
    pre-flight) and after the run has ended (the last /metrics sample). Before the run begins
    a stop is refused (`stop` returns False: nothing to wind down, the caller cancels the job
    instead); once the run is over it changes nothing (the job finished as it was).
    """

    def __init__(self) -> None:
        self._reason: Stop | None = None
        self._wake: Callable[[], None] | None = None
        self._began = False

    @property
    def reason(self) -> Stop | None:
        """Why the run stopped early (None: it ran until its input was done)."""
        return self._reason

    def stop(self, reason: Stop) -> bool:
        """Stop the run soon: in-flight calls are cancelled and their records stay unfinished,
        so running the same command again sends them. False when no run has begun."""
        if not self._began:
            return False
        if self._wake is not None:
            if self._reason is None:
                self._reason = reason
            self._wake()
        return True

    @contextmanager
    def running(self, wake: Callable[[], None]) -> Iterator[None]:
        """The run itself (the engine's dispatcher): `wake` is called for every stop until it
        ends; after it, a stop changes nothing."""
        self._began = True
        self._wake = wake
        try:
            yield
        finally:
            self._wake = None


def _quiet(*_: object) -> None:
    """An outlet nobody listens to (an engine run without a job)."""


def _first_epoch() -> int:
    return 0


@dataclass(frozen=True)
class RunHooks:
    """What the parts of one run tell the person running it and each other.

    stopper: the run's stop (`stop`). say: one line the person must see (a serving change,
    answers cut off at max_tokens, answers outside a step's constraint, answers from another
    model); the progress line's. note: a stall change (the job log and the progress line).
    refresh: redraw the progress line. epoch: the serving epoch a finished record carries now
    (batch/serving.py's record of what served the job). other_model: an answer came from
    `model`, not the pipeline's `expected` (the serving record's line, once per model).
    """

    stopper: Stopper = field(default_factory=Stopper)
    say: Callable[[str], None] = _quiet
    note: Callable[[StallChange], None] = _quiet
    refresh: Callable[[], None] = _quiet
    epoch: Callable[[], int] = _first_epoch
    other_model: Callable[[str, str], None] = _quiet

    def stop(self, reason: Stop) -> bool:
        """Stop the run soon (see `Stopper.stop`)."""
        return self.stopper.stop(reason)
