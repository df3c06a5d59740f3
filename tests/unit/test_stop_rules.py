"""The stop rules (batch/stop_rules.py) on constructed failures and timelines."""

from __future__ import annotations

import time

from sparkops.batch.endpoints import EndpointPool
from sparkops.batch.outcome import TIMED_OUT, http_failure, record_failure, transport_failure
from sparkops.batch.stop_rules import FailFast, NoAnswer, SuspendDetector


def test_fail_fast_stops_on_one_shared_cause_and_journals_nothing():
    finished: list[int] = []
    rule = FailFast(3)
    for i in range(2):
        assert (
            rule.fail(record_failure(f"line {i}: no field 'x'"), lambda i=i: finished.append(i))
            is None
        )
    stop = rule.fail(record_failure("line 9: no field 'x'"), lambda: finished.append(9))
    assert stop is not None and stop.kind == "fail-fast" and "line N: no field 'x'" in stop.message
    assert finished == []


def test_fail_fast_with_different_causes_journals_what_it_held_and_stops_watching():
    finished: list[str] = []
    rule = FailFast(2)
    rule.fail(record_failure("a"), lambda: finished.append("a"))
    assert rule.fail(record_failure("b"), lambda: finished.append("b")) is None
    assert finished == ["a", "b"] and not rule.watching
    rule.fail(record_failure("c"), lambda: finished.append("c"))
    assert finished == ["a", "b", "c"]


def test_no_answer_needs_the_deadline_and_an_outage_not_one_record():
    rule = NoAnswer(10.0, last_ok=0.0)
    http500 = http_failure(500, None, b"", None, None)
    rule.failed("r1", http500)
    assert not rule.due(11.0)  # one record failing alone is not an outage
    rule.failed("r2", http500)
    assert not rule.due(9.0) and rule.due(10.0)
    assert "last: HTTP 500" in rule.stop().message
    rule.answered(12.0)
    assert not rule.due(30.0)
    rule.failed("r3", transport_failure(ConnectionRefusedError()))
    assert rule.due(22.0)  # refused: no server there, whatever the record
    rule.answered(23.0)
    rule.failed("r4", TIMED_OUT)
    assert not rule.unreachable  # a timeout is not "nobody there"


def test_a_late_watchdog_tick_is_time_the_client_was_suspended():
    detector = SuspendDetector(period=1.0)
    assert detector.tick(100.0) == 0.0
    assert detector.tick(101.1) == 0.0
    assert detector.tick(102.5) == 0.0  # a busy loop's slack, not a suspension
    assert detector.tick(160.0) == 56.5


def test_the_pool_clock_and_the_stall_windows_skip_suspended_time():
    """A call in flight for 30 s of which 28 the client was suspended: quiet for 2 s, not 30."""
    stalled = []
    for suspended in (0.0, 28.0):
        pool = EndpointPool.from_urls(["http://127.0.0.1:1"], stall_after=5.0)
        watch = pool.endpoints[0].watch
        assert watch is not None
        watch.sent(pool.now() - 30.0)
        pool.watchdog_ticked(time.monotonic(), suspended)  # the gap the watchdog finds
        stalled.append([c.kind for c in pool.check()])
    assert stalled == [["stalled"], []]
