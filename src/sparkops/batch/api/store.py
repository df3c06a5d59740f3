"""The server's state on disk: one root folder, no database.

    ROOT/lock                          flock: one server per root (the holder's pid inside)
    ROOT/files/FILE_ID.jsonl           a file's bytes: an upload, a batch's output or error file
    ROOT/files/FILE_ID.json            what is kept of it (StoredFile), written after the bytes:
                                       a file exists once its .json does
    ROOT/batches/BATCH_ID/batch.json   the batch (BatchState), replaced atomically
    ROOT/batches/BATCH_ID/input.jsonl  its input: a hard link to the upload, so deleting the
                                       upload (DELETE /v1/files) leaves the running job its input
    ROOT/batches/BATCH_ID/job/         its kit job folder: `sparkops batch status/report` read it
    ROOT/batches/BATCH_ID/run.log      what its `sparkops batch run` printed (counts and causes,
                                       never record text)

Folders are 0700 and files 0600 (records are patient data). Every file is written beside its
target and renamed over it with fsyncs (`files.write_atomic`), so a kill or a power cut leaves
the old state or the new one, never half of one; on open, what an interrupted write left is
removed: temporary files, and a batch folder without batch.json (a create that never answered).
Ids are checked against their pattern before they become a path, so a request cannot name a
file outside the root.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import uuid
from pathlib import Path

from pydantic import ValidationError

from sparkops.batch.api.objects import BatchState, FilePurpose, StoredFile
from sparkops.errors import UserError
from sparkops.files import PRIVATE, fsync_dir, open_private, write_atomic
from sparkops.jobdir.folder import lock_holder

LOCK = "lock"  # the same name a job folder's lock has, so jobdir's lock_holder reads it
BATCH_JSON = "batch.json"
TEMP_PREFIX = ".upload-"
FILE_ID = re.compile(r"file-[A-Za-z0-9][A-Za-z0-9-]{0,95}")
BATCH_ID = re.compile(r"batch_[A-Za-z0-9]{1,96}")


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


def new_batch_id() -> str:
    return f"batch_{uuid.uuid4().hex}"


def output_file_ids(batch_id: str) -> tuple[str, str]:
    """A batch's output and error file ids: fixed by the batch, so finishing it again after a
    crash writes the same files, never a second pair."""
    tail = batch_id.removeprefix("batch_")
    return f"file-{tail}-output", f"file-{tail}-errors"


class Store:
    """The root of one server: its files and its batch folders (see the module docstring)."""

    def __init__(self, root: Path, lock_fd: int) -> None:
        self.root = root
        self.files = root / "files"
        self.batches = root / "batches"
        self._lock_fd: int | None = lock_fd

    @classmethod
    def open(cls, root: Path) -> Store:
        """Create or open `root` and lock it (a second server on it is refused naming the
        first one's pid), then clear what interrupted writes left."""
        root = root.absolute()
        for folder in (root, root / "files", root / "batches"):
            _private_dir(folder)
        fd = _lock(root)
        store = cls(root, fd)
        store._clear_leftovers()
        return store

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- files ------------------------------------------------------------------------------
    def temp_path(self) -> Path:
        """Where an upload or an output file is written before it is published."""
        return self.files / f"{TEMP_PREFIX}{uuid.uuid4().hex}.tmp"

    def data_path(self, file_id: str) -> Path:
        return self.files / f"{file_id}.jsonl"

    def publish(self, temp: Path, file_id: str, filename: str, purpose: FilePurpose) -> StoredFile:
        """Make the written (and fsynced) `temp` the file `file_id`: bytes first, then its
        .json, so a crash in between leaves no file that lists bytes it lacks. The bytes
        are made 0600 whoever wrote them."""
        os.chmod(temp, PRIVATE)
        stored = StoredFile(
            id=file_id,
            size=temp.stat().st_size,
            created_at=int(temp.stat().st_mtime),
            filename=filename,
            purpose=purpose,
        )
        os.replace(temp, self.data_path(file_id))
        fsync_dir(self.files)
        write_atomic(self._meta_path(file_id), stored.model_dump_json(), durable=True)
        return stored

    def file(self, file_id: str) -> StoredFile | None:
        """The file `file_id`, or None (no such file, or an id that is no file id)."""
        if not FILE_ID.fullmatch(file_id):
            return None
        try:
            return StoredFile.model_validate_json(self._meta_path(file_id).read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as err:
            raise UserError(
                f"{self._meta_path(file_id)} is unreadable ({type(err).__name__}); move it "
                "and its .jsonl out of the root"
            ) from None

    def delete_file(self, file_id: str) -> bool:
        """Remove a file (its .json first, so it is gone as a whole); False if there was none.
        A batch that runs on it keeps its own link to the bytes."""
        if self.file(file_id) is None:
            return False
        self._meta_path(file_id).unlink(missing_ok=True)
        self.data_path(file_id).unlink(missing_ok=True)
        fsync_dir(self.files)
        return True

    def _meta_path(self, file_id: str) -> Path:
        return self.files / f"{file_id}.json"

    # ---- batches ----------------------------------------------------------------------------
    def batch_dir(self, batch_id: str) -> Path:
        if not BATCH_ID.fullmatch(batch_id):
            raise ValueError(f"not a batch id: {batch_id!r}")
        return self.batches / batch_id

    def job_dir(self, batch_id: str) -> Path:
        return self.batch_dir(batch_id) / "job"

    def input_path(self, batch_id: str) -> Path:
        return self.batch_dir(batch_id) / "input.jsonl"

    def log_path(self, batch_id: str) -> Path:
        return self.batch_dir(batch_id) / "run.log"

    def begin_batch(self, batch_id: str, file_id: str) -> Path:
        """The new batch's folder with its input linked in (copied where links fail); its
        path. The batch exists only once `save_batch` wrote its batch.json."""
        folder = self.batch_dir(batch_id)
        folder.mkdir(mode=0o700)
        target = self.input_path(batch_id)
        try:
            os.link(self.data_path(file_id), target)
        except OSError:  # a file system without hard links: a private copy
            temp = self.temp_path()
            shutil.copyfile(self.data_path(file_id), temp)
            os.chmod(temp, PRIVATE)
            os.replace(temp, target)
        fsync_dir(folder)
        return target

    def abandon_batch(self, batch_id: str) -> None:
        """Remove a batch folder whose create was refused (nothing ran in it)."""
        shutil.rmtree(self.batch_dir(batch_id), ignore_errors=True)

    def save_batch(self, state: BatchState) -> None:
        path = self.batch_dir(state.id) / BATCH_JSON
        write_atomic(path, json.dumps(state.model_dump(mode="json"), indent=2), durable=True)

    def load_batches(self) -> list[BatchState]:
        """Every batch under the root. A batch.json that does not read is refused with the
        fix: guessing its state could run a batch twice or lose a cancel."""
        found = []
        for folder in sorted(self.batches.iterdir()):
            if not BATCH_ID.fullmatch(folder.name) or not folder.is_dir():
                continue
            path = folder / BATCH_JSON
            if not path.exists():  # a create that never answered: nothing ran in it
                shutil.rmtree(folder, ignore_errors=True)
                continue
            try:
                state = BatchState.model_validate_json(path.read_bytes())
            except (OSError, ValidationError) as err:
                raise UserError(
                    f"{path} is unreadable or corrupt ({type(err).__name__}); move {folder} "
                    "out of the root (its job folder stays readable by `sparkops batch "
                    "status`), then start the server again"
                ) from None
            if state.id != folder.name:
                raise UserError(
                    f"{path} names batch {state.id}, not {folder.name}; move {folder} out of "
                    "the root, then start the server again"
                )
            found.append(state)
        return found

    def _clear_leftovers(self) -> None:
        for folder in (self.files, *self.batches.iterdir()):
            if not folder.is_dir():
                continue
            for path in folder.glob(".*.tmp"):
                path.unlink(missing_ok=True)


def _private_dir(folder: Path) -> None:
    """Create `folder` 0700, or check an existing one is a folder we can write."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except FileExistsError:
        raise UserError(f"--root {folder} is a file, not a folder; pass a folder") from None
    except OSError as err:
        reason = "the file system is read-only" if err.errno == errno.EROFS else err.strerror
        raise UserError(f"cannot create {folder} ({reason}); pass a --root you can write") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {folder}; pass a --root you can write")
    os.chmod(folder, 0o700)


def _lock(root: Path) -> int:
    """Hold ROOT/lock for the server's life: two servers on one root would each run the
    same queued batch. The kernel drops the lock however the server dies."""
    fd = open_private(root / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = lock_holder(root)
        who = f"pid {holder}" if holder else "another process"
        raise UserError(
            f"--root {root} is served by another sparkops batch serve ({who}); stop it, or "
            "pass another --root"
        ) from None
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
