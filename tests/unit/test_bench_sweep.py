"""Sweep maths on constructed job files whose figures are worked out by hand."""

from __future__ import annotations

import dataclasses
import stat

import matplotlib.pyplot as plt
import pytest

from sparkops.bench.plots import write_plots
from sparkops.bench.sweep import (
    LevelSummary,
    prediction_markdown,
    report_markdown,
    summarise_level,
    table_markdown,
    with_predictions,
)
from sparkops.errors import UserError
from sparkops.jobdir.lines import Finished, read_finished
from sparkops.metrics.timeline import TimelineSample
from sparkops.plan.decode import parse_levels


def results(n: int, start: float = 100.0, gap: float = 1.0, errors: int = 0) -> list[Finished]:
    rows = [{"id": str(i), "status": "done", "t": start + i * gap} for i in range(n)]
    for row in rows[:errors]:
        row["status"] = "error"
    return [read_finished(row) for row in rows]


def samples(endpoint: str, t0: float, t1: float, *, prompt=1000, hits=900, gen=50, base=0.0):
    """One sample a second; per second `prompt` prompt tokens (of which `hits` cached) and
    `gen` generated tokens; KV usage climbing to 0.5; 3 waiting at one point."""
    out = []
    for k, t in enumerate(range(int(t0), int(t1) + 1)):
        out.append(
            TimelineSample.from_json(
                {
                    "t": float(t),
                    "run": 1,
                    "endpoint": endpoint,
                    "v": {
                        "prompt_tokens": base + prompt * k,
                        "prefix_cache_queries": base + prompt * k,
                        "prefix_cache_hits": base + hits * k,
                        "generation_tokens": base + gen * k,
                        "preemptions": float(k // 10),
                        "kv_cache_usage": min(0.5, 0.02 * k),
                        "waiting": 3.0 if k == 5 else 0.0,
                    },
                }
            )
        )
    return out


def test_one_backend_by_hand():
    lv = summarise_level(240, results(20), samples("a", 95, 120))
    # 20 completions 1 s apart from t=100: the middle is ts[2]..ts[17], 15 records in 15 s.
    assert lv.records_per_min == pytest.approx(60.0)
    # Whole run: first sample at 95, last completion at 119: 20 records in 24 s.
    assert lv.records_per_min_whole == pytest.approx(20 / 24 * 60)
    assert lv.elapsed_s == pytest.approx(24.0)
    # 1000 prompt tokens/s of which 900 cached: 100 computed; 50 generated.
    assert lv.computed_prompt_tok_s == pytest.approx(100.0)
    assert lv.generation_tok_s == pytest.approx(50.0)
    assert lv.computed_tok_s == pytest.approx(150.0)
    assert lv.effective_tok_s == pytest.approx(1050.0)
    assert lv.hit_rate == pytest.approx(0.9)
    assert lv.kv_usage_max == pytest.approx(0.5)
    assert lv.waiting_max == 3.0
    assert lv.preemptions == 2.0  # 0 at k=0 .. 2 at k=25
    assert (lv.records, lv.done, lv.errors) == (20, 20, 0)


def test_two_backends_sum_and_survive_a_restart():
    one = samples("a", 95, 120)
    two = samples("b", 95, 120, prompt=500, hits=250, gen=30)
    # Backend b restarts at t=110: its counters fall back near zero and climb again.
    for s in two:
        if s.t >= 110:
            k = s.t - 110 + 1
            s.v.update(
                prompt_tokens=500 * k,
                prefix_cache_queries=500 * k,
                prefix_cache_hits=250 * k,
                generation_tokens=30 * k,
            )
    lv = summarise_level(480, results(20, errors=2), one + two)
    assert lv.computed_prompt_tok_s == pytest.approx(100.0 + 250.0)
    assert lv.generation_tok_s == pytest.approx(80.0)
    assert lv.hit_rate == pytest.approx((900 + 250) / (1000 + 500))
    assert (lv.done, lv.errors) == (18, 2)


def test_computed_prompt_reads_the_counted_together_pair():
    """vLLM counts prompt_tokens when a request finishes its prefill and the queries/hits pair
    when it is scheduled: within one interval they move apart. Recorded shape: every 5 s,
    prompt_tokens lands in bursts (0, then 10,000) while queries/hits rise steadily; the
    per-interval difference swings 0..2,000 tok/s, the window's integral is 100 tok/s."""
    out = []
    for k, t in enumerate(range(95, 126)):
        burst = 10_000.0 * ((k + 1) // 2)  # prompt_tokens jumps every other second
        out.append(
            TimelineSample.from_json(
                {
                    "t": float(t),
                    "run": 1,
                    "endpoint": "a",
                    "v": {
                        "prompt_tokens": burst,
                        "prefix_cache_queries": 5_000.0 * k,
                        "prefix_cache_hits": 4_900.0 * k,
                        "generation_tokens": 50.0 * k,
                    },
                }
            )
        )
    lv = summarise_level(240, results(20), out)
    assert lv.computed_prompt_tok_s == pytest.approx(100.0)
    # prompt_tokens over the same window: bursts of 10,000 every 2 s, about 5,000 tok/s
    assert lv.effective_tok_s == pytest.approx(5_000.0 + 50.0, rel=0.1)
    assert lv.computed_tok_s == pytest.approx(150.0)


def test_short_run_falls_back_to_whole_run():
    lv = summarise_level(1, results(4, gap=2.0), samples("a", 99, 107))
    # Fewer than 10 records: no middle; 4 records from the first sample (99) to 106.
    assert lv.records_per_min == pytest.approx(4 / 7 * 60)
    assert lv.generation_tok_s == pytest.approx(50.0)


def test_no_metrics_gives_none_not_zero():
    lv = summarise_level(8, results(12), [])
    assert lv.hit_rate is None and lv.computed_tok_s is None and lv.kv_usage_max is None
    assert lv.bottleneck == "unknown"
    assert lv.records_per_min is not None


def test_a_level_too_short_for_its_samples_is_flagged_in_the_report():
    # 20 completions 0.1 s apart: the steady window (100.2-101.7 s) holds one of the samples
    # taken every second, so its rates are read from the samples around it.
    short = summarise_level(8, results(20, gap=0.1), samples("a", 99, 103))
    assert short.steady_samples == 1 and short.steady_s == pytest.approx(1.5)
    assert short.computed_tok_s == pytest.approx(150.0)  # still measured, from 100 to 102
    long = summarise_level(240, results(20), samples("a", 95, 120))
    assert long.steady_samples == 16 and long.steady_s == pytest.approx(15.0)
    report = report_markdown([short, long], cold=True, records_file="n", plots=[])
    assert "level 8's steady window (1.5 s) held 1 /metrics sample(s)" in report
    assert "level 240's" not in report
    assert "more records or a shorter --sample-interval" in report


def level(concurrency, rpm, hit, kv=0.3, bottleneck="engine"):
    return LevelSummary(
        concurrency=concurrency,
        records=100,
        done=100,
        errors=0,
        elapsed_s=60.0,
        records_per_min=rpm,
        records_per_min_whole=rpm,
        computed_tok_s=1300.0,
        effective_tok_s=9000.0,
        computed_prompt_tok_s=500.0,
        generation_tok_s=800.0,
        hit_rate=hit,
        hit_rate_steady=hit,
        prompt_tokens_per_record=3600.0,
        gen_tokens_per_record=300.0,
        calls_per_record=2.4,
        kv_usage_max=kv,
        waiting_max=0.0,
        preemptions=0.0,
        bottleneck=bottleneck,
        bottleneck_sentence=f"the {bottleneck}",
    )


def test_table_and_report_markdown():
    levels = [level(1, 4.0, 0.5), level(240, 120.0, 0.89), level(960, 149.0, 0.94, kv=0.75)]
    table = table_markdown(levels)
    assert table.count("\n") == 2 + 3
    row = "| 960 | 149.0 | 1,300 | 500 | 800 | 9,000 | 94.0% | 75% | 0 | 0 | engine | 100 / 0 |"
    assert row in table
    report = report_markdown(levels, cold=True, records_file="notes.jsonl", plots=["x.png"])
    assert "reset (`--cold`)" in report
    assert "about 37.2x" in report  # 149 / 4
    # 75% full with no preemption is not a warning (the H200 held 69-81% and lost no hit rate)
    assert "preempted" not in report and "70%" not in report
    assert "![x.png](x.png)" in report
    levels[2] = dataclasses.replace(levels[2], preemptions=12.0)
    warm = report_markdown(levels, cold=False, records_file="n", plots=[])
    assert "use `--cold`" in warm
    assert "Warning: vLLM preempted calls at 960 in flight: the KV cache ran out there" in warm


def test_predictions_carry_only_to_the_same_bottleneck():
    levels = with_predictions(
        [
            level(1, 4.0, 0.5, bottleneck="client"),
            level(240, 110.0, 0.89),
            level(960, 149.0, 0.94),
        ]
    )
    one, mid, top = levels
    assert {lv.predicted_from for lv in levels} == {960}  # the highest level calibrates
    # 1,300 computed tok/s x 60 / (3,600 x (1 - hit) + 300) tokens per record
    assert top.predicted_records_per_min == pytest.approx(78_000 / 516)
    assert mid.predicted_records_per_min == pytest.approx(78_000 / 696)
    assert one.predicted_records_per_min is None
    assert "bound by the engine, this one by the client" in (one.predicted_note or "")
    text = prediction_markdown(levels)
    assert "| 240 | engine | 110.0 | 112.1 | +1.9% |" in text
    assert "| 1 | client | 4.0 | cannot |" in text


def test_plots_are_real_pngs(tmp_path):
    levels = [level(1, 4.0, 0.5), level(240, 120.0, 0.89), level(960, 149.0, None)]
    paths = write_plots(levels, tmp_path)
    assert [p.name for p in paths] == ["records_per_min.png", "hit_rate.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert plt.imread(path).shape[:2] == (400, 600)


@pytest.mark.parametrize("text", ["1,x", "0,4", "4,4", ""])
def test_bad_levels(text):
    with pytest.raises(UserError, match="--levels"):
        parse_levels(text)


def test_levels():
    assert parse_levels("1,240, 480,960") == [1, 240, 480, 960]


def test_sample_input_keeps_whole_records_private(tmp_path):
    from sparkops.bench.runner import SweepConfig, sample_input

    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"id": "a"}\n\n{"id": "b"}\n{"id": "c"}\n')
    first = sample_input(jsonl, 2, tmp_path)
    assert first.read_text() == '{"id": "a"}\n{"id": "b"}\n'  # the blank line is no record
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    csv_in = tmp_path / "in.csv"
    csv_in.write_text('id,text\r\n1,"two\nlines"\r\n2,x\r\n3,y\r\n')
    rows = sample_input(csv_in, 2, tmp_path).read_bytes()
    assert rows == b'id,text\r\n1,"two\nlines"\r\n2,x\r\n'  # header + two rows, one spans lines
    cfg = SweepConfig(pipeline=jsonl, input=jsonl, levels=[1, 8], out=tmp_path, limit=30)
    assert (cfg.records_for(1), cfg.records_for(8)) == (30, 30)
    cfg = SweepConfig(pipeline=jsonl, input=jsonl, levels=[1, 8], out=tmp_path)
    assert (cfg.records_for(1), cfg.records_for(8)) == (50, None)  # level 1 on a sample


@pytest.mark.parametrize("text", ["0", "-3", "x"])
def test_limit_must_be_a_positive_count(text, capsys):
    import argparse

    from sparkops.bench import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    argv = ["bench", "sweep", "--pipeline", "p", "--input", "i", "--out", "o", "--limit", text]
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(argv)
    assert exit_.value.code == 2 and "--limit" in capsys.readouterr().err
