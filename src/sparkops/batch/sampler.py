"""While the job runs: a /metrics sample of every endpoint on a clock, and what it feeds.

Each sample goes to timeline.jsonl (with the client's own CPU time), into the live hit
rate the progress line shows, into the stall watch (do the endpoint's counters move?), and
into the serving record's drift check (is the same server behind the endpoint?). Why its
own module: it runs beside the engine on the side session and decides nothing about records;
a sample that fails is a gap in the timeline, never a failed job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from sparkops import openai_http
from sparkops.batch import serving
from sparkops.batch.endpoints import Endpoint, EndpointPool
from sparkops.batch.engine import Engine
from sparkops.batch.fate import Stats
from sparkops.batch.progress import ProgressView
from sparkops.batch.stop_rules import Stop
from sparkops.jobdir import lines
from sparkops.jobdir.run import JobRun
from sparkops.metrics.timeline import LiveHitRate


@dataclass
class Drift:
    """Re-checks each endpoint's identity on the metrics samples (batch/serving.py)."""

    log: serving.ServingLog
    engine: Engine
    view: ProgressView
    job: JobRun
    strict: bool

    async def check(
        self,
        side: aiohttp.ClientSession,
        ep: Endpoint,
        headers: dict[str, str],
        metrics_text: str | None,
    ) -> None:
        try:
            ident = await serving.probe(side, ep.base, ep.metrics_url, headers, metrics_text)
        except openai_http.NoAnswer:
            return  # down or slow this time: the next sample (or its recovery) checks again
        changes = self.log.observe(self.job.number, ep.name, ident, self.job.finished)
        if not changes:
            return
        self.engine.serving = self.log.epoch
        self.view.say(serving.change_sentence(ep.name, changes, self.log.epoch))
        if self.strict:
            self.engine.stop(
                Stop("serving-changed", serving.strict_message(ep.name, changes, during=True))
            )


async def sample_once(
    side: aiohttp.ClientSession,
    pool: EndpointPool,
    headers: dict[str, str],
    job: JobRun,
    stats: Stats,
    live: LiveHitRate,
    drift: Drift | None = None,
) -> None:
    """One /metrics sample of every backend, appended to timeline.jsonl; then each
    endpoint's identity is checked against the serving record (drift)."""
    now = time.time()
    for ep in pool.endpoints:
        text = await openai_http.get_text(side, ep.metrics_url, headers)
        values = _values(text)
        sample = lines.TimelineSample(
            now,
            job.number,
            ep.name,
            values,
            stats.done + stats.errors,
            stats.in_flight,
            time.process_time(),  # the client's own CPU (metrics/bottleneck.py)
        )
        job.sample(sample)
        live.add(ep.base, values)
        pool.observe(ep, values)  # the stall watch (the pool's clock): do its counters move?
        if drift is not None:
            await drift.check(side, ep, headers, text if values else None)
    stats.hit_rate = live.rate


def _values(text: str | None) -> dict[str, float]:
    """Timeline values of a /metrics page; a page that does not parse counts as a failed scrape."""
    if not text:
        return {}
    try:
        return openai_http.metric_values(text)
    except ValueError:
        return {}


async def sample_loop(
    sample: Callable[[], Awaitable[None]], interval: float, view: ProgressView
) -> None:
    """Sample on a clock (constant memory: samples go to disk, the hit rate is a running sum)."""
    last = float("-inf")
    while True:
        if time.monotonic() - last >= interval:  # a wall-clock step must not stop sampling
            last = time.monotonic()
            await sample()
        view.update()
        await asyncio.sleep(0.5)
