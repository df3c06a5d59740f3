"""Results that show if they were edited (issue 40 item 4): each run's end line seals the job
folder's files, chained to the previous seal, and `sparkops batch verify DIR` checks them.

A paper's figures come from results.jsonl; nothing showed whether it was changed after the job
wrote it (a decision corrected by hand, a line deleted). At the end of every run `seal`
returns what `batch run` puts in its end line (`runs.jsonl`, `"digests"`): per file its size,
lines, sha256 and the digests of up to 64 blocks of lines (so a later change can be placed),
how it came from the previous seal (`since`), and the sha256 of the previous seal itself, so
a seal cannot be edited without breaking the next one's link.

What counts as an edit: the journals (results.jsonl, openai-meta.jsonl, serving.jsonl,
timeline.jsonl, runs.jsonl) only grow while a job runs, so a file whose first bytes are the
previous seal's, byte for byte, was appended to: a resume, not an edit. A changed or removed
line is an edit, and so is the file's removal. The one rewrite the kit makes itself,
`--retry-errors` (jobdir/folder.drop_errors: the error lines taken out, the old file kept
under `previous-<time>/`), is told from an edit by both: the old file in the backup is the
previous seal's, and the new file starts with exactly the lines drop_errors keeps. The small
JSON files (manifest.json, prefix.json) are rewritten by every run, so they are checked from
the last seal on. The saved pipeline's index (pipeline/index.json, jobdir/pipeline_copy.py) is
written once and never again: any change to it is an edit; it holds the sha256 of every saved
pipeline file, which verification.py checks. `--restart` sets runs.jsonl aside with the rest:
a new chain starts.

A seal is evidence of accident or of an edit made without the kit, not a signature: someone
who rewrites a file and recomputes every seal after it is not caught. The job folder stays the
researcher's; a copy of runs.jsonl kept elsewhere (or its last seal's sha256 in the paper)
makes even that visible.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkops.jobdir import lines
from sparkops.jobdir.durable import dumps_line, iter_json_lines
from sparkops.jobdir.folder import MANIFEST, META, PREFIX, RESULTS, RUNS, SERVING, TIMELINE
from sparkops.jobdir.pipeline_copy import INDEX

DIGESTS = "digests"  # the end line's key (jobdir/verification.py checks the seals)
ALGORITHM = "sha256"
JOURNALS = (RESULTS, META, SERVING, TIMELINE, RUNS)  # append-only while a job runs
WHOLE = (MANIFEST, PREFIX)  # rewritten whole by each run
FIXED = (INDEX,)  # written once (the saved pipeline's index), never rewritten
SEALED = (*JOURNALS, *WHOLE, *FIXED)
RETRIED = (RESULTS, META)  # what --retry-errors rewrites
BLOCKS = 64  # at most this many block digests per file: enough to place a change
BLOCK_HEX = 16
CHUNK = 1 << 20

# How a file came from the previous seal (or, at verify, from the last one).
UNCHANGED = "unchanged"
APPENDED = "appended"
REWRITTEN = "rewritten"  # a small JSON file a run rewrote whole
RETRIED_ERRORS = "retried"  # --retry-errors took its error lines out (old file kept)
CHANGED = "changed"
NEW = "new"
REMOVED = "removed"
EDITS = (CHANGED, REMOVED)


# ---- one file ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileDigest:
    """A file as sealed: size, lines, sha256, and the digests of blocks of `per_block` lines
    (the last block may be shorter)."""

    bytes: int
    lines: int
    sha256: str
    per_block: int
    blocks: tuple[str, ...]
    since: str | None = None  # how it came from the previous seal (None when read back old)

    def as_dict(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "bytes": self.bytes,
            "lines": self.lines,
            "sha256": self.sha256,
            "per_block": self.per_block,
            "blocks": list(self.blocks),
        }
        if self.since is not None:
            obj["since"] = self.since
        return obj

    @classmethod
    def from_json(cls, obj: Any) -> FileDigest | None:
        """A sealed file's record, None when unreadable (a hand edit of runs.jsonl)."""
        if not isinstance(obj, dict):
            return None
        size, count = _count(obj.get("bytes")), _count(obj.get("lines"))
        per_block = _count(obj.get("per_block"))
        digest, blocks, since = obj.get("sha256"), obj.get("blocks"), obj.get("since")
        if size is None or count is None or per_block is None or per_block < 1:
            return None
        if not isinstance(digest, str) or not isinstance(blocks, list):
            return None
        if not all(isinstance(b, str) for b in blocks):
            return None
        return cls(
            size,
            count,
            digest,
            per_block,
            tuple(blocks),
            since if isinstance(since, str) else None,
        )


