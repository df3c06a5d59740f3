"""While the job runs: the host's own failure modes, read into the job folder (host.jsonl).

A GB10 that hangs under unified-memory pressure leaves no trace in the job's own files, and
what led up to it (free memory falling, large free blocks gone, the GPU driver's
`NV_ERR_NO_MEMORY`, the serving container restarting, the disk filling) is what the operator
needs on Monday. So every `HOST_INTERVAL_S` the sampler (batch/sampler.py) takes one reading of
this host: MemAvailable and MemFree (/proc/meminfo), free memory in blocks of 2 MiB or more
(/proc/buddyinfo: fragmentation), disk free under the job folder, and, when the job runs on the
Spark that serves it (the deploy's stack record given, as batch.yml does), the GPU driver's
errors and Xids logged since the previous reading (`journalctl --dmesg`) and the serving
container's restarts (`docker inspect`). The report shows them beside the job's timeline
(report/host.py).

Why the client's own sampler and not a timer unit: it runs exactly while the job runs and
on every host the job runs on (no unit to install, enable and remove per job, none on a host
without systemd), it writes into the job folder as the job's one writer under the job's lock,
and its readings carry the job's progress at that moment. What it cannot read as the job
user (the system journal needs the systemd-journal group, Docker its socket) is "unknown",
said in one line per run, never a failed job; a reading that cannot be written is a gap.

Every source is injectable (the /proc paths, the page size, the kernel-log and container
readers, the clocks), so the tests read fixture files and stand-ins.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.errors import JobStopped
from sparkops.jobdir import folder, serving_lines
from sparkops.jobdir.durable import append_json
from sparkops.metrics.host import (
    HIGH_ORDER_MIB,
    HostReading,
    buddy_free,
    driver_errors,
    free_bytes,
    meminfo_bytes,
)

HOST_INTERVAL_S = 60.0
PROBE_TIMEOUT_S = 10.0
# The compose service the serving stack's vLLM runs as (templates/serving/compose.yml.j2).
VLLM_SERVICE_LABEL = "com.docker.compose.service=vllm"
# What journalctl says, on stderr, when this user may not read the system journal, and when
# there is no journal to read (a container without journald).
NO_JOURNAL_ACCESS = ("not seeing messages", "insufficient permissions")
NO_JOURNAL = "No journal files were found"


class Unreadable(Exception):
    """A source that could not be read this time; its message says why, in a few words."""


# (since: a Unix time, cursor: where the last read ended or None) -> (the log text, the cursor
# to go on from). Raises Unreadable.
KernelLogReader = Callable[[float, str | None], tuple[str, str | None]]
# () -> {container name: {"restarts": Docker's RestartCount, "started": State.StartedAt}}.
ContainerReader = Callable[[], dict[str, dict[str, Any]]]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise Unreadable(f"{argv[0]} not found") from None
    except (OSError, subprocess.TimeoutExpired) as err:
        raise Unreadable(f"{argv[0]}: {err}") from None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no output")


def journal_kernel_log(
    since: float, cursor: str | None, journalctl: str = "journalctl"
) -> tuple[str, str | None]:
    """The kernel's messages after `cursor` (the first read: since `since`), and the cursor
    to go on from; journald keeps them across a reboot, so a resumed job reads its own."""
    where = [f"--after-cursor={cursor}"] if cursor else [f"--since=@{int(since)}"]
    done = _run([journalctl, "--dmesg", "--no-pager", "--show-cursor", "--output=short", *where])
    if any(words in done.stderr for words in NO_JOURNAL_ACCESS):
        raise Unreadable(
            "journalctl: this user may not read the system journal (add it to the "
            "systemd-journal group)"
        )
    if NO_JOURNAL in done.stderr + done.stdout:
        raise Unreadable("journalctl: this host keeps no journal")
    if done.returncode != 0:
        raise Unreadable(f"journalctl: {_first_line(done.stderr)}")
    text, _, tail = done.stdout.rpartition("-- cursor: ")
    if not _:  # no entry since: the same cursor goes on
        return done.stdout, cursor
    return text, tail.strip() or cursor


def docker_containers(docker: str = "docker") -> dict[str, dict[str, Any]]:
    """The serving stack's vLLM container(s) by name: Docker's restart count and last start."""
    listed = _run([docker, "ps", "--all", "--quiet", "--filter", f"label={VLLM_SERVICE_LABEL}"])
    if listed.returncode != 0:
        raise Unreadable(f"docker: {_first_line(listed.stderr)}")
    ids = listed.stdout.split()
    if not ids:
        return {}
    fmt = "{{.Name}}\t{{.RestartCount}}\t{{.State.StartedAt}}"
    shown = _run([docker, "inspect", "--format", fmt, *ids])
    if shown.returncode != 0:
        raise Unreadable(f"docker: {_first_line(shown.stderr)}")
    found: dict[str, dict[str, Any]] = {}
    for line in shown.stdout.splitlines():
        name, _, rest = line.partition("\t")
        count, _, started = rest.partition("\t")
        if name:
            restarts = int(count) if count.strip().isdigit() else None
            found[name.lstrip("/")] = {"restarts": restarts, "started": started.strip()}
    return found


def _stderr(text: str) -> None:
    print(f"sparkops: warning: {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class HostSources:
    """Where the memory readings come from (fixture files in the tests)."""

    meminfo: Path = Path("/proc/meminfo")
    buddyinfo: Path = Path("/proc/buddyinfo")
    page_size: int = field(default_factory=lambda: os.sysconf("SC_PAGE_SIZE"))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@dataclass
class HostWatch:
    """One run's readings of this host, taken when due (`due`, on the monotonic clock so a
    wall-clock step neither stops nor floods them) and appended to the job folder (`record`).

    `serving_here`: whether the serving host's probes (kernel log, container) run; the
    sampler decides it from the serving record at the first reading unless set."""

    sources: HostSources = field(default_factory=HostSources)
    kernel_log: KernelLogReader = journal_kernel_log
    containers: ContainerReader = docker_containers
    interval: float = HOST_INTERVAL_S
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    host: str = field(default_factory=socket.gethostname)
    warn: Callable[[str], None] = _stderr
    serving_here: bool | None = None
    started: float = field(default=0.0)
    _last: float | None = field(default=None, init=False)
    _cursor: str | None = field(default=None, init=False)
    _said: set[str] = field(default_factory=set, init=False)
    _held: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if not self.started:
            self.started = self.wall()  # the run's start: driver errors are read from here

    def due(self) -> bool:
        return self._last is None or self.clock() - self._last >= self.interval

    def record(self, directory: Path, run: int, done: int | None) -> HostReading | None:
        """Take a reading and append it to DIR/host.jsonl; None when it could not be written
        (a gap, said once: the job goes on). An earlier job's host.jsonl is not this one's
        concern: `--restart` sets it aside with the job's other files (folder.JOB_FILES)."""
        self._last = self.clock()
        if self.serving_here is None:
            self.serving_here = deployed_here(directory)
        reading = self.read(directory, run, done)
        path = folder.JobDir(directory).host
        try:
            append_json(path, reading.to_json())
        except JobStopped as err:  # a full disk: the job's next write stops it, saying so
            self._held.setdefault("write", f"host watch: a reading was not written ({err})")
            return None
        except OSError as err:
            self._say_once("write", f"host watch: a reading was not written ({err})")
            return None
        return reading

    def say_held(self) -> None:
        """Say the gaps held back: a reading lost to a full disk is said only when the job
        went on to finish (the disk had room again). A job that stopped on that disk has said
        it in its one line, and a second line about the same disk is noise."""
        for key, text in self._held.items():
            self._say_once(key, text)
        self._held.clear()

    def read(self, directory: Path, run: int, done: int | None) -> HostReading:
        """One reading of the host now (nothing written)."""
        mem = meminfo_bytes(_read(self.sources.meminfo) or "")
        buddy = buddy_free(_read(self.sources.buddyinfo) or "")
        unknown: dict[str, str] = {}
        if not mem:
            unknown["memory"] = f"{self.sources.meminfo} could not be read"
        if not buddy:
            unknown["fragmentation"] = f"{self.sources.buddyinfo} could not be read"
        try:
            disk: int | None = shutil.disk_usage(directory).free
        except OSError as err:
            disk, unknown["disk"] = None, str(err)
        nvrm, containers = None, None
        if self.serving_here:
            nvrm = self._driver_errors(unknown)
            containers = self._containers(unknown)
        said = {k: v for k, v in unknown.items() if k not in self._said}
        if said and self.serving_here:
            self.warn(
                "host watch: unknown while this run lasts: "
                + "; ".join(f"{k} ({v})" for k, v in said.items())
            )
        self._said.update(said)
        return HostReading(
            round(self.wall(), 3),
            run,
            self.host,
            done,
            mem.get("MemAvailable"),
            mem.get("MemFree"),
            free_bytes(buddy, self.sources.page_size, HIGH_ORDER_MIB) if buddy else None,
            disk,
            nvrm,
            containers,
            said,
        )

    def _driver_errors(self, unknown: dict[str, str]) -> dict[str, int] | None:
        try:
            text, self._cursor = self.kernel_log(self.started, self._cursor)
        except Unreadable as err:
            unknown["kernel log"] = str(err)
            return None
        return driver_errors(text).counts()

    def _containers(self, unknown: dict[str, str]) -> dict[str, dict[str, Any]] | None:
        try:
            found = self.containers()
        except Unreadable as err:
            unknown["container restarts"] = str(err)
            return None
        if not found:  # Docker answered, and runs no serving stack here: nothing to count
            unknown["container restarts"] = (
                f"Docker lists no container labelled {VLLM_SERVICE_LABEL}"
            )
            return None
        return found

    def _say_once(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.warn(text)


def deployed_here(directory: Path) -> bool:
    """Whether the job runs on the Spark that serves it: its serving record holds the deploy's
    stack record (`--stack-record`, which batch.yml passes on the Spark), not a local server's
    nor none."""
    stack = None
    for line in serving_lines.serving_lines(directory / folder.SERVING):
        if isinstance(line, serving_lines.ServingStart):
            stack = line.stack
    return isinstance(stack, dict) and "profile" in stack and not stack.get("local")
