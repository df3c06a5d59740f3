"""A job's metrics figures from its folder (`FolderFigures`), read as the files grow.

The job's Prometheus metrics (metrics/job_metrics.py) are made from a `JobSnapshot`; this
builds one from the job folder alone: records done and failed (by the failure's kind and
HTTP status), each step's answers, unclear and truncated answers and prompt tokens (cached,
and reusable: the ceiling from prefix.json's probe), the runs, the stalls, the serving
record, the answers a constraint did not hold. The running client's exporter
(batch/exporter.py) keeps one and adds what only the running client knows (calls in flight,
the pace and ETA, the stall state now); `sparkops batch metrics DIR` reads one once for a
job that is not running. One reader, so both say the same figures.

Incremental: each `refresh` reads only the complete lines appended since the last one (a
scrape every 15 s must not re-read a day's results.jsonl), which is sound because a run
only appends to these files; what happens before a run (a torn tail cut, `--retry-errors`,
`--restart`) happens before the client's exporter starts. Each record counts once, by its
first line, as jobdir/lines.read_results counts it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops import json_codec
from sparkops.jobdir import lines
from sparkops.jobdir.durable import read_json_file
from sparkops.jobdir.folder import META, PREFIX, RESULTS, RUNS, SERVING, load_manifest, lock_holder
from sparkops.jobdir.serving_lines import ServingChange, ServingStart
from sparkops.jobdir.step_totals import StepTotals
from sparkops.metrics.job_metrics import JobSnapshot, ServingFigures, StepFigures

# The kind label of an error whose line names no failure kind (written before failures were
# typed, or an OpenAI job's meta line lost to a kill between its two writes).
UNKNOWN_KIND = "unknown"


class _Tail:
    """The complete JSON lines appended to one file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_lines(self) -> Iterator[dict[str, Any]]:
        """Objects of the lines completed since the last call (a damaged line is skipped; a
        line still being written is left for the next call)."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for raw in data[:end].splitlines():
            try:
                obj = json_codec.decode(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


def usage_possible(prompt: int, cached: int | None) -> bool:
    """The report's rule (report/steps.usage_possible): figures below zero or more cached
    than prompt tokens cannot be true and are left out of the token sums."""
    return prompt >= 0 and (cached is None or 0 <= cached <= prompt)


@dataclass
class _StepSums:
    """Streaming sums of one step: the report's token sums (StepTotals, over the answers whose
    usage figures can be true), plus every answer, the unclear and the truncated ones."""

    answers: int = 0
    unclear: int = 0
    truncated: int = 0
    tokens: StepTotals = field(default_factory=StepTotals)

    def add(self, usage: lines.StepUsage, parsed: Any, reusable: int | None) -> None:
        self.answers += 1
        self.unclear += parsed is False
        self.truncated += usage.cut
        if usage_possible(usage.prompt_tokens, usage.cached_tokens):
            self.tokens.add(usage.prompt_tokens, usage.cached_tokens, reusable)

    def figures(self) -> StepFigures:
        t = self.tokens
        return StepFigures(
            answers=self.answers,
            unclear=self.unclear,
            truncated=self.truncated,
            prompt_tokens=t.prompt_tokens,
            cached_tokens=t.cached_tokens if t.cached_known else None,
            reusable_tokens=t.reusable_tokens if t.ceiling_known else None,
        )


@dataclass
class _Runs:
    """runs.jsonl: runs started, stalls per endpoint (and which are stalled in the latest
    run), answers a constraint did not hold (each run's end line)."""

    started: int = 0
    stalls: Counter[str] = field(default_factory=Counter)
    stalled: dict[str, bool] = field(default_factory=dict)
    unheld: Counter[str] = field(default_factory=Counter)

    def add(self, event: lines.RunEvent) -> None:
        if event.event == "start":
            self.started += 1
            self.stalled = {}
        elif event.event == "stalled" and event.endpoint is not None:
            self.stalls[event.endpoint] += 1
            self.stalled[event.endpoint] = True
        elif event.event == "rejoined" and event.endpoint is not None:
            self.stalled[event.endpoint] = False
        elif event.event == "end":
            self.unheld.update(event.unheld)


@dataclass
class _Serving:
    """serving.jsonl: each endpoint's last identity, the epoch, the changes recorded."""

    identities: dict[str, dict[str, str]] = field(default_factory=dict)
    epoch: int = 0
    changes: int = 0

    def add(self, obj: dict[str, Any]) -> None:
        """One serving line (a start or a change; other-model lines change nothing here)."""
        event = obj.get("event")
        line: ServingStart | ServingChange
        if event == "start":
            line = ServingStart.from_json(obj)
        elif event == "change":
            line = ServingChange.from_json(obj)
        else:
            return
        if line.serving is not None:
            self.epoch = max(self.epoch, line.serving)
        if isinstance(line, ServingStart):
            self.identities.update(line.identities())
            self.changes += len(line.changes)
        elif isinstance(line, ServingChange):
            if line.identity is not None:
                self.identities[line.endpoint] = line.identity
            self.changes += bool(line.changes)


def reusable_tokens(prefix_json: Path) -> dict[str, int]:
    """Per probed step, the whole shared blocks of its prefix (prefix.json, written by the
    pre-flight at every run's start); {} without a probe or with an unreadable file (it only
    drops the ceiling)."""
    data = read_json_file(prefix_json) if prefix_json.is_file() else None
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, dict):
        return {}
    found = {
        str(name): step.get("reusable_tokens")
        for name, step in steps.items()
        if isinstance(step, dict)
    }
    return {
        name: n
        for name, n in found.items()
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0
    }