def _count(value: Any) -> int | None:
    """A whole number 0 or above, else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def file_lines(path: Path) -> Iterator[bytes]:
    """The file's lines, each with its newline (a last line without one counts too), read
    as a stream: results.jsonl may be larger than memory."""
    with path.open("rb") as handle:
        yield from handle


def block_size(count: int) -> int:
    return max(1, math.ceil(count / BLOCKS))


def block_digests(rows: Iterable[bytes], per_block: int) -> Iterator[str]:
    """The short sha256 of each block of `per_block` lines, in order."""
    block, held = hashlib.sha256(), 0
    for row in rows:
        block.update(row)
        held += 1
        if held == per_block:
            yield block.hexdigest()[:BLOCK_HEX]
            block, held = hashlib.sha256(), 0
    if held:
        yield block.hexdigest()[:BLOCK_HEX]


def digest_file(path: Path, since: str | None = None) -> FileDigest:
    """A file's digest: one pass for its sha256, size and lines, one for its blocks."""
    whole, size, count = hashlib.sha256(), 0, 0
    for row in file_lines(path):
        whole.update(row)
        size += len(row)
        count += 1
    per_block = block_size(count)
    blocks = tuple(block_digests(file_lines(path), per_block))
    return FileDigest(size, count, whole.hexdigest(), per_block, blocks, since)


def readable(path: Path) -> bool:
    """A file there that can be read (a folder in its place, or no file, is not)."""
    try:
        with path.open("rb"):
            return path.is_file()
    except OSError:
        return False


def head_digest(path: Path, size: int) -> tuple[str, int]:
    """The sha256 of the file's first `size` bytes, and how many it has (fewer: shorter)."""
    digest, read = hashlib.sha256(), 0
    with path.open("rb") as handle:
        while read < size and (chunk := handle.read(min(CHUNK, size - read))):
            digest.update(chunk)
            read += len(chunk)
    return digest.hexdigest(), read


def prefix_matches(path: Path, sealed: FileDigest) -> bool:
    """Whether the file begins with the sealed file, byte for byte (appended to, or the same)."""
    digest, read = head_digest(path, sealed.bytes)
    return read == sealed.bytes and digest == sealed.sha256


def same_file(path: Path, sealed: FileDigest) -> bool:
    return path.stat().st_size == sealed.bytes and prefix_matches(path, sealed)


def first_difference(path: Path, sealed: FileDigest) -> tuple[int, int] | None:
    """The 1-based line range of the first sealed block that differs now (None: none does,
    the file only grew or shrank at its end)."""
    now = block_digests(file_lines(path), sealed.per_block)
    for index, old in enumerate(sealed.blocks):
        if next(now, None) != old:
            first = index * sealed.per_block + 1
            return first, min(first + sealed.per_block - 1, sealed.lines)
    return None


def line_count(path: Path) -> int:
    return sum(1 for _ in file_lines(path))


# ---- a seal -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seal:
    """One run's seal, as read back from its end line."""

    run: int
    files: dict[str, FileDigest]
    removed: tuple[str, ...]
    previous: str | None  # sha256 of the previous seal's record
    record: dict[str, Any]  # the record as written (its own digest is over this)

    @property
    def sha256(self) -> str:
        return seal_digest(self.record)


