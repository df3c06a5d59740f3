#!/usr/bin/env python3
"""sparkops-load-guard: the memory guard through the model load, on the Spark itself.

GB10 hosts stop whole under unified-memory pressure (`NVRM: ... NV_ERR_NO_MEMORY
(_memdescAllocInternal)`, no OOM kill, a power cycle the only way out:
NVIDIA/open-gpu-kernel-modules#1358). One fleet stopped its hangs with a guard that, from
launch until vLLM reported ready, dropped the page cache and compacted memory whenever MemFree
fell below 8 GiB. memory-guard.sh checks once, right before vLLM starts; the load itself,
where CUDA takes tens of GiB while the weights stream through the page cache, is this
script's: every `interval_s` it reads MemFree, and below the profile's bar
(`load_guard_memfree_gib`) it runs `sync`, writes 3 to /proc/sys/vm/drop_caches and 1 to
/proc/sys/vm/compact_memory, and logs one line saying so. It stops when vLLM's /health
answers 200 (a worker, which serves none, when the deadline passes), at the deadline, or when
the kernel refuses the writes (a container: said once).

Started by the serving unit (ExecStartPost, as a transient unit `<project>-load-guard` so it
does not hold the unit's start) and, where systemd does not run, by the deploy's start tasks;
its lines go to the journal (`journalctl -u <project>-load-guard`) or the deploy's output.

Its settings are the rendered load-guard.json beside it (sparkops.render.templates: the bar,
vLLM's health URL, the deadline); every path is a setting, so the tests run it on fixture
/proc files. Standard library only: it runs on the host's python3, where the sparkops package
need not be installed. Exit 0 whatever it found (it guards, it never stops a start); 2 for a
settings file it cannot use.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

NAME = "sparkops-load-guard"
CONFIG = "load-guard.json"
GIB = 1 << 30
MEMFREE = re.compile(r"^MemFree:\s+(\d+)\s*kB\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Settings:
    """load-guard.json: the bar (bytes of MemFree), where vLLM says it is ready ("" for a
    worker: none), how long to guard at most, and the host files it reads and writes."""

    memfree_bar_bytes: int
    health_url: str
    deadline_s: float
    interval_s: float = 2.0
    # at most one drop and compaction this often: each takes seconds on a 128 GB host
    cooldown_s: float = 10.0
    profile: str = ""
    meminfo: str = "/proc/meminfo"
    drop_caches: str = "/proc/sys/vm/drop_caches"
    compact_memory: str = "/proc/sys/vm/compact_memory"

    @classmethod
    def from_json(cls, obj: Any) -> Settings:
        if not isinstance(obj, dict):
            raise ValueError("expected a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)}")
        settings = cls(**obj)
        if settings.memfree_bar_bytes < 0 or settings.deadline_s < 0 or settings.interval_s <= 0:
            raise ValueError("memfree_bar_bytes and deadline_s must be >= 0, interval_s > 0")
        return settings


def memfree_bytes(meminfo: str) -> int | None:
    """MemFree from the text of /proc/meminfo (None when it has none)."""
    match = MEMFREE.search(meminfo)
    return int(match.group(1)) * 1024 if match else None


def gib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / GIB:.1f} GiB"


def read_memfree(path: str) -> int | None:
    try:
        return memfree_bytes(Path(path).read_text(encoding="utf-8"))
    except OSError:
        return None


def drop_and_compact(settings: Settings, sync: Callable[[], None] = os.sync) -> str:
    """Drop the page cache and compact memory; "" when done, else why not (one phrase)."""
    sync()
    for path, value in ((settings.drop_caches, "3"), (settings.compact_memory, "1")):
        try:
            with open(path, "w", encoding="ascii") as handle:
                handle.write(value)
        except OSError as err:
            return f"cannot write {path} ({err.strerror or err})"
    return ""


def health_answers(url: str, timeout: float = 2.0) -> bool:
    """vLLM's /health answered 200 (it answers only once the engine is up)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return int(answer.status) == 200
    except (OSError, ValueError, urllib.error.URLError):
        return False


