"""Durable writes of the job folder: whole lines, fsyncs, atomic replaces, a full disk as a stop.

Exactly once rests on results.jsonl holding whole lines only, so every append goes through
`write_all` (a short `os.write` is finished, never left as a torn line; a failed one is taken
back) and a full disk stops the job with one line (`JobStopped`, exit 1) instead of a
traceback. Small job files (manifest, prefix) are replaced atomically (`write_json_atomic`),
so a crash leaves the old file or the new one, never an empty or truncated one. On start, a
torn last line (power loss mid-write) is cut off (`repair_torn_tail`).

These are the primitives; which file holds what is jobdir/folder.py's business, and what each
line means is jobdir/lines.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkops import json_codec
from sparkops.errors import JobStopped
from sparkops.files import NO_SPACE, WriteFailed, open_private, write_atomic
from sparkops.privacy import redact


def dumps_line(obj: dict[str, Any]) -> bytes:
    """One JSON line, UTF-8.

    Text is kept readable, but a lone surrogate (a JSON input may carry `"\\ud800"` in an id
    or field) cannot be encoded as UTF-8; such a line is written with \\u escapes instead
    (sparkops/json_codec.py), which is still valid UTF-8 JSON and reads back to the same
    string, so that record can finish and be recognised on resume.
    """
    return json_codec.encode(obj) + b"\n"


def write_all(fd: int, data: bytes, path: Path) -> None:
    """Write every byte (os.write may write fewer); a full disk raises JobStopped.

    Each job file has one writer (the job directory is locked), so finishing a short
    write with further writes still yields one whole line.
    """
    view = memoryview(data)
    written = 0
    try:
        while view:
            n = os.write(fd, view)
            written += n
            view = view[n:]
    except OSError as err:
        if written:  # take the partial line back, so the file holds whole lines only
            with contextlib.suppress(OSError):
                os.ftruncate(fd, os.fstat(fd).st_size - written)
        raise stop_on_full_disk(err, path) from None


def stop_on_full_disk(err: OSError, path: Path) -> Exception:
    """The exception to raise for `err` while writing `path`: JobStopped for a full disk
    (the job stops, resumable, exit 1), else `files.WriteFailed` (one line: a read-only file
    system, no permission)."""
    if err.errno in NO_SPACE:
        return JobStopped(
            f"cannot write {path}: {os.strerror(err.errno)}; free space on that disk (or "
            "raise the quota), then run the same command again to resume (finished "
            "records are kept)"
        )
    return err if isinstance(err, WriteFailed) else WriteFailed(err, path)


def fsync_fd(fd: int, path: Path) -> None:
    """fsync, where a full disk (some file systems report it only here) stops the job."""
    try:
        os.fsync(fd)
    except OSError as err:
        raise stop_on_full_disk(err, path) from None


def open_append(path: Path) -> int:
    """A descriptor appending to `path` (created 0600), with write errors worded."""
    try:
        return open_private(path, os.O_WRONLY | os.O_APPEND)
    except OSError as err:
        raise stop_on_full_disk(err, path) from None


def write_json_atomic(path: Path, obj: Any) -> None:
    """Replace `path` (0600) with `obj` as JSON: temp file, fsync, rename, fsync the folder.

    A crash or a full disk leaves the previous file (or none), never an empty or truncated
    one that every later run, status or report would trip over.
    """
    write_text_atomic(path, redact(json.dumps(obj, indent=2)) + "\n", durable=True)


def write_text_atomic(path: Path, text: str | bytes, *, durable: bool = False) -> None:
    """`files.write_atomic`, where a full disk stops the job (JobStopped)."""
    try:
        write_atomic(path, text, durable=durable)
    except WriteFailed as err:
        raise stop_on_full_disk(err, path) from None


def append_json(path: Path, obj: dict[str, Any]) -> None:
    """Append one line to a small side file (runs, timeline, serving), 0600. Side files
    and the small JSON files (`write_json_atomic`) describe endpoints, never records, so a
    credential in a URL is redacted there whoever wrote the line (privacy.redact);
    results.jsonl's lines (record answers) are left as the model wrote them."""
    data = dumps_line(obj)
    if b"://" in data:
        data = redact(data.decode("utf-8")).encode("utf-8")
    fd = open_append(path)
    try:
        write_all(fd, data, path)
    finally:
        os.close(fd)


def read_json_file(path: Path) -> Any | None:
    """The JSON in `path`, or None when it is empty, truncated, not JSON, or not a file."""
    try:
        return json.loads(path.read_bytes().decode("utf-8-sig"))
    except (ValueError, UnicodeDecodeError, IsADirectoryError, PermissionError):
        return None


def repair_torn_tail(path: Path) -> int:
    """Cut a partial last line off `path`; returns the bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return 0
        # walk back to the last newline
        pos = size
        block = 4096
        keep = 0
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
        return size - keep


def iter_json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete line of a job file that is a JSON object (a torn tail is not parsed).

    A damaged line (bad bytes, half a line from an older client, a hand edit that is JSON
    but not an object) is skipped: for results, its record is then not finished, so a resume
    sends it again instead of crashing on every start.
    """
    for _, obj in numbered_json_lines(path):
        if obj is not None:
            yield obj


def numbered_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(1-based line number, object) of every complete line of a job file; the object is
    None for a damaged line, so a reader can say which lines it skipped (`iter_json_lines`
    skips them silently)."""
    if not path.is_file():
        return
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for n, raw in enumerate(fh, start=1):
            if not raw.endswith("\n"):
                break
            try:
                obj = json_codec.decode(raw)
            except ValueError:
                yield n, None
                continue
            yield n, obj if isinstance(obj, dict) else None