def failure_label(failure: Any) -> tuple[str, str]:
    """(kind, HTTP status or "") of a line's `failure` object; the kind `UNKNOWN_KIND`
    without one."""
    if not isinstance(failure, dict) or not isinstance(failure.get("kind"), str):
        return UNKNOWN_KIND, ""
    code = failure.get("code")
    valid = isinstance(code, int) and not isinstance(code, bool) and code > 0
    return failure["kind"], str(code) if valid else ""


class FolderFigures:
    """A job folder's figures, kept up to date by `refresh` (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        """Raises UserError (folder.load_manifest: the fix named) for a folder that is not
        a job."""
        self.directory = directory
        self.manifest = load_manifest(directory)
        self.reusable = reusable_tokens(directory / PREFIX)
        self._results = _Tail(directory / RESULTS)
        self._meta = _Tail(directory / META)
        self._runs_file = _Tail(directory / RUNS)
        self._serving_file = _Tail(directory / SERVING)
        self._seen: set[lines.Key] = set()
        self.done = 0
        self.errors = 0
        self.failed: Counter[tuple[str, str]] = Counter()
        self.last_record_time: float | None = None
        self.steps: dict[str, _StepSums] = {}
        self.runs = _Runs()
        self.serving = _Serving()

    def refresh(self) -> FolderFigures:
        """Read what the files gained since the last refresh."""
        for obj in self._results.new_lines():
            self._result(obj)
        for obj in self._meta.new_lines():
            self._openai_meta(obj)
        for obj in self._runs_file.new_lines():
            self.runs.add(lines.RunEvent.from_json(obj))
        for obj in self._serving_file.new_lines():
            self.serving.add(obj)
        return self

    def _result(self, obj: dict[str, Any]) -> None:
        result = lines.outcome(obj)
        if result.key in self._seen:
            return
        self._seen.add(result.key)
        if result.ok:
            self.done += 1
        else:
            self.errors += 1
            if "status" in obj:  # a pipeline line names its failure; an OpenAI line's meta does
                self.failed[failure_label(obj.get("failure"))] += 1
        if "status" in obj:
            self._finished_at(obj.get("t"))
            self._steps(obj.get("steps"))

    def _openai_meta(self, obj: dict[str, Any]) -> None:
        """An OpenAI job's meta line: its time, token counts and (an error's) failure."""
        self._finished_at(obj.get("t"))
        if obj.get("ok") is False:
            self.failed[failure_label(obj.get("failure"))] += 1
        self._steps(obj.get("steps"))

    def _finished_at(self, t: Any) -> None:
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            self.last_record_time = max(self.last_record_time or 0.0, float(t))

    def _steps(self, steps: Any) -> None:
        for entry in steps if isinstance(steps, list) else ():
            if not isinstance(entry, dict):
                continue
            usage = lines.StepUsage.from_json(entry)
            sums = self.steps.setdefault(usage.step, _StepSums())
            sums.add(usage, entry.get("parsed"), self.reusable.get(usage.step))

    def snapshot(self) -> JobSnapshot:
        """The figures now, as far as the folder says them (running: a run holds its lock;
        the stall state is the latest run's, shown only while it runs)."""
        running = lock_holder(self.directory) is not None
        failed = Counter(self.failed)
        # errors whose kind no line named (a lost meta line) still count, as unknown
        if (unnamed := self.errors - sum(failed.values())) > 0:
            failed[(UNKNOWN_KIND, "")] += unnamed
        return JobSnapshot(
            folder=self.directory.resolve().name,
            kind=self.manifest.kind,
            running=running,
            runs=self.runs.started,
            input_records=self.manifest.total,
            done=self.done,
            failed=dict(failed),
            last_record_time=self.last_record_time,
            steps={name: sums.figures() for name, sums in self.steps.items()},
            stalled=dict(self.runs.stalled) if running else {},
            stalls=dict(self.runs.stalls),
            serving=ServingFigures(
                dict(self.serving.identities), self.serving.epoch, self.serving.changes
            ),
            unheld=dict(self.runs.unheld),
        )
