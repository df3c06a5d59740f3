"""The results journal of a job: append-only `results.jsonl`, the authority on what is finished.

Exactly once rests on three rules: a record is finished only when its line is in
`results.jsonl`; lines are appended with one write each (jobdir/durable.py: a short write is
finished, never torn; a full disk stops the job with one line) and fsynced at a bounded
interval; on start the file is scanned, a torn last line (power loss mid-write) is cut off,
and every key already there is skipped. A record in flight when the client died has no line,
so it is simply sent again. What a line says (its key, success or error) is jobdir/lines.py's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sparkops.jobdir import lines
from sparkops.jobdir.durable import (
    dumps_line,
    fsync_fd,
    numbered_json_lines,
    open_append,
    repair_torn_tail,
    write_all,
)
from sparkops.jobdir.folder import RESULTS


class Journal:
    """Append-only results file of one job directory.

    `done` holds the key of every finished record: its id, or a `lines.LineKey` for an input
    line without one (a different type, so it never equals an id). `key_field` names the id
    field of this job's lines ("id", or "custom_id" in an OpenAI batch job), for callers.
    """

    def __init__(self, directory: Path, key_field: str, fsync_interval: float = 1.0) -> None:
        self.dir = directory
        self.key_field = key_field
        self.fsync_interval = fsync_interval
        self.done: set[lines.Key] = set()
        self.done_ok = 0
        self.done_err = 0
        self._fd: int | None = None
        self._last_sync = 0.0
        self._dirty = False
        self._path = directory / RESULTS  # built once: append() passes it on every record
        # lines found on open that count no record (damaged, or a record's second line)
        self.damage = lines.ResultsDamage()

    @property
    def path(self) -> Path:
        return self._path

    def _count(self, obj: dict[str, Any]) -> bool:
        """One finished record: its key is done, and it adds to the ok or the error tally.
        False for a line of a record already finished (its first line counts)."""
        result = lines.outcome(obj)
        if result.key in self.done:
            return False
        self.done.add(result.key)
        if result.ok:
            self.done_ok += 1
        else:
            self.done_err += 1
        return True

    def open(self) -> None:
        """Repair, scan finished keys, and open for appending."""
        repair_torn_tail(self.path)
        for n, obj in numbered_json_lines(self.path):
            if obj is None:
                self.damage.add(n, repeated=False)
            elif not self._count(obj):
                self.damage.add(n, repeated=True)
        self._fd = open_append(self.path)
        self._last_sync = time.monotonic()

    def append(self, obj: dict[str, Any]) -> None:
        """Write one finished record as a single line (a short write is finished, not torn)."""
        assert self._fd is not None
        write_all(self._fd, dumps_line(obj), self.path)
        self._count(obj)
        self._dirty = True
        now = time.monotonic()
        if now - self._last_sync >= self.fsync_interval:
            self.sync(now)

    def sync(self, now: float | None = None) -> None:
        if self._fd is not None and self._dirty:
            fsync_fd(self._fd, self.path)
            self._dirty = False
        self._last_sync = time.monotonic() if now is None else now

    def close(self) -> None:
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None
