"""Compute the report (jobdir/job_report.JobReport, written as report.json) from a job
directory (results, runs, timeline, prefix analysis), read through its handle (JobFolder).

Definitions follow the seed: records/min over the whole run and over its middle (warm-up
and tail excluded), token rates from vLLM's counters, hit rate = Δhits/Δqueries summed over
backends, and the ceiling = whole shared blocks over prompt tokens.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sparkops.jobdir import lines
from sparkops.jobdir.folder import Manifest
from sparkops.jobdir.job_report import JobReport, PrefixRecord, Truncated
from sparkops.jobdir.reader import JobFolder
from sparkops.jobdir.serving_lines import ServingRecord
from sparkops.jobdir.status import answer_models, other_model_answers
from sparkops.jobdir.step_totals import StepTotals
from sparkops.metrics.bottleneck import Bottleneck, name_bottleneck
from sparkops.metrics.host import HostReading
from sparkops.metrics.timeline import (
    TimelineSample,
    TokenRates,
    Window,
    combined_per_min,
    counter_total,
    gauge_max,
    hit_rate,
    samples_inside,
    steady_token_rates,
    steady_window,
)
from sparkops.pipeline.check import ceiling
from sparkops.report import host as report_host
from sparkops.report import serving as report_serving
from sparkops.report import stalls
from sparkops.report.steps import (
    ABOVE_POINTS,
    above_ceiling,
    diagnose,
    impossible_usage_sentence,
    overall,
    short_prefix_note,
    usage_possible,
)

# A /metrics hit rate outside 0-100% (more hits than queries): counters that cannot be true.
METRICS_HIT_NOTE = (
    "Prefix cache: the servers' /metrics counted more cache hits than queries over the job, "
    "figures that cannot be true, so no hit rate is reported from them (a proxy's or an "
    "altered exporter's counters?); the per-step hit rates below come from the answers."
)


@dataclass
class Totals:
    """Streaming sums of the kit's per-record fields (times, run, calls, tokens)."""

    per_step: dict[str, StepTotals]
    reusable: dict[str, int]
    calls: int = 0
    done_calls: int = 0
    prompt: int = 0
    cached: int = 0
    completion: int = 0
    finish: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    done_finish: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    latencies: list[float] = field(default_factory=list)
    # per step: answers, and answers cut off at max_tokens (finish_reason "length")
    answers: Counter[str] = field(default_factory=Counter)
    cut: Counter[str] = field(default_factory=Counter)
    # answers whose usage figures cannot be true (steps.usage_possible): in no token figure
    impossible: int = 0
    # answers per model they named (the pipeline's and any other: jobdir/status.py)
    models: Counter[str] = field(default_factory=Counter)

    def add(self, timing: lines.Timing) -> None:
        steps = timing.steps
        self.calls += len(steps)
        t = timing.t
        if timing.ok:
            self.done_calls += len(steps)
            if timing.latency is not None:
                self.latencies.append(timing.latency)
        if t is not None:
            self.finish[timing.run].append(t)
            if timing.ok:
                self.done_finish[timing.run].append(t)
        self.models.update(answer_models(timing))
        for s in steps:
            self.answers[s.step] += 1
            self.cut[s.step] += s.cut
            if not usage_possible(s.prompt_tokens, s.completion_tokens, s.cached_tokens):
                self.impossible += 1
                continue
            self.prompt += s.prompt_tokens
            self.cached += s.cached_tokens or 0
            self.completion += s.completion_tokens
            if s.prompt_tokens:
                self.per_step.setdefault(s.step, StepTotals()).add(
                    s.prompt_tokens, s.cached_tokens, self.reusable.get(s.step)
                )


@dataclass
class JobData:
    """Everything the report needs from a job folder, read once (`load_dir`)."""

    manifest: Manifest
    totals: Totals
    prefix: PrefixRecord  # prefix.json (the probe at the job's start), empty when unreadable
    records: int = 0  # results lines (each record once)
    done: int = 0
    errors: int = 0
    finals: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # finished records per serving epoch (report/serving.py)
    serving_epochs: Counter[int] = field(default_factory=Counter)
    runs: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    # per run, its end line's active_s (monotonic seconds from its start to its last record)
    active: dict[int, float] = field(default_factory=dict)
    concurrency: dict[int, int] = field(default_factory=dict)
    schedules: list[str] = field(default_factory=list)
    # "stalled"/"rejoined" endpoint events (batch/stall.py)
    stall_events: list[lines.RunEvent] = field(default_factory=list)
    samples: list[TimelineSample] = field(default_factory=list)
    serving_lines: list[ServingRecord] = field(default_factory=list)
    # the host's readings while the job ran (host.jsonl, batch/host_watch.py)
    host_readings: list[HostReading] = field(default_factory=list)
    # results lines that count no record (damaged, or a finished record's second line)
    damage: lines.ResultsDamage = field(default_factory=lines.ResultsDamage)


