"""Pure maths of a concurrency sweep: one summary row per level, and the Markdown report.

Each level is an ordinary batch job directory: `results.jsonl` (one line per record, with its
finish time `t`) and `timeline.jsonl` (each backend's /metrics counters sampled on a clock).
The row is computed from those two files only, as the seed measured:

- records/min over the middle of the run (completion times between the 10% and 90%
  quantiles), because a short run finishes slowly as the last records trickle through;
- token rates are vLLM's counters integrated over that same middle window, in the kit's one
  vocabulary (metrics/timeline.TokenRates): computed prompt tokens are
  `prefix_cache_queries - prefix_cache_hits`, the pair vLLM counts together; computed tok/s
  (computed prompt + generated) is the chip's work rate, the planner's input; effective tok/s
  (all prompt + generated) the finished work;
- the bottleneck (metrics/bottleneck.py) and the planner's prediction from the calibration level;
- prompt cache hit rate = sum of hit-token deltas / sum of query-token deltas over the level;
- KV usage and waiting requests are the highest sampled values; preemptions the counter's rise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from sparkops.jobdir.lines import Finished
from sparkops.metrics.bottleneck import name_bottleneck
from sparkops.metrics.timeline import (
    TimelineSample,
    Window,
    counter_total,
    gauge_max,
    hit_rate,
    samples_inside,
    short_window_note,
    steady_token_rates,
    steady_window,
)
from sparkops.plan.decode import DecodeCeiling
from sparkops.plan.throughput import predict_level

# Level 1 runs one record at a time (the seed: ~4 records/min on a GB10, so a 500,000-record
# input would take weeks): by default it gets the first records only, enough for a middle.
LEVEL_ONE_RECORDS = 50


@dataclass(frozen=True)
class LevelSummary:
    """One row of the sweep table (names as in report.json: see metrics/timeline.TokenRates)."""

    concurrency: int
    records: int
    done: int
    errors: int
    elapsed_s: float | None
    records_per_min: float | None  # middle of the run
    records_per_min_whole: float | None
    computed_tok_s: float | None  # computed prompt + generated, over the steady window
    effective_tok_s: float | None  # all prompt + generated
    computed_prompt_tok_s: float | None  # prefix_cache_queries - prefix_cache_hits
    generation_tok_s: float | None
    hit_rate: float | None  # the level's, as the seed quotes it
    hit_rate_steady: float | None  # over the steady window: the planner's input
    prompt_tokens_per_record: float | None  # all of a done record's calls
    gen_tokens_per_record: float | None
    calls_per_record: float | None
    kv_usage_max: float | None
    waiting_max: float | None
    preemptions: float | None
    bottleneck: str = "unknown"
    bottleneck_sentence: str = ""
    predicted_records_per_min: float | None = None  # from the calibration level
    predicted_from: int | None = None
    predicted_note: str | None = None
    steady_samples: int | None = None  # the fewest /metrics samples a backend took in the window
    steady_s: float | None = None  # the window's length

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def per_record_tokens(
    results: Sequence[Finished],
) -> tuple[float | None, float | None, float | None]:
    """Mean prompt tokens, generated tokens and calls over done records."""
    prompt = gen = calls = 0.0
    n = 0
    for r in results:
        if not r.outcome.ok or r.timing is None or not r.timing.steps:
            continue
        steps = r.timing.steps
        n += 1
        calls += len(steps)
        prompt += sum(s.prompt_tokens for s in steps)
        gen += sum(s.completion_tokens for s in steps)
    return (prompt / n, gen / n, calls / n) if n else (None, None, None)


def summarise_level(
    concurrency: int,
    results: Sequence[Finished],
    samples: Sequence[TimelineSample],
) -> LevelSummary:
    """The sweep row for one level from its results and timeline lines."""
    finish = sorted(r.timing.t for r in results if r.timing is not None and r.timing.t is not None)
    done = sum(1 for r in results if r.outcome.ok)
    errors = len(results) - done
    sample_times = [s.t for s in samples]
    begin = min([*sample_times[:1], *finish[:1]]) if (sample_times or finish) else None
    elapsed = finish[-1] - begin if finish and begin is not None else None
    whole = len(finish) / elapsed * 60.0 if elapsed else None

    middle = steady_window(finish)
    window = middle
    if (window is None or window.end <= window.start) and finish and begin is not None:
        window = Window(begin, finish[-1], len(finish))  # too few records for a middle
    rates = steady_token_rates(samples, [window])
    steady_hits = hit_rate(samples, window) if window is not None else None
    neck = name_bottleneck(samples, concurrency, window, records=len(results))
    prompt_per, gen_per, calls_per = per_record_tokens(results)

    return LevelSummary(
        concurrency=concurrency,
        records=len(results),
        done=done,
        errors=errors,
        elapsed_s=elapsed,
        records_per_min=middle.per_min if middle is not None else whole,
        records_per_min_whole=whole,
        computed_tok_s=rates.computed_tok_s,
        effective_tok_s=rates.effective_tok_s,
        computed_prompt_tok_s=rates.computed_prompt_tok_s,
        generation_tok_s=rates.generation_tok_s,
        hit_rate=hit_rate(samples),
        hit_rate_steady=steady_hits,
        prompt_tokens_per_record=prompt_per,
        gen_tokens_per_record=gen_per,
        calls_per_record=calls_per,
        kv_usage_max=gauge_max(samples, "kv_cache_usage"),
        waiting_max=gauge_max(samples, "waiting"),
        preemptions=counter_total(samples, "preemptions") if samples else None,
        bottleneck=neck.kind,
        bottleneck_sentence=neck.sentence,
        steady_samples=samples_inside(samples, [window]) if window is not None else None,
        steady_s=window.end - window.start if window is not None else None,
    )


def with_predictions(levels: Sequence[LevelSummary]) -> list[LevelSummary]:
    """Each level's records/min as the planner predicts it from the calibration level (the
    highest level with a computed rate): that level's computed tok/s, this level's hit rate
    and tokens per record. Where the bottlenecks differ the planner says it cannot."""
    rated = [lv for lv in levels if lv.computed_tok_s and lv.records_per_min]
    if not rated:
        return list(levels)
    cal = max(rated, key=lambda lv: lv.concurrency)
    out = []
    for lv in levels:
        guess = predict_level(
            computed_tok_s=cal.computed_tok_s or 0.0,
            calibrated_bottleneck=cal.bottleneck,
            bottleneck=lv.bottleneck,
            prompt_tokens=lv.prompt_tokens_per_record,
            gen_tokens=lv.gen_tokens_per_record,
            hit_rate=lv.hit_rate_steady,
        )
        out.append(
            replace(
                lv,
                predicted_records_per_min=guess.records_per_min,
                predicted_from=cal.concurrency,
                predicted_note=guess.reason,
            )
        )
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


TABLE_HEADER = (
    "| Concurrency | Records/min (middle) | Computed tok/s | Computed prompt tok/s "
    "| Generation tok/s | Effective tok/s | Prompt cache hits | KV usage (max) | Waiting (max) "
    "| Preemptions | Bottleneck | Done / errors |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n"
)


def table_markdown(levels: Sequence[LevelSummary]) -> str:
    """The seed's concurrency table, with the bottleneck of each level."""
    rows = []
    for lv in levels:
        rows.append(
            f"| {lv.concurrency} | {_fmt(lv.records_per_min, ',.1f')} "
            f"| {_fmt(lv.computed_tok_s, ',.0f')} | {_fmt(lv.computed_prompt_tok_s, ',.0f')} "
            f"| {_fmt(lv.generation_tok_s, ',.0f')} | {_fmt(lv.effective_tok_s, ',.0f')} "
            f"| {_fmt(lv.hit_rate, '.1%')} "
            f"| {_fmt(lv.kv_usage_max, '.0%')} | {_fmt(lv.waiting_max, ',.0f')} "
            f"| {_fmt(lv.preemptions, ',.0f')} | {lv.bottleneck} | {lv.done} / {lv.errors} |\n"
        )
    return TABLE_HEADER + "".join(rows)


