"""A job's newest status line, read back from its unit's journal (sparkops.jobunit.progress):
what `sparkops batch units --json` adds per job and status.yml prints from the controller.

The journal text is journalctl's own JSON output shape (`--output json`, newest first); the
reader is also run against a stand-in `journalctl` to check the command it gives and what it
does when journalctl fails or is missing."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from sparkops.jobunit.progress import (
    PROGRESS_LINE,
    journal_argv,
    last_progress,
    progress_sentence,
    read_progress,
)

STATUS = (
    "sparkops: 1,200/2,000 finished: 1,190 done, 10 errors, 64 in flight; 310 records/min; "
    "prefix cache hit 87.5%; ETA 0:02:35"
)
OLDER = (
    "sparkops: 900/2,000 finished: 895 done, 5 errors, 64 in flight; 300 records/min; "
    "prefix cache hit 87.1%; ETA 0:03:40"
)
# 2026-12-03T10:00:00Z in journald's microseconds
T_NEWEST = "1796292000000000"
T_OLDER = "1796291970000000"


def entry(message: object, at: str = T_NEWEST) -> str:
    return json.dumps({"__REALTIME_TIMESTAMP": at, "MESSAGE": message, "_BOOT_ID": "b"})


def test_the_newest_status_line_is_taken_and_other_lines_are_left() -> None:
    journal = "\n".join(
        [
            entry("sparkops: warning: serving changed: the model is now tiny-2"),
            entry("sparkops: endpoint http://127.0.0.1:8000 stalled: nothing advanced for 120 s"),
            entry("Started sparkops-batch-triage.service - sparkops batch job triage."),
            entry(STATUS),
            entry(OLDER, T_OLDER),
        ]
    )
    found = last_progress(journal)
    assert found is not None
    assert found.as_dict() == {"line": STATUS, "at": "2026-12-03T10:00:00Z"}


def test_a_journal_without_a_status_line_gives_none() -> None:
    journal = "\n".join(
        [
            entry("sparkops batch wait-ready: http://127.0.0.1:8000 does not answer yet"),
            "not json at all",
            json.dumps(["a", "list"]),
            "",
        ]
    )
    assert last_progress(journal) is None
    assert last_progress("") is None


def test_a_message_journald_kept_as_bytes_and_an_unreadable_time_are_read() -> None:
    as_bytes = list(STATUS.encode("utf-8"))
    found = last_progress(entry(as_bytes, at="not a number"))
    assert found is not None and (found.line, found.at) == (STATUS, "")
    # a list that is not bytes is not a message
    assert last_progress(entry([1000, -1])) is None


def test_only_the_status_line_s_opening_is_recognised() -> None:
    assert PROGRESS_LINE.match(STATUS) and PROGRESS_LINE.match(OLDER)
    for other in (
        "sparkops: error: --input records.jsonl: no such file",
        "sparkops: 3 of 20 records are errors",
        "note: sparkops: 1/2 finished: 1 done",
        "sparkops: 1/2 done",
    ):
        assert not PROGRESS_LINE.match(other), other


def _stand_in(tmp_path: Path, body: str) -> Path:
    """A journalctl that records its arguments and prints what the test gives it."""
    script = tmp_path / "journalctl"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/argv"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_the_unit_s_journal_is_read_newest_first_as_json(tmp_path: Path) -> None:
    (tmp_path / "journal.json").write_text(entry("sparkops: warning: x") + "\n" + entry(STATUS))
    journalctl = _stand_in(tmp_path, f'cat "{tmp_path}/journal.json"')
    found = read_progress("sparkops-batch-triage.service", journalctl=str(journalctl))
    assert found is not None and found.line == STATUS
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == journal_argv("sparkops-batch-triage.service")[1:]
    assert argv[:2] == ["--unit", "sparkops-batch-triage.service"]
    assert "--reverse" in argv and argv[argv.index("--output") + 1] == "json"


def test_a_journal_that_cannot_be_read_gives_none(tmp_path: Path) -> None:
    refusing = _stand_in(
        tmp_path, f'echo "{STATUS}"; echo "No journal files were opened" >&2; exit 1'
    )
    assert read_progress("sparkops-batch-triage.service", journalctl=str(refusing)) is None
    missing = tmp_path / "no-such-journalctl"
    assert read_progress("sparkops-batch-triage.service", journalctl=str(missing)) is None


def row(**over: object) -> dict:
    return {
        "name": "triage",
        "out": "/home/researcher/triage",
        "unit": "sparkops-batch-triage.service",
        "state": {"state": "active (running)"},
        "job": {"done": 1190, "errors": 10, "remaining": 800, "total": 2000},
        "progress": {"line": STATUS, "at": "2026-12-03T10:00:00Z"},
        **over,
    }


def test_one_sentence_per_job_the_journal_s_line_or_the_folder_s_counts() -> None:
    assert progress_sentence(row()) == (
        f"triage (active (running)): {STATUS} [journal 2026-12-03T10:00:00Z]"
    )
    assert progress_sentence(row(progress=None, state=None)) == (
        "triage (unit state unknown): no progress line in its journal yet; 1,190 done, "
        "10 errors, 800 remaining of 2,000 (job folder)"
    )
    unreadable = row(progress=None, job={"unreadable": "DIR is not a job folder"})
    assert progress_sentence(unreadable).endswith(
        "no progress line in its journal yet; DIR is not a job folder"
    )
    assert progress_sentence(row(progress=None, job=None)).endswith("no job folder yet")
