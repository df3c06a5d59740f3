"""One run per job directory: an exclusive flock on DIR/lock, which holds the runner's pid.

Two runs on one directory would each read the same results.jsonl at start and then both send
every unfinished record: duplicates. The kernel drops a flock when its process dies, however
it dies (kill -9 included), so a lock left behind never needs clearing by hand: the next run
simply takes it. The lock file itself stays (deleting it would let two runs lock two
different files of the same name).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from sparkops.batch.durable import stop_on_full_disk
from sparkops.batch.jobdir import LOCK, ensure_job_dir
from sparkops.errors import UserError
from sparkops.files import open_private


class JobLock:
    """The held lock of one job directory; `release()` (or leaving the `with`) frees it."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Free the lock (closing the file drops the flock); safe to call twice."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JobLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_job_dir(directory: Path) -> JobLock:
    """Create or check the job directory and lock it, or refuse naming the holder's pid."""
    ensure_job_dir(directory)
    path = directory / LOCK
    try:
        fd = open_private(path, os.O_RDWR)
    except OSError as err:  # a read-only or foreign folder: one line naming it
        raise stop_on_full_disk(err, path) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock_holder(directory) or _read_pid(fd)
        os.close(fd)
        who = f"pid {holder}" if holder else "a process that has not written its pid yet"
        raise UserError(
            f"{directory} is in use by another sparkops batch run ({who}); wait for it to "
            "finish or stop it, then run again (it resumes), or use another --out DIR"
        ) from None
    except OSError as err:
        os.close(fd)
        raise UserError(f"cannot lock {path} ({err.strerror}); put --out on a local disk") from None
    with contextlib.suppress(OSError):  # the pid is for people; a full disk must not stop here
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return JobLock(directory, fd)


def lock_holder(directory: Path) -> int | None:
    """The pid holding DIR/lock now, from the kernel's lock table (Linux /proc/locks).

    Read-only (taking the lock to test it could make a run starting at that moment fail),
    and right even when the pid in the file is stale. None when unlocked or unknown.
    """
    try:
        st = (directory / LOCK).stat()
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    dev_ino = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 8824 fe:00:2179110 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == dev_ino:
            with contextlib.suppress(ValueError):
                return int(fields[4])
    return None


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    return None
