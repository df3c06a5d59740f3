"""report.json as a typed record (`JobReport`): what `sparkops report` writes, and what every
reader of a job's figures reads back.

The report is computed once (report/compute.py builds a `JobReport`), written from
`to_json()` (report.json: the same keys, in the same order, with the same values as when it
was a dict), and read back with `JobReport.from_json` by whoever reads a job's figures later:
report.md (report/render.py), the planner's calibration (plan/calibrate.py), the HTML report
and the methods section. They read attributes, so a renamed or missing figure is a mypy error
between the writer and its readers, not a silent None.

Reading is lenient, as report.json outlives the kit that wrote it (jobdir/lines.py's rule):
a figure an older report lacks takes its default (None, 0, empty), a figure of the wrong type
reads as absent, a key no field knows (an early kit's `prompt_tokens_per_s`) is ignored.

Here, below the readers, because report.json is a file of the job folder: the folder handle
(jobdir/reader.JobFolder.report) returns it, and a reader of the figures loads none of the
report's maths. prefix.json's record (`PrefixRecord`), whose steps the report repeats, is
read here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sparkops.jobdir.fields import int_or_zero, number_or_none, text_or_none
from sparkops.jobdir.identity import IdentityChange
from sparkops.jobdir.status import OtherModelAnswers
from sparkops.metrics.host import HostSummary

T = TypeVar("T")


# ---- lenient field readers, by a field's declared type --------------------------------------
def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text_or_empty(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _object(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


# Every scalar type a report field is declared with (the annotation as written), and its
# lenient reader; a class passes `_read` the readers of its nested fields.
_SCALARS: dict[str, Callable[[Any], Any]] = {
    "int": int_or_zero,
    "int | None": _int_or_none,
    "float | None": number_or_none,
    "str": _text_or_empty,
    "str | None": text_or_none,
    "bool": lambda value: value is True,
    "dict[str, Any] | None": _object,
}


def _read(cls: type[T], obj: Any, nested: dict[str, Callable[[Any], Any]] | None = None) -> T:
    """An instance of the dataclass `cls` from a JSON object, each field by its reader: a
    field absent from `obj` takes its default (its reader's reading of nothing when it has
    none), so a report from an older kit reads."""
    source = obj if isinstance(obj, dict) else {}
    readers = nested or {}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        has_default = f.default is not dataclasses.MISSING or (
            f.default_factory is not dataclasses.MISSING
        )
        if f.name not in source and has_default:
            continue
        reader = readers.get(f.name) or _SCALARS[str(f.type)]
        values[f.name] = reader(source.get(f.name))
    return cls(**values)


def _rows(read: Callable[[Any], T]) -> Callable[[Any], tuple[T, ...]]:
    """A reader of a list of objects (an item that is not an object is skipped)."""
    return lambda value: (
        tuple(read(x) for x in value if isinstance(x, dict)) if isinstance(value, list) else ()
    )


def _by_name(read: Callable[[Any], T]) -> Callable[[Any], dict[str, T]]:
    """A reader of `{name: object}` (an entry whose value is not an object is skipped)."""
    return lambda value: (
        {str(k): read(v) for k, v in value.items() if isinstance(v, dict)}
        if isinstance(value, dict)
        else {}
    )


def _counts(value: Any) -> dict[str, int]:
    """`{name: count}`, an entry whose count is not an integer skipped."""
    if not isinstance(value, dict):
        return {}
    return {str(k): n for k, n in value.items() if _int_or_none(n) is not None}


def _plain(value: Any) -> Any:
    """A report value as JSON holds it: a record by its own `to_json` or `as_dict` where it
    has one, else its fields in declared order; a tuple as a list; a mapping's values
    likewise."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _fields_json(value)
    if isinstance(value, (list, tuple)):
        return [_plain(x) for x in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _fields_json(record: Any) -> dict[str, Any]:
    """A record's fields in declared order (report.json's key order), as JSON holds them."""
    return {f.name: _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}


# ---- prefix.json: the shared-prefix probe at the job's start --------------------------------
@dataclass(frozen=True, slots=True)
class PrefixStep:
    """One step's shared prefix as the probe at the job's start measured it (batch/
    preflight.py): the tokens every record's prompt shares, the whole blocks of them the cache
    can reuse, the tail it recomputes, and the step's fixed prompt tokens (None: a probe from
    before they were kept)."""

    shared_tokens: int
    reusable_tokens: int
    tail_tokens: int
    fixed_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = _fields_json(self)
        if self.fixed_tokens is None:
            del data["fixed_tokens"]
        return data

    @classmethod
    def from_json(cls, obj: Any) -> PrefixStep:
        return _read(cls, obj)


_prefix_steps = _by_name(PrefixStep.from_json)


def _prefix_steps_or_none(value: Any) -> dict[str, PrefixStep] | None:
    """The probe's steps; None when it recorded none (no probe, or an unreadable file)."""
    return _prefix_steps(value) if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class PrefixRecord:
    """prefix.json: the server's KV block size and each step's shared prefix; empty when the
    job has no probe (no /tokenize, an OpenAI batch file) or the file is unreadable (derived
    data, rewritten by every run: it only drops the hit-rate ceiling). `note` says why a
    probe measured nothing."""

    block_size: int | None = None
    steps: dict[str, PrefixStep] | None = None
    note: str | None = None

    @classmethod
    def from_json(cls, obj: Any) -> PrefixRecord:
        return _read(cls, obj, {"steps": _prefix_steps_or_none})


# ---- the report's parts ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepRow:
    """One step's prefix-cache figures (report/steps.diagnose): its calls and prompt tokens,
    the hit rate the server achieved (None: it reported no cached tokens) against the ceiling
    its prompts allow (None: not probed), and the verdict sentence."""

    step: str
    calls: int
    prompt_tokens: int
    cached_tokens: int | None
    hit_rate: float | None
    ceiling: float | None
    verdict: str

    @classmethod
    def from_json(cls, obj: Any) -> StepRow:
        return _read(cls, obj)


@dataclass(frozen=True, slots=True)
class Truncated:
    """A step's answers cut off at its max_tokens (finish_reason "length"), of its answers."""

    cut: int
    answers: int

    @classmethod
    def from_json(cls, obj: Any) -> Truncated:
        return _read(cls, obj)


@dataclass(slots=True)
class StallRow:
    """One stall of one endpoint in one run (report/stalls.summarise): how long it was quiet,
    how many calls were re-routed, and after how long it rejoined (None: it did not before
    the run ended)."""

    endpoint: str | None
    run: int
    quiet_s: float | None
    rerouted: int
    rejoined_after_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return _fields_json(self)

    @classmethod
    def from_json(cls, obj: Any) -> StallRow:
        return _read(cls, obj)


def _other_model(obj: Any) -> OtherModelAnswers:
    return _read(OtherModelAnswers, obj)


@dataclass(frozen=True, slots=True)
class SetupChange:
    """A change of an endpoint's serving setup (report/serving.py): when and in which run,
    its serving epoch, whether a resumed run found it (`between_runs`), the results lines
    before it, the records finished after it, and the fields that changed."""

    t: float | None
    run: int
    endpoint: str
    serving: int | None
    between_runs: bool
    results_from: int | None
    records_after: int
    changes: tuple[IdentityChange, ...]

    @classmethod
    def from_json(cls, obj: Any) -> SetupChange:
        return _read(cls, obj, {"changes": _rows(_identity_change)})


def _identity_change(obj: dict[str, Any]) -> IdentityChange:
    before, after = obj.get("before"), obj.get("after")
    return IdentityChange(
        str(obj.get("field")),
        None if before is None else str(before),
        None if after is None else str(after),
    )


@dataclass(frozen=True, slots=True)
class Capacity:
    """The last run's concurrency against the server's --max-num-seqs (jobdir/identity.
    capacity's record, in its order), with the waiting requests the timeline saw."""

    max_num_seqs: int | None
    concurrency: int | None
    per_endpoint: int | None
    over: bool
    waiting_peak: float | None = None
    waiting_median: float | None = None

    @classmethod
    def from_json(cls, obj: Any) -> Capacity:
        return _read(cls, obj)


@dataclass(frozen=True, slots=True)
class ServingSummary:
    """What served the job (report/serving.summarise): the first run's setup, every change,
    finished records per serving epoch, and the last run's capacity. `gpu`, `stack` and the
    endpoints' identities keep their own formats (sparkops-gpu-check --json, the deploy's
    stack record, jobdir/identity.py)."""

    kit_version: str | None
    kit_versions: tuple[str, ...] | None  # None: one version over every run
    pipeline_fingerprint: str | None
    input_fingerprint: str | None
    gpu: dict[str, Any] | None
    stack: dict[str, Any] | None
    endpoints: dict[str, Any] = field(default_factory=dict)
    changes: tuple[SetupChange, ...] = ()
    records_by_serving: dict[str, int] = field(default_factory=dict)
    capacity: Capacity | None = None

    @classmethod
    def from_json(cls, obj: Any) -> ServingSummary:
        return _read(
            cls,
            obj,
            {
                "kit_versions": _texts_or_none,
                "endpoints": lambda value: value if isinstance(value, dict) else {},
                "changes": _rows(SetupChange.from_json),
                "records_by_serving": _counts,
                "capacity": _record_or_none(Capacity.from_json),
            },
        )


def _texts_or_none(value: Any) -> tuple[str, ...] | None:
    return tuple(str(x) for x in value) if isinstance(value, list) else None


def _record_or_none(read: Callable[[Any], T]) -> Callable[[Any], T | None]:
    return lambda value: read(value) if isinstance(value, dict) else None


# ---- the report -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JobReport:
    """Every figure of a job's report, in report.json's order (how each is computed:
    report/compute.py; what the token rates mean: metrics/timeline.TokenRates).

    None means "not measured" (no steady window, no /metrics samples, no probe), with a
    `*_reason` or `*_note` sentence where the report owes the reader why."""

    records: int = 0  # records in the input (the manifest's total)
    finished: int = 0  # records with a results line (done or error)
    done: int = 0
    errors: int = 0
    calls: int = 0
    calls_per_record: float | None = None  # over done records
    records_per_min: float | None = None  # done records over the whole run
    records_per_min_steady: float | None = None  # over the middle of the run(s)
    records_per_min_steady_reason: str | None = None  # why there is no steady figure
    computed_tok_s: float | None = None
    effective_tok_s: float | None = None
    computed_prompt_tok_s: float | None = None
    prompt_tok_s: float | None = None
    generation_tok_s: float | None = None
    # the fewest /metrics samples a backend took in a steady window (firm at 3 or more)
    steady_samples: int | None = None
    bottleneck: str | None = None  # metrics/bottleneck.py's kind
    bottleneck_sentence: str | None = None
    prefix_cache_hit_rate: float | None = None  # the servers' /metrics, 0-1
    prefix_cache_hit_rate_ceiling: float | None = None  # whole shared blocks over prompts
    prefix_cache_hit_rate_note: str | None = None
    cached_tokens_share: float | None = None  # from the answers' cached_tokens
    prompt_tokens_per_call: float | None = None
    completion_tokens_per_call: float | None = None
    usage_impossible_answers: int = 0  # answers whose usage figures cannot be true
    usage_impossible_note: str | None = None
    record_latency_p50_s: float | None = None
    record_latency_p95_s: float | None = None
    kv_cache_usage_max: float | None = None
    preemptions: int = 0
    block_size: int | None = None  # the KV block size the probe read
    prefix_steps: dict[str, PrefixStep] | None = None  # prefix.json's steps, as probed
    steps: tuple[StepRow, ...] = ()  # per-step hit rate against its ceiling
    hit_rate_verdict: str | None = None
    runs: int = 0
    schedule: str | None = None  # the runs' --schedule, joined by "+"
    wall_s: float | None = None
    finals: dict[str, int] = field(default_factory=dict)  # done records per final decision
    results_damaged_lines: int = 0
    results_repeated_lines: int = 0
    results_lines_note: str | None = None
    truncated_answers: dict[str, Truncated] = field(default_factory=dict)  # steps with any
    stalled_endpoints: tuple[StallRow, ...] = ()
    # answers kept from a model other than the pipeline's (a fallback, no --strict-serving)
    other_model_answers: tuple[OtherModelAnswers, ...] = ()
    serving: ServingSummary | None = None  # None: a job from before serving.jsonl
    host: HostSummary | None = None  # the host while the job ran (None: before host.jsonl)

    def to_json(self) -> dict[str, Any]:
        """report.json's object."""
        return _fields_json(self)

    @classmethod
    def from_json(cls, obj: Any) -> JobReport:
        """A report.json read back, leniently (see the module's docstring)."""
        return _read(
            cls,
            obj,
            {
                "prefix_steps": _prefix_steps_or_none,
                "steps": _rows(StepRow.from_json),
                "finals": _counts,
                "truncated_answers": _by_name(Truncated.from_json),
                "stalled_endpoints": _rows(StallRow.from_json),
                "other_model_answers": _rows(_other_model),
                "serving": _record_or_none(ServingSummary.from_json),
                "host": _record_or_none(HostSummary.from_json),
            },
        )
