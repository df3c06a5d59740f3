"""A batch job's own figures as Prometheus metrics (pure: a snapshot in, metric families out).

vLLM exports its metrics the Prometheus way and an operator's Prometheus already scrapes
them; the job's own figures (records done, errors, the pace and the ETA, the hit rate per
step against its ceiling, stalls, what serves it) belong beside them, not only in the job
folder and the terminal. Both the running client's `/metrics` (batch/exporter.py) and the
textfile of a stopped job (`sparkops batch metrics DIR --textfile PATH`) are made here from
one `JobSnapshot`, so the two say the same figures by construction.

Names follow Prometheus' naming guide: one `sparkops_job_` prefix, base units in the name
(`_seconds`, `_ratio` for 0-1 fractions, `_timestamp_seconds` for Unix times), `_total` on
counters only. Counters are the job's totals over every run, read from the job folder, so a
restarted client resumes a counter where the last one left it (no reset for `rate()` to
mend). Labels are bounded and never patient data: the job folder's name, a pipeline step's
name, an endpoint (credentials redacted), the failure's kind and HTTP status (never the
server's message, which can quote a record), a served model's name and version. Never a
record's id or text.

Every series carries `job_folder` (the folder's name): node exporter's textfile collector
refuses two files that write the same series, and one Spark may run several jobs.

A figure the job does not know is left out, never written as 0: a step whose calls the
server did not report cached tokens for has no hit-rate series, a stopped job no pace or
ETA, a job without a prefix probe no ceiling (an alert on "hit rate below ceiling" must not
fire on a zero that means "unknown").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# Prometheus' namespace and subsystem (prometheus_client's words): every name starts
# sparkops_job_.
NAMESPACE, SUBSYSTEM = "sparkops", "job"
PREFIX = f"{NAMESPACE}_{SUBSYSTEM}"
# The identity fields (jobdir/identity.py) the serving info metric carries as labels: the
# ones an operator asks "did it change?" about. Cache settings stay in serving.jsonl.
SERVING_LABELS = ("model", "version", "max_model_len")


@dataclass(frozen=True, slots=True)
class StepFigures:
    """One pipeline step (an OpenAI batch job: one per request path) over the job's
    finished records. `cached_tokens` is None when some answer of the step did not report
    its cached tokens (the hit rate is then unknown), `reusable_tokens` None when the step's
    shared prefix was not probed (the ceiling is unknown); `in_flight` None off a running
    client."""

    answers: int = 0
    unclear: int = 0  # answers that could not be read: the step's default label was taken
    truncated: int = 0  # answers cut off at the step's max_tokens
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    reusable_tokens: int | None = None
    in_flight: int | None = None

    @property
    def hit_ratio(self) -> float | None:
        """Cached prompt tokens over prompt tokens (what the server achieved)."""
        if self.cached_tokens is None or not self.prompt_tokens:
            return None
        return self.cached_tokens / self.prompt_tokens

    @property
    def ceiling_ratio(self) -> float | None:
        """Whole shared blocks over prompt tokens (the best the prompts allow)."""
        if self.reusable_tokens is None or not self.prompt_tokens:
            return None
        return self.reusable_tokens / self.prompt_tokens


@dataclass(frozen=True, slots=True)
class ServingFigures:
    """What serves the job: each endpoint's last identity (jobdir/identity.py's flat
    mapping), the serving epoch (+1 at every change) and how many changes were recorded."""

    identities: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    epoch: int = 0
    changes: int = 0


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """Every figure the metrics show, at one moment (see the module docstring).

    `failed` counts record errors by (failure kind, HTTP status or ""); `stalled` is each
    endpoint's stall state now (running clients only: a stopped job stalls nothing), `stalls`
    the stalls each endpoint had over every run; `pace` is this run's records done per
    second and `eta_s` the seconds left at this run's pace (None: not running, or no figure
    yet)."""

    folder: str
    kind: str = "pipeline"
    running: bool = False
    runs: int = 0
    input_records: int = 0
    done: int = 0
    failed: Mapping[tuple[str, str], int] = field(default_factory=dict)
    last_record_time: float | None = None
    steps: Mapping[str, StepFigures] = field(default_factory=dict)
    stalled: Mapping[str, bool] = field(default_factory=dict)
    stalls: Mapping[str, int] = field(default_factory=dict)
    serving: ServingFigures = field(default_factory=ServingFigures)
    unheld: Mapping[str, int] = field(default_factory=dict)
    pace: float | None = None
    eta_s: float | None = None

    @property
    def errors(self) -> int:
        return sum(self.failed.values())

    @property
    def remaining(self) -> int:
        return max(0, self.input_records - self.done - self.errors)


@dataclass(frozen=True, slots=True)
class _Families:
    """Builds metric families that all carry the job's `job_folder` label."""

    folder: str

    def gauge(self, name: str, doc: str, value: float | None) -> Iterator[Metric]:
        """One unlabelled (but for the folder) gauge; nothing when the value is unknown."""
        if value is None:
            return
        family = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["job_folder"])
        family.add_metric([self.folder], value)
        yield family

    def counter(self, name: str, doc: str, value: float) -> Metric:
        family = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["job_folder"])
        family.add_metric([self.folder], value)
        return family

    def labelled(
        self,
        family: GaugeMetricFamily | CounterMetricFamily,
        values: Iterable[tuple[tuple[str, ...], float | None]],
    ) -> Iterator[Metric]:
        """`family` with one sample per label values whose value is known; nothing when none
        is (an empty family would only add HELP lines)."""
        added = False
        for labels, value in values:
            if value is not None:
                family.add_metric([self.folder, *labels], value)
                added = True
        if added:
            yield family


