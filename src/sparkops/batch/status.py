"""`sparkops batch status DIR`: how far a job got, from its files alone.

Errors are told apart by kind (batch/lines.py): a record error is the record's own (the
server refused that request; `batch run --retry-errors` sends it again once its cause is
fixed); any other kind was recorded by an older client for a failure that was not the
record's; `remaining` are records with no line yet (a resume sends them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkops.batch import lines
from sparkops.batch.jobdir import JobDir, load_manifest
from sparkops.batch.lock import lock_holder


def job_status(directory: Path) -> dict[str, Any]:
    """Counts from the job's files, and the pid of a run working on it now (None if none)."""
    manifest = load_manifest(directory)
    job = JobDir(directory)
    done = record_errors = other_errors = 0
    seen: set[lines.Key] = set()
    for result in lines.outcomes(job.results):
        if result.key in seen:
            continue
        seen.add(result.key)
        done += result.ok
        record_errors += result.record_error
        other_errors += not result.ok and not result.record_error
    runs = 0
    last_start = None
    ended: set[int] = set()
    for event in lines.run_events(job.runs):
        if event.event == "start":
            runs += 1
            last_start = event.run
        elif event.event == "end":
            ended.add(event.run)
    total = manifest.total
    errors = record_errors + other_errors
    return {
        "total": total,
        "done": done,
        "errors": errors,
        "record_errors": record_errors,
        "other_errors": other_errors,
        "remaining": max(0, total - done - errors),
        "runs": runs,
        "last_run_finished": last_start is not None and last_start in ended,
        "complete": done + errors >= total and (total > 0 or runs > 0),
        "empty_input": total == 0,
        "running_pid": lock_holder(directory),
    }


def status_line(directory: Path, st: dict[str, Any]) -> str:
    """`batch status` in one sentence: finished, record errors, other errors, unfinished."""
    if st["empty_input"]:
        return f"{directory}: the job's input held no records; nothing to run"
    state = "complete" if st["complete"] else "incomplete"
    if st["running_pid"]:
        state += f", running (pid {st['running_pid']})"
    errors = f"{st['record_errors']} record errors"
    if st["other_errors"]:
        errors += f", {st['other_errors']} errors that were not the record's (server or network)"
    line = (
        f"{directory}: {state}: {st['done']} done, {errors}, {st['remaining']} remaining of "
        f"{st['total']} ({st['runs']} run(s))"
    )
    if st["errors"]:
        line += "; `sparkops batch run ... --retry-errors` sends the errors again"
    return line
