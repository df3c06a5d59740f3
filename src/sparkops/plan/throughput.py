"""Throughput model under prefix caching: only uncached prompt tokens and generated tokens cost
compute.

The seed (first seed document, "what each point of hit rate is worth") measured a GB10 chip
computing a roughly fixed number of tokens a second whatever the concurrency; what changes is
how many of each record's tokens must be computed. So, per record,

    computed = prompt_tokens x (1 - hit_rate) + gen_tokens
    records_per_min = computed_tok_s x 60 / computed
    effective_tok_s = records_per_min x (prompt_tokens + gen_tokens) / 60

and perfect reuse (hit rate 1) leaves only the generated tokens: the ceiling. Pure functions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sparkops.errors import UserError
from sparkops.metrics.bottleneck import label

# The benchmark notes' fastest run (first seed, "what each point of hit rate is worth"), the
# figures `plan throughput` prints beside its own: the inputs, then what the notes measured or
# projected from them. `ceiling_records_per_min` is absent: the notes' "about 250" belongs to
# their concurrency benchmark at ~1,300 tok/s (docs/planning.md).
NOTES_FASTEST_RUN: dict[str, float] = {
    "computed_tok_s": 2580,
    "prompt_tokens": 3600,
    "gen_tokens": 300,
    "hit_rate": 0.887,
    "prompt_tokens_per_call": 1600,
    "calls_per_record": 2.4,
    "uncached_prompt_tokens": 410,
    "records_per_min": 217,
    "effective_tok_s": 14_200,
    "prompt_computed_tok_s": 1500,
    "generation_tok_s": 1100,
    "tokens_saved_per_point": 36,
    "days_for_500000": 1.7,
}


@dataclass(frozen=True)
class HitRatePoint:
    """One row of the "what each point is worth" table."""

    hit_rate: float
    uncached_prompt_tokens: float
    computed_tokens_per_record: float
    records_per_min: float
    gain_records_per_min: float  # over the previous row (0 for the first)
    effective_tok_s: float
    gain_effective_tok_s: float
    hours_for_records: float | None


@dataclass(frozen=True)
class ThroughputPlan:
    """Throughput at the given hit rate, the perfect-reuse ceiling, and the per-point table."""

    computed_tok_s: float
    prompt_tokens: float
    gen_tokens: float
    hit_rate: float
    records: int | None
    uncached_prompt_tokens: float
    computed_tokens_per_record: float
    tokens_saved_per_point: float  # computed tokens per record one point of hit rate removes
    records_per_min: float
    effective_tok_s: float
    prompt_computed_tok_s: float
    generation_tok_s: float
    hours_for_records: float | None
    ceiling_records_per_min: float
    table: tuple[HitRatePoint, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = asdict(self)
        out["table"] = [asdict(row) for row in self.table]
        return out


def records_per_min(
    computed_tok_s: float, prompt_tokens: float, gen_tokens: float, hit_rate: float
) -> float:
    """Records a minute when only uncached prompt tokens and generated tokens cost compute."""
    computed = prompt_tokens * (1.0 - hit_rate) + gen_tokens
    return computed_tok_s * 60.0 / computed


def _point(
    computed_tok_s: float,
    prompt_tokens: float,
    gen_tokens: float,
    hit_rate: float,
    records: int | None,
    previous: HitRatePoint | None,
) -> HitRatePoint:
    uncached = prompt_tokens * (1.0 - hit_rate)
    rpm = records_per_min(computed_tok_s, prompt_tokens, gen_tokens, hit_rate)
    eff = rpm * (prompt_tokens + gen_tokens) / 60.0
    return HitRatePoint(
        hit_rate=hit_rate,
        uncached_prompt_tokens=uncached,
        computed_tokens_per_record=uncached + gen_tokens,
        records_per_min=rpm,
        gain_records_per_min=rpm - previous.records_per_min if previous else 0.0,
        effective_tok_s=eff,
        gain_effective_tok_s=eff - previous.effective_tok_s if previous else 0.0,
        hours_for_records=records / rpm / 60.0 if records else None,
    )


def plan_throughput(
    *,
    computed_tok_s: float,
    prompt_tokens: float,
    gen_tokens: float,
    hit_rate: float,
    records: int | None = None,
    table_points: int = 10,
) -> ThroughputPlan:
    """Model a job at `hit_rate` (a fraction, 0..1) and tabulate the next `table_points`
    whole points of hit rate above it, ending with perfect reuse if the table reaches it."""
    if computed_tok_s <= 0:
        raise UserError(
            f"computed tokens/s must be positive (got {computed_tok_s}): use the "
            "prompt+generation tok/s the server computes at full load (e.g. from a sweep)"
        )
    if prompt_tokens < 0 or gen_tokens <= 0:
        raise UserError(
            f"prompt tokens ({prompt_tokens}) must be >= 0 and generated tokens ({gen_tokens}) "
            "> 0 per record: pass per-record averages over all of a record's calls"
        )
    if not 0.0 <= hit_rate <= 1.0:
        raise UserError(f"hit rate {hit_rate} is outside 0..1: pass e.g. 0.887 or 88.7%")
    if records is not None and records < 1:
        raise UserError(f"--records must be at least 1 (got {records})")

    def point(rate: float, previous: HitRatePoint | None) -> HitRatePoint:
        return _point(computed_tok_s, prompt_tokens, gen_tokens, rate, records, previous)

    first = point(hit_rate, None)
    rows = [first]
    for step in range(1, max(table_points, 0) + 1):
        rate = round(hit_rate + step / 100.0, 10)
        if rate > 1.0:
            if rows[-1].hit_rate < 1.0:
                rows.append(point(1.0, rows[-1]))
            break
        rows.append(point(rate, rows[-1]))

    return ThroughputPlan(
        computed_tok_s=computed_tok_s,
        prompt_tokens=prompt_tokens,
        gen_tokens=gen_tokens,
        hit_rate=hit_rate,
        records=records,
        uncached_prompt_tokens=first.uncached_prompt_tokens,
        computed_tokens_per_record=first.computed_tokens_per_record,
        tokens_saved_per_point=prompt_tokens / 100.0,
        records_per_min=first.records_per_min,
        effective_tok_s=first.effective_tok_s,
        prompt_computed_tok_s=first.records_per_min * first.uncached_prompt_tokens / 60.0,
        generation_tok_s=first.records_per_min * gen_tokens / 60.0,
        hours_for_records=first.hours_for_records,
        ceiling_records_per_min=computed_tok_s * 60.0 / gen_tokens,
        table=tuple(rows),
    )


@dataclass(frozen=True)
class Prediction:
    """Records/min predicted for a level or job, or why the planner cannot say."""

    records_per_min: float | None
    reason: str | None


def predict_level(
    *,
    computed_tok_s: float,
    calibrated_bottleneck: str,
    bottleneck: str | None,
    prompt_tokens: float | None,
    gen_tokens: float | None,
    hit_rate: float | None,
) -> Prediction:
    """Steady records/min at another level or job from a calibration's computed tok/s.

    The computed rate is a property of what bound the calibration run: it carries over only
    to a run with the same bottleneck (engine to engine). A front-end-bound run is limited by
    calls/s in the API server, not the GPU's computed rate, so the planner refuses rather than
    predict (on the H200 the one-step job was front-end bound at ~230-275 calls/s while the
    3-step job was not).
    """
    if bottleneck is not None and bottleneck != calibrated_bottleneck:
        return Prediction(
            None,
            f"the calibration run was bound by the {label(calibrated_bottleneck)}, this one "
            f"by the {label(bottleneck)}: its computed tok/s does not carry over",
        )
    if prompt_tokens is None or not gen_tokens or hit_rate is None:
        return Prediction(None, "no tokens per record or hit rate measured for this run")
    return Prediction(records_per_min(computed_tok_s, prompt_tokens, gen_tokens, hit_rate), None)


def throughput_formula(plan: ThroughputPlan, per_call: str | None = None) -> str:
    """The arithmetic behind the plan's headline figures, with its own numbers."""
    lead = f"Per record {per_call}. " if per_call else ""
    return (
        f"{lead}Formula: computed = P x (1 - H) + G = {plan.prompt_tokens:,.0f} x "
        f"(1 - {plan.hit_rate:.1%}) + {plan.gen_tokens:,.0f} = "
        f"{plan.computed_tokens_per_record:,.0f} tokens a record; records/min = computed tok/s "
        f"x 60 / computed = {plan.computed_tok_s:,.0f} x 60 / "
        f"{plan.computed_tokens_per_record:,.0f} = {plan.records_per_min:,.1f}; effective "
        f"tok/s = records/min x (P + G) / 60 = {plan.effective_tok_s:,.0f}; ceiling (H = 1) = "
        f"computed tok/s x 60 / G = {plan.ceiling_records_per_min:,.1f} records/min."
    )
