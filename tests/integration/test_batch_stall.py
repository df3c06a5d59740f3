"""A stalled endpoint (calls accepted, nothing advances, /health still 200) is detected and
routed around: `sparkops batch run` as a subprocess.

First against the fault server's stall mode (fast: the decision rules at the I/O edge), then
the acceptance case against two real vLLM-CPU replicas, one with its engine-core process
stopped by SIGSTOP while its API server keeps answering /health.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from sparkops.samples import sample_paths
from tests.plugins import cli
from tests.plugins.cli import batch_run, finish, sparkops, wait_for
from tests.plugins.fault_server import hang, ok, write_records

pytestmark = pytest.mark.integration


def start(job, urls, *extra) -> subprocess.Popen:
    """`sparkops batch run` for ``job`` over ``urls``, its progress line on (as a user sees)."""
    return cli.start(*batch_run(job, *urls, extra=extra, progress=True))


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def events(job, kind: str) -> list[dict]:
    return [e for e in lines(job["out"] / "runs.jsonl") if e.get("event") == kind]


def assert_exactly_once(job, ids: list[str]) -> None:
    got = lines(job["out"] / "results.jsonl")
    assert Counter(r["id"] for r in got) == Counter(ids)
    assert all(r["status"] == "done" for r in got)


def sparkops_report(out: Path) -> dict:
    proc = sparkops("report", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "report.json").read_text())


# ---- fault server: the rules at the I/O edge ----------------------------------------------


def test_an_endpoint_that_stalls_mid_job_is_routed_around_exactly_once(job, fault_server_factory):
    a, b = fault_server_factory(), fault_server_factory()
    b.default = ok(delay=0.05)
    # a answers 10 records, then holds every call it gets: the job cannot end until the stall
    # is caught and a's calls go to b, however fast b is and however slow the machine
    a.check_action = ok()
    a.first(10, ok(delay=0.05))
    a.default = hang()
    ids = write_records(job["input"], 160)
    t0 = time.monotonic()
    proc = start(job, [a.openai_url, b.openai_url], "--concurrency", "8", "--stall-after", "2")
    wait_for(lambda: len(lines(job["out"] / "results.jsonl")) >= 20, 60, "20 records")
    a.stall()  # and its /metrics stop moving, as vLLM's do when its engine hangs
    with urllib.request.urlopen(a.url + "/health", timeout=5) as resp:  # still "healthy"
        assert resp.status == 200
    code, _, err = finish(proc, t0, 60)
    assert code == 0, err
    assert_exactly_once(job, ids)
    (ev,) = events(job, "stalled")
    assert ev["endpoint"] == a.url and ev["in_flight"] >= 1 and ev["quiet_s"] >= 2
    assert ev["t"] - time.time() < 0  # logged with the wall clock
    # its in-flight calls were cancelled and answered by b: every id answered once overall
    assert sum(a.answered.values()) + sum(b.answered.values()) == len(ids)
    assert f"endpoint {a.url} stalled" in err  # the progress stream says so (stderr)
    report = sparkops_report(job["out"])
    (row,) = report["stalled_endpoints"]
    assert row["endpoint"] == a.url and row["rerouted"] == ev["in_flight"]
    md = (job["out"] / "report.md").read_text()
    assert f"Endpoint {a.url} stalled in run 1" in md


def test_a_stalled_endpoint_is_probed_and_rejoins_when_it_answers_again(job, fault_server_factory):
    a, b = fault_server_factory(), fault_server_factory()
    for s in (a, b):
        s.default = ok(delay=0.1)
    ids = write_records(job["input"], 240)
    t0 = time.monotonic()
    proc = start(job, [a.openai_url, b.openai_url], "--concurrency", "4", "--stall-after", "1.5")
    wait_for(lambda: len(lines(job["out"] / "results.jsonl")) >= 10, 60, "10 records")
    a.stall()
    wait_for(lambda: events(job, "stalled"), 30, "the stall to be logged")
    before = sum(a.answered.values())
    # close the held calls without an answer (the client already cancelled them), then
    # serve again: only the probe can show progress now, its counters stay still until then
    a.stop()
    a.start()
    a.unstall()
    wait_for(lambda: events(job, "rejoined"), 30, "the endpoint to rejoin")
    code, _, err = finish(proc, t0, 90)
    assert code == 0, err
    assert_exactly_once(job, ids)
    (rejoined,) = events(job, "rejoined")
    assert rejoined["endpoint"] == a.url and rejoined["how"] == "answer"  # the probe's
    assert sum(a.answered.values()) > before + 5  # it took calls again after rejoining
    report = sparkops_report(job["out"])
    (row,) = report["stalled_endpoints"]
    assert row["rejoined_after_s"] is not None and row["rejoined_after_s"] > 0


def test_with_every_endpoint_stalled_the_job_stops_with_one_line_and_resumes(job, fault_server):
    # 10 records answer, then every call is held: the job is still running when the server
    # stalls, however slow the machine (120 quick records could otherwise all be done)
    fault_server.check_action = ok()
    fault_server.first(10, ok(delay=0.02))
    fault_server.default = hang()
    ids = write_records(job["input"], 120)
    t0 = time.monotonic()
    proc = start(job, [fault_server.openai_url], "--concurrency", "4", "--stall-after", "2")
    wait_for(lambda: len(lines(job["out"] / "results.jsonl")) >= 10, 60, "10 records")
    fault_server.stall()
    code, _, err = finish(proc, t0, 45)
    assert code == 1, err
    (line,) = [x for x in err.splitlines() if x.startswith("sparkops: error:")]
    assert line.startswith("sparkops: error: stopped: every endpoint stalled")
    assert fault_server.url in line and "run the same command again to resume" in line
    done = {r["id"] for r in lines(job["out"] / "results.jsonl")}
    assert 10 <= len(done) < len(ids)
    (end,) = events(job, "end")
    assert end["stopped"] == "stalled"
    # the server comes back: the same command finishes the rest, each record exactly once
    fault_server.default = ok(delay=0.02)
    fault_server.release()
    fault_server.unstall()
    t1 = time.monotonic()
    again = start(job, [fault_server.openai_url], "--concurrency", "4", "--stall-after", "2")
    code, out, err = finish(again, t1, 60)
    assert code == 0, err
    assert f"{len(done)} already finished" in out
    assert_exactly_once(job, ids)


def test_a_bad_stall_after_is_a_usage_error(job, fault_server):
    write_records(job["input"], 3)
    for bad in ("-1", "nan"):
        proc = sparkops(
            *batch_run(job, fault_server.openai_url, extra=("--stall-after", bad), progress=True),
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "--stall-after" in proc.stderr and "Traceback" not in proc.stderr
        assert sum(fault_server.requests.values()) == 0


# ---- real vLLM-CPU: two replicas, one engine stopped with SIGSTOP --------------------------


def descendants(pid: int) -> list[int]:
    """Every process below pid (from /proc/<pid>/task/*/children), depth first."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += [int(child), *descendants(int(child))]
    return found


def engine_processes(server_pid: int) -> list[int]:
    """The replica's EngineCore process (vLLM V1 runs it as a child of the API server, titled
    VLLM::EngineCore) and everything below it (its worker): what a hung engine stops."""
    for pid in descendants(server_pid):
        with contextlib.suppress(OSError):
            if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return [pid, *descendants(pid)]
    raise AssertionError(f"no VLLM::EngineCore process below the API server (pid {server_pid})")


def test_real_vllm_replica_with_its_engine_stopped_is_routed_around(extra_vllm_server, tmp_path):
    """The acceptance case: /health of the stopped replica still answers 200, the job
    finishes on the other replica with every record exactly once, exit 0, and the job log
    and the report name the stalled endpoint."""
    hung, healthy = extra_vllm_server(replicas=2)
    pipeline, notes = sample_paths()
    tag = f"stall-{os.getpid()}-{time.time_ns()}"  # nothing cached from another test
    inp = tmp_path / "notes.jsonl"
    with inp.open("w") as fh:
        for row in [json.loads(x) for x in notes.read_text().splitlines()][:48]:
            fh.write(json.dumps({**row, "text": f"[{tag}] {row['text']}"}) + "\n")
    ids = [json.loads(x)["id"] for x in inp.read_text().splitlines()]
    job = {"pipeline": pipeline, "input": inp, "out": tmp_path / "job"}
    stopped: list[int] = []
    t0 = time.monotonic()
    proc = start(
        job,
        [hung.openai_url, healthy.openai_url],
        "--concurrency", "8", "--stall-after", "20", "--sample-interval", "1",
    )  # fmt: skip
    try:
        wait_for(lambda: len(lines(job["out"] / "results.jsonl")) >= 6, 600, "6 records")
        assert proc.poll() is None, "the job ended before the engine could be stopped"
        stopped = engine_processes(hung.pid)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        stop_wall = time.time()
        # vLLM's /health keeps answering 200 while its engine is stopped: no health check
        # would take this replica out of rotation
        time.sleep(2)
        with urllib.request.urlopen(hung.base_url + "/health", timeout=10) as resp:
            assert resp.status == 200
        code, _, err = finish(proc, t0, 900)
        assert code == 0, err
        assert_exactly_once(job, ids)
        (ev,) = events(job, "stalled")
        assert ev["endpoint"] == hung.base_url and ev["in_flight"] >= 1
        assert ev["quiet_s"] >= 20  # never before the threshold
        assert f"endpoint {hung.base_url} stalled" in err
        assert not events(job, "rejoined")  # its engine never moved again
        # detected in bounded time (threshold + sample interval + check
        # period is about 30 s; the bound leaves room for a busy 2-core machine)
        assert ev["t"] - stop_wall < 180, ev
        report = sparkops_report(job["out"])
        (row,) = report["stalled_endpoints"]
        assert row["endpoint"] == hung.base_url and row["rejoined_after_s"] is None
        assert report["done"] == len(ids) and report["errors"] == 0
        md = (job["out"] / "report.md").read_text()
        assert f"Endpoint {hung.base_url} stalled in run 1" in md
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
