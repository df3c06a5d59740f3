"""Every line kind of the job folder as a typed record, and the one answer to "did it succeed?".

A job folder holds JSON lines of six kinds: results lines (pipeline jobs), OpenAI batch output
lines (OpenAI batch jobs, `results.jsonl` too), their meta lines (`openai-meta.jsonl`), run
events (`runs.jsonl`), timeline samples (`timeline.jsonl`, the record is
metrics/timeline.py's) and serving lines (`serving.jsonl`: start, change, other-model; theirs
is jobdir/serving_lines.py). Each kind is a typed record with its `to_json` (what its writer
appends) and its reader (the OpenAI output and meta lines are built by jobdir/openai_lines.py,
whose format they are), so `batch`, `status`, `report`, `compare` and `bench` read attributes,
never a field two ways.
Readers are lenient, as the files outlive the client that wrote them: a field of the wrong
type in an old or hand-edited line reads as absent (None), never as a crash.

`outcome(line)` is the only place that decides whether a results line (either kind) is a
success, which record it covers and what error it records: the journal's tallies, `batch
status`, the report, `compare`, `bench` and the job summary all ask it. Its rule for an
OpenAI answer, `answer_ok`, is also what decides an OpenAI record's fate as it is written
(openai_lines.is_success), so the writer and the reader cannot disagree.

Keys: a record is keyed by its id (a string); an input line without a readable id by
`LineKey(n)`, a different type, so no id can ever equal it (an id spelt like the old
"\\x00line:N" key is an id like any other).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from sparkops.jobdir.durable import iter_json_lines, numbered_json_lines
from sparkops.jobdir.fields import int_or_zero as _int
from sparkops.jobdir.fields import number_or_none as _number
from sparkops.metrics.timeline import TimelineSample as TimelineSample  # the sampler's writer


class LineKey(NamedTuple):
    """The key of an input line that has no id: its 1-based line number."""

    line: int


Key = str | LineKey

# What a record's error was (engine, issue 21): the record's own fault ends it; any other kind
# (the server's: transport, timeout, 5xx, a stall) leaves it unfinished, re-sent on resume.
RECORD_ERROR = "record"
# A step's finish_reason when the model was cut off by its max_tokens (OpenAI's and vLLM's).
CUT_OFF = "length"


def cut_off(entry: dict[str, Any]) -> bool:
    """Whether a results line's step entry is an answer cut off at max_tokens: stopped there
    and not marked `complete` (a held choice that is a whole allowed answer, which a budget
    can end exactly at: batch/workload.py)."""
    return entry.get("finish_reason") == CUT_OFF and entry.get("complete") is not True


def record_key(rid: str | None, line: int) -> Key:
    """The key a record (or an id-less input line) is journalled under."""
    return rid if rid is not None else LineKey(line)


# ---- results lines (pipeline jobs) ------------------------------------------------------------
@dataclass(slots=True)
class ResultLine:
    """One finished record of a pipeline job (results.jsonl), written by batch/fate.py and
    read back by `outcome`. An error line carries `error_kind` and `failure` (kind, HTTP
    code, cause: batch/outcome.py), so errors are grouped without parsing messages."""

    id: str | None
    status: Literal["done", "error"]
    line: int
    run: int
    t: float
    final: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    failure: dict[str, Any] | None = None
    t0: float | None = None
    # seconds from t0 to t on the monotonic clock (t0 and t are wall-clock stamps a person
    # reads, which a clock step moves); absent on lines written before it
    latency_s: float | None = None
    serving: int | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": self.id,
            "status": self.status,
            "final": self.final,
            "steps": self.steps,
            "error": self.error,
        }
        if self.error_kind is not None:
            obj["error_kind"] = self.error_kind
            obj["failure"] = self.failure
        obj.update(line=self.line, t0=self.t0, t=self.t, run=self.run, serving=self.serving)
        if self.latency_s is not None:
            obj["latency_s"] = self.latency_s
        return obj


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a results line (pipeline or OpenAI batch) says about its record."""

    key: Key
    ok: bool
    error: str | None  # the recorded error message (None for a success)
    error_kind: str | None  # RECORD_ERROR, another kind, or None (a success, an older line)
    final: str | None  # a pipeline's decision (None for OpenAI lines and errors)
    cause: str | None = None  # `failure.cause`; None: a success, OpenAI (meta line), older
    cut: int = 0  # steps whose answer was cut off at max_tokens (finish_reason "length")

    @property
    def record_error(self) -> bool:
        """An error that is the record's own (older lines without a kind count as such)."""
        return not self.ok and self.error_kind in (None, RECORD_ERROR)


