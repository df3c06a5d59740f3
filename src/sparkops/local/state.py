"""The record of servers `sparkops local up` started: what `status` reports and `down` stops.

One small JSON file under $SPARKOPS_CACHE/local/, owner-only, replaced atomically, and guarded
by a lock so two commands run at once cannot lose each other's entries. Saving it also writes
the stack record a batch job reads (sparkops.local_stack): the client never imports `local`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from sparkops import local_stack
from sparkops.files import open_private, write_atomic
from sparkops.local import paths
from sparkops.local.server import Server

STATE_FILE = "servers.json"


def state_path(cache: Path | None = None) -> Path:
    return paths.state_dir(cache) / STATE_FILE


@contextlib.contextmanager
def locked(cache: Path | None = None) -> Iterator[None]:
    """Hold an exclusive lock on the state for a read-modify-write."""
    directory = paths.state_dir(cache)
    directory.mkdir(parents=True, exist_ok=True)
    fd = open_private(directory / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def load(cache: Path | None = None) -> list[Server]:
    """Servers on record (possibly no longer running); [] when none were started."""
    try:
        data = json.loads(state_path(cache).read_text())
    except FileNotFoundError:
        return []
    except ValueError:
        return []  # a corrupt record protects nothing: `down` then has nothing to signal
    return [Server.from_dict(item) for item in data.get("servers", [])]


def save(servers: list[Server], cache: Path | None = None) -> None:
    """Replace the record (atomically, 0600) and the stack record batch jobs read
    (sparkops.local_stack); an empty list removes both."""
    local_stack.write(
        [
            {"endpoint": s.base_url, "model": s.model, "started_at": s.started_at,
             "pid": s.pid, "start_ticks": s.start_ticks}
            for s in servers
        ],
        cache,
    )  # fmt: skip
    path = state_path(cache)
    if not servers:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"servers": [s.to_dict() for s in servers]}, indent=2) + "\n")