def load_dir(directory: Path) -> JobData:
    """Everything the report needs, read once (results are reduced while streaming).

    Counts come from results.jsonl, the job's authority. Times, runs and token counts come
    from the same lines for a pipeline job, and from openai-meta.jsonl for an OpenAI batch
    job, whose output lines carry nothing but OpenAI's fields (see jobdir/openai_lines.py).
    """
    folder = JobFolder(directory)
    manifest = folder.manifest()
    # derived data, rewritten by every run: an unreadable one only drops the ceiling
    prefix = folder.prefix()
    reusable = {k: v.reusable_tokens for k, v in (prefix.steps or {}).items()}
    totals = Totals({name: StepTotals() for name in reusable}, reusable)
    data = JobData(manifest, totals, prefix)
    for obj, _ in folder.results(data.damage):
        line = lines.read_finished(obj)
        data.records += 1
        if line.outcome.ok:
            data.done += 1
            if line.outcome.final is not None:
                data.finals[line.outcome.final] += 1
        else:
            data.errors += 1
        if line.timing is not None:
            totals.add(line.timing)
            if line.timing.serving is not None:
                data.serving_epochs[line.timing.serving] += 1
    for timing in folder.meta_timings():
        totals.add(timing)
        if timing.serving is not None:
            data.serving_epochs[timing.serving] += 1
    for r in folder.runs():
        if r.t is not None:
            data.runs[r.run][r.event] = r.t
        if r.event == "end" and r.active_s is not None:
            data.active[r.run] = r.active_s
        if r.event in ("stalled", "rejoined"):
            data.stall_events.append(r)
        if r.event == "start":
            data.schedules.append(r.schedule)
            if r.concurrency is not None:
                data.concurrency[r.run] = r.concurrency
    data.samples = list(folder.timeline())
    data.serving_lines = list(folder.serving())
    data.host_readings = report_host.load_readings(directory)
    return data


def compute_report(data: JobData) -> JobReport:
    """The report from `load_dir` output (pure); report.json is its `to_json()`."""
    totals = data.totals
    finish = totals.finish
    samples = data.samples
    span = 0.0
    for run, ts in finish.items():
        if run in data.active:  # the monotonic span: a wall-clock step cannot change it
            span += data.active[run]
            continue
        start = data.runs.get(run, {}).get("start", min(ts))  # older runs: wall-clock stamps
        span += max(ts) - start
    # records/min counts records done, not errors (issue 21): the span is the whole run's,
    # errors included, but only done records count in it and in the steady windows
    done_finish = totals.done_finish
    done_in_span = sum(len(ts) for ts in done_finish.values())
    windows, steady_reason = steady_windows(done_finish, data.concurrency)
    steady = combined_per_min(windows)
    if data.done == 0:
        steady = None
        steady_reason = "no record was done, so there is no throughput to measure"
    elif steady is None and steady_reason is None:
        steady_reason = "too few records finished in any run to measure a steady state"
    # token rates and hit rate over the steady windows when there are any, else everything
    use = [w for w in windows if w is not None] or None
    rates = steady_token_rates(samples, use) if use else TokenRates(None, None, None)
    # the job's ceiling from the same per-step sums (each already min(reusable, prompt))
    per_step = totals.per_step.values()
    probed = [(t.reusable_tokens, t.prompt_tokens) for t in per_step if t.ceiling_known]
    ceil = ceiling(probed) if probed else None
    kv = gauge_max(samples, "kv_cache_usage")
    job_hit = hit_rate(samples)
    metrics_note = None
    if job_hit is not None and not 0.0 <= job_hit <= 1.0:  # more hits than queries
        job_hit, metrics_note = None, METRICS_HIT_NOTE
    counted = totals.calls - totals.impossible  # calls whose token counts are summed
    # hit rate lost to cache pressure, where the ceiling says it (the KV cache is named the
    # bottleneck on that or on preemptions, not on how full it ran)
    pressure = None
    if ceil is not None and job_hit is not None:
        pressure = max(0.0, (ceil - job_hit) * 100)
    neck = job_bottleneck(samples, windows, data.concurrency, data.records, pressure)
    steps = diagnose({k: v for k, v in totals.per_step.items() if v.calls})
    return JobReport(
        records=data.manifest.total,
        finished=data.records,
        done=data.done,
        errors=data.errors,
        calls=totals.calls,
        calls_per_record=round(totals.done_calls / data.done, 3) if data.done else None,
        records_per_min=_r(done_in_span / span * 60 if span > 0 and done_in_span else None),
        records_per_min_steady=_r(steady),
        records_per_min_steady_reason=steady_reason if steady is None else None,
        computed_tok_s=_r(rates.computed_tok_s),
        effective_tok_s=_r(rates.effective_tok_s),
        computed_prompt_tok_s=_r(rates.computed_prompt_tok_s),
        prompt_tok_s=_r(rates.prompt_tok_s),
        generation_tok_s=_r(rates.generation_tok_s),
        steady_samples=samples_inside(samples, use or []),
        bottleneck=neck.kind if neck else None,
        bottleneck_sentence=neck.sentence if neck else None,
        prefix_cache_hit_rate=_r(job_hit, 4),
        prefix_cache_hit_rate_ceiling=_r(ceil, 4),
        prefix_cache_hit_rate_note=metrics_note or hit_rate_note(_r(job_hit, 4), _r(ceil, 4)),
        cached_tokens_share=_r(totals.cached / totals.prompt, 4) if totals.prompt else None,
        prompt_tokens_per_call=_r(totals.prompt / counted) if counted else None,
        completion_tokens_per_call=_r(totals.completion / counted) if counted else None,
        usage_impossible_answers=totals.impossible,
        usage_impossible_note=impossible_usage_sentence(totals.impossible)
        if totals.impossible
        else None,
        record_latency_p50_s=_r(percentile(totals.latencies, 50)),
        record_latency_p95_s=_r(percentile(totals.latencies, 95)),
        kv_cache_usage_max=_r(kv, 4),
        preemptions=int(counter_total(samples, "preemptions")),
        block_size=data.prefix.block_size,
        prefix_steps=data.prefix.steps,
        steps=tuple(steps),
        hit_rate_verdict=" ".join(filter(None, (overall(steps), short_prefix_note(data.prefix))))
        or None,
        runs=len(data.runs) or len(finish),
        schedule="+".join(dict.fromkeys(data.schedules)) or None,
        wall_s=_r(span),
        finals=dict(data.finals),
        results_damaged_lines=data.damage.damaged,
        results_repeated_lines=data.damage.repeated,
        results_lines_note=data.damage.sentence() if data.damage else None,
        truncated_answers={
            step: Truncated(cut=n, answers=totals.answers[step])
            for step, n in totals.cut.items()
            if n
        },
        stalled_endpoints=tuple(stalls.summarise(data.stall_events)),
        other_model_answers=other_model_answers(totals.models, data.serving_lines),
        serving=report_serving.summarise(data.serving_lines, data.serving_epochs, data.samples),
        host=report_host.summarise(data.host_readings, samples, job_origin(data)),
    )