@dataclass
class Guard:
    """One guard run: its settings, and each outside effect injectable (the tests pass a fake
    clock and sleep, fixture files, and a readiness answer)."""

    settings: Settings
    ready: Callable[[], bool]
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    say: Callable[[str], None] = print
    act: Callable[[Settings], str] = drop_and_compact

    def run(self) -> int:
        """Guard until vLLM is ready or the deadline passes; returns how often it acted."""
        s = self.settings
        start = self.clock()
        who = f" ({s.profile})" if s.profile else ""
        until = f"until {s.health_url} answers" if s.health_url else "for the model load"
        self.say(
            f"{NAME}{who}: guarding {until}, at most {s.deadline_s:.0f} s: below MemFree "
            f"{gib(s.memfree_bar_bytes)} it drops the page cache and compacts memory"
        )
        acted, last = 0, float("-inf")
        while True:
            now = self.clock() - start
            if s.health_url and self.ready():
                self.say(f"{NAME}: vLLM is ready after {now:.0f} s; {_times(acted)}: done")
                return acted
            if now >= s.deadline_s:
                self.say(
                    f"{NAME}: {s.deadline_s:.0f} s passed"
                    + (" and vLLM is not ready" if s.health_url else "")
                    + f"; {_times(acted)}: stopping"
                )
                return acted
            free = read_memfree(s.meminfo)
            if free is not None and free < s.memfree_bar_bytes and now - last >= s.cooldown_s:
                last = now
                failed = self.act(s)
                if failed:
                    self.say(
                        f"{NAME}: MemFree {gib(free)} is below {gib(s.memfree_bar_bytes)} at "
                        f"{now:.0f} s, but {failed}: stopping (run it as root on the host)"
                    )
                    return acted
                acted += 1
                self.say(
                    f"{NAME}: MemFree {gib(free)} was below {gib(s.memfree_bar_bytes)} at "
                    f"{now:.0f} s: dropped the page cache and compacted memory, MemFree now "
                    f"{gib(read_memfree(s.meminfo))}"
                )
            self.sleep(s.interval_s)


def _times(n: int) -> str:
    return "dropped and compacted " + ("once" if n == 1 else f"{n} times")


def rendered_settings(stack: Any) -> dict[str, Any] | None:
    """load-guard.json for one host's stack (a sparkops.render HostStack, read by attribute
    so this file imports nothing of the kit); None where no guard runs: the inventory's
    memory guard off (vllm_serving_memory_guard), or the profile's bar 0 (vLLM-CPU).

    A worker (pipeline parallel, not the head) serves no /health of its own: it guards for
    the deadline, the deploy's wait for vLLM."""
    serving, profile = stack.serving, stack.profile
    bar_gib = profile.load_guard_memfree_gib or 0.0
    if not serving.memory_guard or bar_gib <= 0:
        return None
    return {
        "memfree_bar_bytes": int(bar_gib * GIB),
        "health_url": "" if stack.role == "worker" else stack.vllm["health_url"],
        "deadline_s": float(serving.ready_timeout),
        "profile": profile.name,
        "meminfo": serving.memory_meminfo_path,
    }


def load_settings(path: Path) -> Settings:
    return Settings.from_json(json.loads(path.read_text(encoding="utf-8")))


def main(argv: Sequence[str] | None = None) -> int:
    """`load-guard.py [SETTINGS]`: SETTINGS defaults to load-guard.json beside this file."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = Path(args[0]) if args else Path(__file__).resolve().with_name(CONFIG)
    try:
        settings = load_settings(path)
    except (OSError, ValueError, TypeError) as err:
        print(
            f"{NAME}: cannot use {path}: {err}; fix: redeploy (deploy.yml renders it)",
            file=sys.stderr,
        )
        return 2
    if settings.memfree_bar_bytes <= 0:
        print(f"{NAME}: off (the profile's load_guard_memfree_gib is 0)")
        return 0
    Guard(settings, lambda: health_answers(settings.health_url), say=_flushed).run()
    return 0


def _flushed(text: str) -> None:
    print(text, flush=True)  # the journal sees each line as it happens


if __name__ == "__main__":
    sys.exit(main())
