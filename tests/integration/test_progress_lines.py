"""Off a terminal (journald under `systemctl`, a pipe) a running job says how far it got:
one status line per --status-interval on stderr, never record text."""

from __future__ import annotations

import re
from pathlib import Path

from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import FaultServer, ok, status, write_records

LINE = re.compile(
    r"sparkops: (\d+)/20 finished: (\d+) done, (\d+) errors, (\d+) in flight; "
    r"(?:- |[\d,]+ )records/min; (?:hit -|prefix cache hit [\d.]+%); ETA (?:-|[\d:]+)"
)


def test_a_job_off_a_terminal_prints_a_status_line_per_interval(
    fault_server: FaultServer, job: dict[str, Path]
):
    write_records(job["input"], 20)
    fault_server.default = ok(delay=0.25)  # 20 records, 2 at a time: about 2.5 s
    fault_server.script("r7", *[status(400, message="too long")] * 8)
    argv = batch_run(
        job,
        fault_server.url,
        progress=True,  # stderr is a pipe here, as under systemd: status lines, not a bar
        extra=("--concurrency", "2", "--status-interval", "0.5", "--fail-fast", "0"),
    )
    run = sparkops(*argv, limit=120)
    assert run.returncode == 3, run.stderr
    found = [LINE.fullmatch(line) for line in run.stderr.splitlines()]
    statuses = [m for m in found if m]
    assert len(statuses) >= 3, run.stderr  # several while running, one at the end
    finished = [int(m.group(1)) for m in statuses]
    assert finished == sorted(finished)
    last = statuses[-1]
    assert (last.group(1), last.group(2), last.group(3), last.group(4)) == ("20", "19", "1", "0")
    # no record text, no id, no rich control characters in what the journal gets
    assert "note" not in run.stderr and "[id:" not in run.stderr and "r7" not in run.stderr
    assert "\x1b" not in run.stderr


def test_no_progress_means_no_status_lines(fault_server: FaultServer, job: dict[str, Path]):
    write_records(job["input"], 4)
    run = sparkops(*batch_run(job, fault_server.url, extra=("--status-interval", "0.1")), limit=60)
    assert run.returncode == 0, run.stderr
    assert "finished:" not in run.stderr