def outcome(obj: dict[str, Any]) -> Outcome:
    """Read one results line of either kind (see the module docstring)."""
    if "status" in obj:  # a pipeline results line
        rid = obj.get("id")
        key: Key = record_key(None if rid is None else str(rid), _int(obj.get("line")))
        ok = obj["status"] == "done"
        kind = obj.get("error_kind")
        return Outcome(
            key,
            ok,
            None if ok else str(obj.get("error") or "error"),
            None if ok or not isinstance(kind, str) else kind,
            str(obj["final"]) if ok and obj.get("final") is not None else None,
            None if ok else failure_cause(obj.get("failure")),
            _cut_steps(obj.get("steps")),
        )
    rid = obj.get("custom_id")
    if rid is not None:
        key = str(rid)
    else:  # an OpenAI output line keeps the kit's fields out: its error object names the line
        error = obj.get("error")
        key = LineKey(_int(error.get("line")) if isinstance(error, dict) else 0)
    ok = _openai_ok(obj)
    return Outcome(key, ok, None if ok else _openai_error(obj), None, None)


def failure_cause(failure: Any) -> str | None:
    """The `cause` of a line's `failure` object (None: no failure, or an older line)."""
    cause = failure.get("cause") if isinstance(failure, dict) else None
    return cause if isinstance(cause, str) else None


def _cut_steps(steps: Any) -> int:
    """How many steps of a results line were cut off at max_tokens (older lines: none)."""
    if not isinstance(steps, list):
        return 0
    return sum(1 for s in steps if isinstance(s, dict) and cut_off(s))


@dataclass(slots=True)
class ResultsDamage:
    """Lines of results.jsonl that count no record: damaged (not a JSON object: a hand edit,
    a disk fault) or repeating a record that an earlier line finished. Every reader counts a
    record once, by its first line; a record whose only line is damaged is unfinished, so a
    resume sends it again. The first few line numbers of each are kept for the message."""

    damaged: int = 0
    repeated: int = 0
    first_damaged: list[int] = field(default_factory=list)
    first_repeated: list[int] = field(default_factory=list)

    def add(self, line: int, repeated: bool) -> None:
        if repeated:
            self.repeated += 1
            if len(self.first_repeated) < 5:
                self.first_repeated.append(line)
        else:
            self.damaged += 1
            if len(self.first_damaged) < 5:
                self.first_damaged.append(line)

    def __bool__(self) -> bool:
        return bool(self.damaged or self.repeated)

    def sentence(self) -> str:
        """One sentence for `batch status`, the resume's warning and the report."""
        parts = []
        if self.damaged:
            parts.append(f"{_lines_named(self.damaged, self.first_damaged)} not a results line")
        if self.repeated:
            parts.append(
                f"{_lines_named(self.repeated, self.first_repeated)} a record an earlier line "
                "already finished"
            )
        return (
            f"results.jsonl: {' and '.join(parts)}; skipped: each record counts once, by "
            "its first line, and a record whose only line is damaged is sent again by a "
            "resume (a hand edit or a disk fault? check the file)"
        )


def _lines_named(n: int, first: list[int]) -> str:
    shown = ", ".join(str(x) for x in first) + (", ..." if n > len(first) else "")
    return f"line {shown} is" if n == 1 else f"{n:,} lines ({shown}) are"


def read_results(path: Path, damage: ResultsDamage) -> Iterator[tuple[dict[str, Any], Outcome]]:
    """Each record's first results line of `path` with its outcome, once per record; lines
    that count no record are added to `damage`."""
    seen: set[Key] = set()
    for n, obj in numbered_json_lines(path):
        if obj is None:
            damage.add(n, repeated=False)
            continue
        result = outcome(obj)
        if result.key in seen:
            damage.add(n, repeated=True)
            continue
        seen.add(result.key)
        yield obj, result


