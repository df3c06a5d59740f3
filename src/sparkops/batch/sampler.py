"""While the job runs: a /metrics sample of every endpoint on a clock, and what it feeds.

Each sample goes to timeline.jsonl (with the client's own CPU time), into the live hit
rate the progress line shows, into the stall watch (do the endpoint's counters move?), and
into the serving watch's drift check (is the same server behind the endpoint?). On its own,
slower clock it takes the host's readings (batch/host_watch.py: memory, fragmentation, the
GPU driver's errors, disk, the serving container's restarts) into host.jsonl. Why its own
module: it runs beside the engine on the side client and decides nothing about records; a
sample that fails is a gap in the timeline, never a failed job.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from sparkops import openai_http
from sparkops.batch.endpoints import EndpointPool
from sparkops.batch.fate import Stats
from sparkops.batch.hooks import RunHooks
from sparkops.batch.host_watch import HostWatch
from sparkops.batch.serving import ServingWatch
from sparkops.jobdir import lines
from sparkops.jobdir.run import JobRun
from sparkops.metrics.timeline import LiveHitRate
from sparkops.openai_http import ServerClient


@dataclass(frozen=True)
class Sampler:
    """Samples every endpoint's /metrics for one run, on the side client.

    hooks: the run's (the progress line is refreshed there between samples); watch: the
    serving watch each sample's identity check goes to (None: no drift); live: the running
    hit rate the progress line shows; host: the run's host watch (None: no host readings)."""

    side: ServerClient
    pool: EndpointPool
    job: JobRun
    stats: Stats
    hooks: RunHooks
    watch: ServingWatch | None = None
    live: LiveHitRate = field(default_factory=LiveHitRate, init=False)
    host: HostWatch | None = field(default_factory=HostWatch)

    async def once(self) -> None:
        """One /metrics sample of every backend, appended to timeline.jsonl; then each
        endpoint's identity is checked against the serving record (drift)."""
        now = time.time()
        stats = self.stats
        for ep in self.pool.endpoints:
            text = await self.side.get_text(ep.metrics_url)
            values = _values(text)
            sample = lines.TimelineSample(
                now,
                self.job.number,
                ep.name,
                values,
                stats.done + stats.errors,
                stats.in_flight,
                time.process_time(),  # the client's own CPU (metrics/bottleneck.py)
            )
            self.job.sample(sample)
            self.live.add(ep.base, values)
            self.pool.observe(ep, values)  # the stall watch (the pool's clock): counters move?
            if self.watch is not None:
                await self.watch.check(ep, text if values else None)
        stats.hit_rate = self.live.rate

    async def loop(self, interval: float) -> None:
        """Sample on a clock (constant memory: samples go to disk, the hit rate is a running
        sum), the progress line refreshed every half second between."""
        last = float("-inf")
        while True:
            if time.monotonic() - last >= interval:  # a wall-clock step must not stop sampling
                last = time.monotonic()
                await self.once()
            await self.read_host()
            self.hooks.refresh()
            await asyncio.sleep(0.5)

    async def read_host(self, final: bool = False) -> None:
        """A reading of the host when one is due (host.jsonl), off the event loop: its probes
        run commands that may take a moment. `final`: the run's end, read whether due or not,
        so a run shorter than the sampler's first turn still has the host as it ended."""
        if self.host is not None and (final or self.host.due()):
            job = self.job
            await asyncio.to_thread(self.host.record, job.directory, job.number, job.finished)
        if final and self.host is not None:
            self.host.say_held()


def _values(text: str | None) -> dict[str, float]:
    """Timeline values of a /metrics page; a page that does not parse counts as a failed scrape."""
    if not text:
        return {}
    try:
        return openai_http.metric_values(text)
    except ValueError:
        return {}