def _gauge(name: str, doc: str, label: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["job_folder", label])


def _counter(name: str, doc: str, *labels: str) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["job_folder", *labels])


def families(snap: JobSnapshot) -> Iterator[Metric]:
    """Every metric family of one snapshot, in a fixed order."""
    yield from _job(snap)
    yield from _steps(snap)
    yield from _endpoints(snap)
    yield from _serving(snap)


def _job(snap: JobSnapshot) -> Iterator[Metric]:
    f = _Families(snap.folder)
    info = InfoMetricFamily(PREFIX, "The batch job: its folder and kind (pipeline or openai).")
    info.add_metric([], {"job_folder": snap.folder, "kind": snap.kind})
    yield info
    yield from f.gauge("running", "1 while a client runs the job, else 0.", int(snap.running))
    yield f.counter("runs", "Runs of the job started (a restart or resume adds one).", snap.runs)
    yield from f.gauge("input_records", "Records in the job's input.", snap.input_records)
    yield f.counter("records_done", "Records finished with every step answered.", snap.done)
    failed = _counter(
        "records_failed",
        "Records ended by an error of their own, by the failure's kind and HTTP status "
        '(code "" without an HTTP answer).',
        "kind",
        "code",
    )
    yield from f.labelled(failed, ((k, n) for k, n in sorted(snap.failed.items())))
    yield from f.gauge(
        "records_remaining", "Records with no result yet (a resume sends them).", snap.remaining
    )
    yield from f.gauge(
        "last_record_timestamp_seconds",
        "Unix time the latest record finished (done or error).",
        snap.last_record_time,
    )
    yield from f.gauge(
        "records_done_per_second",
        "This run's pace: records done per second since it started (x60: records/min).",
        snap.pace,
    )
    yield from f.gauge(
        "eta_seconds", "Seconds until every record is finished, at this run's pace.", snap.eta_s
    )


