"""The Spark's own failure modes before a day-long job: the GPU driver's errors since boot,
physical-memory fragmentation, uptime, what CUDA can allocate against the plan. Pure functions
on captured text (issue 39 item 2).

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
- CUDA on a GB10 is handed about 101-102 GiB of the 121.7 GiB the OS sees. The profiles are
  checked against the inventory's GPU memory budget (vllm_serving_gpu_memory_gib); a budget
  above what CUDA can allocate lets through a KV cache the host cannot hold. What CUDA can
  allocate: nvidia-smi's memory.total where the GPU reports one, else MemAvailable plus what
  this stack's vLLM holds already.

The playbook gathers the text (journalctl -k -b, else dmesg; /proc/buddyinfo after the page
cache drop and a compaction; /proc/uptime; the page size); nothing here reads a file. The
parsers are sparkops.metrics.host's, shared with the job's host watch while it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkops.doctor.checks import Check, warn_or_pass
from sparkops.metrics.host import DriverErrors as DriverErrors
from sparkops.metrics.host import buddy_free as buddy_free
from sparkops.metrics.host import driver_errors as driver_errors
from sparkops.metrics.host import free_bytes
from sparkops.plan.host_readings import parse_compute_apps, parse_gpu_total, parse_meminfo
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


# A GB10's unified memory: CUDA is handed about 101-102 GiB of the 121.7 GiB the OS sees.
CUDA_ON_GB10 = "a GB10 hands CUDA about 101-102 GiB of the 121.7 GiB its OS sees"


@dataclass(frozen=True, slots=True)
class CudaMemory:
    """What CUDA can allocate on this host now, and where the figure comes from. `firm`:
    False when this stack's running vLLM holds memory nvidia-smi does not report (then the
    figure is a lower bound)."""

    bytes: int
    source: str
    firm: bool = True


def cuda_memory(
    gpu_total: str, meminfo: str, compute_apps: str, own_pids: frozenset[int], serving: bool
) -> CudaMemory | None:
    """nvidia-smi's memory.total where the GPU reports one (a discrete GPU; WSL2: what the
    NVIDIA app set aside); else, on unified memory ("[N/A]" on a GB10), what the kernel can
    hand out (MemAvailable, after the page cache drop) plus what this stack's vLLM holds
    already (nvidia-smi's compute apps in its container). None: no figure at all."""
    total = parse_gpu_total(gpu_total)
    if total is not None:
        return CudaMemory(total, "nvidia-smi memory.total")
    available = parse_meminfo(meminfo).get("MemAvailable")
    if available is None:
        return None
    own = [p for p in parse_compute_apps(compute_apps) if p.pid in own_pids]
    held = sum(p.used_bytes or 0 for p in own)
    unknown = serving and (not own or any(p.used_bytes is None for p in own))
    source = "MemAvailable"
    if held:
        source += f" + {held / GIB:.1f} GiB this stack's vLLM holds"
    elif unknown:
        source += " alone: nvidia-smi does not say what the running vLLM holds"
    return CudaMemory(available + held, source, firm=not unknown)


def cuda_allocatable(found: CudaMemory | None, budget_gib: float | None) -> Check:
    """The plan's GPU memory budget (vllm_serving_gpu_memory_gib: the profiles' weights and KV
    cache are checked against it) is no more than CUDA can allocate here. Above a firm
    figure: refused (a plan that hands vLLM memory CUDA cannot get is how a GB10 hangs);
    above a lower bound: a warning; no budget planned: the figure alone."""
    name = "cuda_allocatable"
    if found is None:
        return warn_or_pass(
            name,
            False,
            "cannot tell what CUDA can allocate: nvidia-smi reports no GPU memory and "
            "/proc/meminfo has no MemAvailable",
            "run preflight on the Spark itself",
        )
    have = found.bytes / GIB
    if budget_gib is None:
        return Check(
            name,
            True,
            f"CUDA can allocate about {have:.1f} GiB here ({found.source}); no GPU memory "
            "budget is planned (vllm_serving_gpu_memory_gib unset)",
        )
    detail = (
        f"the plan's GPU memory budget is {budget_gib:g} GiB (vllm_serving_gpu_memory_gib), "
        f"CUDA can allocate about {have:.1f} GiB here ({found.source})"
    )
    if budget_gib <= have:
        return Check(name, True, detail)
    fix = (
        f"set vllm_serving_gpu_memory_gib to {int(have)} or less in the inventory and redeploy "
        f"(deploy.yml checks the profile's weights and KV cache against it; {CUDA_ON_GB10})"
    )
    if not found.firm:
        return warn_or_pass(name, False, detail, fix)
    return Check(name, False, detail, fix)