def job_origin(data: JobData) -> float | None:
    """When the job started (its first run's start line), for times on the job's timeline."""
    starts = [r["start"] for r in data.runs.values() if "start" in r]
    return min(starts) if starts else None


def job_bottleneck(
    samples: list[TimelineSample],
    windows: list[Window | None],
    concurrency: dict[int, int],
    records: int,
    pressure_points: float | None = None,
) -> Bottleneck | None:
    """What bound the job, over its longest steady window at that run's concurrency."""
    timed = [w for w in windows if w is not None and w.end > w.start]
    if not samples or not concurrency:
        return None
    window = max(timed, key=lambda w: w.end - w.start) if timed else None
    return name_bottleneck(
        samples, max(concurrency.values()), window, records=records, pressure_points=pressure_points
    )


def steady_windows(
    finish: dict[int, list[float]], concurrency: dict[int, int]
) -> tuple[list[Window | None], str | None]:
    """Each run's middle window, leaving out runs too short to have a steady state.

    A run that finishes no more records than its concurrency admitted all of them at once:
    nothing waits for a free slot, so the middle of its completion times is the burst of
    answers at the end (the seed saw 739 records/min "steady" against 222 over the whole
    run). Such a run has no steady state; the reason says so instead of a number.
    """
    windows: list[Window | None] = []
    short: list[tuple[int, int]] = []
    for run, ts in finish.items():
        limit = concurrency.get(run)
        if limit is not None and len(ts) <= limit:
            short.append((len(ts), limit))
            continue
        windows.append(steady_window(ts))
    if short and not any(w is not None for w in windows):
        n, limit = max(short)
        return windows, (
            f"too short for a steady state: {n:,} records with --concurrency {limit:,} were all "
            "admitted at once, so the middle of the run measures the burst of answers at the "
            "end; give a run more records than its concurrency (or a lower --concurrency) to "
            "measure it"
        )
    return windows, None


def hit_rate_note(achieved: float | None, ceiling: float | None) -> str | None:
    """A sentence when the job's hit rate beats the prompts' ceiling (see steps.above_ceiling)."""
    if achieved is None or ceiling is None or (achieved - ceiling) * 100 <= ABOVE_POINTS:
        return None
    return "Prefix cache: " + above_ceiling(achieved, ceiling)


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (no interpolation: a latency some record really had)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * pct / 100)) - 1]


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)