def prediction_markdown(levels: Sequence[LevelSummary]) -> str:
    """Predicted vs measured records/min per level: the planner checked against the sweep."""
    cal = next((lv.predicted_from for lv in levels if lv.predicted_from is not None), None)
    if cal is None:
        return ""
    lines = [
        f"Planner check: `sparkops plan throughput` calibrated on level {cal} (its computed "
        "tok/s), each level's own hit rate and tokens per record:\n",
        "| Concurrency | Bottleneck | Measured records/min | Predicted | Error |",
        "|---:|---|---:|---:|---|",
    ]
    for lv in levels:
        if lv.predicted_records_per_min is None:
            predicted, error = "cannot", lv.predicted_note or "n/a"
        else:
            predicted = f"{lv.predicted_records_per_min:,.1f}"
            error = (
                f"{lv.predicted_records_per_min / lv.records_per_min - 1:+.1%}"
                if lv.records_per_min
                else "n/a"
            )
        lines.append(
            f"| {lv.concurrency} | {lv.bottleneck} | {_fmt(lv.records_per_min, ',.1f')} "
            f"| {predicted} | {error} |"
        )
    lines += ["", *(f"- {lv.concurrency}: {lv.bottleneck_sentence}" for lv in levels), ""]
    return "\n".join(lines)


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


