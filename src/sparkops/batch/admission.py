"""When a new record may start: a steady mix of pipeline steps instead of cohorts.

Why: with a multi-step pipeline the engine used to admit `concurrency + lookahead` records
at once. They all started at step 1 together, so the in-flight set went through the server
as one cohort: long first-step prompts together (the API server's front end the limit, few
running), then the short later steps together (a burst of ~1,000 running), then a drop to
0 while the next cohort was admitted. Measured on an H200 (benchmarks/README.md): records
finished in waves of ~1,250. The waves do not blur by themselves: each in-flight slot keeps
its place in the server's FIFO, so slots that start in phase stay in phase.

The rule: records at their first step (ready or in flight) may hold at most
`concurrency / calls_per_record` slots, the share they hold in a steady state, so each round
of the in-flight set holds every step in its steady proportion from the start (a 3-step job
ramps up in three rounds: 1/3, 2/3, all slots). Once a record has finished the cap no longer
leaves a slot idle: when in-flight plus ready calls are below the concurrency a new record
may start anyway, so a job whose first step is slower than the rest still fills every slot.
`calls_per_record` starts from the number of steps and follows the finished records' mean.
A one-call job (one step, OpenAI batch) is never capped. Records are admitted in input order
and each exactly once either way: this decides only when, never which.
"""

from __future__ import annotations

import math

# Finished records before the observed calls per record replaces the prior.
_LEARN_AFTER = 50


class Admission:
    """Counts records at their first step and says whether one more may start."""

    def __init__(self, concurrency: int, steps: int) -> None:
        self.concurrency = concurrency
        self._prior = max(1, steps)
        self.first_step = 0  # admitted records whose first call has not come back yet
        self.finished = 0
        self._finished_calls = 0

    @property
    def calls_per_record(self) -> float:
        if self.finished >= _LEARN_AFTER:
            return max(1.0, self._finished_calls / self.finished)
        return float(self._prior)

    @property
    def cap(self) -> int | None:
        """Most records at their first step; None: no cap (a one-call job)."""
        per = self.calls_per_record
        if per <= 1.0:
            return None
        return max(1, math.ceil(self.concurrency / per))

    def may_admit(self, busy: int) -> bool:
        """busy: calls in flight plus ready calls (records already admitted)."""
        cap = self.cap
        if cap is None or self.first_step < cap:
            return True
        return self.finished > 0 and busy < self.concurrency

    def admitted(self) -> None:
        self.first_step += 1

    def first_call_done(self) -> None:
        self.first_step -= 1

    def record_left(self, calls: int) -> None:
        """A record finished (done or error) after `calls` calls."""
        self.finished += 1
        self._finished_calls += max(1, calls)
