"""Which process a recorded pid is (Linux /proc): its kernel start time and command line.

A pid alone can be recycled; pid + start time + argv cannot. `sparkops local` signals only a
process that still matches its record, and the batch client believes a local stack record
only while its server matches it.
"""

from __future__ import annotations

from pathlib import Path


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of pid, None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[19])


def proc_start_ticks(pid: int) -> int | None:
    """Kernel start time of a live pid (clock ticks since boot), None if gone or a zombie."""
    stat = proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return None
    return stat[1]


def proc_argv(pid: int) -> list[str] | None:
    """The command line of a pid (/proc/PID/cmdline; never its environment), None if gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode("utf-8", "replace") for arg in raw.split(b"\0") if arg]
