"""`sparkops batch status DIR`: how far a job got, from its files alone.

Errors are told apart by kind (jobdir/lines.py): a record error is the record's own (the
server refused that request; `batch run --retry-errors` sends it again once its cause is
fixed); any other kind was recorded by an older client for a failure that was not the
record's; `remaining` are records with no line yet (a resume sends them).

Answers from another model than the pipeline's (a router's fallback, accepted without
`--strict-serving`) are counted here too (`other_model_answers`), for `batch status` and the
report alike: the job warns once on the terminal, and the folder must say it afterwards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.jobdir import lines
from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import SERVING, JobDir, load_manifest, lock_holder
from sparkops.jobdir.serving_lines import OtherModel, ServingRecord, serving_lines


@dataclass(frozen=True, slots=True)
class OtherModelAnswers:
    """Answers in the job's results that named `model`, not the pipeline's `expected`."""

    model: str
    expected: str
    answers: int

    def sentence(self) -> str:
        """What `batch status` and report.md say about them."""
        noun = "answer" if self.answers == 1 else "answers"
        return (
            f"{self.answers:,} {noun} came from model {self.model!r}, not the pipeline's "
            f"{self.expected!r} (each step's `model` in results.jsonl says which)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "expected": self.expected, "answers": self.answers}


def answer_models(timing: lines.Timing | None) -> Iterable[str]:
    """The model each answer of a finished record named (answers that named none left out)."""
    steps = () if timing is None else timing.steps
    return (s.model for s in steps if s.model is not None)


def other_model_answers(
    models: Mapping[str, int], serving: Iterable[ServingRecord]
) -> tuple[OtherModelAnswers, ...]:
    """Per other model the job met (its serving.jsonl `other-model` lines: the pipeline's model
    is recorded there, and nowhere else in the folder), how many of the counted answers named
    it (`models`: answers per model). A model whose answers were not kept (`--strict-serving`
    stopped the job) has none and is left out."""
    pairs = dict.fromkeys((x.model, x.expected) for x in serving if isinstance(x, OtherModel))
    found = (OtherModelAnswers(m, e, models.get(m, 0)) for m, e in pairs)
    return tuple(x for x in found if x.answers)


@dataclass(frozen=True, slots=True)
class JobStatus:
    """How far a job got: `batch status` prints `as_dict()` with --json, else `status_line`."""

    total: int
    done: int
    record_errors: int
    other_errors: int
    runs: int
    last_run_finished: bool
    running_pid: int | None
    # records with an answer cut off at a step's max_tokens (finish_reason "length")
    truncated: int = 0
    # results lines that count no record (damaged, or repeating a finished record)
    damage: lines.ResultsDamage = field(default_factory=lines.ResultsDamage)
    # answers from a model other than the pipeline's (kept without --strict-serving)
    other_models: tuple[OtherModelAnswers, ...] = ()
    # per endpoint, answers outside a constrained step's allowed set (sent again, never kept)
    unheld: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.record_errors + self.other_errors

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.done - self.errors)

    @property
    def complete(self) -> bool:
        return self.done + self.errors >= self.total and (self.total > 0 or self.runs > 0)

    @property
    def empty_input(self) -> bool:
        return self.total == 0

    def as_dict(self) -> dict[str, Any]:
        """`batch status --json`'s object (its keys in this order are a documented output)."""
        return {
            "total": self.total,
            "done": self.done,
            "errors": self.errors,
            "record_errors": self.record_errors,
            "other_errors": self.other_errors,
            "remaining": self.remaining,
            "runs": self.runs,
            "last_run_finished": self.last_run_finished,
            "complete": self.complete,
            "empty_input": self.empty_input,
            "running_pid": self.running_pid,
            "truncated": self.truncated,
            "damaged_lines": self.damage.damaged,
            "repeated_lines": self.damage.repeated,
            "other_model_answers": [x.as_dict() for x in self.other_models],
            "unheld_answers": dict(self.unheld),
        }


def job_status(directory: Path) -> JobStatus:
    """Counts from the job's files, and the pid of a run working on it now (None if none)."""
    manifest = load_manifest(directory)
    job = JobDir(directory)
    done = record_errors = other_errors = truncated = 0
    damage = lines.ResultsDamage()
    models: Counter[str] = Counter()
    for obj, result in lines.read_results(job.results, damage):
        done += result.ok
        record_errors += result.record_error
        other_errors += not result.ok and not result.record_error
        truncated += result.cut > 0
        models.update(answer_models(lines.read_finished(obj).timing))
    runs = 0
    last_start = None
    ended: set[int] = set()
    unheld: Counter[str] = Counter()
    for event in lines.run_events(job.runs):
        if event.event == "start":
            runs += 1
            last_start = event.run
        elif event.event == "end":
            ended.add(event.run)
            unheld.update(event.unheld)
    return JobStatus(
        manifest.total,
        done,
        record_errors,
        other_errors,
        runs,
        last_start is not None and last_start in ended,
        lock_holder(directory),
        truncated,
        damage,
        other_model_answers(models, serving_lines(directory / SERVING)),
        dict(unheld),
    )


def status_line(directory: Path, st: JobStatus) -> str:
    """`batch status` in one sentence: finished, record errors, other errors, unfinished."""
    if st.empty_input:
        return f"{directory}: the job's input held no records; nothing to run"
    state = "complete" if st.complete else "incomplete"
    if st.running_pid:
        state += f", running (pid {st.running_pid})"
    errors = f"{st.record_errors} record errors"
    if st.other_errors:
        errors += f", {st.other_errors} errors that were not the record's (server or network)"
    line = (
        f"{directory}: {state}: {st.done} done, {errors}, {st.remaining} remaining of "
        f"{st.total} ({st.runs} run(s))"
    )
    if st.errors:
        line += "; `sparkops batch run ... --retry-errors` sends the errors again"
    if st.damage:
        line += "; " + st.damage.sentence()
    if st.truncated:
        line += (
            f"; {st.truncated} record(s) have an answer cut off at a step's max_tokens "
            '(finish_reason "length" in results.jsonl): raise that step\'s max_tokens'
        )
    for other in st.other_models:
        line += "; " + other.sentence()
    for endpoint, count in sorted(st.unheld.items()):
        line += (
            f"; {count:,} answer(s) from {endpoint} were outside their step's allowed answers "
            "(it did not hold the structured-output constraint): sent again, none kept"
        )
    return line


def error_causes(directory: Path) -> Counter[str]:
    """Every error line of a job (all runs) by its failure's cause, as the engine typed it
    (`failure.cause`: numbers masked, so one cause is not many): a pipeline line carries it,
    an OpenAI line's meta line does. A line without one (written before failures were
    typed, or whose meta line a kill lost) counts under its error message as written.
    What the run summary names as the commonest cause."""
    job = JobDir(directory)
    meta_causes: dict[lines.Key, str] = {}
    for obj in iter_json_lines(job.meta):
        if (cause := lines.failure_cause(obj.get("failure"))) is not None:
            line = obj.get("line")
            number = line if isinstance(line, int) and not isinstance(line, bool) else 0
            meta_causes[lines.record_key(obj.get("custom_id"), number)] = cause
    causes: Counter[str] = Counter()
    for result in lines.outcomes(job.results):
        if result.error is not None:
            causes[result.cause or meta_causes.get(result.key) or result.error] += 1
    return causes