# The per-step families, in the order they are written: (its kind, name, help, the step's
# figure).
_STEP_FAMILIES: tuple[
    tuple[
        Callable[[str, str, str], GaugeMetricFamily | CounterMetricFamily],
        str,
        str,
        Callable[[StepFigures], float | None],
    ],
    ...,
] = (
    (_counter, "step_answers", "Answers of the step in finished records.", lambda s: s.answers),
    (
        _counter,
        "step_unclear_answers",
        "Answers of the step that could not be read, so its default label was taken.",
        lambda s: s.unclear,
    ),
    (
        _counter,
        "step_truncated_answers",
        "Answers of the step cut off at its max_tokens (finish_reason length).",
        lambda s: s.truncated,
    ),
    (
        _gauge,
        "step_calls_in_flight",
        "Calls of the step sent and not yet answered.",
        lambda s: s.in_flight,
    ),
    (
        _counter,
        "step_prompt_tokens",
        "Prompt tokens of the step's answers.",
        lambda s: s.prompt_tokens,
    ),
    (
        _counter,
        "step_cached_prompt_tokens",
        "Prompt tokens the server served from its prefix cache (where it said for every call).",
        lambda s: s.cached_tokens,
    ),
    (
        _counter,
        "step_reusable_prompt_tokens",
        "Prompt tokens in whole shared blocks of the step's prefix: the most the cache "
        "can serve (where the prefix was probed).",
        lambda s: s.reusable_tokens,
    ),
    (
        _gauge,
        "step_prefix_cache_hit_ratio",
        "Cached over prompt tokens of the step, over the whole job.",
        lambda s: s.hit_ratio,
    ),
    (
        _gauge,
        "step_prefix_cache_hit_ceiling_ratio",
        "Reusable over prompt tokens of the step: the hit ratio its prompts allow.",
        lambda s: s.ceiling_ratio,
    ),
)


def _steps(snap: JobSnapshot) -> Iterator[Metric]:
    f = _Families(snap.folder)
    steps = sorted(snap.steps.items())
    for kind, name, doc, figure in _STEP_FAMILIES:
        family = kind(name, doc, "step")
        yield from f.labelled(family, [((step,), figure(s)) for step, s in steps])


def _endpoints(snap: JobSnapshot) -> Iterator[Metric]:
    f = _Families(snap.folder)
    yield from f.labelled(
        _gauge(
            "endpoint_stalled",
            "1 while the endpoint is stalled (calls in flight, nothing advancing), else 0.",
            "endpoint",
        ),
        (((ep,), int(v)) for ep, v in sorted(snap.stalled.items())),
    )
    yield from f.labelled(
        _counter("endpoint_stalls", "Times the endpoint stalled, over every run.", "endpoint"),
        (((ep,), n) for ep, n in sorted(snap.stalls.items())),
    )
    yield from f.labelled(
        _counter(
            "unheld_answers",
            "Answers outside a constrained step's allowed set (the constraint did not hold; "
            "sent again, never a decision).",
            "endpoint",
        ),
        (((ep,), n) for ep, n in sorted(snap.unheld.items())),
    )


def _serving(snap: JobSnapshot) -> Iterator[Metric]:
    f = _Families(snap.folder)
    info = InfoMetricFamily(
        f"{PREFIX}_serving",
        "What serves the job, per endpoint, as the server itself last said it.",
        labels=["job_folder", "endpoint"],
    )
    for endpoint, ident in sorted(snap.serving.identities.items()):
        info.add_metric([snap.folder, endpoint], {k: str(ident.get(k, "")) for k in SERVING_LABELS})
    if snap.serving.identities:
        yield info
    yield from f.gauge(
        "serving_epoch",
        "The job's serving epoch: 0 as the job first found its endpoints, +1 at every change.",
        snap.serving.epoch,
    )
    yield f.counter(
        "serving_changes",
        "Changes of what an endpoint serves (model, version, max length, cache), every run.",
        snap.serving.changes,
    )


@dataclass(frozen=True)
class SnapshotCollector(Collector):
    """A prometheus_client collector that asks `source` for a fresh snapshot on each scrape
    (a custom collector: the figures are computed, not updated metric by metric)."""

    source: Callable[[], JobSnapshot]

    def collect(self) -> Iterator[Metric]:
        return families(self.source())

    def describe(self) -> Iterator[Metric]:
        """Nothing: registering must not read the job (the registry would collect once)."""
        return iter(())


def job_registry(source: Callable[[], JobSnapshot]) -> CollectorRegistry:
    """A registry of its own (never prometheus_client's global one, which would add the
    process's own metrics and outlive the job) holding the job's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))
    return registry


def exposition(snap: JobSnapshot) -> bytes:
    """The snapshot in Prometheus' text format (a textfile, or a /metrics answer)."""
    return generate_latest(job_registry(lambda: snap))
