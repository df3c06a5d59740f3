"""Throughput model against the first seed's figures and hand-computed cases."""

from __future__ import annotations

import itertools

import pytest

from sparkops.errors import UserError
from sparkops.plan.throughput import plan_throughput, records_per_min


def seed_plan(**overrides):
    args = {
        "computed_tok_s": 2580,
        "prompt_tokens": 3600,
        "gen_tokens": 300,
        "hit_rate": 0.887,
        "records": 500_000,
    }
    args.update(overrides)
    return plan_throughput(**args)


def test_seed_fastest_run():
    plan = seed_plan()
    # "only about 410 of the prompt tokens needed computing"
    assert plan.uncached_prompt_tokens == pytest.approx(406.8)
    # 2580 x 60 / (406.8 + 300) = 219.0 (the seed measured ~217 a minute)
    assert plan.records_per_min == pytest.approx(2580 * 60 / 706.8)
    assert 215 <= plan.records_per_min <= 222
    # "about 14,200 tokens a second of finished work"
    assert plan.effective_tok_s == pytest.approx(plan.records_per_min * 3900 / 60)
    assert round(plan.effective_tok_s, -2) == 14_200
    # "roughly 1,100 writing answers and 1,500 reading prompts"
    assert round(plan.generation_tok_s, -2) == 1_100
    assert round(plan.prompt_computed_tok_s, -2) == 1_500
    # "500,000 records would take about 1.7 days" (1.6 at the modelled 219/min)
    assert plan.hours_for_records == pytest.approx(500_000 / plan.records_per_min / 60)
    assert 1.5 <= plan.hours_for_records / 24 <= 1.7
    # "each extra point of hit rate removes about 36 computed tokens per record"
    assert plan.tokens_saved_per_point == 36


def test_each_point_is_worth_more_than_the_last():
    plan = seed_plan()
    gains = [row.gain_records_per_min for row in plan.table[1:]]
    assert all(later > earlier for earlier, later in itertools.pairwise(gains))
    # "every point of hit rate adds 12-16 records a minute, or 750-1,000 effective tokens a
    # second" over the first points above 88.7%.
    assert 11.5 <= gains[0] <= 12.5
    assert 14 <= gains[2] <= 16
    assert 750 <= plan.table[1].gain_effective_tok_s <= 800
    assert 900 <= plan.table[3].gain_effective_tok_s <= 1000


def test_ceiling_is_generation_only():
    # At 2,580 computed tok/s, perfect reuse gives 2580 x 60 / 300 = 516 records/min.
    assert seed_plan().ceiling_records_per_min == 516
    # The seed's "about 250" ceiling belongs to its concurrency benchmark (~1,300 tok/s).
    low = seed_plan(computed_tok_s=1300, hit_rate=0.94)
    assert low.ceiling_records_per_min == 260
    # ... where 94% gives 1300 x 60 / (216 + 300) = 151 (the seed measured ~149 at 960).
    assert low.records_per_min == pytest.approx(1300 * 60 / 516)


def test_hand_computed_round_numbers():
    # 1000 tok/s, 1000 prompt, 100 generated, 50% reuse: 600 computed tokens per record.
    plan = plan_throughput(
        computed_tok_s=1000, prompt_tokens=1000, gen_tokens=100, hit_rate=0.5, records=1200
    )
    assert plan.computed_tokens_per_record == 600
    assert plan.records_per_min == 100
    assert plan.effective_tok_s == pytest.approx(100 * 1100 / 60)
    assert plan.hours_for_records == pytest.approx(0.2)
    assert plan.ceiling_records_per_min == 600
    assert plan.table[1].records_per_min == pytest.approx(60_000 / 590)


def test_table_ends_at_perfect_reuse():
    plan = seed_plan(hit_rate=0.955, table_points=10)
    rates = [round(row.hit_rate, 3) for row in plan.table]
    assert rates == [0.955, 0.965, 0.975, 0.985, 0.995, 1.0]
    assert plan.table[-1].records_per_min == pytest.approx(516)


def test_no_records_means_no_duration():
    plan = seed_plan(records=None)
    assert plan.hours_for_records is None
    assert all(row.hours_for_records is None for row in plan.table)


def test_records_per_min_function():
    assert records_per_min(600, 0, 60, 0.0) == 600


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"computed_tok_s": 0}, "positive"),
        ({"hit_rate": 88.7}, "outside 0..1"),
        ({"gen_tokens": 0}, "generated tokens"),
        ({"records": 0}, "at least 1"),
    ],
)
def test_bad_input(overrides, needle):
    with pytest.raises(UserError, match=needle):
        seed_plan(**overrides)
