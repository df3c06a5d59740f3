"""What a job folder says about how its results were made, as facts that name their file.

Each fact is an item, its value and its source (the job folder's file it was read from, so a
reviewer can trace it), or a marked place for what the folder cannot hold (`todo`). The facts
are gathered once from the folder's readers (jobdir/reader.JobFolder): `JobFacts.read`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.jobdir import digest, lines
from sparkops.jobdir.folder import Manifest
from sparkops.jobdir.reader import JobFolder
from sparkops.jobdir.serving_lines import OtherModel, ServingChange, ServingStart
from sparkops.jobdir.status import error_causes
from sparkops.jobdir.verification import Verification, verify
from sparkops.privacy import is_secret_name

TODO = "TO COMPLETE"
NOT_IN_FOLDER = "not in the job folder"


@dataclass(frozen=True)
class Fact:
    """One row of the methods table: an item, its value, and the file it comes from."""

    item: str
    value: str
    source: str
    todo: bool = False


def todo(item: str, what: str) -> Fact:
    """A marked place for what the kit cannot know."""
    return Fact(item, f"**[{TODO}: {what}]**", NOT_IN_FOLDER, True)


@dataclass(frozen=True)
class RunSpan:
    """One run of the job (runs.jsonl): when it started and ended, how it stopped."""

    number: int
    started: float | None
    ended: float | None
    stopped: str | None
    active_s: float | None
    concurrency: int | None


@dataclass(frozen=True)
class Served:
    """What served the job (serving.jsonl): the first run's endpoints and context, and every
    change or other model met later."""

    identity: dict[str, str]
    endpoints: int
    unreachable: int
    kit_version: str | None
    gpu: dict[str, Any] | None
    stack: dict[str, Any] | None
    changes: tuple[str, ...] = ()
    other_models: tuple[str, ...] = ()

    @property
    def flags(self) -> dict[str, str]:
        """The serving command's options (`--flag value`; a flag alone is "on"), secrets out."""
        command = (self.stack or {}).get("command")
        return command_flags(command) if isinstance(command, list) else {}


def command_flags(command: list[Any]) -> dict[str, str]:
    """`--name value`, `--name=value` and a bare `--name` (on) from a command line; a flag
    whose name says key, token, secret or password is left out."""
    words = [str(x) for x in command]
    flags: dict[str, str] = {}
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, sep, value = word.partition("=")
        if not sep:
            following = words[index + 1] if index + 1 < len(words) else ""
            value = following if following and not following.startswith("--") else "on"
        if not is_secret_name(name.lstrip("-").replace("-", "_")):
            flags[name] = value
    return flags


@dataclass(frozen=True)
class Flow:
    """What happened to every record (results.jsonl): counted once each, by its first line."""

    total: int
    done: int
    record_errors: int
    other_errors: int
    causes: tuple[tuple[str, int], ...]
    decisions: tuple[tuple[str, int], ...]
    cut: int
    damaged: int
    repeated: int
    calls: tuple[tuple[str, int], ...]  # per step, the calls of finished records
    prompt_tokens: int
    completion_tokens: int
    first: float | None  # the first finished record's start (t0)
    last: float | None  # the last one's end (t)

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.done - self.record_errors - self.other_errors)


@dataclass(frozen=True)
class JobFacts:
    """Everything the methods section says about one job, read from its folder."""

    directory: Path
    manifest: Manifest
    runs: tuple[RunSpan, ...]
    served: Served | None
    flow: Flow
    verification: Verification
    results_sha256: str | None  # results.jsonl as it is now
    steps_seen: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def read(cls, directory: Path) -> JobFacts:
        folder = JobFolder(directory)
        manifest = folder.manifest()  # not a job folder: one line with the fix
        flow, steps = read_flow(folder, manifest)
        results = folder.files.results
        return cls(
            directory,
            manifest,
            read_runs(folder),
            read_served(folder),
            flow,
            verify(directory),
            digest.digest_file(results).sha256 if digest.readable(results) else None,
            steps,
        )

    @property
    def seal(self) -> digest.Seal | None:
        return digest.last_seal(self.directory)


