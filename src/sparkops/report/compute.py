"""Compute report.json from a job directory (results, runs, timeline, prefix analysis).

Definitions follow the seed: records/min over the whole run and over its middle (warm-up
and tail excluded), token rates from vLLM's counters, hit rate = Δhits/Δqueries summed over
backends, and the ceiling = whole shared blocks over prompt tokens.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.batch import lines, stall
from sparkops.batch.durable import iter_json_lines, read_json_file
from sparkops.batch.jobdir import META, RESULTS, RUNS, SERVING, TIMELINE, load_manifest
from sparkops.metrics.bottleneck import Bottleneck, name_bottleneck
from sparkops.metrics.timeline import (
    TimelineSample,
    TokenRates,
    Window,
    combined_per_min,
    counter_total,
    gauge_max,
    hit_rate,
    steady_token_rates,
    steady_window,
)
from sparkops.pipeline.check import ceiling
from sparkops.report import serving as report_serving
from sparkops.report.steps import (
    ABOVE_POINTS,
    StepTotals,
    above_ceiling,
    diagnose,
    overall,
)

PREFIX = "prefix.json"


def load_dir(directory: Path) -> dict[str, Any]:
    """Everything the report needs, read once (results are reduced while streaming).

    Counts come from results.jsonl, the job's authority. Times, runs and token counts come
    from the same lines for a pipeline job, and from openai-meta.jsonl for an OpenAI batch
    job, whose output lines carry nothing but OpenAI's fields (see batch/openai_batch.py).
    """
    manifest = load_manifest(directory)
    prefix = {}
    if (directory / PREFIX).exists():
        # derived data, rewritten by every run: an unreadable one only drops the ceiling
        loaded = read_json_file(directory / PREFIX)
        prefix = loaded if isinstance(loaded, dict) else {}
    reusable = {k: v.get("reusable_tokens", 0) for k, v in (prefix.get("steps") or {}).items()}
    t = _Telemetry({name: StepTotals() for name in reusable}, reusable)
    records = done = errors = 0
    finals: dict[str, int] = defaultdict(int)
    epochs: Counter[Any] = Counter()  # finished records per serving epoch (report/serving.py)
    for obj in _objects(directory / RESULTS):
        records += 1
        if "serving" in obj:
            epochs[obj["serving"]] += 1
        ok = lines.succeeded(obj)
        if ok:
            done += 1
            if obj.get("final") is not None:
                finals[str(obj["final"])] += 1
        else:
            errors += 1
        if "status" in obj or "t" in obj:  # a pipeline line (or an older OpenAI line)
            t.add(obj, ok)
    for meta in _objects(directory / META):
        t.add(meta, bool(meta.get("ok")))
        if "serving" in meta:
            epochs[meta["serving"]] += 1
    runs: dict[Any, dict[str, float]] = defaultdict(dict)
    concurrency: dict[Any, int] = {}
    schedules: list[str] = []
    stalls: list[lines.RunEvent] = []  # "stalled"/"rejoined" endpoint events (batch/stall.py)
    for r in lines.run_events(directory / RUNS):
        if r.t is not None:
            runs[r.run][r.event] = r.t
        if r.event in ("stalled", "rejoined"):
            stalls.append(r)
        if r.event == "start":
            schedules.append(r.schedule)
            if r.concurrency is not None:
                concurrency[r.run] = r.concurrency
    samples = list(lines.timeline_samples(directory / TIMELINE))
    return {
        "manifest": manifest,
        "records": records,
        "done": done,
        "errors": errors,
        "calls": t.calls,
        "done_calls": t.done_calls,
        "prompt": t.prompt,
        "cached": t.cached,
        "completion": t.completion,
        "finish": dict(t.finish),
        "done_finish": dict(t.done_finish),
        "runs": dict(runs),
        "concurrency": concurrency,
        "samples": samples,
        "prefix": prefix,
        "finals": dict(finals),
        "per_step": t.per_step,
        "schedules": schedules,
        "latencies": t.latencies,
        "stall_events": stalls,
        "serving_lines": list(lines.serving_lines(directory / SERVING)),
        "serving_epochs": dict(epochs),
    }


def _number(x: Any) -> float | None:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _objects(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a job file; a line that is valid JSON but not an object (a hand
    edit, another tool's file) is skipped rather than crashing the report."""
    return iter_json_lines(path)


@dataclass
class _Telemetry:
    """Streaming sums of the kit's per-record fields (times, run, steps)."""

    per_step: dict[str, StepTotals]
    reusable: dict[str, int]
    calls: int = 0
    done_calls: int = 0
    prompt: int = 0
    cached: int = 0
    completion: int = 0
    finish: dict[Any, list[float]] = field(default_factory=lambda: defaultdict(list))
    done_finish: dict[Any, list[float]] = field(default_factory=lambda: defaultdict(list))
    latencies: list[float] = field(default_factory=list)

    def add(self, obj: dict[str, Any], ok: bool) -> None:
        steps = [s for s in obj.get("steps") or [] if isinstance(s, dict)]
        self.calls += len(steps)
        t, t0 = _number(obj.get("t")), _number(obj.get("t0"))
        if ok:
            self.done_calls += len(steps)
            if t0 is not None and t is not None:
                self.latencies.append(t - t0)
        if t is not None:
            self.finish[obj.get("run")].append(t)
            if ok:
                self.done_finish[obj.get("run")].append(t)
        for s in steps:
            p = s.get("prompt_tokens") or 0
            self.prompt += p
            self.cached += s.get("cached_tokens") or 0
            self.completion += s.get("completion_tokens") or 0
            if p:
                name = str(s.get("step"))
                self.per_step.setdefault(name, StepTotals()).add(
                    p, s.get("cached_tokens"), self.reusable.get(name)
                )


