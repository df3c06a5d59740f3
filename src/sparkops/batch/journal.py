"""The job directory: append-only results, manifest (fingerprints), run log.

Exactly once rests on three rules: a record is finished only when its line is in
`results.jsonl`; lines are appended with one write each and fsynced at a bounded interval;
on start the file is scanned, a torn last line (power loss mid-write) is cut off, and every
id already there is skipped. A record in flight when the client died has no line, so it is
simply sent again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkops.batch import openai_batch
from sparkops.errors import UserError

RESULTS = "results.jsonl"
MANIFEST = "manifest.json"
RUNS = "runs.jsonl"
TIMELINE = "timeline.jsonl"
_JOB_FILES = (
    RESULTS,
    MANIFEST,
    RUNS,
    TIMELINE,
    openai_batch.META,
    "report.json",
    "report.md",
    "throughput.png",
)


def line_key(obj: dict[str, Any], key_field: str) -> str:
    """The key a results line covers: the record id, or its input line for id-less errors."""
    rid = obj.get(key_field)
    if rid is not None:
        return str(rid)
    # an OpenAI output line keeps the kit's fields out: its error object names the line
    return f"\x00line:{obj.get('line', openai_batch.input_line(obj))}"


def open_private(path: Path, flags: int) -> int:
    """Open (creating 0600) a file that may hold patient-derived text."""
    fd = os.open(path, flags | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    return fd


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
    """Every complete results line (a torn tail is skipped, not parsed)."""
    if not path.exists():
        return
    with path.open("r", encoding="utf-8") as fh:
        for raw in fh:
            if not raw.endswith("\n"):
                break
            try:
                yield json.loads(raw)
            except ValueError:
                continue


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

    @property
    def path(self) -> Path:
        return self.dir / RESULTS

    def open(self) -> None:
        """Repair, scan finished keys, and open for appending."""
        repair_torn_tail(self.path)
        for obj in iter_results(self.path):
            key = line_key(obj, self.key_field)
            if key in self.done:
                continue
            self.done.add(key)
            if _is_ok(obj):
                self.done_ok += 1
            else:
                self.done_err += 1
        self._fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
        self._last_sync = time.monotonic()

    def append(self, obj: dict[str, Any]) -> None:
        """Write one finished record as a single line (one write call, so never interleaved)."""
        assert self._fd is not None
        data = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        os.write(self._fd, data)
        self.done.add(line_key(obj, self.key_field))
        if _is_ok(obj):
            self.done_ok += 1
        else:
            self.done_err += 1
        self._dirty = True
        now = time.monotonic()
        if now - self._last_sync >= self.fsync_interval:
            self.sync(now)

    def sync(self, now: float | None = None) -> None:
        if self._fd is not None and self._dirty:
            os.fsync(self._fd)
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


def prepare_dir(directory: Path, manifest: Manifest, restart: bool) -> bool:
    """Create or check the job directory; returns True when resuming.

    A manifest that differs (other pipeline or input) is refused unless `restart`, in which
    case the old files are moved to `previous-<time>/`, never deleted.
    """
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = directory / MANIFEST
    current = manifest.to_json()
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        changed = [
            k
            for k in ("pipeline_fingerprint", "input_fingerprint", "kind", "id_field")
            if old.get(k) != current[k]
        ]
        if not changed and not restart:
            return (directory / RESULTS).exists()
        if changed and not restart:
            what = ", ".join(k.replace("_fingerprint", "") for k in changed)
            raise UserError(
                f"{directory} holds a job with a different {what}; resuming would mix two "
                "experiments. Use a new --out DIR, or pass --restart to start over (the old "
                "files are kept under DIR/previous-<time>/)"
            )
        backup = directory / time.strftime("previous-%Y%m%dT%H%M%S")
        backup.mkdir()
        for name in _JOB_FILES:
            if (directory / name).exists():
                (directory / name).rename(backup / name)
    elif restart and (directory / RESULTS).exists():
        raise UserError(f"{directory} has results but no manifest; use a new --out DIR")
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(current, fh, indent=2)
    return False


def load_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.exists():
        raise UserError(f"{directory} is not a sparkops job directory (no {MANIFEST}); check DIR")
    return json.loads(path.read_text(encoding="utf-8"))


def append_json(path: Path, obj: dict[str, Any]) -> None:
    """Append one line to a small side file (runs, timeline), 0600."""
    fd = open_private(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (json.dumps(obj, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)
