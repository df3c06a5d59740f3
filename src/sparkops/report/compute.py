"""Compute report.json from a job directory (results, runs, timeline, prefix analysis).

Definitions follow the seed: records/min over the whole run and over its middle (warm-up
and tail excluded), token rates from vLLM's counters, hit rate = Δhits/Δqueries summed over
backends, and the ceiling = whole shared blocks over prompt tokens.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from sparkops.batch.journal import (
    RESULTS,
    RUNS,
    TIMELINE,
    iter_results,
    load_manifest,
    read_json_file,
)
from sparkops.metrics.timeline import (
    combined_per_min,
    counter_total,
    gauge_max,
    hit_rate,
    rate_per_s,
    steady_window,
)
from sparkops.pipeline.check import ceiling
from sparkops.report.steps import StepTotals, diagnose, overall

PREFIX = "prefix.json"


def load_dir(directory: Path) -> dict[str, Any]:
    """Everything the report needs, read once (results are reduced while streaming)."""
    manifest = load_manifest(directory)
    finish: dict[Any, list[float]] = defaultdict(list)
    records = done = errors = calls = 0
    done_calls = 0
    prompt = cached = completion = 0
    prefix = {}
    if (directory / PREFIX).exists():
        # derived data, rewritten by every run: an unreadable one only drops the ceiling
        loaded = read_json_file(directory / PREFIX)
        prefix = loaded if isinstance(loaded, dict) else {}
    reusable = {k: v.get("reusable_tokens", 0) for k, v in (prefix.get("steps") or {}).items()}
    finals: dict[str, int] = defaultdict(int)
    per_step = {name: StepTotals() for name in reusable}
    latencies: list[float] = []
    for obj in iter_results(directory / RESULTS):
        records += 1
        ok = obj.get("status") == "done" if "status" in obj else obj.get("error") is None
        steps = obj.get("steps") or []
        calls += len(steps)
        if ok:
            done += 1
            done_calls += len(steps)
            if obj.get("final") is not None:
                finals[str(obj["final"])] += 1
            if obj.get("t0") is not None and "t" in obj:
                latencies.append(obj["t"] - obj["t0"])
        else:
            errors += 1
        if "t" in obj:
            finish[obj.get("run")].append(obj["t"])
        for s in steps:
            p = s.get("prompt_tokens") or 0
            prompt += p
            cached += s.get("cached_tokens") or 0
            completion += s.get("completion_tokens") or 0
            if p:
                name = str(s.get("step"))
                per_step.setdefault(name, StepTotals()).add(
                    p, s.get("cached_tokens"), reusable.get(name)
                )
    runs: dict[Any, dict[str, float]] = defaultdict(dict)
    schedules: list[str] = []
    for r in iter_results(directory / RUNS):
        runs[r.get("run")][r.get("event", "")] = r.get("t")
        if r.get("event") == "start":
            schedules.append(r.get("schedule", "fifo"))
    samples = list(iter_results(directory / TIMELINE))
    return {
        "manifest": manifest,
        "records": records,
        "done": done,
        "errors": errors,
        "calls": calls,
        "done_calls": done_calls,
        "prompt": prompt,
        "cached": cached,
        "completion": completion,
        "finish": dict(finish),
        "runs": dict(runs),
        "samples": samples,
        "prefix": prefix,
        "finals": dict(finals),
        "per_step": per_step,
        "schedules": schedules,
        "latencies": latencies,
    }


def compute_report(data: dict[str, Any]) -> dict[str, Any]:
    """report.json content from `load_dir` output (pure)."""
    finish = data["finish"]
    samples = data["samples"]
    span = 0.0
    for run, ts in finish.items():
        start = data["runs"].get(run, {}).get("start", min(ts))
        span += max(ts) - start
    finished = sum(len(ts) for ts in finish.values())
    windows = [steady_window(ts) for ts in finish.values()]
    steady = combined_per_min(windows)
    # token rates and hit rate over the steady windows when there are any, else everything
    use = [w for w in windows if w is not None] or None
    prompt_tps = rate_per_s(samples, "prompt_tokens", use) if use else None
    gen_tps = rate_per_s(samples, "generation_tokens", use) if use else None
    # the job's ceiling from the same per-step sums (each already min(reusable, prompt))
    per_step = data["per_step"].values()
    probed = [(t.reusable_tokens, t.prompt_tokens) for t in per_step if t.ceiling_known]
    ceil = ceiling(probed) if probed else None
    kv = gauge_max(samples, "kv_cache_usage")
    steps = diagnose({k: v for k, v in data["per_step"].items() if v.calls})
    return {
        "records": data["manifest"].get("total", data["records"]),
        "finished": data["records"],
        "done": data["done"],
        "errors": data["errors"],
        "calls": data["calls"],
        "calls_per_record": round(data["done_calls"] / data["done"], 3) if data["done"] else None,
        "records_per_min": _r(finished / span * 60 if span > 0 else None),
        "records_per_min_steady": _r(steady),
        "prompt_tokens_per_s": _r(prompt_tps),
        "generation_tokens_per_s": _r(gen_tps),
        "prefix_cache_hit_rate": _r(hit_rate(samples), 4),
        "prefix_cache_hit_rate_ceiling": _r(ceil, 4),
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
    }


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (no interpolation: a latency some record really had)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * pct / 100)) - 1]


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)
