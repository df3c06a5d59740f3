"""The maths of a job's timeline: counter deltas, hit rate, steady-state rates.

Pure functions over timeline samples (`TimelineSample`, one line of timeline.jsonl; read and
written through jobdir/lines.py), so the report can be recomputed from the job directory
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
TOKEN_COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens", "generation_tokens")


@dataclass(slots=True)
class TimelineSample:
    """One /metrics sample of one endpoint, with the job's progress at that moment.

    `v` is empty for a failed scrape. `done`, `in_flight` and `cpu_s` (the client's own CPU
    seconds so far, metrics/bottleneck.py) are None in lines of older clients that lacked
    them. Defined here, below `batch`, because every function of this module reads it.
    """

    t: float
    run: int
    endpoint: str
    v: dict[str, float]
    done: int | None
    in_flight: int | None
    cpu_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "run": self.run,
            "endpoint": self.endpoint,
            "v": self.v,
            "done": self.done,
            "in_flight": self.in_flight,
            "cpu_s": self.cpu_s,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TimelineSample | None:
        """A line read back; None when it has no time (nothing can place it)."""
        t = _number(obj.get("t"))
        if t is None:
            return None
        v = obj.get("v")
        run = obj.get("run")
        done, in_flight = _number(obj.get("done")), _number(obj.get("in_flight"))
        return cls(
            t,
            run if isinstance(run, int) and not isinstance(run, bool) else 0,
            str(obj.get("endpoint", "")),
            {k: x for k, x in v.items() if _number(x) is not None} if isinstance(v, dict) else {},
            None if done is None else int(done),
            None if in_flight is None else int(in_flight),
            _number(obj.get("cpu_s")),
        )


def _number(x: Any) -> float | None:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def counter_increase(values: Sequence[float]) -> float:
    """Total increase of a counter over consecutive samples, surviving resets."""
    total = 0.0
    for prev, cur in itertools.pairwise(values):
        total += cur - prev if cur >= prev else cur
    return total


def series_by_backend(
    samples: Iterable[TimelineSample],
) -> dict[tuple[int, str], list[TimelineSample]]:
    """Samples grouped per (run, endpoint), in time order, failed scrapes dropped."""
    groups: dict[tuple[int, str], list[TimelineSample]] = defaultdict(list)
    for s in samples:
        if s.v:
            groups[(s.run, s.endpoint)].append(s)
    for g in groups.values():
        g.sort(key=lambda s: s.t)
    return groups


def counter_total(
    samples: Iterable[TimelineSample], name: str, window: Window | None = None
) -> float:
    """Increase of counter `name` summed over backends (and runs), optionally over `window`
    (each backend's samples in it, or the two that bracket a window shorter than the
    sampling interval: the same points the steady token rates use)."""
    total = 0.0
    for series in series_by_backend(samples).values():
        points = series if window is None else _in_window(series, window)
        total += counter_increase([s.v[name] for s in points if name in s.v])
    return total


def hit_rate(samples: Sequence[TimelineSample], window: Window | None = None) -> float | None:
    """Σ Δhits / Σ Δqueries over every backend: the run's prefix cache hit rate (tokens),
    optionally over `window` only."""
    queries = counter_total(samples, "prefix_cache_queries", window)
    if queries <= 0:
        return None
    return counter_total(samples, "prefix_cache_hits", window) / queries


def gauge_max(samples: Iterable[TimelineSample], name: str) -> float | None:
    vals = [s.v[name] for s in samples if name in s.v]
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
    samples: Sequence[TimelineSample], start: float
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
            if not all(n in prev.v and n in cur.v for n in names):
                continue
            q = counter_increase([prev.v[names[0]], cur.v[names[0]]])
            queries[cur.t] += q
            hits[cur.t] += counter_increase([prev.v[names[1]], cur.v[names[1]]])
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


@dataclass(frozen=True)
class TokenRates:
    """The kit's one vocabulary for token rates, each integrated over the steady window(s).

    - computed_prompt_tok_s: prompt tokens the server had to compute, i.e. vLLM's
      `prefix_cache_queries - prefix_cache_hits`. vLLM counts that pair together, when a
      request is scheduled; `prompt_tokens` is counted at another moment, so per sampling
      interval `prompt_tokens - hits` swings widely (0 to 92k tok/s on the H200) and only the
      queries/hits pair is read for computed tokens.
    - prompt_tok_s: every prompt token, cached or not (`prompt_tokens`).
    - generation_tok_s: tokens generated.
    - computed_tok_s = computed prompt + generated: the chip's work rate, the planner's input.
    - effective_tok_s = all prompt + generated: the finished work.
    """

    computed_prompt_tok_s: float | None
    prompt_tok_s: float | None
    generation_tok_s: float | None

    @property
    def computed_tok_s(self) -> float | None:
        return _add(self.computed_prompt_tok_s, self.generation_tok_s)

    @property
    def effective_tok_s(self) -> float | None:
        return _add(self.prompt_tok_s, self.generation_tok_s)

    def as_dict(self) -> dict[str, float | None]:
        return {
            "computed_tok_s": self.computed_tok_s,
            "effective_tok_s": self.effective_tok_s,
            "computed_prompt_tok_s": self.computed_prompt_tok_s,
            "prompt_tok_s": self.prompt_tok_s,
            "generation_tok_s": self.generation_tok_s,
        }


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _inside(series: list[TimelineSample], w: Window) -> list[TimelineSample]:
    return [s for s in series if w.start <= s.t <= w.end]


def _in_window(series: list[TimelineSample], w: Window) -> list[TimelineSample]:
    """A backend's samples inside [w.start, w.end]; when fewer than two fall inside (a window
    shorter than the sampling interval), the two samples that bracket it instead."""
    inside = _inside(series, w)
    if len(inside) >= 2:
        return inside
    before = [s for s in series if s.t <= w.start][-1:]
    after = [s for s in series if s.t >= w.end][:1]
    return before + after if before and after else inside


# Fewer /metrics samples than this inside a steady window, and its token rates are read
# across the window's edges: a 24-record sweep level on 2 CPU cores (1.5 s, samples every
# 0.5 s) read -15% to -39% in its own planner check, one of 96 records -2% to +20%.
FIRM_WINDOW_SAMPLES = 3


def samples_inside(
    samples: Sequence[TimelineSample], windows: Iterable[Window | None]
) -> int | None:
    """The fewest samples a backend took inside a window, over the windows and the backends
    sampled around each (another run's backends are not); None when no backend was. Under
    2, the window's rates come from the samples around it (`_in_window`); under
    FIRM_WINDOW_SAMPLES the run's ramp up and down still weighs on them."""
    counts: list[int] = []
    backends = series_by_backend(samples).values()
    for w in windows:
        if w is None:
            continue
        for series in backends:
            if series[0].t <= w.end and series[-1].t >= w.start:
                counts.append(len(_inside(series, w)))
    return min(counts, default=None)


def short_window_note(inside: int | None, what: str) -> str | None:
    """The sentence for figures read over a window with too few samples, with the fix."""
    if inside is None or inside >= FIRM_WINDOW_SAMPLES:
        return None
    return (
        f"{what} held {inside} /metrics sample(s) of a backend, fewer than "
        f"{FIRM_WINDOW_SAMPLES}: its token rates and steady hit rate are read from the samples "
        "around it, diluted by the run's start and end. Give it more records or a shorter "
        "--sample-interval."
    )


def steady_token_rates(
    samples: Sequence[TimelineSample], windows: Iterable[Window | None]
) -> TokenRates:
    """Token rates over the windows: each backend's counter increase between its first and
    last sample in a window, over that same span; backends add up (they run side by side),
    windows (one per run) are pooled by time."""
    totals: dict[str, float] = defaultdict(float)
    seen: set[str] = set()
    span = 0.0
    backends = series_by_backend(samples)
    for w in windows:
        if w is None:
            continue
        rates: dict[str, float] = defaultdict(float)
        w_span = 0.0
        for series in backends.values():
            points = _in_window(series, w)
            if len(points) < 2 or points[-1].t <= points[0].t:
                continue
            t = points[-1].t - points[0].t
            w_span = max(w_span, t)
            for name in TOKEN_COUNTERS:
                vals = [p.v[name] for p in points if name in p.v]
                if len(vals) >= 2:
                    seen.add(name)
                    rates[name] += counter_increase(vals) / t
        if w_span > 0:
            span += w_span
            for name, value in rates.items():
                totals[name] += value * w_span

    def pooled(name: str) -> float | None:
        return totals[name] / span if span > 0 and name in seen else None

    queries, hits = pooled("prefix_cache_queries"), pooled("prefix_cache_hits")
    computed = None if queries is None or hits is None else max(0.0, queries - hits)
    return TokenRates(
        computed_prompt_tok_s=computed,
        prompt_tok_s=pooled("prompt_tokens"),
        generation_tok_s=pooled("generation_tokens"),
    )
