"""Decisions the model did not make (issue 37 items 1, 3, 4): `sparkops batch run` as a
subprocess against servers and routers that pass the start-up probe and then stop holding the
constraint, drop it for a share of calls, answer the probe 503, or abort answers mid-way.

Every test asserts the outcome: the exit status, the lines a user reads, and that no answer
outside a step's allowed forms (nor an unfinished one) is ever journalled as a decision.
The model here writes free text unless its request holds it to choices
(`fault_server.held_or_free`), so a dropped constraint shows exactly as it would with vLLM.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.test_batch_faults import assert_exactly_once, error_lines, rows, run
from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import held_or_free, status, unfinished, write_records

pytestmark = pytest.mark.integration

NOT_YES = "The answer is not yes."


def _allowed(row: dict) -> bool:
    return all(step["raw"] in ("yes", "Yes", "YES", "no", "No", "NO") for step in row["steps"])


def _runs(job) -> list[dict]:
    return [json.loads(x) for x in (job["out"] / "runs.jsonl").read_text().splitlines()]


def test_a_server_that_stops_holding_the_constraint_mid_job_stops_it_and_decides_nothing(
    job, fault_server, rewriting_proxy
):
    """Item 1: held for the probe and the first calls, then the field is dropped on every call
    (a server restarted without its grammar back end): 'The answer is not yes.' is never
    journalled as yes; the job stops (exit 1) naming the endpoint, and resumes once fixed."""
    ids = write_records(job["input"], 300)
    fault_server.content = held_or_free(NOT_YES, held=lambda key: "yes")
    proxy = rewriting_proxy(fault_server.url)
    proxy.drop_fields, proxy.drop_after = ("structured_outputs",), 40  # probe and check first
    proc = sparkops(*batch_run(job, proxy.openai_url), limit=60)
    assert proc.returncode == 1, proc.stderr
    warning, stop = error_lines(proc.stderr)
    assert "did not hold the structured-output constraint" in warning
    assert "never taken as a decision" in warning and proxy.url in warning
    assert stop.startswith(f"sparkops: error: stopped: {proxy.url}")
    assert "stopped holding the structured-output constraint" in stop
    assert "run the same command again to resume" in stop
    kept = rows(job)
    assert kept and len(kept) < 40 and all(r["status"] == "done" for r in kept)
    assert all(_allowed(r) and r["final"] == "yes" for r in kept), kept
    (end,) = [e for e in _runs(job) if e["event"] == "end"]
    assert end["stopped"] == "unheld" and sum(end["unheld"].values()) >= 20
    proxy.drop_fields = ()  # the server is fixed: the resume sends every unfinished record
    again = sparkops(*batch_run(job, proxy.openai_url), limit=60)
    assert again.returncode == 0, again.stderr
    by_id = assert_exactly_once(job, ids)
    assert all(_allowed(r) and r["final"] == "yes" for r in by_id.values())


def test_a_router_that_strips_the_constraint_from_a_share_of_calls_costs_retries_only(
    job, fault_server, rewriting_proxy
):
    """Item 1: one call in ten loses the field ('I cannot say yes.'); each is sent again, the
    job completes with only held answers, says so once, and counts them in its run line."""
    ids = write_records(job["input"], 200)
    fault_server.content = held_or_free("I cannot say yes.", held=lambda key: "yes")
    proxy = rewriting_proxy(fault_server.url)
    proxy.drop_fields, proxy.drop_every = ("structured_outputs",), 10
    proc = sparkops(*batch_run(job, proxy.openai_url), limit=60)
    assert proc.returncode == 0, proc.stderr
    (warning,) = [x for x in error_lines(proc.stderr) if "warning" in x]
    assert "did not hold the structured-output constraint" in warning
    by_id = assert_exactly_once(job, ids)
    assert all(_allowed(r) and r["final"] == "yes" for r in by_id.values())
    sent_again = sum(fault_server.requests.values()) - len(ids)
    (end,) = [e for e in _runs(job) if e["event"] == "end"]
    assert sent_again >= 10 and sum(end["unheld"].values()) == sent_again
    status = sparkops("batch", "status", str(job["out"]), limit=30)
    assert f"{sent_again:,} answer(s) from " in status.stdout
    assert "outside their step's allowed answers" in status.stdout
    said = json.loads(sparkops("batch", "status", str(job["out"]), "--json", limit=30).stdout)
    assert sum(said["unheld_answers"].values()) == sent_again


def test_a_probe_answered_503_once_is_asked_again(job, fault_server):
    """Item 3: one 5xx at the start-up probe does not switch the check off."""
    ids = write_records(job["input"], 50)
    fault_server.content = held_or_free("I would not say yes.", held=lambda key: "no")
    fault_server.probe_first = [status(503)]
    proc = run(job, fault_server)
    assert proc.returncode == 0, proc.stderr
    assert fault_server.probes == 2 and error_lines(proc.stderr) == []
    by_id = assert_exactly_once(job, ids)
    assert {r["final"] for r in by_id.values()} == {"no"}


def test_a_probe_that_never_tells_is_said_and_every_answer_is_still_checked(job, fault_server):
    """Item 3: the probe answers 503 every time and the server ignores the constraint: the job
    says the probe could not tell, then stops on the first answers; nothing is decided."""
    write_records(job["input"], 100)
    fault_server.content = "I would not say yes."
    fault_server.probe_action = status(503)
    proc = run(job, fault_server, limit=90)
    assert proc.returncode == 1, proc.stderr
    probe, warning, stop = error_lines(proc.stderr)
    assert "gave no answer that tells whether it holds" in probe and "3 tries" in probe
    assert "HTTP 503" in probe and "every answer is checked" in probe
    assert "did not hold the structured-output constraint" in warning
    assert "stopped holding the structured-output constraint" in stop
    assert rows(job) == []


def test_aborted_and_unfinished_answers_are_sent_again_never_decisions(job, fault_server):
    """Item 4: finish_reason "abort" or none, with an empty or a partial answer, is no answer:
    those records are sent again and take the model's finished answer."""
    ids = write_records(job["input"], 100)
    fault_server.content = "no"
    broken = {
        "r1": unfinished("yes"),
        "r2": unfinished(""),
        "r3": unfinished("ye", None),
        "r4": unfinished(None, None),
        "r5": unfinished("yes", None),
    }
    for i in range(1, 26):
        fault_server.script(f"r{i}", broken[f"r{(i - 1) % 5 + 1}"])
    proc = run(job, fault_server)
    assert proc.returncode == 0, proc.stderr
    by_id = assert_exactly_once(job, ids)
    assert all(r["final"] == "no" and r["status"] == "done" for r in by_id.values())
    assert all(fault_server.requests[f"r{i}"] == 2 for i in range(1, 26))
    assert all(fault_server.requests[f"r{i}"] == 1 for i in range(26, 101))
    assert {s["finish_reason"] for r in by_id.values() for s in r["steps"]} == {"stop"}
