"""Name what bound a run, from what the client already samples (timeline.jsonl).

Each timeline line holds one backend's gauges (`running`, `waiting`, `kv_cache_usage`), its
`preemptions` counter, and the client's own `in_flight` and, when recorded, `cpu_s` (the
client process's CPU seconds). Per sampling tick the backends are added up; the medians over
the steady window decide, in this order:

- client: the client process used most of a core (`cpu_s` rising >= 0.85 s/s; the batch
  client is one asyncio loop, one core), or it kept fewer calls in flight than its
  concurrency (< 80%);
- KV cache: any preemption in the window, or a full cache (above ~70%) with hit rate measured
  lost to cache pressure (the report's own split of the gap below the prompts' ceiling). A full
  cache alone is not a bottleneck: shared blocks that running calls reference are never
  evicted, and the H200 ran Gemma 4 at 69-81% full with no hit rate lost (benchmarks/README.md);
- front end: calls in flight ~ concurrency, but the engines run less than half of them and
  nothing waits: the calls are in the API server (HTTP, tokenising, detokenising), not the
  engine, so `--api-server-count` is the lever;
- engine: the engines hold the calls (running + waiting ~ in flight). With requests waiting the
  scheduler is full; without, the GPU may still be saturated (the decode ceiling, `sparkops plan
  decode`, says where more concurrency stops buying speed).

A throughput calibrated at one level carries over to another only when both name the same
bottleneck (bench/sweep.py, plan/throughput.py).
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from sparkops.metrics.timeline import TimelineSample, Window, counter_increase, series_by_backend

Kind = Literal["client", "kv-cache", "front-end", "engine", "unknown"]

# How a sentence names each kind: "bound by the front end".
LABELS = {
    "client": "client",
    "kv-cache": "KV cache",
    "front-end": "front end",
    "engine": "engine",
    "unknown": "unknown",
}


def label(kind: str | None) -> str:
    return LABELS.get(kind or "unknown", kind or "unknown")


CLIENT_CPU_BUSY = 0.85  # CPU seconds per second of the client's one event loop
IN_FLIGHT_SHORT = 0.8  # in flight below this share of --concurrency: the client fell behind
KV_BUSY = 0.70  # the seed lost hit rate above ~70%; a cue, judged by the hit rate measured
# Points of hit rate below the prompts' ceiling that still count as "at the ceiling" (vLLM
# keeps the last prompt token out of the cache and counts whole blocks): not pressure.
PRESSURE_POINTS = 2.0
ENGINE_HOLDS = 0.5  # running + waiting below this share of in flight: calls sit in the front end


@dataclass(frozen=True)
class Bottleneck:
    """What bound a run, the evidence, and one sentence a user reads."""

    kind: Kind
    sentence: str
    in_flight: float | None
    running: float | None
    waiting: float | None
    kv_usage_max: float | None
    preemptions: float | None
    client_cpu: float | None  # CPU seconds per second

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ticks(samples: Sequence[TimelineSample], window: Window | None) -> list[dict[str, float]]:
    """Backends added up per (run, time) tick, inside the window when it holds any."""
    per: dict[tuple[int, float], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in samples:
        v = s.v
        if not v:
            continue
        tick = per[(s.run, s.t)]
        tick["t"] = s.t
        tick["running"] += v.get("running", 0.0)
        tick["waiting"] += v.get("waiting", 0.0)
        tick["kv"] = max(tick["kv"], v.get("kv_cache_usage", 0.0))
        if s.in_flight is not None:
            tick["in_flight"] = s.in_flight
    ticks = sorted(per.values(), key=lambda t: t["t"])
    if window is not None:
        inside = [t for t in ticks if window.start <= t["t"] <= window.end]
        if inside:
            return inside
    return ticks


def _client_cpu(samples: Sequence[TimelineSample], window: Window | None) -> float | None:
    """The client's CPU seconds per wall second over the window (one series per run)."""
    runs: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        if s.cpu_s is None:
            continue
        if window is None or window.start <= s.t <= window.end:
            runs[s.run].append((s.t, s.cpu_s))
    cpu = wall = 0.0
    for points in runs.values():
        points = sorted(set(points))
        for (t0, c0), (t1, c1) in itertools.pairwise(points):
            if t1 > t0 and c1 >= c0:
                cpu += c1 - c0
                wall += t1 - t0
    return cpu / wall if wall > 0 else None


