"""Report maths: counter resets, hit rate over backends, steady window, report files."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import stat
from collections.abc import Iterator
from typing import Any

import pytest

from sparkops.jobdir.durable import append_json
from sparkops.jobdir.folder import Manifest, prepare_dir
from sparkops.jobdir.job_report import JobReport
from sparkops.metrics.timeline import (
    TimelineSample,
    Window,
    counter_increase,
    hit_rate,
    samples_inside,
    steady_window,
)
from sparkops.report.render import markdown, write_report


def sample(t, ep, q, h, run=1, **extra):
    return TimelineSample.from_json(
        {
            "t": t,
            "run": run,
            "endpoint": ep,
            "v": {"prefix_cache_queries": q, "prefix_cache_hits": h, **extra},
        }
    )


def test_counter_increase_survives_a_server_restart():
    assert counter_increase([10, 20, 35]) == 25
    assert counter_increase([10, 50, 5, 15]) == 40 + 5 + 10


def test_hit_rate_sums_backends_and_skips_failed_scrapes():
    samples = [
        sample(0, "a", 100, 50),
        sample(10, "a", 1100, 950),
        sample(0, "b", 0, 0),
        sample(10, "b", 1000, 800),
        TimelineSample.from_json({"t": 5, "run": 1, "endpoint": "b", "v": {}}),
    ]
    assert hit_rate(samples) == pytest.approx((900 + 800) / (1000 + 1000))
    assert hit_rate([sample(0, "a", 5, 5)]) is None


def test_a_window_shorter_than_the_sampling_interval_reads_the_samples_around_it():
    # A fast level's steady window can fall between two samples (CI saw it: the steady hit
    # rate was None, though the steady token rates had a value). Both read the bracketing pair.
    samples = [sample(0, "a", 0, 0), sample(10, "a", 1000, 600), sample(20, "a", 3000, 2400)]
    assert hit_rate(samples, Window(12, 18, 5)) == pytest.approx(1800 / 2000)
    assert hit_rate(samples, Window(0, 20, 9)) == pytest.approx(2400 / 3000)
    assert hit_rate(samples, Window(25, 30, 1)) is None  # nothing after it: nothing measured


def test_samples_inside_counts_the_backends_sampled_around_each_window():
    run1 = [sample(t, "a", t * 10, t * 9) for t in range(0, 11)]  # a sample a second
    run2 = [sample(t, "a", t * 10, t * 9, run=2) for t in range(100, 103)]
    both = run1 + run2
    # Run 2's backend was not sampled around run 1's window: it does not count as 0 there.
    assert samples_inside(both, [Window(2, 8, 10)]) == 7
    assert samples_inside(both, [Window(2, 8, 10), Window(100.5, 101.5, 3)]) == 1
    assert samples_inside(both, [None]) is None
    failed = [TimelineSample.from_json({"t": 5, "run": 1, "endpoint": "a", "v": {}})]
    assert samples_inside(failed, [Window(2, 8, 10)]) is None  # no figures, nothing to qualify


def test_a_steady_window_with_too_few_samples_is_named_in_the_report():
    report = JobReport(records=40, finished=40, done=40, steady_samples=1)
    text = markdown(report, "job")
    assert "A steady window held 1 /metrics sample(s) of a backend, fewer than 3" in text
    assert "more records or a shorter --sample-interval" in text
    for firm in (3, None):  # enough samples, or no samples at all (nothing to qualify)
        firmer = dataclasses.replace(report, steady_samples=firm)
        assert "/metrics sample(s)" not in markdown(firmer, "job")


def test_steady_window_drops_warm_up_and_tail():
    # slow start, 1 record/s in the middle, long tail
    times = [0, 10, 20] + [100 + i for i in range(80)] + [300, 400, 500]
    w = steady_window(times, trim=0.1)
    assert w is not None and w.start >= 100 and w.end <= 180
    assert w.per_min == pytest.approx(60.0, rel=0.05)
    assert steady_window([1, 2, 3]) is None


def test_report_files_from_a_job_directory(tmp_path):
    job = tmp_path / "job"
    prepare_dir(job, Manifest("p", "i", "in.jsonl", "jsonl", "id", 41), restart=False)
    (job / "prefix.json").write_text(
        json.dumps(
            {
                "block_size": 16,
                "steps": {
                    "a": {
                        "shared_tokens": 90,
                        "reusable_tokens": 80,
                        "tail_tokens": 10,
                        "fixed_tokens": 95,
                    }
                },
            }
        )
    )
    with (job / "results.jsonl").open("w") as fh:
        for i in range(40):
            steps = [
                {
                    "step": "a",
                    "answer": "yes",
                    "prompt_tokens": 100,
                    "completion_tokens": 2,
                    "cached_tokens": 80,
                }
            ]
            fh.write(
                json.dumps(
                    {
                        "id": f"r{i}",
                        "status": "done",
                        "final": "yes",
                        "steps": steps,
                        "error": None,
                        "t": 1000.0 + i,
                        "run": 1,
                    }
                )
                + "\n"
            )
        fh.write(
            json.dumps(
                {
                    "id": None,
                    "line": 41,
                    "status": "error",
                    "steps": [],
                    "error": "line 41: not valid JSON",
                    "t": 1040.0,
                    "run": 1,
                }
            )
            + "\n"
        )
    append_json(job / "runs.jsonl", {"event": "start", "run": 1, "t": 1000.0})
    for t, q, h, p, g in [
        (1000, 0, 0, 0, 0),
        (1020, 2000, 1500, 2000, 40),
        (1041, 4000, 3000, 4000, 80),
    ]:
        append_json(
            job / "timeline.jsonl",
            sample(
                t,
                "a",
                q,
                h,
                prompt_tokens=p,
                generation_tokens=g,
                kv_cache_usage=0.25,
                preemptions=0,
            ),
        )
    report = write_report(job)
    assert report.records == 41 and report.done == 40 and report.errors == 1
    assert report.calls_per_record == 1.0
    # 40 done in the run's 40 s: the error line (t=1040) ends the span but is not counted
    assert report.records_per_min == pytest.approx(40 / 40 * 60, rel=0.01)
    assert report.records_per_min_steady == pytest.approx(60.0, rel=0.05)
    assert report.prefix_cache_hit_rate == 0.75
    assert report.prefix_cache_hit_rate_ceiling == 0.8
    assert report.kv_cache_usage_max == 0.25 and report.preemptions == 0
    # The steady window (1004..1034) holds one sample, so the two that bracket it count:
    # 1000..1041, 41 s. Computed prompt = queries - hits = 1,000; all prompt 4,000; 80 out.
    assert report.computed_prompt_tok_s == pytest.approx(1000 / 41, abs=0.1)
    assert report.generation_tok_s == pytest.approx(80 / 41, abs=0.1)
    assert report.computed_tok_s == pytest.approx(1080 / 41, abs=0.1)
    assert report.effective_tok_s == pytest.approx(4080 / 41, abs=0.1)
    for name in ("report.json", "report.md", "throughput.png"):
        assert stat.S_IMODE((job / name).stat().st_mode) == 0o600
    assert (job / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert "| Prefix cache hit rate | 75.0% |" in (job / "report.md").read_text()


def test_live_hit_rate_is_a_running_sum_over_backends():
    from sparkops.metrics.timeline import LiveHitRate

    live = LiveHitRate()
    live.add("a", {"prefix_cache_queries": 100, "prefix_cache_hits": 50})
    live.add("b", {})  # a failed scrape is ignored
    assert live.rate is None
    live.add("a", {"prefix_cache_queries": 1100, "prefix_cache_hits": 950})
    live.add("b", {"prefix_cache_queries": 0, "prefix_cache_hits": 0})
    live.add("b", {"prefix_cache_queries": 1000, "prefix_cache_hits": 800})
    assert live.rate == pytest.approx(1700 / 2000)
    live.add("a", {"prefix_cache_queries": 10, "prefix_cache_hits": 10})  # a restart
    assert live.rate == pytest.approx(1710 / 2010)


def make_job(tmp_path, runs, records=None, error_lines=0, samples=()):
    """A job directory from `runs`: [(start, concurrency, finish_times), ...]."""
    job = tmp_path / "job"
    total = records or sum(len(ts) for _, _, ts in runs) + error_lines
    prepare_dir(job, Manifest("p", "i", "in.jsonl", "jsonl", "id", total), restart=False)
    n = 0
    with (job / "results.jsonl").open("w") as fh:
        for run, (start, concurrency, times) in enumerate(runs, start=1):
            append_json(
                job / "runs.jsonl",
                {"event": "start", "run": run, "t": start, "concurrency": concurrency},
            )
            for t in times:
                n += 1
                ok = n > error_lines
                fh.write(
                    json.dumps(
                        {
                            "id": f"r{n}",
                            "status": "done" if ok else "error",
                            "final": "yes" if ok else None,
                            "steps": [],
                            "error": None if ok else "HTTP 401: no key",
                            "t0": start,
                            "t": t,
                            "run": run,
                        }
                    )
                    + "\n"
                )
    for s in samples:
        append_json(job / "timeline.jsonl", s.to_json())
    return job


def test_a_run_no_longer_than_its_concurrency_reports_no_steady_rate(tmp_path):
    # 200 records at --concurrency 1000: all admitted at once, answers come in a burst
    times = [1000.0 + 50 * i / 200 for i in range(180)] + [1050.0 + i * 0.01 for i in range(20)]
    job = make_job(tmp_path, [(1000.0, 1000, times)])
    report = write_report(job)
    assert report.records_per_min_steady is None
    assert report.computed_tok_s is None and report.effective_tok_s is None
    assert "too short for a steady state" in report.records_per_min_steady_reason
    assert "200 records with --concurrency 1,000" in report.records_per_min_steady_reason
    assert report.records_per_min == pytest.approx(200 / 50.19 * 60, rel=0.01)
    md = (job / "report.md").read_text()
    assert "| Records/min (steady, middle of run) | - |" in md
    assert "Steady records/min: not measured: too short for a steady state" in md
    on_disk = json.loads((job / "report.json").read_text())
    assert on_disk["records_per_min_steady"] is None
    assert on_disk["records_per_min_steady_reason"].startswith("too short")


def test_a_run_longer_than_its_concurrency_has_a_steady_rate_and_a_short_resume_is_left_out(
    tmp_path,
):
    first = [1000.0 + i for i in range(100)]  # 1 record/s, concurrency 10
    resumed = [5000.0 + i * 0.01 for i in range(5)]  # 5 left, all admitted at once
    job = make_job(tmp_path, [(1000.0, 10, first), (4999.0, 10, resumed)])
    report = write_report(job)
    assert report.records_per_min_steady == pytest.approx(60.0, rel=0.02)
    assert report.records_per_min_steady_reason is None
    assert "Steady records/min: not measured" not in (job / "report.md").read_text()


def test_records_per_min_counts_records_done_not_errors(tmp_path):
    # 120 records over 120 s, the first 60 errors (a 401 burst), then 60 done: 30/min, not 60
    job = make_job(tmp_path, [(1000.0, 4, [1000.0 + i for i in range(1, 121)])], error_lines=60)
    report = write_report(job)
    assert report.done == 60 and report.errors == 60 and report.finished == 120
    assert report.records_per_min == pytest.approx(60 / 120 * 60, rel=0.01)
    # the steady window is the middle of the done records' completions: 1 done per second
    assert report.records_per_min_steady == pytest.approx(60.0, rel=0.05)
    md = (job / "report.md").read_text()
    assert "| Errors | 60 |" in md and "| Records/min (whole run) | 30.0 |" in md


def test_a_job_with_nothing_done_reports_no_records_per_min(tmp_path):
    job = make_job(tmp_path, [(1000.0, 4, [1000.0 + i for i in range(30)])], error_lines=30)
    report = write_report(job)
    assert report.done == 0 and report.errors == 30
    assert report.records_per_min is None and report.records_per_min_steady is None
    assert "no record was done" in report.records_per_min_steady_reason
    md = (job / "report.md").read_text()
    assert "| Records/min (whole run) | - |" in md
    assert "No record was done (30 errors), so no records/min is reported." in md


def test_a_hit_rate_above_the_ceiling_is_explained_not_called_at_the_ceiling(tmp_path):
    samples = [sample(1000, "a", 0, 0), sample(1040, "a", 10_000, 9_900)]
    job = make_job(tmp_path, [(1000.0, 4, [1000.0 + i for i in range(40)])], samples=samples)
    (job / "prefix.json").write_text(
        json.dumps(
            {
                "block_size": 16,
                "steps": {"s": dict(shared_tokens=970, reusable_tokens=962, tail_tokens=8)},
            }
        )
    )
    with (job / "results.jsonl").open("a") as fh:  # one step with per-call usage
        fh.write(
            json.dumps(
                {
                    "id": "x",
                    "status": "done",
                    "final": "yes",
                    "t": 1040.0,
                    "run": 1,
                    "steps": [{"step": "s", "prompt_tokens": 1000, "cached_tokens": 990}],
                }
            )
            + "\n"
        )
    report = write_report(job)
    assert report.prefix_cache_hit_rate == 0.99
    assert report.prefix_cache_hit_rate_ceiling == 0.962
    note = report.prefix_cache_hit_rate_note
    assert "2.8 points above the 96.2% that the shared prompt text allows" in note
    assert "warm cache" in note
    md = (job / "report.md").read_text()
    assert "at its ceiling" not in md and "99.0% of 96.2%" not in md
    assert note in md
    assert "above the 96.2%" in report.steps[0].verdict
    assert report.hit_rate_verdict.startswith("Over the whole job: 99.0% of prompt tokens")


def test_throughput_plot_draws_each_series_at_its_own_times_with_run_boundaries(tmp_path):
    from sparkops.report.compute import load_dir
    from sparkops.report.render import figure

    # records every second, but /metrics sampled every 10 s: longer than a bucket (2.7 s)
    first = [1000.0 + i for i in range(30)]
    resumed = [1100.0 + i for i in range(10)]
    samples = [sample(1000 + 10 * k, "a", 1000 * k, 800 * k) for k in range(4)]
    samples += [sample(1100 + 10 * k, "a", 3000 + 1000 * k, 2400 + 500 * k, run=2) for k in (0, 1)]
    job = make_job(tmp_path, [(1000.0, 2, first), (1099.0, 2, resumed)], samples=samples)
    fig = figure(load_dir(job))
    ax, ax2 = fig.axes
    hit = next(line for line in ax2.get_lines() if line.get_label() == "prefix cache hit rate")
    assert list(hit.get_xdata()) == [10.0, 20.0, 30.0, 110.0]
    assert list(hit.get_ydata()) == pytest.approx([80.0, 80.0, 80.0, 50.0])
    rate = next(line for line in ax.get_lines() if line.get_label().startswith("records/min"))
    xs = list(rate.get_xdata())
    assert len(xs) == 40 and xs[1] - xs[0] < 10  # buckets finer than the sampling interval
    assert sum(rate.get_ydata()) * (xs[1] - xs[0]) / 60 == pytest.approx(40)  # every record
    boundaries = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert [line.get_xdata()[0] for line in boundaries] == [99.0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[1:] == ["prefix cache hit rate", "resumed run starts"]
    assert legend[0].startswith("records/min (per ")
    write_report(job)
    assert (job / "throughput.png").read_bytes()[:4] == b"\x89PNG"


def test_lines_that_are_json_but_not_objects_are_skipped_not_a_traceback(tmp_path):
    job = make_job(tmp_path, [(1000.0, 4, [1000.0 + i for i in range(20)])])
    for name in ("results.jsonl", "runs.jsonl", "timeline.jsonl", "openai-meta.jsonl"):
        with (job / name).open("a") as fh:
            fh.write('[1, 2]\n"text"\n{"t": "not a number", "v": {}}\n')
    report = write_report(job)
    assert report.done == 20 and report.finished == 21  # the stray object is a line


def test_throughput_plot_without_samples_or_records_says_so_in_its_legend(tmp_path):
    from sparkops.report.compute import load_dir
    from sparkops.report.render import figure

    job = make_job(tmp_path, [(1000.0, 4, [])], records=3)  # started, nothing finished yet
    fig = figure(load_dir(job))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[1] == "prefix cache hit rate (no samples)"
    report = write_report(job)
    assert report.records_per_min is None and report.finished == 0
    assert (job / "throughput.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_whole_run_records_per_min_survives_a_wall_clock_step(tmp_path, step):
    """Issue 34 item 13: 120 records over 120 s with the wall clock stepped by an hour
    half-way (NTP, a suspended VM's clock): the whole-run rate comes from the run's monotonic
    span (the end line's active_s), not the stamps, which still say the stepped time."""
    times = [1000.0 + i for i in range(1, 61)] + [1000.0 + step + i for i in range(61, 121)]
    job = make_job(tmp_path, [(1000.0, 4, times)])
    append_json(job / "runs.jsonl", {"event": "end", "run": 1, "t": times[-1], "active_s": 120.0})
    report = write_report(job)
    assert report.records_per_min == pytest.approx(60.0, rel=0.01)
    assert report.wall_s == pytest.approx(120.0)


@contextlib.contextmanager
def _fates_on_two_clocks(tmp_path) -> Iterator[tuple[Any, list[dict], dict[str, float]]]:
    """Fates writing to a list, with the wall and monotonic clocks held in `clocks` (the test
    moves each as it likes): (fates, written lines, clocks)."""
    from unittest import mock

    from sparkops.batch.fate import Fates, Stats

    written: list[dict] = []
    journal = mock.Mock(append=written.append, dir=tmp_path)
    clocks = {"wall": 1000.0, "mono": 50.0}
    with (
        mock.patch("time.time", lambda: clocks["wall"]),
        mock.patch("time.monotonic", lambda: clocks["mono"]),
    ):
        yield Fates(journal, Stats(), 1), written, clocks


def test_the_run_measures_its_active_span_on_the_monotonic_clock(tmp_path):
    """The writer side of the same: Fates stamps the last finish on the monotonic clock, while
    `t` keeps the wall clock a person reads, stepped or not."""
    from sparkops.batch.fate import RecordState
    from sparkops.batch.records import Record

    with _fates_on_two_clocks(tmp_path) as (fates, written, clocks):
        for i in range(3):
            clocks["wall"] += 3600.0 if i == 1 else 1.0  # a wall-clock step before the second
            clocks["mono"] += 1.0
            record = RecordState(Record(f"r{i}", i + 1, {}), "a", started=clocks["wall"])
            fates.done(record, "yes")
    assert fates.last_finish == 53.0
    assert [x["t"] for x in written] == [1001.0, 4601.0, 4602.0]


def test_record_latency_is_measured_on_the_monotonic_clock(tmp_path):
    """Issue 34 item 13, the latencies: a record in flight while the wall clock steps by an
    hour keeps its true latency (latency_s, monotonic), where t - t0 would read 3,602 s."""
    from sparkops.batch.fate import RecordState
    from sparkops.batch.records import Record

    with _fates_on_two_clocks(tmp_path) as (fates, written, clocks):
        state = RecordState(Record("r1", 1, {}), "a", started=clocks["wall"], began=clocks["mono"])
        clocks["wall"] += 3600.0 + 2.0  # the clock steps while the record is in flight
        clocks["mono"] += 2.0
        fates.done(state, "yes")
    (line,) = written
    assert line["t"] - line["t0"] == pytest.approx(3602.0)
    assert line["latency_s"] == pytest.approx(2.0)

    # The report reads latency_s, and falls back to t - t0 for lines written before it.
    job = make_job(tmp_path, [(1000.0, 4, [1003.0, 1004.0, 1005.0])])
    results = job / "results.jsonl"
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    rows[0]["t"] += 3600.0  # stepped stamp, true latency 3 s
    rows[0]["latency_s"] = 3.0
    rows[1]["latency_s"] = 4.0
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = write_report(job)
    assert report.record_latency_p50_s == pytest.approx(4.0)
    assert report.record_latency_p95_s == pytest.approx(5.0)  # r3: t - t0, no latency_s


def test_report_md_counts_the_decisions(tmp_path):
    """Issue 31 item 12: report.md shows how many done records ended in each decision (only
    report.json's finals held them); errors have no decision and are not counted."""
    job = make_job(tmp_path, [(1000.0, 4, [1001.0 + i for i in range(10)])], error_lines=2)
    results = job / "results.jsonl"
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    for row, final in zip(rows[2:], ["no"] * 5 + ["yes"] * 2 + ["unclear"], strict=True):
        row["final"] = final
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = write_report(job)
    assert report.finals == {"no": 5, "yes": 2, "unclear": 1}
    md = (job / "report.md").read_text()
    table = md.split("Decisions (the final label of each done record):")[1].split("\n\n")[1]
    assert table.splitlines() == [
        "| Decision | Records | Share |",
        "|---|---|---|",
        "| no | 5 | 62.5% |",
        "| yes | 2 | 25.0% |",
        "| unclear | 1 | 12.5% |",
    ]
