"""The one writer of the kit's files: owner-only (0600) unless told otherwise, replaced atomically.

Results, reports, plots, logs and rendered secrets may quote patient-derived text or hold a
key, so every module writes through here instead of its own `os.open`: the mode is set on
the descriptor before any byte lands (a umask or an older, wider file never leaks it), and a
whole-file write goes to a temporary file beside the target and is renamed over it, so a
crash or a full disk leaves the old file or the new one, never a truncated one. `durable`
adds the fsyncs (file, then folder) that files a resumed run relies on need; reports and
plots that can be written again skip them.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
from pathlib import Path
from typing import Any

from sparkops.errors import UserError

PRIVATE = 0o600
# Errors that mean "no room to write".
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class WriteFailed(UserError, OSError):
    """A file could not be written: one line naming the file, the reason in words (a full
    disk, a read-only file system, no permission) and the fix, never a traceback. Still an
    OSError (with its errno), so a caller that words a full disk its own way can."""

    def __init__(self, err: OSError, path: Path) -> None:
        super().__init__(err.errno, err.strerror)
        self.path = path
        self.message = write_failure(err, path)

    def __str__(self) -> str:
        return self.message


def write_failure(err: OSError, path: Path) -> str:
    """Why `path` could not be written, and what to do about it."""
    code = err.errno
    if code in NO_SPACE:
        fix = "free space on that disk (or raise the quota), then run the command again"
    elif code == errno.EROFS:
        return (
            f"cannot write {path}: the file system is read-only; use a folder on a writable "
            "disk (or remount it read-write)"
        )
    elif code in (errno.EACCES, errno.EPERM):
        fix = "fix the folder's owner or mode, or use a folder you can write"
    elif code == errno.EISDIR:
        fix = "move that folder away"
    elif code == errno.ENOENT:
        fix = "create its folder (a symbolic link there may point nowhere)"
    else:
        fix = "check the disk and the folder"
    return f"cannot write {path}: {os.strerror(code) if code else err}; {fix}"


def open_private(path: Path, flags: int, mode: int = PRIVATE) -> int:
    """Open (creating it with `mode`) and return a descriptor; an existing file is narrowed
    to `mode` too, so a results file once created 0644 by hand is 0600 after the next run."""
    fd = os.open(path, flags | os.O_CREAT, mode)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_atomic(
    path: Path, data: str | bytes, *, mode: int = PRIVATE, durable: bool = False
) -> None:
    """Replace `path` with `data` (str is written as UTF-8): temp file, rename.

    On any error the temporary file is removed and the previous `path` (if any) is left as it
    was; an OSError (a full disk, a read-only file system) is raised as `WriteFailed`.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC, mode)
    except OSError as err:
        raise WriteFailed(err, path) from None
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
        os.close(fd)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.close(fd)
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise WriteFailed(err, path) from None
        raise
    if durable:
        fsync_dir(path.parent)


def figure_png(figure: Any, **savefig: Any) -> bytes:
    """A matplotlib figure as PNG bytes, in memory (the one place a figure is saved)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", **savefig)
    return buffer.getvalue()


def write_figure(path: Path, figure: Any, **savefig: Any) -> None:
    """A matplotlib figure as PNG, through `write_atomic` (savefig alone would create 0644)."""
    write_atomic(path, figure_png(figure, **savefig))


def fsync_dir(directory: Path) -> None:
    """Make a rename durable (best effort: some file systems refuse fsync on a folder)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)