def succeeded(obj: dict[str, Any]) -> bool:
    """Whether a results line (either kind) records a success."""
    return outcome(obj).ok


def answer_ok(status: Any, body: Any, error: Any) -> bool:
    """The one rule for an OpenAI batch request: a 2xx answer whose body is a JSON object,
    and no error. Fates decides with it as it writes the line (openai_lines.is_success),
    `outcome` as it reads one back: an HTTP error line has `error: null` but a non-2xx
    `response.status_code`."""
    return (
        error is None and isinstance(status, int) and 200 <= status < 300 and isinstance(body, dict)
    )


def _openai_ok(obj: dict[str, Any]) -> bool:
    """An OpenAI output line succeeded (`answer_ok` over its response)."""
    response = obj.get("response")
    if not isinstance(response, dict):
        return False
    return answer_ok(response.get("status_code"), response.get("body"), obj.get("error"))


def _openai_error(obj: dict[str, Any]) -> str:
    error = obj.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("code") or "error")
    response = obj.get("response")
    if not isinstance(response, dict):
        response = {}
    body = response.get("body")
    detail = body.get("error") if isinstance(body, dict) else None
    message = detail.get("message") if isinstance(detail, dict) else None
    return f"HTTP {response.get('status_code')}: {message or ''}".rstrip(": ")


def outcomes(path: Path) -> Iterator[Outcome]:
    """Every results line of `path`, read."""
    return (outcome(obj) for obj in iter_json_lines(path))


# ---- what the report reads of a finished record (results lines, OpenAI meta lines) ------------
@dataclass(frozen=True, slots=True)
class StepUsage:
    """One call of a finished record, as the report counts it: its step and token counts
    (a pipeline step as batch/workload.py writes it, or an OpenAI meta line's "request")."""

    step: str
    prompt_tokens: int  # 0 when the server gave none
    completion_tokens: int
    cached_tokens: int | None  # None: the server did not say (not the same as 0)
    finish_reason: str | None = None  # None: not said, or a line from an older client
    complete: bool = False  # stopped at max_tokens, but a whole allowed answer (`cut_off`)
    model: str | None = None  # the model the answer named (None: not said, an older line)

    @property
    def cut(self) -> bool:
        """The answer was cut off at the step's max_tokens."""
        return self.finish_reason == CUT_OFF and not self.complete

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StepUsage:
        cached = _count(obj.get("cached_tokens"))
        reason = obj.get("finish_reason")
        model = obj.get("model")
        return cls(
            str(obj.get("step")),
            _count(obj.get("prompt_tokens")) or 0,
            _count(obj.get("completion_tokens")) or 0,
            cached,
            reason if isinstance(reason, str) else None,
            obj.get("complete") is True,
            model if isinstance(model, str) else None,
        )


def _count(value: Any) -> int | None:
    """A token count as written, None when absent or not a finite number (NaN and Infinity
    are not JSON numbers; Python's reader lets them through). Negative counts are kept: the
    report names them as figures that cannot be true, not as zero."""
    number = _number(value)
    return int(number) if number is not None and math.isfinite(number) else None


@dataclass(frozen=True, slots=True)
class Timing:
    """The kit's own fields of a finished record: when it started and finished, in which
    run and serving epoch, and its calls. Read from a pipeline results line, or from the
    OpenAI meta line (openai-meta.jsonl) an OpenAI output line leaves them to."""

    ok: bool
    run: int
    t0: float | None
    t: float | None
    serving: int | None  # None: a line from before the serving record
    steps: tuple[StepUsage, ...]
    latency_s: float | None = None  # monotonic; None on lines from before it

    @property
    def latency(self) -> float | None:
        """The record's latency: its monotonic `latency_s`, else `t - t0` (older lines)."""
        if self.latency_s is not None:
            return self.latency_s
        return None if self.t0 is None or self.t is None else self.t - self.t0

    @classmethod
    def from_json(cls, obj: dict[str, Any], ok: bool) -> Timing:
        steps = obj.get("steps")
        serving = obj.get("serving")
        return cls(
            ok,
            _int(obj.get("run")),
            _number(obj.get("t0")),
            _number(obj.get("t")),
            serving if isinstance(serving, int) else None,
            tuple(StepUsage.from_json(x) for x in steps if isinstance(x, dict))
            if isinstance(steps, list)
            else (),
            _number(obj.get("latency_s")),
        )


