"""Report maths: counter resets, hit rate over backends, steady window, report files."""

from __future__ import annotations

import json
import stat

import pytest

from sparkops.batch.journal import Manifest, append_json, prepare_dir
from sparkops.metrics.timeline import counter_increase, hit_rate, steady_window
from sparkops.report.render import write_report


def sample(t, ep, q, h, run=1, **extra):
    return {
        "t": t,
        "run": run,
        "endpoint": ep,
        "v": {"prefix_cache_queries": q, "prefix_cache_hits": h, **extra},
    }


def test_counter_increase_survives_a_server_restart():
    assert counter_increase([10, 20, 35]) == 25
    assert counter_increase([10, 50, 5, 15]) == 40 + 5 + 10


def test_hit_rate_sums_backends_and_skips_failed_scrapes():
    samples = [
        sample(0, "a", 100, 50),
        sample(10, "a", 1100, 950),
        sample(0, "b", 0, 0),
        sample(10, "b", 1000, 800),
        {"t": 5, "run": 1, "endpoint": "b", "v": {}},
    ]
    assert hit_rate(samples) == pytest.approx((900 + 800) / (1000 + 1000))
    assert hit_rate([sample(0, "a", 5, 5)]) is None


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
    assert report["records"] == 41 and report["done"] == 40 and report["errors"] == 1
    assert report["calls_per_record"] == 1.0
    assert report["records_per_min"] == pytest.approx(41 / 40 * 60, rel=0.01)
    assert report["records_per_min_steady"] == pytest.approx(60.0, rel=0.05)
    assert report["prefix_cache_hit_rate"] == 0.75
    assert report["prefix_cache_hit_rate_ceiling"] == 0.8
    assert report["kv_cache_usage_max"] == 0.25 and report["preemptions"] == 0
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
