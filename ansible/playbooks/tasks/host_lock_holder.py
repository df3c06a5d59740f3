#!/usr/bin/env python3
"""The process that holds a host's sparkops lock for one run (tasks/host_lock.yml).

Usage: host_lock_holder.py LOCK ID DESCRIPTION WAIT GRACE HEARTBEAT_GRACE

The run's `sparkops_host_lock` action starts it on the host, detached, and then waits on the
controller: every 2 s one command there touches the run's heartbeat file, LOCK.wait.ID, and
reads LOCK.owner. This process takes the flock on LOCK once it is free, writes LOCK.owner (its
pid, ID, DESCRIPTION, the time it took the lock) and holds the lock while LOCK.owner names ID:

- until the run has seen that it holds the lock (it then removes its heartbeat file), only
  while the heartbeat is fresher than HEARTBEAT_GRACE seconds;
- after that, while LOCK.owner itself was touched within GRACE seconds (each play of the run
  renews it, tasks/host_lock_renew.yml; tasks/host_unlock.yml removes it at the end).

The heartbeat is what a run killed while it waited leaves stale (issue 43 item 4). Its holder
used to be an `flock --wait` that took the lock whenever it came free, after the run was gone,
and held it for the whole grace: the next run was refused as busy with a run that had ended.
Now a holder whose run's heartbeat is stale never takes the lock and exits; one that took it
in the moment its run died lets go within HEARTBEAT_GRACE seconds. A holder that has not got
the lock after WAIT seconds exits (status 75), as does one whose run gave up waiting (it
removes its heartbeat file).

Standard library only: it runs with the host's own python3.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import time
from dataclasses import dataclass
from types import FrameType

POLL_S = 2.0
GAVE_UP = 75  # flock(1)'s --conflict-exit-code in the shell holder this replaced


@dataclass(frozen=True)
class Run:
    """The run this process holds the lock for, and how long it may go quiet."""

    lock: str
    id: str
    description: str
    wait_s: float
    grace_s: float
    heartbeat_grace_s: float

    @property
    def owner(self) -> str:
        return f"{self.lock}.owner"

    @property
    def heartbeat(self) -> str:
        return f"{self.lock}.wait.{self.id}"


def age(path: str) -> float | None:
    """Seconds since `path` was last modified (None: there is no such file)."""
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return None


def fresh(path: str, seconds: float) -> bool:
    found = age(path)
    return found is not None and found < seconds


def owner_id(run: Run) -> str:
    """The run id LOCK.owner names ("" when there is none)."""
    try:
        with open(run.owner, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ""
    return lines[1] if len(lines) > 1 else ""


def still_waiting(run: Run) -> bool:
    """The run that started this process waits for the lock: its heartbeat is fresh."""
    return fresh(run.heartbeat, run.heartbeat_grace_s)


def take(run: Run, fd: int) -> bool:
    """Take the flock once it is free and the run still waits for it; False when the run is
    gone (a stale heartbeat), gave up (no heartbeat file) or WAIT seconds passed."""
    deadline = time.monotonic() + run.wait_s
    while time.monotonic() < deadline and still_waiting(run):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            time.sleep(POLL_S)
            continue
        if still_waiting(run):  # the run may have gone while the flock was being taken
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def write_owner(run: Run) -> None:
    """LOCK.owner, whole or not at all: pid, run id, description, when the lock was taken."""
    text = f"{os.getpid()}\n{run.id}\n{run.description}\n{int(time.time())}\n"
    partial = f"{run.owner}.{os.getpid()}"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(partial, 0o644)
    os.replace(partial, run.owner)


def run_lives(run: Run) -> bool:
    """While the lock is held: the run still owns it and shows it lives."""
    if owner_id(run) != run.id:
        return False  # released (host_unlock.yml), or ended by a later run
    if os.path.exists(run.heartbeat):  # the run has not yet seen that it holds the lock
        return still_waiting(run)
    return fresh(run.owner, run.grace_s)


def let_go(run: Run) -> None:
    """Remove this run's heartbeat, and the owner file if it still names this run."""
    for path in (run.heartbeat, *((run.owner,) if owner_id(run) == run.id else ())):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def hold(run: Run) -> int:
    fd = os.open(run.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not take(run, fd):
            return GAVE_UP
        write_owner(run)
        while run_lives(run):
            time.sleep(POLL_S)
        return 0
    finally:
        let_go(run)
        os.close(fd)


def _stop(signum: int, frame: FrameType | None) -> None:
    """`kill PID` (the fix the refusal names) ends the hold cleanly."""
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    lock, run_id, description, wait_s, grace_s, heartbeat_grace_s = argv[1:7]
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the session that started it may end
    run = Run(lock, run_id, description, float(wait_s), float(grace_s), float(heartbeat_grace_s))
    return hold(run)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