@dataclass(frozen=True, slots=True)
class Finished:
    """A results line read for the report and bench: its outcome, and its timing when the
    line carries the kit's fields (a pipeline line; an OpenAI output line does not)."""

    outcome: Outcome
    timing: Timing | None


def read_finished(obj: dict[str, Any]) -> Finished:
    """One results line of either kind, read (see `Finished`)."""
    result = outcome(obj)
    kit = "status" in obj or "t" in obj  # a pipeline line (or an older OpenAI line)
    return Finished(result, Timing.from_json(obj, result.ok) if kit else None)


def finished(path: Path) -> Iterator[Finished]:
    """Every results line of `path`, read with its timing."""
    return (read_finished(obj) for obj in iter_json_lines(path))


def meta_timings(path: Path) -> Iterator[Timing]:
    """Every OpenAI meta line of `path` (openai_lines.meta_line writes them)."""
    return (Timing.from_json(obj, bool(obj.get("ok"))) for obj in iter_json_lines(path))


# ---- run events (runs.jsonl) ------------------------------------------------------------------
@dataclass(slots=True)
class RunEvent:
    """One line of the job log: a run's start or end, or an endpoint stalled / rejoined
    (batch/stall.run_event builds those; jobdir/run.JobRun.log writes every event).

    The fields after `t` differ per event and stay in `extra`, in the order written (so a
    line reads back to the same bytes); the properties are their typed reading, None where
    a line lacks one (another event, an older client, a hand edit).
    """

    event: str
    run: int
    t: float | None  # None only when read from a line without a time
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def concurrency(self) -> int | None:
        """A start's --concurrency."""
        value = self.extra.get("concurrency")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def schedule(self) -> str:
        """A start's --policy (older lines lack it: they ran fifo)."""
        value = self.extra.get("schedule", "fifo")
        return value if isinstance(value, str) else str(value)

    @property
    def endpoint(self) -> str | None:
        """The endpoint a stalled / rejoined event is about."""
        value = self.extra.get("endpoint")
        return None if value is None else str(value)

    @property
    def quiet_s(self) -> float | None:
        """stalled: seconds without progress."""
        return _number(self.extra.get("quiet_s"))

    @property
    def in_flight(self) -> int:
        """stalled: calls cancelled and re-routed."""
        value = _number(self.extra.get("in_flight"))
        return 0 if value is None else int(value)

    @property
    def out_s(self) -> float | None:
        """rejoined: seconds out of rotation."""
        return _number(self.extra.get("out_s"))

    @property
    def active_s(self) -> float | None:
        """end: seconds from the run's start to its last finished record, on the monotonic
        clock (None: no record finished, or a line from an older client)."""
        return _number(self.extra.get("active_s"))

    @property
    def unheld(self) -> dict[str, int]:
        """end: per endpoint, answers outside a constrained step's allowed set, sent again
        (the server did not hold the constraint: batch/stop_rules.Unheld)."""
        value = self.extra.get("unheld")
        if not isinstance(value, dict):
            return {}
        return {str(k): int(n) for k, v in value.items() if (n := _number(v)) is not None}

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "run": self.run, "t": self.t, **self.extra}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunEvent:
        extra = {k: v for k, v in obj.items() if k not in ("event", "run", "t")}
        return cls(str(obj.get("event", "")), _int(obj.get("run")), _number(obj.get("t")), extra)


def run_events(path: Path) -> Iterator[RunEvent]:
    return (RunEvent.from_json(obj) for obj in iter_json_lines(path))


# ---- timeline samples (timeline.jsonl) ----------------------------------------------------------
# The record is metrics/timeline.py's (the maths below `batch` reads it); written by the job's
# sampler (batch/sampler.py), read here.


def timeline_samples(path: Path) -> Iterator[TimelineSample]:
    """Every sample of `path` that has a time (a line without one cannot be placed)."""
    for obj in iter_json_lines(path):
        sample = TimelineSample.from_json(obj)
        if sample is not None:
            yield sample