def compute_report(data: dict[str, Any]) -> dict[str, Any]:
    """report.json content from `load_dir` output (pure)."""
    finish = data["finish"]
    samples = data["samples"]
    span = 0.0
    for run, ts in finish.items():
        start = data["runs"].get(run, {}).get("start", min(ts))
        span += max(ts) - start
    # records/min counts records done, not errors (issue 21): the span is the whole run's,
    # errors included, but only done records count in it and in the steady windows
    done_finish = data.get("done_finish", finish)
    done_in_span = sum(len(ts) for ts in done_finish.values())
    windows, steady_reason = steady_windows(done_finish, data.get("concurrency", {}))
    steady = combined_per_min(windows)
    if data["done"] == 0:
        steady = None
        steady_reason = "no record was done, so there is no throughput to measure"
    elif steady is None and steady_reason is None:
        steady_reason = "too few records finished in any run to measure a steady state"
    # token rates and hit rate over the steady windows when there are any, else everything
    use = [w for w in windows if w is not None] or None
    rates = steady_token_rates(samples, use) if use else TokenRates(None, None, None)
    neck = job_bottleneck(samples, windows, data.get("concurrency", {}), data["records"])
    # the job's ceiling from the same per-step sums (each already min(reusable, prompt))
    per_step = data["per_step"].values()
    probed = [(t.reusable_tokens, t.prompt_tokens) for t in per_step if t.ceiling_known]
    ceil = ceiling(probed) if probed else None
    kv = gauge_max(samples, "kv_cache_usage")
    job_hit = hit_rate(samples)
    steps = diagnose({k: v for k, v in data["per_step"].items() if v.calls})
    return {
        "records": data["manifest"].total,
        "finished": data["records"],
        "done": data["done"],
        "errors": data["errors"],
        "calls": data["calls"],
        "calls_per_record": round(data["done_calls"] / data["done"], 3) if data["done"] else None,
        "records_per_min": _r(done_in_span / span * 60 if span > 0 and done_in_span else None),
        "records_per_min_steady": _r(steady),
        "records_per_min_steady_reason": steady_reason if steady is None else None,
        **{name: _r(value) for name, value in rates.as_dict().items()},
        "bottleneck": neck.kind if neck else None,
        "bottleneck_sentence": neck.sentence if neck else None,
        "prefix_cache_hit_rate": _r(job_hit, 4),
        "prefix_cache_hit_rate_ceiling": _r(ceil, 4),
        "prefix_cache_hit_rate_note": hit_rate_note(_r(job_hit, 4), _r(ceil, 4)),
        "cached_tokens_share": _r(data["cached"] / data["prompt"], 4) if data["prompt"] else None,
        "prompt_tokens_per_call": _r(data["prompt"] / data["calls"]) if data["calls"] else None,
        "completion_tokens_per_call": _r(data["completion"] / data["calls"])
        if data["calls"]
        else None,
        "record_latency_p50_s": _r(percentile(data.get("latencies", []), 50)),
        "record_latency_p95_s": _r(percentile(data.get("latencies", []), 95)),
        "kv_cache_usage_max": _r(kv, 4),
        "preemptions": int(counter_total(samples, "preemptions")),
        "block_size": (data["prefix"] or {}).get("block_size"),
        "prefix_steps": (data["prefix"] or {}).get("steps"),
        "steps": steps,
        "hit_rate_verdict": overall(steps),
        "runs": len(data["runs"]) or len(finish),
        "schedule": "+".join(dict.fromkeys(data.get("schedules", []))) or None,
        "wall_s": _r(span),
        "finals": data["finals"],
        "stalled_endpoints": [row.as_dict() for row in stall.summarise(data["stall_events"])],
        "serving": report_serving.summarise(
            data.get("serving_lines", []), data.get("serving_epochs", {}), data["samples"]
        ),
    }


def job_bottleneck(
    samples: list[TimelineSample],
    windows: list[Window | None],
    concurrency: dict[Any, int],
    records: int,
) -> Bottleneck | None:
    """What bound the job, over its longest steady window at that run's concurrency."""
    timed = [w for w in windows if w is not None and w.end > w.start]
    if not samples or not concurrency:
        return None
    window = max(timed, key=lambda w: w.end - w.start) if timed else None
    return name_bottleneck(samples, max(concurrency.values()), window, records=records)


def steady_windows(
    finish: dict[Any, list[float]], concurrency: dict[Any, int]
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
