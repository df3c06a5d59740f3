"""A batch's job results as OpenAI hands them back: an output file and an error file.

The job's `results.jsonl` already holds OpenAI batch output lines (jobdir/openai_lines.py).
OpenAI splits them: lines of requests that succeeded go to the output file, the others (an
HTTP error answer, or no answer at all) to the error file. Which is which is the kit's one
rule (`jobdir.lines.outcome`, as `batch status` and the report count them), and each record
counts once, by its first line, so every custom_id is in exactly one of the two files once.
The lines keep the finishing order, as OpenAI's (match them by custom_id).

`ResultCounts` follows a running job's results for `request_counts` without reading the
whole file at every poll: the journal only grows, so it reads what was appended since.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sparkops import json_codec
from sparkops.files import open_private
from sparkops.jobdir import lines
from sparkops.jobdir.durable import dumps_line, fsync_fd, write_all


def split_results(results: Path, output: Path, errors: Path) -> tuple[int, int]:
    """Write each record's first results line to `output` (a success) or `errors` (0600,
    fsynced); returns (succeeded, failed). A missing results file is an empty job."""
    counts = [0, 0]
    fds = [open_private(p, os.O_WRONLY | os.O_TRUNC) for p in (output, errors)]
    try:
        for obj, result in lines.read_results(results, lines.ResultsDamage()):
            which = 0 if result.ok else 1
            write_all(fds[which], dumps_line(obj), (output, errors)[which])
            counts[which] += 1
        for fd, path in zip(fds, (output, errors), strict=True):
            fsync_fd(fd, path)
    finally:
        for fd in fds:
            os.close(fd)
    return counts[0], counts[1]


@dataclass
class ResultCounts:
    """Successes and failures in one job's results.jsonl so far, read incrementally (the
    journal is append-only; a file that shrank is read again from the start)."""

    path: Path
    offset: int = 0
    succeeded: int = 0
    failed: int = 0
    seen: set[lines.Key] = field(default_factory=set)

    def update(self) -> tuple[int, int]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return self.succeeded, self.failed
        if size < self.offset:
            self.offset, self.succeeded, self.failed = 0, 0, 0
            self.seen.clear()
        if size > self.offset:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(size - self.offset)
            whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
            self.offset += len(whole)
            for raw in whole.splitlines():
                self._count(raw)
        return self.succeeded, self.failed

    def _count(self, raw: bytes) -> None:
        try:
            obj = json_codec.decode(raw)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        result = lines.outcome(obj)
        if result.key in self.seen:
            return
        self.seen.add(result.key)
        if result.ok:
            self.succeeded += 1
        else:
            self.failed += 1
