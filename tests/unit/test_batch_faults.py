"""Pure pieces of the engine's failure handling: retry rules, Retry-After, error causes,
what a 200 must carry, and the exit status a summary maps to."""

from __future__ import annotations

import signal
from email.utils import formatdate
from pathlib import Path

import pytest

from sparkops.batch.job import JobSummary
from sparkops.batch.outcome import Kind, answer_text, check_answer, http_failure, record_failure
from sparkops.batch.retry import MAX_RETRY_AFTER, is_retryable, retry_after_seconds
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


def _http_cause(status: int, message: str | None) -> str:
    body = {"error": {"message": message}} if message else None
    return http_failure(status, body, b"", None, None).cause


def test_a_failure_s_cause_drops_what_varies_per_record():
    """Errors are grouped by `Failure.cause` (the summary's commonest cause), typed where the
    failure happens: numbers masked, attempt counts and line numbers out of it."""
    assert (
        http_failure(503, {"error": {"message": "busy 3"}}, b"", None, None).alone(7).cause
        == "HTTP 503: busy N"
    )
    assert _http_cause(400, "context 2048, asked 2100") == _http_cause(
        400, "context 2048, asked 4000"
    )
    assert _http_cause(501, None) == "HTTP 501"
    assert _problem("/v1/chat/completions", {"id": "x"}) == "HTTP 200 without choices"
    assert (
        record_failure("line 12: no field x").cause == record_failure("line 80: no field x").cause
    )
    assert len(record_failure("x" * 1000).cause) <= 120


def _problem(path: str, body: object) -> str | None:
    failure = check_answer(path, body)
    return None if failure is None else failure.cause


def test_a_200_must_carry_choices_of_objects():
    assert _problem("/v1/chat/completions", {"choices": [{"message": {}}]}) is None
    assert _problem("/v1/chat/completions", {"id": "x"}) == "HTTP 200 without choices"
    assert _problem("/v1/completions", {"choices": []}) == "HTTP 200 without choices"
    assert "not a JSON object" in _problem("/v1/chat/completions", None)
    assert "not a JSON object" in _problem("/v1/chat/completions", ["a"])
    assert "malformed choice" in _problem("/v1/chat/completions", {"choices": ["yes"]})
    assert _problem("/v1/embeddings", {"data": []}) is None
    assert _problem("/v1/embeddings", {"x": 1}) == "HTTP 200 without data"
    assert check_answer("/v1/chat/completions", {"choices": ["yes"]}).is_records_fault
    assert check_answer("/v1/chat/completions", {"id": "x"}).is_servers_fault


def test_content_of_odd_choices_is_none_never_a_crash():
    assert answer_text({"choices": [{"message": {"content": None}, "text": "t"}]}) == "t"
    assert answer_text({"choices": [{"message": "oops"}]}) is None
    assert answer_text({"choices": [{"message": {"content": 5}}]}) is None
    assert answer_text({"choices": ["yes"]}) is None


@pytest.mark.parametrize(
    "choice",
    [
        {"index": 0, "finish_reason": "stop"},  # no message
        {"message": {"role": "assistant", "content": None}, "finish_reason": "stop"},
        {"message": {"role": "assistant", "content": None, "tool_calls": [{"id": "t"}]}},
    ],
)
def test_a_200_whose_choice_has_no_text_is_the_servers_failure_for_a_pipeline(choice):
    body = {"choices": [choice]}
    failure = check_answer("/v1/chat/completions", body, want_text=True)
    assert failure is not None and failure.kind is Kind.NO_TEXT and failure.is_servers_fault
    assert check_answer("/v1/chat/completions", body) is None  # an OpenAI batch line keeps it


def test_an_error_object_beside_an_empty_choice_is_no_text_but_an_empty_answer_is_one():
    empty = {"message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}
    assert check_answer("/v1/chat/completions", {"choices": [empty]}, want_text=True) is None
    with_error = {"choices": [empty], "error": {"message": "upstream failed"}}
    failure = check_answer("/v1/chat/completions", with_error, want_text=True)
    assert failure is not None and failure.kind is Kind.NO_TEXT


def test_whose_fault_each_failure_is():
    from sparkops.batch.outcome import TIMED_OUT, http_failure, record_failure, transport_failure

    def http(code: int):
        return http_failure(code, {"error": {"message": "m 12"}}, b"", None, None)

    for server in (transport_failure(OSError()), TIMED_OUT, http(500), http(503), http(429),
                   http(401), http(403), http(404)):  # fmt: skip
        assert server.is_servers_fault and not server.is_records_fault
    for record in (http(400), http(413), http(422), http(501), record_failure("line 3: x")):
        assert record.is_records_fault
    assert http(400).cause == "HTTP 400: m N" and http(400).message == "HTTP 400: m 12"
    alone = http(500).alone(6)
    assert alone.is_records_fault and alone.message == "gave up after 6 attempts: HTTP 500: m 12"


def test_exit_status_and_interrupt_codes():
    base = dict(out=Path("j"), total=2, done=2, errors=0, skipped=0, calls=2, retries=0,
                elapsed_s=1.0, records_per_min=None, hit_rate=None, resumed=False)  # fmt: skip
    assert JobSummary(**base, job_done=2).exit_status == 0
    assert JobSummary(**base, job_done=1, job_errors=1).exit_status == 3
    assert Interrupted("x", signal.SIGINT).exit_status == 130
    assert Interrupted("x", signal.SIGTERM).exit_status == 143


def test_ctrl_c_while_commands_load_is_one_line(monkeypatch, capsys):
    from sparkops import cli

    def interrupted(argv=None):
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
