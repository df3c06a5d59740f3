"""`sparkops batch run` as a subprocess against the fault-injecting server.

Every case asserts what a user would check: the exit status, every record exactly once in
results.jsonl (or exactly the resumable remainder), no traceback or asyncio noise in the
output, and a bounded wall time.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections import Counter

import pytest

from tests.plugins.cli import (
    Finished,
    assert_quiet,
    batch_run,
    finish,
    sparkops,
    start,
    wait_for,
)
from tests.plugins.fault_server import (
    ONE_STEP,
    choice_not_object,
    drop,
    hang,
    no_choices,
    not_json,
    ok,
    openai_lines,
    slow,
    status,
    write_records,
)

pytestmark = pytest.mark.integration


def run(job, server, *extra, limit: float = 30.0) -> Finished:
    """`sparkops batch run` for ``job`` against ``server``, within ``limit`` s, no noise."""
    return sparkops(*batch_run(job, server.openai_url, extra=extra), limit=limit)


def rows(job) -> list[dict]:
    path = job["out"] / "results.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def error_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("sparkops:")]


def assert_exactly_once(job, ids: list[str]) -> dict[str, dict]:
    got = rows(job)
    assert Counter(r["id"] for r in got) == Counter(ids)
    return {r["id"]: r for r in got}


def test_every_call_401_is_refused_before_any_record_then_the_fix_runs(job, fault_server):
    """401 answers every record alike (a wrong key): the check request finds it before the
    first record (exit 2), where it used to fail records until fail-fast stopped the job."""
    ids = write_records(job["input"], 200)
    fault_server.default = status(401, message="Invalid API key")
    first = run(job, fault_server, "--concurrency", "8")
    assert first.returncode == 2
    (line,) = error_lines(first.stderr)
    assert fault_server.url in line and "HTTP 401: Invalid API key" in line
    assert "--api-key-env" in line and "nothing was sent" in line
    assert rows(job) == [] and sum(fault_server.requests.values()) == 0
    assert fault_server.checks == 1
    fault_server.default = ok()
    second = run(job, fault_server, "--concurrency", "8")
    assert second.returncode == 0, second.stderr
    assert all(r["status"] == "done" for r in assert_exactly_once(job, ids).values())


def test_a_record_error_the_first_records_share_stops_fast_then_resumes(job, fault_server):
    """Fail-fast holds back record errors: the first 20 all refused with one cause (a 422 the
    user's request shape causes) stop the job unjournalled (exit 1); the fix resumes all."""
    ids = write_records(job["input"], 200)
    fault_server.default = status(422, message="unknown field 'x'")
    fault_server.check_action = ok()
    first = run(job, fault_server, "--concurrency", "8")
    assert first.returncode == 1
    (line,) = error_lines(first.stderr)
    assert "the first 20 records all failed" in line and "HTTP 422: unknown field" in line
    assert rows(job) == []
    assert sum(fault_server.requests.values()) < 40  # stopped, not burning the input
    fault_server.default = ok()
    second = run(job, fault_server, "--concurrency", "8")
    assert second.returncode == 0, second.stderr
    assert_exactly_once(job, ids)


def test_a_step_field_the_records_lack_stops_before_any_request_then_the_fix_runs(
    job, fault_server
):
    ids = write_records(job["input"], 50)
    job["pipeline"].write_text(ONE_STEP.replace("{text}", "{summary}"))
    proc = run(job, fault_server)
    assert proc.returncode == 2  # a pre-flight config error (issue 21)
    (line,) = error_lines(proc.stderr)
    assert "'summary'" in line and "nothing was sent" in line
    assert sum(fault_server.requests.values()) == 0 and rows(job) == []
    # the user fixes the pipeline: nothing had finished, so the job simply starts over
    job["pipeline"].write_text(ONE_STEP)
    fixed = run(job, fault_server)
    assert fixed.returncode == 0, fixed.stderr
    assert_exactly_once(job, ids)


def test_an_openai_batch_job_fails_fast_too_and_resumes(tmp_path, fault_server):
    inp, out = tmp_path / "batch.jsonl", tmp_path / "job"
    ids = openai_lines(inp, 60)
    fault_server.default = status(422)
    fault_server.check_action = ok()
    cmd = [sys.executable, "-m", "sparkops.cli", "batch", "run", "--input", str(inp),
           "--out", str(out), "--endpoint", fault_server.url, "--no-progress"]  # fmt: skip
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert first.returncode == 1 and "HTTP 422" in first.stderr
    assert_quiet(first.stdout, first.stderr)
    assert (out / "results.jsonl").read_text() == ""
    fault_server.default = ok()
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    got = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert Counter(r["custom_id"] for r in got) == Counter(ids)
    assert all(r["response"]["status_code"] == 200 for r in got)


def test_fail_fast_off_finishes_with_errors_and_names_the_commonest_cause(job, fault_server):
    ids = write_records(job["input"], 30)
    fault_server.default = status(422)
    fault_server.check_action = ok()
    for rid in ("r1", "r2"):
        fault_server.script(rid, status(400, message="bad request 17"))
    proc = run(job, fault_server, "--fail-fast", "0")
    assert proc.returncode == 3, proc.stderr
    assert "finished with 30 record error(s) of 30; commonest cause (28x): HTTP 422" in proc.stdout
    assert all(r["status"] == "error" for r in assert_exactly_once(job, ids).values())
    # a resume sends nothing and still says the job has errors
    again = run(job, fault_server, "--fail-fast", "0")
    assert again.returncode == 3 and "30 already finished, 0 calls" in again.stdout


def test_early_errors_with_different_causes_are_journalled_and_the_job_goes_on(job, fault_server):
    ids = write_records(job["input"], 40)
    for i, code in enumerate((400, 402, 413, 415, 422), 1):  # the records' own (not 401/403/404)
        fault_server.script(f"r{i}", status(code))
    proc = run(job, fault_server, "--concurrency", "1")
    assert proc.returncode == 3
    by_id = assert_exactly_once(job, ids)
    assert [by_id[f"r{i}"]["status"] for i in range(1, 7)] == ["error"] * 5 + ["done"]


def test_transient_failures_are_retried_and_permanent_ones_are_record_errors(job, fault_server):
    ids = write_records(job["input"], 20)
    fault_server.script("r3", status(503), status(500))
    fault_server.script("r4", drop())
    fault_server.script("r5", not_json())
    fault_server.script("r6", no_choices(), no_choices())
    fault_server.script("r7", status(429, retry_after=1.5))
    fault_server.script("r8", status(501))
    fault_server.script("r9", choice_not_object())
    proc = run(job, fault_server)
    assert proc.returncode == 3, proc.stderr
    by_id = assert_exactly_once(job, ids)
    requests = fault_server.requests
    assert [requests[f"r{i}"] for i in range(3, 10)] == [3, 2, 2, 3, 2, 1, 1]
    for rid in ("r3", "r4", "r5", "r6", "r7"):
        assert by_id[rid]["status"] == "done" and by_id[rid]["final"] == "no"
    assert by_id["r8"]["status"] == "error" and "HTTP 501" in by_id["r8"]["error"]
    assert by_id["r9"]["status"] == "error" and "malformed choice" in by_id["r9"]["error"]
    t = fault_server.arrivals["r7"]
    assert t[1] - t[0] >= 1.4  # Retry-After: 1.5, not the 0-0.5 s first backoff


def test_a_record_the_server_always_fails_gives_up_alone(job, fault_server):
    """The last record fails alone for --retry-for: that is its error (exit 3), not an
    outage that stops the job (a re-run would stop on it again, for ever)."""
    ids = write_records(job["input"], 30)
    fault_server.script("r30", *[status(500)] * 1000)
    fault_server.default = slow(0.05)
    proc = run(job, fault_server, "--retry-for", "2", "--concurrency", "2")
    assert proc.returncode == 3, proc.stderr
    by_id = assert_exactly_once(job, ids)
    assert by_id["r30"]["status"] == "error" and "gave up after" in by_id["r30"]["error"]
    assert sum(r["status"] == "done" for r in by_id.values()) == 29


def test_the_only_server_dies_the_job_stops_once_then_resumes(job, fault_server):
    ids = write_records(job["input"], 300)
    # 20 records answer, the rest are held until the server dies: it always dies mid-job
    fault_server.check_action = ok()
    fault_server.first(20, slow(0.05))
    fault_server.default = hang()
    proc = start(
        *batch_run(job, fault_server.openai_url, extra=("--retry-for", "2", "--concurrency", "4"))
    )
    try:
        wait_for(lambda: len(rows(job)) >= 20 or proc.poll() is not None, 120, "20 records")
        fault_server.stop()
        t_dead = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        waited = time.monotonic() - t_dead
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    # one job-level deadline (2 s), not 2 s per queued call (280 records / 4 x 2 s = 140 s):
    # the bound tells the two apart with room for a busy machine
    assert waited < 60
    (line,) = error_lines(stderr)
    assert "no endpoint has answered for 2 s" in line and "run the same command again" in line
    assert_quiet("", stderr)
    before = rows(job)
    assert 20 <= len(before) < 300 and all(r["status"] == "done" for r in before)
    fault_server.default = ok()
    fault_server.start()
    again = run(job, fault_server)
    assert again.returncode == 0, again.stderr
    assert_exactly_once(job, ids)


def test_a_hung_server_with_health_up_stops_the_job_within_the_deadline(job, fault_server):
    write_records(job["input"], 30)
    fault_server.stall()
    proc = run(job, fault_server, "--retry-for", "2", "--request-timeout", "1", limit=15)
    assert proc.returncode == 1
    assert "no endpoint has answered for 2 s" in proc.stderr and rows(job) == []


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_job_cancels_flushes_and_a_resume_completes_once(
    job, fault_server, signum, code
):
    ids = write_records(job["input"], 200)
    # 30 records answer, the rest are held: the signal always meets a running job with calls
    # in flight (which it must cancel: they never answer), however slow the machine
    fault_server.check_action = ok()
    fault_server.first(30, slow(0.05))
    fault_server.default = hang()
    proc = start(*batch_run(job, fault_server.openai_url, extra=("--concurrency", "16")))
    try:
        wait_for(lambda: len(rows(job)) >= 30 or proc.poll() is not None, 120, "30 records")
        assert proc.poll() is None, "the job ended although 170 records were held"
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, stderr
    assert_quiet(stdout, stderr)
    done = rows(job)
    (line,) = error_lines(stderr)
    assert line == "sparkops: interrupted: 30 done, 0 errors; run the same command again to resume"
    assert len(done) == 30 and len({r["id"] for r in done}) == 30
    runs = [json.loads(x) for x in (job["out"] / "runs.jsonl").read_text().splitlines()]
    assert runs[-1] == {**runs[-1], "event": "end", "stopped": "signal"}
    fault_server.default = ok()
    again = run(job, fault_server)
    assert again.returncode == 0, again.stderr
    assert f"{len(done)} already finished" in again.stdout
    assert_exactly_once(job, ids)


def test_a_hang_up_stops_with_the_line_how_to_resume_and_nohup_keeps_running(job, fault_server):
    """Issue 34 item 14: SIGHUP (a dropped ssh session) ended the job without a word. Now it
    stops like any signal (exit 1, resumable) with one line saying so; under nohup (SIGHUP
    ignored) the same hang-up changes nothing and the job finishes.

    The server answers the first records and holds every later one (`hang()`), so the job is
    still running when the hang-up comes however slow the machine is (CI once saw a job of
    200 quick records finish before the signal was sent)."""
    ids = write_records(job["input"], 200)
    fault_server.check_action = ok()
    fault_server.first(30, ok())
    fault_server.default = hang()
    argv = batch_run(job, fault_server.openai_url, extra=("--concurrency", "16"))

    def hangup_stops() -> None:  # a terminal's session, whatever this test runs under (nohup)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)

    t0 = time.monotonic()
    proc = start(*argv, preexec_fn=hangup_stops)
    wait_for(lambda: len(rows(job)) >= 30 or proc.poll() is not None, 120, "30 records")
    assert proc.poll() is None, "the job ended although 170 records were held"
    proc.send_signal(signal.SIGHUP)
    code, _, stderr = finish(proc, t0, 120)
    assert code == 1, stderr
    done = rows(job)
    assert len(done) == 30 and len({r["id"] for r in done}) == 30
    (line,) = error_lines(stderr)
    assert line == (
        "sparkops: error: stopped: the terminal hung up (SIGHUP: a dropped ssh session?); "
        "30 done, 0 errors; run the same command again to resume (under tmux, nohup "
        "or the job's systemd unit a dropped session does not stop it)"
    )

    def ignore_hangup() -> None:  # what nohup does before it starts the command
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    fault_server.first(10, ok())  # then held again
    t0 = time.monotonic()
    proc = start(*argv, preexec_fn=ignore_hangup)
    wait_for(lambda: len(rows(job)) >= 40 or proc.poll() is not None, 120, "10 more records")
    assert proc.poll() is None, "the resume ended although 160 records were held"
    proc.send_signal(signal.SIGHUP)
    fault_server.release()  # the held records answer: the job can only finish if it went on
    code, _, stderr = finish(proc, t0, 120)
    assert code == 0, stderr
    assert all(r["status"] == "done" for r in assert_exactly_once(job, ids).values())


def test_a_damaged_or_repeated_results_line_is_said_and_the_resume_keeps_each_record_once(
    job, fault_server
):
    """Issue 34 item 14: a garbage line and a repeated line in the middle of results.jsonl
    were kept without a word. Status, the resume and the report say which lines count no
    record; the resume sends the record whose only line was damaged, once, and no other."""
    ids = write_records(job["input"], 20)
    first = run(job, fault_server)
    assert first.returncode == 0, first.stderr
    path = job["out"] / "results.jsonl"
    text = path.read_text().splitlines(keepends=True)
    lost = json.loads(text[4])["id"]
    text[4] = "\x00\x00garbage from a disk fault\n"  # line 5: its record has no line now
    text.insert(9, text[7])  # line 10 repeats line 8
    path.write_text("".join(text))
    said = "line 5 is not a results line and line 10 is a record an earlier line already finished"
    status = sparkops("batch", "status", str(job["out"]), limit=30)
    assert said in status.stdout and "19 done" in status.stdout, status.stdout
    as_json = json.loads(sparkops("batch", "status", str(job["out"]), "--json", limit=30).stdout)
    assert (as_json["damaged_lines"], as_json["repeated_lines"], as_json["remaining"]) == (1, 1, 1)
    sent = sum(fault_server.requests.values())
    again = run(job, fault_server)
    assert again.returncode == 0, again.stderr
    (line,) = error_lines(again.stderr)
    assert line.startswith("sparkops: warning: results.jsonl: " + said)
    assert sum(fault_server.requests.values()) == sent + 1 and fault_server.requests[lost] == 2
    kept = [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]
    assert Counter(r["id"] for r in kept) == Counter(ids) + Counter([json.loads(text[7])["id"]])
    report = sparkops("report", str(job["out"]), limit=60)
    assert report.returncode == 0, report.stderr
    assert said in report.stdout
    data = json.loads((job["out"] / "report.json").read_text())
    assert (data["finished"], data["done"]) == (20, 20)
    assert (data["results_damaged_lines"], data["results_repeated_lines"]) == (1, 1)


def test_a_crash_is_one_line_and_the_traceback_goes_to_a_private_log(job, fault_server):
    ids = write_records(job["input"], 40)
    boom = (
        "import sys, sparkops.batch.engine as e\n"
        "orig = e.Engine._advance\n"
        "def advance(self, state, *rest):\n"
        "    if state.record.id == 'r25':\n"
        "        raise RuntimeError('bug')\n"
        "    return orig(self, state, *rest)\n"
        "e.Engine._advance = advance\n"
        "from sparkops.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    cmd = batch_run(job, fault_server.openai_url, extra=("--concurrency", "4"))
    proc = subprocess.run(
        [sys.executable, "-c", boom, *cmd[3:]], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert_quiet(proc.stdout, proc.stderr)
    (line,) = error_lines(proc.stderr)
    assert "internal error (RuntimeError)" in line and "crash.log" in line
    log = job["out"] / "crash.log"
    assert "RuntimeError: bug" in log.read_text()
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    assert "r25" not in {r["id"] for r in rows(job)}
    again = run(job, fault_server)
    assert again.returncode == 0, again.stderr
    assert_exactly_once(job, ids)


def test_a_signal_while_the_server_is_checked_is_one_line(job, fault_server):
    write_records(job["input"], 10)
    fault_server.override("/v1/models", hang())
    proc = start(*batch_run(job, fault_server.openai_url))
    try:
        deadline = time.monotonic() + 30
        while fault_server.paths["/v1/models"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert_quiet(stdout, stderr)
    assert error_lines(stderr) == [
        "sparkops: interrupted (SIGINT) before any record was sent; run the same command "
        "again to resume"
    ]
    assert sum(fault_server.requests.values()) == 0
