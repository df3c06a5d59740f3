"""Concurrency above the server's --max-num-seqs is flagged before the job (stderr, both
numbers) and in the report (the waiting requests it caused), from the stack record."""

from __future__ import annotations

import json
from pathlib import Path

from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import FaultServer, ok, write_records

WARNING = (
    "sparkops: warning: --concurrency 16 is above the server's --max-num-seqs 4: about 12 "
    "requests at a time wait in the server's queue instead of running (the report shows them "
    "as waiting requests); lower --concurrency to 4 or raise --max-num-seqs"
)


def stack_record(tmp_path: Path, seqs: int) -> Path:
    path = tmp_path / "stack-record.json"
    command = ["vllm", "serve", "/models/m", "--max-num-seqs", str(seqs), "--port", "8000"]
    path.write_text(json.dumps({"profile": "single", "host": "spark-1", "command": command}))
    return path


def test_concurrency_above_max_num_seqs_is_flagged_before_the_job_and_in_the_report(
    fault_server: FaultServer, job: dict[str, Path], tmp_path: Path
):
    write_records(job["input"], 48)
    fault_server.max_num_seqs = 4  # what the stack record says it was started with
    fault_server.default = ok(delay=0.4)
    record = stack_record(tmp_path, 4)
    extra = ("--concurrency", "16", "--stack-record", str(record))
    run = sparkops(*batch_run(job, fault_server.url, extra=extra), limit=120)
    assert run.returncode == 0, run.stderr
    assert WARNING in run.stderr.splitlines()
    start = json.loads((job["out"] / "serving.jsonl").read_text().splitlines()[0])
    assert start["capacity"] == {
        "max_num_seqs": 4, "concurrency": 16, "per_endpoint": 16, "over": True,
    }  # fmt: skip
    report = sparkops("report", str(job["out"]), "--json", limit=60)
    capacity = json.loads(report.stdout)["serving"]["capacity"]
    assert capacity["over"] is True
    assert capacity["waiting_peak"] >= 8  # 16 in flight, 4 run: the others waited
    text = (job["out"] / "report.md").read_text()
    assert "**--concurrency 16 was above the server's --max-num-seqs 4**" in text
    assert f"peak {capacity['waiting_peak']:,.0f}" in text


def test_concurrency_within_max_num_seqs_says_nothing_before_the_job(
    fault_server: FaultServer, job: dict[str, Path], tmp_path: Path
):
    write_records(job["input"], 4)
    extra = ("--concurrency", "4", "--stack-record", str(stack_record(tmp_path, 8)))
    run = sparkops(*batch_run(job, fault_server.url, extra=extra), limit=120)
    assert run.returncode == 0, run.stderr
    assert "max-num-seqs" not in run.stderr
    sparkops("report", str(job["out"]), limit=60, check=True)
    assert (
        "- Capacity: --concurrency 4 within the server's --max-num-seqs 8"
        in (job["out"] / "report.md").read_text()
    )
