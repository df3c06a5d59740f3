"""Pure pieces of the engine's failure handling: retry rules, Retry-After, error causes,
what a 200 must carry, and the exit status a summary maps to."""

from __future__ import annotations

import signal
from email.utils import formatdate
from pathlib import Path

from sparkops.batch.engine import _answer_problem, _content
from sparkops.batch.job import JobSummary, _line_error
from sparkops.batch.retry import MAX_RETRY_AFTER, error_cause, is_retryable, retry_after_seconds
from sparkops.errors import Interrupted


def test_501_and_505_are_not_retried_but_other_5xx_and_429_are():
    assert not is_retryable(501) and not is_retryable(505)
    assert all(is_retryable(code) for code in (429, 500, 502, 503, 504, 507, 599))
    assert not is_retryable(400) and not is_retryable(401) and not is_retryable(200)


def test_retry_after_reads_seconds_and_http_dates_and_caps_them():
    assert retry_after_seconds("2") == 2.0 and retry_after_seconds(" 0.5 ") == 0.5
    assert retry_after_seconds(formatdate(1_000_030.0, usegmt=True), now=1_000_000.0) == 30.0
    assert retry_after_seconds(formatdate(999_000.0, usegmt=True), now=1_000_000.0) == 0.0
    assert retry_after_seconds("86400") == MAX_RETRY_AFTER
    assert retry_after_seconds("-5") == 0.0
    for bad in (None, "", "soon", "nan"):
        assert retry_after_seconds(bad) is None


def test_error_cause_drops_what_varies_per_record():
    assert error_cause("line 12: gave up after 7 attempts: HTTP 503: busy 3") == "HTTP 503: busy N"
    assert error_cause("HTTP 400: context 2048, asked 2100") == error_cause(
        "line 9: HTTP 400: context 2048, asked 4000"
    )
    assert error_cause("HTTP 501") == "HTTP 501"
    assert error_cause("HTTP 200 without choices") == "HTTP 200 without choices"
    assert len(error_cause("x" * 1000)) <= 120


def test_a_200_must_carry_choices_of_objects():
    assert _answer_problem("/v1/chat/completions", {"choices": [{"message": {}}]}) is None
    assert _answer_problem("/v1/chat/completions", {"id": "x"}) == "HTTP 200 without choices"
    assert _answer_problem("/v1/completions", {"choices": []}) == "HTTP 200 without choices"
    assert "not a JSON object" in _answer_problem("/v1/chat/completions", None)
    assert "not a JSON object" in _answer_problem("/v1/chat/completions", ["a"])
    assert "malformed choice" in _answer_problem("/v1/chat/completions", {"choices": ["yes"]})
    assert _answer_problem("/v1/embeddings", {"data": []}) is None
    assert _answer_problem("/v1/embeddings", {"x": 1}) == "HTTP 200 without data"


def test_content_of_odd_choices_is_empty_never_a_crash():
    assert _content({"choices": [{"message": {"content": None}, "text": "t"}]}) == "t"
    assert _content({"choices": [{"message": "oops"}]}) == ""
    assert _content({"choices": [{"message": {"content": 5}}]}) == ""
    assert _content({"choices": ["yes"]}) == ""


def test_exit_status_and_interrupt_codes():
    base = dict(out=Path("j"), total=2, done=2, errors=0, skipped=0, calls=2, retries=0,
                elapsed_s=1.0, records_per_min=None, hit_rate=None, resumed=False)  # fmt: skip
    assert JobSummary(**base, job_done=2).exit_status == 0
    assert JobSummary(**base, job_done=1, job_errors=1).exit_status == 3
    assert Interrupted("x", signal.SIGINT).exit_status == 130
    assert Interrupted("x", signal.SIGTERM).exit_status == 143


def test_line_error_reads_pipeline_and_openai_lines():
    assert _line_error({"status": "done"}) is None
    assert _line_error({"status": "error", "error": "HTTP 401: no"}) == "HTTP 401: no"
    ok = {"error": None, "response": {"status_code": 200, "body": {}}}
    assert _line_error(ok) is None
    http = {"error": None, "response": {"status_code": 400, "body": {"error": {"message": "m"}}}}
    assert _line_error(http) == "HTTP 400: m"
    assert _line_error({"error": {"code": "timeout", "message": "timed out"}}) == "timed out"


def test_ctrl_c_while_commands_load_is_one_line(monkeypatch, capsys):
    from sparkops import cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["batch", "status", "x"]) == 130
    assert capsys.readouterr().err == "sparkops: interrupted before anything started\n"


def test_progress_on_a_resume_counts_finished_records_once():
    from sparkops.batch.engine import Stats
    from sparkops.batch.progress import ProgressView

    stats = Stats(skipped=96, done=4)
    view = ProgressView(stats, total=100, already=96, enabled=False)
    view.update()
    assert view._progress.tasks[0].completed == 100  # was 196: skipped counted twice


def test_bad_fail_fast_and_retry_for_are_usage_errors(capsys):
    from sparkops import cli

    base = ["batch", "run", "--input", "in.jsonl", "--out", "job", "--endpoint", "http://h:1"]
    for bad in (["--fail-fast", "-1"], ["--fail-fast", "x"], ["--retry-for", "0"],
                ["--retry-for", "nan"], ["--retry-for", "inf"]):  # fmt: skip
        try:
            cli.main([*base, *bad])
        except SystemExit as exit_:
            assert exit_.code == 2
        else:
            raise AssertionError(f"{bad} accepted")
        err = capsys.readouterr().err
        assert f"argument {bad[0]}" in err and "Traceback" not in err
