"""What a person running a job sees (batch/progress.py): the status line off a terminal.

The view's clock is injected (`clock=`): the tests move it by hand, so no assertion depends on
how fast this machine runs."""

from __future__ import annotations

import re
from functools import partial

import pytest

from sparkops.batch.engine import Stats
from sparkops.batch.progress import ProgressView
from sparkops.jobunit.progress import PROGRESS_LINE


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def __iadd__(self, seconds: float) -> Clock:
        self.now += seconds
        return self


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def view(clock: Clock):
    """ProgressView on the test's clock."""
    return partial(ProgressView, clock=clock)


def test_off_a_terminal_one_status_line_per_interval_and_one_at_the_end(capsys, clock, view):
    stats = Stats()
    shown = view(stats, total=200, already=0, status_interval=30)
    assert shown.lines  # capsys: stderr is not a terminal
    with shown:
        for _ in range(120):  # one minute of the sampler's 0.5 s updates
            clock += 0.5
            stats.done += 1
            shown.update()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3  # at 30 s, at 60 s, at the end
    assert lines[0] == (
        "sparkops: 60/200 finished: 60 done, 0 errors, 0 in flight; 120 records/min; hit -; "
        "ETA 0:01:10"
    )
    assert lines[-1].startswith("sparkops: 120/200 finished: 120 done")


def test_records_per_min_counts_records_done_not_errors(clock, view):
    stats = Stats(done=10, errors=290)
    shown = view(stats, total=1000, already=0)
    clock += 60
    assert shown.records_per_min() == pytest.approx(10)
    # the ETA runs on every finished record: 300 a minute, 700 left
    assert shown.eta_s() == pytest.approx(140)
    assert "10 records/min" in shown.status_text()
    only_errors = view(Stats(errors=50), total=100, already=0)
    clock += 60
    assert only_errors.records_per_min() is None
    assert "- records/min" in only_errors.status_text()


def test_a_resumed_job_counts_its_finished_records_once(clock, view):
    stats = Stats(skipped=96, done=2, errors=1, in_flight=1, hit_rate=0.5)
    shown = view(stats, total=100, already=96)
    clock += 30
    text = shown.status_text()
    assert text.startswith("sparkops: 99/100 finished: 2 done, 1 errors, 1 in flight")
    assert "prefix cache hit 50.0%" in text and "ETA 0:00:10" in text


def test_without_progress_no_status_line(capsys, clock, view):
    stats = Stats()
    with view(stats, total=10, already=0, enabled=False, status_interval=1) as shown:
        for _ in range(10):
            clock += 1
            stats.done += 1
            shown.update()
    assert capsys.readouterr().err == ""


def test_no_line_before_the_interval_however_often_the_view_is_refreshed(capsys, clock, view):
    """The pace is the clock's, not the number of refreshes: a thousand updates within 29 s
    print nothing; once the interval has passed, one line."""
    stats = Stats()
    shown = view(stats, total=10_000, already=0, status_interval=30)
    for _ in range(1000):
        clock += 0.029
        stats.done += 1
        shown.update()
    assert capsys.readouterr().err == ""
    clock += 1.5
    shown.update()
    shown.update()
    assert capsys.readouterr().err.count("\n") == 1


def test_the_status_line_holds_counts_only(view):
    """Every field of the line is a count, a rate, a duration or an endpoint's state."""
    text = view(Stats(done=3, errors=1), total=5, already=0).status_text()
    shape = (
        r"sparkops: [\d,]+/[\d,]+ finished: [\d,]+ done, [\d,]+ errors, [\d,]+ in flight; "
        r"(- |[\d,]+ )records/min; (hit -|prefix cache hit [\d.]+%); "
        r"ETA (-|[\d:]+( days?, [\d:]+)?)"
    )
    assert re.fullmatch(shape, text), text


def test_the_journal_reader_knows_the_status_line_and_nothing_else(clock, view):
    """`sparkops batch units` (status.yml) finds a job's last status line in its unit's journal
    by the line's opening (jobunit/progress.py): every status line the view writes matches,
    the other lines a job writes do not."""
    stats = Stats(done=1_234, errors=5, in_flight=64, hit_rate=0.875)
    shown = view(stats, total=20_000, already=0)
    clock += 3600
    assert PROGRESS_LINE.match(shown.status_text())
    others = (
        "sparkops: warning: serving changed: the model is now tiny-2",
        "sparkops: endpoint http://127.0.0.1:8000 stalled: nothing advanced for 120 s",
        "sparkops: 3 of 20000 records are errors; the commonest cause: HTTP 400",
        "sparkops: resuming: 1,234 of 20,000 records already finished",
    )
    assert not any(PROGRESS_LINE.match(line) for line in others)
