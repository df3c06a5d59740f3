"""One call with retries: attempts until an answer or a failure that may end the record.

A failure that is the server's (batch/outcome.py) is retried with full-jitter backoff (a
Retry-After longer than the backoff wins) and benches the endpoint, except a timeout. At the
call's deadline (--retry-for) it ends the record only when other records were answered after
its previous failed attempt, or when the endpoint answers a check request (batch/checks.py):
then it is this record's problem. A connection that failed (refused, reset) is judged by the
check request alone: a server stopping gracefully (vLLM's front end on SIGTERM) still answers
the calls it holds while it refuses new ones, and those late answers say nothing about a
record that could not reach it. Otherwise it is an outage, and the job-level deadline
(batch/stop_rules.py) stops the job with the record unfinished. A call cancelled because its
endpoint stalled is re-sent at once without counting as an attempt; one that stalled alone
is retried, and ends the record on its third time.

An answer the workload judges to be none (batch/workload.py: unfinished, or outside a
constrained step's allowed set) is the server's failure like a 5xx. One outside the
constraint is never the record's fault, whatever the check request says: at the deadline it
stops the job (`Unheld`, batch/stop_rules.py) and the record stays unfinished.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkops.batch.outcome import Answer, Failure, Kind, Outcome
from sparkops.batch.retry import backoff_delay

if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkops.batch.checks import Checks
    from sparkops.batch.endpoints import EndpointPool
    from sparkops.batch.fate import Stats
    from sparkops.batch.stop_rules import NoAnswer, Stop, Unheld
    from sparkops.batch.transport import Transport

# A call that stalled alone (batch/checks.py) is the record's own failure after this many.
STALLED_ALONE_ATTEMPTS = 3


@dataclass(frozen=True)
class Caller:
    """Sends one step's request until it has an outcome for the record: the transport and
    the pool it picks endpoints from, the check request that tells a record's problem from
    an outage, the job-level no-answer rule, and how to stop the job. The engine builds one
    when its HTTP session opens; nothing else reaches into the engine for them."""

    transport: Transport
    pool: EndpointPool
    checks: Checks
    no_answer: NoAnswer
    stats: Stats
    stop: Callable[[Stop], None]
    want_text: bool
    unheld: Unheld

    async def send(
        self,
        path: str,
        payload: bytes,
        record_id: str,
        judge: Callable[[Answer], Failure | None] | None = None,
    ) -> Outcome:
        """The outcome the record's step gets (see the module docstring)."""
        transport, want_text = self.transport, self.want_text
        pool, no_answer, stats = self.pool, self.no_answer, self.stats
        deadline = pool.now() + no_answer.retry_for
        attempt = stalled_alone = 0
        since = pool.now()  # when the previous failed attempt ended
        while True:
            attempt += 1
            ep = pool.pick()
            outcome = await transport.attempt(ep, path, payload, want_text)
            now = pool.now()
            if isinstance(outcome, Answer) and judge is not None:
                outcome = self._judged(ep.base, outcome, judge)
            if isinstance(outcome, Answer) or (outcome.code and outcome.is_records_fault):
                no_answer.answered(now)  # the server is there (a 400 is an answer too)
            if isinstance(outcome, Answer):
                stats.calls += 1
                pool.mark_up(ep)
                return outcome
            if outcome.kind is Kind.REROUTED:  # its endpoint stalled: send it elsewhere now
                attempt -= 1
                continue
            if outcome.kind is Kind.STALLED_ALONE:
                stalled_alone += 1
                if stalled_alone >= STALLED_ALONE_ATTEMPTS:
                    stats.calls += 1
                    return outcome.alone(attempt)
            elif outcome.is_records_fault:
                stats.calls += 1
                pool.mark_up(ep)
                return outcome
            else:
                no_answer.failed(record_id, outcome)
                if outcome.kind is not Kind.TIMEOUT:
                    pool.mark_down(ep)  # its calls go to the other endpoints for a while
                if now >= deadline and outcome.kind is Kind.UNHELD:
                    self.stop(
                        self.unheld.stop(
                            ep.base, f"a record's answers for {no_answer.retry_for:g} s"
                        )
                    )
                    return outcome  # never the record's fault: it stays unfinished
                if now >= deadline:
                    if no_answer.due(now):
                        self.stop(no_answer.stop())  # an outage: the record stays unfinished
                        return outcome
                    if (not outcome.unreachable and no_answer.last_ok > since) or (
                        await self.checks.answers(ep)
                    ):
                        stats.calls += 1
                        return outcome.alone(attempt)  # others were answered: its own
            since = now
            stats.retries += 1
            delay = backoff_delay(attempt)
            if outcome.retry_after is not None and outcome.retry_after > delay:
                delay = outcome.retry_after
            await asyncio.sleep(delay)

    def _judged(
        self, endpoint: str, answer: Answer, judge: Callable[[Answer], Failure | None]
    ) -> Answer | Failure:
        """The answer, or the failure the workload says it is (an answer outside the
        constraint is counted, and may stop the job: `Unheld`)."""
        failure = judge(answer)
        if failure is None:
            self.unheld.held(endpoint)
            return answer
        if failure.kind is Kind.UNHELD and (stop := self.unheld.broke(endpoint, failure)):
            self.stop(stop)
        return failure
