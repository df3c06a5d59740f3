"""What a host's own tools print, read: /proc/meminfo, nvidia-smi's GPU memory and processes,
and the kernel's name for a WSL2 host. Pure parsing, no I/O: the memory guard (plan/guard.py)
and the doctor's checks read the same facts from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sparkops.plan.memory import MIB

HostKind = Literal["native", "wsl2"]


@dataclass(frozen=True)
class GpuProcess:
    """One line of `nvidia-smi --query-compute-apps=pid,process_name,used_memory`."""

    pid: int
    name: str
    used_bytes: int | None  # None: the driver did not report it ([N/A])


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes per field ("MemTotal:  125535208 kB" -> 128548052992)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_()]+):\s+(\d+)(?:\s+kB)?\s*$", line)
        if match:
            unit = 1024 if line.rstrip().endswith("kB") else 1
            out[match.group(1)] = int(match.group(2)) * unit
    return out


def _mib(value: str) -> int | None:
    value = value.strip().removesuffix("MiB").strip()
    return int(float(value) * MIB) if re.fullmatch(r"\d+(\.\d+)?", value) else None


def parse_compute_apps(text: str) -> tuple[GpuProcess, ...]:
    """`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits`
    (a header line or units are tolerated; "[N/A]" memory is kept as unknown)."""
    procs = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue  # header, "No running processes found", blank
        procs.append(GpuProcess(int(parts[0]), ",".join(parts[1:-1]), _mib(parts[-1])))
    return tuple(procs)


def parse_gpu_total(text: str) -> int | None:
    """`nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits`: the first GPU's
    memory in bytes, or None for "[N/A]" (a GB10's unified memory) or no output."""
    for line in text.splitlines():
        value = _mib(line)
        if value:
            return value
    return None


def host_kind(osrelease: str) -> HostKind:
    """WSL2 kernels name themselves "...-microsoft-standard-WSL2"."""
    return "wsl2" if "microsoft" in osrelease.lower() else "native"
