"""The job directory: append-only results, manifest (fingerprints), run log.

Exactly once rests on three rules: a record is finished only when its line is in
`results.jsonl`; lines are appended with one write each and fsynced at a bounded interval;
on start the file is scanned, a torn last line (power loss mid-write) is cut off, and every
id already there is skipped. A record in flight when the client died has no line, so it is
simply sent again.

Every write goes through `write_all` (a short `os.write` is finished, never left as a torn
line) and a full disk stops the job with one line (`JobStopped`, exit 1) instead of a
traceback. Small job files (manifest, prefix) are replaced atomically, so a crash leaves
the old file or the new one, never an empty or truncated one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkops.batch import openai_batch
from sparkops.errors import JobStopped, UserError
from sparkops.files import open_private, write_atomic

RESULTS = "results.jsonl"
MANIFEST = "manifest.json"
RUNS = "runs.jsonl"
TIMELINE = "timeline.jsonl"
PREFIX = "prefix.json"
LOCK = "lock"
_JOB_FILES = (
    RESULTS,
    MANIFEST,
    PREFIX,
    RUNS,
    TIMELINE,
    openai_batch.META,
    "serving.jsonl",  # batch/serving.py: what served the job
    "report.json",
    "report.md",
    "throughput.png",
)
# Errors that mean "no room to write": the job stops (resumable) with one line.
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def line_key(obj: dict[str, Any], key_field: str) -> str:
    """The key a results line covers: the record id, or its input line for id-less errors."""
    rid = obj.get(key_field)
    if rid is not None:
        return str(rid)
    # an OpenAI output line keeps the kit's fields out: its error object names the line
    return f"\x00line:{obj.get('line', openai_batch.input_line(obj))}"


def dumps_line(obj: dict[str, Any]) -> bytes:
    """One JSON line, UTF-8.

    Text is kept readable (ensure_ascii=False), but a lone surrogate (a JSON input may carry
    `"\\ud800"` in an id or field) cannot be encoded as UTF-8; such a line is written with
    \\u escapes instead, which is still valid UTF-8 JSON and reads back to the same string,
    so that record can finish and be recognised on resume.
    """
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(obj, separators=(",", ":")) + "\n").encode("ascii")


def write_all(fd: int, data: bytes, path: Path) -> None:
    """Write every byte (os.write may write fewer); a full disk raises JobStopped.

    The results file has one writer (the job directory is locked), so finishing a short
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
    """The exception to raise for `err` while writing `path`: JobStopped for a full disk."""
    if err.errno in _NO_SPACE:
        return JobStopped(
            f"cannot write {path}: {os.strerror(err.errno)}; free space on that disk (or "
            "raise the quota), then run the same command again to resume (finished "
            "records are kept)"
        )
    return err


def fsync_fd(fd: int, path: Path) -> None:
    """fsync, where a full disk (some file systems report it only here) stops the job."""
    try:
        os.fsync(fd)
    except OSError as err:
        raise stop_on_full_disk(err, path) from None


def write_json_atomic(path: Path, obj: Any) -> None:
    """Replace `path` (0600) with `obj` as JSON: temp file, fsync, rename, fsync the folder.

    A crash or a full disk leaves the previous file (or none), never an empty or truncated
    one that every later run, status or report would trip over.
    """
    try:
        write_atomic(path, json.dumps(obj, indent=2) + "\n", durable=True)
    except OSError as err:
        raise stop_on_full_disk(err, path) from None


def read_json_file(path: Path) -> Any | None:
    """The JSON in `path`, or None when it is empty, truncated or not JSON."""
    try:
        return json.loads(path.read_bytes().decode("utf-8-sig"))
    except (ValueError, UnicodeDecodeError):
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


