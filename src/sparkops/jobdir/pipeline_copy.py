"""The job's pipeline kept in its folder: the YAML as the first run loaded it and every file it
names (system prompts, JSON Schemas), byte for byte, with their sha256 in an index.

The manifest holds only the pipeline's fingerprint, which proves a pipeline file is the job's
but cannot give it back: a methods section (`report --methods`) needs each step's prompts,
answers, sampling and routing from the job folder alone. The first run of a job (or the first
run of this kit on an older folder) saves the copy; it is never rewritten, and `--restart`
sets it aside with the rest of the job (folder.JOB_FILES).

The layout:

    pipeline/copy/<the YAML's own name>      the pipeline YAML as loaded
    pipeline/copy/<path as the YAML names it> a file named inside the YAML's folder
    pipeline/elsewhere/<n>-<file name>       a file named by an absolute path, `~` or `..`
    pipeline/index.json                      what each file is: its name as written, its
                                             place here, sha256, size, the steps using it

So `pipeline/copy/` is itself a runnable pipeline whenever the YAML names its files by
relative paths (the common case). The copy is built in a hidden folder beside it and renamed
into place, so a crash leaves no half copy; each file is written by the kit's one writer
(0600, atomic, durable). Which files a YAML names, and loading the copy back, are the
pipeline's business (pipeline/spec.named_files, load_pipeline(files=...)); this module knows
the layout and bytes only. A run's seal covers the index (jobdir/digest.py), and `batch
verify` checks each saved file against it (`check_saved`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sparkops.errors import UserError
from sparkops.files import fsync_dir
from sparkops.jobdir.durable import read_json_file, stop_on_full_disk, write_text_atomic

COPY_DIR = "pipeline"
INDEX = f"{COPY_DIR}/index.json"
_COPY = "copy"
_ELSEWHERE = "elsewhere"
_STAGING = ".pipeline-copy-"  # + pid: the copy being built (hidden, renamed into place)
VERSION = 1


@dataclass(frozen=True)
class SourceFile:
    """A file the pipeline names, as read for the copy: its name as the YAML writes it, its
    bytes, and which steps use it how ("screen: system prompt")."""

    named: str
    data: bytes
    uses: tuple[str, ...]


@dataclass(frozen=True)
class PipelineSource:
    """The pipeline as a run read it: the YAML's file name and bytes, and its files."""

    name: str
    data: bytes
    files: tuple[SourceFile, ...]


@dataclass(frozen=True)
class SavedFile:
    """One saved file: its name as the YAML writes it (the YAML's own file name for the YAML),
    its place in the job folder (relative, e.g. `pipeline/copy/prompts/screen.txt`), sha256,
    size, and the steps using it."""

    named: str
    path: str
    sha256: str
    size: int
    uses: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "named": self.named,
            "path": self.path,
            "sha256": self.sha256,
            "bytes": self.size,
            "uses": list(self.uses),
        }

    @classmethod
    def from_json(cls, obj: Any) -> SavedFile | None:
        if not isinstance(obj, dict):
            return None
        named, path, digest, size = (
            obj.get("named"),
            obj.get("path"),
            obj.get("sha256"),
            obj.get("bytes"),
        )
        uses = obj.get("uses", [])
        if not (isinstance(named, str) and isinstance(path, str) and isinstance(digest, str)):
            return None
        if not isinstance(size, int) or isinstance(size, bool) or not isinstance(uses, list):
            return None
        if not _inside(path):
            return None
        return cls(named, path, digest, size, tuple(str(u) for u in uses))


@dataclass(frozen=True)
class SavedPipeline:
    """The index of the saved copy: the fingerprint it was saved under, the run that saved it,
    the YAML, and every file it names."""

    fingerprint: str
    run: int
    yaml: SavedFile
    files: tuple[SavedFile, ...]

    def yaml_path(self, directory: Path) -> Path:
        return directory / self.yaml.path

    def places(self, directory: Path) -> dict[str, Path]:
        """Each file's name as the YAML writes it -> its saved copy (load_pipeline's `files`)."""
        return {f.named: directory / f.path for f in self.files}

    def used_as(self, step: str, role: str) -> SavedFile | None:
        """The saved file step `step` uses as its `role` ("system prompt", "JSON Schema")."""
        return next((f for f in self.files if f"{step}: {role}" in f.uses), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "fingerprint": self.fingerprint,
            "run": self.run,
            "pipeline": self.yaml.as_dict(),
            "files": [f.as_dict() for f in self.files],
        }


class CopyDamaged(UserError):
    """pipeline/index.json is there but cannot be read: the copy cannot be trusted."""


def read_saved(directory: Path) -> SavedPipeline | None:
    """The saved copy's index; None when the folder holds no copy (a job from before the copy,
    or an OpenAI batch job). An index that is there but unreadable raises CopyDamaged."""
    path = directory / INDEX
    if not path.exists():
        return None
    data = read_json_file(path)
    found = _index(data) if isinstance(data, dict) else None
    if found is None:
        raise CopyDamaged(
            f"{path} (the index of the job's saved pipeline) is empty, corrupt or edited; "
            "`sparkops batch verify` says what changed"
        )
    return found


