"""A job's last progress line, read from its unit's journal: what status.yml shows per job.

A running job off a terminal writes one status line to stderr every `--status-interval`
seconds (batch/progress.py): done/total, errors, in flight, records/min, prefix-cache hit rate,
ETA. Under its unit stderr is the journal, so `journalctl -u sparkops-batch-NAME` shows them.
`sparkops batch units --json` (which status.yml runs on every Spark) adds the newest such line
of each job unit with its time, so the controller prints the very line a person would read on
the Spark, not a second computation of the same figures that could disagree with it.

Why the journal rather than the job folder: the pace, the in-flight count and the ETA are the
running client's (the folder has no calls in flight, and a rate recomputed there would be over
another window); the line is never more than one interval old while the job runs, and its time
says how old it is. Where the journal has none (a job that has not reached its first interval,
a journal rotated or kept in memory across a reboot), the row's counts from the job folder stand
and the sentence says so. Only lines that open as the status line does are taken: warnings,
stall lines and the wait's lines are left, and no line holds record text or ids by construction.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

# The status line's opening (batch/progress.py ProgressView.status_text): "sparkops: 1,200/2,000
# finished: ...". tests/unit/test_progress.py holds the two together.
PROGRESS_LINE = re.compile(r"^sparkops: [\d,]+/[\d,]+ finished: ")
# Entries read back from the newest: a status line comes every 30 s by default, other lines
# (stalls, serving changes, the wait's once a minute) are few between two.
JOURNAL_ENTRIES = 500
JOURNAL_TIMEOUT_S = 10


@dataclass(frozen=True, slots=True)
class ProgressLine:
    """The newest status line of a job's unit and when the journal got it (UTC, ISO 8601)."""

    line: str
    at: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def journal_argv(unit: str, entries: int = JOURNAL_ENTRIES) -> list[str]:
    """The newest `entries` messages of `unit`, newest first, one JSON object each."""
    return [
        "journalctl", "--unit", unit, "--reverse", "--lines", str(entries), "--output", "json",
        "--output-fields", "MESSAGE", "--no-pager", "--quiet",
    ]  # fmt: skip


def _message(entry: Mapping[str, Any]) -> str:
    """An entry's MESSAGE: journald gives a list of bytes for one that is not valid UTF-8 or
    holds control characters."""
    message = entry.get("MESSAGE")
    if isinstance(message, list) and all(isinstance(b, int) and 0 <= b < 256 for b in message):
        return bytes(message).decode("utf-8", errors="replace")
    return message if isinstance(message, str) else ""


def _at(entry: Mapping[str, Any]) -> str:
    """__REALTIME_TIMESTAMP (microseconds since the epoch) as UTC ISO 8601, "" if unreadable."""
    try:
        seconds = int(entry["__REALTIME_TIMESTAMP"]) / 1_000_000
    except (KeyError, TypeError, ValueError):
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def last_progress(journal_json: str) -> ProgressLine | None:
    """The first status line in journalctl's JSON output (read newest first), or None."""
    for raw in journal_json.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        message = _message(entry).strip()
        if PROGRESS_LINE.match(message):
            return ProgressLine(message, _at(entry))
    return None


def read_progress(unit: str, journalctl: str = "journalctl") -> ProgressLine | None:
    """The newest status line in `unit`'s journal; None where there is none or the journal
    cannot be read (no journald, a user outside systemd-journal: status.yml reads as root)."""
    argv = journal_argv(unit)
    argv[0] = journalctl
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=JOURNAL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return last_progress(done.stdout) if done.returncode == 0 else None


def progress_sentence(row: Mapping[str, Any]) -> str:
    """One job of `batch units --json` in one line: its name, its unit's state, and its newest
    status line with the line's time; without one, the job folder's counts, said as such."""
    name = row.get("name", "?")
    state = row.get("state") or {}
    where = f"{name} ({state.get('state', 'unit state unknown')})"
    progress = row.get("progress") or {}
    if progress.get("line"):
        return f"{where}: {progress['line']} [journal {progress.get('at') or 'time unknown'}]"
    job = row.get("job") or {}
    if "total" in job:
        counts = (
            f"{job['done']:,} done, {job['errors']:,} errors, {job['remaining']:,} remaining of "
            f"{job['total']:,} (job folder)"
        )
    else:
        counts = job.get("unreadable", "no job folder yet")
    return f"{where}: no progress line in its journal yet; {counts}"
