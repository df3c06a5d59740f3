"""The host's own readings, parsed: /proc/meminfo's free memory, /proc/buddyinfo's free blocks by
size, the GPU driver's (NVRM) error lines of the kernel log; and one reading of them while a
job runs (`HostReading`, a line of the job folder's host.jsonl) with its summary for the report
(`HostSummary`). Pure: nothing here reads a file or runs a command.

Two readers share these parsers: the preflight before a day-long job (sparkops.doctor.host,
through preflight.yml's gathered text) and the client's host watch while the job runs
(sparkops.batch.host_watch, reading the files itself). Here, at the bottom of the job side,
because the client, the report and the doctor all read them and none of them may import the
others (pyproject.toml's import contracts).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

# The job folder's file of host readings (batch/host_watch.py writes it, report/host.py reads it).
HOST_FILE = "host.jsonl"
# Free memory in blocks of this size or more is what large allocations can still get (the
# preflight's default sparkops_preflight_fragmentation_block_mib).
HIGH_ORDER_MIB = 2.0
XID = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")
NV_ERR = re.compile(r"\b(NV_ERR_[A-Z0-9_]+)\b")
ALLOCATOR = re.compile(r"\b(_memdesc\w+)")
BUDDY = re.compile(r"^Node\s+(\d+),\s+zone\s+(\S+)\s+((?:\d+\s*)+)$")
MEMINFO = re.compile(r"^([A-Za-z0-9_()]+):\s+(\d+)(?:\s+kB)?\s*$")


@dataclass(frozen=True, slots=True)
class DriverErrors:
    """What the GPU driver (NVRM) logged as errors: Xids and NV_ERR_* codes."""

    xids: Counter[str]
    codes: Counter[str]
    where: Counter[str]  # the allocator functions named beside an NV_ERR (_memdescAllocInternal)

    def __bool__(self) -> bool:
        return bool(self.xids or self.codes)

    def summary(self) -> str:
        codes = [f"{code} x{n}" for code, n in self.codes.most_common()]
        if codes and self.where:
            codes[0] += f" (in {', '.join(sorted(self.where))})"
        return ", ".join(codes + [f"Xid {xid} x{n}" for xid, n in self.xids.most_common()])

    def counts(self) -> dict[str, int]:
        """`{"NV_ERR_NO_MEMORY": 2, "Xid 31": 1}`: what a host reading keeps (no log text)."""
        return {**dict(self.codes), **{f"Xid {xid}": n for xid, n in self.xids.items()}}


def driver_errors(log: str) -> DriverErrors:
    """The NVRM error lines of a kernel log (informational NVRM lines are not errors)."""
    xids: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    where: Counter[str] = Counter()
    for line in log.splitlines():
        if "NVRM" not in line:
            continue
        if match := XID.search(line):
            xids[match.group(1)] += 1
        found = NV_ERR.findall(line)
        codes.update(dict.fromkeys(found, 1))
        if found:
            where.update(ALLOCATOR.findall(line))
    return DriverErrors(xids, codes, where)


def buddy_free(buddyinfo: str) -> dict[int, int]:
    """Free blocks per order, every node and zone summed (/proc/buddyinfo)."""
    free: Counter[int] = Counter()
    for line in buddyinfo.splitlines():
        if match := BUDDY.match(line.strip()):
            for order, count in enumerate(match.group(3).split()):
                free[order] += int(count)
    return dict(free)


def free_bytes(free: dict[int, int], page_size: int, block_mib: float = 0.0) -> int:
    """Bytes free in blocks of `block_mib` or more (0: every free block) from `buddy_free`."""
    block = block_mib * 1024 * 1024
    return sum(
        n * page_size * 2**order for order, n in free.items() if page_size * 2**order >= block
    )


def meminfo_bytes(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes per field ("MemFree:  125535208 kB" -> 128548052992)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if match := MEMINFO.match(line):
            unit = 1024 if line.rstrip().endswith("kB") else 1
            out[match.group(1)] = int(match.group(2)) * unit
    return out


# ---- one reading while a job runs (host.jsonl) and its summary (report.json's "host") ---------
def _number(x: Any) -> float | None:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _counts(x: Any) -> dict[str, int] | None:
    if not isinstance(x, dict):
        return None
    return {str(k): n for k, n in x.items() if _int(n) is not None}


def _names(record: Any) -> list[str]:
    return [f.name for f in fields(record)]


def _texts(x: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in x.items()} if isinstance(x, dict) else {}


@dataclass(frozen=True, slots=True)
class HostReading:
    """The host while the job ran, at one moment (one line of host.jsonl).

    Bytes throughout; None where the source could not be read (`unknown` says why, in the
    first reading of a run that found it so). `nvrm`: the GPU driver's errors and Xids logged
    since the previous reading of the run (the first: since the run started), by code; `{}`
    none. `containers`: the serving container's Docker restart count and last start, by
    name. `done`: records finished at that moment, to place the reading on the job's timeline.
    """

    t: float
    run: int
    host: str
    done: int | None
    mem_available: int | None
    mem_free: int | None
    high_order_free: int | None
    disk_free: int | None
    nvrm: dict[str, int] | None = None
    containers: dict[str, dict[str, Any]] | None = None
    unknown: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "t": self.t,
            "run": self.run,
            "host": self.host,
            "done": self.done,
            "mem_available": self.mem_available,
            "mem_free": self.mem_free,
            "high_order_free": self.high_order_free,
            "disk_free": self.disk_free,
            "nvrm": self.nvrm,
            "containers": self.containers,
        }
        if self.unknown:
            data["unknown"] = self.unknown
        return data

    @classmethod
    def from_json(cls, obj: Any) -> HostReading | None:
        """A line read back leniently; None when it has no time (nothing can place it)."""
        if not isinstance(obj, dict) or (t := _number(obj.get("t"))) is None:
            return None
        containers = obj.get("containers")
        return cls(
            float(t),
            _int(obj.get("run")) or 0,
            str(obj.get("host") or ""),
            _int(obj.get("done")),
            _int(obj.get("mem_available")),
            _int(obj.get("mem_free")),
            _int(obj.get("high_order_free")),
            _int(obj.get("disk_free")),
            _counts(obj.get("nvrm")),
            {str(k): v for k, v in containers.items() if isinstance(v, dict)}
            if isinstance(containers, dict)
            else None,
            _texts(obj.get("unknown")),
        )


@dataclass(frozen=True, slots=True)
class HostRow:
    """One row of the report's host table: a reading placed on the job's timeline, with what
    had happened by then (driver errors and container restarts since the job's first
    reading)."""

    at_s: float
    run: int
    done: int | None
    mem_available: int | None
    mem_free: int | None
    high_order_free: int | None
    disk_free: int | None
    nvrm: int | None
    restarts: int | None

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _names(self)}

    @classmethod
    def from_json(cls, obj: Any) -> HostRow:
        get = obj.get if isinstance(obj, dict) else {}.get
        return cls(
            _number(get("at_s")) or 0.0,
            _int(get("run")) or 0,
            *(_int(get(name)) for name in _names(cls)[2:]),
        )


@dataclass(frozen=True, slots=True)
class HostSummary:
    """The host while the job ran (report/host.py summarises host.jsonl and the timeline).

    Lowest free memory, free memory in large blocks (fragmentation) first/lowest/last, the
    lowest disk space left under the job folder, the GPU driver's errors over the job by code
    (None: the kernel log could not be read), the serving container's restarts seen by Docker
    (None: not readable), each endpoint's restarts seen in its /metrics counters (a counter
    that went down), the sources that could not be read and why, and a few readings spread
    over the job (`rows`)."""

    host: str | None
    readings: int
    mem_available_min: int | None = None
    mem_free_min: int | None = None
    high_order_free_first: int | None = None
    high_order_free_min: int | None = None
    high_order_free_last: int | None = None
    disk_free_min: int | None = None
    disk_free_last: int | None = None
    nvrm: dict[str, int] | None = None
    container_restarts: int | None = None
    server_restarts: dict[str, int] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    rows: tuple[HostRow, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in _names(self)}
        data["rows"] = [row.as_dict() for row in self.rows]
        return data

    @classmethod
    def from_json(cls, obj: Any) -> HostSummary:
        get = obj.get if isinstance(obj, dict) else {}.get
        rows, host = get("rows"), get("host")
        sizes = _names(cls)[2:9]  # the byte figures, each an int or None
        return cls(
            host=host if isinstance(host, str) else None,
            readings=_int(get("readings")) or 0,
            **{name: _int(get(name)) for name in sizes},
            nvrm=_counts(get("nvrm")),
            container_restarts=_int(get("container_restarts")),
            server_restarts=_counts(get("server_restarts")) or {},
            unknown=_texts(get("unknown")),
            rows=tuple(HostRow.from_json(r) for r in rows if isinstance(r, dict))
            if isinstance(rows, list)
            else (),
        )
