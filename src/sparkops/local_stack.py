"""The stack record of the servers `sparkops local up` started, and its one reader.

`local up` (through `sparkops.local.state`) writes $SPARKOPS_CACHE/local/stack-record.json:
per server its endpoint, served model, start time, and the identity of its process (pid,
kernel start time, command line). A batch job reads it here to record what served it,
without importing the `local` package (which itself runs batch jobs: `sparkops demo`). An
entry counts only while that very process still runs that very command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkops.cache import cache_dir
from sparkops.files import write_atomic
from sparkops.procs import proc_argv, proc_start_ticks

RECORD = "stack-record.json"


def record_path(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "local" / RECORD


def write(servers: list[dict[str, Any]], cache: Path | None = None) -> None:
    """Replace the record (atomically, 0600) with `servers` (endpoint, model, started_at,
    pid, start_ticks); each entry gets the command line its pid runs now. An empty list
    removes it."""
    path = record_path(cache)
    if not servers:
        path.unlink(missing_ok=True)
        return
    entries = [{**server, "command": proc_argv(server["pid"]) or []} for server in servers]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"servers": entries}, indent=2) + "\n")


def find(endpoints: list[str], cache: Path | None = None) -> dict[str, Any] | None:
    """The record of a live `sparkops local up` server behind one of `endpoints`, or None
    (none on record, a record that cannot be read, or a pid that is no longer that server).
    """
    bases = {url.rstrip("/").removesuffix("/v1") for url in endpoints}
    try:
        servers = json.loads(record_path(cache).read_text(encoding="utf-8"))["servers"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    for server in servers if isinstance(servers, list) else []:
        try:
            endpoint, pid = server["endpoint"], int(server["pid"])
            if endpoint not in bases or proc_start_ticks(pid) != server["start_ticks"]:
                continue
        except (TypeError, KeyError, ValueError):
            continue
        argv = proc_argv(pid)
        if not argv or argv != server.get("command"):
            continue
        return {
            "local": True,
            "endpoint": endpoint,
            "model": server.get("model"),
            "started_at": server.get("started_at"),
            "command": argv,
        }
    return None
