"""Pure maths of a concurrency sweep: one summary row per level, and the Markdown report.

Each level is an ordinary batch job directory: `results.jsonl` (one line per record, with its
finish time `t`) and `timeline.jsonl` (each backend's /metrics counters sampled on a clock).
The row is computed from those two files only, as the seed measured:

- records/min over the middle of the run (completion times between the 10% and 90%
  quantiles), because a short run finishes slowly as the last records trickle through;
- token rates are medians over the sampling intervals inside that middle window ("at full
  load"); prompt tok/s counts prompt tokens *computed* (prompt tokens minus prefix-cache hit
  tokens), so combined tok/s is the chip's work rate, the planner's `--computed-tok-s`;
- prompt cache hit rate = sum of hit-token deltas / sum of query-token deltas over the level;
- KV usage and waiting requests are the highest sampled values; preemptions the counter's rise.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sparkops.errors import UserError
from sparkops.metrics.timeline import (
    counter_increase,
    counter_total,
    gauge_max,
    hit_rate,
    series_by_backend,
    steady_window,
)


def parse_levels(text: str) -> list[int]:
    """`1,240,480,960` -> [1, 240, 480, 960]; refuses zero, negatives and repeats."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(
            f"--levels {text!r} is not a list of integers: use e.g. 1,240,480"
        ) from None
    if not levels or min(levels) < 1 or len(set(levels)) != len(levels):
        raise UserError(f"--levels {text!r}: give distinct concurrencies of at least 1")
    return levels


