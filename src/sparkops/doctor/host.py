"""The Spark's own failure modes before a day-long job: the GPU driver's errors since boot,
physical-memory fragmentation, uptime. Pure functions on captured text (issue 39 item 2).

Why these three (the public reports, docs/deploy.md "Before a day-long job"):

- GB10 hosts stop whole under unified-memory pressure, with `NVRM: ... NV_ERR_NO_MEMORY
  (_memdescAllocInternal)` in the kernel log and no OOM kill, no panic; only a power cycle
  brings them back (NVIDIA/open-gpu-kernel-modules#1358: one of three identical units stopped
  14 times in 4 days). A driver that already failed an allocation, or reported an Xid (a GPU
  error), since this boot is refused: reboot first.
- A cause the reports name is fragmentation after long uptime: after about 7 days
  /proc/buddyinfo showed no free high-order blocks, and dropping caches and compacting did not
  bring them back; a reboot did (FujitsuPolycom/sparkring#173). Too little free memory in
  blocks of `block_mib` or more is refused; an uptime past `max_uptime_days` is a warning.

The playbook gathers the text (journalctl -k -b, else dmesg; /proc/buddyinfo after the page
cache drop and a compaction; /proc/uptime; the page size); nothing here reads a file. The
parsers are sparkops.metrics.host's, shared with the job's host watch while it runs.
"""

from __future__ import annotations

from sparkops.doctor.checks import Check, warn_or_pass
from sparkops.metrics.host import DriverErrors as DriverErrors
from sparkops.metrics.host import buddy_free as buddy_free
from sparkops.metrics.host import driver_errors as driver_errors
from sparkops.metrics.host import free_bytes
from sparkops.plan.memory import GIB

REBOOT = (
    "reboot the Spark before a day-long job (power it off and on if it does not come back): "
    "the reports saw it hang under memory pressure otherwise (docs/deploy.md, 'Before a "
    "day-long job')"
)


def gpu_driver_errors(source: str, log: str, unreadable: str = "") -> Check:
    """No NVRM error and no Xid in the kernel log since this boot.

    `source` is where the log came from ("journalctl" or "dmesg"), "" when neither could be
    read (`unreadable` says why): then a warning, not a pass."""
    name = "gpu_driver_errors"
    if not source:
        detail = f"could not read the kernel log since boot ({unreadable or 'no output'})"
        fix = "run preflight as root on the Spark (become), where journalctl -k or dmesg reads it"
        return warn_or_pass(name, False, detail, fix)
    found = driver_errors(log)
    if not found:
        return Check(name, True, f"no NVRM error or Xid since boot ({source})")
    detail = f"since boot the GPU driver logged {found.summary()} ({source})"
    return Check(name, False, detail, REBOOT)


def memory_fragmentation(buddyinfo: str, page_size: int, block_mib: float, min_gib: float) -> Check:
    """Enough free memory in blocks of `block_mib` or more (after the drop and a compaction)."""
    name = "memory_fragmentation"
    free = buddy_free(buddyinfo)
    if not free or page_size <= 0:
        return warn_or_pass(
            name, False, "/proc/buddyinfo could not be read", "run preflight on the Spark itself"
        )
    large = free_bytes(free, page_size, block_mib)
    total = free_bytes(free, page_size)
    detail = (
        f"{large / GIB:.1f} GiB of {total / GIB:.1f} GiB free is in blocks of {block_mib:g} MiB "
        f"or more (needs {min_gib:g})"
    )
    return Check(name, large / GIB >= min_gib, detail, "" if large / GIB >= min_gib else REBOOT)


def uptime_days(proc_uptime: str) -> float | None:
    try:
        return float(proc_uptime.split()[0]) / 86400
    except (IndexError, ValueError):
        return None


def host_uptime(proc_uptime: str, max_days: float) -> Check:
    """A warning past `max_days` of uptime: fragmentation grows with it (the reports: ~7 days)."""
    days = uptime_days(proc_uptime)
    if days is None:
        return warn_or_pass(
            "host_uptime", False, "/proc/uptime could not be read", "run preflight on the Spark"
        )
    detail = f"up {days:.1f} days (warns past {max_days:g})"
    return warn_or_pass("host_uptime", days <= max_days, detail, REBOOT)