def ceiling_markdown(levels: Sequence[LevelSummary], ceiling: DecodeCeiling) -> str:
    """The decode ceiling beside the measured generation rates."""
    rows = [
        "Decode ceiling (`sparkops plan decode`: memory-bound decode at "
        f"{ceiling.bandwidth_gb_s:,.0f} GB/s, mean call context {ceiling.context:,} tokens; "
        "prefill and compute left out, so measured rates sit below it):\n",
        "| Concurrency | Ceiling tok/s | Measured generation tok/s | Measured computed tok/s |",
        "|---:|---:|---:|---:|",
    ]
    for lv in levels:
        rows.append(
            f"| {lv.concurrency} | {ceiling.tok_s(lv.concurrency):,.0f} "
            f"| {_fmt(lv.generation_tok_s, ',.0f')} | {_fmt(lv.computed_tok_s, ',.0f')} |"
        )
    rows += [
        "",
        f"Half the asymptote ({ceiling.asymptote_tok_s:,.0f} tok/s) at "
        f"{ceiling.knee_concurrency:,.0f} in flight, 90% at "
        f"{ceiling.near_asymptote_concurrency:,.0f}: past that, more concurrency buys hit rate "
        "rather than decode speed.\n",
    ]
    return "\n".join(rows)


def report_markdown(
    levels: Sequence[LevelSummary],
    *,
    cold: bool,
    records_file: str,
    plots: Sequence[str],
    ceiling: DecodeCeiling | None = None,
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
        "90% quantiles). Token rates are vLLM's counters over that same window: computed prompt "
        "tok/s is prefix-cache queries minus hits (prompt tokens not served from the cache), "
        "computed tok/s adds the generated tokens (the chip's work rate, what `sparkops plan "
        "throughput --from-sweep` calibrates on), effective tok/s counts every prompt token. "
        "Hit rate is prefix-cache hit tokens over query tokens for the level. KV usage and "
        "waiting are the highest sampled values.\n",
        prediction_markdown(levels),
    ]
    if ceiling is not None:
        lines.append(ceiling_markdown(levels, ceiling))
    gain = speedup(levels)
    if gain is not None:
        lines.append(f"Batching is worth about {gain:.1f}x over the lowest level.\n")
    preempted = [lv for lv in levels if lv.preemptions]
    if preempted:
        lines.append(
            "Warning: vLLM preempted calls at "
            + ", ".join(f"{lv.concurrency:,}" for lv in preempted)
            + " in flight: the KV cache ran out there (a level above it measures recomputed "
            "prompts, not throughput); lower the concurrency or give vLLM a bigger KV cache.\n"
        )
    lines.extend(short_window_warnings(levels))
    lines.extend(f"![{name}]({name})\n" for name in plots)
    return "\n".join(lines)


def short_window_warnings(levels: Sequence[LevelSummary]) -> list[str]:
    """A warning per level whose steady window held too few samples for firm token rates."""
    out = []
    for lv in levels:
        what = f"level {lv.concurrency}'s steady window ({_fmt(lv.steady_s, '.1f')} s)"
        if note := short_window_note(lv.steady_samples, what):
            out.append(f"Warning: {note}\n")
    return out


def mean_call_context(levels: Sequence[LevelSummary]) -> int | None:
    """Mean context of a call in flight at the highest measured level: its prompt plus half
    its answer (the decode ceiling's `L`)."""
    measured = [lv for lv in levels if lv.calls_per_record and lv.prompt_tokens_per_record]
    if not measured:
        return None
    top = max(measured, key=lambda lv: lv.concurrency)
    calls = top.calls_per_record or 1.0
    prompt = (top.prompt_tokens_per_record or 0.0) / calls
    answer = (top.gen_tokens_per_record or 0.0) / calls
    return max(1, round(prompt + answer / 2))