def _preemptions(samples: Sequence[TimelineSample], window: Window | None) -> float | None:
    total = 0.0
    found = False
    for series in series_by_backend(samples).values():
        vals = [
            s.v["preemptions"]
            for s in series
            if "preemptions" in s.v and (window is None or window.start <= s.t <= window.end)
        ]
        if vals:
            found = True
            total += counter_increase(vals)
    return total if found else None


def _median(ticks: list[dict[str, float]], key: str) -> float | None:
    vals = [t[key] for t in ticks if key in t]
    return statistics.median(vals) if vals else None


def name_bottleneck(
    samples: Sequence[TimelineSample],
    concurrency: int,
    window: Window | None = None,
    records: int | None = None,
    pressure_points: float | None = None,
) -> Bottleneck:
    """The bottleneck of one run (or sweep level) at `concurrency` over its steady window.

    `records`: how many the run had, when fewer than `concurrency` (all in flight at once).
    `pressure_points`: hit-rate points lost to cache pressure, where the run can tell (the
    prompts' ceiling known); None when it cannot."""
    if records is not None:
        concurrency = max(1, min(concurrency, records))
    ticks = _ticks(samples, window)
    in_flight = _median(ticks, "in_flight")
    running = _median(ticks, "running") if ticks else None
    waiting = _median(ticks, "waiting") if ticks else None
    kv = max((t["kv"] for t in ticks), default=None) if ticks else None
    preempted = _preemptions(samples, window)
    cpu = _client_cpu(samples, window)
    evidence = {
        "in_flight": in_flight,
        "running": running,
        "waiting": waiting,
        "kv_usage_max": kv,
        "preemptions": preempted,
        "client_cpu": cpu,
    }

    def verdict(kind: Kind, sentence: str) -> Bottleneck:
        return Bottleneck(kind=kind, sentence=sentence, **evidence)

    if running is None:
        return verdict("unknown", "no /metrics samples in the steady window: nothing to name")
    held = in_flight if in_flight is not None else float(concurrency)
    if cpu is not None and cpu >= CLIENT_CPU_BUSY:
        return verdict(
            "client",
            f"the client: its process used {cpu:.2f} CPU s/s (one event loop, one core); run "
            "it on a quieter machine or split the input over two clients",
        )
    if in_flight is not None and in_flight < IN_FLIGHT_SHORT * concurrency:
        return verdict(
            "client",
            f"the client: it kept {in_flight:,.0f} calls in flight of --concurrency "
            f"{concurrency:,} (records or retries did not arrive fast enough)",
        )
    if (preempted or 0) > 0:
        return verdict(
            "kv-cache",
            f"the KV cache: {preempted:,.0f} preemptions ({kv or 0:.0%} full at most): lower "
            "--concurrency or give vLLM a bigger --kv-cache-memory-bytes",
        )
    if (kv or 0) > KV_BUSY and (pressure_points or 0) > PRESSURE_POINTS:
        return verdict(
            "kv-cache",
            f"the KV cache: {kv or 0:.0%} full at most and {pressure_points:.1f} points of hit "
            "rate lost to cache pressure (shared blocks evicted between uses): try --schedule "
            "step-aware, lower --concurrency or give vLLM a bigger --kv-cache-memory-bytes",
        )
    if (
        held >= IN_FLIGHT_SHORT * concurrency
        and running + (waiting or 0.0) < ENGINE_HOLDS * held
        and not waiting
    ):
        return verdict(
            "front-end",
            f"the server's front end: {held:,.0f} calls in flight but the engine ran "
            f"{running:,.0f} and none waited, so calls queue in the API server (HTTP, "
            "tokenising); raise vLLM's --api-server-count (one process per core it may use): "
            'on a Spark, copy the model profile, add ["--api-server-count", "4"] to its '
            "vllm.extra_args, set vllm_serving_profile to the copy's path and run deploy.yml; "
            "`sparkops local up` runs one API server per replica, so start more --replicas",
        )
    queued = f", {waiting:,.0f} waiting" if waiting else ", none waiting"
    return verdict(
        "engine",
        f"the engine: it ran {running:,.0f} of {held:,.0f} calls in flight{queued}; the "
        "GPU's computed tok/s is the limit (`sparkops plan decode` shows whether more "
        "concurrency still buys decode speed)",
    )