def iter_results(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete results line that is a JSON object (a torn tail is not parsed).

    A damaged line (bad bytes, half a line from an older client) is skipped: its record is
    then not finished, so a resume sends it again instead of crashing on every start.
    """
    if not path.exists():
        return
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            if not raw.endswith("\n"):
                break
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


@dataclass
class Manifest:
    """What the job is: changing any of it means a different experiment."""

    pipeline_fingerprint: str
    input_fingerprint: str
    input: str
    kind: str
    id_field: str
    total: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Journal:
    """Append-only results file of one job directory."""

    def __init__(self, directory: Path, key_field: str, fsync_interval: float = 1.0) -> None:
        self.dir = directory
        self.key_field = key_field
        self.fsync_interval = fsync_interval
        self.done: set[str] = set()
        self.done_ok = 0
        self.done_err = 0
        self._fd: int | None = None
        self._last_sync = 0.0
        self._dirty = False
        self._path = directory / RESULTS  # built once: append() passes it on every record

    @property
    def path(self) -> Path:
        return self._path

    def _count(self, key: str, obj: dict[str, Any]) -> None:
        """One finished record: its key is done, and it adds to the ok or the error tally."""
        self.done.add(key)
        if _is_ok(obj):
            self.done_ok += 1
        else:
            self.done_err += 1

    def open(self) -> None:
        """Repair, scan finished keys, and open for appending."""
        repair_torn_tail(self.path)
        for obj in iter_results(self.path):
            key = line_key(obj, self.key_field)
            if key not in self.done:
                self._count(key, obj)
        self._fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
        self._last_sync = time.monotonic()

    def append(self, obj: dict[str, Any]) -> None:
        """Write one finished record as a single line (a short write is finished, not torn)."""
        assert self._fd is not None
        write_all(self._fd, dumps_line(obj), self.path)
        self._count(line_key(obj, self.key_field), obj)
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


def _is_ok(obj: dict[str, Any]) -> bool:
    if "status" in obj:
        return obj["status"] == "done"
    return openai_batch.is_ok(obj)  # OpenAI batch output line: an HTTP error has error null


def is_job_dir(directory: Path) -> bool:
    """Whether `directory` holds (or held) a sparkops job: its manifest, results or lock."""
    return any((directory / name).exists() for name in (MANIFEST, RESULTS, LOCK))


def check_out_dir(directory: Path) -> None:
    """Refuse an --out that is a file, or a non-empty folder that is not a job (read-only).

    A job writes and, on --restart, moves files, which must never touch a user's own files.
    """
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--out {directory} is a file, not a folder; pass a new --out DIR")
    if directory.is_dir() and not is_job_dir(directory):
        entries = sorted(p.name for p in directory.iterdir())
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise UserError(
                f"--out {directory} is a folder that is not a sparkops job and not empty "
                f"(it holds {shown}); pass a new or empty --out DIR"
            )


def ensure_job_dir(directory: Path) -> bool:
    """Create the job directory (0700), or check an existing one; True when created here.

    An existing empty folder is used with its mode left alone (the job's files are 0600 in
    any case): only a folder made here is set to 0700.
    """
    check_out_dir(directory)
    if directory.is_dir():
        return False
    try:
        directory.mkdir(parents=True)
    except FileExistsError:  # another run made it a moment ago
        return False
    except OSError as err:
        raise UserError(
            f"cannot create --out {directory} ({err.strerror}); pass a folder you can write"
        ) from None
    os.chmod(directory, 0o700)
    return True


def prepare_dir(directory: Path, manifest: Manifest, restart: bool) -> bool:
    """Create or check the job directory; returns True when resuming.

    A manifest that differs (other pipeline or input) is refused unless `restart`, or unless
    no record has finished yet (nothing to mix: a fail-fast stop, then the fix); then the old
    files are moved to `previous-<time>/`, never deleted. An unreadable
    manifest (empty or truncated by an older version or a crash) is rewritten when the job
    has no results yet; with results it cannot prove they belong to this experiment, so the
    user is told how to proceed either way.
    """
    ensure_job_dir(directory)
    path = directory / MANIFEST
    current = manifest.to_json()
    results = directory / RESULTS
    if path.exists():
        old = read_json_file(path)
        if not isinstance(old, dict):
            if not restart and results.exists() and results.stat().st_size:
                raise UserError(
                    f"{path} is empty or corrupt, so it cannot show that the results in "
                    f"{directory} come from this pipeline and input; if they do, delete "
                    f"{path} and run the same command again to resume, otherwise pass "
                    "--restart (old files kept under DIR/previous-<time>/)"
                )
            old = {} if restart else current
        changed = [
            k
            for k in ("pipeline_fingerprint", "input_fingerprint", "kind", "id_field")
            if old.get(k) != current[k]
        ]
        if not changed and not restart:
            if old is current:  # it was unreadable: regenerate it
                write_json_atomic(path, current)
            return results.exists()
        finished = results.exists() and results.stat().st_size > 0
        if changed and not restart and finished:
            what = ", ".join(k.replace("_fingerprint", "") for k in changed)
            raise UserError(
                f"{directory} holds a job with a different {what}; resuming would mix two "
                "experiments. Use a new --out DIR, or pass --restart to start over (the old "
                "files are kept under DIR/previous-<time>/)"
            )
        # --restart, or nothing finished yet (a job stopped by fail-fast, then its pipeline or
        # --id-field fixed): nothing to mix, so the old files are set aside and the job starts
        backup = _new_backup_dir(directory)
        for name in _JOB_FILES:
            if (directory / name).exists():
                (directory / name).rename(backup / name)
    elif restart and results.exists():
        raise UserError(f"{directory} has results but no manifest; use a new --out DIR")
    write_json_atomic(path, current)
    return results.exists()  # results kept without a manifest (its fix above) are resumed


def _new_backup_dir(directory: Path) -> Path:
    """A fresh `previous-<time>[-N]/` (two restarts within one second get distinct ones)."""
    stem = time.strftime("previous-%Y%m%dT%H%M%S")
    for n in range(1, 10_000):
        backup = directory / (stem if n == 1 else f"{stem}-{n}")
        try:
            backup.mkdir()
        except FileExistsError:
            continue
        return backup
    raise UserError(f"{directory} has too many previous-* folders; remove some")


def load_manifest(directory: Path) -> dict[str, Any]:
    """The job's manifest, for status and report; one line with the fix when unusable."""
    path = directory / MANIFEST
    if not path.exists():
        raise UserError(f"{directory} is not a sparkops job directory (no {MANIFEST}); check DIR")
    manifest = read_json_file(path)
    if not isinstance(manifest, dict):
        raise UserError(
            f"{path} is empty or corrupt; run the job's `sparkops batch run` command again "
            f"(after deleting {path}) to rewrite it, then retry"
        )
    return manifest


def append_json(path: Path, obj: dict[str, Any]) -> None:
    """Append one line to a small side file (runs, timeline), 0600."""
    fd = open_private(path, os.O_WRONLY | os.O_APPEND)
    try:
        write_all(fd, dumps_line(obj), path)
    finally:
        os.close(fd)
