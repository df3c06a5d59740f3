"""The serving record end to end: `sparkops batch run` subprocesses against the fault server,
whose identity (model, max length, vLLM version, cache block size) is switched mid-job.

Asserted as a user would: the exit status, the one stderr line, serving.jsonl and the
boundary in results.jsonl, `sparkops report` and `sparkops compare`, every record exactly
once after a resume, no traceback, bounded time, and no record text in the serving record.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.plugins.fault_server import NOISE, FaultServer, hang, ok, write_records
from tests.plugins.inventories import make_inventory

pytestmark = pytest.mark.integration

N = 80


def command(job: dict[str, Path], server: FaultServer, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "sparkops.cli", "batch", "run", "--pipeline", str(job["pipeline"]),
        "--input", str(job["input"]), "--out", str(job["out"]), "--endpoint", server.url,
        "--no-progress", "--sample-interval", "0.2", "--concurrency", "2", *extra,
    ]  # fmt: skip


def clean(proc_out: str) -> None:
    for noise in NOISE:
        assert noise not in proc_out, proc_out


def sparkops(*args: str, limit: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "sparkops.cli", *args], capture_output=True, text=True, timeout=limit
    )
    clean(proc.stdout + proc.stderr)
    return proc


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _compact(path: Path) -> str:
    """A file being appended to, whitespace dropped (a torn last line is no error here)."""
    return "".join(path.read_text().split()) if path.exists() else ""


def run_switching(job, server: FaultServer, *extra: str, after: int = 15, **identity):
    """Run a job; once `after` records are finished, switch the server's identity.

    The server answers `after` records and holds the rest (`hang()`) until the job has
    logged the change (or stopped for it), then lets them answer: the switch always lands
    mid-job, however slow the machine (a job of quick answers could otherwise end first)."""
    answer = server.default
    server.check_action = answer
    server.first(after, answer)
    server.default = hang()
    proc = subprocess.Popen(
        command(job, server, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    changed = job["out"] / "serving.jsonl"
    try:
        deadline = time.monotonic() + 120
        while len(lines(job["out"] / "results.jsonl")) < after:
            assert time.monotonic() < deadline and proc.poll() is None, proc.poll()
            time.sleep(0.02)
        server.set_identity(**identity)
        while proc.poll() is None and '"event":"change"' not in _compact(changed):
            assert time.monotonic() < deadline, "the change was not logged"
            time.sleep(0.02)
        server.default = answer
        server.release()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    clean(stdout + stderr)
    return proc.returncode, stdout, stderr


@pytest.fixture
def slow_server(fault_server: FaultServer) -> FaultServer:
    """Each answer takes 50 ms: with --concurrency 2 a job of N records lasts about 2 s."""
    fault_server.default = ok(delay=0.05)
    return fault_server


def test_a_model_switch_mid_job_is_said_recorded_marked_and_reported(job, slow_server):
    write_records(job["input"], N)
    code, _, stderr = run_switching(
        job, slow_server, model="tiny-2", max_model_len=2048, block_size=32
    )
    assert code == 0, stderr
    warnings = [x for x in stderr.splitlines() if "changed what it serves" in x]
    assert len(warnings) == 1, stderr
    assert warnings[0].startswith(f"sparkops: warning: endpoint {slow_server.url} changed")
    assert "model tiny -> tiny-2, max_model_len 4096 -> 2048" in warnings[0]
    assert "cache.block_size 16 -> 32" in warnings[0]

    record = lines(job["out"] / "serving.jsonl")
    assert stat.S_IMODE(os.stat(job["out"] / "serving.jsonl").st_mode) == 0o600
    # the answers name the new model too: said once, as answers from another model
    (other,) = [r for r in record if r["event"] == "other-model"]
    assert other["model"] == "tiny-2" and other["expected"] == "tiny"
    start, change = [r for r in record if r["event"] != "other-model"]
    assert start["event"] == "start" and start["serving"] == 0
    ident = start["endpoints"][slow_server.url]
    assert ident["version"] == "0.0.0+fault" and ident["model"] == "tiny"
    assert ident["max_model_len"] == "4096" and ident["cache.block_size"] == "16"
    assert ident["cache.prefix_caching_hash_algo"] == "sha256"
    assert start["kit_version"] and len(start["input_fingerprint"]) > 8
    assert "unavailable" in start["gpu"] or "state" in start["gpu"]  # never a failure
    assert change["event"] == "change" and change["serving"] == 1
    assert {c["field"] for c in change["changes"]} == {
        "model",
        "root",
        "max_model_len",
        "cache.block_size",
    }
    # the boundary: results lines before `results_from` were finished under the first setup
    results = lines(job["out"] / "results.jsonl")
    assert Counter(r["id"] for r in results) == Counter(f"r{i}" for i in range(1, N + 1))
    cut = change["results_from"]
    assert 15 <= cut < N
    assert {r["serving"] for r in results[:cut]} == {0}
    assert {r["serving"] for r in results[cut:]} == {1}
    # records are patient data: none of their text or ids is in the serving record
    text = (job["out"] / "serving.jsonl").read_text()
    assert "note" not in text and '"r1"' not in text

    report = sparkops("report", str(job["out"]))
    assert report.returncode == 0, report.stderr
    assert "## Serving record" in report.stdout
    assert "The serving setup changed 1 time(s) during the job" in report.stdout
    assert f"{N - cut:,} record(s) finished after it" in report.stdout
    assert "| model | tiny |" in report.stdout and "| version | 0.0.0+fault |" in report.stdout
    summary = json.loads((job["out"] / "report.json").read_text())["serving"]
    assert summary["records_by_serving"] == {"0": cut, "1": N - cut}


def test_strict_serving_stops_with_one_line_refuses_a_changed_server_and_resumes(job, slow_server):
    write_records(job["input"], N)
    code, _, stderr = run_switching(job, slow_server, "--strict-serving", version="0.99.0")
    assert code == 1, stderr
    errors = [x for x in stderr.splitlines() if x.startswith("sparkops:")]
    assert errors == [
        f"sparkops: warning: endpoint {slow_server.url} changed what it serves: version "
        "0.0.0+fault -> 0.99.0; records finished from now on are marked serving=1 (see "
        "serving.jsonl)",
        f"sparkops: error: stopped: --strict-serving: endpoint {slow_server.url} changed during "
        "the job: version 0.0.0+fault -> 0.99.0; finished records are kept: restore the server "
        "it started with and run the same command to resume, or run without --strict-serving "
        "to accept the change (the boundary is recorded in serving.jsonl)",
    ]
    finished = len(lines(job["out"] / "results.jsonl"))
    assert 15 <= finished < N

    # still changed: refused before any request
    sent = sum(slow_server.requests.values())
    again = sparkops(*command(job, slow_server, "--strict-serving")[3:])
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"sparkops: error: --strict-serving: endpoint {slow_server.url} changed since the job "
        "started: version 0.0.0+fault -> 0.99.0; finished records are kept: restore the server "
        "it started with and run the same command to resume, or run without --strict-serving "
        "to accept the change (the boundary is recorded in serving.jsonl)"
    ]
    assert sum(slow_server.requests.values()) == sent

    # the server it started with is back: the job resumes and finishes every record once
    slow_server.set_identity(version="0.0.0+fault")
    done = sparkops(*command(job, slow_server, "--strict-serving")[3:])
    assert done.returncode == 0, done.stderr
    results = lines(job["out"] / "results.jsonl")
    assert Counter(r["id"] for r in results) == Counter(f"r{i}" for i in range(1, N + 1))
    record = lines(job["out"] / "serving.jsonl")
    assert [x["event"] for x in record] == ["start", "change", "start"]
    assert record[2]["changes"][slow_server.url] == [
        {"field": "version", "before": "0.99.0", "after": "0.0.0+fault"}
    ]
    assert {r["serving"] for r in results[finished:]} == {2}


def test_compare_prints_what_differed_between_two_runs_serving_setups(
    job, tmp_path, fault_server_factory
):
    write_records(job["input"], 12)
    a, b = fault_server_factory(), fault_server_factory()
    b.set_identity(model="tiny", max_model_len=8192, version="0.12.0")
    b.content = "yes"
    outs = []
    for name, server in (("a", a), ("b", b)):
        out = tmp_path / name
        proc = sparkops(*command({**job, "out": out}, server)[3:])
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    proc = sparkops("compare", str(outs[0]), str(outs[1]))
    assert proc.returncode == 0, proc.stderr
    assert "Serving setup: what differed (2 field(s))" in proc.stdout
    assert "max_model_len" in proc.stdout and "8192" in proc.stdout
    assert "0.0.0+fault" in proc.stdout and "0.12.0" in proc.stdout
    assert "Changed decisions" in proc.stdout
    data = json.loads(sparkops("compare", str(outs[0]), str(outs[1]), "--json").stdout)
    assert data["serving"]["differences"] == [
        {"field": "max_model_len", "before": "4096", "after": "8192"},
        {"field": "version", "before": "0.0.0+fault", "after": "0.12.0"},
    ]
    assert data["serving"]["changed_during"] == {"a": 0, "b": 0}


def test_a_server_restarted_with_another_model_during_an_outage_is_caught_when_it_returns(
    job, slow_server
):
    write_records(job["input"], N)
    # 15 records answer, the rest are held until the outage: it always comes mid-job
    answer = slow_server.default
    slow_server.check_action = answer
    slow_server.first(15, answer)
    slow_server.default = hang()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        command(job, slow_server), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        while len(lines(job["out"] / "results.jsonl")) < 15:
            assert time.monotonic() - t0 < 120 and proc.poll() is None
            time.sleep(0.02)
        slow_server.stop()  # connections refused: calls are retried
        slow_server.set_identity(model="tiny-fp8")
        slow_server.default = answer
        time.sleep(1.0)  # the outage lasts a while (not a wait for anything)
        slow_server.start()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    clean(stdout + stderr)
    assert proc.returncode == 0, stderr
    assert "model tiny -> tiny-fp8" in stderr
    changes = [x for x in lines(job["out"] / "serving.jsonl") if x["event"] == "change"]
    assert len(changes) == 1 and changes[0]["changes"][0]["field"] == "model"
    results = lines(job["out"] / "results.jsonl")
    assert Counter(r["id"] for r in results) == Counter(f"r{i}" for i in range(1, N + 1))


def test_stack_record_from_the_render_is_kept_and_a_missing_one_is_a_usage_error(
    job, fault_server, tmp_path
):
    write_records(job["input"], 6)
    rendered = tmp_path / "rendered"
    inv = make_inventory(tmp_path / "inv", "single")
    assert sparkops("render", "--inventory", str(inv), "--out", str(rendered)).returncode == 0
    record = rendered / "spark-1" / "stack-record.json"
    missing = sparkops(*command(job, fault_server, "--stack-record", str(tmp_path / "nope"))[3:])
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"sparkops: error: --stack-record {tmp_path / 'nope'} does not exist; pass the "
        "stack-record.json the deploy wrote next to compose.yml (readable by the job's user), "
        "or leave the option out"
    ]
    assert sum(fault_server.requests.values()) == 0 and not job["out"].exists()
    proc = sparkops(*command(job, fault_server, "--stack-record", str(record))[3:])
    assert proc.returncode == 0, proc.stderr
    (start,) = lines(job["out"] / "serving.jsonl")
    assert start["stack"] == json.loads(record.read_text())
    report = sparkops("report", str(job["out"]))
    assert f"- Stack: profile {start['stack']['profile']}, image {start['stack']['image']}" in (
        report.stdout
    )
