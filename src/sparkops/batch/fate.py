"""How a record ends: the results line (and OpenAI meta line) each finished record gets.

Only two fates are written: done (every step answered), or an error that is the record's own
(`Failure.is_records_fault`, batch/outcome.py). A failure that was the server's is never
written: the record stays unfinished and a resume sends it again. An error line carries
`error_kind: "record"` (what `batch status` and `--retry-errors` read) and `failure`: the
failure's kind, HTTP code and cause, so errors are grouped without parsing messages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sparkops.batch.hooks import RunHooks
from sparkops.batch.outcome import Answer, Failure
from sparkops.batch.records import Record
from sparkops.batch.truncation import Truncation
from sparkops.jobdir import openai_lines
from sparkops.jobdir.journal import Journal
from sparkops.jobdir.lines import RECORD_ERROR, ResultLine


@dataclass
class RecordState:
    """A record moving through the pipeline (one call in flight at most)."""

    record: Record
    step: str
    ready_seq: int = 0
    started: float = field(default_factory=time.time)
    # the same moment on the monotonic clock: the record's latency, which no clock step moves
    began: float = field(default_factory=time.monotonic)
    steps: list[dict[str, Any]] = field(default_factory=list)

    def latency_s(self) -> float:
        """Seconds from the record's start until now, on the monotonic clock."""
        return round(time.monotonic() - self.began, 3)


@dataclass
class Stats:
    """Live counters the progress display and the sampler read."""

    total: int = 0
    skipped: int = 0
    done: int = 0
    errors: int = 0
    calls: int = 0
    retries: int = 0
    in_flight: int = 0
    started: float = field(default_factory=time.monotonic)
    hit_rate: float | None = None


def failure_fields(failure: Failure) -> dict[str, Any]:
    """What an error line records about its failure besides the message."""
    out: dict[str, Any] = {"kind": failure.kind.value, "cause": failure.cause}
    if failure.code:
        out["code"] = failure.code
    if failure.alone_after:
        out["alone_after"] = failure.alone_after
    return out


class Fates:
    """Writes finished records to the journal (and the OpenAI meta side file)."""

    def __init__(
        self, journal: Journal, stats: Stats, run: int, hooks: RunHooks | None = None
    ) -> None:
        """hooks: the run's (batch/hooks.py): the serving epoch each line carries, and where
        the warning about answers cut off at max_tokens is said."""
        self.journal = journal
        self.stats = stats
        self.run = run
        self.hooks = RunHooks() if hooks is None else hooks
        # OpenAI batch lines: the kit's own per-request fields go to a side file
        # (openai_lines), opened on the first one, so a pipeline job never has one
        self.meta = openai_lines.MetaWriter(journal.dir)
        # When the last record finished, on the monotonic clock: the run's end line says how
        # long the run was active from it, which a wall-clock step cannot change (`t` can).
        self.last_finish: float | None = None
        # answers cut off at max_tokens, per step
        self.truncation = Truncation(on_warning=self.hooks.say)

    @property
    def serving(self) -> int:
        """The job's serving epoch now (batch/serving.py): 0 as the job found its endpoints,
        +1 at every identity change; each finished record carries it, the boundary in the
        results."""
        return self.hooks.epoch()

    def close(self) -> None:
        self.meta.close()

    def done(self, state: RecordState, final: str) -> None:
        line = ResultLine(
            state.record.id,
            "done",
            state.record.line,
            self.run,
            round(time.time(), 3),
            final=final,
            steps=state.steps,
            t0=round(state.started, 3),
            latency_s=state.latency_s(),
            serving=self.serving,
        )
        self.journal.append(line.to_json())
        self.last_finish = time.monotonic()
        self.stats.done += 1
        self.truncation.count(state.steps)

    def error(
        self,
        rid: str | None,
        line: int,
        failure: Failure,
        steps: list,
        started: float | None = None,
    ) -> None:
        result = ResultLine(
            rid,
            "error",
            line,
            self.run,
            round(time.time(), 3),
            steps=steps,
            error=failure.message,
            error_kind=RECORD_ERROR,  # only the record's own failures end it
            failure=failure_fields(failure),
            t0=None if started is None else round(started, 3),
            serving=self.serving,
        )
        self.journal.append(result.to_json())
        self.last_finish = time.monotonic()
        self.stats.errors += 1

    def openai(
        self, state: RecordState, outcome: Answer | Failure, custom_id: str | None = ""
    ) -> None:
        """Journal an OpenAI batch output line (jobdir/openai_lines builds it), then its meta."""
        rid = state.record.id if custom_id == "" else custom_id
        line = state.record.line
        body: dict[str, Any] | None
        kind: str | None = None
        if isinstance(outcome, Answer):
            status, body, error, request_id = 200, outcome.body, None, outcome.request_id
        else:
            status, body, kind = outcome.code, outcome.body, outcome.kind.value
            error, request_id = outcome.message, outcome.request_id
        ok = openai_lines.is_success(status, body, error)
        self.journal.append(
            openai_lines.output_line(rid, line, status, body, error, request_id, kind)
        )
        meta = openai_lines.meta_line(rid, line, ok, body, self.run, state.started, time.time())
        meta["serving"] = self.serving
        meta["latency_s"] = state.latency_s()
        if isinstance(outcome, Failure):
            meta["failure"] = failure_fields(outcome)
        self.meta.append(meta)
        self.last_finish = time.monotonic()
        if ok:
            self.stats.done += 1
        else:
            self.stats.errors += 1
