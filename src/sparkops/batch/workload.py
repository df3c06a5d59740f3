"""What a job sends and how its records end: a pipeline of steps, or an OpenAI batch file.

Why an interface: the two kinds of job share everything the engine does (admission, the
in-flight bound, retries, stop rules, the journal) and differ only in a handful of answers:
what request a record makes next, what an answer does to it, how its error line is written,
and a few facts the job reads before the first request. Those answers live here, one class
per kind, so the engine (batch/engine.py) and the job (batch/job.py) never ask which kind
they run; `workload_for` is the one place that picks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from sparkops.batch.fate import Fates, RecordState
from sparkops.batch.outcome import FINISHED, Answer, Failure, finish_reason, unfinished, unheld
from sparkops.batch.records import InputKind, InputProblem, Record
from sparkops.errors import UserError
from sparkops.jobdir.lines import CUT_OFF
from sparkops.openai_http import ServerClient
from sparkops.pipeline import constrain
from sparkops.pipeline.prompt import RecordError, build_request, is_number
from sparkops.pipeline.route import next_step
from sparkops.pipeline.spec import PipelineSpec, StepSpec

__all__ = [
    "Finish",
    "OpenAIBatch",
    "Pipeline",
    "PrefixProbe",
    "RecordError",
    "Request",
    "Workload",
    "workload_for",
]

# What journals a record's error: called now, or later when fail-fast held it back.
Finish = Callable[[], None]
# A call's JSON body as the server reads it (chat messages, or an OpenAI line's own body).
Request = dict[str, Any]


class PrefixProbe(NamedTuple):
    """The model and the steps whose shared prompt prefix is measured (batch/preflight.py)."""

    model: str
    steps: Sequence[StepSpec]


class Workload(Protocol):
    """One kind of job, as the engine and the job see it (see the module docstring)."""

    @property
    def journal_key(self) -> str:
        """The input field a results line is keyed by (what resume matches records on)."""
        ...

    @property
    def model(self) -> str | None:
        """The model every answer should come from; None when each request names its own."""
        ...

    @property
    def first_step(self) -> str:
        """The step a new record starts at."""
        ...

    @property
    def steps(self) -> int:
        """The most calls a record makes (batch/admission.py's prior for a steady mix)."""
        ...

    @property
    def want_text(self) -> bool:
        """An answer must carry text (the workload routes on it), else it is retried."""
        ...

    @property
    def prefix_probe(self) -> PrefixProbe | None:
        """What the pre-flight measures for the report's hit-rate ceiling; None: nothing
        (no prefix.json)."""
        ...

    def fingerprint(self) -> str:
        """What the job folder's manifest fixes the job to (a changed one refuses a resume)."""
        ...

    @property
    def constraints(self) -> dict[str, str] | None:
        """Each step's structured-output mode (pipeline/constrain.py): the manifest's record
        of which steps run constrained (None: the requests are the input's own)."""
        ...

    async def check_server(self, side: ServerClient, bases: list[str]) -> None:
        """Refuse (UserError) servers that would not hold the workload's constraints, before
        any record is sent (and learn what needs the server's tokenizer)."""
        ...

    def check_first(self, first: Record, source: Path) -> None:
        """Refuse (UserError) an input whose first record cannot make a request at all:
        the input's or the job's mistake, said once before any request."""
        ...

    def request(self, state: RecordState, default_model: str | None) -> tuple[str, Request]:
        """The url path and JSON body of the record's next call; RecordError when the record
        cannot become one. default_model: what the endpoints serve first."""
        ...

    def judge(self, state: RecordState, answer: Answer) -> Failure | None:
        """None when `answer` is one this record's step can take; else the server's failure
        it is instead (unfinished, or outside the step's constraint): retried, never kept."""
        ...

    def answered(self, state: RecordState, answer: Answer, fates: Fates) -> str | None:
        """Take in an answer: the record's next step, or None once its fate is written."""
        ...

    def failed(self, state: RecordState, failure: Failure, fates: Fates) -> Finish:
        """How a record that failed of its own fault is journalled."""
        ...

    def input_problem(self, problem: InputProblem, failure: Failure, fates: Fates) -> Finish:
        """How an input line that could not become a record is journalled (never sent)."""
        ...


@dataclass(frozen=True)
class Pipeline:
    """Records through a pipeline's steps: each answer parsed, appended, routed."""

    spec: PipelineSpec
    # each step's max_tokens: derived with byte counts here, with the server's tokenizer
    # once `check_server` has asked it (pipeline/constrain.py)
    budget: dict[str, int] = field(default_factory=dict)
    # the fields the input's first record holds as numbers (`check_first`): a number there
    # is a value, elsewhere a shifted column (pipeline/prompt.py)
    numbers: set[str] = field(default_factory=set)
    journal_key = "id"
    want_text = True

    def __post_init__(self) -> None:
        constrain.check_spec(self.spec)
        self.budget.update(constrain.budgets(self.spec))

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def first_step(self) -> str:
        return self.spec.first.name

    @property
    def steps(self) -> int:
        return len(self.spec.steps)

    @property
    def prefix_probe(self) -> PrefixProbe:
        return PrefixProbe(self.spec.model, self.spec.steps)

    def fingerprint(self) -> str:
        return self.spec.fingerprint()

    @property
    def constraints(self) -> dict[str, str]:
        return dict(constrain.modes(self.spec))

    async def check_server(self, side: ServerClient, bases: list[str]) -> None:
        await constrain.check_servers(side, bases, self.spec)
        self.budget.update(await constrain.server_budgets(side, bases[0], self.spec))

    def check_first(self, first: Record, source: Path) -> None:
        """A field a step's template names but the first record lacks would fail every
        record the same way. Learns which fields are number columns."""
        self.numbers.update(name for name, value in first.fields.items() if is_number(value))
        for step in self.spec.steps:
            missing = [f for f in step.fields if f not in first.fields]
            if missing:
                fields = ", ".join(first.fields) or "none"
                raise UserError(
                    f"step {step.name!r} uses field(s) {missing} that the records of "
                    f"{source} lack (line {first.line} has: {fields}); fix the step's user "
                    "template or the input (nothing was sent)"
                )

    def request(self, state: RecordState, default_model: str | None) -> tuple[str, Request]:
        step = self.spec.step(state.step)
        body = build_request(
            step,
            self.spec.model,
            state.record.fields,
            self.budget.get(step.name),
            constrain.structured_outputs(self.spec, step),
            self.numbers,
        )
        return "/v1/chat/completions", body

    def judge(self, state: RecordState, answer: Answer) -> Failure | None:
        """Only a finished answer is one (finish_reason `stop`, or `length`: cut off, counted);
        a held step's answer must be one its constraint allows (the step's kind says which:
        a choice whole, a number of the range, JSON). Anything else is proof the constraint
        did not hold, and never a decision."""
        reason = finish_reason(answer.body)
        if reason not in FINISHED:
            return unfinished(reason)
        step = self.spec.step(state.step)
        mode = constrain.step_mode(self.spec, step)
        if mode != "off" and not step.answer.holds(answer.text or "", cut=reason == CUT_OFF):
            return unheld(step.name, mode)
        return None

    def answered(self, state: RecordState, answer: Answer, fates: Fates) -> str | None:
        step = self.spec.step(state.step)
        text = answer.text or ""
        details = answer.usage.get("prompt_tokens_details") or {}
        reason = finish_reason(answer.body)
        held = constrain.step_mode(self.spec, step) != "off"
        read = step.answer.read(text, held, cut=reason == CUT_OFF)
        label = read.label
        entry: dict[str, Any] = {"step": step.name, **read.entry}
        if read.complete:
            entry["complete"] = True  # stopped at max_tokens, but a whole allowed answer
        # parsed false: the answer could not be read, so the label is the step's default
        # (counted as unparsed by `batch run` and the results table, never a decision)
        entry.update(
            answer=label,
            parsed=read.parsed,
            raw=text,
            model=answer.model,
            finish_reason=reason,  # "length": cut off at max_tokens (unless `complete`)
            prompt_tokens=answer.usage.get("prompt_tokens"),
            completion_tokens=answer.usage.get("completion_tokens"),
            cached_tokens=details.get("cached_tokens"),
        )
        state.steps.append(entry)
        nxt = next_step(self.spec, step.name, label)
        if nxt is None:
            fates.done(state, label)
        return nxt

    def failed(self, state: RecordState, failure: Failure, fates: Fates) -> Finish:
        rec = state.record
        return lambda: fates.error(rec.id, rec.line, failure, state.steps, state.started)

    def input_problem(self, problem: InputProblem, failure: Failure, fates: Fates) -> Finish:
        return lambda: fates.error(problem.id, problem.line, failure, [])


class OpenAIBatch:
    """An OpenAI batch file: each line is a whole request, answered once, kept as it came."""

    journal_key = "custom_id"
    model = None  # each line names its model (or takes the served default)
    first_step = "request"
    steps = 1
    want_text = False  # a line keeps whatever choice came back
    prefix_probe = None  # no shared prompt to measure: each line is its own

    def fingerprint(self) -> str:
        return "openai-batch"

    constraints = None  # each line carries its own request, constraint included

    async def check_server(self, side: ServerClient, bases: list[str]) -> None:
        return None

    def check_first(self, first: Record, source: Path) -> None:
        return None  # a line's body is checked by the server, line by line

    def request(self, state: RecordState, default_model: str | None) -> tuple[str, Request]:
        rec = state.record
        body = dict(rec.fields["body"])
        if "model" not in body and default_model:
            body["model"] = default_model
        return rec.fields.get("url", "/v1/chat/completions"), body

    def judge(self, state: RecordState, answer: Answer) -> Failure | None:
        return None  # a line keeps whatever came back, as OpenAI's batch output does

    def answered(self, state: RecordState, answer: Answer, fates: Fates) -> str | None:
        fates.openai(state, answer)
        return None

    def failed(self, state: RecordState, failure: Failure, fates: Fates) -> Finish:
        return lambda: fates.openai(state, failure)

    def input_problem(self, problem: InputProblem, failure: Failure, fates: Fates) -> Finish:
        state = RecordState(Record(problem.id or "", problem.line, {}), self.first_step)
        return lambda: fates.openai(state, failure, custom_id=problem.id)


def workload_for(kind: InputKind, spec: PipelineSpec | None) -> Workload:
    """The job's workload: records through `spec`, or the lines of an OpenAI batch file
    (`kind` and `spec` are validated to agree before, batch/job.py)."""
    if spec is not None:
        return Pipeline(spec)
    assert kind == "openai"
    return OpenAIBatch()