def read_runs(folder: JobFolder) -> tuple[RunSpan, ...]:
    """Every run's span from its start and end lines (a run killed has no end)."""
    starts: dict[int, lines.RunEvent] = {}
    ends: dict[int, lines.RunEvent] = {}
    for event in folder.runs():
        if event.event == "start":
            starts.setdefault(event.run, event)
        elif event.event == "end":
            ends[event.run] = event
    spans = []
    for number, start in sorted(starts.items()):
        end = ends.get(number)
        stopped = end.extra.get("stopped") if end else None
        spans.append(
            RunSpan(
                number,
                start.t,
                end.t if end else None,
                stopped if isinstance(stopped, str) else None,
                end.active_s if end else None,
                start.concurrency,
            )
        )
    return tuple(spans)


def read_served(folder: JobFolder) -> Served | None:
    """The first start line's endpoints and context, and every later change (None: the job
    has no serving record)."""
    first: ServingStart | None = None
    changes: list[str] = []
    others: dict[tuple[str, str], None] = {}
    for line in folder.serving():
        if isinstance(line, ServingStart):
            if first is None:
                first = line
            changes += [
                f"run {line.run}: {c.field} {c.before} -> {c.after} (since the job's last run)"
                for cs in line.changes.values()
                for c in cs
            ]
        elif isinstance(line, ServingChange):
            changes += [f"run {line.run}: {c.field} {c.before} -> {c.after}" for c in line.changes]
        elif isinstance(line, OtherModel):
            others[(line.model, line.expected)] = None
    if first is None:
        return None
    identities = list(first.identities().values())
    gpu, stack = first.gpu, first.stack
    return Served(
        {str(k): str(v) for k, v in identities[0].items()} if identities else {},
        len(first.endpoints),
        len(first.endpoints) - len(identities),
        str(first.kit_version) if first.kit_version is not None else None,
        gpu if isinstance(gpu, dict) else None,
        stack if isinstance(stack, dict) else None,
        tuple(dict.fromkeys(changes)),
        tuple(f"answers from {m!r}, not the pipeline's {e!r}" for m, e in others),
    )


def read_flow(folder: JobFolder, manifest: Manifest) -> tuple[Flow, tuple[str, ...]]:
    """Each record's fate, its decision and its calls, from its first results line; token
    counts from the results lines (a pipeline job) or the OpenAI meta lines."""
    damage = lines.ResultsDamage()
    done = record_errors = other_errors = cut = prompt = completion = 0
    decisions: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    first: float | None = None
    last: float | None = None
    for obj, result in folder.results(damage):
        done += result.ok
        record_errors += result.record_error
        other_errors += not result.ok and not result.record_error
        cut += result.cut > 0
        if result.final is not None:
            decisions[result.final] += 1
        timing = lines.read_finished(obj).timing
        if timing is None:
            continue
        for step in timing.steps:
            calls[step.step] += 1
            prompt += max(0, step.prompt_tokens)
            completion += max(0, step.completion_tokens)
        if timing.t0 is not None:
            first = timing.t0 if first is None else min(first, timing.t0)
        if timing.t is not None:
            last = timing.t if last is None else max(last, timing.t)
    if manifest.kind == "openai":
        for meta in folder.meta_timings():
            prompt += sum(max(0, s.prompt_tokens) for s in meta.steps)
            completion += sum(max(0, s.completion_tokens) for s in meta.steps)
    causes = error_causes(folder.path).most_common()
    flow = Flow(
        manifest.total,
        done,
        record_errors,
        other_errors,
        tuple(causes),
        tuple(decisions.most_common()),
        cut,
        damage.damaged,
        damage.repeated,
        tuple(calls.items()),
        prompt,
        completion,
        first,
        last,
    )
    return flow, tuple(calls)


def when(t: float | None) -> str:
    """A wall-clock stamp as UTC, to the minute (what a methods section gives)."""
    if t is None:
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))