@dataclass(frozen=True)
class LevelSummary:
    """One row of the sweep table."""

    concurrency: int
    records: int
    done: int
    errors: int
    elapsed_s: float | None
    records_per_min: float | None  # middle of the run
    records_per_min_whole: float | None
    prompt_tok_s: float | None  # computed (uncached) prompt tokens/s, median at full load
    generation_tok_s: float | None
    combined_tok_s: float | None
    hit_rate: float | None
    kv_usage_max: float | None
    waiting_max: float | None
    preemptions: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def interval_rates(
    samples: Sequence[dict[str, Any]], start: float, end: float
) -> list[dict[str, float]]:
    """Per-interval token rates summed over backends, for intervals inside [start, end].

    Backends are sampled in the same clock tick, so intervals are keyed by their end time.
    Each dict has `prompt`, `computed_prompt`, `generation` (tokens/s).
    """
    per_tick: dict[float, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    spans: dict[float, float] = {}
    for points in series_by_backend(samples).values():
        for prev, cur in itertools.pairwise(points):
            if prev["t"] < start or cur["t"] > end or cur["t"] <= prev["t"]:
                continue
            tick = per_tick[cur["t"]]
            for name in ("prompt_tokens", "prefix_cache_hits", "generation_tokens"):
                if name in prev["v"] and name in cur["v"]:
                    tick[name] += counter_increase([prev["v"][name], cur["v"][name]])
            spans[cur["t"]] = cur["t"] - prev["t"]
    rates = []
    for t, tick in sorted(per_tick.items()):
        span = spans[t]
        computed = max(0.0, tick["prompt_tokens"] - tick["prefix_cache_hits"])
        rates.append(
            {
                "prompt": tick["prompt_tokens"] / span,
                "computed_prompt": computed / span,
                "generation": tick["generation_tokens"] / span,
            }
        )
    return rates


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise_level(
    concurrency: int,
    results: Sequence[dict[str, Any]],
    samples: Sequence[dict[str, Any]],
) -> LevelSummary:
    """The sweep row for one level from its results and timeline lines."""
    finish = sorted(float(r["t"]) for r in results if isinstance(r.get("t"), (int, float)))
    done = sum(1 for r in results if r.get("status") == "done")
    errors = len(results) - done
    sample_times = [float(s["t"]) for s in samples if "t" in s]
    begin = min([*sample_times[:1], *finish[:1]]) if (sample_times or finish) else None
    elapsed = finish[-1] - begin if finish and begin is not None else None
    whole = len(finish) / elapsed * 60.0 if elapsed else None

    window = steady_window(finish)
    start: float | None = None
    end: float | None = None
    if window is not None and window.end > window.start:
        start, end = window.start, window.end
    elif finish and begin is not None:  # too few records for a middle: use the whole run
        start, end = begin, finish[-1]
    rates = interval_rates(samples, start, end) if start is not None and end is not None else []
    if not rates and finish and begin is not None:  # run shorter than one sampling interval
        rates = interval_rates(samples, begin, max(sample_times + finish))
    prompt = _median([r["computed_prompt"] for r in rates])
    gen = _median([r["generation"] for r in rates])
    combined = _median([r["computed_prompt"] + r["generation"] for r in rates])

    return LevelSummary(
        concurrency=concurrency,
        records=len(results),
        done=done,
        errors=errors,
        elapsed_s=elapsed,
        records_per_min=window.per_min if window is not None else whole,
        records_per_min_whole=whole,
        prompt_tok_s=prompt,
        generation_tok_s=gen,
        combined_tok_s=combined,
        hit_rate=hit_rate(samples),
        kv_usage_max=gauge_max(samples, "kv_cache_usage"),
        waiting_max=gauge_max(samples, "waiting"),
        preemptions=counter_total(samples, "preemptions") if samples else None,
    )


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


TABLE_HEADER = (
    "| Concurrency | Records/min (middle) | Prompt tok/s | Generation tok/s | Combined tok/s "
    "| Prompt cache hits | KV usage (max) | Waiting (max) | Preemptions | Done / errors |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
)


def table_markdown(levels: Sequence[LevelSummary]) -> str:
    """The seed's concurrency table."""
    rows = []
    for lv in levels:
        rows.append(
            f"| {lv.concurrency} | {_fmt(lv.records_per_min, ',.1f')} "
            f"| {_fmt(lv.prompt_tok_s, ',.0f')} | {_fmt(lv.generation_tok_s, ',.0f')} "
            f"| {_fmt(lv.combined_tok_s, ',.0f')} | {_fmt(lv.hit_rate, '.1%')} "
            f"| {_fmt(lv.kv_usage_max, '.0%')} | {_fmt(lv.waiting_max, ',.0f')} "
            f"| {_fmt(lv.preemptions, ',.0f')} | {lv.done} / {lv.errors} |\n"
        )
    return TABLE_HEADER + "".join(rows)


def speedup(levels: Sequence[LevelSummary]) -> float | None:
    """Best records/min over the lowest level's: what batching is worth."""
    rated: list[tuple[int, float]] = []  # (concurrency, records/min) of levels that have one
    for lv in levels:
        if lv.records_per_min:
            rated.append((lv.concurrency, lv.records_per_min))
    if len(rated) < 2:
        return None
    base = min(rated)  # the lowest concurrency (levels are distinct)
    best = max(rated, key=lambda level: level[1])
    return best[1] / base[1] if best is not base else None


def report_markdown(
    levels: Sequence[LevelSummary], *, cold: bool, records_file: str, plots: Sequence[str]
) -> str:
    """The sweep report: table, how it was measured, what batching was worth, plots."""
    lines = [
        "# Concurrency sweep\n",
        f"Records: `{records_file}`, the same records at every level. Cache between levels: "
        + (
            "reset (`--cold`), so no level starts warm.\n"
            if cold
            else "kept warm (later "
            "levels may be flattered by prefixes cached earlier; use `--cold`).\n"
        ),
        "",
        table_markdown(levels),
        "Records/min is measured over the middle of each run (completions between the 10% and "
        "90% quantiles). Token rates are medians over the /metrics sampling intervals in that "
        "window; prompt tok/s counts prompt tokens computed (not served from the prefix cache), "
        "so combined tok/s is the work rate to give `sparkops plan throughput "
        "--computed-tok-s`. Hit rate is prefix-cache hit tokens over query tokens for the "
        "level. KV usage and waiting are the highest sampled values.\n",
    ]
    gain = speedup(levels)
    if gain is not None:
        lines.append(f"Batching is worth about {gain:.1f}x over the lowest level.\n")
    ran_full = [lv for lv in levels if lv.kv_usage_max is not None]
    if ran_full and max(lv.kv_usage_max or 0 for lv in ran_full) > 0.70:
        lines.append(
            "Warning: the KV cache ran above 70% full at some level; above that the prefix "
            "cache evicts shared blocks and the hit rate drops.\n"
        )
    lines.extend(f"![{name}]({name})\n" for name in plots)
    return "\n".join(lines)