def seal_digest(record: dict[str, Any]) -> str:
    """The sha256 a seal is linked by: over its canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def read_seal(event: lines.RunEvent) -> Seal | None:
    """An end line's seal (None when the line has none: an older kit, or a hand edit)."""
    record = event.extra.get(DIGESTS)
    if not isinstance(record, dict):
        return None
    files = record.get("files")
    removed = record.get("removed")
    previous = record.get("previous")
    read = {
        name: digest
        for name, obj in (files.items() if isinstance(files, dict) else ())
        if (digest := FileDigest.from_json(obj)) is not None
    }
    return Seal(
        event.run,
        read,
        tuple(x for x in removed if isinstance(x, str)) if isinstance(removed, list) else (),
        previous if isinstance(previous, str) else None,
        record,
    )


def seals(directory: Path) -> Iterator[Seal]:
    """Every sealed end line of the job, in written order."""
    for event in lines.run_events(directory / RUNS):
        if event.event == "end" and (seal := read_seal(event)) is not None:
            yield seal


def last_seal(directory: Path) -> Seal | None:
    found = None
    for found in seals(directory):  # noqa: B007 - the last one
        pass
    return found


def seal(directory: Path) -> dict[str, Any]:
    """What a run's end line records under "digests" (called once, as the run ends, before
    its end line is appended: so runs.jsonl is sealed up to that line)."""
    previous = last_seal(directory)
    files: dict[str, Any] = {}
    for name in SEALED:
        path = directory / name
        with contextlib.suppress(OSError):  # a read error must not cost the run its end line
            if readable(path):
                files[name] = digest_file(
                    path, came_from(directory, name, path, previous)
                ).as_dict()
    removed = sorted(name for name in (previous.files if previous else {}) if name not in files)
    record: dict[str, Any] = {
        "algorithm": ALGORITHM,
        "previous": previous.sha256 if previous else None,
        "previous_run": previous.run if previous else None,
        "files": files,
    }
    if removed:
        record["removed"] = removed
    return record


def came_from(directory: Path, name: str, path: Path, previous: Seal | None) -> str:
    """How a file came from the previous seal: appended, retried, rewritten, changed, new."""
    sealed = previous.files.get(name) if previous else None
    if sealed is None:
        return NEW
    if same_file(path, sealed):
        return UNCHANGED
    if name in WHOLE:
        return REWRITTEN
    if name in FIXED:
        return CHANGED
    if prefix_matches(path, sealed):
        return APPENDED
    if name in RETRIED and retried_errors(directory, name, path, sealed):
        return RETRIED_ERRORS
    return CHANGED


# ---- --retry-errors: the kit's own rewrite ------------------------------------------------------
def backups(directory: Path) -> list[Path]:
    """The `previous-<time>/` folders, newest first."""
    try:
        found = [p for p in directory.iterdir() if p.is_dir() and p.name.startswith("previous-")]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.name, reverse=True)


def retried_errors(directory: Path, name: str, path: Path, sealed: FileDigest) -> bool:
    """Whether the file is what --retry-errors made of the sealed one (folder.drop_errors): a
    backup holds the sealed file itself, and the file starts with the lines it keeps."""
    for backup in backups(directory):
        old = backup / name
        if not readable(old) or not same_file(old, sealed):
            continue
        kept, size = hashlib.sha256(), 0
        for row in kept_lines(backup, name):
            kept.update(row)
            size += len(row)
        digest, read = head_digest(path, size)
        if read == size and digest == kept.hexdigest():
            return True
    return False


def kept_lines(backup: Path, name: str) -> Iterator[bytes]:
    """The lines drop_errors writes for `name` from the backup's files: the successful
    results lines, and the meta lines of the records it did not drop."""
    if name == RESULTS:
        for obj in iter_json_lines(backup / RESULTS):
            if lines.outcome(obj).ok:
                yield dumps_line(obj)
        return
    dropped = {
        result.key
        for result in (lines.outcome(obj) for obj in iter_json_lines(backup / RESULTS))
        if not result.ok
    }
    for obj in iter_json_lines(backup / META):
        if lines.record_key(obj.get("custom_id"), obj.get("line") or 0) not in dropped:
            yield dumps_line(obj)
