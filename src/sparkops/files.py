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
import io
import os
from pathlib import Path
from typing import Any

PRIVATE = 0o600


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
    was; the OSError (a full disk: ENOSPC) propagates for the caller to word.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC, mode)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_figure(path: Path, figure: Any, **savefig: Any) -> None:
    """A matplotlib figure as PNG, through `write_atomic` (savefig alone would create 0644)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", **savefig)
    write_atomic(path, buffer.getvalue())


def fsync_dir(directory: Path) -> None:
    """Make a rename durable (best effort: some file systems refuse fsync on a folder)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)
