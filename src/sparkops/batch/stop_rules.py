"""When a job stops before its input is done: small rule objects the engine asks.

Each rule reads typed failures (batch/outcome.py), never messages, and says `Stop` or nothing.
A stopped job leaves every unfinished record unfinished: running the same command resumes it.

- `FailFast`: the first record-ending failures are held back (not journalled) until a call
  succeeds or `n` of them share one cause; then the job stops, and once the cause is fixed
  the same command sends those records again.
- `NoAnswer`: calls fail with the server's fault and no endpoint has answered for
  `retry_for` seconds (one clock for the whole job, so a dead server costs it once). One
  record failing alone (a prompt the server always answers 500) is not an outage: the job
  stops only when the server is unreachable or calls of two or more records fail.
- `all_stalled`: every endpoint stalled (batch/stall.py); there is nowhere to send calls.
- `Unheld`: a constrained step's answers came back outside what the step allows (the server
  or a router did not hold the structured-output constraint). Such an answer is never a
  decision: its call is sent again; the first from each endpoint is said once; an endpoint
  whose answers break the constraint `in_a_row` times running (it lost its grammar back end,
  or a router drops the field on every call), or a record whose calls break it until its
  deadline, stops the job (resumable) naming the endpoint.
- `SuspendDetector`: the engine's own watchdog ticks came late (SIGSTOP, a closed laptop
  lid, a host paused): that time is the client's, not the server's, and is discounted from
  every window above and from the stall watch's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkops.batch.endpoints import SUSPEND_SLACK_S, EndpointPool
from sparkops.batch.hooks import Stop as Stop  # the rules' answer; the run's hooks hold it
from sparkops.batch.outcome import Failure


@dataclass
class FailFast:
    """Holds the first record-ending failures back; see the module docstring."""

    n: int
    held: list[tuple[str, Callable[[], None]]] | None = None

    def __post_init__(self) -> None:
        self.held = [] if self.n > 0 else None

    @property
    def watching(self) -> bool:
        return self.held is not None

    def fail(self, failure: Failure, finish: Callable[[], None]) -> Stop | None:
        """A record's failure: journalled now (`finish`), held, or the Stop it completes."""
        if self.held is None:
            finish()
            return None
        self.held.append((failure.cause, finish))
        if len(self.held) < self.n:
            return None
        if len({c for c, _ in self.held}) == 1:
            return Stop(
                "fail-fast",
                f"the first {len(self.held)} records all failed with the same cause: "
                f"{failure.cause}; none of them was recorded as finished, so once the cause is "
                "fixed the same command sends them again (--fail-fast 0 turns this check off)",
            )
        self.release()
        return None

    def release(self) -> None:
        """Fail-fast is over (a call succeeded, or the causes differ): journal what it held."""
        held, self.held = self.held, None
        for _, finish in held or ():
            finish()


@dataclass
class NoAnswer:
    """The job-level deadline; see the module docstring. Times are the pool's clock."""

    retry_for: float
    last_ok: float = 0.0
    failing: bool = False
    unreachable: bool = False
    last_failure: Failure | None = None
    failing_ids: set[str] = field(default_factory=set)

    def answered(self, now: float) -> None:
        self.last_ok = now
        if self.failing:
            self.failing = self.unreachable = False
            self.failing_ids.clear()

    def failed(self, record_id: str, failure: Failure) -> None:
        self.failing = True
        self.failing_ids.add(record_id)
        self.last_failure = failure
        if failure.unreachable:
            self.unreachable = True  # refused or reset: no server there, whatever the record

    def check_unanswered(self) -> None:
        """A check request (batch/checks.py) got no answer: nobody is there, whatever the
        record, so the deadline may stop the job."""
        self.unreachable = True

    def due(self, now: float) -> bool:
        return (
            self.failing
            and now - self.last_ok >= self.retry_for
            and (self.unreachable or len(self.failing_ids) > 1)
        )

    def stop(self) -> Stop:
        last = self.last_failure.message if self.last_failure is not None else "no answer"
        return Stop(
            "no-answer",
            f"no endpoint has answered for {self.retry_for:g} s (last: {last}); start or fix "
            "the server, then run the same command again to resume",
        )


# An endpoint whose answers break the constraint this many times running has stopped holding
# it (a router that drops the field for one call in ten does this once in 10^20 runs).
UNHELD_IN_A_ROW = 20


@dataclass
class Unheld:
    """Answers outside a constrained step's allowed set, per endpoint; see the module
    docstring. `on_warning` gets the one line said for each endpoint's first."""

    in_a_row: int = UNHELD_IN_A_ROW
    on_warning: Callable[[str], None] | None = None
    counts: Counter[str] = field(default_factory=Counter)
    running: Counter[str] = field(default_factory=Counter)

    def held(self, endpoint: str) -> None:
        """An answer that its step allows came from `endpoint`."""
        self.running[endpoint] = 0

    def broke(self, endpoint: str, failure: Failure) -> Stop | None:
        """An answer outside its step's allowed set: the Stop it completes, if any."""
        self.counts[endpoint] += 1
        self.running[endpoint] += 1
        if self.counts[endpoint] == 1 and self.on_warning is not None:
            self.on_warning(
                f"{endpoint} did not hold the structured-output constraint ("
                f"{failure.cause}); such an answer is never taken as a decision: its call is "
                "sent again, and the job stops if the endpoint keeps answering so"
            )
        if self.running[endpoint] >= self.in_a_row:
            return self.stop(endpoint, f"{self.in_a_row} answers in a row")
        return None

    def stop(self, endpoint: str, how: str) -> Stop:
        """The job's stop: `endpoint` no longer holds the constraint (for `how` long)."""
        return Stop(
            "unheld",
            f"{endpoint} stopped holding the structured-output constraint ({how} were outside "
            f"their step's allowed answers, {self.counts[endpoint]:,} in all); none of them was "
            "taken as a decision and their records stay unfinished; serve the model with the "
            "kit's vLLM (it reads `structured_outputs`) or fix the router that drops the field, "
            "then run the same command again to resume",
        )


def all_stalled(pool: EndpointPool) -> Stop | None:
    """Every endpoint stalled: the job has nowhere to send calls."""
    if not pool.all_stalled():
        return None
    assert pool.stalls is not None
    return Stop(
        "stalled",
        f"every endpoint stalled ({', '.join(pool.stalled_names())}): calls were in flight and "
        f"nothing advanced for {pool.stalls.threshold:g} s (a hung engine; /health may still "
        "answer); restart the server, then run the same command again to resume",
    )


@dataclass
class SuspendDetector:
    """Finds gaps in the watchdog's own ticks (raw monotonic seconds)."""

    period: float
    last_tick: float | None = None

    def tick(self, now: float) -> float:
        """Seconds the client was suspended since the last tick (0.0 when none)."""
        last, self.last_tick = self.last_tick, now
        if last is None:
            return 0.0
        late = now - last - self.period
        return late if late > SUSPEND_SLACK_S else 0.0
