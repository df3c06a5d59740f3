"""One run's handle of a job folder (jobdir/run.py): lock, preparation, --retry-errors, the
prefix record, the journal and the run number, in that order; the run's appender of events
and samples."""

from __future__ import annotations

import json
import stat

import pytest

from sparkops.errors import UserError
from sparkops.jobdir import lines
from sparkops.jobdir.folder import PREFIX, RESULTS, RUNS, TIMELINE, lock_holder
from sparkops.jobdir.run import JobRun
from tests.plugins.job_dir import manifest


def _result(rid: str, ok: bool) -> dict[str, object]:
    if ok:
        return lines.ResultLine(rid, "done", 1, 1, 1.0, final="yes").to_json()
    return lines.ResultLine(
        rid, "error", 2, 1, 1.0, error="HTTP 400", error_kind="record"
    ).to_json()


def test_a_run_numbers_itself_resumes_and_appends_its_lines(tmp_path):
    job = tmp_path / "job"
    with JobRun.open(job, manifest(), key_field="id", prefix={"steps": {}}) as run:
        assert (run.number, run.resumed, run.retried) == (1, False, 0)
        assert lock_holder(job) is not None  # held while the run is open
        run.journal.append(_result("r1", True))
        run.log(lines.RunEvent("start", run.number, 1.0, {"concurrency": 4}))
        sample = lines.TimelineSample(2.0, run.number, "http://e", {"running": 1.0}, 1, 0, 0.1)
        run.sample(sample)
        run.log(lines.RunEvent("end", run.number, 3.0))
        assert run.finished == 1
    assert lock_holder(job) is None  # freed on leaving
    assert json.loads((job / PREFIX).read_text()) == {"steps": {}}
    assert stat.S_IMODE((job / RUNS).stat().st_mode) == 0o600
    assert [e.event for e in lines.run_events(job / RUNS)] == ["start", "end"]
    assert [s.run for s in lines.timeline_samples(job / TIMELINE)] == [1]
    with JobRun.open(job, manifest(), key_field="id") as again:
        assert (again.number, again.resumed, again.finished) == (2, True, 1)
        assert "r1" in again.journal.done


def test_retry_errors_takes_the_error_lines_out_before_the_journal_opens(tmp_path):
    job = tmp_path / "job"
    with JobRun.open(job, manifest(), key_field="id") as run:
        run.journal.append(_result("r1", True))
        run.journal.append(_result("r2", False))
    with JobRun.open(job, manifest(), key_field="id", retry_errors=True) as run:
        assert run.retried == 1
        assert run.journal.done == {"r1"}  # r2 is sent again
    assert [json.loads(x)["id"] for x in (job / RESULTS).read_text().splitlines()] == ["r1"]


def test_a_second_run_and_another_experiment_are_refused_before_anything_moves(tmp_path):
    job = tmp_path / "job"
    with JobRun.open(job, manifest(), key_field="id") as run:
        run.journal.append(_result("r1", True))
        second = JobRun.open(job, manifest(), key_field="id")
        with pytest.raises(UserError, match="in use by another sparkops batch run"):
            second.__enter__()
    before = sorted(p.name for p in job.iterdir())
    other = JobRun.open(job, manifest(pipeline_fingerprint="p2"), key_field="id")
    with pytest.raises(UserError, match="different pipeline"):
        other.__enter__()
    assert sorted(p.name for p in job.iterdir()) == before
    assert lock_holder(job) is None  # the refused run left the lock free
