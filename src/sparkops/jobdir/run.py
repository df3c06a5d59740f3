"""One run of a job folder: the handle a `batch run` holds from the lock to the end line.

Opening a run is a fixed sequence, and each step guards the next: the lock (one run per
folder), the folder checked or made and the manifest compared (a different experiment is
refused before anything moves), `--retry-errors` taking the error lines out, the prefix
record, the run's number (one more than the "start" lines in runs.jsonl), the pipeline's
copy saved when the folder has none (jobdir/pipeline_copy.py; never rewritten), and the
journal opened (its finished keys are the resume). `JobRun.open` does them in that order and
undoes them in reverse, so a caller cannot forget one or take them out of order.

The handle is the run's only appender of events (runs.jsonl) and samples (timeline.jsonl):
the job's start and end lines, the stall watch's changes and the sampler's /metrics samples
all go through `log` and `sample`, so each file has one writer per run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkops.jobdir import lines
from sparkops.jobdir.durable import append_json, write_json_atomic
from sparkops.jobdir.folder import (
    PREFIX,
    RUNS,
    TIMELINE,
    Manifest,
    drop_errors,
    lock_job_dir,
    prepare_dir,
)
from sparkops.jobdir.journal import Journal
from sparkops.jobdir.pipeline_copy import PipelineSource, keep_pipeline


@dataclass
class JobRun:
    """An open run: its folder, journal and number; whether it resumed a job, how many
    error records `--retry-errors` set to be sent again, and why the pipeline's copy could
    not be saved (None: saved now or before, or none to save)."""

    directory: Path
    journal: Journal
    number: int
    resumed: bool
    retried: int = 0
    copy_warning: str | None = None

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        directory: Path,
        manifest: Manifest,
        *,
        key_field: str,
        restart: bool = False,
        retry_errors: bool = False,
        prefix: dict[str, Any] | None = None,
        fsync_interval: float = 1.0,
        pipeline: PipelineSource | None = None,
    ) -> Iterator[JobRun]:
        """Lock, prepare, drop errors (`retry_errors`), write the prefix record, number the
        run, save `pipeline` unless the folder holds its copy, and open the journal; on
        leaving, close the journal and free the lock.

        Raises UserError (nothing changed) when another run holds the folder or it holds
        another experiment."""
        with lock_job_dir(directory):
            resumed = prepare_dir(directory, manifest, restart)
            retried = drop_errors(directory) if retry_errors else 0
            if prefix is not None:
                write_json_atomic(directory / PREFIX, prefix)
            number = 1 + sum(1 for r in lines.run_events(directory / RUNS) if r.event == "start")
            kept = None
            if pipeline is not None:
                kept = keep_pipeline(directory, pipeline, manifest.pipeline_fingerprint, number)
            journal = Journal(directory, key_field, fsync_interval)
            journal.open()
            try:
                yield cls(directory, journal, number, resumed, retried, kept)
            finally:
                journal.close()

    @property
    def finished(self) -> int:
        """Records of the job finished so far, every run (done or error)."""
        return self.journal.done_ok + self.journal.done_err

    def log(self, event: lines.RunEvent) -> None:
        """One line of the job log (runs.jsonl): start, end, a stall change."""
        append_json(self.directory / RUNS, event.to_json())

    def sample(self, sample: lines.TimelineSample) -> None:
        """One /metrics sample of one endpoint (timeline.jsonl)."""
        append_json(self.directory / TIMELINE, sample.to_json())
