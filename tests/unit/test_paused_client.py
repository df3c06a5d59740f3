"""A client paused past its deadlines records no false failure (issue 37 item 6).

SIGSTOP with calls in flight, then SIGCONT: the calls' timeouts fire as the loop wakes, and
the watchdog that adds the pause to the pool's `suspended` may not have ticked yet. The pool's
clock counts that unseen pause already, so a call whose deadline passed while the client was
stopped is sent again, not ended as "gave up after 1 attempts". Driven on a fake monotonic
clock through the real Caller, pool and no-answer rule (no timing in the test).
"""

from __future__ import annotations

import asyncio

import pytest

from sparkops.batch import endpoints
from sparkops.batch.calls import Caller
from sparkops.batch.endpoints import SUSPEND_SLACK_S, EndpointPool
from sparkops.batch.fate import Stats
from sparkops.batch.outcome import TIMED_OUT, Answer, Failure
from sparkops.batch.stop_rules import NoAnswer, Stop, Unheld

PAUSE_S = 180.0
RETRY_FOR_S = 60.0


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(endpoints.time, "monotonic", fake)
    monkeypatch.setattr("sparkops.batch.calls.backoff_delay", lambda attempt: 0.0)
    return fake


class PausedTransport:
    """The first attempt spans a pause of the whole client; others were answered as it woke
    (their answers waited in the socket). Later attempts are answered."""

    def __init__(self, clock: Clock, pool: EndpointPool, no_answer: NoAnswer) -> None:
        self.clock, self.pool, self.no_answer = clock, pool, no_answer
        self.attempts = 0

    async def attempt(self, ep, path, payload, want_text):
        self.attempts += 1
        if self.attempts == 1:
            self.clock.t += PAUSE_S
            self.no_answer.answered(self.pool.now())  # another record's answer, read first
            return TIMED_OUT
        body = {"choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}]}
        return Answer(200, body, "yes", "m", None, {})


class AnswersChecks:
    async def answers(self, ep) -> bool:
        return True  # the endpoint is there: without the fix, the record would be "its own"


def _caller(pool: EndpointPool, transport, no_answer: NoAnswer, stops: list[Stop]) -> Caller:
    return Caller(
        transport, pool, AnswersChecks(), no_answer, Stats(), stops.append, True, Unheld()
    )


def test_the_pool_clock_leaves_out_a_pause_the_watchdog_has_not_ticked_through(clock):
    pool = EndpointPool.from_urls(["http://a:8000"], stall_after=0)
    pool.watchdog_started(clock.t, 1.0)
    start = pool.now()
    clock.t += 1.0 + SUSPEND_SLACK_S  # a late tick, not yet a pause
    assert pool.now() == pytest.approx(start + 1.0 + SUSPEND_SLACK_S)
    clock.t += PAUSE_S
    assert pool.now() == pytest.approx(start + 1.0)  # the pause, unseen, is left out
    late = clock.t - pool.watchdog_tick - pool.watchdog_period
    pool.watchdog_ticked(clock.t, late)  # what the watchdog's tick adds: the clock does not jump
    assert pool.now() == pytest.approx(start + 1.0)


def test_a_call_that_timed_out_in_a_pause_is_sent_again_not_failed(clock):
    pool = EndpointPool.from_urls(["http://a:8000"], stall_after=0)
    pool.watchdog_started(clock.t, 1.0)
    no_answer = NoAnswer(RETRY_FOR_S, last_ok=pool.now())
    transport = PausedTransport(clock, pool, no_answer)
    stops: list[Stop] = []
    outcome = asyncio.run(_caller(pool, transport, no_answer, stops).send("/p", b"{}", "r1"))
    assert isinstance(outcome, Answer), outcome
    assert transport.attempts == 2 and stops == []


def test_without_a_watchdog_the_raw_clock_still_ends_a_record_past_its_deadline(clock):
    """The rule the pause must not trigger is still there for a real outage of one record:
    its deadline passed while the client ran, others were answered: its own failure."""
    pool = EndpointPool.from_urls(["http://a:8000"], stall_after=0)
    no_answer = NoAnswer(RETRY_FOR_S, last_ok=pool.now())
    transport = PausedTransport(clock, pool, no_answer)
    outcome = asyncio.run(_caller(pool, transport, no_answer, []).send("/p", b"{}", "r1"))
    assert isinstance(outcome, Failure) and outcome.alone_after == 1
