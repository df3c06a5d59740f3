"""What `batch status` and `batch units` say about a job's unit (sparkops.jobunit.state):
systemd's own properties, as `systemctl show` prints them, read into one sentence per case."""

from __future__ import annotations

import json
from pathlib import Path

from sparkops.jobunit.state import (
    job_units,
    last_stop_kind,
    parse_show,
    unit_for_dir,
    unit_state,
)
from sparkops.jobunit.unit import parse_spec, render_unit

UNIT = "sparkops-batch-triage.service"


def state(active: str, sub: str, code: int = 0, status: int = 0, restarts: int = 0, kind=None):
    show = parse_show(
        f"ActiveState={active}\nSubState={sub}\nResult=success\nNRestarts={restarts}\n"
        f"ExecMainCode={code}\nExecMainStatus={status}\nUnitFileState=enabled\n"
    )
    return unit_state(UNIT, show, kind)


def test_each_state_and_last_stop_in_one_sentence() -> None:
    assert state("active", "running").why() == f"unit {UNIT}: running"
    assert (
        "waiting for the serving stack to answer a chat completion"
        in state("activating", "start-pre").why()
    )
    waiting = state("activating", "auto-restart", 1, 1, restarts=2, kind="stalled").why()
    assert "waiting to restart after exit 1 (stopped part-way, resumable, stalled)" in waiting
    assert "restarted 2 time(s)" in waiting
    config = state("failed", "failed", 1, 2).why()
    assert "failed: exit 2 (a usage or configuration error)" in config
    assert f"journalctl -u {UNIT}" in config and "budget" not in config
    spent = state("failed", "failed", 1, 1, restarts=5).why()
    assert "the restart budget is spent after exit 1" in spent and "run batch.yml again" in spent
    never = state("failed", "failed", 0, 0, restarts=3).why()
    assert "spent after the serving stack never answered" in never
    killed = state("failed", "failed", 2, 9, restarts=5).why()
    assert "spent after killed by SIGKILL" in killed
    errors = state("inactive", "dead", 1, 3).why()
    assert "finished with record errors" in errors and "--retry-errors" in errors
    assert state("inactive", "dead", 1, 0).why() == f"unit {UNIT}: finished"
    stopped = state("inactive", "dead", 1, 143).why()
    assert stopped.endswith("stopped: exit 143 (stopped by SIGTERM: systemctl stop or a shutdown)")
    fresh = state("inactive", "dead").as_dict()
    assert fresh["why"] == f"unit {UNIT}: inactive (dead)" and fresh["last_exit"] == ""
    # after a boot systemd has forgotten the exit; the job folder says how it ended
    show = parse_show("ActiveState=inactive\nSubState=dead\nExecMainCode=0\n")
    done = unit_state(UNIT, show, folder="done").why()
    assert done.startswith(f"unit {UNIT}: finished (the job folder says so")
    errors = unit_state(UNIT, show, folder="errors").why()
    assert "finished with record errors (the job folder says so)" in errors
    assert "--retry-errors" in errors


def test_the_unit_of_a_job_folder_is_found_from_the_unit_files(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    out = tmp_path / "job out"
    out.mkdir()
    spec = parse_spec({
        "name": "triage", "user": "r", "out": str(out), "command": "/bin/sparkops",
        "run_argv": ["/bin/sparkops", "batch", "run"], "endpoints": ["http://h:8000"],
    })  # fmt: skip
    (units / UNIT).write_text(render_unit(spec))
    (units / "sparkops-batch-other.service").write_text("[Unit]\nDescription=not ours\n")
    (units / "unrelated.service").write_text(render_unit(spec))  # not a job unit's name
    (found,) = job_units(units)
    assert (found.name, found.unit, found.out) == ("triage", UNIT, out)
    assert unit_for_dir(tmp_path / "job out" / ".." / "job out", units) == found
    assert unit_for_dir(tmp_path, units) is None


def test_why_the_client_last_stopped_comes_from_its_job_log(tmp_path: Path) -> None:
    assert last_stop_kind(tmp_path) is None  # no runs.jsonl yet
    events = [
        {"event": "start", "run": 1, "t": 1.0},
        {"event": "end", "run": 1, "t": 2.0, "stopped": "stalled"},
        {"event": "start", "run": 2, "t": 3.0},
    ]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert last_stop_kind(tmp_path) == "stalled"
    with (tmp_path / "runs.jsonl").open("a") as fh:
        fh.write(json.dumps({"event": "end", "run": 2, "t": 4.0}) + "\n")
    assert last_stop_kind(tmp_path) is None  # the last run ended without stopping early