def _index(data: dict[str, Any]) -> SavedPipeline | None:
    fingerprint, run = data.get("fingerprint"), data.get("run")
    yaml = SavedFile.from_json(data.get("pipeline"))
    files = data.get("files")
    if not isinstance(fingerprint, str) or not isinstance(run, int) or yaml is None:
        return None
    if not isinstance(files, list):
        return None
    read = [SavedFile.from_json(f) for f in files]
    if any(f is None for f in read):
        return None
    return SavedPipeline(fingerprint, run, yaml, tuple(f for f in read if f is not None))


def _inside(path: str) -> bool:
    """A saved file's place is under pipeline/ (an edited index never sends a reader out)."""
    parts = PurePosixPath(path).parts
    return (
        len(parts) >= 2 and parts[0] == COPY_DIR and ".." not in parts and not path.startswith("/")
    )


# ---- saving -----------------------------------------------------------------------------------
def keep_pipeline(
    directory: Path, source: PipelineSource, fingerprint: str, run: int
) -> str | None:
    """Save the copy unless the folder has one (never rewritten); returns a warning when a
    `pipeline` there is not the kit's copy (left as it is, nothing saved)."""
    target = directory / COPY_DIR
    if (directory / INDEX).exists():
        return None
    _clear_staging(directory)
    if target.exists() or target.is_symlink():
        return (
            f"{target} is there but holds no saved pipeline (no {INDEX}); left as it is, so "
            "this job keeps no copy of its pipeline: move it away and run the job again to "
            "save one"
        )
    staging = directory / f"{_STAGING}{os.getpid()}"
    try:
        _make_dir(staging)
        index = _write_copy(staging, source, fingerprint, run)
        write_text_atomic(staging / "index.json", _json(index.as_dict()), durable=True)
        os.rename(staging, target)
    except OSError as err:
        raise stop_on_full_disk(err, target) from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    fsync_dir(directory)
    return None


def _write_copy(staging: Path, source: PipelineSource, fingerprint: str, run: int) -> SavedPipeline:
    """Every file into the staging folder; the index of what went where."""
    taken: dict[str, bytes] = {}
    yaml = _put(staging, taken, f"{_COPY}/{_plain_name(source.name)}", source.data, source.name)
    files = []
    for number, file in enumerate(source.files, start=1):
        place = _place(file.named, number)
        if place in taken and taken[place] != file.data:  # e.g. the YAML's own name
            place = f"{_ELSEWHERE}/{number}-{_plain_name(Path(file.named).name)}"
        files.append(_put(staging, taken, place, file.data, file.named, file.uses))
    return SavedPipeline(fingerprint, run, yaml, tuple(files))


def _put(
    staging: Path,
    taken: dict[str, bytes],
    place: str,
    data: bytes,
    named: str,
    uses: tuple[str, ...] = (),
) -> SavedFile:
    if place not in taken:
        path = staging / place
        _make_dir(path.parent, up_to=staging)
        write_text_atomic(path, data, durable=True)
        taken[place] = data
    digest = hashlib.sha256(data).hexdigest()
    return SavedFile(named, f"{COPY_DIR}/{place}", digest, len(data), uses)


def _place(named: str, number: int) -> str:
    """Where a named file goes: `copy/<its relative path>` when the YAML names it inside its
    own folder (so the copy loads as the original does), else `elsewhere/<n>-<name>`."""
    path = PurePosixPath(os.path.normpath(named.strip()))
    relative = not (path.is_absolute() or named.strip().startswith("~") or ".." in path.parts)
    if relative and path.parts and path.parts[0] != ".":
        return f"{_COPY}/{path}"
    return f"{_ELSEWHERE}/{number}-{_plain_name(path.name)}"


def _plain_name(name: str) -> str:
    """A file name safe as one path part (never empty, never `.` or `..`)."""
    name = name.replace("/", "_")
    return name if name not in ("", ".", "..") else "file"


def _make_dir(path: Path, up_to: Path | None = None) -> None:
    """Create `path` (0700) and the folders above it up to `up_to`."""
    if up_to is not None and path != up_to:
        _make_dir(path.parent, up_to)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)


def _clear_staging(directory: Path) -> None:
    """Remove copies a killed run left half built (the job's lock is held: no run builds one)."""
    with contextlib.suppress(OSError):
        for stale in directory.glob(f"{_STAGING}*"):
            shutil.rmtree(stale, ignore_errors=True)


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2) + "\n"


# ---- checking ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SavedCheck:
    """One saved file against the index: "unchanged", "changed" or "removed", and in words."""

    path: str
    state: str
    sentence: str


def check_saved(directory: Path, saved: SavedPipeline) -> list[SavedCheck]:
    """Each saved file (the YAML and every file it names) against its sha256 in the index."""
    out = []
    seen: set[str] = set()
    for file in (saved.yaml, *saved.files):
        if file.path in seen:
            continue
        seen.add(file.path)
        out.append(_check(directory, file, saved.run))
    return out


def _check(directory: Path, file: SavedFile, run: int) -> SavedCheck:
    path = directory / file.path
    said = f"saved by run {run} ({file.size:,} bytes, sha256 {file.sha256[:16]}, {INDEX})"
    try:
        data = path.read_bytes()
    except OSError:
        return SavedCheck(file.path, "removed", f"removed since it was {said}")
    digest = hashlib.sha256(data).hexdigest()
    if digest == file.sha256:
        return SavedCheck(file.path, "unchanged", f"as it was {said}")
    return SavedCheck(
        file.path,
        "changed",
        f"changed since it was {said}: sha256 {digest[:16]} now, {len(data):,} bytes",
    )
