"""Which step's ready call goes next: a pure, swappable function of the ready set.

The engine keeps one FIFO queue of ready calls per pipeline step, so a policy only chooses a
step (O(steps) per dispatch, never a scan over a thousand ready calls) and order within a step
is always arrival order. A policy sees, per step with something ready, how many calls wait,
the arrival number of the oldest one and how many of that step's calls are in flight, plus
the clock (the arrival number of the newest ready call).

- `fifo`: the oldest ready call overall. Steps interleave as records advance, so every step's
  prefix is in flight at once.
- `step-aware`: the step with the most calls in flight, whose prefix is certainly in the
  cache (the seed's "hottest prefix"), so few distinct prefixes are in flight at once and the
  others can be evicted and re-warmed once rather than fought over. No call is starved: once
  the oldest ready call has seen `max_wait` newer calls become ready, its step goes next.

Measured on vLLM-CPU (benchmarks/step_schedule.py, README): the same hit rate as FIFO with a
small and an ample KV cache, and no faster, because vLLM never evicts blocks a running
request holds and FIFO keeps some call of every step running. Hence FIFO is the default.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class ReadyCall(Protocol):
    """What the queues need of a call: its step and its arrival number."""

    step: str
    ready_seq: int


Call = TypeVar("Call", bound=ReadyCall)


@dataclass(frozen=True)
class StepQueue:
    """One step's share of the ready set, as a policy sees it."""

    step: str
    waiting: int
    oldest_seq: int
    in_flight: int


@dataclass(frozen=True)
class ReadySet:
    """The state a policy chooses from: only steps with at least one ready call."""

    queues: Sequence[StepQueue]
    clock: int
    max_wait: int


Policy = Callable[[ReadySet], str]


def fifo(ready: ReadySet) -> str:
    """The step holding the oldest ready call: exact arrival order across all steps."""
    return min(ready.queues, key=lambda q: q.oldest_seq).step


def step_aware(ready: ReadySet) -> str:
    """The hottest step (most in flight), unless some call has waited past the bound.

    Ties go to the step with the older call, so with nothing in flight (the start of a job,
    or after a drain) this is FIFO.
    """
    oldest = min(ready.queues, key=lambda q: q.oldest_seq)
    if ready.clock - oldest.oldest_seq >= ready.max_wait:
        return oldest.step
    return min(ready.queues, key=lambda q: (-q.in_flight, q.oldest_seq)).step


POLICIES: dict[str, Policy] = {"fifo": fifo, "step-aware": step_aware}
# Chosen from benchmarks/step_schedule.py (README, "Scheduling and cache pressure").
DEFAULT_POLICY = "fifo"


def default_max_wait(concurrency: int) -> int:
    """Bound on how many newer calls may overtake a ready call: one turnover of the in-flight
    set (at least 64), so a record waits at most about one extra call latency per step."""
    return max(64, concurrency)


class ReadyQueues(Generic[Call]):
    """Ready calls, one FIFO per step, with each step's in-flight count for the policy."""

    def __init__(self, policy: Policy, max_wait: int) -> None:
        self.policy = policy
        self.max_wait = max_wait
        self.waiting: dict[str, deque[Call]] = {}
        self.in_flight: dict[str, int] = {}
        self.size = 0
        self.clock = 0

    def __len__(self) -> int:
        return self.size

    def push(self, state: Call) -> None:
        if state.step not in self.waiting:
            self.waiting[state.step] = deque()
            self.in_flight[state.step] = 0
        self.waiting[state.step].append(state)
        self.size += 1
        self.clock = max(self.clock, state.ready_seq)

    def pop(self) -> Call:
        """The next call by policy; counted in flight for its step until `done`."""
        steps = [step for step, q in self.waiting.items() if q]
        if len(steps) == 1:  # the common case, and every OpenAI batch call: no choice to make
            step = steps[0]
        else:
            queues = [
                StepQueue(s, len(self.waiting[s]), self.waiting[s][0].ready_seq, self.in_flight[s])
                for s in steps
            ]
            step = self.policy(ReadySet(queues, self.clock, self.max_wait))
        state = self.waiting[step].popleft()
        self.size -= 1
        self.in_flight[step] += 1
        return state

    def done(self, step: str) -> None:
        self.in_flight[step] -= 1
