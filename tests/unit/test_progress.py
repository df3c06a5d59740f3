"""What a person running a job sees (batch/progress.py): the status line off a terminal."""

from __future__ import annotations

import re

import pytest

from sparkops.batch import progress
from sparkops.batch.engine import Stats
from sparkops.batch.progress import ProgressView


@pytest.fixture
def clock(monkeypatch):
    """The view's monotonic clock, moved by the test."""
    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    return now


def test_off_a_terminal_one_status_line_per_interval_and_one_at_the_end(capsys, clock):
    stats = Stats()
    view = ProgressView(stats, total=200, already=0, status_interval=30)
    assert view.lines  # capsys: stderr is not a terminal
    with view:
        for _ in range(120):  # one minute of the sampler's 0.5 s updates
            clock[0] += 0.5
            stats.done += 1
            view.update()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3  # at 30 s, at 60 s, at the end
    assert lines[0] == (
        "sparkops: 60/200 finished: 60 done, 0 errors, 0 in flight; 120 records/min; hit -; "
        "ETA 0:01:10"
    )
    assert lines[-1].startswith("sparkops: 120/200 finished: 120 done")


def test_records_per_min_counts_records_done_not_errors(clock):
    stats = Stats(done=10, errors=290)
    view = ProgressView(stats, total=1000, already=0)
    clock[0] += 60
    assert view.records_per_min() == pytest.approx(10)
    # the ETA runs on every finished record: 300 a minute, 700 left
    assert view.eta_s() == pytest.approx(140)
    assert "10 records/min" in view.status_text()
    only_errors = ProgressView(Stats(errors=50), total=100, already=0)
    clock[0] += 60
    assert only_errors.records_per_min() is None
    assert "- records/min" in only_errors.status_text()


def test_a_resumed_job_counts_its_finished_records_once(clock):
    stats = Stats(skipped=96, done=2, errors=1, in_flight=1, hit_rate=0.5)
    view = ProgressView(stats, total=100, already=96)
    clock[0] += 30
    text = view.status_text()
    assert text.startswith("sparkops: 99/100 finished: 2 done, 1 errors, 1 in flight")
    assert "prefix cache hit 50.0%" in text and "ETA 0:00:10" in text


def test_without_progress_no_status_line(capsys, clock):
    stats = Stats()
    with ProgressView(stats, total=10, already=0, enabled=False, status_interval=1) as view:
        for _ in range(10):
            clock[0] += 1
            stats.done += 1
            view.update()
    assert capsys.readouterr().err == ""


def test_the_status_line_holds_counts_only():
    """Every field of the line is a count, a rate, a duration or an endpoint's state."""
    text = ProgressView(Stats(done=3, errors=1), total=5, already=0).status_text()
    shape = (
        r"sparkops: [\d,]+/[\d,]+ finished: [\d,]+ done, [\d,]+ errors, [\d,]+ in flight; "
        r"(- |[\d,]+ )records/min; (hit -|prefix cache hit [\d.]+%); "
        r"ETA (-|[\d:]+( days?, [\d:]+)?)"
    )
    assert re.fullmatch(shape, text), text
