"""The maths of a job's timeline: counter deltas, hit rate, steady-state rates.

Pure functions over plain samples, so the report can be recomputed from the job directory
alone, over every run of a resumed job. vLLM counters are cumulative since server start and
reset when a server restarts; every delta here sums only increases, and treats a drop as a
restart (the new value counts from zero).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# Keys a timeline sample's "v" may carry (values summed over a backend's engines).
COUNTERS = (
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
)
GAUGES = ("kv_cache_usage", "running", "waiting")


def counter_increase(values: Sequence[float]) -> float:
    """Total increase of a counter over consecutive samples, surviving resets."""
    total = 0.0
    for prev, cur in itertools.pairwise(values):
        total += cur - prev if cur >= prev else cur
    return total


def series_by_backend(
    samples: Iterable[dict[str, Any]],
) -> dict[tuple[Any, str], list[dict[str, Any]]]:
    """Samples grouped per (run, endpoint), in time order, failed scrapes dropped."""
    groups: dict[tuple[Any, str], list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        if s.get("v"):
            groups[(s.get("run"), s.get("endpoint", ""))].append(s)
    for g in groups.values():
        g.sort(key=lambda s: s["t"])
    return groups


def counter_total(
    samples: Iterable[dict[str, Any]], name: str, t0: float | None = None, t1: float | None = None
) -> float:
    """Increase of counter `name` summed over backends (and runs), optionally within [t0, t1]."""
    total = 0.0
    for series in series_by_backend(samples).values():
        vals = [
            s["v"][name]
            for s in series
            if name in s["v"] and (t0 is None or s["t"] >= t0) and (t1 is None or s["t"] <= t1)
        ]
        total += counter_increase(vals)
    return total


def hit_rate(
    samples: Sequence[dict[str, Any]], t0: float | None = None, t1: float | None = None
) -> float | None:
    """Σ Δhits / Σ Δqueries over every backend: the run's prefix cache hit rate (tokens)."""
    queries = counter_total(samples, "prefix_cache_queries", t0, t1)
    if queries <= 0:
        return None
    return counter_total(samples, "prefix_cache_hits", t0, t1) / queries


def gauge_max(samples: Iterable[dict[str, Any]], name: str) -> float | None:
    vals = [s["v"][name] for s in samples if s.get("v") and name in s["v"]]
    return max(vals) if vals else None


@dataclass(frozen=True)
class Window:
    """A stretch of one run: [start, end] seconds (unix) with `count` records finished in it."""

    start: float
    end: float
    count: int

    @property
    def per_min(self) -> float | None:
        span = self.end - self.start
        return self.count / span * 60.0 if span > 0 else None


def steady_window(finish_times: Sequence[float], trim: float = 0.1) -> Window | None:
    """The middle of a run: between the `trim` and `1-trim` quantiles of completion times.

    A short run finishes slowly as the last records trickle through, and starts slowly
    while the cache warms; the seed measures records/min over the middle for that reason.
    """
    n = len(finish_times)
    if n < 10:
        return None
    ts = sorted(finish_times)
    lo = int(n * trim)
    hi = max(lo + 1, int(n * (1 - trim)) - 1)
    return Window(ts[lo], ts[hi], hi - lo)


def combined_per_min(windows: Iterable[Window | None]) -> float | None:
    """Records/min over several windows (one per run): total count over total time."""
    count = 0
    span = 0.0
    for w in windows:
        if w is not None and w.end > w.start:
            count += w.count
            span += w.end - w.start
    return count / span * 60.0 if span > 0 else None


def rate_per_s(
    samples: Sequence[dict[str, Any]], name: str, windows: Iterable[Window | None]
) -> float | None:
    """Counter increase per second within the given windows (e.g. prompt tokens/s, steady)."""
    total = 0.0
    span = 0.0
    for w in windows:
        if w is None or w.end <= w.start:
            continue
        total += counter_total(samples, name, w.start, w.end)
        span += w.end - w.start
    return total / span if span > 0 else None


def completion_rate_series(
    finish_times: Sequence[float], start: float, bucket: float
) -> tuple[list[float], list[float]]:
    """Records/min per time bucket: (bucket centres in seconds since `start`, rates).

    Plotted at its own times, independent of the metrics samples (see hit_rate_series).
    """
    if not finish_times:
        return [], []
    nb = max(1, int((max(finish_times) - start) // bucket) + 1)
    counts = [0] * nb
    for t in finish_times:
        counts[min(nb - 1, max(0, int((t - start) // bucket)))] += 1
    return [(i + 0.5) * bucket for i in range(nb)], [c / bucket * 60.0 for c in counts]


def hit_rate_series(
    samples: Sequence[dict[str, Any]], start: float
) -> tuple[list[float], list[float]]:
    """Hit rate between consecutive samples, summed over backends, at each sample's time.

    One point per sampling interval in which the cache was queried. Bucketing it on the
    records' clock instead left most buckets empty (and no line drawn) whenever the sampling
    interval was longer than a bucket.
    """
    hits: dict[float, float] = defaultdict(float)
    queries: dict[float, float] = defaultdict(float)
    for series in series_by_backend(samples).values():
        for prev, cur in itertools.pairwise(series):
            names = ("prefix_cache_queries", "prefix_cache_hits")
            if not all(n in prev["v"] and n in cur["v"] for n in names):
                continue
            q = counter_increase([prev["v"][names[0]], cur["v"][names[0]]])
            queries[cur["t"]] += q
            hits[cur["t"]] += counter_increase([prev["v"][names[1]], cur["v"][names[1]]])
    times = sorted(t for t, q in queries.items() if q > 0)
    return [t - start for t in times], [hits[t] / queries[t] for t in times]


class LiveHitRate:
    """Running Σ Δhits / Σ Δqueries over backends, in constant memory (for live progress)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}
        self.hits = 0.0
        self.queries = 0.0

    def add(self, endpoint: str, values: dict[str, float]) -> None:
        if "prefix_cache_queries" not in values or "prefix_cache_hits" not in values:
            return
        cur = (values["prefix_cache_queries"], values["prefix_cache_hits"])
        prev = self._last.get(endpoint)
        self._last[endpoint] = cur
        if prev is None:
            return
        self.queries += counter_increase([prev[0], cur[0]])
        self.hits += counter_increase([prev[1], cur[1]])

    @property
    def rate(self) -> float | None:
        return self.hits / self.queries if self.queries > 0 else None
