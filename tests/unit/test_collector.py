"""The job's collector settings (batch/collector.py): set while the job runs, put back after."""

from __future__ import annotations

import gc

import pytest

from sparkops.batch import collector


def test_a_job_freezes_the_start_up_heap_and_collects_the_young_later() -> None:
    before = gc.get_threshold()
    survivor = [object() for _ in range(10)]  # alive at the job's start: frozen with the rest
    with collector.tuned_for_job():
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > len(survivor)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_settings_come_back_when_the_job_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), collector.tuned_for_job():
        raise RuntimeError("the job stopped")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cycles_made_during_the_job_are_still_collected() -> None:
    class Node:
        pass

    with collector.tuned_for_job():
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        del a, b
        assert gc.collect() >= 2
