"""Usage figures that cannot be true (issue 37 item 7): a results line whose `usage` holds a
negative count or more cached tokens than prompt tokens made a per-step hit rate of 6,243.8%.
Such answers are left out of every token figure and named; no hit rate leaves 0-100%."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sparkops.jobdir.durable import append_json
from sparkops.jobdir.folder import Manifest, prepare_dir
from sparkops.report.render import write_report

SENTENCE = (
    "answer(s) carried usage figures that cannot be true (cached > prompt, or negative); left "
    "out of the hit rate"
)


def step(prompt: Any, cached: Any, completion: Any = 2) -> dict[str, Any]:
    return {
        "step": "s",
        "answer": "yes",
        "parsed": True,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
    }


def job_with(tmp_path: Path, steps: list[dict[str, Any]], raw: list[str] = ()) -> Path:
    """A job folder whose records each made one call with the given usage figures."""
    job = tmp_path / "job"
    total = len(steps) + len(raw)
    prepare_dir(job, Manifest("p", "i", "in.jsonl", "jsonl", "id", total), restart=False)
    append_json(job / "runs.jsonl", {"event": "start", "run": 1, "t": 1000.0, "concurrency": 2})
    with (job / "results.jsonl").open("w") as fh:
        for i, s in enumerate(steps):
            line = {"id": f"r{i}", "status": "done", "final": "yes", "steps": [s], "error": None}
            fh.write(json.dumps({**line, "t0": 1000.0, "t": 1001.0 + i, "run": 1}) + "\n")
        fh.writelines(line + "\n" for line in raw)
    return job


def percentages(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"(-?[\d,]+\.\d)%", text)]


def test_impossible_usage_is_left_out_of_the_hit_rate_and_named(tmp_path):
    good = [step(100, 80)] * 8
    bad = [step(16, 999), step(-5, 0), step(100, -1), step(100, 10, completion=-3)]
    job = job_with(tmp_path, good + bad)
    report = write_report(job)
    (row,) = report.steps
    assert row.hit_rate == 0.8 and row.calls == 8 and row.prompt_tokens == 800
    assert report.cached_tokens_share == 0.8
    assert report.prompt_tokens_per_call == 100.0  # over the 8 calls whose figures count
    assert report.completion_tokens_per_call == 2.0
    assert report.usage_impossible_answers == 4
    assert report.usage_impossible_note.startswith(f"4 {SENTENCE}")
    md = (job / "report.md").read_text()
    assert f"4 {SENTENCE}" in md
    assert "| s | 8 | 800 | 80.0% | - |" in md
    assert "6,243.8%" not in md and all(0 <= p <= 100 for p in percentages(md))


def test_a_job_whose_every_answer_is_impossible_has_no_hit_rate(tmp_path):
    job = job_with(tmp_path, [step(16, 999), step(10, 11)])
    report = write_report(job)
    assert report.steps == () and report.cached_tokens_share is None
    assert report.prompt_tokens_per_call is None
    assert report.usage_impossible_answers == 2
    md = (job / "report.md").read_text()
    assert f"2 {SENTENCE}" in md and all(0 <= p <= 100 for p in percentages(md))


def test_possible_usage_gives_no_note(tmp_path):
    """Cached equal to prompt, zero cached, or none said: all can be true."""
    job = job_with(tmp_path, [step(100, 100), step(100, 0), step(100, None)])
    report = write_report(job)
    assert report.usage_impossible_answers == 0 and report.usage_impossible_note is None
    assert "cannot be true" not in (job / "report.md").read_text()


def test_non_finite_counts_read_as_absent_not_a_traceback(tmp_path):
    """Python's JSON reader lets NaN and Infinity through; `int(inf)` crashed the report."""
    base = {"id": "x", "status": "done", "final": "yes", "error": None, "t": 1002.0, "run": 1}
    raw = [
        json.dumps({**base, "steps": [step(float("inf"), 5)]}),
        json.dumps({**base, "id": "y", "steps": [step(100, float("nan"))]}),
    ]
    job = job_with(tmp_path, [step(100, 50)], raw)
    report = write_report(job)
    assert report.finished == 3 and report.done == 3
    # inf prompt tokens read as none, so 5 cached of 0 prompt cannot be true: named, left out
    assert report.usage_impossible_answers == 1
    assert report.prompt_tokens_per_call == 100.0


def test_a_metrics_hit_rate_above_100_percent_is_not_reported(tmp_path):
    job = job_with(tmp_path, [step(100, 80)] * 3)
    for t, q, h in [(1000, 0, 0), (1010, 1_000, 5_000)]:
        sample = {"t": t, "run": 1, "endpoint": "a", "v": {"prefix_cache_queries": q}}
        sample["v"]["prefix_cache_hits"] = h
        append_json(job / "timeline.jsonl", sample)
    report = write_report(job)
    assert report.prefix_cache_hit_rate is None
    assert "more cache hits than queries" in report.prefix_cache_hit_rate_note
    md = (job / "report.md").read_text()
    assert "| Prefix cache hit rate | - |" in md and "500.0%" not in md
    assert "more cache hits than queries" in md
