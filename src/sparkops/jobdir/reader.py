"""A job folder as its readers see it (`JobFolder`): every file's path and its lenient reader
in one place, so no reader (`report`, `compare`, `bench`, `plan`, the coming HTML report and
methods section) joins a path of the folder or picks a line reader itself.

The writer's handle is jobdir/run.JobRun (one run, from the lock to the end line); this is
the readers': it takes no lock and changes nothing, and a reader may hold it while a run
appends (each file is read as far as its last complete line). Each method reads its file
afresh, as the file stands; what each line means is jobdir/lines.py's business, report.json's
jobdir/job_report.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkops.jobdir import lines
from sparkops.jobdir.durable import read_json_file
from sparkops.jobdir.folder import JobDir, Manifest, load_manifest
from sparkops.jobdir.job_report import JobReport, PrefixRecord
from sparkops.jobdir.pipeline_copy import SavedPipeline, read_saved
from sparkops.jobdir.serving_lines import ServingRecord, serving_lines


@dataclass(frozen=True)
class JobFolder:
    """The readers' handle on one job folder (`path`, a batch run's --out)."""

    path: Path

    @classmethod
    def of(cls, path: Path) -> JobFolder:
        """The job folder `path` names: the folder itself, or the folder of a file in it (a
        results.jsonl given for its run)."""
        return cls(path if path.is_dir() else path.parent)

    @property
    def files(self) -> JobDir:
        """The folder's file paths (results, manifest, runs, timeline, serving, prefix,
        report.json, report.md, the plot)."""
        return JobDir(self.path)

    def manifest(self) -> Manifest:
        """The manifest, validated; a folder that is not a job, or an unusable manifest, is a
        UserError naming the fix (folder.load_manifest)."""
        return load_manifest(self.path)

    def prefix(self) -> PrefixRecord:
        """prefix.json, empty when absent or unreadable (it only feeds the hit-rate ceiling)."""
        path = self.files.prefix
        return PrefixRecord.from_json(read_json_file(path) if path.is_file() else None)

    def results(
        self, damage: lines.ResultsDamage
    ) -> Iterator[tuple[dict[str, Any], lines.Outcome]]:
        """Each record's first results line with its outcome, counting the lines that count no
        record into `damage` (lines.read_results)."""
        return lines.read_results(self.files.results, damage)

    def finished(self) -> Iterator[lines.Finished]:
        """Every results line, read with its timing (bench's sweep levels)."""
        return lines.finished(self.files.results)

    def meta_timings(self) -> Iterator[lines.Timing]:
        """An OpenAI batch job's timings and token counts (openai-meta.jsonl)."""
        return lines.meta_timings(self.files.meta)

    def runs(self) -> Iterator[lines.RunEvent]:
        """The job log (runs.jsonl): starts, ends, stalls and rejoins."""
        return lines.run_events(self.files.runs)

    def timeline(self) -> Iterator[lines.TimelineSample]:
        """The /metrics samples that have a time (timeline.jsonl)."""
        return lines.timeline_samples(self.files.timeline)

    def serving(self) -> Iterator[ServingRecord]:
        """The serving record (serving.jsonl): every start, change and other-model line."""
        return serving_lines(self.files.serving)

    def saved_pipeline(self) -> SavedPipeline | None:
        """The index of the pipeline the job keeps (pipeline/index.json, jobdir/pipeline_copy.py):
        None when it keeps none (a job from before the copy, an OpenAI batch job); an index
        there but unreadable is a UserError (pipeline_copy.CopyDamaged)."""
        return read_saved(self.path)

    def report(self) -> JobReport | None:
        """report.json read back (job_report.JobReport.from_json); None when the job has no
        readable report yet (`sparkops report DIR` writes it)."""
        path = self.files.report_json
        data = read_json_file(path) if path.is_file() else None
        return JobReport.from_json(data) if isinstance(data, dict) else None
