"""Per-step hit-rate diagnosis: prompt design vs cache pressure."""

from __future__ import annotations

from sparkops.jobdir.step_totals import StepTotals
from sparkops.report.steps import diagnose, overall, verdict


def totals(calls: int, prompt: int, cached: int | None, reusable: int | None) -> StepTotals:
    t = StepTotals()
    for _ in range(calls):
        t.add(prompt, cached, reusable)
    return t


def test_a_step_at_its_ceiling_is_told_to_change_its_prompts():
    rows = diagnose({"screen": totals(10, 1000, 896, 896)})
    assert rows[0].hit_rate == rows[0].ceiling == 0.896
    assert rows[0].calls == 10 and rows[0].prompt_tokens == 10_000
    assert "at its ceiling" in rows[0].verdict and "prompt design" in rows[0].verdict


def test_a_step_far_below_its_ceiling_is_cache_pressure():
    rows = diagnose({"detail": totals(4, 1000, 600, 900)})
    v = rows[0].verdict
    assert "30.0 points below its 90.0% ceiling lost to cache pressure" in v
    assert "--schedule step-aware" in v


def test_reusable_prefix_longer_than_a_prompt_counts_only_the_prompt():
    t = StepTotals()
    t.add(100, 90, 512)
    assert t.reusable_tokens == 100


def test_missing_cached_tokens_says_how_to_get_them():
    t = totals(3, 500, 400, 384)
    t.add(500, None, 384)  # one call without usage details: the figure would be wrong
    rows = diagnose({"confirm": t})
    assert rows[0].hit_rate is None and rows[0].cached_tokens is None
    assert "--enable-prompt-tokens-details" in rows[0].verdict


def test_without_a_prefix_probe_the_ceiling_is_unknown():
    rows = diagnose({"screen": totals(2, 1000, 900, None)})
    assert rows[0].ceiling is None and "ceiling is unknown" in rows[0].verdict
    assert overall(rows) is None


def test_overall_weights_steps_by_prompt_tokens_and_names_the_worst_step():
    rows = diagnose(
        {
            "screen": totals(100, 3600, 3456, 3456),  # at ceiling, most of the tokens
            "detail": totals(100, 560, 100, 384),  # far below
        },
    )
    text = overall(rows)
    assert text is not None and "cache pressure (most in step detail)" in text
    calm = diagnose({"screen": totals(5, 1000, 950, 960)})
    assert "the cache keeps up" in (overall(calm) or "")


def test_verdict_when_design_loses_more_than_pressure():
    text = verdict("confirm", achieved=0.30, ceiling=0.55)
    assert "mostly prompt design, then cache pressure" in text


def test_a_step_above_its_ceiling_is_explained_not_called_at_the_ceiling():
    text = verdict("screen", achieved=0.99, ceiling=0.962)
    assert "at its ceiling" not in text and "99.0% of 96.2%" not in text
    assert "2.8 points above the 96.2% that the shared prompt text allows" in text
    # within rounding of the ceiling is still "at its ceiling"
    assert "at its ceiling" in verdict("screen", achieved=0.9624, ceiling=0.962)
    rows = diagnose({"screen": totals(10, 1000, 990, 962)})
    assert rows[0].verdict == "screen: " + text.removeprefix("screen: ")
    assert (overall(rows) or "").startswith("Over the whole job: 99.0% of prompt tokens")


def test_a_step_a_little_above_its_ceiling_is_at_it_with_the_excess_named():
    text = verdict("detail", achieved=0.97, ceiling=0.962)
    assert "at its ceiling and 0.8 points over it (97.0% against 96.2%" in text
    assert "97.0% of 96.2%" not in text and "share some text beyond the template" in text
    rows = diagnose({"detail": totals(10, 1000, 970, 962)})
    assert "the cache keeps up" in (overall(rows) or "")
